"""``MemoryIndexService``: keeps the knowledge index live while an application runs.

At start it loads or builds the index (the only time an LLM may be used, when one is given
and the index is missing), then watches ``memory_data/`` with :mod:`watchfiles` in a
background thread. Each batch of file-system events goes into the file backend's change
feed (:meth:`~local_ai_memory._backends.files.knowledge.FileKnowledgeBackend.record_paths`) and the store
re-indexes only the files named in it (:meth:`MemoryStore.apply_changes`), so a burst of
thousands of files costs one pass and one index write. Renames arrive as a delete plus a
create, and editors' atomic saves (write a temporary file, rename it over the target) as a
change of the target; temporary and hidden names are ignored. Where native watching is
unavailable (some network or container file systems) it falls back to a ``stat()`` scan every
``poll_interval`` seconds (3 s by default).

While the service runs, the feed is open and ``store.watched`` is true, so a query does no
directory scan at all (it applies the feed, usually empty), and index writes are coalesced
to at most one per ``flush_interval``; stopping the service writes any pending change. Use
it as a context manager, sync or async::

    with MemoryIndexService(store):
        store.bm25_search("python", user_id="alice")

    async with MemoryIndexService(store):
        await store.abm25_search("python", user_id="alice")

Nobody has to start it for the index to stay current: a store over a folder (its backend's
``folder`` is set, as the file backend's is) starts an automatic watcher of its folder at its
first query (config ``auto_watch``, on by default; see :func:`watch_automatically`).
Starting a service explicitly stops that one first.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from types import TracebackType
from typing import Literal, Protocol

import watchfiles

from local_ai_memory._contracts.knowledge import KnowledgeBackend, WatchedFolder
from local_ai_memory._knowledge.roots import RootParts, note_watcher_started, registered
from local_ai_memory._shared.errors import InvalidInputError
from local_ai_memory._shared.events import Event, log_event
from local_ai_memory._shared.models import LLM

__all__ = ["AutoWatch", "MemoryIndexService", "watch_automatically"]

FULL_RESCAN_ABOVE = 20_000


class WatchedNotes(Protocol):
    """What a watcher needs of the notes it keeps indexed (a :class:`~.store.MemoryStore`)."""

    backend: KnowledgeBackend
    data_dir: Path
    watched: bool

    @property
    def dirty(self) -> bool: ...

    def ensure_index(self, llm: LLM | None = None) -> None: ...

    def apply_changes(self) -> int: ...

    def refresh_stale_entries(self, user_id: str | None = None, categories: Iterable[str] | None = None) -> int: ...

    def refresh_held(self) -> int: ...

    def hold_owners_of(self, paths: Iterable[str | os.PathLike[str]]) -> int: ...

    def follow_watcher(self, active: bool, *, coalesce: bool = True) -> None: ...

    def stop_watching(self) -> None: ...

    def flush(self) -> bool: ...

    def save_rankers(self) -> int: ...


class MemoryIndexService:
    """Builds or refreshes the index at start, then keeps it current from file-system events.

    It keeps every owner's stored index current (the owner of each changed note is loaded if
    this process did not hold them), so other processes find their indexes up to date."""

    every_owner = True
    """Whether a change of an owner this process does not hold loads that owner (an explicit
    service: yes; a store's automatic watcher keeps only the owners its queries hold)."""

    def __init__(
        self,
        store: WatchedNotes,
        *,
        mode: Literal["auto", "watch", "poll"] = "auto",
        poll_interval: float = 3.0,
        flush_interval: float = 1.0,
        debounce_ms: int = 200,
        llm: LLM | None = None,
    ) -> None:
        if mode not in ("auto", "watch", "poll"):
            raise InvalidInputError(f"mode must be auto, watch or poll, got {mode!r}")
        if poll_interval <= 0 or flush_interval < 0 or debounce_ms < 1:
            raise InvalidInputError("poll_interval must be > 0, flush_interval >= 0 and debounce_ms >= 1")
        self.store = store
        self.mode = mode
        self.poll_interval = poll_interval
        self.flush_interval = flush_interval
        self.debounce_ms = debounce_ms
        self.llm = llm
        self.active_mode: Literal["watch", "poll"] | None = None
        self.batches = 0
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        # Starting and stopping the thread, one at a time (:meth:`_launch`, :meth:`_halt`).
        self._life = threading.Lock()
        self._last_flush = 0.0
        self._tick_ms = 500  # how often the native watcher answers when nothing happens

    def __repr__(self) -> str:
        return f"MemoryIndexService({self.store!r}, mode={self.mode!r}, running={self.running})"

    @property
    def running(self) -> bool:
        """Whether the background thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        """Load or build the index, start watching, and catch up on changes made meanwhile."""
        if self.running:
            return
        backend = self._backend()
        self.store.stop_watching()  # an automatic watcher of the same folder gives way
        self.store.ensure_index(self.llm)
        backend.start_feed()
        self.store.follow_watcher(True)
        self._launch("local-ai-memory-index")
        self._ready.wait(timeout=10.0)
        # The feed just opened, so this first look compares every listing once: changes between
        # the index load and the watcher's start are caught here.
        self.store.apply_changes()

    def stop(self) -> None:
        """Stop watching and write pending index changes."""
        self._halt(30.0)
        if isinstance(self.store.backend, WatchedFolder):
            self.store.backend.stop_feed()
        self.store.follow_watcher(False)
        self.store.flush()
        self.store.save_rankers()

    def _launch(self, name: str, *events: threading.Event) -> None:
        """Start the thread (unless it runs), its stop flag, ready flag and ``events`` cleared first."""
        with self._life:
            if self.running:
                return
            for event in (self._stop, self._ready, *events):
                event.clear()
            self._thread = threading.Thread(target=self._run, name=name, daemon=True)
            self._thread.start()

    def _halt(self, timeout: float) -> None:
        """Set the stop flag and join the thread. Under the lock :meth:`_launch` holds: a stop
        that comes while another thread starts the service (the automatic watcher starts from a
        query) waits for the thread to start, instead of finding it made but not started (it
        could not join it), and a start cannot clear the flag after the stop set it."""
        with self._life:
            self._stop.set()
            thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout)

    def _backend(self) -> WatchedFolder:
        backend = self.store.backend
        if backend.folder is None or not isinstance(backend, WatchedFolder):
            raise InvalidInputError(
                f"MemoryIndexService watches files; {backend!r} keeps its own change feed and needs no watcher"
            )
        return backend

    def __enter__(self) -> MemoryIndexService:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    async def astart(self) -> None:
        """Async twin of :meth:`start`."""
        await asyncio.to_thread(self.start)

    async def astop(self) -> None:
        """Async twin of :meth:`stop`."""
        await asyncio.to_thread(self.stop)

    async def __aenter__(self) -> MemoryIndexService:
        await self.astart()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.astop()

    # -- background work ---------------------------------------------------------------------------
    def _maybe_flush(self) -> None:
        if self.store.dirty and time.monotonic() - self._last_flush >= self.flush_interval:
            self.store.flush()
            self._last_flush = time.monotonic()

    def _apply(self, paths: set[str]) -> None:
        backend = self._backend()
        if len(paths) > FULL_RESCAN_ABOVE:
            backend.request_rescan()
        else:
            backend.record_paths(paths)
            if self.every_owner:
                self.store.hold_owners_of(paths)
        self.store.apply_changes()
        self.batches += 1

    def _safe(self, paths: set[str] | None) -> None:
        try:
            if paths is None:
                if self.every_owner:
                    self.store.refresh_stale_entries()
                else:
                    self.store.refresh_held()
            elif paths:
                self._apply(paths)
            self._maybe_flush()
        except Exception as exc:  # keep watching; the next batch or stop() retries
            log_event(Event.INDEX_WATCH_ERROR, level=logging.WARNING, error=repr(exc))

    def _watch(self) -> None:
        self.active_mode = "watch"
        for changes in watchfiles.watch(
            self.store.data_dir,
            watch_filter=None,
            debounce=max(self.debounce_ms, 50),
            step=50,
            stop_event=self._stop,
            rust_timeout=self._tick_ms,
            yield_on_timeout=True,
            raise_interrupt=False,
        ):
            if not self._ready.is_set():
                self._on_ready()
            self._safe({path for _, path in changes})
            if self._stop.is_set():
                break

    def _on_ready(self) -> None:
        """The native watcher is registered (its first answer arrived): from now on its events
        report the erasure markers too, so searches stop asking storage for them."""
        self._backend().follow_markers()
        self._ready.set()

    def _poll(self) -> None:
        self.active_mode = "poll"
        self._ready.set()
        while not self._stop.wait(self.poll_interval):
            self._safe(None)

    def _run(self) -> None:
        if self.mode != "poll":
            try:
                self._watch()
                return
            except Exception as exc:
                self._backend().follow_markers(False)  # polling reports no markers: searches ask again
                log_event(Event.INDEX_WATCH_ERROR, level=logging.WARNING, error=repr(exc), fallback="poll")
                if self._stop.is_set():
                    return
        self._poll()


class AutoWatch(MemoryIndexService):
    """The watcher a store starts by itself (see :func:`watch_automatically`).

    Unlike an explicit service it does not block the query that starts it: the thread opens
    the change feed only once native watching is registered, and until then queries compare
    listings as before. Index writes are not coalesced (each change is written as without a
    watcher). Where native watching is unavailable it ends, and queries keep comparing
    listings (the polling fallback without a thread). It keeps the owners the process holds
    current, no others: an owner loaded later compares their listing once as they load.
    """

    every_owner = False

    def __init__(self, store: WatchedNotes, parts: RootParts) -> None:
        super().__init__(store, mode="watch", flush_interval=0.0, debounce_ms=100)
        self.parts = parts
        self._feeding = False
        self._tick_ms = 100  # its first answer says it is registered: queries stop listing soon
        self._caught_up = threading.Event()

    def start(self) -> None:
        """Start the watching thread and return at once."""
        if self.running:
            return
        self._backend()
        self._launch("local-ai-memory-auto-watch", self._caught_up)

    def wait_caught_up(self, timeout: float) -> bool:
        """Wait until the watcher runs and has compared every listing once (its catch-up);
        return whether it did within ``timeout`` seconds (``False`` also when it failed)."""
        return self._caught_up.wait(timeout) and self._feeding

    def _on_ready(self) -> None:
        if self._stop.is_set():
            return
        # Feed first, then the flag: a query in between compares listings once (the feed is
        # new), and no query ever takes the index as watched while the feed is closed.
        self._backend().start_feed()
        self._feeding = True
        self.store.follow_watcher(True, coalesce=False)
        super()._on_ready()
        # The feed just opened: this first look compares every listing once, catching what
        # changed before the watcher was registered.
        try:
            self.store.apply_changes()
        except Exception as exc:  # the next batch retries; queries stay correct meanwhile
            log_event(Event.INDEX_WATCH_ERROR, level=logging.WARNING, error=repr(exc))
        finally:
            self._caught_up.set()

    def _run(self) -> None:
        try:
            self._watch()
        except Exception as exc:
            self.parts.auto_failed = True
            log_event(Event.INDEX_WATCH_ERROR, level=logging.WARNING, error=repr(exc), fallback="listing comparison")
            self._close_feed()
        finally:
            self._caught_up.set()  # a query waiting for the catch-up compares by itself

    def _close_feed(self) -> None:
        if self._feeding:  # the flag first, then the feed (see _on_ready)
            self.store.follow_watcher(False)
            self._backend().stop_feed()
            self._feeding = False

    def stop(self) -> None:
        """Stop watching, then write pending index changes and ranker snapshots (best effort)."""
        self._halt(10.0)
        self._close_feed()
        try:
            self.store.flush()
            self.store.save_rankers()
        except Exception as exc:  # a cache and a write the next process redoes: never fail a stop
            log_event(Event.INDEX_WRITE_DEFERRED, level=logging.WARNING, path="at watcher stop", reason=repr(exc))


def watch_automatically(
    parts: RootParts, view: Callable[[], WatchedNotes], epoch: int | None = None
) -> AutoWatch | None:
    """Start the automatic watcher of a shared folder (once; thread-safe); ``None`` if not started.

    The watcher works through a store of its own over the shared ``parts`` (``view`` makes
    it), so it keeps no user's store (or embedder) alive. ``epoch``: the folder's
    :attr:`~.roots.RootParts.epoch` when the start was scheduled; a stop since (a closed
    ``Memory``) drops it, so nothing the library started writes into a closed folder.
    """
    if parts.backend.folder is None or not isinstance(parts.backend, WatchedFolder):
        return None
    with parts.start_lock:
        if parts.auto is not None or parts.auto_failed or parts.watched or not registered(parts):
            return None
        if epoch is not None and epoch != parts.epoch:
            return None
        watcher = AutoWatch(view(), parts)
        if not registered(parts):  # the registry moved on meanwhile: the view has other parts
            return None
        parts.auto = watcher
        note_watcher_started()
        watcher.start()
        return watcher
