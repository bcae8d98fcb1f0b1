"""``KnowledgeBackend``: what the knowledge engines need from storage, and nothing more.

The engines (change detection, the index, ranking, hybrid search) never see paths, ``os.stat``
or rows. They ask a backend for:

* **notes**: Markdown text stored by ``(category, name)``. A *note name* is
  ``{user prefix}{title}.md`` where the user prefix is :func:`user_file_prefix` (the
  percent-encoded user id and ``_``; an encoded id never contains ``_``, so the first ``_``
  ends it). :func:`is_note_name` says whether a name is one. Notes are stored and returned as
  exact bytes (CRLF, emoji, NUL and empty texts survive unchanged). Each has a cheap
  :class:`NoteInfo` (size in bytes and a version that changes on every write).
* **listings**: :meth:`KnowledgeBackend.list_notes` without a prefix returns exactly the
  stored names of the category for which :func:`is_note_name` is true (other names a backend
  may hold, ``README.md`` or ``.alice_x.md.tmp``, are never listed); with a user prefix it
  returns exactly the names that start with that prefix and end in ``.md``, so ``bob`` never
  lists ``bob_admin``'s notes (theirs start with ``bob%5Fadmin_``).
* **a change feed**: :meth:`KnowledgeBackend.changes` names the notes written or deleted
  since a cursor, so a search refreshes only those. A backend that cannot know every change
  (plain files edited by other programs, with no watcher running) answers ``None`` and the
  engines compare :meth:`~KnowledgeBackend.list_notes` with their index instead.
* **derived data**: opaque named blobs (``memory_index.json``, ranker snapshots under
  ``.bm25/``) and a :class:`VectorCache` per embedder, all of which can be rebuilt from the
  notes. Blobs under :data:`ERASING_DIR` are the one exception: they mark users being
  forgotten, they must be kept as durably as the notes (a forgetting interrupted by a crash is
  finished by the next search that meets its marker, in any process), and every search checks
  for one; :meth:`KnowledgeBackend.blob_known_absent` lets a backend that follows them spare
  that check.

A database implements this with three tables (notes with a version column, a change log
with a serial id, blobs by name) and a fourth for vectors; the sync methods are the contract,
and each async twin ``a...`` runs its sync method in a worker thread unless a natively async
backend overrides it. :mod:`local_ai_memory.testing` checks every promise below, on both.
"""

from __future__ import annotations

import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, Protocol, runtime_checkable

from local_ai_memory._shared.fs import RACY_WINDOW_NS
from local_ai_memory._shared.naming import DirectoryGuard, owner_of, user_file_prefix
from local_ai_memory._shared.twins import thread_twin

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from local_ai_memory._shared.models import Embedder

__all__ = [
    "DATA_DIR",
    "ERASING_DIR",
    "BlobAppend",
    "KnowledgeBackend",
    "NoteChanges",
    "NoteInfo",
    "NoteKey",
    "NoteVersions",
    "OwnerListing",
    "VectorCache",
    "WatchedFolder",
    "erasure_marker",
    "is_note_name",
]

_PROCESS_UPDATES = threading.Lock()
"""What the default :meth:`KnowledgeBackend.update_note` holds (one process only)."""
_PROCESS_BLOBS = threading.RLock()
"""What the default :meth:`KnowledgeBackend.append_blob` and :meth:`~KnowledgeBackend.rewrite_blobs`
hold (one process only): a default rewrite holds off default appends."""

NoteKey = tuple[str, str]
"""``(category, name)`` of one note."""


def is_note_name(name: str) -> bool:
    """Whether ``name`` is a knowledge note name: ends in ``.md``, does not start with ``.``,
    and starts with a well-formed user prefix (``alice_tea.md`` yes; ``README.md``,
    ``_x.md``, ``.alice_x.md`` and ``alice_x.txt`` no). An unprefixed listing holds exactly these."""
    return name.endswith(".md") and not name.startswith(".") and owner_of(name) is not None


DATA_DIR = "memory_data"
"""Where a data folder keeps its notes: ``{folder}/memory_data/{category}/{user}_{name}.md``."""
ERASING_DIR = ".erasing"
"""Folder of the erasure markers: blob ``f"{ERASING_DIR}/{user_file_prefix(user)}"`` exists
while ``user`` is being forgotten. A backend stores these blobs like any other, durably and
visible to every process that shares the store; a search of ``user`` that finds one finishes
the forgetting before it answers."""


