"""``LocalMemorySaver`` stores list tails, not whole lists: exact against ``InMemorySaver``, and linear.

The differential test drives the same random script through a graph on ``InMemorySaver`` and on
our saver: messages appended, removed with ``RemoveMessage``, earlier messages edited, interrupts
and resumes, forks from old checkpoints (values updated there, and runs continued from there).
Every checkpoint of the thread, read back by a *fresh* saver (no cache of the writer), must
equal the reference's: channel values, step and source, pending writes.
"""

from __future__ import annotations

import contextlib
import json
import operator
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, RemoveMessage
from langchain_core.runnables import RunnableConfig
from langchain_local_ai_memory import LocalMemorySaver
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, Interrupt, interrupt

from local_ai_memory import Memory
from local_ai_memory.backends import Scope
from local_ai_memory.integration import checkpoint_log as _checkpoint_log


class Chat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    tally: Annotated[list[int], operator.add]
    note: str


def _reply(state: Chat) -> dict[str, Any]:
    last = state["messages"][-1] if state["messages"] else None
    text = last.text if last is not None else ""
    if text.startswith("ask"):
        answer = interrupt({"question": text})
        text = f"{text} -> {answer}"
    count = len(state["messages"])
    reply = AIMessage(f"reply {count}: {text} " + "z" * (count * 7 % 300), id=f"ai-{count}-{len(text)}")
    return {"messages": [reply], "tally": [count], "note": f"n{count}"}


def _graph(saver: BaseCheckpointSaver[Any]) -> Any:
    builder = StateGraph(Chat)
    builder.add_node("reply", _reply)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)
    return builder.compile(checkpointer=saver)


Step = tuple[str, int, str]
STEPS = st.lists(
    st.tuples(
        st.sampled_from(["say", "say", "say", "ask", "remove", "edit", "fork", "fork_run"]),
        st.integers(0, 30),
        st.text("abcxyz \x00é", max_size=12),
    ),
    min_size=1,
    max_size=10,
)


def _run(saver: BaseCheckpointSaver[Any], steps: list[Step]) -> None:
    """Play ``steps`` on thread ``t``; a choice that does not apply (nothing to remove) is skipped."""
    graph = _graph(saver)
    config: RunnableConfig = {"configurable": {"thread_id": "t"}}
    for n, (kind, pick, text) in enumerate(steps):
        state = graph.get_state(config)
        messages = state.values.get("messages", []) if state.values else []
        if state.next:  # an interrupt waits: resume it first
            graph.invoke(Command(resume=f"answer {n}"), config)
            continue
        if kind in ("say", "ask"):
            body = ("ask " if kind == "ask" else "say ") + text
            graph.invoke({"messages": [HumanMessage(body, id=f"h-{n}")]}, config)
        elif kind == "remove" and messages:
            graph.update_state(config, {"messages": [RemoveMessage(id=messages[pick % len(messages)].id)]})
        elif kind == "edit" and messages:
            old = messages[pick % len(messages)]
            graph.update_state(config, {"messages": [HumanMessage(f"edited {text}", id=old.id)]})
        elif kind in ("fork", "fork_run"):
            # By content, not by id: checkpoint ids differ between the two runs, and so may their order.
            history = sorted(graph.get_state_history(config), key=_content_key)
            if len(history) < 2:
                continue
            old_config = history[pick % len(history)].config
            if kind == "fork":
                graph.update_state(old_config, {"note": f"fork {n}", "tally": [-n]})
            else:
                graph.invoke({"messages": [HumanMessage(f"from the past {text}", id=f"p-{n}")]}, old_config)


def _content_key(snapshot: Any) -> str:
    writes = sorted(repr(_plain(task.interrupts)) for task in snapshot.tasks)
    return repr((snapshot.metadata.get("step"), _plain(snapshot.values), snapshot.next, writes))


def _plain(value: Any) -> Any:
    if isinstance(value, Interrupt):
        return ("interrupt", value.value)
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, tuple):
        return tuple(_plain(item) for item in value)
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    return value


