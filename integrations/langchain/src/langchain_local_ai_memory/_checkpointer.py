"""``LocalMemorySaver``: a LangGraph checkpointer (``BaseCheckpointSaver``) over local-ai-memory.

Pass it where LangGraph takes a checkpointer (``create_agent(..., checkpointer=saver)``,
``graph.compile(checkpointer=saver)``). It stores through the memory's runtime backend, so it
runs on every backend the memory runs on: plain files by default (atomic, crash-safe and shared
by every process on the machine), PostgreSQL for several hosts, or in memory for tests.

Where things go: a LangGraph thread is the session ``(user_id, thread_id)`` of the memory, so
its checkpoints sit beside that session's state, working memory and tool outputs, and
``memory.forget_user`` / ``delete_session`` / ``export`` include them. Each checkpoint
namespace of a thread is one append-only step log (on files:
``memory/plans/{user}_{thread}/lg-....jsonl``), one JSON line per ``put`` or ``put_writes``.
As LangGraph's own savers do, a ``put`` stores only the channel values whose version changed
(``new_versions``), so a step costs what changed, not the whole state. Values are serialized by
the saver's ``serde`` (LangGraph's ``JsonPlusSerializer`` by default) and kept base64-encoded;
checkpoint ids, parents, versions and metadata keys stay readable JSON.

Reads fold the log (:func:`fold_log`, pure). Each method is written once, as an operation
that yields the backend calls it needs; a sync driver makes them with the backend's methods and
an async one awaits their async twins (native on PostgreSQL), so sync and async share every rule.
``get_tuple`` keeps the fold of each namespace it read and reads the log on from where it
stopped (:meth:`~local_ai_memory.backends.RuntimeBackend.read_plan_steps`), so reading a long
thread again parses the new steps only. A process that holds nothing of a thread starts from the
namespace's snapshot (its newest checkpoints, written by a put every so often, see
:class:`~local_ai_memory.integration.checkpoint_log.Snapshot`) and reads the log from the
snapshot's cursor on; only a question about an older checkpoint reads the whole log.
A ``put`` registers its namespace with the session's
plans once per saver; after that it only appends, and the backend's answer that the log was new
(the thread was deleted meanwhile, perhaps by another process) makes it register again. Example::

    from langgraph.graph import StateGraph
    from local_ai_memory import Memory
    from langchain_local_ai_memory import LocalMemorySaver

    saver = LocalMemorySaver(Memory.open("./data"), user_id="alice")
    graph = builder.compile(checkpointer=saver)
    graph.invoke(inputs, {"configurable": {"thread_id": "t1"}})
"""

from __future__ import annotations

import copy
import hashlib
import random
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Generator, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from local_ai_memory import InvalidInputError, Memory, MemoryConfig, StorageError, UnsupportedFormatError
from local_ai_memory.backends import PlanSteps, RuntimeBackend, Scope, ScopeInfo, StepsChange
from local_ai_memory.integration import (
    adiscard_if_empty,
    adrive,
    checkpoint_log,
    collector_paused,
    discard_if_empty,
    drive,
)

from ._message_decode import list_loader, loader
from ._scope import memory_of

__all__ = ["LocalMemorySaver"]


def _plan_id(checkpoint_ns: str) -> str:
    """The step-log id of a checkpoint namespace (namespaces hold ``:`` and ``|``; ids may not)."""
    if not checkpoint_ns:
        return "lg-root"
    return "lg-" + hashlib.sha256(checkpoint_ns.encode("utf-8", "surrogatepass")).hexdigest()[:40]


def _snapshot_id(plan_id: str) -> str:
    """The step-log id of the snapshot of log ``plan_id`` (see :class:`~checkpoint_log.Snapshot`)."""
    return plan_id + "-snap"


class _UnknownError(Exception):
    """A fold from a snapshot cannot answer (the checkpoint or a value it reads lies below its
    floor): the log is read whole instead."""


class _Shared:
    """The list items one listing decoded, by their stored form: the checkpoints of a thread share
    most of their messages, so ``get_state_history`` decodes each message once, not once per
    checkpoint (at 1,000 steps, 2,000 messages instead of 100,000 for the last 50 checkpoints).

    Each checkpoint gets its own list; an item found in several checkpoints of one listing is one
    object in all of them (LangGraph reads them and never changes them; a caller that changes a
    message of one snapshot in place sees the change in the other snapshots of that listing).
    Copying each item instead costs about as much as decoding it again, most of it in the garbage
    collector's passes over the copies.
    """

    def __init__(self, serde: SerializerProtocol) -> None:
        self.loads = loader(serde)
        self.decoded: dict[tuple[str, str], Any] = {}

    def load(self, packed: checkpoint_log.Packed) -> Any:
        key = (packed[0], packed[1])
        found = self.decoded.get(key, _MISSING)
        if found is _MISSING:
            found = self.decoded[key] = self.loads(checkpoint_log.unpack(packed))
        return found


_MISSING = object()


@dataclass
class _Growth:
    """How much a namespace's log grew since its snapshot (estimated bytes) and that snapshot's size:
    a put writes a new snapshot once ``since`` reaches a share of ``size``."""

    since: int = 0
    size: int = 0

    def due(self) -> bool:
        return self.since >= max(checkpoint_log.SNAPSHOT_MIN, self.size * checkpoint_log.SNAPSHOT_RATIO)


