"""The kill test of both suites: a writer process is killed (SIGKILL) at random points of a
write loop, and every write it had confirmed must be there when the store is opened again.

A *durable* backend promises that a write that returned is kept, and that a crash never
damages what was stored before (a file rewritten in place, truncated and then written, loses
everything when the process dies in between). Durability after a clean close says nothing
about that, so this test kills.

Each round starts a writer (``multiprocessing`` forkserver: it starts in milliseconds), which
opens the store with the suite's ``opener`` and writes in a loop through the sync methods or
their async twins; after each call returns it appends the write's number to a file with one
unbuffered ``write`` (a confirmation survives the kill). The parent waits for a random number
of confirmations, sleeps a random part of one write's duration (so the kill lands at a random
point *inside* a write, not between two), kills the writer, opens the store itself and checks
every write confirmed so far, in every round. Rounds add up: a later round's crash must not
damage an earlier round's writes either.
"""

from __future__ import annotations

import os
import pickle
import random
import signal
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from local_ai_memory._contracts.knowledge import KnowledgeBackend
from local_ai_memory._contracts.runtime import RuntimeBackend, Scope
from local_ai_memory._shared.naming import user_file_prefix
from local_ai_memory._shared.records import StoredMessage
from local_ai_memory.testing._calls import Calls, Mode
from local_ai_memory.testing._processes import process_context

__all__ = ["KILLS", "check_knowledge", "check_runtime", "kill_rounds", "write_knowledge", "write_runtime"]

KILLS = 10
"""Kills per test (and mode). A backend that rewrites its storage in place spends most of each
write inside the window where a kill destroys it; ten random kills all missing it is about as
likely as a window under a fifth of the write missed ten times (1 in 10)."""
_MAX_CONFIRMED = 30  # a kill comes after 1 to this many confirmed writes of a round
_MAX_WRITES = 20_000  # a writer nobody kills stops by itself
_WAIT = 120.0  # seconds a writer may take to open the store and confirm its writes

Writer = Callable[[Calls, int, int], None]
"""Does write ``number`` of round ``run`` through ``Calls`` (its kind is ``number % kinds``)."""
Checker = Callable[[Any, Sequence[tuple[int, int]]], None]
"""Checks, on a reopened store, that every confirmed ``(run, number)`` write is there."""

# -- the runtime contract: state keys, messages, tool results, step-log entries --------------

_SCOPE = ("killed", "s1")


def write_runtime(api: Calls, run: int, number: int) -> None:
    """One confirmed-write of the runtime loop: a state key, a message, a tool result or a step."""
    scope, tag = Scope.of(*_SCOPE), f"{run}-{number}"
    kind = number % 4
    if kind == 0:
        api.update_state(scope, lambda state: {**state, tag: number})
    elif kind == 1:
        api.append_messages(scope, [StoredMessage(role="user", content=tag)])
    elif kind == 2:
        api.save_tool_result(scope, f"r{tag}", {"id": f"r{tag}", "tool": "t", "content": tag * 20})
    else:
        api.append_plan_steps(scope, "p", [{"w": tag}])


def check_runtime(backend: RuntimeBackend, confirmed: Sequence[tuple[int, int]]) -> None:
    """Every confirmed runtime write is in the reopened store, and the message numbers are gap-free."""
    scope = Scope.of(*_SCOPE)
    state = backend.get_state(scope)
    messages = backend.get_messages(scope)
    contents = {message.content for message in messages}
    steps = {step.get("w") for step in backend.get_plan_steps(scope, "p")}
    lost: list[str] = []
    for run, number in confirmed:
        tag, kind = f"{run}-{number}", number % 4
        if kind == 0 and state.get(tag) != number:
            lost.append(f"state key {tag!r}")
        elif kind == 1 and tag not in contents:
            lost.append(f"message {tag!r}")
        elif kind == 2:
            try:
                payload = backend.load_tool_result(scope, f"r{tag}")
            except Exception as exc:  # reported below with the others
                payload = repr(exc)
            if not isinstance(payload, dict) or payload.get("content") != tag * 20:
                lost.append(f"tool result 'r{tag}' ({str(payload)[:80]})")
        elif kind == 3 and tag not in steps:
            lost.append(f"step {tag!r}")
    _report(lost, len(confirmed))
    seqs = [message.seq for message in messages]
    assert seqs == list(range(len(seqs))), (
        f"after a writer was killed, the message numbers are {seqs[:20]}...: they must stay consecutive from 0"
    )


# -- the knowledge contract: notes, journal appends, a read-modify-written note ---------------

_JOURNAL = ".kit/killed.journal"
_SHARED = "killed_shared.md"


def write_knowledge(api: Calls, run: int, number: int) -> None:
    """One confirmed write of the knowledge loop: a new note, a blob append, an update of one note."""
    tag = f"{run}-{number}"
    kind = number % 3
    if kind == 0:
        api.write_note("knowledge", f"{user_file_prefix('killed')}n{tag}.md", f"note {tag}".encode())
    elif kind == 1:
        api.append_blob(_JOURNAL, f"{tag}\n".encode())
    else:
        api.update_note("knowledge", _SHARED, lambda old: (old or b"") + f"{tag}\n".encode())


