"""The runtime kit catches planted bugs: one mutant backend per bug, and the kit must fail on each.

Each mutant is a subclass with one bug: of the in-memory reference backend for logic bugs, of
the SQLite example (``examples/sqlite_backend``) for bugs that only processes or a restart
show. For each, a fresh pytest runs the whole runtime kit against it in a subprocess, stopping
at the first failure (``-x``); the harness asserts that it fails, and that the same run on the
unmutated bases passes. The runs go two at a time (this is a 2-core machine).

The kit classes below exist only when ``RUNTIME_KIT_TARGET`` names a target: that is how the
subprocess asks for "the kit on this one backend", and why a normal test run collects only
the harness.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import itertools
import json
import os
import pickle
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, ClassVar

import pytest

from local_ai_memory import RecordNotFoundError
from local_ai_memory._backends.memory.runtime import _ScopeData
from local_ai_memory.backends import (
    Erasure,
    InMemoryRuntimeBackend,
    PlanSteps,
    Scope,
    ScopeInfo,
    StateChange,
    StepsChange,
    StoredMessage,
)
from local_ai_memory.backends import ToolIndexEntry as IndexEntry
from local_ai_memory.testing import CROSS_PROCESS, DURABLE, RuntimeBackendTests

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # the examples live beside src/, not inside the package
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # the helpers the test files share

from mutant_runs import RUNS, persisting, selected  # noqa: E402

from examples.sqlite_backend.runtime import SQLiteRuntimeBackend, _pack  # noqa: E402

TARGET_VARIABLE = "RUNTIME_KIT_TARGET"

# -- mutants of the in-memory reference backend: logic bugs -------------------------------


class CrossScopeLoad(InMemoryRuntimeBackend):
    """Loads a tool result by id alone: any scope can read any other scope's result."""

    def load_tool_result(self, scope: Scope, result_id: str) -> Any:
        with self._lock:
            found = self._results.get(result_id)
        if found is None:
            raise RecordNotFoundError(result_id)
        return copy.deepcopy(found[1])


class UnlockedStateUpdate(InMemoryRuntimeBackend):
    """Reads the state, applies the change, and writes it back without holding the lock throughout."""

    def update_state(self, scope: Scope, change: StateChange) -> dict[str, Any]:
        new = change(self.get_state(scope))
        data = self._data(scope)
        with data.lock:
            data.state = copy.deepcopy(new)
        return new


class CrlfToLf(InMemoryRuntimeBackend):
    """Normalizes line ends of the working memory and of messages."""

    def swap_working_memory(self, scope: Scope, expected: str | None, text: str) -> str | None:
        return super().swap_working_memory(scope, expected, text.replace("\r\n", "\n"))

    def append_messages(self, scope: Scope, messages: Sequence[StoredMessage]) -> list[int]:
        fixed = [message.model_copy(update={"content": message.content.replace("\r\n", "\n")}) for message in messages]
        return super().append_messages(scope, fixed)


class ErasedScopeListed(InMemoryRuntimeBackend):
    """Lists the scopes of a pending erasure as if it were not there."""

    def list_scopes(self, *, include_erased: bool = False) -> list[ScopeInfo]:
        return super().list_scopes(include_erased=True)


class SwapIgnoresExpected(InMemoryRuntimeBackend):
    """Compare-and-swap that never compares."""

    def swap_working_memory(self, scope: Scope, expected: str | None, text: str) -> str | None:
        return super().swap_working_memory(scope, None, text)


class DeleteNotIdempotent(InMemoryRuntimeBackend):
    """Reports every id asked for as deleted, also those already gone or never owned."""

    def delete_tool_results(self, scope: Scope, result_ids: Sequence[str]) -> list[str]:
        super().delete_tool_results(scope, result_ids)
        return list(dict.fromkeys(result_ids))


class UserPrefixListing(InMemoryRuntimeBackend):
    """Matches users by prefix: ``bob`` lists the tool results of ``bob_admin`` (same session)."""

    def list_tool_results(self, scope: Scope) -> dict[str, IndexEntry]:
        found = dict(super().list_tool_results(scope))
        with self._lock:
            others = [owner for owner, _ in self._scopes.values() if owner != scope]
        for owner in others:
            same_session = owner.session_id == scope.session_id
            if same_session and scope.user_id and owner.user_id and owner.user_id.startswith(scope.user_id):
                found.update(super().list_tool_results(owner))
        return found


