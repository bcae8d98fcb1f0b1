"""One ``Memory`` for every adapter: the object given is the object used (one index, one set of
caches), ``config=`` only builds one, both at once is refused, and a memory kept in the process
keeps everything there (no folder appears, in the working directory or in ``HOME``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langchain_core.tools import tool
from langchain_local_ai_memory import (
    CheckpointMiddleware,
    KnowledgeSearchTool,
    LoadToolResultTool,
    LocalMemoryCallbackHandler,
    LocalMemoryChatMessageHistory,
    LocalMemoryMiddleware,
    LocalMemoryRetriever,
    LocalMemorySaver,
    LocalMemoryStore,
    MemoryPromptMiddleware,
    SearchToolResultTool,
    ToolResultMiddleware,
    WorkingMemoryMiddleware,
    create_memory_tools,
)
from lc_fakes import ScriptedChatModel, TextLLM, add_notes

from local_ai_memory import InvalidInputError, Memory, MemoryConfig

BUILDERS: dict[str, Callable[..., Any]] = {
    "LocalMemoryMiddleware": lambda **memory: LocalMemoryMiddleware("alice", "s1", **memory),
    "ToolResultMiddleware": lambda **memory: ToolResultMiddleware("alice", "s1", **memory),
    "MemoryPromptMiddleware": lambda **memory: MemoryPromptMiddleware("alice", "s1", **memory),
    "CheckpointMiddleware": lambda **memory: CheckpointMiddleware("alice", "s1", **memory),
    "WorkingMemoryMiddleware": lambda **memory: WorkingMemoryMiddleware("alice", "s1", **memory),
    "LocalMemoryCallbackHandler": lambda **memory: LocalMemoryCallbackHandler("alice", "s1", **memory),
    "LocalMemoryChatMessageHistory": lambda **memory: LocalMemoryChatMessageHistory("alice", "s1", **memory),
    "LoadToolResultTool": lambda **memory: LoadToolResultTool(user_id="alice", session_id="s1", **memory),
    "KnowledgeSearchTool": lambda **memory: KnowledgeSearchTool(user_id="alice", **memory),
    "create_memory_tools": lambda **memory: create_memory_tools("alice", "s1", **memory)[0],
    "LocalMemoryRetriever": lambda **memory: LocalMemoryRetriever(user_id="alice", **memory),
    "LocalMemorySaver": lambda **memory: LocalMemorySaver(user_id="alice", **memory),
    "LocalMemoryStore": LocalMemoryStore,
}


@pytest.mark.parametrize("name", BUILDERS)
def test_every_adapter_uses_the_memory_it_is_given_and_refuses_a_config_beside_it(name: str, tmp_path: Path) -> None:
    build = BUILDERS[name]
    memory = Memory.in_memory()
    assert build(memory=memory).memory is memory
    with pytest.raises(InvalidInputError, match="give memory= or config=, not both"):
        build(memory=memory, config=MemoryConfig(runtime_data_dir=tmp_path))
    with pytest.raises(InvalidInputError, match=r"pass config=\.\.\. or Memory"):
        build(memory=MemoryConfig(runtime_data_dir=tmp_path))
    shortcut = build(config=MemoryConfig(runtime_data_dir=tmp_path / "shortcut", fsync=False)).memory
    assert isinstance(shortcut, Memory)
    assert shortcut.root == (tmp_path / "shortcut").resolve()


def test_the_middleware_hands_its_one_memory_to_its_parts_and_its_checkpointer(tmp_path: Path) -> None:
    for middleware in (
        LocalMemoryMiddleware("alice", "s1", memory=Memory.open(tmp_path / "given", fsync=False)),
        LocalMemoryMiddleware("alice", "s1", config=MemoryConfig(runtime_data_dir=tmp_path / "built", fsync=False)),
    ):
        assert [part.memory for part in middleware.parts()] == [middleware.memory] * 4
        assert all(part.memory is middleware.memory for part in middleware.parts())
        assert all(
            isinstance(t, (LoadToolResultTool, SearchToolResultTool)) and t.memory is middleware.memory
            for t in middleware.tools
        )
        saver = middleware.checkpointer()
        assert saver.memory is middleware.memory
        assert saver.user_id == "alice"


@pytest.mark.parametrize("kind", ["in-memory", "files"])
def test_a_note_put_through_the_store_is_found_by_a_retriever_of_the_same_memory(kind: str, tmp_path: Path) -> None:
    memory = Memory.in_memory() if kind == "in-memory" else Memory.open(tmp_path / "data", fsync=False)
    store = LocalMemoryStore(memory=memory)
    retriever = LocalMemoryRetriever(memory=memory, user_id="alice")
    search = KnowledgeSearchTool(retriever=retriever)
    assert store.knowledge is retriever.memory.knowledge  # one Knowledge: one index, one set of caches
    assert retriever.invoke("helix editor") == []  # searched (index built) before the note exists
    store.put(("alice",), "editor", {"content": "Alice edits in Helix, dark theme"})
    # No refresh, no flush: the retriever reads the index the store just wrote to.
    (doc,) = retriever.invoke("helix editor")
    assert doc.metadata["filename"] == "alice_editor.md"
    assert "Alice edits in Helix" in doc.page_content
    assert "## alice_editor.md" in search.invoke({"query": "helix editor"})
    if kind == "in-memory":  # another memory kept in the process is another world
        assert LocalMemoryRetriever(memory=Memory.in_memory(), user_id="alice").invoke("helix editor") == []


def test_knowledge_note_info_and_retrieve_with_a_per_call_selector() -> None:
    memory = add_notes(Memory.in_memory(llm=TextLLM('["alice_typing.md"]')))
    knowledge = memory.knowledge
    info = knowledge.note_info("alice", "json")
    assert info is not None
    assert info.name == "alice_json.md"
    assert info.size == len(knowledge.read_note("alice", "json").encode("utf-8"))
    assert knowledge.note_info("alice", "nothing") is None
    assert knowledge.note_info("alice", "json", category="elsewhere") is None
    picked = knowledge.retrieve_with("python", "alice", llm=TextLLM('["alice_venv.md"]'))
    assert [f.filename for f in picked.files] == ["alice_venv.md"]
    unpicked = knowledge.retrieve_with("python", "alice", llm=None, k=3)  # no Stage 2: Stage 1's order
    assert [f.stage for f in unpicked.files] == [1, 1, 1]
    assert [f.filename for f in knowledge.retrieve("python", "alice").files] == ["alice_typing.md"]  # the memory's


async def test_async_twins_of_the_knowledge_methods() -> None:
    knowledge = add_notes(Memory.in_memory()).knowledge
    assert await knowledge.anote_info("bob", "python") == knowledge.note_info("bob", "python")
    picked = await knowledge.aretrieve_with("python", "alice", llm=TextLLM('["alice_typing.md"]'))
    assert [f.filename for f in picked.files] == ["alice_typing.md"]


def test_the_memorys_llm_is_the_default_model_of_the_adapters() -> None:
    summary = "# Current Goal\nShip the parser\n"
    memory = add_notes(Memory.in_memory(llm=TextLLM('["alice_venv.md"]')))
    (doc,) = LocalMemoryRetriever(memory=memory, user_id="alice").invoke("python")
    assert (doc.metadata["filename"], doc.metadata["stage"]) == ("alice_venv.md", 2)
    writer = Memory.in_memory(llm=TextLLM(summary))
    model = ScriptedChatModel(script=[AIMessage(content="parser shipped")])
    create_agent(model, middleware=[WorkingMemoryMiddleware("alice", "s1", memory=writer)]).invoke(
        {"messages": [HumanMessage("Ship the parser")]}
    )
    assert writer.session("alice", "s1").get_working_memory().startswith(summary)


def test_adapters_on_an_in_memory_memory_touch_no_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An agent run with every adapter on ``Memory.in_memory()``: the run's memory is all there,
    and neither the working directory nor ``HOME`` (where the default data folder would be) gets a file."""
    for name in ("LOCAL_AI_MEMORY_DATA_DIR", "LOCAL_AI_MEMORY_DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)
    home, cwd = tmp_path / "home", tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(cwd)
    memory = add_notes(Memory.in_memory())
    store = LocalMemoryStore(memory)
    store.put(("alice",), "log", {"content": "the log holds INFO lines only"})

    @tool
    def read_log() -> str:
        """Return the application log."""
        return "INFO started\n" * 1_000

    def policy(messages: list[Any]) -> AIMessage:
        tools = [m for m in messages if isinstance(m, ToolMessage)]
        if not tools:
            return AIMessage(content="", tool_calls=[{"name": "read_log", "args": {}, "id": "c1"}])
        if tools[-1].name == "read_log":
            args = {"result_id": json.loads(str(tools[-1].content))["result_id"], "limit": 100}
            return AIMessage(content="", tool_calls=[{"name": "load_tool_result", "args": args, "id": "c2"}])
        return AIMessage(content="No errors.")

    retriever = LocalMemoryRetriever(memory=memory)
    middleware = LocalMemoryMiddleware(memory=memory, retriever=retriever)
    agent = create_agent(
        ScriptedChatModel(policy=policy),
        tools=[read_log, *create_memory_tools(retriever=retriever)[1:]],
        middleware=[middleware],
        checkpointer=middleware.checkpointer("alice"),
        store=store,
    )
    thread: RunnableConfig = {"configurable": {"thread_id": "s1"}}
    result = agent.invoke(
        {"messages": [HumanMessage("Any errors in the log?")]}, thread, context={"user_id": "alice", "session_id": "s1"}
    )
    assert result["messages"][-1].text == "No errors."
    handler = LocalMemoryCallbackHandler("alice", "s2", memory=memory)
    RunnableLambda(lambda question: f"Answer to: {question}").invoke("log?", config={"callbacks": [handler]})
    history = LocalMemoryChatMessageHistory("alice", "s3", memory=memory)
    history.add_messages([HumanMessage("hi"), AIMessage("hello")])

    session = memory.session("alice", "s1")
    assert len(session.list_tool_results()) == 1
    assert session.bookkeeping()["run_status"] == "completed"
    assert agent.get_state(thread).values["messages"][-1].text == "No errors."
    assert "# Current Goal\nlog?\n" in memory.session("alice", "s2").get_working_memory()
    assert [m.content for m in history.messages[1:]] == ["hi", "hello"]
    assert [item.key for item in store.search(("alice",), query="INFO log")] == ["log"]
    assert memory.root is None
    assert list(cwd.iterdir()) == []
    assert not home.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cwd"]
