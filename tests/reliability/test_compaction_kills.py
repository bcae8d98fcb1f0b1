"""A SIGKILL at every step of an owner's index compaction loses no confirmed note (files and PostgreSQL).

A writer process (store A) writes notes of user ``crash`` one at a time and records each one
whose ``write_file`` returned (confirmed). A second store (B, its own view of the same storage)
appends journal lines that A never loads, so A's compaction must fold what is stored, not what
it holds. Then A makes the write that compacts (the journal passes its bound): the note's own
write, then under ``rewrite_blobs`` the read of the stored snapshot and journal, the fold, the
new snapshot, a fresh journal, and the ranker snapshots. The test pauses the writer before the
``k``-th step of that write, deterministically, for ``k = 1, 2, ...`` until the write finishes
without reaching ``k``, and kills it there with SIGKILL:

* files: a step is a primitive of :mod:`local_ai_memory._shared.fs` (open, write, fsync, close,
  rename, folder fsync), paused through its fault-injection seam (:func:`~local_ai_memory._shared.fs.use_syscalls`);
* PostgreSQL: a step is a statement sent to the server, and the moment before each commit.

After each kill a fresh process reads the owner's stored index (snapshot plus journal, as a new
host loads it, before any query could repair it from the notes) and requires every confirmed
note in it at the version stored, then requires each to be found by search.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[2] / "src")

WRITER = textwrap.dedent(
    """
    import json, os, sys, time
    from pathlib import Path
    from local_ai_memory._knowledge import index as index_module
    from local_ai_memory._knowledge.index import journal_bound
    from local_ai_memory._knowledge.store import MemoryStore
    from local_ai_memory._shared import fs
    from local_ai_memory._shared.config import MemoryConfig

    index_module.JOURNAL_MIN = 4  # a compaction every few writes
    kind, where, root, step = sys.argv[1], sys.argv[2], Path(sys.argv[3]), int(sys.argv[4])
    config = MemoryConfig(fsync=True)
    other = MemoryConfig(fsync=True, owner_cache_mb=config.owner_cache_mb + 1)  # its own parts
    steps = []  # what the armed write did, step by step
    armed = [False]

    def pause(what):
        if not armed[0]:
            return
        steps.append(what)
        if len(steps) == step:
            (root / "paused").write_text(what)
            time.sleep(600)  # the test kills us here

    if kind == "files":
        from local_ai_memory._shared.naming import DirectoryGuard
        from local_ai_memory.backends import FileKnowledgeBackend

        class Paused(fs.Syscalls):
            def open_new(self, path):
                folder, name = os.path.split(path)
                pause("open_new " + os.path.basename(folder) + "/" + name.split(".")[1])
                return super().open_new(path)

            def before(self, operation):
                if operation != "open_new":
                    pause(operation)

        seam = fs.use_syscalls(Paused())  # kept: a collected context would restore the old seam
        seam.__enter__()
        first = FileKnowledgeBackend(DirectoryGuard(Path(where)), config)
        second = FileKnowledgeBackend(DirectoryGuard(Path(where)), other)
    else:
        from local_ai_memory.backends import PostgresKnowledgeBackend

        url, schema = where.split("|")
        first = PostgresKnowledgeBackend(url, schema=schema)
        second = PostgresKnowledgeBackend(url, schema=schema)
        real_run = first.run

        def run(what, op, **kwargs):
            def paused():
                sent = None
                while True:
                    try:
                        stmt = op.send(sent)
                    except StopIteration as done:
                        pause(what + ": commit")
                        return done.value
                    pause(what + ": " + stmt.query.as_string(None).split("(")[0][:60])
                    sent = yield stmt
            return real_run(what, paused(), **kwargs)

        first.run = run

    a = MemoryStore(first, config, categories=["knowledge"])
    b = MemoryStore(second, other, categories=["knowledge"])

    def write(store, n):
        store.write_file(f"knowledge/crash_n{n}.md", f"# Note {n}\\n\\nversion tok{n}x words\\n")
        with open(root / "acks", "a") as acks:
            acks.write(f"{n}\\n")

    n = 0
    for _ in range(3):
        write(a, n); n += 1  # A loads the index and holds these
    for _ in range(3):
        write(b, n); n += 1  # lines A never loads
    index = a._owner("crash").index
    while not (index.journal_lines + 1 > journal_bound(len(index.entries) + 1)):
        write(a, n); n += 1
    snapshots = index.writes
    armed[0] = True
    write(a, n)
    armed[0] = False
    assert index.writes == snapshots + 1, "the armed write did not compact"
    print(json.dumps(steps), flush=True)
    """
)

CHECK = textwrap.dedent(
    """
    import json, sys, threading
    from pathlib import Path
    from local_ai_memory._knowledge.index import KnowledgeIndex
    from local_ai_memory._knowledge.store import MemoryStore
    from local_ai_memory._shared.config import MemoryConfig

    kind, where, root = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    if kind == "files":
        from local_ai_memory._shared.naming import DirectoryGuard
        from local_ai_memory.backends import FileKnowledgeBackend
        backend = FileKnowledgeBackend(DirectoryGuard(Path(where)), MemoryConfig())
        backend.recover()
    else:
        from local_ai_memory.backends import PostgresKnowledgeBackend
        url, schema = where.split("|")
        backend = PostgresKnowledgeBackend(url, schema=schema)
    acked = [int(line) for line in (root / "acks").read_text().split()]
    stored = KnowledgeIndex(backend, ("knowledge",), threading.RLock(), "crash").load_stored()
    entries = stored[0] if stored is not None else {}
    unindexed, stale, unfound = [], [], []
    for n in acked:
        name = f"crash_n{n}.md"
        entry = entries.get(("knowledge", name))
        if entry is None:
            unindexed.append(name)
        elif entry.mtime_ns != backend.note_info("knowledge", name).version:
            stale.append(name)
    store = MemoryStore(backend, MemoryConfig(), categories=["knowledge"])
    for n in acked:
        if store.bm25_search(f"tok{n}x", user_id="crash") != [f"crash_n{n}.md"]:
            unfound.append(n)
    print(json.dumps({"acked": len(acked), "unindexed": unindexed, "stale": stale, "unfound": unfound}))
    """
)


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": SRC, "LOCAL_AI_MEMORY_AUTO_WATCH": "false"}


def _kill_at(kind: str, where: str, root: Path, step: int) -> tuple[str | None, list[str]]:
    """Run the writer paused before ``step``; kill it there. Returns what the step was (``None``:
    the armed write finished before reaching it) and, then, every step the write took."""
    root.mkdir(parents=True, exist_ok=True)
    child = subprocess.Popen(
        [sys.executable, "-c", WRITER, kind, where, str(root), str(step)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    paused = root / "paused"
    deadline = time.monotonic() + 120
    while not paused.exists() and child.poll() is None:
        assert time.monotonic() < deadline, "the writer neither paused nor finished"
        time.sleep(0.01)
    if child.poll() is None:
        child.send_signal(signal.SIGKILL)
        _, errors = child.communicate(timeout=30)
        assert child.returncode == -signal.SIGKILL, errors
        return paused.read_text(), []
    out, errors = child.communicate(timeout=30)
    assert child.returncode == 0, errors[-3000:]
    return None, json.loads(out)


def _check(kind: str, where: str, root: Path) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", CHECK, kind, where, str(root)], capture_output=True, text=True, env=_env(), timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout))


def _every_step(kind: str, where_of: Callable[[Path], str], base: Path) -> list[str]:
    """Kill at step 1, 2, ... of the compacting write (a fresh store each time); return the steps."""
    killed: list[str] = []
    for step in range(1, 200):
        root = base / f"step{step}"
        where = where_of(root)
        what, steps = _kill_at(kind, where, root, step)
        if what is None:
            assert len(steps) == step - 1, (steps, killed)
            return steps
        result = _check(kind, where, root)
        assert result["acked"], result
        assert not result["unindexed"], f"killed before {what!r}: confirmed notes left the stored index: {result}"
        assert not result["stale"], f"killed before {what!r}: stored entries of another version: {result}"
        assert not result["unfound"], f"killed before {what!r}: confirmed notes not found: {result}"
        killed.append(what)
    raise AssertionError("the compacting write never finished")


def test_a_kill_at_every_step_of_a_files_compaction_loses_no_confirmed_note(tmp_path: Path) -> None:
    steps = _every_step("files", lambda root: str(root / "data"), tmp_path)
    # The steps covered: the note's atomic write, then the compaction's snapshot and fresh
    # journal (each temp file, write, fsync, close, rename, folder fsync), then the ranker snapshot.
    opened = [step.split(" ", 1)[1] for step in steps if step.startswith("open_new")]
    assert opened[0].startswith("knowledge/crash_n"), steps
    assert opened[1:3] == [".index/crash_index", ".index/crash_index"], steps  # snapshot, then journal
    assert "knowledge/crash_bm25" in opened[3:], steps
    assert steps.count("replace") == 4, steps
    assert steps.count("fsync_dir") == 4, steps


def test_a_kill_at_every_step_of_a_postgres_compaction_loses_no_confirmed_note(
    tmp_path: Path, postgres_url: str
) -> None:
    counter = iter(range(1000))
    steps = _every_step("postgres", lambda root: f"{postgres_url}|t_kill{next(counter)}_{os.getpid()}", tmp_path)
    assert any(step.startswith("rewrite_blobs: SELECT pg_advisory_xact_lock") for step in steps), steps
    assert "rewrite_blobs: commit" in steps, steps
    assert any(step.startswith("write_blob") for step in steps), steps  # the ranker snapshot