@dataclass
class _Tip:
    """The last checkpoint this saver wrote or read in a namespace, and the list values a step
    from it can store as tails (see :func:`~._checkpoint_log.encode_channel`)."""

    checkpoint_id: str
    versions: dict[str, Any]
    lists: dict[str, checkpoint_log.ListTip]

    @property
    def size(self) -> int:
        return sum(len(data) for tip in self.lists.values() for _, data in tip.items)


def _checkpoint_entry(
    config: RunnableConfig,
    checkpoint: Checkpoint,
    metadata: CheckpointMetadata,
    new_versions: ChannelVersions,
    serde: SerializerProtocol,
    tip: _Tip | None,
) -> tuple[dict[str, Any], _Tip]:
    """The log record of a ``put``, and the tip it leaves. With ``tip`` (the parent checkpoint's),
    a list channel that only grew stores its new items; without, every changed value is whole."""
    parent = config["configurable"].get("checkpoint_id")
    if tip is not None and tip.checkpoint_id != parent:
        tip = None
    values = checkpoint["channel_values"]
    versions = dict(checkpoint["channel_versions"])
    lists = {
        channel: kept
        for channel, kept in (tip.lists.items() if tip else ())
        if channel not in new_versions and versions.get(channel) == kept.version
    }
    blobs: dict[str, Any] = {}
    for channel, version in new_versions.items():
        if channel not in values:
            blobs[channel] = [version, *checkpoint_log.pack(("empty", b""))]
            continue
        base = None
        if tip is not None and channel in tip.lists and tip.lists[channel].version == tip.versions.get(channel):
            base = tip.lists[channel]
        blobs[channel], grown = checkpoint_log.encode_channel(values[channel], version, base, serde)
        if grown is not None:
            lists[channel] = grown
    skeleton = {k: v for k, v in checkpoint.items() if k != "channel_values"}
    entry = {
        "t": "checkpoint",
        "format": checkpoint_log.FORMAT,
        "id": checkpoint["id"],
        "parent": parent,
        "checkpoint": skeleton,
        "metadata": checkpoint_log.pack(serde.dumps_typed(get_checkpoint_metadata(config, metadata))),
        "blobs": blobs,
    }
    return entry, _Tip(checkpoint["id"], versions, lists)


def _has_tails(entry: dict[str, Any]) -> bool:
    return any(isinstance(blob, dict) and "base" in blob for blob in entry.get("blobs", {}).values())


def _writes_entry(
    config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str, serde: SerializerProtocol
) -> dict[str, Any]:
    return {
        "t": "writes",
        "checkpoint_id": config["configurable"]["checkpoint_id"],
        "task_id": task_id,
        "task_path": task_path,
        "writes": [
            [WRITES_IDX_MAP.get(channel, idx), channel, *checkpoint_log.pack(serde.dumps_typed(value))]
            for idx, (channel, value) in enumerate(writes)
        ],
    }


Logs = dict[str, Sequence[dict[str, Any]]]
"""A thread's step logs by checkpoint namespace."""
Lines = list[dict[str, Any]]
Registration = Callable[[dict[str, Any]], "dict[str, Any] | None"]
"""The change of a session's plans that registers a namespace's log (``None``: already there)."""
FoldKey = tuple[str, str]
"""A namespace's log: (scope key, plan id)."""
_KEPT_FOLDS = 64  # namespaces whose fold get_tuple keeps (most recently read) ...
_KEPT_SIZE = 128 * 1024 * 1024  # ... while their packed values hold at most this many characters
_KEPT_GROWTH = 4096  # namespaces whose growth since their snapshot a saver counts (a few numbers each)
T = TypeVar("T")


@dataclass(frozen=True)
class _Call:
    """A call of the runtime backend that an operation needs; the sync driver makes it with
    ``method``, the async driver awaits the ``a`` twin of it with the same arguments."""

    method: str
    args: tuple[Any, ...] = ()

    def on(self, runtime: RuntimeBackend) -> Any:
        return getattr(runtime, self.method)(*self.args)

    async def aon(self, runtime: RuntimeBackend) -> Any:
        return await getattr(runtime, "a" + self.method)(*self.args)


@dataclass(frozen=True)
class _Discard(_Call):
    """Delete the scope ``args[0]`` whole if its last record is gone (the core's rule, so a
    deleted thread leaves no trace of its id: no empty record, lock file or row)."""

    method: str = "discard_if_empty"

    def on(self, runtime: RuntimeBackend) -> Any:
        return discard_if_empty(runtime, *self.args)

    async def aon(self, runtime: RuntimeBackend) -> Any:
        return await adiscard_if_empty(runtime, *self.args)


@dataclass(frozen=True)
class _Done(Generic[T]):
    """An operation finished with ``value``."""

    value: T


Op = Generator["_Call | CheckpointTuple", Any, T]
"""A saver operation, written once for sync and async: it yields a :class:`_Call` when it needs
the backend (and is sent the answer) and, when listing, each checkpoint it found."""