class CutAtNul(InMemoryRuntimeBackend):
    """Stores a tool output's text only up to its first NUL (as C string handling would)."""

    def save_tool_result(self, scope: Scope, result_id: str, payload: Any) -> int:
        if isinstance(payload, dict) and isinstance(payload.get("content"), str):
            payload = {**payload, "content": payload["content"].split("\x00")[0]}
        return super().save_tool_result(scope, result_id, payload)


class LockedDoesNothing(InMemoryRuntimeBackend):
    """``locked()`` that excludes nobody."""

    @contextlib.contextmanager
    def locked(self, scope: Scope) -> Iterator[None]:
        yield


class MessageNumberRace(InMemoryRuntimeBackend):
    """Reads the next message number before taking the scope's lock."""

    def append_messages(self, scope: Scope, messages: Sequence[StoredMessage]) -> list[int]:
        data = self._data(scope)
        first = data.next_seq
        numbers = list(range(first, first + len(messages)))
        with data.lock:
            data.messages.extend(m.model_copy(update={"seq": n}) for n, m in zip(numbers, messages, strict=True))
            data.next_seq = first + len(messages)
        return numbers


class ErasuresSortedByKey(InMemoryRuntimeBackend):
    """Lists pending erasures sorted by their key instead of oldest first."""

    def pending_erasures(self) -> list[Erasure]:
        return sorted(super().pending_erasures(), key=lambda erasure: erasure.key)


# -- mutants of the SQLite example: bugs that need processes or a restart ----------------


class StateLockInOneProcess(SQLiteRuntimeBackend):
    """Guards the state's read-modify-write with a lock of this process only (two transactions)."""

    _mutex = threading.Lock()

    def update_state(self, scope: Scope, change: StateChange) -> dict[str, Any]:
        with self._mutex:
            new = change(self.get_state(scope))
            with self._transaction(write=True) as db:
                self._touch(db, scope)
                db.execute("UPDATE scopes SET state = ? WHERE key = ?", (_pack(new), scope.key))
        return new


class MessageNumbersOutsideTheTransaction(SQLiteRuntimeBackend):
    """Reads the next message number in one transaction and writes the messages in another."""

    def append_messages(self, scope: Scope, messages: Sequence[StoredMessage]) -> list[int]:
        with self._transaction() as db:
            row = db.execute("SELECT next_seq FROM scopes WHERE key = ?", (scope.key,)).fetchone()
        first = row[0] if row else 0
        numbers = list(range(first, first + len(messages)))
        with self._transaction(write=True) as db:
            self._touch(db, scope)
            db.executemany(
                "INSERT OR REPLACE INTO messages (key, seq, body) VALUES (?, ?, ?)",
                [
                    (scope.key, n, _pack(m.model_dump(mode="json", exclude={"seq"})))
                    for n, m in zip(numbers, messages, strict=True)
                ],
            )
            db.execute("UPDATE scopes SET next_seq = ? WHERE key = ?", (first + len(messages), scope.key))
        return numbers


class ErasuresInProcessMemory(SQLiteRuntimeBackend):
    """Keeps pending erasures in this process's memory: a restart forgets them."""

    def __init__(self, path: str, *, timeout: float = 30.0) -> None:
        super().__init__(path, timeout=timeout)
        self._pending: dict[Erasure, None] = {}

    def _erasures(self, db: Any) -> list[Erasure]:
        return list(self._pending)

    def begin_erasure(self, erasure: Erasure) -> None:
        self._pending[erasure] = None

    def end_erasure(self, erasure: Erasure) -> None:
        self._pending.pop(erasure, None)


class RewriteNotStored(InMemoryRuntimeBackend):
    """Answers the rewritten step log but keeps the old one."""

    def rewrite_plan_steps(self, scope: Scope, plan_id: str, change: StepsChange) -> list[dict[str, Any]]:
        current = self.get_plan_steps(scope, plan_id)
        new = change(copy.deepcopy(current))
        return current if new is None else copy.deepcopy(list(new))


class RewriteKeepsCursors(InMemoryRuntimeBackend):
    """Rewrites a step log in place under its old serial: a cursor from before reads on into the new log."""

    def rewrite_plan_steps(self, scope: Scope, plan_id: str, change: StepsChange) -> list[dict[str, Any]]:
        data = self._data(scope)
        with data.lock:
            new = change(copy.deepcopy(data.steps.get(plan_id, [])))
            if new is None:
                return copy.deepcopy(data.steps.get(plan_id, []))
            if new:
                data.steps[plan_id] = copy.deepcopy(list(new))
            else:
                data.steps.pop(plan_id, None)
            return copy.deepcopy(list(new))


