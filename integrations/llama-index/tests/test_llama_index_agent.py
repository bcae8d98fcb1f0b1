"""FunctionAgent runs with the real llama-index-core workflow: large tool outputs are stored and
paged back, and L1 working memory is written and served to a restarted agent."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from llama_index.core.agent.workflow import AgentWorkflow, FunctionAgent
from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.tools import FunctionTool
from llama_index.core.workflow import Context
from llama_index.memory.local_ai_memory import LocalWorkingMemoryBlock
from llama_index.tools.local_ai_memory import ExternalizingTool, LocalMemoryToolSpec
from workflows.context.state_store import UnserializableKeyWarning

from local_ai_memory import Memory, Session

PAGE = 3000

# Building a workflow agent makes the installed `workflows` package call inspect.getmembers() on a
# pydantic model, which touches pydantic's deprecated attributes: upstream noise, not ours.
pytestmark = [
    pytest.mark.filterwarnings("ignore:The `__fields__` attribute is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:The `__fields_set__` attribute is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:Accessing the 'model_computed_fields' attribute:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:Accessing the 'model_fields' attribute:DeprecationWarning"),
]


def _reference_of(text: str) -> dict[str, Any]:
    reference = json.loads(text)
    assert set(reference) == {"result_id", "summary", "size", "chars", "lines", "pages"}
    return reference


def _read_source_tool(big_text: str) -> FunctionTool:
    def read_source() -> str:
        """Return the whole source tree as one text."""
        return big_text

    return FunctionTool.from_defaults(fn=read_source)


def _paging_script(tool_call: Callable[..., ChatMessage], last_tool_output: Callable[[list[ChatMessage]], str]) -> list:
    """Call read_source, then page the stored result twice, then answer."""

    def first(messages: list[ChatMessage]) -> ChatMessage:
        return tool_call("read_source", "call-1")

    def second(messages: list[ChatMessage]) -> ChatMessage:
        reference = _reference_of(last_tool_output(messages))
        return tool_call("load_tool_result", "call-2", result_id=reference["result_id"], offset=0, limit=PAGE)

    def third(messages: list[ChatMessage]) -> ChatMessage:
        header = last_tool_output(messages).splitlines()[0]
        result_id = header.split()[2]
        return tool_call("load_tool_result", "call-3", result_id=result_id, offset=PAGE, limit=PAGE)

    def answer(messages: list[ChatMessage]) -> ChatMessage:
        return ChatMessage(role=MessageRole.ASSISTANT, content="I decided to read the sources page by page.")

    return [first, second, third, answer]


def _tools(memory: Memory, big_text: str) -> list[Any]:
    spec = LocalMemoryToolSpec(memory=memory, user_id="alice", session_id="s1")
    return [*spec.wrap_tools([_read_source_tool(big_text)]), *spec.to_tool_list()]


def _check_paging(script: Any, big_text: str) -> None:
    assert len(script.calls) == 4
    # What the model saw after read_source: the JSON reference, never the 200 KB.
    after_read = script.calls[1]
    tool_text = [m.content or "" for m in after_read if m.role == MessageRole.TOOL][-1]
    reference = _reference_of(tool_text)
    assert reference["size"] == len(big_text.encode("utf-8"))
    assert reference["summary"] == big_text[:1000] + "…"
    # The two pages it asked for are the stored text, exactly.
    page_one = [m.content or "" for m in script.calls[2] if m.role == MessageRole.TOOL][-1]
    page_two = [m.content or "" for m in script.calls[3] if m.role == MessageRole.TOOL][-1]
    assert page_one.split("\n", 1)[1] == big_text[:PAGE]
    assert page_two.split("\n", 1)[1] == big_text[PAGE : 2 * PAGE]
    assert f"offset={2 * PAGE}" in page_two.splitlines()[0]
    # No message the model ever received carries the whole output.
    for call in script.calls:
        assert all(len(m.content or "") < 10_000 for m in call)


async def test_function_agent_externalizes_and_pages_back(
    memory: Memory,
    session: Session,
    big_text: str,
    scripted_llm: Any,
    tool_call: Any,
    last_tool_output: Any,
    make_memory: Any,
) -> None:
    llm, script = scripted_llm(_paging_script(tool_call, last_tool_output))
    block = LocalWorkingMemoryBlock(memory=memory, user_id="alice", session_id="s1")
    chat = make_memory(session_id="s1", memory_blocks=[block], token_limit=30_000)
    agent = FunctionAgent(tools=_tools(memory, big_text), llm=llm, streaming=False)

    response = await agent.run("Read the sources and tell me what you decided.", memory=chat)

    assert "page by page" in str(response)
    _check_paging(script, big_text)
    stored = [m.content or "" for m in await chat.aget_all()]
    assert all(len(text) < 10_000 for text in stored)
    assert session.list_tool_results()

    result = await block.asummarize_memory(chat)
    assert result is not None
    assert result.ok
    working = session.get_working_memory()
    assert "# Current Goal" in working
    assert "* read_source:" in working  # tool results are named after their calls
    assert "Read the sources" in working
    # Summarizing the same memory again adds nothing new.
    assert await block.asummarize_memory(chat) is None


async def test_streaming_agent_workflow_same_behaviour(
    memory: Memory,
    session: Session,
    big_text: str,
    scripted_llm: Any,
    tool_call: Any,
    last_tool_output: Any,
    make_memory: Any,
) -> None:
    llm, script = scripted_llm(_paging_script(tool_call, last_tool_output))
    agent = FunctionAgent(name="reader", description="Reads sources.", tools=_tools(memory, big_text), llm=llm)
    workflow = AgentWorkflow(agents=[agent], root_agent="reader")

    handler = workflow.run(user_msg="Read the sources.")
    async for _ in handler.stream_events():
        pass
    await handler

    _check_paging(script, big_text)


async def test_flushed_messages_reach_l1_and_restarted_agent_sees_it(
    memory: Memory,
    session: Session,
    big_text: str,
    scripted_llm: Any,
    tool_call: Any,
    last_tool_output: Any,
    make_memory: Any,
) -> None:
    def reply(messages: list[ChatMessage]) -> ChatMessage:
        return ChatMessage(role=MessageRole.ASSISTANT, content="Noted.")

    llm, _ = scripted_llm([*_paging_script(tool_call, last_tool_output), reply])
    block = LocalWorkingMemoryBlock(memory=memory, user_id="alice", session_id="s1")
    # A small token limit makes Memory flush the first turn into the block when the second one arrives.
    chat = make_memory(session_id="s1", memory_blocks=[block], token_limit=1000, token_flush_size=200)
    agent = FunctionAgent(tools=_tools(memory, big_text), llm=llm, streaming=False)
    await agent.run("Read the sources and keep notes.", memory=chat)
    assert session.get_working_memory() == ""
    handler = agent.run("Thanks, continue.", memory=chat)
    await handler

    working = session.get_working_memory()
    assert "Read the sources and keep notes." in working, working
    # LlamaIndex cannot serialize the memory: a restored Context comes back without it.
    with pytest.warns(UnserializableKeyWarning, match="memory"):
        saved = handler.ctx.to_dict()

    # A new process would build everything again: a new local_ai_memory.Memory, new block, new chat Memory.
    restarted = Memory(memory.config)
    new_block = LocalWorkingMemoryBlock(memory=restarted, user_id="alice", session_id="s1")
    new_chat = make_memory(session_id="fresh", memory_blocks=[new_block])
    seen: list[list[ChatMessage]] = []

    def capture(messages: list[ChatMessage]) -> ChatMessage:
        seen.append(messages)
        return ChatMessage(role=MessageRole.ASSISTANT, content="Resuming.")

    new_llm, _ = scripted_llm([capture])
    new_agent = FunctionAgent(tools=_tools(restarted, big_text), llm=new_llm, streaming=False)
    restored = Context.from_dict(new_agent, saved)
    await new_agent.run("Where were we?", memory=new_chat, ctx=restored)
    system = [m.content or "" for m in seen[0] if m.role == MessageRole.SYSTEM]
    assert system
    assert "Read the sources and keep notes." in system[0]
    assert "<working_memory>" in system[0]
    restarted.close()


def test_sync_tools_outside_an_agent(memory: Memory, big_text: str) -> None:
    spec = LocalMemoryToolSpec(memory, user_id="alice", session_id="s1")
    [wrapped] = spec.wrap_tools([_read_source_tool(big_text)])
    assert isinstance(wrapped, ExternalizingTool)
    reference = _reference_of(wrapped.call().content)
    load, search = spec.to_tool_list()
    assert (load.metadata.name, search.metadata.name) == ("load_tool_result", "search_tool_result")
    params = load.metadata.get_parameters_dict()["properties"]
    assert set(params) == {"result_id", "offset", "limit", "line", "lines"}
    page = load.call(result_id=reference["result_id"], offset=10, limit=50).content
    assert page.split("\n", 1)[1] == big_text[10:60]
    # A small output stays inline, byte for byte.
    small = FunctionTool.from_defaults(fn=lambda: "short answer", name="small", description="Small.")
    assert spec.wrap_tools([small])[0].call().content == "short answer"
