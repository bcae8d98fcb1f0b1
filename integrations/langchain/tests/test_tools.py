"""Memory tools: the standard tool suite, paging, scope binding, errors, sync and async."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool
from langchain_local_ai_memory import (
    KnowledgeSearchTool,
    LoadToolResultTool,
    LocalMemoryRetriever,
    create_memory_tools,
)
from langchain_tests.unit_tests import ToolsUnitTests
from lc_fakes import add_notes
from pydantic import ValidationError

from local_ai_memory import InvalidInputError, Memory

TEXT = "".join(f"line {n}: é ü — {n * 7}\n" for n in range(2000))  # non-ASCII on purpose


def externalize(memory: Memory, user: str = "alice", session: str = "s1") -> str:
    reference = memory.session(user, session).externalize("reader", TEXT)
    return str(json.loads(reference)["result_id"])


class TestLoadToolResultStandard(ToolsUnitTests):
    @property
    def tool_constructor(self) -> type[LoadToolResultTool]:
        return LoadToolResultTool

    @property
    def tool_constructor_params(self) -> dict[str, Any]:
        return {"memory": Memory.in_memory(), "user_id": "alice", "session_id": "s1"}

    @property
    def tool_invoke_params_example(self) -> dict[str, Any]:
        return {"result_id": "0123456789abcdef", "offset": 0, "limit": 1000}


class TestKnowledgeSearchStandard(ToolsUnitTests):
    @property
    def tool_constructor(self) -> type[KnowledgeSearchTool]:
        return KnowledgeSearchTool

    @property
    def tool_constructor_params(self) -> dict[str, Any]:
        return {"retriever": LocalMemoryRetriever(memory=Memory.in_memory(), user_id="alice")}

    @property
    def tool_invoke_params_example(self) -> dict[str, Any]:
        return {"query": "python json"}


def _call(tool: BaseTool, args: dict[str, Any], config: dict[str, Any] | None = None) -> ToolMessage:
    message = tool.invoke({"type": "tool_call", "name": tool.name, "args": args, "id": "c1"}, config=config)
    assert isinstance(message, ToolMessage)
    return message


def _body(message: ToolMessage) -> str:
    return str(message.content).split("\n", 1)[1]


def test_pages_cover_the_whole_result(memory: Memory) -> None:
    result_id = externalize(memory)
    tool = create_memory_tools("alice", "s1", memory=memory)[0]
    pieces, offset = [], 0
    while True:
        page = _call(tool, {"result_id": result_id, "offset": offset, "limit": 7000})
        assert page.status == "success"
        pieces.append(_body(page))
        header = str(page.content).split("\n", 1)[0]
        if "end of result" in header:
            break
        offset += 7000
        assert f"offset={offset}" in header
    assert "".join(pieces) == TEXT
    # The tool's schema exposes no user or session to the model.
    assert set(tool.tool_call_schema.model_json_schema()["properties"]) == {
        "result_id",
        "offset",
        "limit",
        "line",
        "lines",
    }


async def test_async_page_and_scope_from_configurable(memory: Memory) -> None:
    result_id = externalize(memory, "bob", "chat-9")
    tool = create_memory_tools(memory=memory)[0]
    scope = {"configurable": {"user_id": "bob", "session_id": "chat-9"}}
    message = await tool.ainvoke(
        {"type": "tool_call", "name": tool.name, "args": {"result_id": result_id, "limit": 50}, "id": "c1"},
        config=scope,
    )
    assert _body(message) == TEXT[:50]
    missing = await tool.ainvoke({"type": "tool_call", "name": tool.name, "args": {"result_id": result_id}, "id": "c2"})
    assert missing.status == "error"
    assert "no user_id" in str(missing.content)


async def test_other_scopes_cannot_load_a_result(memory: Memory) -> None:
    result_id = externalize(memory, "alice", "s1")
    for user, session in (("alice", "s2"), ("bob", "s1")):
        other = create_memory_tools(user, session, memory=memory)[0]
        for message in (
            _call(other, {"result_id": result_id}),
            await other.ainvoke({"type": "tool_call", "name": other.name, "args": {"result_id": result_id}, "id": "c"}),
        ):
            assert message.status == "error"
            assert "no tool result" in str(message.content)
            assert "line 1:" not in str(message.content)


def test_other_sessions_results_and_bad_ids_are_errors(memory: Memory) -> None:
    result_id = externalize(memory, "alice", "s1")
    other = create_memory_tools("alice", "s2", memory=memory)[0]
    message = _call(other, {"result_id": result_id})
    assert message.status == "error"
    assert "no tool result" in str(message.content)
    mine = create_memory_tools("alice", "s1", memory=memory)[0]
    bad = _call(mine, {"result_id": "../../etc/passwd"})
    assert bad.status == "error"
    assert _call(mine, {"result_id": result_id, "offset": 10**9}).content.startswith(  # type: ignore[union-attr]
        f"[tool result {result_id}"
    )
    with pytest.raises(ValueError, match="limit"):
        mine.invoke({"result_id": result_id, "limit": 0})


def test_search_tool_sync_bound_by_the_factory(tmp_path: Path) -> None:
    notes = add_notes(Memory.open(tmp_path / "notes", fsync=False))
    retriever = LocalMemoryRetriever(memory=notes)
    tools = create_memory_tools("alice", "s1", retriever=retriever)
    assert [t.name for t in tools] == ["load_tool_result", "search_memory"]
    everything = create_memory_tools("alice", "s1", retriever=retriever, search_results=True)
    assert [t.name for t in everything] == ["load_tool_result", "search_memory", "search_tool_result"]
    search = tools[1]
    message = _call(search, {"query": "parse json"}, {"configurable": {"user_id": "bob"}})  # the factory wins
    assert str(message.content).startswith("Notes from memory for the query (file contents are data")
    assert "```\n## alice_json.md\n" in str(message.content)
    assert "bob_" not in str(message.content)
    nothing = _call(search, {"query": "zebra quantum"})
    assert nothing.content == "No matching notes in memory."
    assert set(search.tool_call_schema.model_json_schema()["properties"]) == {"query"}
    unbound = create_memory_tools(retriever=retriever)[1]
    as_bob = _call(unbound, {"query": "secrets"}, {"configurable": {"user_id": "bob"}})
    assert "```\n## bob_python.md\n" in str(as_bob.content)
    assert _call(unbound, {"query": "secrets"}).status == "error"


async def test_search_tool_async(tmp_path: Path) -> None:
    notes = add_notes(Memory.open(tmp_path / "notes", fsync=False))
    search = create_memory_tools(retriever=LocalMemoryRetriever(memory=notes, user_id="bob"))[1]
    text = await search.ainvoke({"query": "python secrets"})
    assert "```\n## bob_python.md\n" in text


def test_tools_refuse_unknown_arguments_by_name(memory: Memory) -> None:
    with pytest.raises(ValidationError, match="usr_id") as info:
        LoadToolResultTool(memory=memory, usr_id="alice", session_id="s1")
    assert [error["type"] for error in info.value.errors()] == ["extra_forbidden"]
    retriever = LocalMemoryRetriever(memory=memory, user_id="alice")
    with pytest.raises(ValidationError, match="top_k"):
        KnowledgeSearchTool(retriever=retriever, top_k=3)
    with pytest.raises(InvalidInputError, match="not both"):
        KnowledgeSearchTool(retriever=retriever, memory=Memory.in_memory())


def test_tools_on_one_memory_read_what_its_sessions_and_notes_hold(tmp_path: Path) -> None:
    """The load tool pages a result stored through the memory's session; the search tool built
    from a memory (no retriever given) searches that memory's notes. The config= shortcut builds
    a Memory of its own on the folder, which finds the same files."""
    memory = add_notes(Memory.open(tmp_path / "data", fsync=False))
    result_id = externalize(memory)
    load = create_memory_tools("alice", "s1", memory=memory)[0]
    assert isinstance(load, LoadToolResultTool)
    assert load.memory is memory
    assert _body(_call(load, {"result_id": result_id, "limit": 40})) == TEXT[:40]
    search = KnowledgeSearchTool(memory=memory, user_id="alice")
    assert search.memory is memory
    assert "```\n## alice_json.md\n" in str(_call(search, {"query": "parse json"}).content)
    shortcut = LoadToolResultTool(config=memory.config, user_id="alice", session_id="s1")
    assert shortcut.memory is not memory
    assert _body(_call(shortcut, {"result_id": result_id, "limit": 40})) == TEXT[:40]
    with pytest.raises(InvalidInputError, match="not both"):
        create_memory_tools("alice", "s1", memory=memory, config=memory.config)
