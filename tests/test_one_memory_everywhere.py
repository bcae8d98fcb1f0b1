"""One ``Memory`` on custom in-process backends, handed to every adapter of both frameworks.

The memory is built the way a third party plugs its own storage in,
``Memory(config, runtime=..., knowledge=...)``. A LangChain agent (middleware, saver, store,
retriever, tools), a chain with the callback handler, the chat history, the LlamaIndex
retriever, tool spec and memory block all run on it: what one adapter writes, the others read
at once, and no file appears anywhere (not in the configured folder, the working directory or
``HOME``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langchain_core.tools import tool
from langchain_local_ai_memory import (
    LocalMemoryCallbackHandler,
    LocalMemoryChatMessageHistory,
    LocalMemoryMiddleware,
    LocalMemoryRetriever,
    LocalMemoryStore,
    create_memory_tools,
)
from llama_index.core.base.llms.types import ChatMessage
from llama_index.memory.local_ai_memory import LocalWorkingMemoryBlock
from llama_index.retrievers.local_ai_memory import LocalMemoryRetriever as LlamaIndexRetriever
from llama_index.tools.local_ai_memory import LocalMemoryToolSpec

from local_ai_memory import Memory, MemoryConfig
from local_ai_memory.backends import InMemoryKnowledgeBackend, InMemoryRuntimeBackend

LOG = "".join(f"line {n}: INFO all good\n" for n in range(800)) + "line 800: ERROR disk full on /var\n"


class ToolCallingFake(GenericFakeChatModel):
    """LangChain's own fake chat model, able to be bound to tools (it answers from its script)."""

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ToolCallingFake:
        return self


def script() -> ToolCallingFake:
    """Read the log, page the stored output once, then answer."""

    def replies() -> Any:
        yield AIMessage(content="", tool_calls=[{"name": "read_log", "args": {}, "id": "c1"}])
        while True:
            yield AIMessage(content="The log ends with a disk-full error.")

    return ToolCallingFake(messages=replies())


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty HOME and working directory; returns the (never created) configured data folder."""
    for name in [name for name in os.environ if name.startswith("LOCAL_AI_MEMORY_")]:
        monkeypatch.delenv(name)
    (tmp_path / "home").mkdir()
    (tmp_path / "work").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path / "work")
    return tmp_path / "data"


async def test_every_adapter_of_both_frameworks_shares_one_custom_memory(isolated: Path) -> None:
    config = MemoryConfig(runtime_data_dir=isolated, fsync=False)
    memory = Memory(config, runtime=InMemoryRuntimeBackend(), knowledge=InMemoryKnowledgeBackend())

    @tool
    def read_log() -> str:
        """Return the application log."""
        return LOG

    # LangChain / LangGraph: an agent with the middleware, the saver, the store and the tools.
    store = LocalMemoryStore(memory)
    store.put(("alice",), "disks", {"content": "The /var disk of host kestrel fills up on Mondays."})
    retriever = LocalMemoryRetriever(memory=memory, user_id="alice")
    middleware = LocalMemoryMiddleware(memory=memory, retriever=retriever)
    saver = middleware.checkpointer("alice")
    agent = create_agent(
        script(),
        tools=[read_log, *create_memory_tools(retriever=retriever)[1:]],
        middleware=[middleware],
        checkpointer=saver,
        store=store,
    )
    thread: RunnableConfig = {"configurable": {"thread_id": "s1"}}
    result = agent.invoke(
        {"messages": [HumanMessage("Goal: find out why host kestrel fails.")]},
        thread,
        context={"user_id": "alice", "session_id": "s1"},
    )
    assert result["messages"][-1].text == "The log ends with a disk-full error."
    [stored] = [m for m in result["messages"] if isinstance(m, ToolMessage) and m.name == "read_log"]
    reference = json.loads(str(stored.content))
    assert saver.memory is memory
    assert agent.get_state(thread).values["messages"][-1].text == "The log ends with a disk-full error."

    # A chain with the callback handler, and the chat history, on other sessions of the memory.
    handler = LocalMemoryCallbackHandler("alice", "s2", memory=memory)
    RunnableLambda(lambda question: f"Answer: {question}").invoke("what fills /var?", {"callbacks": [handler]})
    history = LocalMemoryChatMessageHistory("alice", "s3", memory=memory)
    history.add_messages([HumanMessage("hi"), AIMessage("hello")])

    # LlamaIndex on the very same memory: what LangChain stored is there at once.
    spec = LocalMemoryToolSpec(memory=memory, user_id="alice", session_id="s1", search=True)
    block = LocalWorkingMemoryBlock(memory=memory, user_id="alice", session_id="s1")
    li_retriever = LlamaIndexRetriever(memory=memory, user_id="alice")
    page = spec.load_tool_result(reference["result_id"], offset=0, limit=40)
    assert "line 0: INFO all good" in page
    assert [n.node.metadata["filename"] for n in li_retriever.retrieve("kestrel disk Mondays")] == [
        doc.metadata["filename"] for doc in retriever.invoke("kestrel disk Mondays")
    ]
    assert "fills up on Mondays" in spec.search_memory("kestrel disk")
    assert "find out why host kestrel fails" in await block.aget()  # the middleware's L1, through the block
    merged = await block.asummarize_messages([ChatMessage(role="user", content="Also rotate the kestrel keys.")])
    assert merged is not None
    assert "Also rotate the kestrel keys." in memory.session("alice", "s1").get_working_memory()

    # Back in LangChain: the chain's L1 and the history's log are the memory's.
    assert "what fills /var?" in memory.session("alice", "s2").get_working_memory()
    assert [m.content for m in LocalMemoryChatMessageHistory("alice", "s3", memory=memory).messages[-2:]] == [
        "hi",
        "hello",
    ]
    assert {info.scope.session_id for info in memory.sessions()} >= {"s1", "s2", "s3"}

    # Nothing touched a disk: not the configured folder, the working directory or HOME.
    assert memory.root is None
    assert not isolated.exists()
    assert list(Path.cwd().iterdir()) == []
    assert list(Path(os.environ["HOME"]).iterdir()) == []
