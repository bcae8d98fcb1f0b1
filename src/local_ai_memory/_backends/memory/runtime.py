"""The in-memory runtime backend: the reference implementation of the contract.

Everything lives in dictionaries of this process, guarded by one re-entrant lock, so it is
handy in users' unit tests and as the executable definition of what a backend must do. Values
are deep-copied in and out (through JSON), so callers can never change stored data by
mutating what they passed or got back.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import json
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from local_ai_memory._contracts.runtime import (
    Erasure,
    PlansChange,
    PlanSteps,
    RuntimeBackend,
    Scope,
    ScopeInfo,
    StateChange,
    StepsChange,
    erased,
    split_step,
)
from local_ai_memory._shared.errors import InvalidInputError, RecordNotFoundError
from local_ai_memory._shared.records import StoredMessage, ToolIndexEntry, iter_json_bytes

__all__ = ["InMemoryRuntimeBackend"]


@dataclass
class _ScopeData:
    state: dict[str, Any] = field(default_factory=dict)
    working: str = ""
    plans: dict[str, Any] = field(default_factory=dict)
    steps: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    step_logs: dict[str, int] = field(default_factory=dict)  # plan id -> serial of its current log
    results: set[str] = field(default_factory=set)
    messages: list[StoredMessage] = field(default_factory=list)
    next_seq: int = 0
    modified: float = field(default_factory=time.time)
    lock: threading.RLock = field(default_factory=threading.RLock)


def _counted(cursor: str | None, serial: int) -> int | None:
    """How many steps of log ``serial`` a cursor says were read (``None``: not a cursor of it)."""
    head, _, count = (cursor or "").partition(":")
    if head != str(serial) or not count.isdigit():
        return None
    return int(count)


class InMemoryRuntimeBackend(RuntimeBackend):
    """Runtime memory in this process's memory; nothing survives the process.

    >>> from local_ai_memory import Memory
    >>> memory = Memory.in_memory()
    >>> memory.session("alice", "s1").update_state({"step": 1})
    {'step': 1}
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._scopes: dict[str, tuple[Scope, _ScopeData]] = {}
        self._results: dict[str, tuple[str, Any, int, float]] = {}  # id -> (scope key, payload, size, saved_at)
        self._erasures: dict[Erasure, None] = {}  # ordered set
        self._log_serials = itertools.count(1)

    def __repr__(self) -> str:
        return f"InMemoryRuntimeBackend({len(self._scopes)} scopes)"

    def _data(self, scope: Scope) -> _ScopeData:
        with self._lock:
            found = self._scopes.get(scope.key)
            if found is None:
                found = (scope, _ScopeData())
                self._scopes[scope.key] = found
            return found[1]

    def _view(self, scope: Scope) -> _ScopeData:
        """The scope's data for reading: a scope under a pending erasure reads as empty, and
        reading a scope never stores one (an unknown id leaves no trace)."""
        with self._lock:
            found = self._scopes.get(scope.key)
            if found is None or (self._erasures and erased(list(self._erasures), scope)):
                return _ScopeData()
            return found[1]

    @staticmethod
    def _touch(data: _ScopeData) -> None:
        data.modified = time.time()

    def get_state(self, scope: Scope) -> dict[str, Any]:
        data = self._view(scope)
        with data.lock:
            return copy.deepcopy(data.state)

    def update_state(self, scope: Scope, change: StateChange) -> dict[str, Any]:
        data = self._data(scope)
        with data.lock:
            new = change(copy.deepcopy(data.state))
            data.state = copy.deepcopy(new)
            self._touch(data)
            return new

    def get_working_memory(self, scope: Scope) -> str:
        data = self._view(scope)
        with data.lock:
            return data.working

    def swap_working_memory(self, scope: Scope, expected: str | None, text: str) -> str | None:
        data = self._data(scope)
        with data.lock:
            if expected is not None and data.working != expected:
                return data.working
            data.working = text
            self._touch(data)
            return None

    def get_plans(self, scope: Scope) -> dict[str, Any]:
        data = self._view(scope)
        with data.lock:
            return copy.deepcopy(data.plans)

    def update_plans(self, scope: Scope, change: PlansChange) -> dict[str, Any]:
        data = self._data(scope)
        with data.lock:
            new = change(copy.deepcopy(data.plans))
            if new is None:
                return copy.deepcopy(data.plans)
            for gone in set(data.plans) - set(new):
                data.steps.pop(gone, None)
            data.plans = copy.deepcopy(new)
            self._touch(data)
            return new

    def append_plan_steps(self, scope: Scope, plan_id: str, steps: Sequence[dict[str, Any]]) -> bool:
        data = self._data(scope)
        with data.lock:
            log = data.steps.get(plan_id)
            if log is None:
                log = data.steps[plan_id] = []
                data.step_logs[plan_id] = next(self._log_serials)
            was_empty = not log
            log.extend(copy.deepcopy(list(steps)))
            self._touch(data)
            return was_empty

    def get_plan_steps(self, scope: Scope, plan_id: str) -> list[dict[str, Any]]:
        data = self._view(scope)
        with data.lock:
            return copy.deepcopy(data.steps.get(plan_id, []))

    def read_plan_steps(self, scope: Scope, plan_id: str, cursor: str | None = None) -> PlanSteps:
        """The cursor is ``{log serial}:{count read}``: a log emptied and begun again has a new serial."""
        data = self._view(scope)
        with data.lock:
            log = data.steps.get(plan_id)
            if log is None:
                return PlanSteps([], "", True)
            serial = data.step_logs[plan_id]
            start = _counted(cursor, serial)
            if start is None or start > len(log):
                return PlanSteps(copy.deepcopy(log), f"{serial}:{len(log)}", True)
            return PlanSteps(copy.deepcopy(log[start:]), f"{serial}:{len(log)}", False)

    def clear_plan_steps(self, scope: Scope, plan_id: str) -> None:
        data = self._data(scope)
        with data.lock:
            data.steps.pop(plan_id, None)

    def plan_step_bytes(self, scope: Scope) -> dict[str, int]:
        data = self._view(scope)
        with data.lock:
            return {plan_id: _json_size(steps) for plan_id, steps in data.steps.items() if steps}

    def rewrite_plan_steps(self, scope: Scope, plan_id: str, change: StepsChange) -> list[dict[str, Any]]:
        """Under the scope's lock; the log gets a new serial, so readers' cursors restart."""
        data = self._data(scope)
        with data.lock:
            current = copy.deepcopy(data.steps.get(plan_id, []))
            new = change(current)
            if new is None:
                return copy.deepcopy(data.steps.get(plan_id, []))
            data.steps.pop(plan_id, None)
            if new:
                data.steps[plan_id] = copy.deepcopy(list(new))
                data.step_logs[plan_id] = next(self._log_serials)
            self._touch(data)
            return copy.deepcopy(list(new))

    def tool_result_exists(self, result_id: str) -> bool:
        with self._lock:
            return result_id in self._results

    def save_tool_result(self, scope: Scope, result_id: str, payload: Any) -> int:
        envelope = {"id": result_id, "payload": payload}
        size = sum(len(chunk) for chunk in iter_json_bytes(envelope))
        data = self._data(scope)
        with self._lock, data.lock:
            if result_id in self._results and self._results[result_id][0] != scope.key:
                raise InvalidInputError(f"tool result id {result_id!r} is taken by another scope")
            self._results[result_id] = (scope.key, copy.deepcopy(payload), size, time.time())
            data.results.add(result_id)
            self._touch(data)
        return size

    def load_tool_result(self, scope: Scope, result_id: str) -> Any:
        with self._lock:
            found = self._results.get(result_id)
        if found is None or found[0] != scope.key or erased(self.pending_erasures(), scope):
            raise RecordNotFoundError(f"no tool result {result_id!r} in {scope.describe()} (it may have been pruned)")
        return copy.deepcopy(found[1])

    def list_tool_results(self, scope: Scope) -> dict[str, ToolIndexEntry]:
        data = self._view(scope)
        with self._lock, data.lock:
            return {
                result_id: ToolIndexEntry(size=self._results[result_id][2], saved_at=self._results[result_id][3])
                for result_id in sorted(data.results)
            }

    def count_tool_results(self, scope: Scope) -> int:
        data = self._view(scope)
        with data.lock:
            return len(data.results)

    def delete_tool_results(self, scope: Scope, result_ids: Sequence[str]) -> list[str]:
        data = self._data(scope)
        deleted: list[str] = []
        with self._lock, data.lock:
            for result_id in result_ids:
                if result_id in data.results:
                    data.results.discard(result_id)
                    self._results.pop(result_id, None)
                    deleted.append(result_id)
        return deleted

    def append_messages(self, scope: Scope, messages: Sequence[StoredMessage]) -> list[int]:
        data = self._data(scope)
        with data.lock:
            seqs = list(range(data.next_seq, data.next_seq + len(messages)))
            data.messages.extend(m.model_copy(update={"seq": seq}) for seq, m in zip(seqs, messages, strict=True))
            data.next_seq += len(messages)
            self._touch(data)
            return seqs

    def get_messages(self, scope: Scope) -> list[StoredMessage]:
        data = self._view(scope)
        with data.lock:
            return list(data.messages)

    def compact_messages(self, scope: Scope, keep_last: int) -> int:
        data = self._data(scope)
        with data.lock:
            kept = data.messages[max(0, len(data.messages) - keep_last) :] if keep_last else []
            dropped = len(data.messages) - len(kept)
            data.messages = kept
            return dropped

    def clear_messages(self, scope: Scope) -> bool:
        data = self._data(scope)
        with data.lock:
            had = bool(data.messages) or data.next_seq > 0
            data.messages = []
            data.next_seq = 0
            return had

    def pop_message(self, scope: Scope) -> StoredMessage | None:
        data = self._view(scope)
        with data.lock:
            if not data.messages:
                return None
            popped = data.messages.pop()
            data.next_seq = popped.seq if popped.seq is not None else len(data.messages)
            self._touch(data)
            return popped

    @contextlib.contextmanager
    def locked(self, scope: Scope) -> Iterator[None]:
        with self._data(scope).lock:
            yield

    def delete_scope(self, scope: Scope) -> int:
        with self._lock:
            found = self._scopes.pop(scope.key, None)
            if found is None:
                return 0
            data = found[1]
            with data.lock:
                removed = sum(
                    self._results.pop(result_id)[2] for result_id in data.results if result_id in self._results
                )
                removed += sum(len(json.dumps(part).encode()) for part in (data.state, data.plans) if part)
                removed += sum(_json_size(steps) for steps in data.steps.values())
                removed += len(data.working.encode("utf-8", "surrogatepass"))
                removed += sum(len(message.content) for message in data.messages)
            return removed

    def begin_erasure(self, erasure: Erasure) -> None:
        with self._lock:
            self._erasures[erasure] = None

    def end_erasure(self, erasure: Erasure) -> None:
        with self._lock:
            self._erasures.pop(erasure, None)

    def pending_erasures(self) -> list[Erasure]:
        with self._lock:
            return list(self._erasures)

    def list_scopes(self, *, include_erased: bool = False) -> list[ScopeInfo]:
        with self._lock:
            hidden = [] if include_erased else list(self._erasures)
            scopes = [pair for pair in self._scopes.values() if not erased(hidden, pair[0])]
        infos = []
        for scope, data in scopes:
            with data.lock:
                empty = not (data.state or data.working or data.plans or data.results or data.messages)
                size = sum(self._results[result_id][2] for result_id in data.results if result_id in self._results)
                size += len(data.working.encode("utf-8", "surrogatepass"))
                size += sum(len(message.content) for message in data.messages)
                size += sum(_json_size(steps) for steps in data.steps.values())
            if not empty or include_erased:  # an emptied scope still names its ids: erasing finds it
                infos.append(ScopeInfo(scope, size, data.modified))
        return sorted(infos, key=lambda info: info.scope.key)


def _json_size(steps: list[dict[str, Any]]) -> int:
    """A step log's size in this backend's measure: the bytes of its compact JSON (and of its
    ``bytes`` values, raw)."""
    total = 0
    for step in steps:
        header, values = split_step(step)
        total += len(json.dumps(header, separators=(",", ":")).encode()) + (0 if values is None else len(values))
    return total
