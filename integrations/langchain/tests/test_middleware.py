"""Middleware parts one by one: what the model sees, error results, scope from the runtime context."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import ToolException, tool
from langchain_local_ai_memory import (
    CheckpointMiddleware,
    LocalMemoryMiddleware,
    LocalMemoryRetriever,
    MemoryPromptMiddleware,
    ToolResultMiddleware,
    WorkingMemoryMiddleware,
)
from lc_fakes import ScriptedChatModel, TextLLM, add_notes

from local_ai_memory import InvalidInputError, Memory, MemoryConfig
from local_ai_memory._shared.records import BOOKKEEPING_KEY
from local_ai_memory.integration import load_checkpoint

LARGE = "x" * 10_000


@tool
def large() -> str:
    """Return 10 KB."""
    return LARGE


@tool
def small() -> str:
    """Return a little."""
    return "tiny"


@tool
def failing() -> str:
    """Always fails."""
    raise ToolException("E" * 10_000)


failing.handle_tool_error = True


def _calls(*names: str) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": n, "args": {}, "id": f"id_{n}"} for n in names])


def _tool_messages(model: ScriptedChatModel) -> dict[str, ToolMessage]:
    return {str(m.name): m for m in model.received[-1] if isinstance(m, ToolMessage)}


def test_only_large_successful_results_are_externalized(memory: Memory) -> None:
    model = ScriptedChatModel(script=[_calls("large", "small", "failing"), AIMessage(content="done")])
    agent = create_agent(
        model, tools=[large, small, failing], middleware=[ToolResultMiddleware("alice", "s1", memory=memory)]
    )
    agent.invoke({"messages": [HumanMessage("go")]})
    seen = _tool_messages(model)
    reference = json.loads(str(seen["large"].content))
    assert reference["size"] == 10_000
    assert reference["summary"] == "x" * 1000 + "…"
    assert memory.session("alice", "s1").engine.load_tool_result(reference["result_id"])["content"] == LARGE
    assert seen["small"].content == "tiny"
    assert seen["failing"].status == "error"
    assert "EEEE" in str(seen["failing"].content)  # error results stay inline, whatever their size
    assert "load_tool_result" in model.bound_tools


async def test_async_externalization_with_scope_from_context(memory: Memory) -> None:
    model = ScriptedChatModel(script=[_calls("large"), AIMessage(content="done")])
    agent = create_agent(model, tools=[large], middleware=[ToolResultMiddleware(memory=memory)])
    await agent.ainvoke({"messages": [HumanMessage("go")]}, context={"user_id": "carol", "session_id": "c-1"})
    reference = json.loads(str(_tool_messages(model)["large"].content))
    assert memory.session("carol", "c-1").list_tool_results().keys() == {reference["result_id"]}


def _system_texts(model: ScriptedChatModel) -> list[str]:
    return [str(call[0].content) for call in model.received if isinstance(call[0], SystemMessage)]


def test_prompt_gets_working_memory_and_state_without_touching_messages(memory: Memory) -> None:
    manager = memory.session("alice", "s1")
    manager.update_working_memory("# Current Goal\nShip the parser\n")
    manager.update_state({"current_task": "ship the parser", "current_step": 3})
    model = ScriptedChatModel(script=[AIMessage(content="ok")])
    agent = create_agent(
        model, system_prompt="You are terse.", middleware=[MemoryPromptMiddleware("alice", "s1", memory=memory)]
    )
    result = agent.invoke({"messages": [HumanMessage("hi")]})
    (system,) = _system_texts(model)
    assert system.startswith("You are terse.\n\n")
    assert "Working memory:" in system
    assert "Ship the parser" in system
    assert "current_step: 3" in system
    # The state's messages are the conversation only: no memory was written into them.
    assert [type(m) for m in result["messages"]] == [HumanMessage, AIMessage]


async def test_prompt_async_without_system_prompt(memory: Memory) -> None:
    memory.session("alice", "s1").update_working_memory("# Current Goal\nAsync goal\n")
    model = ScriptedChatModel(script=[AIMessage(content="ok")])
    agent = create_agent(model, middleware=[MemoryPromptMiddleware("alice", "s1", memory=memory)])
    await agent.ainvoke({"messages": [HumanMessage("hi")]})
    (system,) = _system_texts(model)
    assert "Async goal" in system


def test_empty_memory_leaves_prompt_alone(memory: Memory) -> None:
    model = ScriptedChatModel(script=[AIMessage(content="ok")])
    agent = create_agent(model, middleware=[MemoryPromptMiddleware("alice", "s1", memory=memory)])
    agent.invoke({"messages": [HumanMessage("hi")]})
    assert _system_texts(model) == []


def test_checkpoint_and_state_each_step(memory: Memory) -> None:
    model = ScriptedChatModel(script=[_calls("small"), _calls("small"), AIMessage(content="done")])
    agent = create_agent(
        model, tools=[small], middleware=[CheckpointMiddleware("alice", "s1", memory=memory, plan_id="job-1")]
    )
    agent.invoke({"messages": [HumanMessage("Count twice")]})
    manager = memory.session("alice", "s1")
    checkpoint = load_checkpoint(manager.engine, "job-1")
    assert checkpoint.status == "completed"
    assert checkpoint.step == 3
    assert checkpoint.task == "Count twice"
    assert len(checkpoint.messages) == 6
    assert manager.get_state() == {"current_task": "Count twice", "current_step": 3}
    assert manager.bookkeeping() == {"plan_id": "job-1"}  # the middleware's own record, never shown to the model


async def test_async_resume_restores_the_conversation(memory: Memory) -> None:
    # A first run that raised mid-way leaves an in_progress checkpoint...
    boom = ScriptedChatModel(script=[_calls("small")])

    def explode(messages: Any) -> AIMessage:
        if len(boom.received) > 1:
            raise RuntimeError("model crashed")
        return _calls("small")

    boom.policy = explode
    middleware = [CheckpointMiddleware("alice", "s1", memory=memory)]
    first = create_agent(boom, tools=[small], middleware=middleware)
    with pytest.raises(RuntimeError, match="model crashed"):
        await first.ainvoke({"messages": [HumanMessage("Task A")]})
    assert load_checkpoint(memory.session("alice", "s1").engine, "agent").status == "in_progress"
    # ...and a new run with the same task continues from it instead of starting over.
    model = ScriptedChatModel(script=[AIMessage(content="finished")])
    second = create_agent(model, tools=[small], middleware=middleware)
    result = await second.ainvoke({"messages": [HumanMessage("Task A")]})
    received = model.received[0]
    assert [type(m) for m in received] == [HumanMessage, AIMessage, ToolMessage]
    assert received[2].content == "tiny"
    assert [type(m) for m in result["messages"]] == [HumanMessage, AIMessage, ToolMessage, AIMessage]
    assert load_checkpoint(memory.session("alice", "s1").engine, "agent").status == "completed"
    assert memory.session("alice", "s1").bookkeeping()["resumed_from_step"] == 1


def test_working_memory_after_run_sync_and_no_double_merge(memory: Memory) -> None:
    summary = "# Current Goal\nWrite the report\n\n# Completed\n* gathered data\n"
    llm = TextLLM(summary)
    model = ScriptedChatModel(script=[AIMessage(content="report written")])
    agent = create_agent(model, middleware=[WorkingMemoryMiddleware("alice", "s1", memory=memory, llm=llm)])
    agent.invoke({"messages": [HumanMessage("Write the report")]})
    manager = memory.session("alice", "s1")
    assert "Write the report" in manager.get_working_memory()
    assert "gathered data" in manager.get_working_memory()
    assert "report written" in llm.prompts[0]
    assert manager.get_state()["current_task"] == "Write the report"


async def test_working_memory_async_with_chat_model_summarizer(memory: Memory) -> None:
    summarizer = ScriptedChatModel(script=[AIMessage(content="# Current Goal\nAsync report\n")])
    model = ScriptedChatModel(script=[AIMessage(content="ok")])
    agent = create_agent(model, middleware=[WorkingMemoryMiddleware("alice", "s1", memory=memory, llm=summarizer)])
    await agent.ainvoke({"messages": [HumanMessage("Write it")]})
    assert "Async report" in memory.session("alice", "s1").get_working_memory()
    assert "Write it" in str(summarizer.received[0][0].content)


def test_combined_middleware_parts_and_switches(memory: Memory) -> None:
    both = LocalMemoryMiddleware("alice", "s1", memory=memory)
    assert [type(p).__name__ for p in both.parts()] == [
        "ToolResultMiddleware",
        "CheckpointMiddleware",
        "MemoryPromptMiddleware",
        "WorkingMemoryMiddleware",
    ]
    model = ScriptedChatModel(script=[_calls("large"), AIMessage(content="done")])
    agent = create_agent(model, tools=[large], middleware=both.parts())
    agent.invoke({"messages": [HumanMessage("go")]})
    assert json.loads(str(_tool_messages(model)["large"].content))["size"] == 10_000
    assert load_checkpoint(memory.session("alice", "s1").engine, "agent").status == "completed"
    only_prompt = LocalMemoryMiddleware("alice", "s1", memory=memory, externalize=False, checkpoint=False)
    assert [type(p).__name__ for p in only_prompt.parts()] == ["MemoryPromptMiddleware", "WorkingMemoryMiddleware"]
    assert list(only_prompt.tools) == []


def test_prompt_adds_knowledge_once_per_question(tmp_path: Any) -> None:
    notes = add_notes(Memory.open(tmp_path / "notes", fsync=False))
    selector = TextLLM('["alice_json.md"]')
    retriever = LocalMemoryRetriever(memory=notes, llm=selector)
    model = ScriptedChatModel(script=[_calls("small"), AIMessage(content="done")])
    middleware = LocalMemoryMiddleware("alice", "s1", memory=notes, retriever=retriever, prompt_max_tokens=2000)
    agent = create_agent(model, tools=[small], middleware=[middleware])
    agent.invoke({"messages": [HumanMessage("how do I parse json?")]})
    systems = _system_texts(model)
    assert len(systems) == 2
    assert all("Knowledge memory:" in text and "json.loads" in text for text in systems)
    assert "bob" not in systems[0]
    assert len(selector.prompts) == 1  # searched once for the question, not once per model call


async def test_prompt_knowledge_async_uses_the_context_user(tmp_path: Any) -> None:
    notes = add_notes(Memory.in_memory())
    model = ScriptedChatModel(script=[AIMessage(content="done")])
    prompt = MemoryPromptMiddleware(memory=notes, retriever=LocalMemoryRetriever(memory=notes), max_tokens=2000)
    agent = create_agent(model, middleware=[prompt])
    await agent.ainvoke({"messages": [HumanMessage("python secrets")]}, context={"user_id": "bob", "session_id": "b"})
    (system,) = _system_texts(model)
    assert "## bob_python.md" in system
    assert "alice_" not in system


PARTS = [ToolResultMiddleware, MemoryPromptMiddleware, CheckpointMiddleware, WorkingMemoryMiddleware]


@pytest.mark.parametrize("kind", [*PARTS, LocalMemoryMiddleware])
def test_middleware_refuses_unknown_arguments_by_name(memory: Memory, kind: type[Any]) -> None:
    with pytest.raises(TypeError, match="'usr_id'"):
        kind(usr_id="alice", session_id="s1", memory=memory)
    with pytest.raises(TypeError, match="'search_kwargs'"):
        kind("alice", "s1", memory=memory, search_kwargs={"k": 1})
    with pytest.raises(TypeError, match="'guard'"):  # the memory holds the folder: no guard of its own
        kind("alice", "s1", memory=memory, guard=None)
    with pytest.raises(InvalidInputError, match="not both"):
        kind("alice", "s1", memory=memory, config=memory.config)
    assert kind("alice", "s1", memory=memory).memory is memory


BOOKKEEPING_WORDS = ("plan_id", "job-7", "resumed_from_step", "merge_cursor", BOOKKEEPING_KEY)


async def test_prompt_shows_the_agents_state_not_the_bookkeeping(memory: Memory) -> None:
    """Through a finished run, a crashed one and its resume (sync and async), the model's system prompt
    carries the task, the step and the working memory, never the middleware's or the core's records."""
    middleware = LocalMemoryMiddleware("alice", "s1", memory=memory, plan_id="job-7")
    first = ScriptedChatModel(script=[_calls("small"), AIMessage(content="done")])
    create_agent(first, tools=[small], middleware=[middleware]).invoke({"messages": [HumanMessage("Count once")]})

    crashing = ScriptedChatModel()

    def crash_after_one_step(messages: Any) -> AIMessage:
        if len(crashing.received) > 1:
            raise RuntimeError("model crashed")
        return _calls("small")

    crashing.policy = crash_after_one_step
    with pytest.raises(RuntimeError, match="model crashed"):
        create_agent(crashing, tools=[small], middleware=[middleware]).invoke(
            {"messages": [HumanMessage("Count again")]}
        )
    resumed = ScriptedChatModel(script=[AIMessage(content="finished")])
    await create_agent(resumed, tools=[small], middleware=[middleware]).ainvoke(
        {"messages": [HumanMessage("Count again")]}
    )

    books = memory.session("alice", "s1").bookkeeping()
    assert books["plan_id"] == "job-7"  # the records exist, so their absence below means something
    assert books["resumed_from_step"] == 1
    assert "merge_cursor" in books
    prompts = _system_texts(first) + _system_texts(crashing) + _system_texts(resumed)
    assert len(prompts) == 2 + 2 + 1  # every model call of the three runs
    for prompt in prompts:
        assert "current_task:" in prompt
        assert "current_step:" in prompt
        assert [word for word in BOOKKEEPING_WORDS if word in prompt] == []
    assert "Working memory:" in prompts[-1]
    assert "Count once" in prompts[-1]  # L1 merged from the first run


# --------------------------------------------------------------------------- search_tool_result in an agent

ERROR_LINE = "2026-03-14T09:31:07Z ERROR payment-worker: ledger write failed: deadlock detected (txn 88123)"


@tool
def read_server_log() -> str:
    """Return the whole server log (about 200 KB)."""
    lines = [f"2026-03-14T09:{n // 60 % 60:02d}:{n % 60:02d}Z INFO request {n} served in 12 ms" for n in range(3800)]
    lines[1900] = ERROR_LINE
    return "\n".join(lines)


def test_agent_finds_the_error_line_with_one_search_instead_of_paging(memory: Memory) -> None:
    """A 200 KB log with one error line in the middle: one search_tool_result call answers it, no page is read."""

    def policy(messages: list[Any]) -> AIMessage:
        last = messages[-1]
        if isinstance(last, HumanMessage):
            return AIMessage(content="", tool_calls=[{"name": "read_server_log", "args": {}, "id": "c1"}])
        if isinstance(last, ToolMessage) and last.name == "read_server_log":
            reference = json.loads(str(last.content))
            args = {"result_id": reference["result_id"], "pattern": "error", "context": 1}
            return AIMessage(content="", tool_calls=[{"name": "search_tool_result", "args": args, "id": "c2"}])
        return AIMessage(content="Found it.")

    model = ScriptedChatModel(policy=policy)
    agent = create_agent(
        model, tools=[read_server_log], middleware=[ToolResultMiddleware("alice", "s1", memory=memory)]
    )
    result = agent.invoke({"messages": [HumanMessage("Which request failed in the server log, and why?")]})
    tool_messages = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    assert len(read_server_log.invoke({})) > 190_000
    reference = json.loads(str(tool_messages[0].content))
    assert reference["size"] > 190_000
    assert reference["pages"] > 20
    assert {"load_tool_result", "search_tool_result"} <= set(model.bound_tools)
    [search] = [m for m in tool_messages if m.name == "search_tool_result"]
    assert not [m for m in tool_messages if m.name == "load_tool_result"]  # no page at all
    answer = str(search.content)
    assert "matches 1-1 of 1" in answer
    assert f">1901: {ERROR_LINE}" in answer  # the line, with its number, and one line of context each side
    assert " 1900: " in answer
    assert " 1902: " in answer
    assert len(answer) < 1_000  # a few hundred characters instead of 200 KB of pages
    assert search.status == "success"


@pytest.mark.parametrize("backend", ["files", "in memory", "postgres"])
async def test_the_users_state_never_holds_the_librarys_bookkeeping(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """After a middleware run (plan id, run status, merge cursor recorded), the user's state is the
    user's, sync and async, on every backend, and a user's patch or replacement neither sees nor clobbers
    the records the library still reads."""
    if backend == "postgres":
        url, schema = request.getfixturevalue("postgres_url"), request.getfixturevalue("postgres_schema")
        memory = Memory(MemoryConfig(runtime_data_dir=tmp_path, fsync=False, database_url=url, database_schema=schema))
    else:
        memory = Memory.open(tmp_path, fsync=False) if backend == "files" else Memory.in_memory()
    with memory:
        middleware = LocalMemoryMiddleware("alice", "s1", memory=memory, plan_id="job-9")
        model = ScriptedChatModel(script=[_calls("small"), AIMessage(content="done")])
        create_agent(model, tools=[small], middleware=[middleware]).invoke({"messages": [HumanMessage("Count once")]})
        session = memory.session("alice", "s1")
        books = session.bookkeeping()
        assert books["plan_id"] == "job-9"  # the records exist, so their absence below means something
        assert "merge_cursor" in books
        user_state = {"current_task": "Count once", "current_step": 2}
        assert session.get_state() == user_state
        assert await session.aget_state() == user_state
        assert memory.show("alice", "s1").state == user_state
        assert session.update_state({"mood": "calm"}) == {**user_state, "mood": "calm"}
        assert await session.areplace_state({"fresh": True}) == {"fresh": True}
        assert session.replace_state({"fresh": 1}) == {"fresh": 1}
        for write in (session.update_state, session.replace_state):
            with pytest.raises(InvalidInputError, match="bookkeeping"):
                write({BOOKKEEPING_KEY: None})
        with pytest.raises(InvalidInputError, match="bookkeeping"):
            await session.aupdate_state({BOOKKEEPING_KEY: {"merge_cursor": None}})
        assert session.bookkeeping() == books
        assert await session.abookkeeping() == books
