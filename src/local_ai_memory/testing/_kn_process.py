"""The child side of the knowledge suite's cross-process tests: real processes, one job each.

:func:`start` runs a job (a picklable :class:`Job`) in a new Python interpreter, which opens
the store through the suite's ``opener`` (pickled too, so it must be a module-level
callable or a :func:`functools.partial` of one), waits at a file barrier when the job has one,
does its work through the sync methods or their async twins, closes the backend and writes
its result (pickled) to stdout.
"""

from __future__ import annotations

import asyncio
import os
import pickle
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from local_ai_memory.backends import InMemoryRuntimeBackend, KnowledgeBackend, user_file_prefix

__all__ = ["Barrier", "Job", "Twin", "finish", "start"]

BackendFactory = Callable[[], KnowledgeBackend]


class Twin:
    """Calls a method or its async twin (``a`` + name, in its own event loop), per ``mode``.

    The suite runs every test once per mode, so the async twins are held to the same promises
    as the sync methods, without any pytest-asyncio setting."""

    def __init__(self, mode: str) -> None:
        if mode not in ("sync", "async"):
            raise ValueError(f"mode must be 'sync' or 'async', got {mode!r}")
        self.mode = mode

    def __repr__(self) -> str:
        return f"Twin({self.mode!r})"

    def __call__(self, target: object, method: str, *args: Any, **kwargs: Any) -> Any:
        if self.mode == "sync":
            return getattr(target, method)(*args, **kwargs)
        return asyncio.run(getattr(target, f"a{method}")(*args, **kwargs))


@dataclass(frozen=True)
class Barrier:
    """A barrier of files in ``folder``: each party writes ``ready-{n}`` and waits for ``go``,
    which the parent writes once all ``parties`` are ready (so every child starts its writes
    within a millisecond of the others, after interpreter start-up and opening the store)."""

    folder: Path
    parties: int

    def wait(self, party: int, timeout: float = 60.0) -> None:
        (self.folder / f"ready-{party}").write_bytes(b"")
        deadline = time.monotonic() + timeout
        while not (self.folder / "go").exists():
            if time.monotonic() > deadline:
                raise TimeoutError("the barrier never opened")
            time.sleep(0.0005)

    def release(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while sum(1 for p in self.folder.glob("ready-*")) < self.parties:
            if time.monotonic() > deadline:
                raise TimeoutError(f"not all {self.parties} processes reached the barrier")
            time.sleep(0.001)
        (self.folder / "go").write_bytes(b"")


@dataclass(frozen=True)
class Job:
    """What one child process does (``kind``) over the store ``factory`` opens."""

    kind: str
    factory: BackendFactory
    mode: str = "sync"
    user: str = "alice"
    count: int = 0
    barrier: Barrier | None = None
    party: int = 0
    categories: tuple[str, ...] = ("knowledge", "work")
    extra: dict[str, Any] = field(default_factory=dict)


def _memory(backend: KnowledgeBackend, categories: tuple[str, ...]) -> Any:
    from local_ai_memory import Memory, MemoryConfig

    config = MemoryConfig(fsync=False, categories=categories, auto_watch=False)
    return Memory(config, runtime=InMemoryRuntimeBackend(), knowledge=backend)


def _increment(current: bytes | None) -> bytes:
    """One more, slowly: the pause between the read and the write is where an update without
    a lock every process shares loses another process's increment (hit on most turns)."""
    time.sleep(0.001)
    return str(int(current or b"0") + 1).encode()


def _compare_and_swap(backend: KnowledgeBackend, twin: Twin, job: Job) -> tuple[str, str | None]:
    """``("won", new hash)`` or ``("lost", the hash the loser was told)``: through the engine
    (:meth:`Knowledge.write_note` with ``expected_hash``) or the contract (``update_note``)."""
    from local_ai_memory import ConflictError, note_hash
    from local_ai_memory._knowledge.edits import check_expected

    text = f"written by {job.party}"
    try:
        if job.extra.get("engine"):
            knowledge = _memory(backend, job.categories).knowledge
            twin(knowledge, "write_note", job.user, "race", text, expected_hash=job.extra["expected"])
        else:

            def change(current: bytes | None) -> bytes:
                check_expected(current, job.extra["expected"], job.extra["note"])
                return text.encode()

            twin(backend, "update_note", "knowledge", job.extra["note"], change)
    except ConflictError as exc:
        return "lost", exc.current_hash
    return "won", note_hash(text)


def _run(job: Job) -> Any:
    twin = Twin(job.mode)
    backend = job.factory()
    try:
        if job.barrier is not None:
            job.barrier.wait(job.party)
        prefix = user_file_prefix(job.user)
        if job.kind == "write_notes":  # distinct notes of one user, and turns at one shared note
            versions: list[tuple[str, int]] = []
            hot = job.extra["hot"]
            for i in range(job.count):
                twin(backend, "write_note", "knowledge", f"{prefix}n{i}.md", f"{job.user} {i}".encode())
                info = twin(backend, "write_note", "knowledge", hot, f"{job.user} turn {i}".encode())
                versions.append((hot, info.version))
            return versions
        if job.kind == "store_writes":  # notes written through the engine, one unique word each
            knowledge = _memory(backend, job.categories).knowledge
            for i in range(job.count):
                knowledge.write_note(job.user, f"n{i}", f"# Note {i}\n\n{job.extra['word']}{i} shared words")
            return job.count
        if job.kind == "increments":  # read-modify-write turns at one shared counter note
            for _ in range(job.count):
                twin(backend, "update_note", "knowledge", job.extra["note"], _increment)
            return job.count
        if job.kind == "compare_and_swap":  # one conditional write, all parties from the same hash
            return _compare_and_swap(backend, twin, job)
        if job.kind == "search":  # what a freshly started process answers, user after user
            knowledge = _memory(backend, job.categories).knowledge
            answers = {}
            for user in job.extra["users"]:
                found = [c.filename for c in twin(knowledge, "search", job.extra["query"], user, k=20)]
                listed = sorted(twin(backend, "list_notes", job.categories[0], user_file_prefix(user)))
                answers[user] = (found, listed)
            return answers
        raise ValueError(f"unknown job {job.kind!r}")
    finally:
        twin(backend, "close")


def main() -> None:
    """Entry point of a child: the file of a pickled :class:`Job` as argument, its pickled result on stdout."""
    job = pickle.loads(Path(sys.argv[1]).read_bytes())
    result = _run(job)
    sys.stdout.buffer.write(pickle.dumps(result))
    sys.stdout.buffer.flush()


def start(job: Job, folder: Path) -> subprocess.Popen[bytes]:
    """Start ``job`` in a new interpreter that sees this process's import path (the job is
    pickled into a file in ``folder``)."""
    folder.mkdir(parents=True, exist_ok=True)
    job_file = folder / f"job-{job.kind}-{job.party}-{time.monotonic_ns()}.pickle"
    job_file.write_bytes(pickle.dumps(job))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    code = "from local_ai_memory.testing._kn_process import main; main()"
    return subprocess.Popen(
        [sys.executable, "-c", code, str(job_file)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )


def finish(proc: subprocess.Popen[bytes], timeout: float = 120.0) -> Any:
    """Wait for a child started by :func:`start`; its result, or an ``AssertionError`` with its stderr."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"child process hung:\n{err.decode(errors='replace')}") from None
    if proc.returncode != 0:
        raise AssertionError(f"child process failed (exit {proc.returncode}):\n{err.decode(errors='replace')}")
    return pickle.loads(out)
