"""Seeing and erasing what the memory keeps: users, one scope, deleting a session, forgetting a user.

Everything here works through the storage contracts, so it behaves the same on every backend.

**Erasing is all or nothing for readers.** :func:`erase` first records an
:class:`~local_ai_memory.backends.Erasure` with the runtime backend (durably) and a marker blob
with the knowledge backend; from then on every read of what it covers answers as if it were
already gone. Only then are the records deleted, one by one, and the record removed last. A
crash half-way leaves the record in place: readers still see nothing, and the next
:class:`~local_ai_memory.Memory` that starts (in any process) finishes the job
(:func:`finish_pending`). A knowledge search that meets the marker finishes the knowledge part
itself before answering, so no reader ever sees a user half remembered.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from local_ai_memory._contracts.knowledge import KnowledgeBackend, erasure_marker
from local_ai_memory._contracts.runtime import Erasure, RuntimeBackend, Scope, ScopeInfo
from local_ai_memory._knowledge.conversations import CONVERSATIONS
from local_ai_memory._knowledge.store import MemoryStore
from local_ai_memory._runtime import checkpoint_log
from local_ai_memory._runtime.checkpoints import list_checkpoints
from local_ai_memory._runtime.scope import MemoryManager
from local_ai_memory._shared.naming import note_filename, owner_of, user_file_prefix
from local_ai_memory._shared.records import AgentCheckpoint, ToolIndexEntry

__all__ = [
    "ErasureReport",
    "RetentionReport",
    "ScopeReport",
    "UserInfo",
    "adiscard_if_empty",
    "apply_retention",
    "discard_if_empty",
    "erase",
    "erasure_marker",
    "finish_pending",
    "langgraph_logs",
    "list_users",
    "show_scope",
]


@dataclass(frozen=True)
class UserInfo:
    """One user the memory knows: sessions (with bytes and last change) and knowledge notes."""

    user_id: str
    sessions: list[ScopeInfo] = field(default_factory=list)
    notes: int = 0
    note_bytes: int = 0
    notes_modified: float = 0.0

    @property
    def size(self) -> int:
        """Bytes kept for the user: runtime memory of every session plus notes."""
        return sum(info.size for info in self.sessions) + self.note_bytes

    @property
    def last_used(self) -> float:
        """The newest change to anything of the user (seconds since the epoch)."""
        return max([info.modified for info in self.sessions] + [self.notes_modified])

    def to_dict(self) -> dict[str, Any]:
        return {
            "user_id": self.user_id,
            "size": self.size,
            "last_used": self.last_used,
            "notes": self.notes,
            "note_bytes": self.note_bytes,
            "sessions": [
                {"session_id": info.scope.session_id, "size": info.size, "last_used": info.modified}
                for info in self.sessions
            ],
        }


@dataclass(frozen=True)
class ScopeReport:
    """Everything one ``(user_id, session_id)`` scope holds, for a person to inspect."""

    user_id: str
    session_id: str
    state: dict[str, Any]
    working_memory: str
    checkpoints: list[AgentCheckpoint]
    tool_results: dict[str, ToolIndexEntry]
    messages: int
    langgraph: checkpoint_log.ThreadFigures = field(default_factory=checkpoint_log.ThreadFigures)
    """The session as a LangGraph thread (``LocalMemorySaver``): checkpoints, messages, bytes."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "user_id": self.user_id,
            "session_id": self.session_id,
            "state": self.state,
            "working_memory": self.working_memory,
            "checkpoints": [
                {"plan_id": c.plan_id, "status": c.status, "step": c.step, "task": c.task, "updated_at": c.updated_at}
                for c in self.checkpoints
            ],
            "tool_results": {key: entry.model_dump() for key, entry in self.tool_results.items()},
            "messages": self.messages,
            "langgraph": asdict(self.langgraph),
        }


@dataclass(frozen=True)
class ErasureReport:
    """What an erasure removed: sessions and their bytes; notes, ranker snapshots and vectors."""

    user_id: str
    session_id: str | None
    sessions: list[str] = field(default_factory=list)
    runtime_bytes: int = 0
    notes: list[str] = field(default_factory=list)
    note_bytes: int = 0
    ranker_snapshots: int = 0
    vectors: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def list_users(runtime: RuntimeBackend, knowledge: KnowledgeBackend) -> list[UserInfo]:
    """Every user with runtime memory or knowledge notes, sorted by id."""
    sessions: dict[str, list[ScopeInfo]] = defaultdict(list)
    for info in runtime.list_scopes():
        if info.scope.user_id is not None:
            sessions[info.scope.user_id].append(info)
    notes: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for category in knowledge.list_categories():
        for name, note in knowledge.list_notes(category).items():
            owner = owner_of(name)
            if owner is not None:
                notes[owner].append((note.size, note.modified))
    return [
        UserInfo(
            user_id,
            sorted(sessions.get(user_id, []), key=lambda info: info.scope.session_id or ""),
            len(notes.get(user_id, [])),
            sum(size for size, _ in notes.get(user_id, [])),
            max((modified for _, modified in notes.get(user_id, [])), default=0.0),
        )
        for user_id in sorted(set(sessions) | set(notes))
    ]