def _normal(found: Any) -> Any:
    return repr(
        (
            found.config["configurable"]["checkpoint_ns"],
            _plain(found.checkpoint["channel_values"]),
            found.metadata.get("step"),
            found.metadata.get("source"),
            found.parent_config is None,
            sorted((channel, repr(_plain(value))) for _, channel, value in found.pending_writes or []),
        )
    )


def _checkpoints(saver: BaseCheckpointSaver[Any]) -> list[Any]:
    """What the thread holds, without the ids that differ between two runs (so sorted by content);
    each one read by ``get_tuple`` too, which must agree with the listing."""
    listed = list(saver.list({"configurable": {"thread_id": "t"}}))
    for found in listed:
        assert _normal(saver.get_tuple(found.config)) == _normal(found)
    return sorted(_normal(found) for found in listed)


SETTINGS = ("MIN_CHAIN", "SNAPSHOT_MIN", "SNAPSHOT_RATIO", "WINDOW", "WINDOW_SHARE", "WINDOW_MIN")


@contextlib.contextmanager
def _log_settings(**values: Any) -> Iterator[None]:
    """Set the storage constants of the checkpoint log for a while (both savers read them at each call)."""
    saved = {name: getattr(_checkpoint_log, name) for name in SETTINGS}
    for name, value in values.items():
        setattr(_checkpoint_log, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(_checkpoint_log, name, value)


@pytest.fixture(
    params=[
        (0, 0, 1),
        (300, 2000, 2),
        (_checkpoint_log.MIN_CHAIN, _checkpoint_log.SNAPSHOT_MIN, _checkpoint_log.WINDOW),
    ],
    ids=["whole-often-snapshot-every-put", "whole-sometimes-snapshot-sometimes", "default"],
)
def min_chain(request: pytest.FixtureRequest) -> Iterator[int]:
    """How many bytes of tails may pile up before a whole list is written again, and how often a
    snapshot is written (bytes of growth) and how many checkpoints it holds."""
    chain, snapshot_min, window = request.param
    with _log_settings(MIN_CHAIN=chain, SNAPSHOT_MIN=snapshot_min, WINDOW=window):
        yield chain


@pytest.fixture
def snapshot_often() -> Iterator[None]:
    """A snapshot at every put, of the two newest checkpoints: every read in a fresh saver starts from one."""
    with _log_settings(SNAPSHOT_MIN=0, SNAPSHOT_RATIO=0, WINDOW=2):
        yield


def _differential(open_memory: Callable[[], Memory], steps: list[Step]) -> None:
    reference = InMemorySaver()
    _run(reference, steps)
    memory = open_memory()
    try:
        _run(LocalMemorySaver(memory, user_id="u"), steps)
        thread: RunnableConfig = {"configurable": {"thread_id": "t"}}
        # Savers with nothing cached: what a fresh process reads (the snapshot and the log after it).
        latest, expected = LocalMemorySaver(memory, user_id="u").get_tuple(thread), reference.get_tuple(thread)
        assert (latest and _normal(latest)) == (expected and _normal(expected))
        for limit in (1, 3, 50):  # newest first, as many as asked: the same order as the reference's
            found = [_normal(item) for item in LocalMemorySaver(memory, user_id="u").list(thread, limit=limit)]
            assert found == [_normal(item) for item in reference.list(thread, limit=limit)]
        fresh = LocalMemorySaver(memory, user_id="u")  # reads the log with nothing cached
        assert _checkpoints(fresh) == _checkpoints(reference)
    finally:
        memory.close()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=STEPS)
def test_every_checkpoint_equals_in_memory_saver_on_files(tmp_path: Path, min_chain: int, steps: list[Step]) -> None:
    _differential(lambda: Memory.open(tmp_path / uuid.uuid4().hex, fsync=False), steps)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=STEPS)