def check_knowledge(backend: KnowledgeBackend, confirmed: Sequence[tuple[int, int]]) -> None:
    """Every confirmed knowledge write is in the reopened store."""
    journal = set((backend.read_blob(_JOURNAL) or b"").decode("utf-8", "replace").splitlines())
    shared = set((backend.read_note("knowledge", _SHARED) or b"").decode("utf-8", "replace").splitlines())
    listed = backend.list_notes("knowledge", user_file_prefix("killed"))
    lost: list[str] = []
    for run, number in confirmed:
        tag, kind = f"{run}-{number}", number % 3
        name = f"{user_file_prefix('killed')}n{tag}.md"
        if kind == 0 and (name not in listed or backend.read_note("knowledge", name) != f"note {tag}".encode()):
            lost.append(f"note {name!r}")
        elif kind == 1 and tag not in journal:
            lost.append(f"the append of {tag!r} to blob {_JOURNAL!r}")
        elif kind == 2 and tag not in shared:
            lost.append(f"the update_note of {_SHARED!r} that added {tag!r}")
    _report(lost, len(confirmed))


def _report(lost: list[str], confirmed: int) -> None:
    assert not lost, (
        f"after a writer process was killed (SIGKILL) in the middle of its writes, {len(lost)} of the "
        f"{confirmed} writes it had confirmed (the call had returned) are gone: {', '.join(lost[:8])}"
        f"{' ...' if len(lost) > 8 else ''}. A 'durable' backend keeps every write that returned, and a "
        "crash must never damage what was stored before: write a new file and rename it over the old one, "
        "append, or use one transaction; never truncate and rewrite in place"
    )


# -- the writer process and the rounds -------------------------------------------------------

_WRITERS: dict[str, Writer] = {"runtime": write_runtime, "knowledge": write_knowledge}


def _writer(opener_pickle: bytes, path: list[str], kind: str, mode: Mode, run: int, folder: str) -> None:
    """The child: open the store, then write and confirm until killed."""
    sys.path[:0] = [entry for entry in path if entry not in sys.path]  # where the opener's module is
    fd = os.open(os.path.join(folder, f"confirmed-{run}"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        backend = pickle.loads(opener_pickle)()
        api = Calls(backend, mode)
        write = _WRITERS[kind]
        for number in range(_MAX_WRITES):
            write(api, run, number)
            os.write(fd, f"{number}\n".encode())
    except BaseException:
        Path(folder, f"error-{run}").write_text(traceback.format_exc(), encoding="utf-8")
        raise


def _confirmed(path: Path) -> list[int]:
    """The write numbers confirmed in ``path`` (a torn last line is not a confirmation)."""
    data = path.read_bytes() if path.exists() else b""
    return [int(line) for line in data[: data.rfind(b"\n") + 1].split()]


def _wait_for(path: Path, count: int, process: Any, folder: Path, run: int) -> float:
    """Wait until ``count`` writes are confirmed; return the mean time of one write."""
    deadline, first = time.monotonic() + _WAIT, None
    while True:
        done = len(_confirmed(path))
        now = time.monotonic()
        if done and first is None:
            first = (now, done)
        if done >= count:
            if first is None or done == first[1]:
                return 0.002
            return (now - first[0]) / (done - first[1])
        if not process.is_alive():
            error = folder / f"error-{run}"
            why = error.read_text(encoding="utf-8") if error.exists() else f"exit code {process.exitcode}"
            raise AssertionError(f"the writer process stopped before it was killed:\n{why}")
        if now > deadline:
            raise AssertionError(f"the writer confirmed {done} writes in {_WAIT:g} s, {count} were awaited")
        time.sleep(0.0005)


def kill_rounds(
    opener: Callable[[], Any], kind: str, mode: Mode, folder: Path, check: Checker, kills: int = KILLS
) -> int:
    """Kill a writer of ``kind`` (``"runtime"`` or ``"knowledge"``) ``kills`` times at random
    points, checking after each kill, on the store opened again, every write confirmed so far.
    Returns how many writes were confirmed in all."""
    folder.mkdir(parents=True, exist_ok=True)
    context, chance = process_context(), random.Random()
    opener_pickle, path = pickle.dumps(opener), [entry for entry in sys.path if entry]
    confirmed: list[tuple[int, int]] = []
    for run in range(kills):
        process = context.Process(target=_writer, args=(opener_pickle, path, kind, mode, run, str(folder)), daemon=True)
        process.start()
        try:
            target = folder / f"confirmed-{run}"
            write_time = _wait_for(target, chance.randint(1, _MAX_CONFIRMED), process, folder, run)
            time.sleep(chance.uniform(0, write_time))  # a random point inside the next write
            os.kill(process.pid, signal.SIGKILL)
        finally:
            process.join(30)
            if process.is_alive():  # pragma: no cover - the kill failed
                process.kill()
                process.join(30)
        confirmed += [(run, number) for number in _confirmed(target)]
        try:
            reopened = opener()
        except Exception as exc:
            raise AssertionError(
                f"the store could not be opened after a writer was killed (SIGKILL) in round {run}: {exc!r}; a "
                "'durable' backend must open again after a crash, with every write that returned"
            ) from exc
        try:
            check(reopened, confirmed)
        finally:
            reopened.close()
    return len(confirmed)