def langgraph_logs(plans: dict[str, Any]) -> dict[str, str]:
    """``{checkpoint_ns: plan_id}`` of the LangGraph checkpoint logs among a session's plans."""
    return {
        payload["checkpoint_ns"]: plan_id
        for plan_id, payload in plans.items()
        if isinstance(payload, dict) and payload.get("kind") == checkpoint_log.PLAN_KIND
    }


def langgraph_snapshots(plans: dict[str, Any]) -> list[str]:
    """Plan ids of the snapshot logs of a session's LangGraph checkpoint logs."""
    return sorted(
        plan_id
        for plan_id, payload in plans.items()
        if isinstance(payload, dict) and payload.get("kind") == checkpoint_log.SNAPSHOT_KIND
    )


def _thread_figures(runtime: RuntimeBackend, scope: Scope) -> checkpoint_log.ThreadFigures:
    plans = runtime.get_plans(scope)
    namespaces = langgraph_logs(plans)
    if not namespaces:
        return checkpoint_log.ThreadFigures()
    sizes = runtime.plan_step_bytes(scope)
    logs = {ns: runtime.get_plan_steps(scope, plan_id) for ns, plan_id in namespaces.items()}
    figures = checkpoint_log.thread_figures(logs, {ns: sizes.get(plan_id, 0) for ns, plan_id in namespaces.items()})
    snapshots = sum(sizes.get(plan_id, 0) for plan_id in langgraph_snapshots(plans))  # on disk too: counted
    return replace(figures, bytes=figures.bytes + snapshots)


def show_scope(manager: MemoryManager) -> ScopeReport:
    """What the scope of ``manager`` holds (the user's state, without the library's bookkeeping),
    a LangGraph thread's checkpoints, messages and log bytes included."""
    assert manager.user_id is not None
    assert manager.session_id is not None
    return ScopeReport(
        manager.user_id,
        manager.session_id,
        manager.get_state(),
        manager.get_working_memory(),
        list_checkpoints(manager),
        manager.list_tool_results(),
        len(manager.backend.get_messages(manager.scope_info)),
        _thread_figures(manager.backend, manager.scope_info),
    )


@dataclass(frozen=True)
class RetentionReport:
    """What :func:`apply_retention` did: sessions whose LangGraph checkpoints it pruned, how many
    checkpoints went, and the bytes of those sessions' logs before and after."""

    sessions: list[tuple[str, str]] = field(default_factory=list)
    checkpoints_removed: int = 0
    bytes_before: int = 0
    bytes_after: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def apply_retention(
    runtime: RuntimeBackend, *, now: float, max_age: float | None = None, keep_last: int | None = None
) -> RetentionReport:
    """Prune the LangGraph checkpoints of every session: keep those younger than ``max_age``
    seconds and among the ``keep_last`` newest of each namespace (either may be ``None``: no
    limit). Each log is rewritten atomically and keeps every value a kept checkpoint reads."""
    from local_ai_memory._shared.errors import InvalidInputError

    if max_age is not None and not max_age >= 0:
        raise InvalidInputError(f"max_age must be a number of seconds >= 0, got {max_age!r}")
    if keep_last is not None and keep_last < 1:
        raise InvalidInputError(f"keep_last must be at least 1, got {keep_last!r}")
    rule = checkpoint_log.retention_rule(now, max_age, keep_last)
    report = RetentionReport()
    for info in runtime.list_scopes():
        scope = info.scope
        plans = runtime.get_plans(scope)
        namespaces = langgraph_logs(plans)
        if not namespaces or scope.user_id is None or scope.session_id is None:
            continue
        before = runtime.plan_step_bytes(scope)
        removed = 0
        for plan_id in namespaces.values():
            counted: list[int] = []

            def change(steps: list[dict[str, Any]], counted: list[int] = counted) -> list[dict[str, Any]] | None:
                new = rule(steps)
                counted[:] = (
                    []
                    if new is None
                    else [
                        len(checkpoint_log.fold_log(steps).checkpoints) - len(checkpoint_log.fold_log(new).checkpoints)
                    ]
                )
                return new

            runtime.rewrite_plan_steps(scope, plan_id, change)
            removed += sum(counted)
        if removed:
            for snapshot in langgraph_snapshots(plans):  # they name positions in the logs just rewritten
                runtime.clear_plan_steps(scope, snapshot)
            after = runtime.plan_step_bytes(scope)
            report = replace(
                report,
                sessions=[*report.sessions, (scope.user_id, scope.session_id)],
                checkpoints_removed=report.checkpoints_removed + removed,
                bytes_before=report.bytes_before + sum(before.get(p, 0) for p in namespaces.values()),
                bytes_after=report.bytes_after + sum(after.get(p, 0) for p in namespaces.values()),
            )
    return report


