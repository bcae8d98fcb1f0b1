"""What every knowledge store of one data folder shares in a process, and who watches it.

Building a :class:`~.store.MemoryStore` used to mean loading the index and building rankers
again; a web server that builds a retriever per request paid that on every request. Now the
parts that hold data (the file backend with its change feed, the index, the rankers, the
indexer and the lock that guards them) live in one :class:`RootParts` per data folder, kept in
a small registry keyed by the folder's resolved path and the settings that shape those parts
(categories, ranking field, fsync). A new store of a known folder only looks its parts up.

The registry keeps the :data:`MAX_SHARED_ROOTS` most recently opened folders. A folder pushed
out stops its automatic watcher; stores that still hold its parts keep working (they compare
listings per query again, as a store in another process would). Stores over a backend that
names no folder (:attr:`KnowledgeBackend.folder` is ``None``: a database, process memory)
share nothing; stores handed one ``Memory`` share its one store anyway.

An automatic watcher (see :func:`~.service.watch_automatically`) is one per folder in
:attr:`RootParts.auto`; :func:`close_shared_stores` stops them all and empties the registry
(it also runs at interpreter exit, and the test suites call it after each test).
"""

from __future__ import annotations

import atexit
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from local_ai_memory._knowledge.texts import NoteTexts
from local_ai_memory._shared.errors import StorageError
from local_ai_memory._shared.events import Event, log_event

if TYPE_CHECKING:
    from local_ai_memory._contracts.knowledge import KnowledgeBackend
    from local_ai_memory._knowledge.index import KnowledgeIndex
    from local_ai_memory._knowledge.indexer import NoteIndexer
    from local_ai_memory._knowledge.rankers import RankerCache
    from local_ai_memory._knowledge.search import HybridCorpus

__all__ = [
    "LET_GO_SNAPSHOT_CHANGES",
    "MAX_SHARED_ROOTS",
    "OwnerParts",
    "RootKey",
    "RootParts",
    "close_shared_stores",
    "registered",
    "shared_parts",
]

MAX_SHARED_ROOTS = 16
LET_GO_SNAPSHOT_CHANGES = 32
"""Changes since its snapshot for which a ranker is snapshotted as its owner is let go."""
RootKey = tuple[str, tuple[str, ...], str, bool, str | None, int]
"""(resolved ``memory_data`` path, categories, ranking field, fsync, stemmer language, owner budget in bytes)."""


class Watcher(Protocol):
    """What the registry needs of an automatic watcher."""

    def stop(self) -> None: ...

    @property
    def running(self) -> bool: ...

    def wait_caught_up(self, timeout: float) -> bool: ...


@dataclass(eq=False)
class OwnerParts:
    """One owner's part of a folder's state: their index, rankers and the indexer that keeps
    both current (with its place in the owner's change feed)."""

    index: KnowledgeIndex
    rankers: RankerCache
    indexer: NoteIndexer
    counted: int = 1
    """:attr:`weight` when last counted (see :meth:`RootParts.owner`)."""

    @property
    def weight(self) -> int:
        """About what the owner holds in memory, in bytes (entries and rankers; at least 1)."""
        return max(1, self.index.held_bytes() + self.rankers.held_bytes())

    def write_pending(self, *, letting_go: bool = False) -> None:
        """Store this owner's index changes not stored yet and snapshot the rankers changed
        since their last snapshot (best effort: both are redone by the next process).

        An owner being let go (``letting_go``) snapshots only rankers with
        :data:`LET_GO_SNAPSHOT_CHANGES` changes or more: the query that pushed the owner out
        pays for it, and a snapshot of 200 notes costs about 35 ms, where the owner's next load
        re-reads the few notes changed since in one read (its index journal names them)."""
        try:
            self.index.flush(compact=False)
            with self.index.lock:
                self.rankers.save_changed(LET_GO_SNAPSHOT_CHANGES if letting_go else 1)
        except StorageError as exc:
            log_event(Event.INDEX_WRITE_DEFERRED, level=logging.WARNING, path="at close", reason=str(exc))


