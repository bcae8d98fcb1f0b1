"""``LocalMemorySaver`` snapshots: a fresh process reads the newest checkpoints, not the whole log.

A fresh process (a real child process) reads a thread of many list tails from the snapshot and
the log after it, and answers what ``InMemorySaver`` answers for the same run, on files and on
PostgreSQL. A torn last line after the snapshot, a torn or damaged snapshot, and a snapshot left
over from a log rewritten since are never misread: the reader falls back to the whole log.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_local_ai_memory import LocalMemorySaver
from langgraph.checkpoint.memory import InMemorySaver
from snapshot_child import THREAD, graph, summary, turn
from test_saver_deltas import _log_settings, _normal

from local_ai_memory import Memory
from local_ai_memory.backends import Scope

CHILD = Path(__file__).parent / "snapshot_child.py"
OFTEN = {"SNAPSHOT_MIN": 0, "SNAPSHOT_RATIO": 0, "WINDOW": 6}  # a snapshot at every put, of 6 checkpoints
NEVER = {"SNAPSHOT_MIN": 10**12}


@pytest.fixture(params=["files", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Callable[[], Memory], list[str]]]:
    """Opens the same memory again, and the arguments that name it to a child process."""
    opened: list[Memory] = []
    schema = f"t_{uuid.uuid4().hex[:12]}"
    url = request.getfixturevalue("postgres_url") if request.param == "postgres" else None
    root = tmp_path / "data"

    def open_() -> Memory:
        if url is None:
            memory = Memory.open(root, fsync=False)
        else:
            memory = Memory.open(root, database_url=url, database_schema=schema)
        opened.append(memory)
        return memory

    yield open_, [str(root)] if url is None else [str(root), url, schema]
    for memory in opened:
        memory.close()


def _both(memory: Memory, turns: range, reference: Any) -> None:
    ours = graph(LocalMemorySaver(memory, user_id="u"))
    for n in turns:
        turn(ours, n)
        turn(reference, n)


def _log_length(memory: Memory) -> int:
    return len(memory.runtime.get_plan_steps(Scope.of("u", "t"), "lg-root"))


def test_a_fresh_process_reads_from_the_snapshot_what_the_whole_log_holds(
    backend: tuple[Callable[[], Memory], list[str]],
) -> None:
    open_memory, where = backend
    memory = open_memory()
    reference = graph(InMemorySaver())
    with _log_settings(**OFTEN):
        _both(memory, range(40), reference)
    with _log_settings(**NEVER):  # two turns after the last snapshot: the log goes on past its cursor
        _both(memory, range(40, 42), reference)
    done = subprocess.run(
        [sys.executable, str(CHILD), *where], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["latest"] == summary(reference.get_state(THREAD))
    assert len(found["latest"]["messages"]) == 84
    for limit, history in found["histories"].items():
        assert history == [summary(s) for s in reference.get_state_history(THREAD, limit=int(limit))]
    # get_state read the log from the snapshot's cursor on: a few steps, not the whole log.
    [(given_cursor, restarted, steps)] = found["first_reads"]
    assert given_cursor
    assert not restarted
    assert 0 < steps < _log_length(memory) / 10
    # history(40) goes below the snapshot's 6 checkpoints: the log is read whole, once.
    assert [read for read in found["reads"] if read[1]] == [[False, True, _log_length(memory)]]


def _reads(memory: Memory) -> list[tuple[bool, bool, int]]:
    """Record the saver's ``read_plan_steps`` calls: (given a cursor, whole log answered, steps)."""
    reads: list[tuple[bool, bool, int]] = []
    original = memory.runtime.read_plan_steps

    def counted(scope: Scope, plan_id: str, cursor: str | None = None) -> Any:
        found = original(scope, plan_id, cursor)
        reads.append((cursor is not None, found.restarted, len(found.steps)))
        return found

    memory.runtime.read_plan_steps = counted  # type: ignore[method-assign]
    return reads


def _fresh_latest(tmp_path: Path) -> tuple[Any, list[tuple[bool, bool, int]]]:
    memory = Memory.open(tmp_path, fsync=False)
    reads = _reads(memory)
    try:
        return _normal(LocalMemorySaver(memory, user_id="u").get_tuple(THREAD)), reads
    finally:
        memory.close()


