"""Real processes for the cross-process and restart tests of the runtime conformance suite.

A test names a task of :data:`TASKS`; :class:`Workers` starts that many fresh processes
(``multiprocessing`` forkserver, or spawn where there is none: nothing of the test's process
is inherited but the pickled arguments and ``sys.path``). Each opens the store with the test
class's *opener* (a picklable callable that returns a backend on the same store), waits at a
barrier so all of them start their work at the same moment, runs the task through
:class:`~._calls.Calls` in the test's mode, and sends back a plain value (or the traceback of
what went wrong).
"""

from __future__ import annotations

import multiprocessing
import queue as queue_module
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from local_ai_memory._contracts.runtime import Erasure, RuntimeBackend, Scope
from local_ai_memory._shared.records import StoredMessage
from local_ai_memory.testing._calls import Calls, Mode

__all__ = ["TASKS", "Opener", "Workers", "process_context"]

Opener = Callable[[], RuntimeBackend]
"""A picklable callable that opens the store under test (e.g. ``functools.partial(MyBackend, path)``)."""

Task = Callable[[Calls, RuntimeBackend, int, Sequence[Any], Any], Any]

_START_TIMEOUT = 120.0  # seconds for every worker to start and open the store


def _scope(args: Sequence[Any]) -> Scope:
    return Scope.of(args[0], args[1])


_CHANGE_PAUSE = 0.001
"""Seconds a racing state change takes: the window between a read and its write, which an
update without a lock shared by every process loses another process's update in."""


def _bump_state(api: Calls, backend: RuntimeBackend, index: int, args: Sequence[Any], barrier: Any) -> None:
    """Read-modify-write the state ``rounds`` times, every worker's round starting together
    (the barrier) and each change taking :data:`_CHANGE_PAUSE`: a counter, and one key of its
    own each round. Without a cross-process lock, the workers read the same state nearly every
    round and all but one update is lost."""
    scope, rounds = _scope(args), int(args[2])

    def bump(state: dict[str, Any], key: str) -> dict[str, Any]:
        time.sleep(_CHANGE_PAUSE)
        return {**state, "n": state.get("n", 0) + 1, key: True}

    for number in range(rounds):
        barrier.wait(_START_TIMEOUT)
        api.update_state(scope, lambda state, key=f"p{index}-{number}": bump(state, key))


def _append_messages(api: Calls, backend: RuntimeBackend, index: int, args: Sequence[Any], barrier: Any) -> list[int]:
    """Append ``rounds`` messages one call at a time, every worker's round starting together
    (the barrier), so a number read outside the write's lock is read by several at once; return
    the numbers given."""
    scope, rounds = _scope(args), int(args[2])
    numbers: list[int] = []
    for number in range(rounds):
        barrier.wait(_START_TIMEOUT)
        numbers += api.append_messages(scope, [StoredMessage(role="user", content=f"{index}:{number}")])
    return numbers


def _pop_messages(api: Calls, backend: RuntimeBackend, index: int, args: Sequence[Any], barrier: Any) -> list[str]:
    """Pop until the log is empty, appending one message of its own every ``every`` pops;
    return the contents popped."""
    scope, every = _scope(args), int(args[2])
    barrier.wait(_START_TIMEOUT)
    popped: list[str] = []
    while (message := api.pop_message(scope)) is not None:
        popped.append(message.content)
        if len(popped) % every == 0 and len(popped) <= 10 * every:
            api.append_messages(scope, [StoredMessage(role="user", content=f"p{index}:{len(popped)}")])
    return popped


def _swap_once(api: Calls, backend: RuntimeBackend, index: int, args: Sequence[Any], barrier: Any) -> str | None:
    """One compare-and-swap from ``v0``, all workers at once: ``None`` if this one won."""
    scope = _scope(args)
    barrier.wait(_START_TIMEOUT)
    found: str | None = api.swap_working_memory(scope, "v0", f"won by {index}")
    return found


def _enter_lock(api: Calls, backend: RuntimeBackend, index: int, args: Sequence[Any], barrier: Any) -> bool:
    """Say (by a file) that this worker is about to take the scope's lock, take it, and return
    whether the holder had already released it (it writes a file just before it does)."""
    scope, trying, released = _scope(args), Path(args[2]), Path(args[3])
    barrier.wait(_START_TIMEOUT)
    trying.write_text("trying")
    with backend.locked(scope):
        return released.exists()


