"""Remembering across sessions through LlamaIndex: messages flushed into the working-memory block
are logged, and a later session's ``recall`` tool finds them."""

from __future__ import annotations

from typing import Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.memory.local_ai_memory import LocalWorkingMemoryBlock
from llama_index.tools.local_ai_memory import LocalMemoryToolSpec

from local_ai_memory import Memory

FACT = "The spare car key is in the blue tin on top of the fridge."


async def test_a_fact_flushed_in_session_one_is_recalled_in_session_five(memory: Memory, make_memory: Any) -> None:
    for n, words in enumerate([FACT, "Buy stamps.", "Book the dentist.", "Return the library books."], start=1):
        block = LocalWorkingMemoryBlock(memory=memory, user_id="alice", session_id=f"s{n}")
        chat = make_memory(session_id=f"s{n}", memory_blocks=[block], token_limit=50, token_flush_size=10)
        await chat.aput_messages(
            [ChatMessage(role=MessageRole.USER, content=words), ChatMessage(role=MessageRole.ASSISTANT, content="OK.")]
        )
        await chat.aput_messages([ChatMessage(role=MessageRole.USER, content="x " * 60)])  # pushes the turn out
    assert ("s1", "conversations") in memory.knowledge.notes("alice", category="conversations")

    spec = LocalMemoryToolSpec(memory=memory, user_id="alice", session_id="s5", recall=True)
    tools = {tool.metadata.name: tool for tool in spec.to_tool_list()}
    assert set(tools) == {"load_tool_result", "search_tool_result", "recall"}
    answer = await tools["recall"].acall(query="where is the spare car key?")
    assert FACT in str(answer)
    assert "[conversation s1" in str(answer)