def _send(op: Op[T], reply: Any) -> _Call | CheckpointTuple | _Done[T]:
    """The operation's next request or find, or :class:`_Done` when it returned."""
    try:
        return op.send(reply)
    except StopIteration as done:
        return _Done(cast(T, done.value))


class LocalMemorySaver(BaseCheckpointSaver[str]):
    """LangGraph checkpoints kept in a :class:`~local_ai_memory.Memory` (see the module docstring).

    ``memory`` keeps the checkpoints (``config=`` is a shortcut that builds ``Memory(config)``).
    ``user_id`` names whose sessions the threads are; a thread id is a session id, so it is
    checked the same way (hostile ids raise :class:`~local_ai_memory.InvalidInputError`).

    ``ttl`` (minutes, as LangGraph's ``TTLConfig.default_ttl``) makes threads expire: a thread
    neither written nor (with ``refresh_on_read``) read for that long is deleted by
    :meth:`sweep_ttl`. Retention as LangGraph defines it: :meth:`prune` (``"keep_latest"``
    checkpoint per namespace, or ``"delete"``) and :meth:`delete_for_runs`; both rewrite a log
    atomically and keep every value a kept checkpoint reads (list tails with their bases).
    """

    def __init__(
        self,
        memory: Memory | None = None,
        user_id: str = "langgraph",
        *,
        config: MemoryConfig | None = None,
        serde: SerializerProtocol | None = None,
        ttl: float | None = None,
        refresh_on_read: bool = True,
    ) -> None:
        super().__init__(serde=serde)
        self.memory = memory_of(memory, config)
        self.user_id = user_id
        if ttl is not None and not (isinstance(ttl, (int, float)) and ttl > 0):
            raise InvalidInputError(f"ttl must be a positive number of minutes, got {ttl!r}")
        self.ttl = ttl
        self.refresh_on_read = refresh_on_read
        Scope.of(user_id, "check")  # refuse a hostile user id now, not at the first step
        self._registered: set[FoldKey] = set()  # logs this saver registered with their session's plans
        self._folds: OrderedDict[FoldKey, tuple[str, checkpoint_log.Namespace]] = OrderedDict()  # key -> (cursor, fold)
        self._tips: OrderedDict[FoldKey, _Tip] = OrderedDict()  # key -> the namespace's last checkpoint
        self._growth: OrderedDict[FoldKey, _Growth] = OrderedDict()  # key -> what its log grew since its snapshot
        self._folds_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"LocalMemorySaver({self.memory!r}, user_id={self.user_id!r})"

    # -- addressing ---------------------------------------------------------------------------

    def _scope(self, thread_id: object) -> Scope:
        if not isinstance(thread_id, str):
            raise InvalidInputError(f"thread_id must be a string, got {type(thread_id).__name__}")
        return Scope.of(self.user_id, thread_id)

    @staticmethod
    def _namespaces(plans: dict[str, Any]) -> dict[str, str]:
        """``{checkpoint_ns: plan_id}`` of the LangGraph logs among a session's plans."""
        return {
            payload["checkpoint_ns"]: plan_id
            for plan_id, payload in plans.items()
            if isinstance(payload, dict) and payload.get("kind") == checkpoint_log.PLAN_KIND
        }

    @staticmethod
    def _register(checkpoint_ns: str) -> Registration:
        plan_id = _plan_id(checkpoint_ns)

        def change(plans: dict[str, Any]) -> dict[str, Any] | None:
            if plan_id in plans:
                return None
            return {**plans, plan_id: {"kind": checkpoint_log.PLAN_KIND, "checkpoint_ns": checkpoint_ns}}

        return change

    def _tuple(
        self,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
        folded: checkpoint_log.Namespace,
        shared: _Shared | None = None,
    ) -> tuple[CheckpointTuple, _Tip] | None:
        """The checkpoint ``checkpoint_id`` as LangGraph reads it, and the tip a step from it extends.

        With ``shared`` (one listing's decoded items), list items another checkpoint of the same
        listing decoded are taken from there instead of decoded again, and the tip holds no list.
        Raises :class:`_UnknownError` when ``folded`` is a fold from a snapshot that cannot tell (the
        checkpoint, or a value it reads, lies below the snapshot's floor).
        """
        found = folded.checkpoints.get(checkpoint_id)
        if found is None:
            if not folded.knows(checkpoint_id):
                raise _UnknownError
            return None
        with collector_paused():  # thousands of objects built: no full collections on the way
            return self._build(thread_id, checkpoint_ns, checkpoint_id, found, folded, shared)

    def _build(
        self,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
        found: tuple[dict[str, Any], checkpoint_log.Packed, str | None],
        folded: checkpoint_log.Namespace,
        shared: _Shared | None,
    ) -> tuple[CheckpointTuple, _Tip]:
        """The body of :meth:`_tuple` (``found`` is the checkpoint's stored record)."""
        skeleton, metadata, parent = found
        loads = loader(self.serde)
        values = {}
        lists: dict[str, checkpoint_log.ListTip] = {}
        for channel, version in skeleton.get("channel_versions", {}).items():
            try:
                stored = checkpoint_log.resolve(folded.blobs, channel, version)
            except StorageError:
                if folded.floor is not None:
                    raise _UnknownError from None
                raise
            if stored is None:
                if folded.floor is not None:
                    raise _UnknownError
                continue
            if stored.items is not None and shared is not None:
                values[channel] = [shared.load(item) for item in stored.items]
            elif stored.items is not None:
                tip = stored.tip(version)
                values[channel] = list_loader(self.serde)(tip.items)
                lists[channel] = tip
            elif stored.packed is not None and stored.packed[0] != "empty":
                values[channel] = loads(checkpoint_log.unpack(stored.packed))
        stored_writes = folded.writes.get(checkpoint_id, {})
        ordered = sorted(stored_writes.items(), key=lambda item: writes_sort_key(item[1][3], *item[0]))
        base = {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns}
        answer = CheckpointTuple(
            config={"configurable": {**base, "checkpoint_id": checkpoint_id}},
            # A copy: LangGraph changes the checkpoint it is given (its versions) in place, and the
            # fold this came from is kept for the next read.
            checkpoint={**copy.deepcopy(skeleton), "channel_values": values},  # type: ignore[typeddict-item]
            metadata=loads(checkpoint_log.unpack(metadata)),
            parent_config={"configurable": {**base, "checkpoint_id": parent}} if parent else None,
            pending_writes=[
                (task, channel, loads(checkpoint_log.unpack(value)))
                for task, channel, value, _ in (w for _, w in ordered)
            ],
        )
        return answer, _Tip(checkpoint_id, dict(skeleton.get("channel_versions", {})), lists)

    def _select(
        self,
        thread_id: str,
        logs: Logs,
        *,
        checkpoint_id: str | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
    ) -> Iterator[CheckpointTuple]:
        """Matching checkpoints of one thread, newest first per namespace."""
        before_id = get_checkpoint_id(before) if before else None
        shared = _Shared(self.serde)
        for checkpoint_ns, entries in logs.items():
            folded = checkpoint_log.fold_log(entries)
            for cid in sorted(folded.checkpoints, reverse=True):
                if checkpoint_id and cid != checkpoint_id:
                    continue
                if before_id and cid >= before_id:
                    continue
                answer = self._tuple(thread_id, checkpoint_ns, cid, folded, shared)
                if answer is None:
                    continue
                found = answer[0]
                if _matches(found, filter):
                    yield found

    def _threads(self, scopes: Sequence[ScopeInfo]) -> list[str]:
        """The thread ids among listed sessions: this user's."""
        return sorted(
            info.scope.session_id
            for info in scopes
            if info.scope.user_id == self.user_id and info.scope.session_id is not None
        )

    def _entry(self, config: RunnableConfig, entry: dict[str, Any]) -> tuple[Scope, str, Registration, Lines]:
        """Where an entry goes: the session, the namespace's log id, its registration and the line."""
        configurable = config["configurable"]
        checkpoint_ns = configurable.get("checkpoint_ns", "")
        return self._scope(configurable["thread_id"]), _plan_id(checkpoint_ns), self._register(checkpoint_ns), [entry]

    def _located(self, config: RunnableConfig, plans: dict[str, Any]) -> tuple[str, str] | None:
        """``(checkpoint_ns, plan id)`` of the namespace ``config`` names, if its log is registered."""
        checkpoint_ns = config["configurable"].get("checkpoint_ns", "")
        plan_id = self._namespaces(plans).get(checkpoint_ns)
        return None if plan_id is None else (checkpoint_ns, plan_id)

    def _cursor(self, key: FoldKey) -> str | None:
        with self._folds_lock:
            cached = self._folds.get(key)
        return None if cached is None else cached[0]

    def _fold_in(
        self, key: FoldKey, cursor: str | None, read: PlanSteps, seed: checkpoint_log.Snapshot | None
    ) -> checkpoint_log.Namespace | None:
        """Fold ``read`` (taken from ``cursor``) into the kept fold, or into the fold of ``seed`` (the
        snapshot whose cursor it is), and keep the result for the next read.

        ``None`` when another reader moved the kept fold on since ``cursor`` (or the snapshot does
        not fold): read the log whole. Folding changes the kept fold in place, so it is done under
        the lock, as is every answer built from a kept fold.
        """
        with self._folds_lock:
            cached = self._folds.get(key)
            growth: _Growth | None = None
            if read.restarted:
                folded = checkpoint_log.fold_log(read.steps)
                growth = _Growth(sum(map(checkpoint_log.entry_size, read.steps)))
            elif seed is not None:
                base = seed.fold() if cached is None else None
                if base is None:
                    return None
                seed_size = seed.size(base)  # before the log after it is folded in
                folded = checkpoint_log.fold_log(read.steps, into=base)
                growth = _Growth(sum(map(checkpoint_log.entry_size, read.steps)), seed_size)
            elif cached is not None and cached[0] == cursor:
                folded = checkpoint_log.fold_log(read.steps, into=cached[1])
            else:
                return None
            self._folds[key] = (read.cursor, folded)
            self._folds.move_to_end(key)
            while len(self._folds) > 1 and (
                len(self._folds) > _KEPT_FOLDS or sum(kept.size for _, kept in self._folds.values()) > _KEPT_SIZE
            ):
                self._folds.popitem(last=False)  # the least recently read
            if growth is not None:
                self._growth[key] = growth
                self._growth.move_to_end(key)
                while len(self._growth) > _KEPT_GROWTH:
                    self._growth.popitem(last=False)
            return folded

    def _fold_op(
        self, scope: Scope, plan_id: str, plans: dict[str, Any] | None, *, whole: bool = False
    ) -> Op[checkpoint_log.Namespace]:
        """The fold of a namespace's log: the kept one read on, else (in a process that kept
        nothing of it) the log's snapshot and the log from the snapshot's cursor on; with
        ``whole``, the log read whole (what a fold from a snapshot could not answer)."""
        key = (scope.key, plan_id)
        cursor = None if whole else self._cursor(key)
        seed = None
        if cursor is None and not whole and (plans is None or _snapshot_id(plan_id) in plans):
            try:
                seed = checkpoint_log.Snapshot.of_steps((yield _Call("get_plan_steps", (scope, _snapshot_id(plan_id)))))
            except UnsupportedFormatError:
                seed = None  # written by a newer library: the log itself says whether it can be read
            cursor = None if seed is None else seed.cursor
        read = yield _Call("read_plan_steps", (scope, plan_id, cursor))
        folded = self._fold_in(key, cursor, read, seed)
        if folded is None:
            folded = self._fold_in(key, None, (yield _Call("read_plan_steps", (scope, plan_id))), None)
        assert folded is not None  # a whole read always folds
        return folded

    def _answer(
        self, config: RunnableConfig, checkpoint_ns: str, folded: checkpoint_log.Namespace
    ) -> tuple[CheckpointTuple | None, _Tip | None]:
        """The checkpoint ``config`` names (or the newest) from ``folded``; raises :class:`_UnknownError`."""
        with self._folds_lock:
            checkpoint_id = get_checkpoint_id(config) or folded.latest
            if checkpoint_id is None:
                return None, None
            answer = self._tuple(config["configurable"]["thread_id"], checkpoint_ns, checkpoint_id, folded)
        return (None, None) if answer is None else answer

    def _keep_tip(self, key: FoldKey, tip: _Tip | None) -> None:
        with self._folds_lock:
            if tip is None or not tip.lists:
                self._tips.pop(key, None)
                return
            self._tips[key] = tip
            self._tips.move_to_end(key)
            while len(self._tips) > 1 and (
                len(self._tips) > _KEPT_FOLDS or sum(kept.size for kept in self._tips.values()) > _KEPT_SIZE
            ):
                self._tips.popitem(last=False)

    def _tip(self, key: FoldKey) -> _Tip | None:
        with self._folds_lock:
            return self._tips.get(key)

    def _forget(self, scope: Scope) -> None:
        """Drop what this saver keeps of a thread it deleted."""
        with self._folds_lock:
            for key in [key for key in self._folds if key[0] == scope.key]:
                del self._folds[key]
            for key in [key for key in self._tips if key[0] == scope.key]:
                del self._tips[key]
            for key in [key for key in self._growth if key[0] == scope.key]:
                del self._growth[key]
            self._registered = {key for key in self._registered if key[0] != scope.key}

    # -- the operations (each one rule for sync and async) --------------------------------------

    def _logs_op(self, scope: Scope, checkpoint_ns: str | None) -> Op[Logs]:
        namespaces = self._namespaces((yield _Call("get_plans", (scope,))))
        if checkpoint_ns is not None:
            namespaces = {checkpoint_ns: namespaces[checkpoint_ns]} if checkpoint_ns in namespaces else {}
        logs: Logs = {}
        for ns, plan_id in namespaces.items():
            logs[ns] = yield _Call("get_plan_steps", (scope, plan_id))
        return logs

    def _get_tuple_op(self, config: RunnableConfig) -> Op[CheckpointTuple | None]:
        scope = self._scope(config["configurable"]["thread_id"])
        plans = yield _Call("get_plans", (scope,))
        located = self._located(config, plans)
        if located is None:
            return None
        if self.ttl is not None and self.refresh_on_read:
            now = time.time()
            if now - _touched(plans) > min(60.0, self.ttl * 6):  # at most one write per minute (or ttl/10)
                yield _Call("update_plans", (scope, _touch(now)))
        checkpoint_ns, plan_id = located
        folded = yield from self._fold_op(scope, plan_id, plans)
        try:
            found, tip = self._answer(config, checkpoint_ns, folded)
        except _UnknownError:  # below what the snapshot holds: read the log whole
            folded = yield from self._fold_op(scope, plan_id, plans, whole=True)
            found, tip = self._answer(config, checkpoint_ns, folded)
        if tip is not None:
            self._keep_tip((scope.key, plan_id), tip)  # the next step usually starts from the checkpoint just read
        return found

    def _list_op(
        self,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> Op[None]:
        """Yields each checkpoint found, at most ``limit``, reading no thread after the last one needed."""
        configurable = config["configurable"] if config else {}
        if limit is not None and limit <= 0:
            return
        checkpoint_id = get_checkpoint_id(config) if config else None
        if "thread_id" in configurable:
            yield from self._list_thread_op(
                configurable["thread_id"], configurable.get("checkpoint_ns"), checkpoint_id, filter, before, limit
            )
            return
        threads = self._threads((yield _Call("list_scopes")))
        remaining = limit
        for thread_id in threads:
            logs = yield from self._logs_op(self._scope(thread_id), configurable.get("checkpoint_ns"))
            for found in self._select(thread_id, logs, checkpoint_id=checkpoint_id, filter=filter, before=before):
                yield found
                if remaining is not None:
                    remaining -= 1
                    if remaining <= 0:
                        return

    def _list_thread_op(
        self,
        thread_id: str,
        checkpoint_ns: str | None,
        checkpoint_id: str | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> Op[None]:
        """:meth:`_list_op` of one thread: newest first per namespace, from the fold a ``get_tuple``
        reads (the snapshot and the log since), reading a log whole only to go below its floor."""
        scope = self._scope(thread_id)
        plans = yield _Call("get_plans", (scope,))
        namespaces = self._namespaces(plans)
        if checkpoint_ns is not None:
            namespaces = {checkpoint_ns: namespaces[checkpoint_ns]} if checkpoint_ns in namespaces else {}
        before_id = get_checkpoint_id(before) if before else None
        remaining = limit
        shared = _Shared(self.serde)
        for ns, plan_id in namespaces.items():
            folded = yield from self._fold_op(scope, plan_id, plans)
            seen: set[str] = set()
            while True:
                with self._folds_lock:
                    ids = sorted((cid for cid in folded.checkpoints if cid not in seen), reverse=True)
                short = False  # the fold cannot answer further down: read the log whole
                for cid in ids:
                    if folded.floor is not None and cid < folded.floor:
                        short = True
                        break
                    if (checkpoint_id and cid != checkpoint_id) or (before_id and cid >= before_id):
                        seen.add(cid)
                        continue
                    try:
                        with self._folds_lock:
                            answer = self._tuple(thread_id, ns, cid, folded, shared)
                    except _UnknownError:
                        short = True
                        break
                    seen.add(cid)
                    if answer is None:
                        continue
                    found = answer[0]
                    if not _matches(found, filter):
                        continue
                    yield found
                    if remaining is not None:
                        remaining -= 1
                        if remaining <= 0:
                            return
                    if checkpoint_id:
                        break
                if (checkpoint_id and checkpoint_id in seen and not short) or folded.floor is None:
                    break  # the checkpoint asked for was found, or a whole log was gone through
                folded = yield from self._fold_op(scope, plan_id, plans, whole=True)

    def _append_op(self, scope: Scope, plan_id: str, register: Registration, lines: Lines) -> Op[bool]:
        """Register the log once per saver, then only append; a log the append finds new had its
        thread deleted meanwhile (perhaps by another process), so it is registered again.
        Returns whether the log was new."""
        known = (scope.key, plan_id) in self._registered
        if not known:
            yield _Call("update_plans", (scope, register))
        new = bool((yield _Call("append_plan_steps", (scope, plan_id, lines))))
        if new and known:
            yield _Call("update_plans", (scope, register))
        self._registered.add((scope.key, plan_id))
        return new

    def _put_op(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata, versions: ChannelVersions
    ) -> Op[RunnableConfig]:
        scope, plan_id, register, _ = self._entry(config, {})
        key = (scope.key, plan_id)
        entry, tip = _checkpoint_entry(config, checkpoint, metadata, versions, self.serde, self._tip(key))
        new = yield from self._append_op(scope, plan_id, register, [entry])
        if new and _has_tails(entry):  # the log was begun anew under us: the bases are gone, store values whole
            entry, tip = _checkpoint_entry(config, checkpoint, metadata, versions, self.serde, None)
            yield _Call("append_plan_steps", (scope, plan_id, [entry]))
        self._keep_tip(key, tip)
        if self._grown(key, entry).due():
            yield from self._snapshot_op(scope, config["configurable"].get("checkpoint_ns", ""), plan_id)
        return _saved_config(config, checkpoint)

    def _put_writes_op(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str
    ) -> Op[None]:
        entry = _writes_entry(config, writes, task_id, task_path, self.serde)
        scope, plan_id, register, lines = self._entry(config, entry)
        yield from self._append_op(scope, plan_id, register, lines)
        self._grown((scope.key, plan_id), entry)

    def _grown(self, key: FoldKey, entry: dict[str, Any]) -> _Growth:
        """Count ``entry`` (just appended) as growth of its log since the log's snapshot."""
        with self._folds_lock:
            growth = self._growth.setdefault(key, _Growth())
            growth.since += checkpoint_log.entry_size(entry)
            self._growth.move_to_end(key)
            while len(self._growth) > _KEPT_GROWTH:
                self._growth.popitem(last=False)
            return growth

    def _snapshot_op(self, scope: Scope, checkpoint_ns: str, plan_id: str) -> Op[None]:
        """Write the snapshot of a namespace's log (its newest checkpoints, see
        :class:`~checkpoint_log.Snapshot`) in place of the last one, so a fresh process reads that
        and the log after it instead of the whole log; then keep only the snapshot's fold.

        The log is read on from this saver's fold first (its own steps since, mostly), so the
        snapshot's cursor is a position the backend handed out. A thread deleted meanwhile gets
        no snapshot (the registration finds its log gone)."""
        key = (scope.key, plan_id)
        folded = yield from self._fold_op(scope, plan_id, None)
        with self._folds_lock:
            cursor = self._folds[key][0] if key in self._folds and self._folds[key][1] is folded else None
            entries = None if cursor is None else checkpoint_log.window(folded)
        growth = self._growth.setdefault(key, _Growth())
        growth.since = 0  # whether written or not, the next try waits for the log to grow again
        if cursor is None or entries is None:
            return
        record = checkpoint_log.Snapshot(cursor, entries)
        snap_id = _snapshot_id(plan_id)
        if (scope.key, snap_id) not in self._registered:
            plans = yield _Call("update_plans", (scope, _register_snapshot(checkpoint_ns, plan_id)))
            if plan_id not in plans:
                return
            self._registered.add((scope.key, snap_id))
        step = record.to_step()
        yield _Call("rewrite_plan_steps", (scope, snap_id, lambda _: [step]))
        growth.size = checkpoint_log.entry_size(step)
        trimmed = record.fold()
        with self._folds_lock:  # keep what a fresh reader would hold, not the whole thread
            if trimmed is not None and key in self._folds and self._folds[key][0] == cursor:
                self._folds[key] = (cursor, trimmed)

    def _delete_op(self, thread_id: str) -> Op[None]:
        scope = self._scope(thread_id)
        yield _Call("update_plans", (scope, _drop_langgraph_plans))
        yield _Discard(args=(scope,))
        self._forget(scope)

    def _rewrite_op(self, scope: Scope, change: StepsChange) -> Op[None]:
        """Rewrite every LangGraph log of a thread with ``change`` (atomic per log), and empty the
        logs' snapshots (a rewritten log no longer continues their cursors: they would only be skipped)."""
        plans = yield _Call("get_plans", (scope,))
        for plan_id in self._namespaces(plans).values():
            yield _Call("rewrite_plan_steps", (scope, plan_id, change))
            if _snapshot_id(plan_id) in plans:
                yield _Call("clear_plan_steps", (scope, _snapshot_id(plan_id)))
        self._forget(scope)  # what this saver kept of the old logs may name values gone now

    def _prune_op(self, thread_ids: Sequence[str], strategy: str) -> Op[None]:
        if strategy not in ("keep_latest", "delete"):
            raise InvalidInputError(f"strategy must be 'keep_latest' or 'delete', got {strategy!r}")
        for thread_id in thread_ids:
            if strategy == "delete":
                yield from self._delete_op(thread_id)
            else:
                yield from self._rewrite_op(self._scope(thread_id), _keep_latest)

    def _delete_for_runs_op(self, run_ids: Sequence[str]) -> Op[None]:
        gone = {str(run_id) for run_id in run_ids}
        if not gone:
            return
        serde = self.serde

        def keep(checkpoint_id: str, metadata: checkpoint_log.Packed) -> bool:
            return str(serde.loads_typed(checkpoint_log.unpack(metadata)).get("run_id")) not in gone

        def change(steps: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
            return checkpoint_log.compact(steps, keep)

        for thread_id in self._threads((yield _Call("list_scopes"))):
            yield from self._rewrite_op(self._scope(thread_id), change)

    def _sweep_op(self, now: float) -> Op[int]:
        """Delete the threads whose last write or (refreshing) read is older than ``ttl``."""
        if self.ttl is None:
            return 0
        swept = 0
        for thread_id in self._threads((yield _Call("list_scopes"))):
            scope = self._scope(thread_id)
            plans = yield _Call("get_plans", (scope,))
            namespaces = self._namespaces(plans)
            if not namespaces:
                continue  # a session without LangGraph checkpoints is not this saver's to expire
            last = _touched(plans)
            for plan_id in namespaces.values():
                folded = checkpoint_log.fold_log((yield _Call("get_plan_steps", (scope, plan_id))))
                if folded.latest is not None:
                    last = max(last, _stamp(folded.checkpoints[folded.latest][0].get("ts")))
            if now - last > self.ttl * 60:
                yield from self._delete_op(thread_id)
                swept += 1
        return swept

    def _copy_op(self, source_thread_id: str, target_thread_id: str) -> Op[None]:
        source, target = self._scope(source_thread_id), self._scope(target_thread_id)
        for checkpoint_ns, entries in (yield from self._logs_op(source, None)).items():
            yield _Call("update_plans", (target, self._register(checkpoint_ns)))
            yield _Call("append_plan_steps", (target, _plan_id(checkpoint_ns), list(entries)))

    # -- drivers: the backend's sync methods, or its async twins --------------------------------

    def _stream(self, op: Op[T]) -> Generator[CheckpointTuple, None, T]:
        reply: Any = None
        while not isinstance(item := _send(op, reply), _Done):
            reply = item.on(self.memory.runtime) if isinstance(item, _Call) else (yield item)
        return item.value

    def _run(self, op: Op[T]) -> T:
        return drive(op, lambda call: cast(_Call, call).on(self.memory.runtime))  # only listing finds checkpoints

    async def _astream(self, op: Op[None]) -> AsyncIterator[CheckpointTuple]:
        reply: Any = None
        while not isinstance(item := _send(op, reply), _Done):
            reply = (await item.aon(self.memory.runtime)) if isinstance(item, _Call) else (yield item)

    async def _arun(self, op: Op[T]) -> T:
        return await adrive(op, lambda call: cast(_Call, call).aon(self.memory.runtime))

    # -- BaseCheckpointSaver --------------------------------------------------------------------

    def get_next_version(self, current: str | None, channel: None) -> str:
        """Versions unique across branches (a counter and a random part, as ``InMemorySaver``'s), so a
        fork from an old checkpoint never gives one channel two values under one version."""
        number = 0 if current is None else int(str(current).split(".")[0])
        return f"{number + 1:032}.{random.random():016}"

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._run(self._get_tuple_op(config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        return self._stream(self._list_op(config, filter, before, limit))

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self._run(self._put_op(config, checkpoint, metadata, new_versions))

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        self._run(self._put_writes_op(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        self._run(self._delete_op(thread_id))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._run(self._copy_op(source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._run(self._prune_op(thread_ids, strategy))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._run(self._delete_for_runs_op(run_ids))

    def sweep_ttl(self) -> int:
        """Delete this user's threads idle for longer than ``ttl``; return how many went."""
        return self._run(self._sweep_op(time.time()))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self._arun(self._prune_op(thread_ids, strategy))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self._arun(self._delete_for_runs_op(run_ids))

    async def asweep_ttl(self) -> int:
        """:meth:`sweep_ttl`, async."""
        return await self._arun(self._sweep_op(time.time()))

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self._arun(self._get_tuple_op(config))

    def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        return self._astream(self._list_op(config, filter, before, limit))

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await self._arun(self._put_op(config, checkpoint, metadata, new_versions))

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        await self._arun(self._put_writes_op(config, writes, task_id, task_path))

    async def adelete_thread(self, thread_id: str) -> None:
        await self._arun(self._delete_op(thread_id))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self._arun(self._copy_op(source_thread_id, target_thread_id))


def _matches(found: CheckpointTuple, filter: dict[str, Any] | None) -> bool:
    """Whether a checkpoint's metadata holds every ``filter`` pair (``list``'s rule)."""
    return not filter or all(found.metadata.get(k) == v for k, v in filter.items())


def _saved_config(config: RunnableConfig, checkpoint: Checkpoint) -> RunnableConfig:
    """The config that names a checkpoint just saved."""
    configurable = config["configurable"]
    return {
        "configurable": {
            "thread_id": configurable["thread_id"],
            "checkpoint_ns": configurable.get("checkpoint_ns", ""),
            "checkpoint_id": checkpoint["id"],
        }
    }


def _drop_langgraph_plans(plans: dict[str, Any]) -> dict[str, Any] | None:
    """Remove a session's LangGraph logs and their snapshots (their step logs go with them), keeping
    its other plans."""
    kept = {
        plan_id: payload
        for plan_id, payload in plans.items()
        if not (
            isinstance(payload, dict)
            and payload.get("kind") in (checkpoint_log.PLAN_KIND, checkpoint_log.SNAPSHOT_KIND, TOUCH_KIND)
        )
    }
    return None if len(kept) == len(plans) else kept


def _register_snapshot(checkpoint_ns: str, plan_id: str) -> Callable[[dict[str, Any]], dict[str, Any] | None]:
    """Register the snapshot log of ``plan_id``, unless that log is gone (its thread was deleted)."""
    snap_id = _snapshot_id(plan_id)

    def change(plans: dict[str, Any]) -> dict[str, Any] | None:
        if plan_id not in plans or snap_id in plans:
            return None
        return {
            **plans,
            snap_id: {"kind": checkpoint_log.SNAPSHOT_KIND, "checkpoint_ns": checkpoint_ns, "log": plan_id},
        }

    return change


TOUCH_ID = "lg-touched"
TOUCH_KIND = "langgraph-touched"
"""The plan record holding when a thread was last read (for ``ttl`` with ``refresh_on_read``)."""


def _touched(plans: dict[str, Any]) -> float:
    record = plans.get(TOUCH_ID)
    at = record.get("at") if isinstance(record, dict) else None
    return float(at) if isinstance(at, (int, float)) else 0.0


def _touch(now: float) -> Callable[[dict[str, Any]], dict[str, Any] | None]:
    def change(plans: dict[str, Any]) -> dict[str, Any] | None:
        if not any(isinstance(p, dict) and p.get("kind") == checkpoint_log.PLAN_KIND for p in plans.values()):
            return None  # the thread was deleted meanwhile: do not bring a record of it back
        return {**plans, TOUCH_ID: {"kind": TOUCH_KIND, "at": max(now, _touched(plans))}}

    return change


def _stamp(ts: object) -> float:
    """A checkpoint's ``ts`` (ISO 8601) in seconds since the epoch (0 when missing or unreadable)."""
    if not isinstance(ts, str):
        return 0.0
    try:
        return datetime.fromisoformat(ts).timestamp()
    except ValueError:
        return 0.0


def _keep_latest(steps: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    latest = checkpoint_log.fold_log(steps).latest
    return checkpoint_log.compact(steps, lambda checkpoint_id, _: checkpoint_id == latest)