def _snapshot(api: Calls, backend: RuntimeBackend, index: int, args: Sequence[Any], barrier: Any) -> dict[str, Any]:
    """Everything a fresh process sees of one scope: each level, the erasures, the listing."""
    scope, result_id = _scope(args), str(args[2])
    barrier.wait(_START_TIMEOUT)
    try:
        loaded: Any = api.load_tool_result(scope, result_id)
    except Exception as exc:  # the test compares the error's type name
        loaded = type(exc).__name__
    return {
        "state": api.get_state(scope),
        "working": api.get_working_memory(scope),
        "plans": api.get_plans(scope),
        "steps": api.get_plan_steps(scope, "p"),
        "results": sorted(api.list_tool_results(scope)),
        "loaded": loaded,
        "messages": [(message.seq, message.content) for message in api.get_messages(scope)],
        "erasures": [(erasure.user_id, erasure.session_id) for erasure in api.pending_erasures()],
        "listed": [(info.scope.user_id, info.scope.session_id) for info in api.list_scopes()],
    }


def _begin_erasures(api: Calls, backend: RuntimeBackend, index: int, args: Sequence[Any], barrier: Any) -> None:
    """Begin the erasures ``[(user, session or None), ...]`` in this order, then exit."""
    barrier.wait(_START_TIMEOUT)
    for user, session in args:
        api.begin_erasure(Erasure(user, session))


TASKS: dict[str, Task] = {
    "bump_state": _bump_state,
    "append_messages": _append_messages,
    "pop_messages": _pop_messages,
    "swap_once": _swap_once,
    "enter_lock": _enter_lock,
    "snapshot": _snapshot,
    "begin_erasures": _begin_erasures,
}


def _child(opener: Opener, task: str, index: int, mode: Mode, args: Sequence[Any], barrier: Any, out: Any) -> None:
    try:
        backend = opener()
        api = Calls(backend, mode)
        try:
            value = TASKS[task](api, backend, index, args, barrier)
        finally:
            api.close()
            backend.close()
        out.put((index, True, value))
    except BaseException:
        out.put((index, False, traceback.format_exc()))


def process_context() -> Any:
    """``forkserver`` where there is one (a fresh interpreter, started once, that forks each
    worker with the kit's process modules already imported: workers start in milliseconds),
    else ``spawn``."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__, "local_ai_memory.testing._kill"])
    return context


class Workers:
    """``count`` processes running ``task`` against the store ``opener`` opens, started together."""

    def __init__(self, opener: Opener, task: str, count: int, mode: Mode, args: Sequence[Any] = ()) -> None:
        context = process_context()
        self._out = context.Queue()
        # Kept here: a started Process drops its arguments, and a collected barrier unlinks its
        # semaphores before slow-starting children could attach to them.
        self._barrier = barrier = context.Barrier(count)
        self.processes = [
            context.Process(
                target=_child, args=(opener, task, index, mode, tuple(args), barrier, self._out), daemon=True
            )
            for index in range(count)
        ]
        for process in self.processes:
            process.start()

    def results(self, timeout: float = 240.0) -> list[Any]:
        """Each worker's value, by index; a worker's failure is raised as an ``AssertionError``."""
        found: dict[int, Any] = {}
        deadline = time.monotonic() + timeout
        try:
            while len(found) < len(self.processes):
                try:
                    index, ok, value = self._out.get(timeout=0.5)
                except queue_module.Empty:
                    dead = [p.exitcode for p in self.processes if p.exitcode not in (None, 0)]
                    if dead:
                        raise AssertionError(f"a worker process died (exit codes {dead})") from None
                    if time.monotonic() > deadline:
                        raise AssertionError(f"workers still running after {timeout:g} s") from None
                    continue
                if not ok:
                    raise AssertionError(f"worker process {index} failed:\n{value}")
                found[index] = value
        finally:
            self.stop()
        return [found[index] for index in range(len(self.processes))]

    def stop(self) -> None:
        """Wait briefly for the workers to exit, then end those still running."""
        for process in self.processes:
            process.join(10)
            if process.is_alive():
                process.terminate()
                process.join(5)
        self._out.close()
        self._out.join_thread()