def holds_data(runtime: RuntimeBackend, scope: Scope) -> bool:
    """Whether ``scope`` holds anything a user put there: state, working memory, a plan, a
    message or a tool result. (Step logs belong to plans; a scope has none without them.)"""
    return bool(
        runtime.get_state(scope)
        or runtime.get_working_memory(scope)
        or runtime.get_plans(scope)
        or runtime.get_last_messages(scope, 1)
        or runtime.count_tool_results(scope)
    )


def discard_if_empty(runtime: RuntimeBackend, scope: Scope) -> bool:
    """Delete ``scope`` whole when its last record is gone; return whether it did.

    Emptying a scope record by record (a LangGraph thread deleted from a session that held
    nothing else) leaves the backend's traces of the id behind: an empty plans record, its lock
    file and step-log folder, a ``scopes`` row. Forgetting means no trace of the id, so whoever
    removes a scope's records calls this afterwards. Under the scope's maintenance lock."""
    with runtime.locked(scope):
        if holds_data(runtime, scope):
            return False
        runtime.delete_scope(scope)
    return True


async def adiscard_if_empty(runtime: RuntimeBackend, scope: Scope) -> bool:
    """:func:`discard_if_empty` in a worker thread (the maintenance lock has no async twin)."""
    return await asyncio.to_thread(discard_if_empty, runtime, scope)


def _scopes_of(runtime: RuntimeBackend, erasure: Erasure) -> list[Scope]:
    return [info.scope for info in runtime.list_scopes(include_erased=True) if erasure.covers(info.scope)]


def _erase_log(store: MemoryStore, user_id: str, session_id: str) -> list[str]:
    """Delete the session's conversation log (:mod:`local_ai_memory._knowledge.conversations`),
    also when logging was switched off since it was written; return its path if there was one."""
    filename = note_filename(user_id, session_id)
    if CONVERSATIONS in store.categories:
        found = store.delete_file(f"{CONVERSATIONS}/{filename}")
    else:
        found = store.backend.delete_note(CONVERSATIONS, filename)
    if not found:
        return []
    # The index journal's delete line and the change feed still name the session: the owner's
    # index is stored afresh, and hosts that follow the feed reload it.
    store.compact_owner(user_id)
    store.backend.forget_feed(user_file_prefix(user_id))
    return [f"{CONVERSATIONS}/{filename}"]


def erase(runtime: RuntimeBackend, store: MemoryStore | None, erasure: Erasure) -> ErasureReport:
    """Delete what ``erasure`` covers (see the module docstring); return what was removed.

    A whole user (``erasure.session_id is None``) also loses every knowledge note, with index
    entries, ranker snapshots and cached vectors. Running it again is harmless.
    """
    runtime.begin_erasure(erasure)
    whole_user = erasure.session_id is None
    if whole_user and store is not None:
        store.backend.write_blob(erasure_marker(erasure.user_id), b"")
    sessions: list[str] = []
    runtime_bytes = 0
    for scope in _scopes_of(runtime, erasure):
        runtime_bytes += runtime.delete_scope(scope)
        assert scope.session_id is not None
        sessions.append(scope.session_id)
    if erasure.session_id is not None and erasure.session_id not in sessions:
        # Listed or not (a backend may list no empty scope), the named session leaves no trace.
        runtime_bytes += runtime.delete_scope(Scope.of(erasure.user_id, erasure.session_id))
    report = ErasureReport(erasure.user_id, erasure.session_id, sorted(sessions), runtime_bytes)
    if erasure.session_id is not None and store is not None:
        report = replace(report, notes=_erase_log(store, erasure.user_id, erasure.session_id))
    if whole_user and store is not None:
        forgotten = store.forget_user(erasure.user_id)
        report = replace(
            report,
            notes=forgotten.notes,
            note_bytes=forgotten.size,
            ranker_snapshots=forgotten.snapshots,
            vectors=forgotten.vectors,
        )
        store.backend.delete_blob(erasure_marker(erasure.user_id))
        store.backend.recover()  # a write cut short may have left a temporary file named after the user
    runtime.recover()
    runtime.end_erasure(erasure)
    return report


def finish_pending(runtime: RuntimeBackend, store: MemoryStore | None) -> list[ErasureReport]:
    """Complete every erasure a crashed process left half done."""
    return [erase(runtime, store, erasure) for erasure in runtime.pending_erasures()]
