"""``LocalMemorySaver`` retention: prune, delete_for_runs and TTL, on files and PostgreSQL."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langchain_local_ai_memory import LocalMemorySaver
from test_saver_deltas import _graph, _normal

from local_ai_memory import InvalidInputError, Memory


@pytest.fixture(params=["files", "postgres"])
def open_memory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Memory]]:
    """Opens the same memory again (as a new process would), on files or on PostgreSQL."""
    opened: list[Memory] = []
    schema = f"t_{uuid.uuid4().hex[:12]}"
    url = request.getfixturevalue("postgres_url") if request.param == "postgres" else None

    def open_() -> Memory:
        memory = (
            Memory.open(tmp_path, fsync=False)
            if url is None
            else Memory.open(tmp_path, database_url=url, database_schema=schema)
        )
        opened.append(memory)
        return memory

    yield open_
    for memory in opened:
        memory.close()


def _talk(saver: LocalMemorySaver, thread: str, turns: int, first: int = 0) -> RunnableConfig:
    graph = _graph(saver)
    config: RunnableConfig = {"configurable": {"thread_id": thread}}
    for n in range(first, first + turns):
        graph.invoke({"messages": [HumanMessage(f"turn {n} " + "w" * 500, id=f"{thread}-{n}")]}, config)
    return config


def test_prune_keep_latest_keeps_the_latest_exactly_and_the_thread_goes_on(open_memory: Callable[[], Memory]) -> None:
    saver = LocalMemorySaver(open_memory(), user_id="u")
    config = _talk(saver, "t", 12)
    other = _talk(saver, "other", 2)
    before = _normal(saver.get_tuple(config))
    others = len(list(saver.list(other)))
    saver.prune(["t"], strategy="keep_latest")
    fresh = LocalMemorySaver(open_memory(), user_id="u")
    assert [_normal(found) for found in fresh.list(config)] == [before]
    assert len(list(fresh.list(other))) == others  # other threads untouched
    # The thread goes on from the kept checkpoint, in this saver and in a fresh one.
    _talk(saver, "t", 1, first=12)
    messages = fresh.get_tuple(config).checkpoint["channel_values"]["messages"]
    assert len(messages) == 26
    saver.prune(["t"], strategy="delete")
    assert fresh.get_tuple(config) is None


def test_delete_for_runs_drops_those_runs_and_keeps_the_rest_readable(open_memory: Callable[[], Memory]) -> None:
    saver = LocalMemorySaver(open_memory(), user_id="u")
    graph = _graph(saver)
    config: RunnableConfig = {"configurable": {"thread_id": "t"}}
    runs = [uuid.uuid4() for _ in range(4)]
    for n, run_id in enumerate(runs):
        graph.invoke(
            {"messages": [HumanMessage(f"turn {n}", id=f"h{n}")]}, {**config, "metadata": {"run_id": str(run_id)}}
        )
    listed = list(saver.list(config))
    kept = [_normal(found) for found in listed if str(found.metadata.get("run_id")) != str(runs[1])]
    assert len(kept) < len(listed)
    saver.delete_for_runs([str(runs[1])])
    fresh = LocalMemorySaver(open_memory(), user_id="u")
    assert [_normal(found) for found in fresh.list(config)] == kept
    assert len(fresh.get_tuple(config).checkpoint["channel_values"]["messages"]) == 8


def test_ttl_sweeps_idle_threads_and_a_read_refreshes(open_memory: Callable[[], Memory]) -> None:
    saver = LocalMemorySaver(open_memory(), user_id="u", ttl=1.0)
    idle, read, fresh = (_talk(saver, name, 1) for name in ("idle", "read", "fresh"))
    later = time.time() + 50  # 50 s on: nothing expired yet
    assert saver._run(saver._sweep_op(later)) == 0
    # The threads' last write is "now"; make "idle" and "read" look 2 minutes old by sweeping from the future,
    # after "read" was read (a read refreshes the thread: it counts as activity at the time of reading).
    saver.get_tuple(read)
    swept = saver._run(saver._sweep_op(time.time() + 61))
    assert swept == 3  # all three are idle for 61 s: a read refreshes by the clock of the read
    for config in (idle, read, fresh):
        assert saver.get_tuple(config) is None
    with pytest.raises(InvalidInputError):
        LocalMemorySaver(open_memory(), user_id="u", ttl=0)


def test_a_read_moves_the_expiry_on(open_memory: Callable[[], Memory], monkeypatch: pytest.MonkeyPatch) -> None:
    import langchain_local_ai_memory._checkpointer as checkpointer

    saver = LocalMemorySaver(open_memory(), user_id="u", ttl=1.0)
    read, idle = _talk(saver, "read", 1), _talk(saver, "idle", 1)
    start = time.time()
    monkeypatch.setattr(checkpointer.time, "time", lambda: start + 45)  # 45 s later, "read" is read
    saver.get_tuple(read)
    assert saver._run(saver._sweep_op(start + 75)) == 1  # 75 s: "idle" expired, "read" (read 30 s ago) not
    assert saver.get_tuple(idle) is None
    assert saver.get_tuple(read) is not None
    no_refresh = LocalMemorySaver(saver.memory, user_id="u", ttl=1.0, refresh_on_read=False)
    monkeypatch.setattr(checkpointer.time, "time", lambda: start + 200)
    no_refresh.get_tuple(read)  # does not refresh
    assert no_refresh._run(no_refresh._sweep_op(start + 200)) == 1


def _log_bytes(memory: Memory, root: Path, thread: str) -> int:
    """The bytes the thread's checkpoint logs really take: file sizes, or row bytes in PostgreSQL."""
    runtime: Any = memory.runtime
    if hasattr(runtime, "db"):
        import psycopg

        schema = runtime.db.settings.schema
        with psycopg.connect(runtime.db.settings.url) as conn:
            row = conn.execute(
                f"SELECT coalesce(sum(octet_length(body)), 0) FROM {schema}.plan_steps WHERE session_id = %s",
                (thread,),
            ).fetchone()
        return int(row[0])
    return sum(path.stat().st_size for path in (root / "memory" / "plans" / f"u_{thread}").glob("lg-*.jsonl"))