def test_every_checkpoint_equals_in_memory_saver_on_postgres(
    tmp_path: Path, postgres_url: str, snapshot_often: None, steps: list[Step]
) -> None:
    schema = f"t_{uuid.uuid4().hex[:12]}"
    _differential(lambda: Memory.open(tmp_path / schema, database_url=postgres_url, database_schema=schema), steps)


def _lines(root: Path, user: str = "u", thread: str = "t") -> list[dict[str, Any]]:
    log = root / "memory" / "plans" / f"{user}_{thread}" / "lg-root.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_a_growing_conversation_stores_its_new_messages_only(tmp_path: Path) -> None:
    memory = Memory.open(tmp_path, fsync=False)
    graph = _graph(LocalMemorySaver(memory, user_id="u"))
    config: RunnableConfig = {"configurable": {"thread_id": "t"}}
    sizes = []
    log = tmp_path / "memory" / "plans" / "u_t" / "lg-root.jsonl"
    for n in range(60):
        graph.invoke({"messages": [HumanMessage("question " + "q" * 400, id=f"h{n}")]}, config)
        sizes.append(log.stat().st_size)
    first, last = sizes[9] - sizes[4], sizes[59] - sizes[54]  # bytes of 5 steps, early and late
    assert last < first * 1.5, (first, last)  # flat per step (whole lists every so often included)
    tails = [
        blob
        for line in _lines(tmp_path)
        for blob in line.get("blobs", {}).values()
        if isinstance(blob, dict) and "base" in blob
    ]
    assert len(tails) >= 55
    assert all(len(blob["items"]) == 1 for blob in tails)  # the question, then the reply: one new item each
    # A fresh process reads the whole conversation back.
    again = _graph(LocalMemorySaver(Memory.open(tmp_path, fsync=False), user_id="u")).get_state(config)
    assert len(again.values["messages"]) == 120
    assert again.values["tally"] == [2 * n + 1 for n in range(60)]


@pytest.mark.parametrize("kind", ["checkpoint", "writes"])
def test_a_record_of_a_newer_format_is_refused_not_misread(tmp_path: Path, kind: str) -> None:
    """Of any kind: the test once marked the log's last line, which with LangGraph's background
    writes is sometimes a ``writes`` record, and those were not checked."""
    from local_ai_memory import UnsupportedFormatError

    memory = Memory.open(tmp_path, fsync=False)
    graph = _graph(LocalMemorySaver(memory, user_id="u"))
    config: RunnableConfig = {"configurable": {"thread_id": "t"}}
    graph.invoke({"messages": [HumanMessage("hello", id="h")]}, config)
    log = tmp_path / "memory" / "plans" / "u_t" / "lg-root.jsonl"
    lines = _lines(tmp_path)
    lines[max(n for n, line in enumerate(lines) if line["t"] == kind)]["format"] = 99
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with pytest.raises(UnsupportedFormatError):
        LocalMemorySaver(Memory.open(tmp_path, fsync=False), user_id="u").get_tuple(config)


def test_a_lost_base_is_an_error_not_a_wrong_value(tmp_path: Path) -> None:
    from local_ai_memory import StorageError

    memory = Memory.open(tmp_path, fsync=False)
    graph = _graph(LocalMemorySaver(memory, user_id="u"))
    config: RunnableConfig = {"configurable": {"thread_id": "t"}}
    for n in range(3):
        graph.invoke({"messages": [HumanMessage(f"hello {n}", id=f"h{n}")]}, config)
    log = tmp_path / "memory" / "plans" / "u_t" / "lg-root.jsonl"
    kept = [line for line in _lines(tmp_path) if not _whole_messages(line)]
    log.write_text("".join(json.dumps(line) + "\n" for line in kept))
    with pytest.raises(StorageError):
        LocalMemorySaver(Memory.open(tmp_path, fsync=False), user_id="u").get_tuple(config)


def _whole_messages(line: dict[str, Any]) -> bool:
    blob = line.get("blobs", {}).get("messages")
    return isinstance(blob, dict) and "base" not in blob