def erasure_marker(user_id: str) -> str:
    """The blob name that marks ``user_id`` as being forgotten (``.erasing/alice_``)."""
    return f"{ERASING_DIR}/{user_file_prefix(user_id)}"


class NoteInfo(NamedTuple):
    """What a listing says about one note without reading it.

    ``size`` is the note's length in bytes (``len(data)``, not characters). ``version`` changes
    whenever the note is written and never goes backwards: the file's ``st_mtime_ns``
    (nanoseconds since the epoch, which :attr:`KnowledgeBackend.racy_window_ns` compares with
    ``time.time_ns()``), or a row version in a database, which grows on every write (then
    declare :attr:`KnowledgeBackend.exact_versions`). ``modified`` is the wall-clock time of the
    write: seconds since the Unix epoch as a float, what ``time.time()`` answered when the note
    was written (a file's ``st_mtime``, a database's ``extract(epoch FROM clock_timestamp())``),
    never milliseconds and never a monotonic clock (``time.monotonic()`` counts from boot): user
    listings and ``show`` compare it with ``time.time()`` of this host. Together they form the
    signature the index compares; :meth:`KnowledgeBackend.note_info`,
    :meth:`~KnowledgeBackend.list_notes` and the return of :meth:`~KnowledgeBackend.write_note`
    agree on it. (A named tuple: a listing makes one per note on every query that compares
    listings, so it must be cheap.)
    """

    category: str
    name: str
    size: int
    version: int
    modified: float


class NoteVersions(NamedTuple):
    """A listing of one category as columns, in one order (any): what
    :meth:`KnowledgeBackend.list_versions` returns. ``names[i]`` has size ``sizes[i]``, version
    ``versions[i]`` and ``modified[i]``, as its :class:`NoteInfo` would say (:meth:`info`). A
    comparison of 10k notes with the index reads these without a ``NoteInfo`` per note."""

    category: str
    names: list[str]
    sizes: list[int]
    versions: list[int]
    modified: list[float]

    def info(self, position: int) -> NoteInfo:
        """The :class:`NoteInfo` of the note at ``position``."""
        return NoteInfo(
            self.category, self.names[position], self.sizes[position], self.versions[position], self.modified[position]
        )


class OwnerListing(NamedTuple):
    """What a host reads when it starts following one owner (see
    :meth:`KnowledgeBackend.follow_owner`): the owner's change-feed cursor and their listing of
    each category asked, in the order asked. Every change the listing does not show is reported
    by :meth:`KnowledgeBackend.owner_changes` from ``cursor`` on."""

    cursor: int
    listings: list[NoteVersions]


@dataclass(frozen=True)
class BlobAppend:
    """Bytes that a note write appends to a derived blob together with the note: how the index
    journal line of a written note is stored with it (see :meth:`KnowledgeBackend.write_note_with`).

    ``line(data, info)`` gives the bytes to append once the note holds ``data`` with ``info``
    (the :class:`NoteInfo` its write returns); it is pure and cheap (no I/O, no locks), since a
    database calls it inside the note's transaction."""

    blob: str
    line: Callable[[bytes, NoteInfo], bytes]


@dataclass(frozen=True)
class NoteChanges:
    """Notes written or deleted after a cursor, and the cursor to ask from next time.

    Semantics, for a cursor ``c`` this backend returned earlier:

    * ``keys`` holds every ``(category, name)`` written or deleted after ``c`` up to ``cursor``
      (deletes included; a key written several times appears once). It may hold more, never less.
    * A reader that got ``cursor`` has seen every change up to it: a write that commits later
      gets a later cursor, in every process sharing the store (cursors follow commit order).
    * Asked again with the ``cursor`` it returned and nothing written since, the feed answers
      no keys and the same ``cursor``.
    * ``complete`` is false when the feed cannot cover the asked range (first call with
      ``since=None``, a log trimmed, a whole folder moved, a cursor it does not know): the
      caller then compares every listing once. ``keys`` is then not to be relied on.
    * **A cursor it never handed out is unknown**, never "nothing new": a cursor larger than
      the newest it gave (a database restored from an older backup, a cursor of another store)
      or, per owner, one from before :meth:`KnowledgeBackend.forget_feed` gets
      ``complete=False``. Answering it with an empty complete feed would make a host that
      restored an old database believe its index is up to date.
    """

    cursor: int
    keys: frozenset[NoteKey]
    complete: bool


