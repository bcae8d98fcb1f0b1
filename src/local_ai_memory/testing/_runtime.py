"""The runtime-backend conformance suite: what every :class:`RuntimeBackend` must do.

Use it from your own test module; it runs with plain pytest (no pytest-asyncio setup)::

    import functools
    import pytest
    from local_ai_memory.testing import RuntimeBackendTests

    class TestMyBackend(RuntimeBackendTests):
        capabilities = frozenset({"cross_process", "durable"})

        @pytest.fixture
        def opener(self, tmp_path):
            return functools.partial(MyBackend, str(tmp_path / "store"))

Every test runs twice, over the sync methods and over their async twins (the ``mode``
parameter, ``"sync"`` or ``"async"``; see :mod:`._calls`). Each test gets a fresh, empty
store: from the ``backend`` fixture if the class gives one, else by calling ``opener()``.

**Capabilities** are what a backend may or may not offer; a test of a capability the class
does not list in :attr:`RuntimeBackendTests.capabilities` is skipped, with the reason:

* ``"cross_process"``: several processes (and hosts) can open the same store at once; every
  read-modify-write, the message numbering and :meth:`RuntimeBackend.locked` then hold across
  them. Tested with real processes (``multiprocessing`` spawn) started together at a barrier.
* ``"durable"``: the store outlives the process: data, and pending erasures, are there after
  a close and a reopen (checked from a fresh process), and a writer process killed (SIGKILL)
  at random points of its writes loses no write that had returned (:mod:`._kill`).

Both need the ``opener`` fixture: a picklable callable (a class or module-level function,
possibly in a :func:`functools.partial`) that opens the SAME store again, here or in a child
process.

The races are sized to fail every run when a lock is missing, not once in a while: threads
and processes start together behind a barrier, and thread races run for a second with a tiny
interpreter switch interval (:func:`sys.setswitchinterval`), so threads interleave inside any
unguarded read-modify-write, many times over. The process races on the message numbering and
the state go in lockstep (every process waits at a barrier before each round) and a state
change takes a millisecond, so a number or a state read outside a lock all processes share is
read by several of them in most rounds.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from local_ai_memory._contracts.runtime import Erasure, PlanSteps, RuntimeBackend, Scope
from local_ai_memory._shared.errors import InvalidInputError, RecordNotFoundError
from local_ai_memory._shared.records import StoredMessage
from local_ai_memory.testing._calls import MODES, Calls, Mode
from local_ai_memory.testing._clock import assert_wall_clock
from local_ai_memory.testing._kill import KILLS, check_runtime, kill_rounds
from local_ai_memory.testing._processes import Opener, Workers

__all__ = ["CROSS_PROCESS", "DURABLE", "RUNTIME_CAPABILITIES", "RuntimeBackendTests"]

CROSS_PROCESS = "cross_process"
DURABLE = "durable"
RUNTIME_CAPABILITIES = frozenset({CROSS_PROCESS, DURABLE})
"""Every capability a runtime backend can claim (see the module docstring)."""

_TEXTS = {
    "empty": "",
    "emoji": "snake 🐍, flag 🇺🇦, family 👩‍👩‍👧 and é composed e\u0301",
    "crlf": "line one\r\nline two\r\n\r\nend\r",
    "lone_cr": "a\rb\r\rc\n\rd",
    "nul": "before\x00after\x00",
    "controls": "\x00\x01\x1f\x7f\u2028\u2029\ufeff tab\there",
}
_TRICKY_USERS = ["bob", "bob_admin", "bo", "b_ob", "50%", "a.b", ".hidden", "x%5Fy"]
_THREADS = 4
# Threads of the timed races: more callers than asyncio's default executor has workers, so in
# async mode the worker threads running the sync methods never wait for work (8 on 2 cores).
_RACERS = min(32, (os.cpu_count() or 1) + 4) + 2
# Thread races run for a while rather than a fixed count: a fast in-process backend then makes
# tens of thousands of tries (its race window is a few instructions wide, hit about once in a
# thousand tries), a slow one with I/O fewer (its window holds the I/O, and is hit at once).
_RACE_SECONDS = 1.0
_MIN_ROUNDS = 50  # per thread, however slow the backend
_MAX_ROUNDS = 20_000  # per thread, to bound what is stored
_PROCESS_ROUNDS = 300  # per process, where processes race freely
# The numbering and state races: this many processes, in lockstep (a barrier before every
# round), so an unguarded read-modify-write is hit in most rounds, not once in a while.
_LOCKSTEP_PROCESSES = 3
_LOCKSTEP_ROUNDS = 30


@contextlib.contextmanager
def _interleaved() -> Iterator[None]:
    """Switch threads as often as the interpreter can, so races show up on every run."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


def _rounds(started: float, done: int) -> bool:
    """Whether a racing thread goes on: at least :data:`_MIN_ROUNDS`, then for :data:`_RACE_SECONDS`."""
    if done < _MIN_ROUNDS:
        return True
    return done < _MAX_ROUNDS and time.monotonic() - started < _RACE_SECONDS


def _parallel(count: int, work: Callable[[int], None]) -> None:
    """Run ``work(0..count-1)`` in threads released together; re-raise the first failure."""
    errors: list[BaseException] = []
    start = threading.Barrier(count)

    def run(index: int) -> None:
        try:
            start.wait(60)
            work(index)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(index,)) for index in range(count)]
    with _interleaved():
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    if errors:
        raise errors[0]


def _output(result_id: str, content: str, tool: str = "t") -> dict[str, Any]:
    """A tool output payload as the engines store it."""
    return {"id": result_id, "tool": tool, "created_at": "2026-01-01T00:00:00+00:00", "content": content}


def _message(content: str, role: str = "user") -> StoredMessage:
    return StoredMessage(role=role, content=content)


def _compact(steps: list[dict[str, Any]]) -> int:
    """The bytes of ``steps`` as compact UTF-8 JSON: what every backend's step-log size is at least."""
    return sum(len(json.dumps(step, ensure_ascii=False, separators=(",", ":")).encode("utf-8")) for step in steps)


