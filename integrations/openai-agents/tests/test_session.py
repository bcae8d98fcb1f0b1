"""``LocalMemorySession`` against the behaviours the SDK's own ``SQLiteSession`` tests check, plus
what a shared, persistent store adds: exact round trips, hostile ids, isolation between users,
compaction into the working memory, and a real ``Runner`` that resumes in another process."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, Runner, set_tracing_disabled
from agents.memory import Session, SessionSettings, is_openai_responses_compaction_aware_session
from agents.testing import ScriptedModel, assistant_message, function_call
from local_ai_memory_openai_agents import LocalMemorySession, memory_tools, safe_keep

from local_ai_memory import InvalidInputError, Memory, MemoryConfig

set_tracing_disabled(True)  # nothing leaves the machine: no trace export

CHILD = Path(__file__).with_name("agents_child.py")

ITEMS: list[Any] = [
    {"role": "user", "content": "Hello"},
    {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Hi! ünïcödé 🙂 \x00 \r\n", "annotations": [], "logprobs": []}],
    },
    {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "grep", "arguments": '{"q":"\\"x\\""}'},
    {"type": "function_call_output", "call_id": "c1", "output": "3 matches"},
    {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA=="},
    {"role": "user", "content": [{"type": "input_text", "text": "next"}, {"type": "input_image", "detail": "auto"}]},
]


def test_it_is_a_session_with_the_compaction_hook(memory: Memory) -> None:
    session = LocalMemorySession(memory, "alice", "s1")
    assert isinstance(session, Session)
    assert is_openai_responses_compaction_aware_session(session)


async def test_basic_add_get_and_exact_round_trip(memory: Memory) -> None:
    session = LocalMemorySession(memory, "alice", "s1")
    assert await session.get_items() == []
    await session.add_items(ITEMS[:2])
    await session.add_items(ITEMS[2:])
    got = await session.get_items()
    assert got == ITEMS
    assert [json.dumps(item) for item in got] == [json.dumps(item) for item in ITEMS]
    fresh = LocalMemorySession(Memory.open(memory.root, fsync=False), "alice", "s1")  # type: ignore[arg-type]
    assert await fresh.get_items() == ITEMS, "another Memory on the folder reads something else"


async def test_limits_like_sqlite_session(memory: Memory) -> None:
    session = LocalMemorySession(memory, "alice", "s1")
    await session.add_items(ITEMS)
    assert await session.get_items(limit=2) == ITEMS[-2:]
    assert await session.get_items(limit=0) == []
    assert await session.get_items(limit=100) == ITEMS
    assert await session.get_items(limit=-1) == ITEMS  # SQLite's LIMIT -1: everything
    limited = LocalMemorySession(memory, "alice", "s1", session_settings=SessionSettings(limit=3))
    assert await limited.get_items() == ITEMS[-3:]
    assert await limited.get_items(limit=1) == ITEMS[-1:]  # an explicit limit wins


async def test_pop_item(memory: Memory) -> None:
    session = LocalMemorySession(memory, "alice", "s1")
    assert await session.pop_item() is None
    await session.add_items(ITEMS[:3])
    assert await session.pop_item() == ITEMS[2]
    assert await session.get_items() == ITEMS[:2]
    assert await session.pop_item() == ITEMS[1]
    assert await session.pop_item() == ITEMS[0]
    assert await session.pop_item() is None
    await session.add_items([ITEMS[3]])  # after emptying, the session works as new
    assert await session.get_items() == [ITEMS[3]]


async def test_clear_and_empty_add(memory: Memory) -> None:
    session = LocalMemorySession(memory, "alice", "s1")
    await session.add_items([])
    assert await session.get_items() == []
    await session.add_items(ITEMS)
    await session.clear_session()
    assert await session.get_items() == []
    assert await session.pop_item() is None
    await session.clear_session()  # twice is fine


async def test_sessions_and_users_are_isolated(memory: Memory) -> None:
    pairs = [("alice", "s1"), ("alice", "s2"), ("bob", "s1"), ("bob_admin", "s1"), ("bob", "admin_s1")]
    sessions = [LocalMemorySession(memory, user, sid) for user, sid in pairs]
    for number, session in enumerate(sessions):
        await session.add_items([{"role": "user", "content": f"owner {number}"}])
    for number, session in enumerate(sessions):
        assert await session.get_items() == [{"role": "user", "content": f"owner {number}"}]
    await sessions[2].clear_session()
    assert await sessions[3].get_items() == [{"role": "user", "content": "owner 3"}]
    assert await sessions[2].pop_item() is None
    assert await sessions[4].pop_item() == {"role": "user", "content": "owner 4"}
    assert await sessions[0].get_items() == [{"role": "user", "content": "owner 0"}]


@pytest.mark.parametrize(
    ("user", "session_id"),
    [
        ("../etc", "s1"),
        ("alice", "../../x"),
        ("a/b", "s"),
        ("alice", "s\x00"),
        ("", "s"),
        ("alice", ".."),
        ("\u202e", "s"),
    ],
)
def test_hostile_ids_are_refused_before_anything_is_stored(memory: Memory, user: str, session_id: str) -> None:
    with pytest.raises(InvalidInputError):
        LocalMemorySession(memory, user, session_id)
    with pytest.raises(InvalidInputError):
        memory_tools(memory, user, session_id)
    assert memory.sessions() == []


async def test_items_that_are_no_json_are_refused(memory: Memory) -> None:
    session = LocalMemorySession(memory, "alice", "s1")
    with pytest.raises(InvalidInputError):
        await session.add_items([{"role": "user", "content": object()}])  # type: ignore[list-item]
    assert await session.get_items() == []


async def test_concurrent_adds_and_pops_lose_nothing(memory: Memory) -> None:
    session = LocalMemorySession(memory, "alice", "s1")
    await asyncio.gather(*(session.add_items([{"role": "user", "content": str(n)}]) for n in range(30)))
    assert sorted(int(item["content"]) for item in await session.get_items()) == list(range(30))
    popped = await asyncio.gather(*(session.pop_item() for _ in range(35)))
    taken = [int(item["content"]) for item in popped if item is not None]
    assert sorted(taken) == list(range(30)), "an item was popped twice or lost"
    assert await session.get_items() == []


def test_safe_keep_never_starts_with_an_orphan_output() -> None:
    assert safe_keep(ITEMS, 3) == 4  # the tail would start at the function_call_output: keep its call
    assert safe_keep(ITEMS, 2) == 2
    assert safe_keep(ITEMS, 0) == 0
    assert safe_keep(ITEMS, 99) == len(ITEMS)


async def test_compaction_folds_old_items_into_working_memory(tmp_path: Path) -> None:
    memory = Memory.open(tmp_path, fsync=False, working_memory_history_limit=4, working_memory_compact_keep_last=3)
    session = LocalMemorySession(memory, "alice", "s1")
    await session.add_items(ITEMS)
    await session.run_compaction({"response_id": "resp-1"})
    kept = await session.get_items()
    assert kept == ITEMS[2:], "the kept tail must start at the call, not at its output"
    working = await memory.session("alice", "s1").aget_working_memory()
    assert working.strip(), "compaction dropped items before they reached the working memory"
    rendered = await session.arender_memory("Base.")
    assert rendered.startswith("Base.\n\nWorking memory of this conversation")
    await session.run_compaction()  # nothing new, short log: nothing changes
    assert await session.get_items() == kept
    await session.run_compaction({"force": True})
    assert await session.get_items() == ITEMS[2:]  # forced down to keep_last, still not orphaning the output
    off = LocalMemorySession(memory, "alice", "s2", compaction=False)
    await off.add_items(ITEMS)
    await off.run_compaction({"force": True})
    assert await off.get_items() == ITEMS


@pytest.mark.parametrize("together", [True, False], ids=["one-add", "an-add-per-item"])
@pytest.mark.parametrize(
    ("output", "line"),
    [("3 passed, 1 failed", "read_log reported: 3 passed, 1 failed"), ("Error: no deploy.log", "read_log failed: ")],
)
async def test_working_memory_names_the_tool_a_call_output_answers(
    tmp_path: Path, together: bool, output: str, line: str
) -> None:
    """A ``function_call_output`` carries only its call's id: the summary still names ``read_log``."""
    memory = Memory.open(tmp_path, fsync=False, working_memory_history_limit=2, working_memory_compact_keep_last=1)
    session = LocalMemorySession(memory, "alice", "s1")
    items: list[Any] = [{"role": "user", "content": "Run the tests."}]
    for n, path in enumerate(("deploy.log", "x.log")):
        arguments = json.dumps({"path": path})
        call = {
            "type": "function_call",
            "id": f"fc_{n}",
            "call_id": f"c{n}",
            "name": "read_log",
            "arguments": arguments,
        }
        items += [call, {"type": "function_call_output", "call_id": f"c{n}", "output": output}]
    items += [{"role": "assistant", "content": "Done."}, {"role": "user", "content": "thanks"}]
    if together:
        await session.add_items(items)
    else:
        for item in items:
            await session.add_items([item])
    await session.run_compaction({"force": True})
    working = await memory.session("alice", "s1").aget_working_memory()
    assert line in working
    assert "tool reported" not in working
    assert "tool failed" not in working