class VectorCache(Protocol):
    """Unit vectors of texts by one embedder, cached by content.

    What :meth:`KnowledgeBackend.vector_cache` returns for one embedder. The rules:

    * **identity**: vectors are kept per model identity, :func:`model_id_of` of the embedder
      (its ``model_name`` attribute when it is a non-empty string, else its class's full
      name), and per text (:func:`text_digest`). Two embedders of different identity never see
      each other's vectors, even for the same text in the same store; one identity's vectors
      may be shared by every cache of that identity (in every process).
    * **checked and scaled**: what the embedder answers goes through :func:`unit_vectors`
      (one finite, non-empty vector per text, else :class:`~local_ai_memory.ModelError`) before
      anything keeps it, so every row returned has unit length.
    * **order**: row ``i`` of the result is the vector of ``items[i]``'s text, whichever rows
      were cached and which were embedded now, duplicates included.
    * **embedded once**: a text whose vector is kept is not sent to the embedder again.
    """

    def vectors_for(self, items: Sequence[tuple[str, str]]) -> npt.NDArray[np.float32]:
        """One unit vector (a row) per ``(key, text)`` pair, in the order asked.

        ``key`` is the caller's name of the item (``"knowledge/alice_tea.md"``); it lets
        :meth:`discard` find the vectors of a user's notes, and its text may differ from one
        call to the next (an edited note): the answer is always the vector of the text given.
        Texts not yet kept are embedded (through ``embedder.embed``) and kept. No items: an
        empty matrix (no rows; its width is not specified), and the embedder is not called."""

    async def avectors_for(self, items: Sequence[tuple[str, str]]) -> npt.NDArray[np.float32]:
        """Async twin of :meth:`vectors_for` (calls the embedder's ``aembed``)."""

    def embed_query(self, text: str) -> npt.NDArray[np.float32]:
        """Unit vector of a query (checked like any other; keeping it is optional)."""

    async def aembed_query(self, text: str) -> npt.NDArray[np.float32]:
        """Async twin of :meth:`embed_query`."""

    def digest_of(self, text: str) -> str:
        """The name under which this cache keeps the vector of ``text`` (for :meth:`kept`): a
        caller that embedded passages at index time records these, and a query asks for the
        vectors by them without holding the texts."""

    def kept(self, digests: Sequence[str]) -> npt.NDArray[np.float32] | None:
        """The kept unit vectors of ``digests`` (:meth:`digest_of`), one row each in order
        (duplicates included; no digests: an empty matrix), or ``None`` if any is not kept
        (never embeds: the caller decides what to embed)."""

    def discard_kept(self, digests: Sequence[str]) -> int:
        """Delete the kept vectors of ``digests`` for good; return how many were kept."""

    def discard(self, items: Sequence[tuple[str, str]]) -> int:
        """Delete the kept vectors of ``(key, text)`` items for good (a forgotten user's notes).

        Returns how many items had one (a second call for the same items returns 0). Afterwards
        :meth:`vectors_for` of those items embeds their texts again. A vector that an identical
        text elsewhere shares may go too; it is embedded again when next needed.
        """


@runtime_checkable
class WatchedFolder(Protocol):
    """What a backend over a folder offers a watcher (the file backend does): a change feed it
    opens, fills from file-system events and closes. A backend that keeps its own complete
    change feed (a database, process memory) needs no watcher and does not offer this."""

    def start_feed(self) -> None:
        """From now on every change is reported through :meth:`record_paths`."""

    def stop_feed(self) -> None:
        """The watcher stopped: the feed answers ``None`` again (compare listings)."""

    def record_paths(self, paths: Iterable[str | os.PathLike[str]]) -> int:
        """Record changed, created or deleted paths; return how many notes they named."""

    def request_rescan(self) -> None:
        """The watcher lost events: the next change query asks for a full comparison."""

    def follow_markers(self, active: bool = True) -> None:
        """Whether erasure markers arrive through :meth:`record_paths` (native watching) or are asked for."""


