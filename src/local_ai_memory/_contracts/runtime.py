"""The runtime-memory storage contract: what levels L0 to L3 and the session log need.

:class:`RuntimeBackend` is the only way the runtime engines (``MemoryManager``,
``ToolResultStore``, checkpoints, the session message store, the compressor) reach storage.
Every method takes the :class:`Scope` it works on, so isolation between ``(user_id,
session_id)`` pairs is part of each call, never a convention of the caller.

A backend implements the sync methods. Each has an async twin (``a`` prefix) that by default
runs the sync method in a worker thread; a backend with a native async driver overrides the
twins, which must then keep every guarantee below. :meth:`RuntimeBackend.locked` has no twin.

The guarantees, checked by :class:`local_ai_memory.testing.RuntimeBackendTests` (words in
*italics* there name the optional capabilities a backend declares, see that class):

* **Exact values.** Text comes back exactly as given: NUL (``\\x00``), a lone CR, CRLF,
  emoji and combining characters included, in the state, working memory, plans, step logs,
  tool results and messages. Values handed in or out are copies: mutating them never changes
  what is stored.
* **Atomic writes.** A reader sees the old value or the new one, never a mix.
* **No lost update.** ``update_state``, ``update_plans`` and ``swap_working_memory`` are
  read-modify-write cycles that never lose a concurrent update: across threads always, and
  across processes (and hosts) for a backend that several processes can open (*cross_process*).
* **Isolation.** A tool result belongs to the scope that saved it: any other scope gets
  :class:`RecordNotFoundError`, exactly as for an id that does not exist, and cannot list,
  delete or overwrite it. Scope keys are compared whole: ``bob`` never sees ``bob_admin``.
* **Order and numbering.** Appended messages and steps keep their order. Message sequence
  numbers start at 0 and are consecutive, unique and gap-free per scope, however many threads
  or processes append; :meth:`~RuntimeBackend.compact_messages` never renumbers and numbers
  are never reused after it, while :meth:`~RuntimeBackend.clear_messages` starts the log anew
  (the next message gets 0) and :meth:`~RuntimeBackend.pop_message` gives the newest
  message's number back.
* **Erasure.** While an :class:`Erasure` is pending, the scopes it covers read as empty (no
  state, no messages, every tool result not found) and are not listed, so a deletion cut
  half-way by a crash is never seen half done. The record is as durable as the data: a
  backend whose data outlives the process (*durable*) keeps erasure records too, so data
  erased before a restart stays hidden after it. A write to a covered scope while the erasure
  is pending is accepted (never an error) and hidden with the rest; the erasure's deletes
  remove it, and if the erasure ends without them it reads again. :meth:`~RuntimeBackend.delete_scope`
  and the deletes of tool results are idempotent.
* **Exclusion.** :meth:`~RuntimeBackend.locked` excludes every other holder of the same
  scope's lock: other threads, and for a *cross_process* backend other processes and hosts.

Sizes ("bytes"): every size a backend reports is in bytes of its own storage encoding (the
file backend counts file bytes, PostgreSQL the bytes of its rows, the in-memory backend the
JSON of a result, and message text in characters). They serve retention and reports, so they
are comparable within one backend only; the kit checks the lower bounds and equalities
stated on each method.

Names: the engines check every id before a backend sees it (:meth:`Scope.of` for user and
session ids, the same rule for tool result ids) and refuse a hostile one (``..``, a separator,
a control character, an empty or over-long id) with :class:`InvalidInputError`. A backend that
builds paths from ids still refuses one that would leave its folder (the file backend raises
:class:`StorageError`); one that keeps ids as opaque keys stores them as given.

Times: every time a backend reports (:attr:`ScopeInfo.modified`, :attr:`ToolIndexEntry.saved_at`)
is wall-clock time in seconds since the Unix epoch, as a float: what ``time.time()`` answered
when the write happened (a file's ``st_mtime``, a database's ``extract(epoch FROM
clock_timestamp())``). Never milliseconds, never a monotonic clock (``time.monotonic()`` counts
from boot and means nothing to another process or host): retention compares save times with
``time.time()`` (``max_age_seconds``), and ``show``, ``sessions`` and the user listing print
them as dates. The kit allows a few seconds between the backend's clock and the host's.

Cursors (:meth:`RuntimeBackend.read_plan_steps`) are opaque and belong to one log of one store:
a cursor the backend never handed out for that log (another log's, another store's, one from
before the log was emptied) is not trusted; the answer is the whole log with ``restarted`` set.

Writing a backend: subclass :class:`RuntimeBackend`, implement the abstract methods, run the
conformance suite against it (see ``docs/architecture.md``, "Writing a runtime backend").
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from local_ai_memory._shared.errors import StorageError
from local_ai_memory._shared.naming import decode_name, encode_name, scope_name, validate_name
from local_ai_memory._shared.records import StoredMessage, ToolIndexEntry, ToolResultPage, page_of
from local_ai_memory._shared.twins import thread_twin

__all__ = [
    "GLOBAL_STEM",
    "STEP_BYTES_KEY",
    "Erasure",
    "PlanSteps",
    "PlansChange",
    "RuntimeBackend",
    "Scope",
    "ScopeInfo",
    "StateChange",
    "StepsChange",
    "erased",
    "join_step",
    "split_step",
]

GLOBAL_STEM = "global"

StateChange = Callable[[dict[str, Any]], dict[str, Any]]
"""Turns the stored L0 state into the new one (pure; may be called again on a retry)."""

PlansChange = Callable[[dict[str, Any]], "dict[str, Any] | None"]
"""Turns ``{plan_id: payload}`` into the new map, or ``None`` to write nothing."""

StepsChange = Callable[[list[dict[str, Any]]], "list[dict[str, Any]] | None"]
"""Turns a step log into the new one, or ``None`` to write nothing (pure; may be called again)."""


STEP_BYTES_KEY = "$bytes"
"""The key a backend's stored header of a step with ``bytes`` values names them under (reserved:
a step must not use it), see :func:`split_step`."""


def split_step(step: dict[str, Any]) -> tuple[dict[str, Any], bytes | None]:
    """A step with top-level ``bytes`` values as a JSON header and the values, raw and one after the
    other (``None``: the step has none, and is its own header).

    The header is the step without those values plus :data:`STEP_BYTES_KEY`: ``[[key, length],
    ...]`` in the order of the values. A backend stores the header as JSON and the values as bytes
    (no base64), so a step that holds megabytes of serialized values (a checkpointer's snapshot)
    costs a read of them, not a parse; :func:`join_step` is the way back.
    """
    keys = [key for key, value in step.items() if type(value) is bytes]
    if not keys:
        return step, None
    if STEP_BYTES_KEY in step:
        raise StorageError(5, f"a step with bytes values cannot use the key {STEP_BYTES_KEY!r}")
    header = {key: value for key, value in step.items() if type(value) is not bytes}
    header[STEP_BYTES_KEY] = [[key, len(step[key])] for key in keys]
    return header, b"".join(step[key] for key in keys)


def join_step(header: dict[str, Any], values: bytes | memoryview) -> dict[str, Any]:
    """The step :func:`split_step` split into ``header`` and ``values`` (``header`` is changed).

    Raises :class:`StorageError` when the header does not describe ``values`` (damaged storage).
    """
    layout = header.pop(STEP_BYTES_KEY, None)
    at = 0
    try:
        for key, length in layout:
            if type(key) is not str or type(length) is not int or length < 0:
                raise TypeError
            header[key] = bytes(values[at : at + length])
            at += length
    except (TypeError, ValueError):
        raise StorageError(5, "a stored step's bytes do not match its header") from None
    if at != len(values):
        raise StorageError(5, "a stored step's bytes do not match its header")
    return header


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
    """A scope that holds data, with its stored bytes and last change.

    ``modified`` is the wall-clock time of the scope's last write, in seconds since the Unix
    epoch (``time.time()`` when it was written; see "Times" in the module docstring).

    ``size`` is in the backend's own measure (see the module docstring) and at least the sum of
    the scope's tool-result sizes plus the UTF-8 length of its working memory; the shipped
    backends also count the scope's step logs (:meth:`RuntimeBackend.plan_step_bytes`).
    """

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
        """The stored state (``{}`` when none, or while an erasure covers the scope); a copy."""

    @abstractmethod
    def update_state(self, scope: Scope, change: StateChange) -> dict[str, Any]:
        """Replace the state with ``change(current)`` atomically; return the new state.

        No concurrent update in between is lost: two callers that each add one key both see
        their key kept, in any thread and, for a *cross_process* backend, any process. ``change``
        may be called more than once (on a retry), so it must be pure.
        """

    # -- L1 working memory --------------------------------------------------------------

    @abstractmethod
    def get_working_memory(self, scope: Scope) -> str:
        """The stored working-memory text (``""`` when none)."""

    @abstractmethod
    def swap_working_memory(self, scope: Scope, expected: str | None, text: str) -> str | None:
        """Store ``text`` if the current text equals ``expected`` (``None``: unconditionally).

        Returns ``None`` when written, else the text found (the caller lost a race). The
        comparison and the write are one atomic step: of callers racing with the same
        ``expected``, exactly one wins, across threads and (*cross_process*) processes.
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
        """Append ``steps`` (JSON objects, whose top-level values may also be ``bytes``, kept exactly
        and stored raw, see :func:`split_step`) to the plan's step log, in one write; return whether
        the log held no step before (it is new, or was emptied since).

        Costs what the new steps cost, whatever the length of the log.
        """

    @abstractmethod
    def get_plan_steps(self, scope: Scope, plan_id: str) -> list[dict[str, Any]]:
        """The plan's step log, oldest first (``[]`` when none).

        Each step has every key it was appended with, unchanged; a backend may add keys of its
        own (the file backend adds ``format_version``). A step log on its own (without a plan,
        state, working memory, result or message) does not make a scope "hold data":
        :meth:`list_scopes` leaves such a scope out.
        """

    def read_plan_steps(self, scope: Scope, plan_id: str, cursor: str | None = None) -> PlanSteps:
        """The steps appended after ``cursor`` (from an earlier answer; ``None``: the whole log).

        A reader that keeps what it read so far (a checkpointer folding the log) then pays for
        the new steps only. When the log was emptied or replaced since ``cursor``, or the cursor
        is not one this backend handed out for this log (another plan's or scope's, another
        store's, one counting more steps than the log holds), the answer is the whole log with
        ``restarted`` set: never the steps "after" a position the cursor does not name. This
        default always answers the whole log; the shipped backends read from the cursor.
        """
        return PlanSteps(self.get_plan_steps(scope, plan_id), "", True)

    @abstractmethod
    def clear_plan_steps(self, scope: Scope, plan_id: str) -> None:
        """Empty the plan's step log (a fresh run of the plan starts)."""

    def plan_step_bytes(self, scope: Scope) -> dict[str, int]:
        """The bytes each step log of the scope takes, by plan id (the backend's own measure: file
        bytes on files, row bytes on PostgreSQL). This default counts the compact JSON of the
        logs of the scope's plans (and their ``bytes`` values, raw); the shipped backends measure what
        they store."""
        import json

        def size(step: dict[str, Any]) -> int:
            header, values = split_step(step)
            return len(json.dumps(header, separators=(",", ":")).encode()) + len(values or b"")

        return {
            plan_id: sum(size(step) for step in steps)
            for plan_id in self.get_plans(scope)
            if (steps := self.get_plan_steps(scope, plan_id))
        }

    def rewrite_plan_steps(self, scope: Scope, plan_id: str, change: StepsChange) -> list[dict[str, Any]]:
        """Replace the plan's step log with ``change(current steps)`` (``None``: keep); return the log.

        For retention (a checkpointer pruning old checkpoints): the shipped backends do it in one
        atomic step under the log's lock, so a concurrent append is never lost and a crash leaves
        the old log or the new one, never a mix or an empty log (*atomic_rewrite*). ``change`` may
        be called again on a retry, so it must be pure. This default is neither: it reads, clears
        and appends, so a crash in between can empty the log; a backend overrides it to be atomic.
        """
        current = self.get_plan_steps(scope, plan_id)
        new = change([dict(step) for step in current])
        if new is None:
            return current
        self.clear_plan_steps(scope, plan_id)
        if new:
            self.append_plan_steps(scope, plan_id, new)
        return new

    # -- L3 tool results ----------------------------------------------------------------

    @abstractmethod
    def tool_result_exists(self, result_id: str) -> bool:
        """Whether any scope holds result ``result_id`` (ids are unique across the store)."""

    @abstractmethod
    def save_tool_result(self, scope: Scope, result_id: str, payload: Any) -> int:
        """Store a JSON payload as the scope's result ``result_id``; return the bytes stored.

        The bytes are the backend's own measure of what it stored for the result; never less
        than the UTF-8 length of the payload's ``content`` text, and the same number
        :meth:`list_tool_results` then reports as :attr:`ToolIndexEntry.size`. Strings are kept
        exactly (a NUL or a lone CR included). Replaces the scope's own result of that id; an
        id another scope holds is refused with :class:`InvalidInputError` (nothing is written).
        """

    @abstractmethod
    def load_tool_result(self, scope: Scope, result_id: str) -> Any:
        """The payload; :class:`RecordNotFoundError` if missing *or owned by another scope* (the
        same error either way, so an id says nothing about other scopes), or while an erasure
        covers the scope."""

    def read_tool_result_page(self, scope: Scope, result_id: str, offset: int, limit: int) -> ToolResultPage:
        """Characters ``offset`` to ``offset + limit`` of a stored tool output, scope-checked.

        The default loads the payload and slices it; a backend that stores outputs in chunks
        overrides it to read only the chunks the page needs.
        """
        return page_of(result_id, self.load_tool_result(scope, result_id), offset, limit)

    @abstractmethod
    def list_tool_results(self, scope: Scope) -> dict[str, ToolIndexEntry]:
        """The results the scope owns, with their sizes (as :meth:`save_tool_result` returned)
        and save times (``saved_at``: wall-clock seconds since the epoch of the save, what
        ``time.time()`` answered then; retention compares it with ``time.time()``); ``{}`` while
        an erasure covers the scope."""

    @abstractmethod
    def count_tool_results(self, scope: Scope) -> int:
        """How many results the scope owns (cheaper than listing them)."""

    @abstractmethod
    def delete_tool_results(self, scope: Scope, result_ids: Sequence[str]) -> list[str]:
        """Delete those of ``result_ids`` the scope owns; return them, each once, in the order
        asked. Ids the scope does not own (another scope's, missing, already deleted) are
        skipped and not returned: deleting twice returns ``[]`` the second time."""

    # -- session messages ---------------------------------------------------------------

    @abstractmethod
    def append_messages(self, scope: Scope, messages: Sequence[StoredMessage]) -> list[int]:
        """Append in one write; return the sequence numbers given.

        Numbers start at 0 for a new (or cleared) log and are consecutive: a call gets the
        next ``len(messages)`` numbers, with no gap and no duplicate however many threads or
        (*cross_process*) processes append at once. ``seq`` on the messages passed in is ignored.
        Content is kept exactly (NUL, lone CR, CRLF).
        """

    @abstractmethod
    def get_messages(self, scope: Scope) -> list[StoredMessage]:
        """The stored messages, oldest first, each with its ``seq``."""

    def get_last_messages(self, scope: Scope, limit: int) -> list[StoredMessage]:
        """The newest ``limit`` stored messages, oldest first: ``get_messages(scope)[-limit:]``
        (``[]`` when ``limit`` is 0 or less).

        This default reads the whole log. A backend that can read a log from its end overrides
        it (the file backend reads only the tail), so an agent's "last N items" costs what those
        items weigh, not what the whole session does.
        """
        return self.get_messages(scope)[-limit:] if limit > 0 else []

    @abstractmethod
    def compact_messages(self, scope: Scope, keep_last: int) -> int:
        """Keep only the last ``keep_last`` messages; return how many were dropped.

        Never renumbers, and later messages never reuse a dropped number, even when every
        message was dropped.
        """

    @abstractmethod
    def clear_messages(self, scope: Scope) -> bool:
        """Delete the scope's messages and their numbering: the next message appended gets 0.

        Returns whether the log held anything (messages, or the numbering left by a compaction
        that dropped them all).
        """

    def pop_message(self, scope: Scope) -> StoredMessage | None:
        """Remove the newest message and return it (with its ``seq``); ``None`` when there is none.

        Atomic against appends and other pops (one writer removes a given message), and it
        gives the number back: the next message appended gets the popped ``seq``, as if that
        append had not happened. A backend that cannot offer it raises
        :class:`StorageError` (the three shipped backends all can).
        """
        raise StorageError(f"{type(self).__name__} cannot pop a session message")

    # -- the scope as a whole ---------------------------------------------------------

    @abstractmethod
    def locked(self, scope: Scope) -> contextlib.AbstractContextManager[None]:
        """Hold the scope's maintenance lock: retention and checkpoint references serialize on
        it, so a result cannot be pruned while a checkpoint starts to use it.

        While one holder is inside, every other holder of the same scope's lock waits: other
        threads always, and for a *cross_process* backend other processes and hosts sharing the
        store (a lock in this process's memory is not enough there). Re-entrant in the holding
        thread. It guards only what its holders do: other reads and writes of the scope go on.
        """

    @abstractmethod
    def list_scopes(self, *, include_erased: bool = False) -> list[ScopeInfo]:
        """Every scope that holds runtime data, sorted by :attr:`Scope.key`; those under a
        pending erasure only with ``include_erased``.

        A scope holds data when it has a non-empty state, non-empty working memory, a plan, a
        tool result or a message. A step log alone does not count. Reading a scope never makes
        it listed. (The file backend also lists scopes whose files remain after being emptied,
        and, with ``include_erased``, the leftovers an interrupted erasure left; the in-memory
        reference and PostgreSQL list exactly the scopes with data.) With ``include_erased``, a
        scope emptied record by record is listed too, if the backend still keeps anything under
        its ids (a row, a lock file): erasing deletes what it lists, and must leave no trace.
        """

    # -- lifecycle: deleting what the memory keeps --------------------------------------

    @abstractmethod
    def delete_scope(self, scope: Scope) -> int:
        """Delete everything of ``scope`` (state, working memory, plans and step logs, tool results,
        messages, message numbering); return the bytes removed, in the backend's measure and at
        least the sum of its tool-result sizes plus the UTF-8 length of its working memory.
        Deleting an empty or deleted scope returns 0. Other scopes are untouched."""

    @abstractmethod
    def begin_erasure(self, erasure: Erasure) -> None:
        """Record ``erasure``; from now on the scopes it covers read as empty and are not listed.

        The record lasts as long as the data does: a *durable* backend keeps it across a
        restart (a record in process memory only would let erased data be read again after
        one). Beginning an erasure already pending keeps one record.
        """

    @abstractmethod
    def end_erasure(self, erasure: Erasure) -> None:
        """Forget the record of a finished ``erasure`` (a missing record is not an error)."""

    @abstractmethod
    def pending_erasures(self) -> list[Erasure]:
        """Erasures begun and not ended (by this process or one that crashed), oldest first:
        in the order they were begun, not sorted by user or key, each listed once.

        (Where an erasure begun again while pending goes is not specified: the in-memory and
        PostgreSQL backends keep its place, the file backend moves it to the end.)
        """

    def recover(self) -> int:
        """Clear what an interrupted write may have left behind; return how many leftovers."""
        return 0

    def close(self) -> None:  # noqa: B027 - optional hook, most backends hold nothing to release
        """Release connections and handles (nothing to do for most backends)."""

    # -- async twins: a thread by default, overridable by native async backends -------

    aget_state = thread_twin(get_state)
    aupdate_state = thread_twin(update_state)
    aget_working_memory = thread_twin(get_working_memory)
    aswap_working_memory = thread_twin(swap_working_memory)
    aget_plans = thread_twin(get_plans)
    aupdate_plans = thread_twin(update_plans)
    aappend_plan_steps = thread_twin(append_plan_steps)
    aget_plan_steps = thread_twin(get_plan_steps)
    aread_plan_steps = thread_twin(read_plan_steps)
    aclear_plan_steps = thread_twin(clear_plan_steps)
    arewrite_plan_steps = thread_twin(rewrite_plan_steps)
    aplan_step_bytes = thread_twin(plan_step_bytes)
    atool_result_exists = thread_twin(tool_result_exists)
    asave_tool_result = thread_twin(save_tool_result)
    aload_tool_result = thread_twin(load_tool_result)
    aread_tool_result_page = thread_twin(read_tool_result_page)
    alist_tool_results = thread_twin(list_tool_results)
    acount_tool_results = thread_twin(count_tool_results)
    adelete_tool_results = thread_twin(delete_tool_results)
    aappend_messages = thread_twin(append_messages)
    aget_messages = thread_twin(get_messages)
    aget_last_messages = thread_twin(get_last_messages)
    acompact_messages = thread_twin(compact_messages)
    aclear_messages = thread_twin(clear_messages)
    apop_message = thread_twin(pop_message)
    alist_scopes = thread_twin(list_scopes)
    adelete_scope = thread_twin(delete_scope)
    abegin_erasure = thread_twin(begin_erasure)
    aend_erasure = thread_twin(end_erasure)
    apending_erasures = thread_twin(pending_erasures)