class StepBytesOfTheFirstStep(InMemoryRuntimeBackend):
    """Sizes a step log by its first step only (a size kept from when the log began)."""

    def plan_step_bytes(self, scope: Scope) -> dict[str, int]:
        return {
            plan_id: len(json.dumps(steps[0], separators=(",", ":")).encode())
            for plan_id in self.get_plans(scope)
            if (steps := self.get_plan_steps(scope, plan_id))
        }


class ScopeChangeFromMonotonicClock(InMemoryRuntimeBackend):
    """Stamps a scope's last change with ``time.monotonic()`` (seconds since boot), not the wall clock."""

    @staticmethod
    def _touch(data: Any) -> None:
        data.modified = time.monotonic()


class SaveTimeInMilliseconds(InMemoryRuntimeBackend):
    """Keeps a tool result's save time in milliseconds since the epoch."""

    def save_tool_result(self, scope: Scope, result_id: str, payload: Any) -> int:
        size = super().save_tool_result(scope, result_id, payload)
        with self._lock:
            key, stored, stored_size, saved_at = self._results[result_id]
            self._results[result_id] = (key, stored, stored_size, saved_at * 1000)
        return size


class CursorCountOnly(InMemoryRuntimeBackend):
    """Reads a step-log cursor as a bare count of steps, whichever log handed it out."""

    def read_plan_steps(self, scope: Scope, plan_id: str, cursor: str | None = None) -> PlanSteps:
        data = self._view(scope)
        with data.lock:
            log = data.steps.get(plan_id)
            if log is None:
                return PlanSteps([], "", True)
            count = (cursor or "").partition(":")[2]
            serial = data.step_logs[plan_id]
            if not count.isdigit() or int(count) > len(log):
                return PlanSteps(copy.deepcopy(log), f"{serial}:{len(log)}", True)
            return PlanSteps(copy.deepcopy(log[int(count) :]), f"{serial}:{len(log)}", False)


@persisting(
    InMemoryRuntimeBackend,
    (
        "update_state",
        "swap_working_memory",
        "update_plans",
        "append_plan_steps",
        "clear_plan_steps",
        "rewrite_plan_steps",
        "save_tool_result",
        "delete_tool_results",
        "append_messages",
        "compact_messages",
        "clear_messages",
        "pop_message",
        "delete_scope",
        "begin_erasure",
        "end_erasure",
    ),
)
class InPlaceFileRuntime(InMemoryRuntimeBackend):
    """The reference backend made durable the naive way: after every change it rewrites one
    file in place (truncated, then pickled into), and loads it when opened. A clean close keeps
    everything; a crash in the middle of a rewrite leaves a truncated file, and all is gone."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self._file = Path(path)
        if self._file.exists():
            with self._file.open("rb") as stored:
                scopes, self._results, erasures, serial = pickle.load(stored)
            self._scopes = {key: (scope, _ScopeData(**fields)) for key, (scope, fields) in scopes.items()}
            self._erasures = dict.fromkeys(erasures)
            self._log_serials = itertools.count(serial)

    def _persist(self) -> None:
        with contextlib.ExitStack() as held:
            held.enter_context(self._lock)
            for _, data in sorted(self._scopes.values(), key=lambda pair: pair[0].key):
                held.enter_context(data.lock)
            scopes = {
                key: (scope, {f.name: getattr(data, f.name) for f in dataclasses.fields(data) if f.name != "lock"})
                for key, (scope, data) in self._scopes.items()
            }
            serial = max((n for _, data in self._scopes.values() for n in data.step_logs.values()), default=0) + 1
            serial = max(serial, next(self._log_serials))
            self._log_serials = itertools.count(serial)
            with self._file.open("wb") as stored:  # the bug: truncated first, then written
                pickle.dump((scopes, self._results, list(self._erasures), serial), stored)


class DeleteScopeByPrefix(InMemoryRuntimeBackend):
    """Deletes every scope whose key starts with the scope's key: ``bob``'s ``s1`` takes ``s1_x`` with it."""

    def delete_scope(self, scope: Scope) -> int:
        with self._lock:
            doomed = [owner for owner, _ in self._scopes.values() if owner.key.startswith(scope.key)]
        return sum(super(DeleteScopeByPrefix, self).delete_scope(owner) for owner in doomed)


class CountOfSaves(InMemoryRuntimeBackend):
    """Counts a scope's tool results as the saves it made (a counter raised by every save, never
    lowered), not the results it owns: retention's max_count then prunes what it should not."""

    def __init__(self) -> None:
        super().__init__()
        self._saves: dict[str, int] = {}

    def save_tool_result(self, scope: Scope, result_id: str, payload: Any) -> int:
        size = super().save_tool_result(scope, result_id, payload)
        with self._lock:
            self._saves[scope.key] = self._saves.get(scope.key, 0) + 1
        return size

    def count_tool_results(self, scope: Scope) -> int:
        with self._lock:
            return self._saves.get(scope.key, 0) if super().count_tool_results(scope) else 0


