"""``LocalMemorySaver``: LangGraph's conformance suite, kill-and-resume across processes, per-step cost."""

from __future__ import annotations

import json
import operator
import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Annotated, TypedDict

import pytest
from langchain_core.runnables import RunnableConfig
from langchain_local_ai_memory import LocalMemorySaver
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.graph import END, START, StateGraph
from lc_fakes import real_text

from local_ai_memory import InvalidInputError, Memory

CHILD = Path(__file__).parent / "saver_child.py"
BIG = 200 * 1024

MEMORIES: dict[str, Callable[[Path], Memory]] = {
    "files": lambda root: Memory.open(root, fsync=False),
    "in-memory": lambda root: Memory.in_memory(),
}


@pytest.mark.parametrize("kind", [*sorted(MEMORIES), "postgres"])
async def test_langgraph_checkpoint_conformance(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    count = iter(range(1_000))
    url = request.getfixturevalue("postgres_url") if kind == "postgres" else None

    def fresh(root: Path) -> Memory:
        if url is None:
            return MEMORIES[kind](root)
        return Memory.open(root, database_url=url, database_schema=f"t_{uuid.uuid4().hex[:12]}")

    @checkpointer_test(name=f"LocalMemorySaver[{kind}]")
    async def saver() -> AsyncIterator[LocalMemorySaver]:
        memory = fresh(tmp_path / f"run{next(count)}")
        yield LocalMemorySaver(memory, user_id="conformance")
        memory.close()

    report = await validate(saver)
    report.print_report()
    assert report.passed_all_base()
    assert report.passed_all()  # the extended capabilities too: copy_thread, prune, delete_for_runs
    assert all(result.detected for result in report.results.values())


class Counters(TypedDict):
    big: str
    steps: Annotated[list[int], operator.add]


def _graph(saver: LocalMemorySaver):  # type: ignore[no-untyped-def]
    """A large channel written once, and a small one every step: a step should store the small one only."""
    builder = StateGraph(Counters)
    builder.add_node("start", lambda state: {"big": real_text(50_000), "steps": [0]})
    builder.add_node("step", lambda state: {"steps": [len(state["steps"])]})
    builder.add_edge(START, "start")
    builder.add_edge("start", "step")
    builder.add_conditional_edges("step", lambda state: END if len(state["steps"]) >= 20 else "step")
    return builder.compile(checkpointer=saver)


def test_a_step_stores_only_the_channels_that_changed(tmp_path: Path) -> None:
    memory = Memory.open(tmp_path, fsync=False)
    graph = _graph(LocalMemorySaver(memory, user_id="alice"))
    thread: RunnableConfig = {"configurable": {"thread_id": "t1"}}
    result = graph.invoke({"steps": []}, thread)
    assert result["steps"] == list(range(20))
    log = tmp_path / "memory" / "plans" / "alice_t1" / "lg-root.jsonl"
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    checkpoints = [line for line in lines if line["t"] == "checkpoint"]
    assert len(checkpoints) >= 20
    big_writes = [line for line in checkpoints if "big" in line["blobs"]]
    assert len(big_writes) == 1  # the 50 KB value is stored once, not at every step
    assert max(len(json.dumps(line)) for line in checkpoints[3:]) < 5_000
    state = graph.get_state(thread)
    assert len(state.values["big"]) == 50_000
    history = list(graph.get_state_history(thread))
    assert len(history) == len(checkpoints)
    assert history[-1].values == {"steps": []}  # time travel back to the input


async def test_async_graph_runs_on_the_saver(tmp_path: Path) -> None:
    memory = Memory.open(tmp_path, fsync=False)
    graph = _graph(LocalMemorySaver(memory, user_id="alice"))
    thread: RunnableConfig = {"configurable": {"thread_id": "t-async"}}
    result = await graph.ainvoke({"steps": []}, thread)
    assert len(result["steps"]) == 20
    state = await graph.aget_state(thread)
    assert state.values["steps"] == list(range(20))
    sync_view = _graph(LocalMemorySaver(Memory.open(tmp_path, fsync=False), user_id="alice")).get_state(thread)
    assert sync_view.values == state.values  # another Memory (another process) reads the same


def test_threads_are_sessions_of_the_memory(tmp_path: Path) -> None:
    memory = Memory.open(tmp_path, fsync=False)
    saver = LocalMemorySaver(memory, user_id="alice")
    _graph(saver).invoke({"steps": []}, {"configurable": {"thread_id": "t1"}})
    memory.session("alice", "t1").update_state({"task": "count"})
    assert [s.scope.session_id for s in memory.users()[0].sessions] == ["t1"]
    assert memory.show("alice", "t1").checkpoints == []  # LangGraph's logs are not L2 run records
    saver.delete_thread("t1")
    assert saver.get_tuple({"configurable": {"thread_id": "t1"}}) is None
    assert memory.session("alice", "t1").get_state() == {"task": "count"}  # the rest of the session stays
    _graph(saver).invoke({"steps": []}, {"configurable": {"thread_id": "t2"}})
    memory.forget_user("alice")
    assert saver.get_tuple({"configurable": {"thread_id": "t2"}}) is None
    assert list(saver.list(None)) == []


@pytest.mark.parametrize("kind", [*sorted(MEMORIES), "postgres"])
def test_a_user_with_only_saver_threads_is_listed_and_forgotten(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A scope that holds nothing but a LangGraph step log is still the user's data: every backend
    lists it and ``forget_user`` erases it."""
    if kind == "postgres":
        url, schema = request.getfixturevalue("postgres_url"), request.getfixturevalue("postgres_schema")
        memory = Memory.open(tmp_path, database_url=url, database_schema=schema)
    else:
        memory = MEMORIES[kind](tmp_path)
    saver = LocalMemorySaver(memory, user_id="carol")
    _graph(saver).invoke({"steps": []}, {"configurable": {"thread_id": "only-steps"}})
    assert memory.holds("carol", "only-steps")
    listed = [(user.user_id, [info.scope.session_id for info in user.sessions]) for user in memory.users()]
    assert listed == [("carol", ["only-steps"])]
    assert memory.forget_user("carol").sessions == ["only-steps"]
    assert saver.get_tuple({"configurable": {"thread_id": "only-steps"}}) is None
    assert memory.users() == []


@pytest.mark.parametrize("kind", ["files", "postgres"])
async def test_a_deleted_thread_leaves_no_trace_of_its_id(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest, traces: Callable[[Memory, str], list[str]]
) -> None:
    """A thread id can be a title or an address: ``delete_thread`` (sync or async) leaves no file
    name, no file content and no row that holds it, while a thread whose session holds more
    keeps that session and the id it lives under."""
    if kind == "postgres":
        url, schema = request.getfixturevalue("postgres_url"), request.getfixturevalue("postgres_schema")
        memory = Memory.open(tmp_path, database_url=url, database_schema=schema)
    else:
        memory = Memory.open(tmp_path, fsync=False)
    saver = LocalMemorySaver(memory, user_id="alice")
    for thread_id in ("thread-4e1f-sync", "thread-4e1f-async", "thread-4e1f-kept"):
        _graph(saver).invoke({"steps": []}, {"configurable": {"thread_id": thread_id}})
        assert traces(memory, thread_id)
    memory.session("alice", "thread-4e1f-kept").update_state({"task": "count"})
    saver.delete_thread("thread-4e1f-sync")
    await saver.adelete_thread("thread-4e1f-async")
    saver.delete_thread("thread-4e1f-kept")
    assert traces(memory, "thread-4e1f-sync") == []
    assert traces(memory, "thread-4e1f-async") == []
    assert memory.session("alice", "thread-4e1f-kept").get_state() == {"task": "count"}
    assert saver.get_tuple({"configurable": {"thread_id": "thread-4e1f-kept"}}) is None
    memory.delete_session("alice", "thread-4e1f-kept")
    assert traces(memory, "thread-4e1f") == []
    memory.close()


@pytest.mark.parametrize("kind", [*sorted(MEMORIES), "postgres"])
def test_savers_sharing_a_thread_see_each_others_steps_and_deletions(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Each saver keeps its fold of a log and its registration; neither may hide what another
    saver (another process, on a shared backend) wrote or deleted since."""
    if kind == "postgres":
        url, schema = request.getfixturevalue("postgres_url"), request.getfixturevalue("postgres_schema")
        first_memory = Memory.open(tmp_path, database_url=url, database_schema=schema)
        second_memory = Memory.open(tmp_path, database_url=url, database_schema=schema)
    elif kind == "files":
        first_memory, second_memory = Memory.open(tmp_path, fsync=False), Memory.open(tmp_path, fsync=False)
    else:
        first_memory = second_memory = Memory.in_memory()
    first, second = LocalMemorySaver(first_memory, user_id="alice"), LocalMemorySaver(second_memory, user_id="alice")
    thread: RunnableConfig = {"configurable": {"thread_id": "t1"}}
    _graph(first).invoke({"steps": []}, thread)
    seen = first.get_tuple(thread)  # first keeps its fold of the log
    assert seen is not None

    more = _graph(second)
    more.update_state(thread, {"steps": [100]})  # a new checkpoint, written by the other saver
    latest = first.get_tuple(thread)
    assert latest is not None
    assert latest.checkpoint["id"] > seen.checkpoint["id"]
    assert latest.checkpoint["channel_values"]["steps"][-1] == 100
    assert latest == second.get_tuple(thread)

    second.delete_thread("t1")
    assert first.get_tuple(thread) is None
    _graph(first).invoke({"steps": []}, thread)  # first still believes its log registered
    again = second.get_tuple(thread)
    assert again is not None
    assert again.checkpoint["channel_values"]["steps"] == list(range(20))
    assert again == first.get_tuple(thread)
    assert len(list(second.list(thread))) == len(list(first.list(thread))) > 20


def test_kept_folds_are_bounded_and_reads_stay_right(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from langchain_local_ai_memory import _checkpointer

    monkeypatch.setattr(_checkpointer, "_KEPT_SIZE", 1)  # every fold is over budget: only the last is kept
    saver = LocalMemorySaver(Memory.open(tmp_path, fsync=False), user_id="alice")
    threads: list[RunnableConfig] = [{"configurable": {"thread_id": f"t{n}"}} for n in range(3)]
    for thread in threads:
        _graph(saver).invoke({"steps": []}, thread)
    for _ in range(2):
        for number, thread in enumerate(threads):
            _graph(saver).update_state(thread, {"steps": [100 + number]})
            found = saver.get_tuple(thread)
            assert found is not None
            assert found.checkpoint["channel_values"]["steps"][-1] == 100 + number
            assert len(saver._folds) == 1


def test_list_stops_at_its_limit_sync_and_async(tmp_path: Path) -> None:
    import asyncio

    saver = LocalMemorySaver(Memory.open(tmp_path, fsync=False), user_id="alice")
    for thread_id in ("t1", "t2"):
        _graph(saver).invoke({"steps": []}, {"configurable": {"thread_id": thread_id}})
    everything = list(saver.list(None))
    assert {found.config["configurable"]["thread_id"] for found in everything} == {"t1", "t2"}

    async def alist(limit: int | None) -> list[str]:
        return [found.checkpoint["id"] async for found in saver.alist(None, limit=limit)]

    for limit in (None, 0, 1, 5, len(everything) - 1, len(everything) + 3):
        expected = [found.checkpoint["id"] for found in everything][: limit if limit is not None else None]
        assert [found.checkpoint["id"] for found in saver.list(None, limit=limit)] == expected
        assert asyncio.run(alist(limit)) == expected


def test_hostile_ids_are_refused(tmp_path: Path) -> None:
    memory = Memory.open(tmp_path, fsync=False)
    with pytest.raises(InvalidInputError):
        LocalMemorySaver(memory, user_id="../x")
    saver = LocalMemorySaver(memory, user_id="alice")
    for thread_id in ("../etc", "a/b", "", "nul\x00"):
        with pytest.raises(InvalidInputError):
            saver.get_tuple({"configurable": {"thread_id": thread_id}})
    assert memory.users() == []


@pytest.mark.parametrize("backend", ["files", "postgres"])
def test_killed_agent_resumes_in_another_process(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """create_agent with LocalMemorySaver, killed while paging a 200 KB output, resumed by a new process.

    On PostgreSQL the second process is another "host": its own working folder, only the database shared.
    """
    env = dict(os.environ)
    host_a, host_b = tmp_path, tmp_path
    if backend == "postgres":
        env["LOCAL_AI_MEMORY_DATABASE_URL"] = request.getfixturevalue("postgres_url")
        env["LOCAL_AI_MEMORY_DATABASE_SCHEMA"] = request.getfixturevalue("postgres_schema")
        host_a, host_b = tmp_path / "host-a", tmp_path / "host-b"
        host_a.mkdir()
        host_b.mkdir()
    child = subprocess.Popen(
        [sys.executable, str(CHILD), str(host_a), "4"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    marker = host_a / "stalled"
    deadline = time.monotonic() + 120
    while not marker.exists():
        assert child.poll() is None, child.communicate()
        assert time.monotonic() < deadline, "the child never reached page 4"
        time.sleep(0.05)
    child.kill()
    child.communicate(timeout=30)

    again = subprocess.run(
        [sys.executable, str(CHILD), str(host_b)], capture_output=True, text=True, timeout=300, check=False, env=env
    )
    assert again.returncode == 0, again.stderr
    report = json.loads(again.stdout.strip().splitlines()[-1])
    assert report["resumed"] is True
    assert report["answer"] == f"read {len(real_text(BIG))} characters"
    calls = sum(path.read_text().count("call") for path in tmp_path.rglob("big_tool_calls"))
    assert calls == 1  # no tool step lost or repeated
    assert report["model_calls"] == 8  # pages 4..10 and the answer: only the cut step is repeated
    settings = {"database_url": env["LOCAL_AI_MEMORY_DATABASE_URL"]} if backend == "postgres" else {}
    if backend == "postgres":
        settings["database_schema"] = env["LOCAL_AI_MEMORY_DATABASE_SCHEMA"]
    with Memory.open(host_b / "data", **settings) as memory:
        assert memory.show("alice", "s1").checkpoints == []  # one L2: LangGraph's, no second record beside it
        session = memory.session("alice", "s1")
        assert session.bookkeeping()["run_status"] == "completed"
        assert session.get_state()["current_step"] == 13  # big_tool call, pages 0..10, the answer


def test_middleware_under_a_checkpointer_counts_steps_and_marks_interruptions(tmp_path: Path) -> None:
    from langchain.agents import create_agent
    from langchain_core.messages import HumanMessage
    from langchain_core.tools import tool
    from langchain_local_ai_memory import LocalMemoryMiddleware
    from lc_fakes import ScriptedChatModel, paging_policy

    @tool
    def big_tool() -> str:
        """Return a large document."""
        return real_text(BIG)

    middleware = LocalMemoryMiddleware("alice", "s1", memory=Memory.open(tmp_path, fsync=False))
    saver = middleware.checkpointer()
    assert saver.memory is middleware.memory  # one memory: the saver is on the middleware's own
    agent = create_agent(
        ScriptedChatModel(policy=paging_policy(page_chars=20_000)),
        tools=[big_tool],
        middleware=[middleware],
        checkpointer=saver,
    )
    thread: RunnableConfig = {"configurable": {"thread_id": "s1"}}
    result = agent.invoke({"messages": [HumanMessage("Read the big document.")]}, thread)
    assert result["messages"][-1].text == f"read {len(real_text(BIG))} characters"
    memory = Memory.open(tmp_path)
    session = memory.session("alice", "s1")
    assert session.bookkeeping()["run_status"] == "completed"
    assert session.get_state()["current_step"] == 13  # big_tool, 11 pages, the answer
    assert memory.show("alice", "s1").checkpoints == []
    assert middleware.checkpoints is not None
    assert middleware.checkpoints.mark_interrupted("alice", "s1") is False  # nothing runs
    session.engine.update_bookkeeping({"run_status": "in_progress"})
    assert middleware.checkpoints.mark_interrupted("alice", "s1", reason="SIGTERM") is True
    assert session.bookkeeping()["run_status"] == "interrupted"
    assert session.bookkeeping()["stop_reason"] == "SIGTERM"