CHILD = Path(__file__).parent / "delta_child.py"


def _read_thread(root: Path, database: list[str]) -> list[Any]:
    from delta_child import body, open_memory

    with open_memory(root, database) as memory:  # closed: its pool's threads end here, not in a collection
        found = LocalMemorySaver(memory, user_id="u").get_tuple({"configurable": {"thread_id": "t"}})
    messages = found.checkpoint["channel_values"].get("messages", []) if found else []
    assert [m.content for m in messages] == [body(n) for n in range(len(messages))]  # whole, in order
    return messages


@pytest.mark.parametrize("backend", ["files", "postgres"])
def test_a_delta_write_killed_anywhere_leaves_the_thread_readable_and_resumable(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    """SIGKILL of a real process at random points of its writes (list tails, and the snapshots
    written every few steps: each message is 20 KB); after each, a new saver reads the thread
    (every acknowledged step there, from the snapshot and the log after it) and the next child
    continues it."""
    import random
    import subprocess
    import sys
    import time

    database = [request.getfixturevalue("postgres_url"), f"t_{uuid.uuid4().hex[:12]}"] if backend == "postgres" else []
    rng = random.Random(23)
    acked = 0
    for _ in range(6):
        with (tmp_path / "stderr").open("ab") as errors:
            child = subprocess.Popen([sys.executable, str(CHILD), str(tmp_path), *database], stderr=errors)
        deadline = time.monotonic() + 120
        acks = tmp_path / "acks"
        while not (acks.exists() and len(acks.read_text().split()) > acked + 2):
            assert child.poll() is None, (tmp_path / "stderr").read_text()
            assert time.monotonic() < deadline, "the child made no progress"
            time.sleep(0.02)
        time.sleep(rng.uniform(0, 0.3))
        child.kill()
        child.wait(timeout=30)
        acked = len(acks.read_text().split())
        last_ack = int(acks.read_text().split()[-1])
        assert len(_read_thread(tmp_path, database)) >= last_ack  # nothing acknowledged is lost
    assert acked >= 12
    from delta_child import open_memory

    memory = open_memory(tmp_path, database)
    assert memory.runtime.get_plan_steps(Scope.of("u", "t"), "lg-root-snap")  # the reads started from a snapshot
    memory.close()


def test_a_torn_delta_line_at_any_byte_reads_as_the_step_before(tmp_path: Path) -> None:
    """A write cut at every byte of a delta line: the thread reads as before that write."""
    memory = Memory.open(tmp_path, fsync=False)
    graph = _graph(LocalMemorySaver(memory, user_id="u"))
    config: RunnableConfig = {"configurable": {"thread_id": "t"}}
    for n in range(4):
        graph.invoke({"messages": [HumanMessage(f"hello {n}", id=f"h{n}")]}, config)
    log = tmp_path / "memory" / "plans" / "u_t" / "lg-root.jsonl"
    data = log.read_bytes()
    lines = data.splitlines(keepends=True)
    last_checkpoint = max(i for i, line in enumerate(lines) if b'"t":"checkpoint"' in line)
    assert b'"base"' in lines[last_checkpoint]
    head = b"".join(lines[:last_checkpoint])
    before = LocalMemorySaver(Memory.open(tmp_path, fsync=False), user_id="u")
    log.write_bytes(head)
    expected = _normal(before.get_tuple(config))
    line = lines[last_checkpoint]
    for cut in range(0, len(line), max(1, len(line) // 200)):
        log.write_bytes(head + line[:cut])
        fresh = LocalMemorySaver(Memory.open(tmp_path, fsync=False), user_id="u")
        assert _normal(fresh.get_tuple(config)) == expected
    log.write_bytes(head + line)  # the whole line: the step is there
    assert _normal(LocalMemorySaver(Memory.open(tmp_path, fsync=False), user_id="u").get_tuple(config)) != expected