MEMORY_MUTANTS: dict[str, type[InMemoryRuntimeBackend]] = {
    "cross-scope load of a tool result": CrossScopeLoad,
    "unlocked read-modify-write of the state": UnlockedStateUpdate,
    "CRLF changed to LF": CrlfToLf,
    "erased scope still listed": ErasedScopeListed,
    "compare-and-swap ignoring expected": SwapIgnoresExpected,
    "non-idempotent deletes": DeleteNotIdempotent,
    "bob listing bob_admin's results": UserPrefixListing,
    "tool result cut at the first NUL": CutAtNul,
    "locked() doing nothing": LockedDoesNothing,
    "message-number race": MessageNumberRace,
    "pending erasures in the wrong order": ErasuresSortedByKey,
    "step-log rewrite not stored": RewriteNotStored,
    "step-log rewrite that old cursors read on into": RewriteKeepsCursors,
    "step-log size of the first step only": StepBytesOfTheFirstStep,
    "scope's last change from a monotonic clock": ScopeChangeFromMonotonicClock,
    "tool-result save time in milliseconds": SaveTimeInMilliseconds,
    "step-log cursor read as a count of any log": CursorCountOnly,
    "tool results counted as saves made": CountOfSaves,
    "delete_scope of every key with the same start": DeleteScopeByPrefix,
}
SQLITE_MUTANTS: dict[str, type[SQLiteRuntimeBackend]] = {
    "state lock that holds in one process only": StateLockInOneProcess,
    "message numbers taken outside the write transaction": MessageNumbersOutsideTheTransaction,
    "erasure records in process memory only": ErasuresInProcessMemory,
}
FILE_MUTANTS: dict[str, type[InMemoryRuntimeBackend]] = {
    "store rewritten in place, not atomically": InPlaceFileRuntime,
}
"""Durable (a file of their own), not shared by processes."""
BASES: dict[str, type[Any]] = {"in-memory reference": InMemoryRuntimeBackend, "SQLite example": SQLiteRuntimeBackend}
TARGETS: dict[str, type[Any]] = {**MEMORY_MUTANTS, **SQLITE_MUTANTS, **FILE_MUTANTS, **BASES}
CAUGHT_BY: dict[str, set[str]] = {
    "scope's last change from a monotonic clock": {"test_times_are_wall_clock_seconds_since_the_epoch"},
    "tool-result save time in milliseconds": {"test_times_are_wall_clock_seconds_since_the_epoch"},
    "store rewritten in place, not atomically": {"test_confirmed_writes_survive_a_killed_writer"},
    "tool results counted as saves made": {"test_count_of_tool_results_follows_saves_and_deletes"},
    "delete_scope of every key with the same start": {"test_delete_scope_removes_every_level_and_nothing_else"},
    "step-log cursor read as a count of any log": {
        "test_step_logs_are_read_on_from_a_cursor",
        "test_a_cursor_of_another_log_reads_the_whole_log",
    },
}
"""The test that must be the first to fail, for the mutants whose bug one test is about."""

# -- the kit on one target (collected only in the subprocess) -----------------------------

_target = TARGETS.get(os.environ.get(TARGET_VARIABLE, ""))

if _target is not None and issubclass(_target, SQLiteRuntimeBackend):

    class TestKitOnTarget(RuntimeBackendTests):
        capabilities: ClassVar[frozenset[str]] = frozenset({CROSS_PROCESS, DURABLE})

        @pytest.fixture
        def opener(self, tmp_path: Path) -> Any:
            target: Any = _target
            return functools.partial(target, str(tmp_path / "memory.db"))