async def test_runner_uses_the_session_and_the_tools(memory: Memory) -> None:
    memory.knowledge.write_note("alice", "deploy", "# Deploy\nWe deploy on Fridays after the review.")
    memory.knowledge.write_note("bob", "deploy", "# Deploy\nBob deploys on Mondays.")
    session = LocalMemorySession(memory, "alice", "chat")
    model = ScriptedModel(
        [
            [function_call("search_memory", {"query": "deploy"}, call_id="c1")],
            [assistant_message("Fridays.", item_id="m1")],
            [assistant_message("Still Fridays.", item_id="m2")],
        ]
    )
    agent = Agent(
        name="a",
        instructions=session.instructions("Be brief."),
        model=model,
        tools=memory_tools(memory, "alice", "chat"),
    )
    first = await Runner.run(agent, "When do we deploy?", session=session)
    assert first.final_output == "Fridays."
    items = await session.get_items()
    assert [item.get("type", "message") for item in items] == [
        "message",
        "function_call",
        "function_call_output",
        "message",
    ]
    output = items[2]["output"]
    assert "Fridays after the review" in output
    assert "Mondays" not in output, "the search tool read another user's notes"
    second = await Runner.run(agent, "Sure?", session=session)
    assert second.final_output == "Still Fridays."
    call = model.last_call
    assert call is not None
    assert call.input[: len(items)] == items, "the second turn did not get the first turn's history"
    assert call.input[-1] == {"role": "user", "content": "Sure?"}
    model.assert_complete()


