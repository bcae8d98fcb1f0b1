"""The runtime-memory storage contract: what levels L0 to L3 and the session log need.

:class:`RuntimeBackend` is the only way the runtime engines (``MemoryManager``,
``ToolResultStore``, checkpoints, the session message store, the compressor) reach storage.
Every method takes the :class:`Scope` it works on, so isolation between ``(user_id,
session_id)`` pairs is part of each call, never a convention of the caller.

A backend implements the sync methods. Each has an async twin (``a`` prefix) that by default
runs the sync method in a worker thread; a backend with a native async driver overrides the
twins. The contract's guarantees, checked by :class:`local_ai_memory.testing.RuntimeBackendTests`:

* every write is atomic: a reader sees the old value or the new one, never a mix;
* ``update_state``, ``update_plans`` and ``swap_working_memory`` are read-modify-write cycles
  that never lose a concurrent update, across threads and (for shared backends) processes;
* a tool result belongs to the scope that saved it: any other scope gets
  :class:`RecordNotFoundError`, exactly as for an id that does not exist;
* appended messages and checkpoint steps keep their order and get gap-free sequence numbers;
* while an :class:`Erasure` is pending, the scopes it covers read as empty (no state, no
  messages, every tool result not found) and are not listed, so a deletion that is cut half-way
  by a crash is never seen half done; :meth:`RuntimeBackend.delete_scope` is idempotent.

Writing a backend: subclass :class:`RuntimeBackend`, implement the abstract methods, run the
conformance suite against it (see ``docs/architecture.md``).
"""

from __future__ import annotations

import asyncio
import contextlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from local_ai_memory._shared.naming import decode_name, encode_name, scope_name, validate_name
from local_ai_memory._shared.records import StoredMessage, ToolIndexEntry, ToolResultPage, page_of

__all__ = [
    "GLOBAL_STEM",
    "Erasure",
    "PlanSteps",
    "PlansChange",
    "RuntimeBackend",
    "Scope",
    "ScopeInfo",
    "StateChange",
    "erased",
]

GLOBAL_STEM = "global"

StateChange = Callable[[dict[str, Any]], dict[str, Any]]
"""Turns the stored L0 state into the new one (pure; may be called again on a retry)."""

PlansChange = Callable[[dict[str, Any]], "dict[str, Any] | None"]
"""Turns ``{plan_id: payload}`` into the new map, or ``None`` to write nothing."""


@dataclass(frozen=True)
class PlanSteps:
    """What :meth:`RuntimeBackend.read_plan_steps` found: steps, and where to read on next time.

    ``restarted`` means ``steps`` is the whole log (the first read, or the log was emptied or
    replaced since ``cursor`` was handed out): drop what was read before. Otherwise ``steps`` are
    the ones appended after the cursor that was passed in. ``cursor`` is opaque to callers.
    """

    steps: list[dict[str, Any]]
    cursor: str
    restarted: bool


@dataclass(frozen=True)
class Scope:
    """One ``(user_id, session_id)`` pair, or the unscoped memory when both are ``None``.

    ``key`` is the unambiguous storage name (``alice_s1``; ``a%5Fb_c`` for ``("a_b", "c")``;
    ``global`` when unscoped). Build scopes with :meth:`of`, which checks both ids.
    """

    user_id: str | None = None
    session_id: str | None = None
    key: str = GLOBAL_STEM

    @classmethod
    def of(cls, user_id: str | None, session_id: str | None) -> Scope:
        """The checked scope of ``(user_id, session_id)``; both ``None`` is the unscoped memory."""
        if user_id is None and session_id is None:
            return cls()
        if user_id is None or session_id is None:
            from local_ai_memory._shared.errors import InvalidInputError

            raise InvalidInputError("give both user_id and session_id, or neither")
        validate_name(user_id, "user_id")
        validate_name(session_id, "session_id")
        return cls(user_id, session_id, scope_name(user_id, session_id))

    @classmethod
    def from_key(cls, key: str) -> Scope | None:
        """The scope stored under ``key``, or ``None`` if ``key`` is not a scope name."""
        if key == GLOBAL_STEM:
            return cls()
        user, sep, session = key.partition("_")
        if not sep:
            return None
        try:
            scope = cls.of(decode_name(user), decode_name(session))
        except (ValueError, UnicodeDecodeError):
            return None
        return scope if scope.key == key else None

    @property
    def scoped(self) -> bool:
        """Whether this is a real ``(user_id, session_id)`` scope (not the unscoped memory)."""
        return self.user_id is not None

    def describe(self) -> str:
        """Words for error messages."""
        return f"scope ({self.user_id!r}, {self.session_id!r})" if self.scoped else "the unscoped memory"