elif _target is not None and _target in FILE_MUTANTS.values():

    class TestKitOnTarget(RuntimeBackendTests):  # type: ignore[no-redef]
        capabilities: ClassVar[frozenset[str]] = frozenset({DURABLE})

        @pytest.fixture
        def opener(self, tmp_path: Path) -> Any:
            target: Any = _target
            return functools.partial(target, str(tmp_path / "memory.pickle"))

elif _target is not None:

    class TestKitOnTarget(RuntimeBackendTests):  # type: ignore[no-redef]
        @pytest.fixture
        def backend(self) -> Any:
            assert _target is not None
            return _target()


# -- the harness --------------------------------------------------------------------------


def _run_kit(target: str, config: Path) -> subprocess.CompletedProcess[str]:
    """The whole kit on ``target`` in a fresh, plain pytest (no plugins, no project settings:
    as a third party runs it), stopping at the first failure."""
    env = {**os.environ, TARGET_VARIABLE: target, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys([str(ROOT), *[p for p in sys.path if p]]))
    command = [sys.executable, "-m", "pytest", "-c", str(config), "--rootdir", str(ROOT), __file__]
    command += ["-k", "TestKitOnTarget", "-x", "-q", "-p", "no:cacheprovider"]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def _chosen(name: str) -> bool:
    return selected(name, TARGETS[name].__name__)


@pytest.fixture(scope="module")
def kit_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[subprocess.CompletedProcess[str]]]:
    """Every chosen target's runs (a base once, a mutant ``KIT_MUTANT_RUNS`` times), two at a time."""
    config = tmp_path_factory.mktemp("kit") / "pytest.ini"
    config.write_text("[pytest]\nfilterwarnings =\n    error\n", encoding="utf-8")
    jobs = [(name, 1 if name in BASES else RUNS) for name in TARGETS if _chosen(name)]
    runs = [name for name, count in jobs for _ in range(count)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        done = list(pool.map(lambda target: _run_kit(target, config), runs))
    found: dict[str, list[subprocess.CompletedProcess[str]]] = {}
    for name, run in zip(runs, done, strict=True):
        found.setdefault(name, []).append(run)
    return found


def _summary(run: subprocess.CompletedProcess[str]) -> str:
    lines = run.stdout.strip().splitlines()
    return lines[-1] if lines else run.stderr[-2000:]


def _missed(name: str, run: subprocess.CompletedProcess[str]) -> str | None:
    """Why ``run`` does not count as the kit catching mutant ``name`` (``None``: it does)."""
    summary, output = _summary(run), run.stdout[-4000:] + run.stderr[-2000:]
    if run.returncode != 1 or "1 failed" not in summary:
        return f"the kit did not catch: {name}\n{output}"
    if "error" in summary:
        return f"the run broke instead of failing a test:\n{output}"
    if re.search(r"^E\s+(KeyError|IndexError|TypeError|AttributeError)\b", run.stdout, re.MULTILINE):
        return f"the kit failed with a bare error, not a message naming the contract rule broken:\n{output}"
    first = re.search(r"^FAILED \S*::TestKitOnTarget::(test_\w+)", run.stdout, re.MULTILINE)
    expected = CAUGHT_BY.get(name)
    if expected is not None and (first is None or first.group(1) not in expected):
        return f"{name} was caught by {first and first.group(1)}, not by a test about its bug:\n{output}"
    return None


@pytest.mark.parametrize("name", list(BASES))
def test_the_kit_passes_the_unmutated_base(
    kit_runs: dict[str, list[subprocess.CompletedProcess[str]]], name: str
) -> None:
    if not _chosen(name):
        pytest.skip("not among KIT_MUTANTS")
    [run] = kit_runs[name]
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert re.search(r"\d+ passed", _summary(run))
    assert "failed" not in _summary(run)


@pytest.mark.parametrize("name", [*MEMORY_MUTANTS, *SQLITE_MUTANTS, *FILE_MUTANTS])
def test_the_kit_catches_the_planted_bug(
    kit_runs: dict[str, list[subprocess.CompletedProcess[str]]], name: str
) -> None:
    if not _chosen(name):
        pytest.skip("not among KIT_MUTANTS")
    misses = [reason for run in kit_runs[name] if (reason := _missed(name, run)) is not None]
    caught = len(kit_runs[name]) - len(misses)
    assert not misses, f"caught in {caught} of {len(kit_runs[name])} runs; first miss: {misses[0]}"