class KnowledgeBackend(ABC):
    """Storage of knowledge notes, their change feed and data derived from them.

    Implementations must be safe to call from several threads. Categories given to a backend
    match ``[A-Za-z0-9_-]{1,128}``; note names are single file-name components (usually note
    names, but a backend must store and return any such name it is given, and list only note
    names, see :meth:`list_notes`); blob names are ``/``-separated components. A backend still
    refuses anything that would leave its storage: a store of paths raises
    :class:`~local_ai_memory.PathEscapeError` (a ``PermissionError``) for a ``..``, a separator
    in a note name or category, or an absolute blob name, before it writes anything; a store of
    opaque keys (a database, process memory) cannot be left and keeps such a name as given.

    Several backend objects may open the same store (in one process or many, see
    ``docs/architecture.md``): then a write through one is read, listed and reported by the
    change feed of every other, and no concurrent write is lost.
    """

    exact_versions: bool = False
    """True when a note's version changes on every write (a row version). False for file
    timestamps, which may tick too coarsely to tell two quick writes apart; the engines then
    also compare content hashes of notes written very recently."""

    @property
    def racy_window_ns(self) -> int:
        """How recent (ns, against ``time.time_ns()``) a note's version must be for a change in
        the same timestamp tick to leave its version and size alone. An entry indexed within
        this window keeps a content hash until a check after it (see the note indexer). Exact
        versions need none; otherwise :data:`~local_ai_memory._shared.fs.RACY_WINDOW_NS`
        (coarse clocks, skew) unless the backend measured its storage's tick (files do)."""
        return 0 if self.exact_versions else RACY_WINDOW_NS

    folder: DirectoryGuard | None = None
    """The data folder when the notes are plain files that other programs may change (the file
    backend): the stores of one folder in a process then share their index and rankers, and a
    watcher may follow the folder. ``None`` for a database or process memory."""

    # -- notes ---------------------------------------------------------------------------------
    @abstractmethod
    def read_note(self, category: str, name: str) -> bytes | None:
        """The exact bytes of a note, or ``None`` if there is none."""

    def read_note_head(self, category: str, name: str, size: int) -> tuple[bytes, bool] | None:
        """The first ``size`` bytes of a note and whether that is the whole note, or ``None``.

        Retrieval and indexing read huge notes only as far as they need through this; the
        default slices :meth:`read_note`, a backend that can read less (files) overrides it.
        """
        data = self.read_note(category, name)
        if data is None:
            return None
        return (data, True) if len(data) <= size else (data[:size], False)

    def read_note_heads(self, category: str, names: Sequence[str], size: int) -> dict[str, tuple[bytes, bool]]:
        """:meth:`read_note_head` of several notes of ``category`` (missing ones left out).

        What a new process re-reads when it catches up (the notes its ranker snapshot lacks):
        the default reads them one by one; a database overrides it with one query, so catching
        up costs one round trip rather than one per note."""
        heads: dict[str, tuple[bytes, bool]] = {}
        for name in names:
            head = self.read_note_head(category, name, size)
            if head is not None:
                heads[name] = head
        return heads

    @abstractmethod
    def write_note(self, category: str, name: str, data: bytes) -> NoteInfo:
        """Create or replace a note atomically (readers see the old or the new bytes, never a mix)."""

    def write_notes(self, category: str, notes: Mapping[str, bytes]) -> dict[str, NoteInfo]:
        """:meth:`write_note` of many notes of ``category`` (``{name: data}``); return each one's
        :class:`NoteInfo` by name. How a service loads a new tenant or a migration.

        Each note is written atomically as by :meth:`write_note`. The default writes them one by
        one (files: an atomic write each; a crash keeps the ones written before it); a database
        overrides it with one transaction for all of them (a crash stores all or none)."""
        return {name: self.write_note(category, name, data) for name, data in notes.items()}

    def update_note(self, category: str, name: str, change: Callable[[bytes | None], bytes]) -> tuple[bytes, NoteInfo]:
        """Read-modify-write one note atomically; return the bytes written and their :class:`NoteInfo`.

        ``change`` gets the note's current bytes (``None``: there is none) and returns the new
        bytes. Two ``update_note`` calls on the same note never interleave, through any backend
        object that opens the same store, in any process (or on any host, for a database): the
        second one's ``change`` sees what the first wrote, so no update is lost. When ``change``
        raises, nothing is written and the exception propagates: that is how a compare-and-swap
        refuses (:class:`~local_ai_memory.ConflictError` from a hash check). A plain
        :meth:`write_note` is not ordered with these (last writer wins).

        The default holds one lock of this process, which is enough only for a store that no
        other process opens (process memory); a backend shared between processes overrides it
        (files: a file lock; a database: one transaction that locks the note's row).
        """
        with _PROCESS_UPDATES:
            data = bytes(change(self.read_note(category, name)))
            return data, self.write_note(category, name, data)

    def write_note_with(self, category: str, name: str, data: bytes, append: BlobAppend) -> NoteInfo:
        """:meth:`write_note`, and append ``append.line(data, info)`` to blob ``append.blob``
        with the same write; return the note's :class:`NoteInfo`.

        A backend with transactions stores both or neither (a database: one transaction, so a
        crash never leaves the note without its index line). The default writes the note, then
        appends (files: each under its own lock and crash rules; a crash between the two leaves
        the note without its line, which the index finds by its next listing comparison)."""
        info = self.write_note(category, name, data)
        self.append_blob(append.blob, append.line(bytes(data), info))
        return info

    def update_note_with(
        self, category: str, name: str, change: Callable[[bytes | None], bytes], append: BlobAppend
    ) -> tuple[bytes, NoteInfo]:
        """:meth:`update_note`, and append ``append.line(data, info)`` of the bytes written with
        it, like :meth:`write_note_with` (when ``change`` raises, nothing is written or appended)."""
        data, info = self.update_note(category, name, change)
        self.append_blob(append.blob, append.line(data, info))
        return data, info

    def delete_note_with(
        self,
        category: str,
        name: str,
        blob: str,
        line: Callable[[], bytes],
        check: Callable[[bytes | None], None] | None = None,
    ) -> bool:
        """:meth:`delete_note` (with ``check``: :meth:`delete_note_if`), and when the note existed,
        append ``line()`` to blob ``blob`` with the same delete; return whether it existed.

        How a deleted note's index journal line is stored with its delete, like
        :meth:`write_note_with` (``line`` is pure and cheap; a database calls it inside the
        transaction). A missing note or a refusing ``check`` appends nothing. The default
        deletes, then appends (a crash between the two leaves the line out, which the index's
        next listing comparison makes up for)."""
        existed = self.delete_note(category, name) if check is None else self.delete_note_if(category, name, check)
        if existed:
            self.append_blob(blob, line())
        return existed

    def delete_note_if(self, category: str, name: str, check: Callable[[bytes | None], None]) -> bool:
        """Delete a note unless ``check(current bytes or None)`` raises; return whether it existed.

        Atomic like :meth:`update_note` (and ordered with it): the bytes ``check`` sees are the
        ones deleted. When ``check`` raises, nothing is deleted and the exception propagates.
        """
        with _PROCESS_UPDATES:
            check(self.read_note(category, name))
            return self.delete_note(category, name)

    @abstractmethod
    def delete_note(self, category: str, name: str) -> bool:
        """Delete a note; return whether it existed (deleting a missing note is not an error)."""

    @abstractmethod
    def note_info(self, category: str, name: str) -> NoteInfo | None:
        """The :class:`NoteInfo` of one note, or ``None`` if there is none."""

    @abstractmethod
    def list_notes(self, category: str, user_prefix: str | None = None) -> dict[str, NoteInfo]:
        """``{name: info}`` of the notes in ``category`` (``{}`` for an unknown category).

        Without ``user_prefix``: every stored name for which :func:`is_note_name` is true, and
        no other. With ``user_prefix`` (a :func:`user_file_prefix`): every stored name that
        starts with it and ends in ``.md``, and no other. ``info`` equals :meth:`note_info`.
        """

    def list_versions(self, category: str, user_prefix: str | None = None) -> NoteVersions:
        """What :meth:`list_notes` lists, as :class:`NoteVersions` columns (what a listing
        comparison reads). The default takes them from :meth:`list_notes`; a backend may list
        them directly (files do: no ``NoteInfo`` per note)."""
        listed = self.list_notes(category, user_prefix)
        infos = list(listed.values())
        return NoteVersions(
            category,
            [info.name for info in infos],
            [info.size for info in infos],
            [info.version for info in infos],
            [info.modified for info in infos],
        )

    @abstractmethod
    def list_categories(self) -> list[str]:
        """The categories that hold (or held) notes, sorted; a category may be listed empty."""

    # -- change feed ---------------------------------------------------------------------------
    @abstractmethod
    def changes(self, since: int | None) -> NoteChanges | None:
        """Notes written or deleted after cursor ``since`` (``None``: start following now).

        ``None`` means this backend keeps no complete feed right now; compare listings instead.
        See :class:`NoteChanges` for what a returned feed promises; a ``since`` this feed never
        handed out (larger than its newest cursor) is answered with ``complete=False``.
        """

    def owner_changes(self, user_prefix: str, since: int | None) -> NoteChanges | None:
        """The change feed of one owner: notes whose name starts with ``user_prefix`` (a
        :func:`user_file_prefix`) written or deleted after ``since``, a cursor this method
        returned for the same prefix (``None``: start following now).

        What a search of one user follows, so a host catches up only on the owners it holds. A
        cursor means something only for its own prefix (a backend may count each owner's changes
        apart, so that writers of different owners never wait for one shared row); a cursor it
        never handed out for this prefix (larger than its own, or from before the owner's notes
        were forgotten) gets an incomplete answer, never a complete one. The default filters
        :meth:`changes`, whose cursors serve every owner."""
        feed = self.changes(since)
        if feed is None or not feed.complete or not feed.keys:
            return feed
        return NoteChanges(feed.cursor, frozenset(k for k in feed.keys if k[1].startswith(user_prefix)), True)

    def follow_owner(self, user_prefix: str, categories: Sequence[str]) -> OwnerListing | None:
        """Start following the owner of ``user_prefix``: their feed cursor and their
        :meth:`list_versions` of each of ``categories`` (an :class:`OwnerListing`), or ``None``
        when :meth:`owner_changes` keeps no feed (then the caller compares listings as it does
        without one).

        What a host's first query of an owner reads. The cursor is taken no later than the
        listings, so a change they miss is one :meth:`owner_changes` reports from the cursor on
        (it may report one they show, never miss one). The default asks
        :meth:`owner_changes` ``(user_prefix, None)`` and then lists each category; a database
        answers all of it in one statement (one round trip, one snapshot)."""
        feed = self.owner_changes(user_prefix, None)
        if feed is None:
            return None
        return OwnerListing(feed.cursor, [self.list_versions(category, user_prefix) for category in categories])

    def forget_feed(self, user_prefix: str) -> None:  # noqa: B027 (optional: most feeds keep nothing per owner)
        """Forget what the change feed keeps about the owner of ``user_prefix``: after their notes
        were all deleted (forgetting a user), or one whose name must not stay behind (an erased
        session's conversation log), so no trace is left. Later :meth:`owner_changes` with a
        cursor from before answer incomplete, and hosts reload the owner's stored index. The
        default keeps nothing per owner."""

    # -- derived data --------------------------------------------------------------------------
    @abstractmethod
    def read_blob(self, name: str) -> bytes | None:
        """A derived-data blob by ``/``-separated name (``memory_index.json``, ``.bm25/...``), or ``None``."""

    def read_blobs(self, names: Sequence[str]) -> dict[str, bytes]:
        """:meth:`read_blob` of several blobs: ``{name: data}`` of those that exist (a missing
        one is left out; an empty blob is ``b""``).

        What a host reads together: an owner's index snapshot and its journal, a query's ranker
        snapshots with the check for an erasure marker. The default reads them one by one; a
        database answers in one statement, which also reads them as of one moment (a snapshot
        and its journal as one compaction left them)."""
        found: dict[str, bytes] = {}
        for name in dict.fromkeys(names):
            data = self.read_blob(name)
            if data is not None:
                found[name] = data
        return found

    @abstractmethod
    def write_blob(self, name: str, data: bytes) -> None:
        """Store a blob atomically."""

    def append_blob(self, name: str, data: bytes) -> None:
        """Append ``data`` to a blob (created if missing): how the index journal grows by one
        note's entry instead of rewriting the whole index.

        Appends by several writers must not interleave within one ``data``; a crash may leave
        a partial last append, which readers of appended blobs skip. The default reads and
        rewrites the blob under no lock shared with other processes (a concurrent append may
        be lost, which the index tolerates: it re-reads what its journal misses); backends
        that can append natively (a file, an SQL concatenation) override it.
        """
        with _PROCESS_BLOBS:
            old = self.read_blob(name)
            self.write_blob(name, (old or b"") + data)

    def rewrite_blobs(self, names: Sequence[str], change: Callable[[list[bytes | None]], list[bytes]]) -> None:
        """Replace the blobs ``names`` by ``change(their current contents)`` (``None`` for a
        missing one), one result per name, written in the order named: how a user's index
        journal is folded into a new snapshot without dropping what another writer stored.

        The read and the writes hold off every other :meth:`rewrite_blobs` and
        :meth:`append_blob` of these blobs (across processes, for a backend shared by several),
        so no append lands between the read and the write and is lost. ``change`` is pure and
        may raise, which writes nothing. The default holds the lock of this process that the
        default :meth:`append_blob` holds; a backend that appends natively, or is shared by
        processes, overrides both (a file lock, a transaction with row locks)."""
        with _PROCESS_BLOBS:
            current = [self.read_blob(name) for name in names]
            new = change(current)
            for name, data in zip(names, new, strict=True):
                self.write_blob(name, data)

    @abstractmethod
    def blob_size(self, name: str) -> int | None:
        """Size in bytes of a blob, or ``None`` if there is none (cheaper than reading it)."""

    def blob_known_absent(self, name: str) -> bool:
        """True only when the backend knows, without asking its storage, that blob ``name`` does
        not exist (so a caller may skip :meth:`blob_size`). The default never knows.

        A file backend whose watcher reports every change follows the blobs under
        :data:`ERASING_DIR` this way, so a search of a user not being forgotten costs no ``stat``.
        """
        return False

    @abstractmethod
    def delete_blob(self, name: str) -> bool:
        """Delete a blob; return whether it existed (deleting a missing blob is not an error)."""

    @abstractmethod
    def quarantine_blob(self, name: str) -> str | None:
        """Keep a damaged blob aside for inspection and remove it; return where it went."""

    @abstractmethod
    def vector_cache(self, embedder: Embedder) -> VectorCache:
        """The embedding cache of ``embedder`` kept by this backend (see :class:`VectorCache`
        for its rules: unit rows in the order asked, one set of vectors per model identity)."""

    def recover(self) -> int:
        """Clear what interrupted writes may have left (temporary files); return how many leftovers."""
        return 0

    def close(self) -> None:  # noqa: B027 (optional: most backends hold nothing to release)
        """Release connections, file handles and threads; the default has none to release.

        Everything written before stays stored (a durable backend keeps it for the next
        opening). The backend is not used after this; calling it twice is harmless.
        :meth:`local_ai_memory.Memory.close` calls it.
        """

    # -- async twins: the sync method in a worker thread; a natively async backend overrides them --
    aread_note = thread_twin(read_note)
    awrite_note = thread_twin(write_note)
    awrite_notes = thread_twin(write_notes)
    adelete_note = thread_twin(delete_note)
    aupdate_note = thread_twin(update_note)
    awrite_note_with = thread_twin(write_note_with)
    aupdate_note_with = thread_twin(update_note_with)
    adelete_note_if = thread_twin(delete_note_if)
    adelete_note_with = thread_twin(delete_note_with)
    anote_info = thread_twin(note_info)
    alist_notes = thread_twin(list_notes)
    alist_versions = thread_twin(list_versions)
    achanges = thread_twin(changes)
    aowner_changes = thread_twin(owner_changes)
    afollow_owner = thread_twin(follow_owner)
    aread_blob = thread_twin(read_blob)
    aread_blobs = thread_twin(read_blobs)
    awrite_blob = thread_twin(write_blob)
    aappend_blob = thread_twin(append_blob)
    ablob_size = thread_twin(blob_size)
    aquarantine_blob = thread_twin(quarantine_blob)
    aread_note_head = thread_twin(read_note_head)
    aread_note_heads = thread_twin(read_note_heads)
    alist_categories = thread_twin(list_categories)
    adelete_blob = thread_twin(delete_blob)
    arecover = thread_twin(recover)
    aclose = thread_twin(close)