@dataclass(frozen=True)
class ScopeInfo:
    """A scope that holds data, with its stored bytes and last change (seconds since the epoch)."""

    scope: Scope
    size: int
    modified: float

    @property
    def user_id(self) -> str | None:
        """``scope.user_id``, for a listing's items."""
        return self.scope.user_id

    @property
    def session_id(self) -> str | None:
        """``scope.session_id``, for a listing's items."""
        return self.scope.session_id


@dataclass(frozen=True)
class Erasure:
    """A deletion in progress: every session of ``user_id``, or only ``session_id`` of it.

    :meth:`RuntimeBackend.begin_erasure` records it durably before anything is deleted and
    :meth:`RuntimeBackend.end_erasure` removes it after the last deletion, so a crash in
    between leaves it pending: readers keep seeing the data as gone, and the next
    :class:`~local_ai_memory.Memory` to start finishes the job.
    """

    user_id: str
    session_id: str | None = None

    def __post_init__(self) -> None:
        validate_name(self.user_id, "user_id")
        if self.session_id is not None:
            validate_name(self.session_id, "session_id")

    def covers(self, scope: Scope) -> bool:
        """Whether ``scope`` is (part of) what this erasure deletes."""
        if scope.user_id != self.user_id:
            return False
        return self.session_id is None or scope.session_id == self.session_id

    @property
    def key(self) -> str:
        """A storage name for the erasure record: ``u-{user}`` or ``s-{scope key}``."""
        if self.session_id is None:
            return "u-" + encode_name(self.user_id)
        return "s-" + scope_name(self.user_id, self.session_id)


def erased(erasures: Sequence[Erasure], scope: Scope) -> bool:
    """Whether any of ``erasures`` covers ``scope``."""
    return any(erasure.covers(scope) for erasure in erasures)