def test_show_and_sessions_count_a_thread_and_its_true_bytes(open_memory: Callable[[], Memory], tmp_path: Path) -> None:
    memory = open_memory()
    saver = LocalMemorySaver(memory, user_id="u")
    config = _talk(saver, "t", 7)
    report = memory.show("u", "t")
    listed = len(list(saver.list(config)))
    assert report.langgraph.checkpoints == listed == 21  # input, question, reply per turn
    assert report.langgraph.messages == 14
    assert report.langgraph.namespaces == 1
    real = _log_bytes(memory, tmp_path, "t")
    assert report.langgraph.bytes == real > 7 * 500
    assert report.to_dict()["langgraph"]["messages"] == 14
    (user,) = memory.users()
    (session,) = user.sessions
    assert session.size >= real  # the session's size counts its checkpoint logs


def test_apply_retention_keeps_the_newest_per_thread_exactly(open_memory: Callable[[], Memory]) -> None:
    memory = open_memory()
    saver = LocalMemorySaver(memory, user_id="u")
    config = _talk(saver, "t", 6)
    other = _talk(saver, "o", 1)
    newest = [_normal(found) for found in saver.list(config)][:4]
    before = memory.show("u", "t").langgraph
    report = memory.apply_retention(keep_last=4)
    assert report.sessions == [("u", "t")]
    assert report.checkpoints_removed == before.checkpoints - 4
    assert report.bytes_after < report.bytes_before
    fresh = LocalMemorySaver(open_memory(), user_id="u")
    assert [_normal(found) for found in fresh.list(config)] == newest
    assert len(list(fresh.list(other))) == 3  # a thread with fewer is untouched
    after = memory.show("u", "t").langgraph
    assert (after.checkpoints, after.messages) == (4, 12)
    assert memory.apply_retention(max_age=3600).checkpoints_removed == 0  # all younger than an hour
    assert memory.apply_retention(max_age=0).checkpoints_removed == 7  # all older than now
    with pytest.raises(InvalidInputError):
        memory.apply_retention(keep_last=0)


def test_the_retain_command_prunes_every_session(tmp_path: Path) -> None:
    import json
    import os
    import subprocess
    import sys

    memory = Memory.open(tmp_path, fsync=False)
    saver = LocalMemorySaver(memory, user_id="u")
    _talk(saver, "a", 3)
    _talk(saver, "b", 2)

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "local_ai_memory.cli", *args, "-d", str(tmp_path)]
        return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False, env=dict(os.environ))

    result = cli("retain", "--keep-last", "1", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["checkpoints_removed"] == 9 + 6 - 2
    assert sum(1 for _ in LocalMemorySaver(Memory.open(tmp_path, fsync=False), user_id="u").list(None)) == 2
    assert cli("retain", "--max-age", "soon").returncode != 0
    assert cli("retain").returncode != 0