async def test_load_tool_result_pages_only_this_sessions_outputs(memory: Memory) -> None:
    mine = memory.session("alice", "chat")
    big = "\n".join(f"line {n}: " + "x" * 50 for n in range(500))
    reference = json.loads(mine.externalize("dump", big))
    theirs = json.loads(memory.session("bob", "chat").externalize("dump", big))
    load, _search = memory_tools(memory, "alice", "chat")
    model = ScriptedModel(
        [
            [
                function_call(
                    "load_tool_result", {"result_id": reference["result_id"], "line": 10, "lines": 2}, call_id="c1"
                ),
                function_call("load_tool_result", {"result_id": theirs["result_id"]}, call_id="c2"),
            ],
            [assistant_message("ok")],
        ]
    )
    agent = Agent(name="a", model=model, tools=[load])
    await Runner.run(agent, "read it")
    outputs = {
        item["call_id"]: item["output"] for item in model.last_call.input if item.get("type") == "function_call_output"
    }  # type: ignore[union-attr]
    assert "line 9:" in outputs["c1"]
    assert "line 11:" not in outputs["c1"]
    assert "Cannot load tool result" in outputs["c2"]
    assert "x" * 50 not in outputs["c2"], "another user's stored output leaked"


def _turn(root: Path, turn: int) -> dict[str, Any]:
    env = {**os.environ, "OPENAI_AGENTS_DISABLE_TRACING": "1", "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, str(CHILD), str(root), str(turn)], capture_output=True, text=True, timeout=240, env=env
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_a_run_resumes_in_another_process(tmp_path: Path) -> None:
    root = tmp_path / "data"
    with Memory.open(root, fsync=False) as memory:
        memory.knowledge.write_note("alice", "deploy", "# Deploy\nWe deploy on Fridays after the review.")
    first = _turn(root, 1)
    assert first["output"] == "We deploy on Fridays."
    second = _turn(root, 2)
    assert second["output"] == "Yes: Fridays, as I said."
    history = second["input"]
    kinds = [item.get("type", "message") for item in history]
    assert kinds == ["message", "function_call", "function_call_output", "message", "message"]
    assert history[0] == {"role": "user", "content": "When do we deploy?"}
    assert "Fridays after the review" in history[2]["output"]
    assert history[3]["content"][0]["text"] == "We deploy on Fridays."
    assert history[4] == {"role": "user", "content": "Are you sure?"}
    assert second["instructions"].startswith("You help Alice.")
    with Memory.open(root, fsync=False) as memory:
        stored = asyncio.run(LocalMemorySession(memory, "alice", "chat-1").get_items())
    assert stored == [*history, {**stored[-1]}]
    assert stored[-1]["content"][0]["text"] == "Yes: Fridays, as I said."


async def test_the_runner_calls_compaction_and_the_next_turn_sees_the_working_memory(tmp_path: Path) -> None:
    memory = Memory.open(tmp_path, fsync=False, working_memory_history_limit=3, working_memory_compact_keep_last=2)
    session = LocalMemorySession(memory, "alice", "chat")
    model = ScriptedModel([[assistant_message(f"Answer {n} about the Zanzibar migration.")] for n in range(3)])
    agent = Agent(name="a", instructions=session.instructions("Base."), model=model)
    for n in range(3):
        await Runner.run(agent, f"Question {n} about the Zanzibar migration?", session=session)
    items = await session.get_items()
    assert len(items) <= 3, "the runner's compaction hook did not trim the log"
    assert items[-1]["content"][0]["text"] == "Answer 2 about the Zanzibar migration."
    working = await memory.session("alice", "chat").aget_working_memory()
    assert "Zanzibar" in working
    last = model.last_call
    assert last is not None
    assert last.system_instructions is not None
    assert "Working memory of this conversation" in last.system_instructions


def test_run_sync_uses_the_session_too(memory: Memory) -> None:
    session = LocalMemorySession(memory, "alice", "sync")
    model = ScriptedModel([[assistant_message("one")], [assistant_message("two")]])
    agent = Agent(name="a", model=model)
    policy = asyncio.get_event_loop_policy()
    try:
        assert Runner.run_sync(agent, "first", session=session).final_output == "one"
        assert Runner.run_sync(agent, "second", session=session).final_output == "two"
    finally:  # run_sync leaves the thread's default loop it made open: close it here
        policy.get_event_loop().close()
        policy.set_event_loop(None)
    last = model.last_call
    assert last is not None
    assert last.input[0] == {"role": "user", "content": "first"}
    assert len(memory.session("alice", "sync").messages.items()) == 4


@pytest.mark.parametrize("backend", ["files", "in_memory", "postgres"])
async def test_a_lone_surrogate_is_refused_whole_and_the_session_stays_usable(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """``SQLiteSession`` stores ``"a\\ud800b"``, and then every later run sends it to the model
    again; the core's rule refuses it (``InvalidInputError``, not a raw ``UnicodeEncodeError``)
    before anything of the batch is written, on every backend."""
    if backend == "files":
        opened = Memory.open(tmp_path / "data", fsync=False)
    elif backend == "in_memory":
        opened = Memory.in_memory()
    else:
        url, schema = request.getfixturevalue("postgres_url"), request.getfixturevalue("postgres_schema")
        opened = Memory(MemoryConfig(runtime_data_dir=tmp_path / "pg", database_url=url, database_schema=schema))
    with opened as memory:
        session = LocalMemorySession(memory, "alice", "s1")
        await session.add_items(ITEMS[:2])
        for hostile in (
            [{"role": "user", "content": "fine"}, {"role": "user", "content": "a\ud800b"}],
            [{"type": "function_call_output", "call_id": "c1", "output": "\udcff"}],
        ):
            with pytest.raises(InvalidInputError, match="lone surrogate"):
                await session.add_items(hostile)
        assert await session.get_items() == ITEMS[:2]
        await session.add_items(ITEMS[2:])
        assert await session.get_items() == ITEMS