class RuntimeBackend(ABC):
    """Storage of the runtime memory; see the module docstring for the guarantees."""

    # -- L0 state -----------------------------------------------------------------------

    @abstractmethod
    def get_state(self, scope: Scope) -> dict[str, Any]:
        """The stored state (``{}`` when none)."""

    @abstractmethod
    def update_state(self, scope: Scope, change: StateChange) -> dict[str, Any]:
        """Replace the state with ``change(current)`` atomically; return the new state."""

    # -- L1 working memory --------------------------------------------------------------

    @abstractmethod
    def get_working_memory(self, scope: Scope) -> str:
        """The stored working-memory text (``""`` when none)."""

    @abstractmethod
    def swap_working_memory(self, scope: Scope, expected: str | None, text: str) -> str | None:
        """Store ``text`` if the current text equals ``expected`` (``None``: unconditionally).

        Returns ``None`` when written, else the text found (the caller lost a race).
        """

    # -- L2 plans and checkpoints -------------------------------------------------------

    @abstractmethod
    def get_plans(self, scope: Scope) -> dict[str, Any]:
        """Every plan of the scope: ``{plan_id: payload}``."""

    @abstractmethod
    def update_plans(self, scope: Scope, change: PlansChange) -> dict[str, Any]:
        """Replace the plans with ``change(current)`` atomically (``None``: keep); return the result.

        A plan id that disappears from the map also loses its step log.
        """

    @abstractmethod
    def append_plan_steps(self, scope: Scope, plan_id: str, steps: Sequence[dict[str, Any]]) -> bool:
        """Append ``steps`` (JSON objects) to the plan's step log, in one write; return whether
        the log held no step before (it is new, or was emptied since).

        Costs what the new steps cost, whatever the length of the log.
        """

    @abstractmethod
    def get_plan_steps(self, scope: Scope, plan_id: str) -> list[dict[str, Any]]:
        """The plan's step log, oldest first (``[]`` when none)."""

    def read_plan_steps(self, scope: Scope, plan_id: str, cursor: str | None = None) -> PlanSteps:
        """The steps appended after ``cursor`` (from an earlier answer; ``None``: the whole log).

        A reader that keeps what it read so far (a checkpointer folding the log) then pays for
        the new steps only. When the log was emptied or replaced since ``cursor`` (or the cursor
        is not this backend's), the answer is the whole log with ``restarted`` set. This
        default always answers the whole log; the shipped backends read from the cursor.
        """
        return PlanSteps(self.get_plan_steps(scope, plan_id), "", True)

    @abstractmethod
    def clear_plan_steps(self, scope: Scope, plan_id: str) -> None:
        """Empty the plan's step log (a fresh run of the plan starts)."""

    # -- L3 tool results ----------------------------------------------------------------

    @abstractmethod
    def tool_result_exists(self, result_id: str) -> bool:
        """Whether any scope holds result ``result_id`` (ids are unique across the store)."""

    @abstractmethod
    def save_tool_result(self, scope: Scope, result_id: str, payload: Any) -> int:
        """Store a JSON payload as the scope's result ``result_id``; return the bytes stored.

        Replaces the scope's own result of that id; an id another scope holds is refused with
        :class:`InvalidInputError` (nothing is written).
        """

    @abstractmethod
    def load_tool_result(self, scope: Scope, result_id: str) -> Any:
        """The payload; :class:`RecordNotFoundError` if missing *or owned by another scope*."""

    def read_tool_result_page(self, scope: Scope, result_id: str, offset: int, limit: int) -> ToolResultPage:
        """Characters ``offset`` to ``offset + limit`` of a stored tool output, scope-checked.

        The default loads the payload and slices it; a backend that stores outputs in chunks
        overrides it to read only the chunks the page needs.
        """
        return page_of(result_id, self.load_tool_result(scope, result_id), offset, limit)

    @abstractmethod
    def list_tool_results(self, scope: Scope) -> dict[str, ToolIndexEntry]:
        """The results the scope owns, with their sizes and save times."""

    @abstractmethod
    def count_tool_results(self, scope: Scope) -> int:
        """How many results the scope owns (cheaper than listing them)."""

    @abstractmethod
    def delete_tool_results(self, scope: Scope, result_ids: Sequence[str]) -> list[str]:
        """Delete those of ``result_ids`` the scope owns; return them. Deleting twice is harmless."""

    # -- session messages ---------------------------------------------------------------

    @abstractmethod
    def append_messages(self, scope: Scope, messages: Sequence[StoredMessage]) -> list[int]:
        """Append in one write; return the sequence numbers given (consecutive, never reused)."""

    @abstractmethod
    def get_messages(self, scope: Scope) -> list[StoredMessage]:
        """The stored messages, oldest first, each with its ``seq``."""

    @abstractmethod
    def compact_messages(self, scope: Scope, keep_last: int) -> int:
        """Keep only the last ``keep_last`` messages; return how many were dropped."""

    @abstractmethod
    def clear_messages(self, scope: Scope) -> bool:
        """Delete the scope's messages; return whether there were any."""

    # -- the scope as a whole ---------------------------------------------------------

    @abstractmethod
    def locked(self, scope: Scope) -> contextlib.AbstractContextManager[None]:
        """Hold the scope's maintenance lock (re-entrant): retention and checkpoint references
        serialize on it, so a result cannot be pruned while a checkpoint starts to use it."""

    @abstractmethod
    def list_scopes(self, *, include_erased: bool = False) -> list[ScopeInfo]:
        """Every scope that holds any runtime data; those under a pending erasure only if asked."""

    # -- lifecycle: deleting what the memory keeps --------------------------------------

    @abstractmethod
    def delete_scope(self, scope: Scope) -> int:
        """Delete everything of ``scope`` (state, working memory, plans and step logs, tool results,
        messages); return the bytes removed. Deleting an empty or deleted scope returns 0."""

    @abstractmethod
    def begin_erasure(self, erasure: Erasure) -> None:
        """Record ``erasure`` durably; from now on the scopes it covers read as empty."""

    @abstractmethod
    def end_erasure(self, erasure: Erasure) -> None:
        """Forget the record of a finished ``erasure`` (a missing record is not an error)."""

    @abstractmethod
    def pending_erasures(self) -> list[Erasure]:
        """Erasures begun and not ended (by this process or one that crashed), oldest first."""

    def recover(self) -> int:
        """Clear what an interrupted write may have left behind; return how many leftovers."""
        return 0

    def close(self) -> None:  # noqa: B027 - optional hook, most backends hold nothing to release
        """Release connections and handles (nothing to do for most backends)."""

    # -- async twins: a thread by default, overridable by native async backends -------

    async def aget_state(self, scope: Scope) -> dict[str, Any]:
        return await asyncio.to_thread(self.get_state, scope)

    async def aupdate_state(self, scope: Scope, change: StateChange) -> dict[str, Any]:
        return await asyncio.to_thread(self.update_state, scope, change)

    async def aget_working_memory(self, scope: Scope) -> str:
        return await asyncio.to_thread(self.get_working_memory, scope)

    async def aswap_working_memory(self, scope: Scope, expected: str | None, text: str) -> str | None:
        return await asyncio.to_thread(self.swap_working_memory, scope, expected, text)

    async def aget_plans(self, scope: Scope) -> dict[str, Any]:
        return await asyncio.to_thread(self.get_plans, scope)

    async def aupdate_plans(self, scope: Scope, change: PlansChange) -> dict[str, Any]:
        return await asyncio.to_thread(self.update_plans, scope, change)

    async def aappend_plan_steps(self, scope: Scope, plan_id: str, steps: Sequence[dict[str, Any]]) -> bool:
        return await asyncio.to_thread(self.append_plan_steps, scope, plan_id, steps)

    async def aget_plan_steps(self, scope: Scope, plan_id: str) -> list[dict[str, Any]]:
        return await asyncio.to_thread(self.get_plan_steps, scope, plan_id)

    async def aread_plan_steps(self, scope: Scope, plan_id: str, cursor: str | None = None) -> PlanSteps:
        return await asyncio.to_thread(self.read_plan_steps, scope, plan_id, cursor)

    async def aclear_plan_steps(self, scope: Scope, plan_id: str) -> None:
        await asyncio.to_thread(self.clear_plan_steps, scope, plan_id)

    async def atool_result_exists(self, result_id: str) -> bool:
        return await asyncio.to_thread(self.tool_result_exists, result_id)

    async def asave_tool_result(self, scope: Scope, result_id: str, payload: Any) -> int:
        return await asyncio.to_thread(self.save_tool_result, scope, result_id, payload)

    async def aload_tool_result(self, scope: Scope, result_id: str) -> Any:
        return await asyncio.to_thread(self.load_tool_result, scope, result_id)

    async def aread_tool_result_page(self, scope: Scope, result_id: str, offset: int, limit: int) -> ToolResultPage:
        return await asyncio.to_thread(self.read_tool_result_page, scope, result_id, offset, limit)

    async def alist_tool_results(self, scope: Scope) -> dict[str, ToolIndexEntry]:
        return await asyncio.to_thread(self.list_tool_results, scope)

    async def acount_tool_results(self, scope: Scope) -> int:
        return await asyncio.to_thread(self.count_tool_results, scope)

    async def adelete_tool_results(self, scope: Scope, result_ids: Sequence[str]) -> list[str]:
        return await asyncio.to_thread(self.delete_tool_results, scope, result_ids)

    async def aappend_messages(self, scope: Scope, messages: Sequence[StoredMessage]) -> list[int]:
        return await asyncio.to_thread(self.append_messages, scope, messages)

    async def aget_messages(self, scope: Scope) -> list[StoredMessage]:
        return await asyncio.to_thread(self.get_messages, scope)

    async def acompact_messages(self, scope: Scope, keep_last: int) -> int:
        return await asyncio.to_thread(self.compact_messages, scope, keep_last)

    async def aclear_messages(self, scope: Scope) -> bool:
        return await asyncio.to_thread(self.clear_messages, scope)

    async def alist_scopes(self, *, include_erased: bool = False) -> list[ScopeInfo]:
        return await asyncio.to_thread(self.list_scopes, include_erased=include_erased)

    async def adelete_scope(self, scope: Scope) -> int:
        return await asyncio.to_thread(self.delete_scope, scope)