def test_a_torn_line_after_the_snapshot_reads_as_the_step_before(tmp_path: Path) -> None:
    memory = Memory.open(tmp_path, fsync=False)
    with _log_settings(**OFTEN):
        _both(memory, range(20), graph(InMemorySaver()))
    with _log_settings(**NEVER):
        _both(memory, range(20, 21), graph(InMemorySaver()))
    memory.close()
    log = tmp_path / "memory" / "plans" / "u_t" / "lg-root.jsonl"
    lines = log.read_bytes().splitlines(keepends=True)
    last = max(n for n, line in enumerate(lines) if b'"t":"checkpoint"' in line)
    head = b"".join(lines[:last])
    log.write_bytes(head)
    expected, reads = _fresh_latest(tmp_path)
    assert reads[0][:2] == (True, False)  # read from the snapshot on
    line = lines[last]
    for cut in range(0, len(line), max(1, len(line) // 150)):
        log.write_bytes(head + line[:cut])
        found, reads = _fresh_latest(tmp_path)
        assert found == expected
        assert reads[0][:2] == (True, False)  # the torn line is left for later, not read as a step
    log.write_bytes(head + line)
    assert _fresh_latest(tmp_path)[0] != expected  # the whole line: its step is there


def test_a_torn_or_damaged_snapshot_is_passed_over_for_the_whole_log(tmp_path: Path) -> None:
    memory = Memory.open(tmp_path, fsync=False)
    with _log_settings(**OFTEN):
        _both(memory, range(12), graph(InMemorySaver()))
    memory.close()
    snap = tmp_path / "memory" / "plans" / "u_t" / "lg-root-snap.jsonl"
    whole = snap.read_bytes()
    expected, reads = _fresh_latest(tmp_path)
    assert reads[0][:2] == (True, False)
    for cut in range(0, len(whole) - 1, max(1, len(whole) // 60)):  # every cut loses the one record's end
        snap.write_bytes(whole[:cut])
        found, reads = _fresh_latest(tmp_path)
        assert found == expected
        assert reads[0][:2] == (False, True)  # no usable snapshot: the whole log
    snap.write_bytes(whole)
    memory = Memory.open(tmp_path, fsync=False)
    scope = Scope.of("u", "t")
    (record,) = memory.runtime.get_plan_steps(scope, "lg-root-snap")
    values = record["values"]
    assert type(values) is bytes  # the binary form (format 3)
    damages: list[dict[str, Any]] = [
        {"cursor": "not a cursor"},
        {"format": 99},
        {"entries": [{"t": "checkpoint"}]},
        {"entries": 3},
        {"values": values[:-1]},  # the values do not add up to the lengths in the header
        {"values": values + b"x"},
        {"values": "not bytes"},
    ]
    for damage in damages:
        memory.runtime.rewrite_plan_steps(scope, "lg-root-snap", lambda _, damage=damage: [{**record, **damage}])
        found, reads = _fresh_latest(tmp_path)
        assert found == expected
        assert reads[-1][1]  # the answer came from the whole log
    memory.close()


def test_a_snapshot_older_than_a_rewrite_of_its_log_is_never_read(
    backend: tuple[Callable[[], Memory], list[str]],
) -> None:
    """Retention rewrote the log (and emptied the snapshot); a snapshot of the old log put back
    (as a writer that raced the rewrite could leave it) names a position in a log that is gone."""
    open_memory, _ = backend
    memory = open_memory()
    scope = Scope.of("u", "t")
    with _log_settings(**OFTEN):
        _both(memory, range(10), graph(InMemorySaver()))
    old = memory.runtime.get_plan_steps(scope, "lg-root-snap")
    assert old
    saver = LocalMemorySaver(memory, user_id="u")
    saver.delete_for_runs([])  # nothing: no rewrite
    before = _normal(saver.get_tuple(THREAD))
    saver.prune(["t"], strategy="keep_latest")
    assert memory.runtime.get_plan_steps(scope, "lg-root-snap") == []
    memory.runtime.rewrite_plan_steps(scope, "lg-root-snap", lambda _: [dict(step) for step in old])
    fresh_memory = open_memory()
    reads = _reads(fresh_memory)
    fresh = LocalMemorySaver(fresh_memory, user_id="u")
    assert _normal(fresh.get_tuple(THREAD)) == before
    assert reads[0][:2] == (True, True)  # the backend said the cursor's log is gone: read whole
    assert len(list(fresh.list(THREAD))) == 1  # only what the prune kept


def test_a_snapshot_holds_the_conversation_once_and_a_window_within_its_share(tmp_path: Path) -> None:
    """The log rewrites the conversation whole every few steps (a short ``MIN_CHAIN``); a snapshot
    still keeps it once (one whole list and tails), and keeps only as many checkpoints as fit a quarter
    of the values: its size follows what the thread holds, so it adds no fixed block to a young thread."""
    from local_ai_memory.integration import checkpoint_log

    memory = Memory.open(tmp_path, fsync=False)
    reference = graph(InMemorySaver())
    scope = Scope.of("u", "t")
    often = {"MIN_CHAIN": 1500, "SNAPSHOT_MIN": 0, "SNAPSHOT_RATIO": 0, "WINDOW": 1000, "WINDOW_MIN": 0}

    def snapshot() -> tuple[checkpoint_log.Snapshot, checkpoint_log.Namespace, checkpoint_log.Namespace]:
        record = checkpoint_log.Snapshot.of_steps(memory.runtime.get_plan_steps(scope, "lg-root-snap"))
        assert record is not None
        folded = record.fold()
        assert folded is not None
        return record, folded, checkpoint_log.fold_log(memory.runtime.get_plan_steps(scope, "lg-root"))

    with _log_settings(MIN_CHAIN=1500, **NEVER):
        _both(memory, range(29), reference)
    with _log_settings(**often, WINDOW_SHARE=100.0):  # one snapshot of every checkpoint of the log
        _both(memory, range(29, 30), reference)
    record, folded, whole = snapshot()
    assert len(folded.checkpoints) == len(whole.checkpoints)
    wholes = [blob for (channel, _), blob in whole.blobs.items() if channel == "messages" and "base" not in blob]
    assert len(wholes) > 3  # the log did write the conversation whole again and again
    stored = [blob for (channel, _), blob in folded.blobs.items() if channel == "messages"]
    versions = folded.checkpoints[folded.latest][0]["channel_versions"]
    newest = checkpoint_log.resolve(folded.blobs, "messages", versions["messages"])
    assert newest is not None
    assert newest.items is not None
    assert sum(1 for blob in stored if "base" not in blob) == 1
    assert sum(len(blob["items"]) for blob in stored) == len(newest.items)  # every message stored once

    with _log_settings(**often):  # the default share of the values
        _both(memory, range(30, 31), reference)
    record, folded, whole = snapshot()
    # A fresh read sizes the snapshot from its fold: the same figure as walking the record again.
    assert record.size(folded) == checkpoint_log.entry_size(record.to_step()) > 0
    values = checkpoint_log._values_size(folded, folded.latest)
    as_text = checkpoint_log.stored_size  # a value read raw from the binary snapshot, counted as the log stores it
    own = sum(
        len(json.dumps(entry, default=lambda data: "x" * as_text(data)))
        for entry in record.entries
        if entry["t"] in ("checkpoint", "writes")
    )
    assert 2 <= len(folded.checkpoints) < len(whole.checkpoints)
    assert own <= checkpoint_log.WINDOW_SHARE * values * 1.5  # the share, give or take the records' JSON keys

    fresh = graph(LocalMemorySaver(Memory.open(tmp_path, fsync=False), user_id="u"))
    assert summary(fresh.get_state(THREAD)) == summary(reference.get_state(THREAD))
    assert [summary(s) for s in fresh.get_state_history(THREAD, limit=40)] == [
        summary(s) for s in reference.get_state_history(THREAD, limit=40)
    ]


def test_a_step_from_a_snapshot_counts_the_logs_chain(tmp_path: Path) -> None:
    """A value read from a snapshot hands a step the log's chain figures (the snapshot stores its oldest
    list whole, and some of the log's whole lists as tails): so a thread read afresh at every turn
    still writes its conversation whole again once the log's tails outweigh it, and the chain a
    read folds stays no longer than the value, as the log alone would keep it."""
    from local_ai_memory.integration import checkpoint_log

    memory = Memory.open(tmp_path, fsync=False)
    reference = graph(InMemorySaver())
    scope = Scope.of("u", "t")
    often = {**OFTEN, "MIN_CHAIN": 1500}

    def folds() -> tuple[checkpoint_log.Namespace, checkpoint_log.Namespace]:
        record = checkpoint_log.Snapshot.of_steps(memory.runtime.get_plan_steps(scope, "lg-root-snap"))
        assert record is not None
        folded = record.fold()
        assert folded is not None
        return folded, checkpoint_log.fold_log(memory.runtime.get_plan_steps(scope, "lg-root"))

    def tips(folded: checkpoint_log.Namespace) -> list[tuple[int, int]]:
        figures = []
        for checkpoint_id in sorted(folded.checkpoints):
            version = folded.checkpoints[checkpoint_id][0]["channel_versions"].get("messages")
            found = None if version is None else checkpoint_log.resolve(folded.blobs, "messages", version)
            if found is not None and found.items is not None:
                tip = found.tip(version)
                figures.append((tip.chain, tip.whole))
        return figures

    def window_of(log: checkpoint_log.Namespace, snapshot: checkpoint_log.Namespace) -> checkpoint_log.Namespace:
        return checkpoint_log.Namespace({cid: log.checkpoints[cid] for cid in snapshot.checkpoints}, log.blobs)

    def wholes(log: checkpoint_log.Namespace) -> int:
        return sum(1 for (channel, _), blob in log.blobs.items() if channel == "messages" and "base" not in blob)

    with _log_settings(MIN_CHAIN=1500, **NEVER):
        _both(memory, range(12), reference)
    with _log_settings(**often):
        _both(memory, range(12, 13), reference)
    snapshot, log = folds()
    assert len(tips(snapshot)) == len(snapshot.checkpoints) > 1
    assert tips(snapshot) == tips(window_of(log, snapshot))  # the same chain and whole list as the log's
    assert any(chain > 0 for chain, _ in tips(snapshot))  # (tails there: the check can tell)

    before = wholes(log)
    with _log_settings(**often):
        for n in range(13, 40):  # every turn a new saver, which reads the snapshot
            _both(memory, range(n, n + 1), reference)
    snapshot, log = folds()
    assert wholes(log) > before  # written whole again, as the log alone would have it
    assert tips(snapshot) == tips(window_of(log, snapshot))
    for chain, whole in tips(snapshot):
        assert chain <= max(whole, 1500) * 2  # the chain stays bounded by the value (give or take a step)
    fresh = graph(LocalMemorySaver(Memory.open(tmp_path, fsync=False), user_id="u"))
    assert summary(fresh.get_state(THREAD)) == summary(reference.get_state(THREAD))


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    return [text for item in items for text in _strings(item)]


def _as_base64(value: Any) -> Any:
    """``value`` with every ``bytes`` in it as base64 text: a decoded snapshot's entries as the
    format-2 snapshot (JSON) stored them."""
    if type(value) is bytes:
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, list):
        return [_as_base64(item) for item in value]
    if isinstance(value, dict):
        return {key: _as_base64(item) for key, item in value.items()}
    return value


def test_a_snapshot_of_the_old_json_form_reads_the_same_and_the_binary_form_is_written(
    backend: tuple[Callable[[], Memory], list[str]],
) -> None:
    """A thread whose snapshot was written before the binary form (format 2: entries as JSON, values
    base64) reads from it exactly as from the binary one, latest and history; the next snapshot
    written is binary (format 3: one ``bytes`` value, no base64)."""
    from local_ai_memory.integration import checkpoint_log

    open_memory, _ = backend
    memory = open_memory()
    scope = Scope.of("u", "t")
    reference = graph(InMemorySaver())
    with _log_settings(**OFTEN):
        _both(memory, range(30), reference)
    with _log_settings(**NEVER):
        _both(memory, range(30, 32), reference)
    (step,) = memory.runtime.get_plan_steps(scope, "lg-root-snap")
    assert step["format"] == checkpoint_log.SNAPSHOT_FORMAT == 3
    assert type(step["values"]) is bytes
    assert len(step["values"]) > 1000
    assert max(map(len, _strings(step["entries"]))) < 200  # no base64 text left in the JSON header
    binary = checkpoint_log.Snapshot.of_steps([step])
    assert binary is not None

    def fresh() -> tuple[Any, list[Any], list[tuple[bool, bool, int]]]:
        again = open_memory()
        reads = _reads(again)
        saver = LocalMemorySaver(again, user_id="u")
        latest = _normal(saver.get_tuple(THREAD))
        history = [summary(s) for s in graph(saver).get_state_history(THREAD, limit=5)]
        return latest, history, reads

    expected, expected_history, reads = fresh()
    assert reads[0][:2] == (True, False)  # from the snapshot on
    assert expected_history == [summary(s) for s in reference.get_state_history(THREAD, limit=5)]

    old = {"t": "snapshot", "format": 2, "cursor": step["cursor"], "entries": _as_base64(binary.entries)}
    assert "values" not in old
    memory.runtime.rewrite_plan_steps(scope, "lg-root-snap", lambda _: [old])
    (stored,) = memory.runtime.get_plan_steps(scope, "lg-root-snap")
    assert stored["format"] == 2
    assert "values" not in stored
    found, history, reads = fresh()
    assert reads[0][:2] == (True, False)  # the old snapshot was used, not passed over
    assert found == expected
    assert history == expected_history
    assert summary(graph(LocalMemorySaver(open_memory(), user_id="u")).get_state(THREAD)) == summary(
        reference.get_state(THREAD)
    )
    # A put from a process that read the old snapshot writes the next one in the binary form.
    with _log_settings(**OFTEN):
        _both(open_memory(), range(32, 33), reference)
    (step,) = memory.runtime.get_plan_steps(scope, "lg-root-snap")
    assert step["format"] == 3
    assert type(step["values"]) is bytes
    assert summary(graph(LocalMemorySaver(open_memory(), user_id="u")).get_state(THREAD)) == summary(
        reference.get_state(THREAD)
    )