@dataclass(eq=False)
class RootParts:
    """The shared state of one data folder: storage, the lock, and the owners held.

    Owners are loaded when first asked for (:meth:`owner`) and kept in least-recently-used
    order within :attr:`budget` bytes in all (:attr:`OwnerParts.weight`, taken as each new
    owner comes in); the least recent ones beyond it are let go
    (their pending changes stored first, by :meth:`release_evicted`), and loaded again from
    storage when asked for again. The most recent owner always stays, whatever its size."""

    backend: KnowledgeBackend
    lock: threading.RLock
    make_owner: Callable[[str], OwnerParts]
    budget: int = 48 << 20
    owners: OrderedDict[str, OwnerParts] = field(default_factory=OrderedDict)
    evicted: dict[str, OwnerParts] = field(default_factory=dict)
    """Owners let go whose pending changes are not stored yet (taken back if asked for first)."""
    key: RootKey | None = None
    watched: bool = False
    """True while a watcher keeps the index current: queries then compare no listings."""
    defer_writes: bool = False
    """True while index writes are coalesced (an explicit MemoryIndexService flushes them)."""
    auto: Watcher | None = None
    """The automatic watcher, once a query started it."""
    auto_failed: bool = False
    """Native watching is unavailable here: queries keep comparing listings."""
    auto_pending: bool = False
    """A query scheduled the automatic watcher's start (it starts a moment after that query)."""
    start_lock: threading.Lock = field(default_factory=threading.Lock)
    epoch: int = 0
    """Counted up (under :attr:`start_lock`) when the automatic watcher is stopped: a start
    scheduled before that is dropped (see :func:`~.service.watch_automatically`)."""
    hybrid_corpora: dict[tuple[str, tuple[str, ...]], tuple[int, HybridCorpus]] = field(default_factory=dict)
    """Hybrid search's corpus per ``(user, categories)``, with the index generation it was built at."""
    note_texts: NoteTexts = field(default_factory=NoteTexts)
    """Small notes' texts as Stage 3 last read them, each valid for one index entry."""

    def owner(self, owner: str) -> OwnerParts:
        """``owner``'s parts, made (not loaded: see the store) the first time, now the most
        recent. Owners past the budget move to :attr:`evicted` (callers hold :attr:`lock`)."""
        owners = self.owners
        parts = owners.get(owner)
        last = next(reversed(owners.values())) if owners else None
        if parts is not None and parts is last:
            return parts
        if last is not None:
            # Only the most recent owner changed since the last switch (it was just loaded, asked
            # or written): count it again, and the others as they were last counted (a hundred
            # owners' arrays weighed at every switch would cost milliseconds).
            last.counted = last.weight
        if parts is None:
            parts = self.evicted.pop(owner, None) or self.make_owner(owner)
            owners[owner] = parts
        else:
            owners.move_to_end(owner)
        total = sum(held.counted for held in owners.values())
        while total > self.budget and len(owners) > 1:
            name, old = owners.popitem(last=False)
            total -= old.counted
            self.evicted[name] = old
            self.hybrid_corpora = {k: v for k, v in self.hybrid_corpora.items() if k[0] != name}
        return parts

    def held(self) -> list[OwnerParts]:
        """The owners held now, least recent first (callers hold :attr:`lock`)."""
        return list(self.owners.values())

    def release_evicted(self) -> None:
        """Store what the owners let go still hold, then forget them (called without the lock:
        an index write takes its own write lock before the store's)."""
        with self.lock:
            if not self.evicted:
                return
            gone = list(self.evicted.items())
        for name, parts in gone:
            parts.write_pending(letting_go=True)
            with self.lock:
                if self.evicted.get(name) is parts:
                    del self.evicted[name]

    def write_pending(self) -> None:
        """Store every held owner's index changes not stored yet and snapshot their changed
        rankers, as a watcher's stop does: a folder closed before its watcher started (it
        starts a moment after the first query) would otherwise leave its rankers' last
        changes unsaved, and the next process would re-read those notes."""
        with self.lock:
            every = [*self.owners.values(), *self.evicted.values()]
        for parts in every:
            parts.write_pending()


_registry: OrderedDict[RootKey, RootParts] = OrderedDict()
_registry_lock = threading.Lock()
_exit_hook = False


def shared_parts(key: RootKey, build: Callable[[], RootParts]) -> RootParts:
    """The parts of ``key``'s folder, built by ``build`` the first time (thread-safe)."""
    evicted: list[RootParts] = []
    with _registry_lock:
        parts = _registry.get(key)
        if parts is not None:
            _registry.move_to_end(key)
            return parts
        parts = build()
        parts.key = key
        _registry[key] = parts
        while len(_registry) > MAX_SHARED_ROOTS:
            evicted.append(_registry.popitem(last=False)[1])
    for old in evicted:
        _stop(old)
    return parts


def registered(parts: RootParts) -> bool:
    """Whether ``parts`` are still the registry's parts of their folder (only those are watched)."""
    with _registry_lock:
        return parts.key is not None and _registry.get(parts.key) is parts


def note_watcher_started() -> None:
    """Make sure the watchers are stopped cleanly when the interpreter exits."""
    global _exit_hook
    with _registry_lock:
        if not _exit_hook:
            atexit.register(close_shared_stores)
            _exit_hook = True


def _stop(parts: RootParts) -> None:
    # Under the start lock: a watcher being started now is either seen here or never starts
    # (its start checks the registry, which no longer holds these parts).
    with parts.start_lock:
        watcher, parts.auto = parts.auto, None
    if watcher is not None:
        watcher.stop()  # writes the pending changes itself
    else:
        parts.write_pending()


def close_shared_stores() -> None:
    """Stop every automatic watcher of this process, write every folder's pending index changes
    and ranker snapshots (watched or not), and forget the shared per-folder state; stores
    opened afterwards load the index again."""
    with _registry_lock:
        all_parts = list(_registry.values())
        _registry.clear()
    for parts in all_parts:
        _stop(parts)