def _as_written(steps: list[dict[str, Any]], written: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``steps`` cut to the keys they were appended with: a backend may add keys of its own
    to a step (the file backend adds ``format_version``), but must keep every key it was given."""
    if len(steps) != len(written):
        return steps
    return [{key: step.get(key, "<missing>") for key in mine} for step, mine in zip(steps, written, strict=True)]


def _requires(capability: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Mark a test as needing ``capability``; it is skipped (before any fixture) for a backend without it."""

    def mark(test: Callable[..., None]) -> Callable[..., None]:
        test._requires = capability  # type: ignore[attr-defined]
        return test

    return mark


class RuntimeBackendTests:
    """Subclass, set :attr:`capabilities`, and give a ``backend`` or an ``opener`` fixture."""

    capabilities: ClassVar[frozenset[str]] = frozenset()
    """What the backend under test offers, of :data:`RUNTIME_CAPABILITIES`."""

    # -- fixtures -----------------------------------------------------------------------

    @pytest.fixture(autouse=True)
    def _capability_gate(self, request: pytest.FixtureRequest) -> None:
        """Skip a test of a capability the backend does not claim, before it opens anything."""
        unknown = self.capabilities - RUNTIME_CAPABILITIES
        if unknown:
            pytest.fail(f"unknown capabilities {sorted(unknown)}; known: {sorted(RUNTIME_CAPABILITIES)}")
        needed = getattr(request.function, "_requires", None)
        if needed is not None and needed not in self.capabilities:
            pytest.skip(f"the backend does not claim the {needed!r} capability")

    @pytest.fixture
    def opener(self) -> Opener:
        """A picklable callable opening the store under test (needed for the capabilities)."""
        raise NotImplementedError(
            "give the suite an `opener` fixture (a picklable callable that opens the same store, "
            "e.g. functools.partial(MyBackend, path)) or a `backend` fixture"
        )

    @pytest.fixture
    def backend(self, request: pytest.FixtureRequest) -> Iterator[RuntimeBackend]:
        """A fresh, empty store; by default ``opener()``, closed after the test."""
        opener: Opener = request.getfixturevalue("opener")
        backend = opener()
        yield backend
        backend.close()

    @pytest.fixture(params=MODES)
    def mode(self, request: pytest.FixtureRequest) -> Mode:
        """``"sync"``: call the sync methods; ``"async"``: call their async twins."""
        mode: Mode = request.param
        return mode

    @pytest.fixture
    def api(self, backend: RuntimeBackend, mode: Mode) -> Iterator[Calls]:
        """The backend, called in the test's mode."""
        calls = Calls(backend, mode)
        yield calls
        calls.close()

    def fill(self, api: Calls, scope: Scope, text: str = "x") -> None:
        """Put something at every level of ``scope``."""
        api.update_state(scope, lambda state: {**state, "owner": scope.user_id, "text": text})
        api.swap_working_memory(scope, None, f"notes of {scope.user_id}: {text}")
        api.update_plans(scope, lambda plans: {**plans, "p": {"step": 1, "text": text}})
        api.append_plan_steps(scope, "p", [{"n": 1, "text": text}])
        api.save_tool_result(scope, f"r-{scope.key}", _output(f"r-{scope.key}", "y" * 100 + text))
        api.append_messages(scope, [_message(text)])

    def assert_empty(self, api: Calls, scope: Scope) -> None:
        """``scope`` reads as empty at every level (deleted, never written, or under a pending erasure)."""
        rule = f"{scope.describe()} must read as empty (deleted, or covered by a pending erasure), but"
        assert api.get_state(scope) == {}, f"{rule} get_state returned {api.get_state(scope)!r}"
        assert api.get_working_memory(scope) == "", f"{rule} get_working_memory returned text"
        assert api.get_plans(scope) == {}, f"{rule} get_plans returned {sorted(api.get_plans(scope))}"
        assert api.get_plan_steps(scope, "p") == [], f"{rule} get_plan_steps returned steps"
        hidden = api.read_plan_steps(scope, "p")
        assert (hidden.steps, hidden.restarted) == ([], True), f"{rule} read_plan_steps returned steps"
        assert api.list_tool_results(scope) == {}, f"{rule} list_tool_results lists results"
        assert api.count_tool_results(scope) == 0, f"{rule} count_tool_results is not 0"
        assert api.get_messages(scope) == [], f"{rule} get_messages returned messages"
        with pytest.raises(RecordNotFoundError):
            api.load_tool_result(scope, f"r-{scope.key}")

    # -- across processes and restarts (first: they are the slowest to reach otherwise) ---

    @_requires(CROSS_PROCESS)
    def test_processes_lose_no_state_update(self, opener: Opener, mode: Mode) -> None:
        scope, count, rounds = Scope.of("shared", "s1"), _LOCKSTEP_PROCESSES, _LOCKSTEP_ROUNDS
        with _opened(opener) as backend:
            backend.update_state(scope, lambda state: {"n": 0})
            Workers(opener, "bump_state", count, mode, ("shared", "s1", rounds)).results()
            state = backend.get_state(scope)
        assert state.get("n") == count * rounds, (
            f"update_state lost updates across processes: {count} processes made {count * rounds} read-modify-"
            f"writes, the counter says {state.get('n')}; the contract wants a lock every process shares "
            "(a transaction, a file lock), not one of this process"
        )
        assert {key for key in state if key != "n"} == {
            f"p{index}-{number}" for index in range(count) for number in range(rounds)
        }, "update_state lost keys another process added"

    @_requires(CROSS_PROCESS)
    def test_processes_get_unique_gap_free_message_numbers(self, opener: Opener, mode: Mode) -> None:
        scope, count, rounds = Scope.of("shared", "s1"), _LOCKSTEP_PROCESSES, _LOCKSTEP_ROUNDS
        with _opened(opener) as backend:
            given = Workers(opener, "append_messages", count, mode, ("shared", "s1", rounds)).results()
            stored = backend.get_messages(scope)
        numbers = sorted(number for mine in given for number in mine)
        repeated = sorted(number for number, times in Counter(numbers).items() if times > 1)
        assert numbers == list(range(count * rounds)), (
            f"append_messages gave numbers that repeat or skip across processes (repeated: {repeated[:10]}): "
            "the contract wants consecutive, unique numbers however many processes append, so the next "
            "number must be read and taken under one lock every process shares"
        )
        assert all(mine == sorted(mine) for mine in given), "one process's appends got numbers out of order"
        assert [message.seq for message in stored] == list(range(count * rounds)), (
            "get_messages does not hold every appended message, numbered 0.. without gaps"
        )
        for index, mine in enumerate(given):
            by_seq = {message.seq: message.content for message in stored}
            assert [by_seq[number] for number in mine] == [f"{index}:{n}" for n in range(rounds)], (
                "a message is stored under another append's number"
            )

    @_requires(CROSS_PROCESS)
    def test_processes_pop_each_message_once(self, opener: Opener, mode: Mode) -> None:
        scope = Scope.of("shared", "s1")
        total = _PROCESS_ROUNDS // 2
        with _opened(opener) as backend:
            backend.append_messages(scope, [StoredMessage(role="user", content=str(n)) for n in range(total)])
            popped = Workers(opener, "pop_messages", 2, mode, ("shared", "s1", 7)).results()
            left = backend.get_messages(scope)
        taken = [content for mine in popped for content in mine]
        pushed = {f"p{index}:{count}" for index in range(2) for count in range(7, 71, 7) if count <= len(popped[index])}
        assert left == [], "messages were left after every process popped until empty"
        assert len(taken) == len(set(taken)), "two processes popped the same message"
        assert set(taken) == {str(n) for n in range(total)} | pushed, "a message was lost between pops and appends"

    @_requires(CROSS_PROCESS)
    def test_processes_compare_and_swap_with_one_winner(self, opener: Opener, mode: Mode) -> None:
        scope = Scope.of("shared", "s1")
        with _opened(opener) as backend:
            backend.swap_working_memory(scope, None, "v0")
            found = Workers(opener, "swap_once", 2, mode, ("shared", "s1")).results()
            winners = [index for index, text in enumerate(found) if text is None]
            assert len(winners) == 1, f"{len(winners)} processes won one compare-and-swap"
            assert backend.get_working_memory(scope) == f"won by {winners[0]}"

    @_requires(CROSS_PROCESS)
    def test_locked_excludes_another_process(self, opener: Opener, tmp_path: Path) -> None:
        scope = Scope.of("shared", "s1")
        trying, released = tmp_path / "trying", tmp_path / "released"
        with _opened(opener) as backend:
            with backend.locked(scope):
                workers = Workers(opener, "enter_lock", 1, "sync", ("shared", "s1", str(trying), str(released)))
                _wait_for(trying)
                time.sleep(1.0)  # the other process is trying to take the lock now
                released.write_text("released")
            [waited] = workers.results()
        assert waited, "another process entered locked() while this one held it"

    @_requires(DURABLE)
    def test_data_survives_a_reopen(self, opener: Opener, mode: Mode) -> None:
        scope = Scope.of("alice", "s1")
        with _opened(opener) as backend:
            api = Calls(backend, mode)
            try:
                api.update_state(scope, lambda state: {"texts": _TEXTS})
                api.swap_working_memory(scope, None, _TEXTS["crlf"] + _TEXTS["nul"])
                api.update_plans(scope, lambda plans: {"p": {"text": _TEXTS["lone_cr"]}})
                api.append_plan_steps(scope, "p", [{"n": 0, "text": _TEXTS["nul"]}])
                api.save_tool_result(scope, "r1", _output("r1", _TEXTS["nul"] + _TEXTS["lone_cr"]))
                api.append_messages(scope, [_message(text) for text in _TEXTS.values()])
            finally:
                api.close()
        [seen] = Workers(opener, "snapshot", 1, mode, ("alice", "s1", "r1")).results()
        assert seen["state"] == {"texts": _TEXTS}
        assert seen["working"] == _TEXTS["crlf"] + _TEXTS["nul"]
        assert seen["plans"] == {"p": {"text": _TEXTS["lone_cr"]}}
        assert _as_written(seen["steps"], [{"n": 0, "text": _TEXTS["nul"]}]) == [{"n": 0, "text": _TEXTS["nul"]}]
        assert seen["loaded"] == _output("r1", _TEXTS["nul"] + _TEXTS["lone_cr"])
        assert seen["messages"] == list(enumerate(_TEXTS.values()))
        assert seen["listed"] == [("alice", "s1")]

    @_requires(DURABLE)
    def test_pending_erasure_still_hides_data_after_a_restart(self, opener: Opener, mode: Mode) -> None:
        with _opened(opener) as backend:
            api = Calls(backend, mode)
            try:
                for user in ("bob", "bob_admin"):
                    self.fill(api, Scope.of(user, "s1"))
                api.begin_erasure(Erasure("bob"))
            finally:
                api.close()
        [seen] = Workers(opener, "snapshot", 1, mode, ("bob", "s1", f"r-{Scope.of('bob', 's1').key}")).results()
        assert seen["erasures"] == [("bob", None)], "a pending erasure was forgotten by a restart"
        assert (seen["state"], seen["working"], seen["messages"], seen["results"]) == ({}, "", [], []), (
            "data erased before a restart is readable again after it"
        )
        assert seen["loaded"] == "RecordNotFoundError"
        assert seen["listed"] == [("bob_admin", "s1")]
        with _opened(opener) as backend:
            backend.end_erasure(Erasure("bob"))  # nothing was deleted: the data shows again
            assert backend.get_state(Scope.of("bob", "s1")).get("owner") == "bob", (
                "after end_erasure (nothing deleted) the scope's state must read again: a pending erasure "
                "hides data, ending it without deleting shows it again"
            )

    @_requires(DURABLE)
    def test_erasure_order_survives_a_restart(self, opener: Opener, mode: Mode) -> None:
        begun = [("zoe", None), ("adam", "s2"), ("mia", None), ("adam", None)]
        with _opened(opener):
            Workers(opener, "begin_erasures", 1, mode, begun).results()
        with _opened(opener) as backend:
            assert backend.pending_erasures() == [Erasure(user, session) for user, session in begun]

    @_requires(DURABLE)
    def test_confirmed_writes_survive_a_killed_writer(self, opener: Opener, mode: Mode, tmp_path: Path) -> None:
        """A writer process killed (SIGKILL) at random points of its writes loses none it had
        confirmed, and its crash damages nothing stored before (see :mod:`._kill`)."""
        assert kill_rounds(opener, "runtime", mode, tmp_path / "kills", check_runtime) >= KILLS

    # -- the scope lock -------------------------------------------------------------------

    def test_locked_excludes_another_thread_and_is_reentrant(self, backend: RuntimeBackend) -> None:
        scope = Scope.of("alice", "s1")
        trying, released, entered_while_held = threading.Event(), threading.Event(), []

        def other() -> None:
            trying.set()
            with backend.locked(scope):
                entered_while_held.append(not released.is_set())

        with backend.locked(scope):
            with backend.locked(scope):  # re-entrant in the holding thread
                thread = threading.Thread(target=other)
                thread.start()
                assert trying.wait(30)
                time.sleep(0.5)  # the other thread is trying to take the lock now
            assert entered_while_held == [], "another thread entered locked() while this one held it"
            released.set()
        thread.join(30)
        assert entered_while_held == [False]
        done = threading.Event()

        def reenter() -> None:
            with backend.locked(scope), backend.locked(scope):
                done.set()

        worker = threading.Thread(target=reenter, daemon=True)
        worker.start()
        assert done.wait(30), "locked() is not re-entrant"
        worker.join(30)

    # -- L0 -----------------------------------------------------------------------------

    def test_state_starts_empty_and_round_trips(self, api: Calls) -> None:
        scope = Scope.of("alice", "s1")
        assert api.get_state(scope) == {}
        value = {"texts": _TEXTS, "nested": {"list": [1, 2.5, None, True, -(2**53)]}, _TEXTS["nul"]: "key"}
        assert api.update_state(scope, lambda state: {**state, **value}) == value
        assert api.get_state(scope) == value
        assert api.update_state(scope, lambda state: {}) == {}
        assert api.get_state(scope) == {}

    def test_values_handed_in_or_out_cannot_change_what_is_stored(self, api: Calls) -> None:
        scope = Scope.of("alice", "s1")
        given: dict[str, list[Any]] = {"list": [1]}
        api.update_state(scope, lambda state: given)
        given["list"].append("in")
        api.get_state(scope)["list"].append("out")
        assert api.get_state(scope) == {"list": [1]}
        plan: dict[str, list[Any]] = {"steps": [1]}
        api.update_plans(scope, lambda plans: {"p": plan})
        plan["steps"].append("in")
        api.get_plans(scope)["p"]["steps"].append("out")
        assert api.get_plans(scope) == {"p": {"steps": [1]}}
        step: dict[str, list[Any]] = {"n": [1]}
        api.append_plan_steps(scope, "p", [step])
        step["n"].append("in")
        api.get_plan_steps(scope, "p")[0]["n"].append("out")
        assert _as_written(api.get_plan_steps(scope, "p"), [{"n": [1]}]) == [{"n": [1]}]
        payload: dict[str, Any] = {"content": "abc", "list": [1]}
        api.save_tool_result(scope, "r1", payload)
        payload["list"].append("in")
        api.load_tool_result(scope, "r1")["list"].append("out")
        assert api.load_tool_result(scope, "r1") == {"content": "abc", "list": [1]}

    def test_concurrent_state_updates_lose_nothing(self, api: Calls) -> None:
        scope = Scope.of("alice", "s1")

        done: dict[int, int] = {}

        def bump(index: int) -> None:
            started, key = time.monotonic(), f"t{index}"
            done[index] = 0
            while _rounds(started, done[index]):
                api.update_state(scope, lambda state: {**state, "n": state.get("n", 0) + 1, key: state.get(key, 0) + 1})
                done[index] += 1

        _parallel(_RACERS, bump)
        state = api.get_state(scope)
        assert state["n"] == sum(done.values()), "concurrent read-modify-writes of the state lost updates"
        assert state == {"n": sum(done.values()), **{f"t{index}": count for index, count in done.items()}}

    # -- L1 -----------------------------------------------------------------------------

    def test_working_memory_round_trips_exactly(self, api: Calls) -> None:
        scope = Scope.of("alice", "s1")
        assert api.get_working_memory(scope) == ""
        for text in [*_TEXTS.values(), "".join(_TEXTS.values())]:
            assert api.swap_working_memory(scope, None, text) is None
            assert api.get_working_memory(scope) == text, f"working memory changed {text!r}"

    def test_compare_and_swap_checks_what_it_expects(self, api: Calls) -> None:
        scope = Scope.of("alice", "s1")
        assert api.swap_working_memory(scope, "not there", "x") == ""
        assert api.get_working_memory(scope) == ""
        assert api.swap_working_memory(scope, "", "v0\r\n") is None
        assert api.swap_working_memory(scope, "v0\n", "v1") == "v0\r\n"
        assert api.swap_working_memory(scope, "other", "v1") == "v0\r\n"
        assert api.get_working_memory(scope) == "v0\r\n"
        assert api.swap_working_memory(scope, "v0\r\n", "v1") is None
        assert api.swap_working_memory(scope, None, "v2") is None
        assert api.get_working_memory(scope) == "v2"

    def test_compare_and_swap_has_exactly_one_winner(self, api: Calls) -> None:
        scope = Scope.of("alice", "s1")
        for round_number in range(10):
            start = f"v{round_number}"
            api.swap_working_memory(scope, None, start)
            outcomes: dict[int, str | None] = {}

            def swap(index: int, start: str = start, outcomes: dict[int, str | None] = outcomes) -> None:
                outcomes[index] = api.swap_working_memory(scope, start, f"{start} by {index}")

            _parallel(8, swap)
            winners = [index for index, found in outcomes.items() if found is None]
            assert len(winners) == 1, f"{len(winners)} threads won one compare-and-swap"
            assert api.get_working_memory(scope) == f"{start} by {winners[0]}"
            assert all(found == f"{start} by {winners[0]}" for i, found in outcomes.items() if i != winners[0])

    def test_compare_and_swap_retries_lose_no_update(self, api: Calls) -> None:
        scope = Scope.of("alice", "s1")

        def add_lines(index: int) -> None:
            for line in range(30):
                current = api.get_working_memory(scope)
                while (found := api.swap_working_memory(scope, current, current + f"{index}.{line}\n")) is not None:
                    current = found

        _parallel(_THREADS, add_lines)
        lines = api.get_working_memory(scope).splitlines()
        assert sorted(lines) == sorted(f"{index}.{line}" for index in range(_THREADS) for line in range(30))

    # -- L2 -----------------------------------------------------------------------------

    def test_plans_round_trip_and_a_dropped_plan_loses_its_steps(self, api: Calls) -> None:
        scope = Scope.of("alice", "s1")
        assert api.get_plans(scope) == {}
        plans = {"p1": {"steps": ["a", _TEXTS["emoji"], _TEXTS["lone_cr"]]}, "p2": None}
        assert api.update_plans(scope, lambda current: {**current, **plans}) == plans
        assert api.update_plans(scope, lambda current: None) == plans  # None: keep what is there
        assert api.get_plans(scope) == plans
        api.append_plan_steps(scope, "p2", [{"n": 1}])
        api.append_plan_steps(scope, "p1", [{"n": 1}])
        assert api.update_plans(scope, lambda current: {"p1": current["p1"]}) == {"p1": plans["p1"]}
        assert api.get_plan_steps(scope, "p2") == []
        assert _as_written(api.get_plan_steps(scope, "p1"), [{"n": 1}]) == [{"n": 1}]

    def test_step_logs_keep_order_and_exact_text(self, api: Calls) -> None:
        scope = Scope.of("alice", "s1")
        assert api.get_plan_steps(scope, "p1") == []
        assert api.append_plan_steps(scope, "p1", [{"n": 0, "text": _TEXTS["crlf"]}]) is True
        for number, text in enumerate(_TEXTS.values(), start=1):
            assert api.append_plan_steps(scope, "p1", [{"n": number, "text": text}]) is False
        steps = api.get_plan_steps(scope, "p1")
        assert [step["n"] for step in steps] == list(range(len(_TEXTS) + 1))
        assert [step["text"] for step in steps[1:]] == list(_TEXTS.values())
        api.clear_plan_steps(scope, "p1")
        assert api.get_plan_steps(scope, "p1") == []
        assert api.append_plan_steps(scope, "p1", [{"n": 0}]) is True  # emptied: "held no step before"

    def test_step_logs_are_read_on_from_a_cursor(self, api: Calls) -> None:
        """A reader gets the new steps, or (``restarted``) the whole log; never a wrong part."""
        scope = Scope.of("alice", "s1")

        def check(found: PlanSteps, whole: list[int], new: list[int]) -> None:
            assert [step["n"] for step in found.steps] == (whole if found.restarted else new)

        assert api.append_plan_steps(scope, "p1", [{"n": 0}, {"n": 1, "text": _TEXTS["crlf"]}]) is True
        api.append_plan_steps(scope, "p1", [{"n": 2, "text": _TEXTS["nul"]}])
        first = api.read_plan_steps(scope, "p1")
        assert ([step["n"] for step in first.steps], first.restarted) == ([0, 1, 2], True)
        assert first.steps[2]["text"] == _TEXTS["nul"]
        api.append_plan_steps(scope, "p1", [{"n": 3}, {"n": 4}])
        second = api.read_plan_steps(scope, "p1", first.cursor)
        check(second, [0, 1, 2, 3, 4], [3, 4])
        third = api.read_plan_steps(scope, "p1", second.cursor)
        check(third, [0, 1, 2, 3, 4], [])
        check(api.read_plan_steps(scope, "p1", "not a cursor"), [0, 1, 2, 3, 4], [])
        # Emptied and written anew, longer than before: the old cursor reads the new log whole.
        api.clear_plan_steps(scope, "p1")
        gone = api.read_plan_steps(scope, "p1", third.cursor)
        assert (gone.steps, gone.restarted) == ([], True), "an emptied log must read as [] with restarted=True"
        assert api.append_plan_steps(scope, "p1", [{"n": 10 + n} for n in range(8)]) is True
        again = api.read_plan_steps(scope, "p1", third.cursor)
        assert ([step["n"] for step in again.steps], again.restarted) == (list(range(10, 18)), True), (
            "a cursor from before clear_plan_steps was read on into the new log: a cursor this log never "
            "handed out must read the whole log with restarted=True"
        )
        assert api.read_plan_steps(scope, "other").steps == []

    def test_step_bytes_values_come_back_exactly(self, api: Calls) -> None:
        """A step's top-level ``bytes`` values (a checkpointer's binary snapshot) come back as the
        same bytes, every byte value included (newline, NUL, the escape bytes a line format may
        use), beside JSON values, in appended, read-on and rewritten logs; a step without bytes
        is unchanged."""
        scope = Scope.of("alice", "s1")
        every = bytes(range(256)) * 3
        tricky = b"\x01\x02\x01\x03\n\x01\n\x00\x01\x01\x03\x02"
        written = [
            {"n": 0, "values": every, "text": _TEXTS["nul"], "more": tricky, "empty": b""},
            {"n": 1, "text": _TEXTS["crlf"]},
            {"n": 2, "values": b"\n" * 100},
        ]
        assert api.append_plan_steps(scope, "p1", written[:1]) is True
        first = api.read_plan_steps(scope, "p1")
        api.append_plan_steps(scope, "p1", written[1:])
        assert _as_written(api.get_plan_steps(scope, "p1"), written) == written
        assert all(type(step["values"]) is bytes for step in api.get_plan_steps(scope, "p1") if "values" in step)
        on = api.read_plan_steps(scope, "p1", first.cursor)
        assert _as_written(on.steps, written if on.restarted else written[1:]) == (
            written if on.restarted else written[1:]
        )
        rewritten = api.rewrite_plan_steps(scope, "p1", lambda _: [dict(written[2])])
        assert _as_written(rewritten, written[2:]) == written[2:]
        assert _as_written(api.get_plan_steps(scope, "p1"), written[2:]) == written[2:]

    def test_concurrent_step_appends_are_all_kept_in_order(self, api: Calls) -> None:
        scope = Scope.of("alice", "s1")

        def append(index: int) -> None:
            for number in range(40):
                api.append_plan_steps(scope, "p1", [{"writer": index, "n": number}])

        _parallel(_THREADS, append)
        steps = api.get_plan_steps(scope, "p1")
        assert len(steps) == _THREADS * 40
        for writer in range(_THREADS):
            assert [step["n"] for step in steps if step["writer"] == writer] == list(range(40))

    def test_rewrite_plan_steps_replaces_a_log_whole(self, api: Calls) -> None:
        """``rewrite_plan_steps`` (a checkpointer's retention): ``change`` is given the log as it is
        and its answer becomes the log (``None`` keeps it, ``[]`` empties it); the other logs and
        scopes are untouched, and a cursor handed out before the rewrite reads the new log whole."""
        scope, other = Scope.of("alice", "s1"), Scope.of("alice", "s2")
        written = [{"n": n, "text": text} for n, text in enumerate(_TEXTS.values())]
        api.append_plan_steps(scope, "p1", written)
        api.append_plan_steps(scope, "p2", [{"n": 0}])
        api.append_plan_steps(other, "p1", [{"n": 0}])
        before = api.read_plan_steps(scope, "p1")
        seen: list[list[dict[str, Any]]] = []

        def keep(steps: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
            seen.append(_as_written(steps, written))
            return None

        assert _as_written(api.rewrite_plan_steps(scope, "p1", keep), written) == written
        assert seen
        assert all(steps == written for steps in seen)  # every try (a retry may call it again) saw the log
        assert _as_written(api.get_plan_steps(scope, "p1"), written) == written
        # Longer than before, so a cursor wrongly read on would find steps "after" it.
        new = [{"n": 100 + n, "text": text} for n, text in enumerate([*_TEXTS.values(), _TEXTS["nul"], "end"])]
        assert _as_written(api.rewrite_plan_steps(scope, "p1", lambda steps: [dict(step) for step in new]), new) == new
        assert _as_written(api.get_plan_steps(scope, "p1"), new) == new
        again = api.read_plan_steps(scope, "p1", before.cursor)
        assert again.restarted
        assert [step["n"] for step in again.steps] == [step["n"] for step in new]
        assert [step["n"] for step in api.get_plan_steps(scope, "p2")] == [0]
        assert [step["n"] for step in api.get_plan_steps(other, "p1")] == [0]
        assert api.rewrite_plan_steps(scope, "p1", lambda steps: []) == []
        assert api.get_plan_steps(scope, "p1") == []
        assert api.append_plan_steps(scope, "p1", [{"n": 0}]) is True  # emptied: the next append begins anew

    def test_plan_step_bytes_counts_each_log_of_the_scope(self, api: Calls) -> None:
        """Sizes by plan id (for retention and reports): at least the compact UTF-8 JSON of the
        steps (each backend counts its own encoding), growing with every append, gone or zero
        with the log, and never counting another scope's logs."""
        scope, other = Scope.of("alice", "s1"), Scope.of("alice", "s1x")
        api.update_plans(scope, lambda current: {**current, "p1": {"kind": "test"}, "p2": {"kind": "test"}})
        api.update_plans(other, lambda current: {**current, "p1": {"kind": "test"}})
        assert not any(api.plan_step_bytes(scope).values())
        small = [{"n": 0, "text": "x"}]
        api.append_plan_steps(scope, "p1", small)
        api.append_plan_steps(other, "p1", [{"n": 0, "text": "y" * 20_000}])
        first = api.plan_step_bytes(scope)
        assert first.get("p1", 0) >= _compact(small)
        assert not first.get("p2", 0)
        more = [{"n": 1, "text": _TEXTS["emoji"] * 3}, {"n": 2, "text": _TEXTS["crlf"]}]
        api.append_plan_steps(scope, "p1", more)
        api.append_plan_steps(scope, "p2", small)
        second = api.plan_step_bytes(scope)
        assert second["p1"] >= first["p1"] + _compact(more)
        assert second["p2"] >= _compact(small)
        assert sum(second.values()) < 20_000  # the other scope's 20 KB log is not this scope's
        assert api.plan_step_bytes(other)["p1"] >= 20_000
        api.clear_plan_steps(scope, "p1")
        assert not api.plan_step_bytes(scope).get("p1", 0)

    # -- L3 -----------------------------------------------------------------------------

    def test_tool_results_keep_nul_and_lone_cr(self, api: Calls) -> None:
        scope = Scope.of("alice", "s1")
        for number, text in enumerate([*_TEXTS.values(), "\x00", "\r", "x\x00\ry\r\n\x00"]):
            result_id = f"r{number}"
            payload = _output(result_id, text)
            size = api.save_tool_result(scope, result_id, {**payload, "extra": [text, {text: text}]})
            assert size >= len(text.encode("utf-8"))
            loaded = api.load_tool_result(scope, result_id)
            assert loaded == {**payload, "extra": [text, {text: text}]}, f"tool result changed {text!r}"
            page = api.read_tool_result_page(scope, result_id, 0, len(text) + 1)
            assert (page.content, page.total_chars) == (text, len(text)), f"page of {text!r} differs"

    def test_pages_split_by_characters_not_bytes(self, api: Calls) -> None:
        scope = Scope.of("alice", "s1")
        text = "é🐍x\x00\r" * 100
        api.save_tool_result(scope, "r1", _output("r1", text))
        pieces = []
        offset: int | None = 0
        while offset is not None:
            page = api.read_tool_result_page(scope, "r1", offset, 7)
            pieces.append(page.content)
            offset = page.next_offset
        assert "".join(pieces) == text
        assert all(len(piece) == 7 for piece in pieces[:-1])
        assert api.read_tool_result_page(scope, "r1", 10_000, 5).content == ""

    def test_another_scope_cannot_reach_a_result(self, api: Calls) -> None:
        alice = Scope.of("alice", "s1")
        api.save_tool_result(alice, "r1", {"secret": "alice's"})
        for other in (Scope.of("bob", "s1"), Scope.of("alice", "s2"), Scope.of("alice_s1", "x"), Scope()):
            with pytest.raises(RecordNotFoundError) as denied:
                api.load_tool_result(other, "r1")
            with pytest.raises(RecordNotFoundError) as missing:
                api.load_tool_result(other, "nosuchid")
            assert type(denied.value) is type(missing.value)
            with pytest.raises(RecordNotFoundError):
                api.read_tool_result_page(other, "r1", 0, 10)
            assert api.delete_tool_results(other, ["r1"]) == []
            assert api.list_tool_results(other) == {}
            assert api.count_tool_results(other) == 0
            with pytest.raises(InvalidInputError):
                api.save_tool_result(other, "r1", {"overwrite": True})
        assert api.load_tool_result(alice, "r1") == {"secret": "alice's"}
        assert api.tool_result_exists("r1")

    def test_tool_result_listing_and_idempotent_delete(self, api: Calls) -> None:
        scope = Scope.of("alice", "s1")
        sizes = {f"r{number}": api.save_tool_result(scope, f"r{number}", {"n": number}) for number in range(3)}
        listed = api.list_tool_results(scope)
        assert {name: entry.size for name, entry in listed.items()} == sizes
        assert all(size > 0 for size in sizes.values())
        assert api.count_tool_results(scope) == 3
        assert api.delete_tool_results(scope, ["r1", "r1", "nope"]) == ["r1"]
        assert api.delete_tool_results(scope, ["r1"]) == []
        assert api.delete_tool_results(scope, ["r2", "r0"]) == ["r2", "r0"]
        assert api.delete_tool_results(scope, ["r0", "r2"]) == []
        assert api.list_tool_results(scope) == {}
        assert not api.tool_result_exists("r1")
        with pytest.raises(RecordNotFoundError):
            api.load_tool_result(scope, "r1")

    def test_count_of_tool_results_follows_saves_and_deletes(self, api: Calls) -> None:
        """``count_tool_results`` is what retention's ``max_count`` trusts: it equals the number of
        results ``list_tool_results`` lists after saves, a save replacing an id, and deletes."""
        scope = Scope.of("alice", "s1")

        def agree(when: str, expected: int) -> None:
            counted, listed = api.count_tool_results(scope), len(api.list_tool_results(scope))
            assert counted == listed == expected, (
                f"count_tool_results says {counted} {when}, list_tool_results lists {listed}, {expected} are "
                "stored: the count must be the number of results the scope owns (retention prunes by it)"
            )

        for number in range(4):
            api.save_tool_result(scope, f"r{number}", _output(f"r{number}", "x"))
        agree("after four saves", 4)
        api.save_tool_result(scope, "r1", _output("r1", "replaced"))
        agree("after a save that replaced an id", 4)
        api.delete_tool_results(scope, ["r0", "r2", "missing"])
        agree("after two deletes", 2)
        api.delete_tool_results(scope, ["r1", "r3"])
        agree("after every result was deleted", 0)

    # -- messages -----------------------------------------------------------------------

    def test_messages_round_trip_with_gap_free_numbers(self, api: Calls) -> None:
        scope = Scope.of("alice", "s1")
        texts = list(_TEXTS.values())
        assert api.append_messages(scope, [_message(text) for text in texts]) == list(range(len(texts)))
        stored = api.get_messages(scope)
        assert [message.content for message in stored] == texts, "message content changed"
        assert [message.seq for message in stored] == list(range(len(texts)))
        assert api.compact_messages(scope, 2) == len(texts) - 2
        assert api.append_messages(scope, [_message("after", "assistant")]) == [len(texts)]
        assert [message.seq for message in api.get_messages(scope)] == [len(texts) - 2, len(texts) - 1, len(texts)]
        assert api.compact_messages(scope, 0) == 3
        assert api.get_messages(scope) == []
        assert api.append_messages(scope, [_message("later")]) == [len(texts) + 1]  # never reused
        assert api.clear_messages(scope) is True
        assert api.get_messages(scope) == []
        assert api.append_messages(scope, [_message("anew"), _message("again")]) == [0, 1]  # cleared: from 0
        assert api.append_messages(scope, []) == []
        assert api.clear_messages(Scope.of("alice", "never")) is False

    def test_pop_message_takes_the_newest_and_gives_its_number_back(self, api: Calls) -> None:
        scope, other = Scope.of("alice", "s1"), Scope.of("alice", "s2")
        assert api.pop_message(scope) is None
        api.append_messages(other, [_message("theirs")])
        raw = '{"type": "function_call", "arguments": "{\\"a\\": 1}", "x": "\\u00e9\\u0000"}'
        api.append_messages(scope, [_message("one"), _message("two").model_copy(update={"raw": raw})])
        popped = api.pop_message(scope)
        assert popped is not None
        assert (popped.seq, popped.content, popped.raw) == (1, "two", raw), "the raw item changed"
        assert api.append_messages(scope, [_message("three")]) == [1], "the popped number was not given back"
        assert [message.content for message in api.get_messages(scope)] == ["one", "three"]
        assert api.compact_messages(scope, 0) == 2
        assert api.append_messages(scope, [_message("four")]) == [2]
        popped = api.pop_message(scope)
        assert popped is not None
        assert popped.seq == 2
        assert api.pop_message(scope) is None
        assert api.append_messages(scope, [_message("five")]) == [2], "pop after compaction reused a dropped number"
        assert [message.content for message in api.get_messages(other)] == ["theirs"], "pop reached another scope"

    def test_last_messages_are_the_tail_of_the_log(self, api: Calls) -> None:
        scope, other = Scope.of("alice", "s1"), Scope.of("alice", "s2")
        assert api.get_last_messages(scope, 5) == []
        api.append_messages(other, [_message("theirs")])
        big = "x" * 9000  # 40 of them outgrow a first read of the file backend's tail (64 KB)
        api.append_messages(scope, [_message(f"{number} {big if number % 2 else ''}") for number in range(40)])
        every = api.get_messages(scope)
        for limit in (1, 2, 7, 20, 39, 40, 41, 1000):
            assert api.get_last_messages(scope, limit) == every[-limit:], f"the last {limit} differ"
        assert api.get_last_messages(scope, 0) == []
        api.pop_message(scope)
        api.compact_messages(scope, 10)
        api.append_messages(scope, [_message("after")])
        every = api.get_messages(scope)
        assert [message.seq for message in api.get_last_messages(scope, 3)] == [37, 38, 39]
        assert api.get_last_messages(scope, 50) == every
        api.compact_messages(scope, 0)
        assert api.get_last_messages(scope, 3) == []
        assert [message.content for message in api.get_last_messages(other, 3)] == ["theirs"]

    def test_concurrent_pops_take_each_message_once(self, api: Calls) -> None:
        scope = Scope.of("alice", "s1")
        api.append_messages(scope, [_message(str(number)) for number in range(40)])
        taken: list[str] = []
        lock = threading.Lock()

        def pop(_index: int) -> None:
            while (popped := api.pop_message(scope)) is not None:
                with lock:
                    taken.append(popped.content)

        _parallel(_RACERS, pop)
        assert sorted(taken, key=int) == [str(number) for number in range(40)], "a message was popped twice or lost"
        assert api.append_messages(scope, [_message("anew")]) == [0]

    def test_concurrent_appends_are_ordered_and_gap_free(self, api: Calls) -> None:
        scope = Scope.of("alice", "s1")
        given: dict[int, list[int]] = {}

        def append(index: int) -> None:
            started, mine = time.monotonic(), given.setdefault(index, [])
            while _rounds(started, len(mine)):
                mine += api.append_messages(scope, [_message(f"{index}:{len(mine)}")])

        _parallel(_RACERS, append)
        total = sum(len(mine) for mine in given.values())
        numbers = sorted(number for mine in given.values() for number in mine)
        assert numbers == list(range(total)), "message numbers repeat or skip"
        records = api.get_messages(scope)
        assert [record.seq for record in records] == list(range(total))
        for writer, mine in given.items():
            assert [record.content for record in records if record.content.startswith(f"{writer}:")] == [
                f"{writer}:{number}" for number in range(len(mine))
            ]

    # -- isolation and listing ------------------------------------------------------------

    def test_scopes_with_tricky_ids_never_see_each_other(self, api: Calls) -> None:
        pairs = [(user, session) for user in _TRICKY_USERS for session in ("s", "s_1", "1")]
        pairs += [("a_b", "c"), ("a", "b_c")]
        for number, (user, session) in enumerate(pairs):
            scope = Scope.of(user, session)
            api.update_state(scope, lambda state, owner=[user, session]: {"owner": owner})
            api.swap_working_memory(scope, None, f"{user}/{session}")
            api.update_plans(scope, lambda plans, owner=[user, session]: {"p": owner})
            api.save_tool_result(scope, f"r{number}", {"owner": [user, session]})
            api.append_messages(scope, [_message(f"{user}/{session}")])
        for number, (user, session) in enumerate(pairs):
            scope = Scope.of(user, session)
            assert api.get_state(scope) == {"owner": [user, session]}
            assert api.get_working_memory(scope) == f"{user}/{session}"
            assert api.get_plans(scope) == {"p": [user, session]}
            assert list(api.list_tool_results(scope)) == [f"r{number}"], f"{scope.describe()} lists others' results"
            assert [message.content for message in api.get_messages(scope)] == [f"{user}/{session}"]
        listed = [(info.scope.user_id, info.scope.session_id) for info in api.list_scopes()]
        assert sorted(listed) == sorted(pairs)
        assert [info.scope.key for info in api.list_scopes()] == sorted(Scope.of(*pair).key for pair in pairs)

    def test_hostile_ids_are_refused_before_storage(self, api: Calls) -> None:
        for user in ("../x", "", "a/b", "nul\x00", "..", "x" * 10_000):
            with pytest.raises(InvalidInputError):
                Scope.of(user, "s")
            with pytest.raises(InvalidInputError):
                Erasure(user)
        assert api.list_scopes() == []
        assert api.pending_erasures() == []

    def test_what_makes_a_scope_hold_data(self, api: Calls) -> None:
        levels: dict[str, Callable[[Scope], object]] = {
            "state": lambda scope: api.update_state(scope, lambda state: {"k": 1}),
            "working": lambda scope: api.swap_working_memory(scope, None, "wörk"),
            "plan": lambda scope: api.update_plans(scope, lambda plans: {"p": None}),
            "result": lambda scope: api.save_tool_result(scope, "r1", _output("r1", "é" * 50)),
            "message": lambda scope: api.append_messages(scope, [_message("hi")]),
        }
        reader = Scope.of("reader", "s")
        self.assert_empty(api, reader)
        api.get_plans(reader)
        steps_only = Scope.of("steps", "s")
        api.append_plan_steps(steps_only, "p", [{"n": 1}])
        assert api.list_scopes() == [], "reads or a step log alone made a scope hold data"
        for name, write in levels.items():
            write(Scope.of(name, "s"))
        listed = {info.scope.user_id: info for info in api.list_scopes()}
        assert sorted(listed) == sorted(levels), (
            f"list_scopes lists {sorted(listed)}: a scope holds data when it has a state, working memory, a plan, "
            f"a tool result or a message ({sorted(levels)}), and reads or a step log alone do not count"
        )
        assert listed["result"].size >= api.list_tool_results(Scope.of("result", "s"))["r1"].size
        assert listed["working"].size >= len("wörk".encode())
        assert all(info.size >= 0 and info.modified > 0 for info in listed.values())

    def test_times_are_wall_clock_seconds_since_the_epoch(self, api: Calls) -> None:
        """A result's save time and a scope's last change are ``time.time()`` of the write: retention
        compares save times with ``time.time()``, ``show`` and ``sessions`` print them as dates."""
        scope = Scope.of("alice", "s1")
        before = time.time()
        api.save_tool_result(scope, "r1", _output("r1", "x"))
        api.update_state(scope, lambda state: {"k": 1})
        after = time.time()
        saved = api.list_tool_results(scope)["r1"].saved_at
        assert_wall_clock(saved, before, after, "list_tool_results(scope)[id].saved_at (when the result was saved)")
        [info] = api.list_scopes()
        assert_wall_clock(info.modified, before, after, "list_scopes()[i].modified (the scope's last change)")

    def test_a_cursor_of_another_log_reads_the_whole_log(self, api: Calls) -> None:
        """A cursor handed out for another plan's or scope's log is not this log's: reading on from
        it gives the whole log, ``restarted``, never the steps after a position it does not name."""
        scope, other = Scope.of("alice", "s1"), Scope.of("alice", "s2")
        api.append_plan_steps(scope, "p1", [{"n": n} for n in range(5)])
        api.append_plan_steps(scope, "p2", [{"n": 10 + n} for n in range(2)])  # shorter: its cursor points inside p1
        api.append_plan_steps(other, "p1", [{"n": 20 + n} for n in range(8)])  # longer: past p1's end
        for label, foreign in (
            ("another plan's", api.read_plan_steps(scope, "p2").cursor),
            ("another scope's", api.read_plan_steps(other, "p1").cursor),
        ):
            found = api.read_plan_steps(scope, "p1", foreign)
            assert (found.restarted, [step.get("n") for step in found.steps]) == (True, list(range(5))), (
                f"read_plan_steps trusted {label} cursor: a cursor this log never handed out must read the "
                f"whole log with restarted=True, got {[step.get('n') for step in found.steps]} "
                f"(restarted={found.restarted})"
            )

    # -- lifecycle ----------------------------------------------------------------------

    def test_delete_scope_removes_every_level_and_nothing_else(self, api: Calls) -> None:
        gone = Scope.of("bob", "s1")
        kept = [Scope.of("bob", "s2"), Scope.of("bob_admin", "s1"), Scope.of("bob", "s1_x")]
        for scope in (gone, *kept):
            self.fill(api, scope)
        result_id = f"r-{gone.key}"
        floor = api.list_tool_results(gone)[result_id].size + len(api.get_working_memory(gone).encode("utf-8"))
        assert api.delete_scope(gone) >= floor
        self.assert_empty(api, gone)
        assert not api.tool_result_exists(result_id)
        assert api.delete_scope(gone) == 0
        assert api.delete_scope(Scope.of("never", "s")) == 0
        for scope in kept:
            assert api.get_state(scope).get("owner") == scope.user_id, (
                f"delete_scope of {gone.describe()} changed the state of {scope.describe()}: it must delete "
                "that scope only (keys compared whole: bob is not bob_admin, s1 is not s1_x)"
            )
            assert list(api.list_tool_results(scope)) == [f"r-{scope.key}"]
            assert len(api.get_messages(scope)) == 1
            assert _as_written(api.get_plan_steps(scope, "p"), [{"n": 1, "text": "x"}]) == [{"n": 1, "text": "x"}]
        assert [info.scope for info in api.list_scopes()] == sorted(kept, key=lambda scope: scope.key)
        api.update_state(gone, lambda state: {"back": True})  # a deleted scope can be used again, from scratch
        assert api.get_state(gone) == {"back": True}
        assert api.append_messages(gone, [_message("new")]) == [0]

    def test_pending_erasure_hides_what_it_covers(self, api: Calls) -> None:
        for user, session in [("bob", "s1"), ("bob", "s2"), ("bob_admin", "s1"), ("bo", "s1")]:
            self.fill(api, Scope.of(user, session))
        whole_user = Erasure("bob")
        api.begin_erasure(whole_user)
        assert api.pending_erasures() == [whole_user]
        for session in ("s1", "s2"):
            self.assert_empty(api, Scope.of("bob", session))
        listed = [(info.scope.user_id, info.scope.session_id) for info in api.list_scopes()]
        assert listed == [("bo", "s1"), ("bob_admin", "s1")], "an erased scope is listed, or a neighbour is not"
        with_erased = {(info.scope.user_id, info.scope.session_id) for info in api.list_scopes(include_erased=True)}
        assert {("bob", "s1"), ("bob", "s2")} <= with_erased
        for other in (Scope.of("bob_admin", "s1"), Scope.of("bo", "s1")):
            assert api.get_state(other).get("owner") == other.user_id, (
                f"an erasure of user 'bob' hid the state of {other.describe()}: an erasure covers its own "
                "user's scopes only (user ids compared whole)"
            )
            assert api.load_tool_result(other, f"r-{other.key}").get("id") == f"r-{other.key}"
        api.begin_erasure(whole_user)  # beginning again keeps one record
        assert api.pending_erasures() == [whole_user]
        api.end_erasure(whole_user)
        api.end_erasure(whole_user)  # ending twice is harmless
        assert api.pending_erasures() == []
        assert api.get_state(Scope.of("bob", "s1")).get("owner") == "bob", (
            "after end_erasure (nothing deleted yet) the scope's state must read again"
        )

        one_session = Erasure("bob", "s2")
        api.begin_erasure(one_session)
        self.assert_empty(api, Scope.of("bob", "s2"))
        assert api.get_state(Scope.of("bob", "s1")).get("owner") == "bob", (
            "an erasure of one session ('bob', 's2') hid another session of the user"
        )
        assert [info.scope.key for info in api.list_scopes()] == sorted(
            Scope.of(*pair).key for pair in [("bob", "s1"), ("bob_admin", "s1"), ("bo", "s1")]
        )
        api.end_erasure(one_session)

    def test_a_write_under_a_pending_erasure_is_kept_hidden(self, api: Calls) -> None:
        """A write to a scope a pending erasure covers is accepted (never an error), stays hidden
        like the rest of the scope while the erasure is pending, and reads again once it ends
        without a delete (the erasure's own deletes remove it with the rest)."""
        scope = Scope.of("bob", "s1")
        api.begin_erasure(Erasure("bob"))
        api.update_state(scope, lambda state: {**state, "late": True})
        api.append_messages(scope, [_message("late")])
        api.save_tool_result(scope, "late", _output("late", "late"))
        self.assert_empty(api, scope)
        assert api.list_scopes() == [], "a scope written under a pending erasure was listed"
        api.end_erasure(Erasure("bob"))
        assert api.get_state(scope) == {"late": True}, (
            "a write made under a pending erasure was lost: it is stored, hidden until the erasure ends"
        )
        assert [message.content for message in api.get_messages(scope)] == ["late"]
        assert api.count_tool_results(scope) == 1

    def test_pending_erasures_are_listed_oldest_first(self, api: Calls) -> None:
        begun = [Erasure("zoe"), Erasure("adam", "s2"), Erasure("mia"), Erasure("adam"), Erasure("bob", "a")]
        for erasure in begun:
            api.begin_erasure(erasure)
        assert api.pending_erasures() == begun, "pending erasures are not in the order they were begun"
        api.end_erasure(Erasure("mia"))
        api.end_erasure(Erasure("nobody"))  # a missing record is not an error
        assert api.pending_erasures() == [begun[0], begun[1], begun[3], begun[4]]
        api.begin_erasure(Erasure("mia"))
        assert api.pending_erasures() == [begun[0], begun[1], begun[3], begun[4], Erasure("mia")]

    # -- last: the slowest --------------------------------------------------------------

    def test_tool_results_round_trip_large_and_exact(self, api: Calls) -> None:
        scope = Scope.of("alice", "s1")
        big = "0123456789abcdef\r\n🐍" * (50 * 1024 * 1024 // 22 + 1)  # 22 UTF-8 bytes a repeat: over 50 MB
        size = api.save_tool_result(scope, "big", _output("big", big))
        assert size >= len(big.encode("utf-8")), "the bytes stored are fewer than the output's UTF-8 bytes"
        assert api.list_tool_results(scope)["big"].size == size
        page = api.read_tool_result_page(scope, "big", 0, len(big) + 10)
        assert page.content == big
        assert (page.total_chars, page.next_offset) == (len(big), None)
        tail = api.read_tool_result_page(scope, "big", len(big) - 3, 10)
        assert tail.content == big[-3:]


@contextlib.contextmanager
def _opened(opener: Opener) -> Iterator[RuntimeBackend]:
    """The store opened by ``opener`` in this process, closed afterwards."""
    backend = opener()
    try:
        yield backend
    finally:
        backend.close()


def _wait_for(path: Path, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"{path.name} never appeared")
        time.sleep(0.01)
