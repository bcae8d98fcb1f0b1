"""``KnowledgeIndex``: the index entries in memory, stored as a snapshot and a journal.

One index per owner (the user the notes belong to), stored as ``.index/{user}_index.json``
(v4: the snapshot of the owner's entries) and ``.index/{user}_index.journal`` (the entries
changed since, one JSON line per note; see :mod:`.index_file`). The blobs are read once, when
the owner is first asked for. After a batch of changes
:meth:`KnowledgeIndex.flush` appends the changed notes' lines to the journal, so a write costs
its note, not the index; when the journal passes :func:`journal_bound` lines (or the entries
were replaced wholesale) it writes a new snapshot and a fresh journal instead (a compaction).
Compaction folds what is stored (the snapshot and journal as they are at that moment, under a
lock that appends wait for) with the notes this process changed, so another writer's entries
stay in the snapshot even where this process never loaded them. A written note's line goes to
the backend with the note (:meth:`~local_ai_memory._contracts.knowledge.KnowledgeBackend.write_note_with`, see
:meth:`KnowledgeIndex.line_slot`): one transaction on a database. Where the two are separate
(files, or a write that indexes after its note), a crash between them leaves the note
unindexed in storage; the listing comparison (or the change feed) after the next load finds
it, as it found any change made behind the index's back. A broken snapshot is quarantined and
an outdated one ignored: the caller rebuilds from the notes. An owner with no index of their
own is read from the one index of every owner that 0.2 (version 3) and 0.3 kept, their rows
only, and their first write stores their own (see :meth:`KnowledgeIndex.load_stored`).

The entries are an :class:`EntryMap`: a snapshot's entries stay undecoded until read, and what
a fresh process compares for all of them comes from the snapshot's columns (see
:class:`~.index_file.IndexColumns`).

Besides the entries it keeps, per ``(user, category)``, the names each user owns, and the
signatures of notes that were skipped (not UTF-8 or binary) so they are not re-read until they
change: they are kept in the blobs too, so no other process re-reads them either. Callers hold
``lock``.
"""

from __future__ import annotations

import bisect
import itertools
import operator
import threading
import time
import uuid
from collections.abc import Container, ItemsView, Iterable, Iterator, Mapping, MutableMapping, Sequence, ValuesView
from typing import NamedTuple, TypeVar

import numpy as np
import numpy.typing as npt

from local_ai_memory._contracts.knowledge import KnowledgeBackend, NoteVersions, is_note_name
from local_ai_memory._knowledge.index_file import (
    IndexEntry,
    SkippedNote,
    SnapshotRows,
    StoredEntry,
    column_keys,
    column_skipped,
    journal_header,
    journal_line,
    metadata_checksum,
    parse_columns,
    parse_index,
    parse_journal,
    serialize_index,
)
from local_ai_memory._shared.events import Event, log_event
from local_ai_memory._shared.naming import owner_of, user_file_prefix

__all__ = [
    "INDEX_NAME",
    "JOURNAL_MIN",
    "JOURNAL_NAME",
    "MANIFEST",
    "MANIFEST_NAME",
    "OWNER_DIR",
    "EntryKey",
    "EntryMap",
    "KnowledgeIndex",
    "StoredIndex",
    "index_names",
    "journal_bound",
]

INDEX_NAME = "memory_index.json"
"""The one index of every owner, as 0.2 and 0.3 stored it: read (the asked owner's rows) until
that owner's own snapshot exists, never written again."""
JOURNAL_NAME = "memory_index.journal"
OWNER_DIR = ".index"
"""Folder of the per-owner index blobs (see :func:`index_names`)."""


MANIFEST_NAME = f"{OWNER_DIR}/manifest.json"
MANIFEST = b'{"format_version": 5, "layout": "one index per owner"}'
"""Written once beside the owners' indexes: a store holds an index (see ``index_exists``)
without listing blobs. Format 5 is the per-owner layout; 4 and older had one index for all."""


def index_names(owner: str) -> tuple[str, str]:
    """The snapshot and journal blob names of ``owner``'s index: ``.index/alice_index.json``
    and ``.index/alice_index.journal`` (the user's file prefix keeps ``bob`` from ``bob_admin``)."""
    prefix = user_file_prefix(owner)
    return f"{OWNER_DIR}/{prefix}index.json", f"{OWNER_DIR}/{prefix}index.journal"


JOURNAL_MIN = 128
"""A journal is folded into a new snapshot once it holds more lines than :func:`journal_bound`."""
JOURNAL_RATIO = 64


def journal_bound(entries: int) -> int:
    """Lines a journal may hold over a snapshot of ``entries`` entries before a compaction:
    at least :data:`JOURNAL_MIN`, growing with the index (1/64 of it) so the snapshot writes
    stay a constant share of the writes' cost (amortized O(1) per write), while a new process
    replays and re-reads at most that many notes beyond its snapshots."""
    return max(JOURNAL_MIN, entries // JOURNAL_RATIO)


EntryKey = tuple[str, str]  # (category, filename)
OwnerRun = tuple[int, int, str]  # start, end, owner: snapshot rows of one owner in one category
Signature = tuple[int, int]  # (version, size) of a note
_V = TypeVar("_V")
Listed = tuple[int | None, int | None, bool]  # mtime_ns, size, holds a content hash


_ROW_BYTES = 250  # a snapshot row's key, its place in the row dict and its columns
_ENTRY_BYTES = 1500  # a decoded entry: the model, its strings and keyword list


class EntryMap(MutableMapping[EntryKey, IndexEntry]):
    """The index entries by ``(category, filename)``: the rows of the loaded snapshot
    (:class:`~.index_file.SnapshotRows`), each decoded only when it is read, and the entries
    set in this process since. What a fresh process's first query needs of all 10k entries
    (keys, listing signatures, metadata checksums, content-hash flags) comes from the
    snapshot's columns (:meth:`not_as_listed`, :meth:`row_numbers`, :meth:`checksum`,
    :meth:`racy_keys`); a compaction copies the rows it never decoded as they were stored
    (:meth:`stored_items`). A key is in one of the two at a time."""

    __slots__ = ("_row", "_rows", "_runs", "_set")

    def __init__(
        self,
        entries: Mapping[EntryKey, IndexEntry] | None = None,
        rows: SnapshotRows | None = None,
        row_of: dict[EntryKey, int] | None = None,
        runs: Sequence[OwnerRun] = (),
    ) -> None:
        self._rows = rows
        self._row: dict[EntryKey, int] = row_of if row_of is not None and rows is not None else {}
        self._runs = runs if rows is not None else ()  # the rows of ``row_of``, by owner (see owners())
        self._set: dict[EntryKey, IndexEntry] = dict(entries) if entries is not None else {}

    def __getitem__(self, key: EntryKey) -> IndexEntry:
        row = self._row.get(key)
        if row is None:
            return self._set[key]
        assert self._rows is not None
        return self._rows.entry(row)

    def get(self, key: EntryKey, default: IndexEntry | None = None) -> IndexEntry | None:  # type: ignore[override]
        row = self._row.get(key)
        if row is None:
            return self._set.get(key, default)
        assert self._rows is not None
        return self._rows.entry(row)

    def __setitem__(self, key: EntryKey, entry: IndexEntry) -> None:
        if self._row:
            self._row.pop(key, None)
        self._set[key] = entry

    def __delitem__(self, key: EntryKey) -> None:
        if self._row.pop(key, None) is None:
            del self._set[key]

    def __contains__(self, key: object) -> bool:
        return key in self._row or key in self._set

    def __iter__(self) -> Iterator[EntryKey]:
        return itertools.chain(self._row, self._set)

    def __len__(self) -> int:
        return len(self._row) + len(self._set)

    def _decode_many(self) -> None:
        # A walk over the values: one parse of the stored list beats one per entry.
        if self._rows is not None and self._row:
            self._rows.decode_all()

    def values(self) -> ValuesView[IndexEntry]:
        self._decode_many()
        return super().values()

    def items(self) -> ItemsView[EntryKey, IndexEntry]:
        self._decode_many()
        return super().items()

    def held_bytes(self) -> int:
        """About what the entries hold in memory: the snapshot's bytes, each row's key and
        columns, each entry decoded or set (estimates measured with tracemalloc on CPython
        3.11, for a host's budget of users, ``memory.owner_cache_mb``)."""
        rows = self._rows
        stored = 0 if rows is None else len(rows.data) + _ROW_BYTES * len(rows) + _ENTRY_BYTES * rows.decoded_count
        return stored + _ENTRY_BYTES * len(self._set)

    def copy(self) -> EntryMap:
        """A shallow copy (the same entries and snapshot rows)."""
        return EntryMap(self._set, self._rows, dict(self._row), self._runs)

    def not_as_listed(self, listed: NoteVersions, start: int = 0, end: int | None = None) -> list[int]:
        """The positions in ``listed`` (from ``start`` to ``end``) of the notes whose entry is
        missing, differs from the listing in version or size, or holds a content hash: all but
        the notes unchanged since they were indexed (the usual 10k of a listing comparison),
        found without decoding an entry. The snapshot's rows are compared in one array
        operation; the entries set in this process since, one by one."""
        end = len(listed.names) if end is None else min(end, len(listed.names))
        rows = self._rows
        if rows is None or not self._row:
            return self._not_as_listed(listed, range(start, end))
        found = np.fromiter(
            map(self._row.get, zip(itertools.repeat(listed.category), listed.names[start:end]), itertools.repeat(-1)),
            dtype=np.int64,
            count=end - start,
        )
        try:
            versions = np.array(listed.versions[start:end], dtype=np.int64)
            sizes = np.array(listed.sizes[start:end], dtype=np.int64)
        except OverflowError:  # a version beyond 64 bits: compared one by one
            return self._not_as_listed(listed, range(start, end))
        stored = found >= 0
        at = found[stored]
        signatures = rows.signatures()
        differs = (signatures[at, 0] != versions[stored]) | (signatures[at, 1] != sizes[stored]) | rows.racy_mask()[at]
        out: list[int] = (np.flatnonzero(stored)[differs] + start).tolist()
        others = (np.flatnonzero(~stored) + start).tolist()
        if others:
            out = sorted(out + self._not_as_listed(listed, others))
        return out

    def _not_as_listed(self, listed: NoteVersions, positions: Iterable[int]) -> list[int]:
        """:meth:`not_as_listed` for ``positions``, one note at a time."""
        category, names, versions, sizes = listed.category, listed.names, listed.versions, listed.sizes
        row_of = self._row
        set_ = self._set
        rows = self._rows
        mtime, size, racy = (rows.mtime, rows.size, rows.racy) if rows is not None else ([], [], frozenset())
        out: list[int] = []
        for position in positions:
            key = (category, names[position])
            row = row_of.get(key)
            if row is not None:
                if mtime[row] == versions[position] and size[row] == sizes[position] and row not in racy:
                    continue
            else:
                entry = set_.get(key)
                if (
                    entry is not None
                    and entry.mtime_ns == versions[position]
                    and entry.size == sizes[position]
                    and entry.content_hash is None
                ):
                    continue
            out.append(position)
        return out

    def checksum(self, key: EntryKey, entry: IndexEntry | None = None) -> int | None:
        """The stored metadata checksum of ``key``'s entry while it is the snapshot's row (and,
        given ``entry``, that row's very object); ``None`` otherwise."""
        row = self._row.get(key)
        if row is None or self._rows is None:
            return None
        if entry is not None and self._rows.decoded(row) is not entry:
            return None
        return self._rows.meta[row]

    def row_numbers(self, keys: Iterable[EntryKey]) -> list[int]:
        """Each key's snapshot row (see :meth:`stored_rows`); -1 for an entry set in this process or none."""
        return list(map(self._row.get, keys, itertools.repeat(-1)))

    def stored_rows(self) -> npt.NDArray[np.int64]:
        """The snapshot's ``(mtime_ns, size, metadata checksum)`` per row (absent:
        :data:`~.index_file.NO_MTIME` and -1; an empty array without a snapshot)."""
        return self._rows.signatures() if self._rows is not None else np.zeros((0, 3), dtype=np.int64)

    def racy_keys(self) -> set[EntryKey]:
        """The keys whose entry holds a content hash (see :attr:`KnowledgeIndex.racy`)."""
        found = {key for key, entry in self._set.items() if entry.content_hash is not None}
        rows = self._rows
        if rows is not None and rows.racy:
            keys = rows.keys
            found.update(keys[row] for row in rows.racy if self._row.get(keys[row]) == row)
        return found

    def owners(self) -> dict[tuple[str, str], set[str]]:
        """``{(owner, category): file names}`` of the entries: the snapshot rows by their runs
        (:func:`_owner_runs`, a set per run rather than a rule per name), the entries set in
        this process one by one."""
        owned: dict[tuple[str, str], set[str]] = {}
        rows = self._rows
        if rows is not None and self._runs:
            keys = rows.keys
            row_of = self._row
            intact = len(row_of) == sum(end - start for start, end, _ in self._runs)
            for start, end, owner in self._runs:
                run = keys[start:end] if intact else [key for key in keys[start:end] if key in row_of]
                if run:
                    owned.setdefault((owner, run[0][0]), set()).update(map(operator.itemgetter(1), run))
        for _, (category, filename), owner in _owned_keys(list(self._set)):
            owned.setdefault((owner, category), set()).add(filename)
        return owned

    def stored_items(self) -> list[IndexEntry | StoredEntry]:
        """Every entry, the snapshot rows as they were stored (for :func:`~.index_file.serialize_index`)."""
        out: list[IndexEntry | StoredEntry] = list(self._set.values())
        rows = self._rows
        if rows is not None:
            out.extend(rows.stored(row) for row in self._row.values())
        return out


StoredIndex = tuple[EntryMap, dict[EntryKey, SkippedNote]]


class _Parsed(NamedTuple):
    """One owner's part of a stored snapshot (see :meth:`KnowledgeIndex._parse`)."""

    entries: EntryMap
    skipped: dict[EntryKey, SkippedNote]
    journal: str | None
    migrate: bool
    meta: dict[EntryKey, tuple[IndexEntry, int]]


class KnowledgeIndex:
    """One owner's index entries by ``(category, filename)``, and that owner's index blobs.

    Each owner (the user a note belongs to) has an index of their own (:func:`index_names`):
    a process reads an owner's blobs the first time that owner is asked for, and a write
    touches only its owner's journal, so hosts serving many users hold and read only the users
    they serve, and writers of different users never share a blob."""

    def __init__(
        self, backend: KnowledgeBackend, categories: tuple[str, ...], lock: threading.RLock, owner: str
    ) -> None:
        self.backend = backend
        self.categories = categories
        self.lock = lock
        self.owner = owner
        self.prefix = user_file_prefix(owner)
        self.name, self.journal_name = index_names(owner)
        self._write_lock = threading.Lock()
        self.entries: EntryMap | None = None
        self.owned: dict[tuple[str, str], set[str]] = {}
        self.skipped: dict[EntryKey, SkippedNote] = {}
        self.generation = 0
        self._dirty = False
        self.last_write = 0.0
        self.reads = 0
        self.writes = 0
        self.appends = 0
        self.loaded_journal: str | None = None
        self.loaded_lines = 0
        self.journal: str | None = None
        """Id of the stored snapshot this index follows (``None``: the next flush writes a snapshot)."""
        self.journal_lines = 0
        self._full = True  # the entries were replaced: only a snapshot stores them
        self._migrate = False  # the loaded snapshot has an older form: the next flush rewrites it
        self._pending: set[EntryKey] = set()  # changed since the last flush: the next journal lines
        self._compacting = False  # a snapshot is being written (the store's lock let go meanwhile)
        self._own: set[EntryKey] = set()  # changed here since the last snapshot: ours win a compaction
        self.racy: set[EntryKey] = set()
        """Entries that carry a content hash (indexed within a timestamp tick of their write)."""
        self._meta: dict[EntryKey, tuple[IndexEntry, int]] = {}  # entry -> its metadata_checksum
        self.touched: set[tuple[str, str]] = set()
        """``(owner, category)`` of the notes changed since the last snapshot (their rankers are
        snapshotted with it; see :meth:`take_touched`)."""

    @property
    def dirty(self) -> bool:
        """Whether the entries changed since the blob was last written. Every change sets it,
        and setting it counts one more :attr:`generation`, so a reader can tell in O(1) whether
        anything changed since it last looked (hybrid search keeps its per-user lists by it)."""
        return self._dirty

    @dirty.setter
    def dirty(self, value: bool) -> None:
        if value:
            self.generation += 1
        self._dirty = value

    @property
    def loaded(self) -> bool:
        """Whether the entries are in memory."""
        return self.entries is not None

    def held_bytes(self) -> int:
        """About what the loaded entries hold in memory (0 when not loaded)."""
        return self.entries.held_bytes() if self.entries is not None else 0

    def current(self) -> EntryMap:
        """The entries (the index must be loaded)."""
        entries = self.entries
        if entries is None:
            raise RuntimeError("index not loaded")
        return entries

    def _mine(self, key: EntryKey) -> bool:
        """Whether ``key`` is a note of this owner in a configured category."""
        return key[0] in self.categories and key[1].startswith(self.prefix) and is_note_name(key[1])

    def _parse(self, data: bytes, name: str, *, quarantine: bool) -> _Parsed | None:
        """This owner's entries, skipped notes and journal id in snapshot bytes ``data`` (of blob
        ``name``; the 0.3 index of every owner holds others' rows too, left out here); ``None``
        when outdated or broken (broken: moved aside when ``quarantine``)."""
        columns = parse_columns(data)
        keys = column_keys(columns) if columns is not None else None
        if columns is not None and keys is not None:
            # The usual snapshot (see IndexColumns): no entry is decoded here.
            rows = SnapshotRows(data, columns, keys)
            runs = [run for run in _owner_runs(keys) if run[2] == self.owner and keys[run[0]][0] in self.categories]
            row_of: dict[EntryKey, int] = {}
            for start, end, _ in runs:
                row_of.update(zip(keys[start:end], range(start, end), strict=True))
            entries = EntryMap(rows=rows, row_of=row_of, runs=runs)
            skipped_notes = column_skipped(data, columns)
            return _Parsed(entries, self._skipped_of(skipped_notes, entries), columns.journal, False, {})
        status, index, why = parse_index(data)
        if status == "corrupt":
            if quarantine:
                moved = self.backend.quarantine_blob(name)
                log_event(Event.MEMORY_CORRUPT, path=name, moved_to=str(moved), reason=why)
            return None
        if status == "outdated" or index is None:
            if quarantine:
                log_event(Event.INDEX_REBUILT, path=name, reason=why)
            return None
        entries = EntryMap({(e.category, e.filename): e for e in index.files if self._mine((e.category, e.filename))})
        # A snapshot without columns (written before them, by a reader that does not know
        # them, or with columns that do not describe it), or with token marks stored
        # unpacked: the next flush writes a snapshot, so the next process loads it as above.
        # The snapshot's checksums of its entries' metadata (a list of another length is
        # ignored): a ranker snapshot's rows are compared with them, not recomputed per note.
        meta_list = index.meta if index.meta is not None and len(index.meta) == len(index.files) else []
        meta = {(e.category, e.filename): (e, crc) for e, crc in zip(index.files, meta_list, strict=False)}
        return _Parsed(entries, self._skipped_of(index.skipped, entries), index.journal, True, meta)

    def _skipped_of(self, notes: Iterable[SkippedNote], entries: EntryMap) -> dict[EntryKey, SkippedNote]:
        return {
            (n.category, n.filename): n
            for n in notes
            if self._mine((n.category, n.filename)) and (n.category, n.filename) not in entries
        }

    def _replay(self, parsed: _Parsed, data: bytes | None) -> int | None:
        """Apply the lines of journal bytes ``data`` that follow ``parsed``'s snapshot to its
        entries; return how many lines the journal has (``None``: it follows another snapshot)."""
        found = parse_journal(data, parsed.journal) if data is not None and parsed.journal is not None else None
        if found is None:
            return None
        lines, count = found
        for line in lines:
            key = line.k
            if self._mine(key):
                _set(parsed.entries, key, line.e)
                _set(parsed.skipped, key, line.s if line.e is None else None)
        return count

    def load_stored(self) -> StoredIndex | None:
        """This owner's entries and skipped notes as stored; ``None`` when missing, outdated or
        broken (quarantined). An owner without a snapshot of their own is read from the index
        of every owner that 0.2 and 0.3 wrote (only their rows), and the next flush writes
        their own snapshot: a folder or database upgrades owner by owner, as each is used."""
        # The snapshot and its journal in one read (one round trip on a database, and one
        # moment: a compaction rewrites both in one transaction, so they match).
        stored = self.backend.read_blobs([self.name, self.journal_name])
        self.reads += 1
        data, journal = stored.get(self.name), stored.get(self.journal_name)
        legacy = data is None
        if data is None:
            data = self.backend.read_blob(INDEX_NAME)
            if data is None:
                return None
        parsed = self._parse(data, INDEX_NAME if legacy else self.name, quarantine=True)
        if parsed is None:
            return None
        self._migrate = parsed.migrate or legacy
        self._meta = parsed.meta
        self.loaded_journal = None
        self.loaded_lines = 0
        if parsed.journal is not None:
            count = self._replay(parsed, self.backend.read_blob(JOURNAL_NAME) if legacy else journal)
            if count is not None and not legacy:
                self.loaded_journal, self.loaded_lines = parsed.journal, count
        return parsed.entries, parsed.skipped

    def replace(
        self,
        entries: Mapping[EntryKey, IndexEntry],
        skipped: dict[EntryKey, SkippedNote] | None = None,
        *,
        stored: bool = False,
    ) -> None:
        """Use ``entries`` (and ``skipped``) as the whole index (rebuilding who owns what).

        ``stored``: they are what :meth:`load_stored` just read, so later changes may go to
        its journal (when it had one); otherwise the next flush writes a snapshot."""
        if not isinstance(entries, EntryMap):
            entries = EntryMap(entries)
        self.entries = entries
        self.generation += 1
        self.racy = entries.racy_keys()
        self._pending = set()
        self._own = set()
        self.touched = set()
        if stored and self.loaded_journal is not None:
            self.journal, self.journal_lines, self._full = self.loaded_journal, self.loaded_lines, False
        else:
            self.journal, self.journal_lines, self._full = None, 0, True
        self.skipped = dict(skipped) if skipped is not None else {}
        if not stored:
            self._meta = {}
        self.owned = entries.owners()

    def meta_checksum(self, entry: IndexEntry) -> int:
        """:func:`~.index_file.metadata_checksum` of ``entry``, remembered per note for the
        very entry object it was taken of (a changed entry is a new object: taken anew), and
        read from the snapshot for the entries loaded with it."""
        key = (entry.category, entry.filename)
        known = self._meta.get(key)
        if known is not None and known[0] is entry:
            return known[1]
        stored = self.entries.checksum(key, entry) if self.entries is not None else None
        if stored is not None:
            return stored
        crc = metadata_checksum(entry)
        self._meta[key] = (entry, crc)
        return crc

    def names_of(self, user_id: str, category: str) -> set[str]:
        """The file names ``user_id`` owns in ``category`` (a live set: copy before iterating unlocked)."""
        return self.owned.get((user_id, category), set())

    def skip(self, category: str, filename: str, signature: Signature, reason: str) -> None:
        """Remember that a note could not be indexed, until its signature changes."""
        version, size = signature
        self.skipped[(category, filename)] = SkippedNote(
            category=category, filename=filename, size=size, mtime_ns=version, reason=reason
        )
        self.changed((category, filename))

    def is_skipped(self, category: str, filename: str, signature: Signature) -> bool:
        """Whether the note was skipped with exactly this signature (unchanged since)."""
        note = self.skipped.get((category, filename))
        return note is not None and (note.mtime_ns, note.size) == signature

    def unskip(self, category: str, filename: str) -> None:
        """Forget that a note was skipped (it was deleted)."""
        if self.skipped.pop((category, filename), None) is not None:
            self.changed((category, filename))

    def forget_skipped(self, category: str, present: Container[str], owner_prefix: str | None) -> None:
        """Drop skipped notes of ``category`` (names starting with ``owner_prefix``) no longer ``present``."""
        gone = [
            key
            for key in self.skipped
            if key[0] == category
            and (owner_prefix is None or key[1].startswith(owner_prefix))
            and key[1] not in present
        ]
        for key in gone:
            del self.skipped[key]
            self.changed(key)

    def put(self, entry: IndexEntry) -> str | None:
        """Add or replace an entry; return its owner (``None``: not a user's note, ignored)."""
        owner = owner_of(entry.filename)
        if owner is None:
            return None
        key = (entry.category, entry.filename)
        self.current()[key] = entry
        self.skipped.pop(key, None)
        self.owned.setdefault((owner, entry.category), set()).add(entry.filename)
        self.changed(key)
        return owner

    def set_entry(self, entry: IndexEntry) -> None:
        """Replace the entry of a note already indexed (same owner: no ranker change)."""
        key = (entry.category, entry.filename)
        self.current()[key] = entry
        self.changed(key)

    def changed(self, key: EntryKey) -> None:
        """Note ``key``'s entry or skipped record changed: the next flush journals it."""
        entry = self.entries.get(key) if self.entries is not None else None  # a population skips before it loads
        if entry is not None and entry.content_hash is not None:
            self.racy.add(key)
        else:
            self.racy.discard(key)
        self._pending.add(key)
        self._own.add(key)
        owner = owner_of(key[1])
        if owner is not None:
            self.touched.add((owner, key[0]))
        self.dirty = True

    def mark_replaced(self) -> None:
        """Many entries changed at once (a population): the next flush writes a snapshot."""
        self._full = True
        self.dirty = True

    def compaction_due(self) -> bool:
        """Whether the next :meth:`flush` writes a snapshot rather than journal lines."""
        if not self.dirty or self.entries is None:
            return False
        lines = self.journal_lines + len(self._pending)
        return self._full or self._migrate or self.journal is None or lines > journal_bound(len(self.entries))

    def line_slot(self) -> tuple[str, int] | None:
        """Where a note write may store its own journal line with the note (see
        :meth:`~local_ai_memory._contracts.knowledge.KnowledgeBackend.write_note_with`): the
        journal id and the snapshot count now, or ``None`` when the next flush writes a
        snapshot, one more line would pass the bound, or other changes wait for a flush."""
        with self.lock:
            entries = self.entries
            if entries is None or self.dirty or self._full or self._migrate or self.journal is None or self._compacting:
                return None
            if self.journal_lines + 1 > journal_bound(len(entries) + 1):
                return None
            return self.journal, self.writes

    def stored_with_note(self, key: EntryKey, entry: IndexEntry | None, slot: tuple[str, int]) -> bool:
        """The note write (or, ``entry`` ``None``, the delete) stored ``key``'s line holding
        ``entry`` in the journal of ``slot`` (:meth:`line_slot`): unless a snapshot was written
        since (the line may have gone with the old journal) or the entry changed again, the next
        flush need not append it. Callers hold ``lock`` and put (or dropped) ``entry`` just
        before; returns whether the line counts as stored."""
        if self._compacting or (self.journal, self.writes) != slot or self.entries is None:
            return False
        if entry is None:
            if key in self.entries or key in self.skipped:  # the line says: no entry, not skipped
                return False
        elif self.entries.get(key) is not entry:
            return False
        self.journal_lines += 1
        self._pending.discard(key)
        if not self._pending and not self._full and not self._migrate:
            self._dirty = False  # the generation moved with the change; nothing is left to store
        self.last_write = time.time()
        self.appends += 1
        return True

    def take_touched(self) -> set[tuple[str, str]]:
        """The ``(owner, category)`` changed since the last call (cleared)."""
        touched, self.touched = self.touched, set()
        return touched

    def drop(self, category: str, filename: str) -> bool:
        """Remove an entry; return whether it was there (a skipped note stays remembered)."""
        entries = self.current()
        if (category, filename) not in entries:
            return False
        del entries[(category, filename)]
        owner = owner_of(filename)
        if owner is not None:
            self.owned.get((owner, category), set()).discard(filename)
        self.changed((category, filename))
        return True

    def flush(self, *, compact: bool = True) -> bool:
        """Store the changes since the last flush, if any; return whether it wrote.

        Appends one journal line per changed note while the journal stays within
        :func:`journal_bound`; otherwise writes a snapshot (see :meth:`compact`). With
        ``compact=False`` (a query's refresh) it appends past the bound too, unless only a
        snapshot can hold the changes: the next write compacts, and the query does not wait."""
        with self._write_lock:
            with self.lock:
                if not self.dirty or self.entries is None:
                    return False
                entries = self.entries
                if not entries and not self.skipped and self.journal is None:
                    # Nothing stored and nothing to store (a user without notes, one just
                    # forgotten): no blob is written, which leaves no trace of the user's id.
                    self._pending, self._own, self._full = set(), set(), True
                    self.dirty = False
                    return False
                if self._full or self._migrate or self.journal is None or (compact and self.compaction_due()):
                    return self._compact_locked()
                keys = sorted(self._pending)
                data = b"".join(journal_line(key, entries.get(key), self.skipped.get(key)) for key in keys)
                self._pending = set()
                self.dirty = False
            try:
                self.backend.append_blob(self.journal_name, data)
            except BaseException:
                with self.lock:
                    self._pending.update(keys)
                    self.dirty = True
                raise
            with self.lock:
                self.journal_lines += len(keys)
            self.last_write = time.time()
            self.appends += 1
            return True

    def erase(self) -> None:
        """Forget this owner's index: empty in memory, and no blob of it left in storage (their
        notes are gone). A store not yet moved to an index per owner loses the index of every
        owner that 0.2 and 0.3 kept too, since it held this owner's rows: the other owners build
        theirs from their notes when next asked for."""
        with self._write_lock, self.lock:
            self.replace({})
            self._full = False
            names = [self.name, self.journal_name]
            if self.backend.blob_size(INDEX_NAME) is not None:
                names += [INDEX_NAME, JOURNAL_NAME]
            for name in names:
                self.backend.delete_blob(name)

    def compact(self) -> bool:
        """Write a snapshot of every entry and start a fresh journal, whatever changed."""
        with self._write_lock, self.lock:
            if self.entries is None:
                return False
            return self._compact_locked()

    def _compact_locked(self) -> bool:
        """The snapshot write (callers hold both locks; the store's ``lock`` is let go while writing).

        What is stored is folded, not overwritten: under the blobs' lock
        (:meth:`~KnowledgeBackend.rewrite_blobs`, held across processes), the stored snapshot
        and its journal are read, the notes this index changed since its last snapshot are put
        over them, and the result becomes the new snapshot with a fresh journal. Another
        writer's entries, which this process may never have loaded, stay. After a population
        (the entries replaced wholesale from the notes) this index's view is written as it is."""
        entries = self.current()
        view = entries.copy()
        skipped = dict(self.skipped)
        pending, own, full, migrate = self._pending, self._own, self._full, self._migrate
        self._pending, self._own, self._full, self._migrate = set(), set(), False, False
        self.dirty = False
        journal = uuid.uuid4().hex
        now = time.time()

        def fold(stored: list[bytes | None]) -> list[bytes]:
            snapshot, kept = view, skipped
            parsed = self._parse(stored[0], self.name, quarantine=False) if stored[0] is not None and not full else None
            if parsed is not None:
                self._replay(parsed, stored[1])
                snapshot, kept = parsed.entries, parsed.skipped
                for key in own:  # this index's changes win; every other stored row stays
                    entry = view.get(key)
                    _set(snapshot, key, entry)
                    _set(kept, key, skipped.get(key) if entry is None else None)
            data = serialize_index(snapshot.stored_items(), now, list(kept.values()), journal, self.meta_checksum)
            return [data, journal_header(journal)]

        self._compacting = True
        self.lock.release()
        try:
            self.backend.rewrite_blobs([self.name, self.journal_name], fold)
        except BaseException:
            with self.lock:
                self._pending |= pending
                self._own |= own
                self._full = self._full or full
                self._migrate = self._migrate or migrate
                self.dirty = True
            raise
        finally:
            self.lock.acquire()
            self._compacting = False
        self.journal, self.journal_lines = journal, 0
        self.last_write = now
        self.writes += 1
        return True


def _owner_runs(keys: Sequence[EntryKey]) -> list[OwnerRun]:
    """``(start, end, owner)`` of each run ``keys[start:end]`` of note names
    (:func:`is_note_name`) of ``owner`` in one category. Sorted keys (a snapshot's) make one
    run per user and category, found by bisection: every key between a note name and the
    first key past its owner prefix (the owner part and its ``_``) starts with that prefix, so
    only its ``.md`` ending is checked, in bulk. Other keys are taken one by one
    (:func:`_owned_keys`)."""
    if not all(map(operator.lt, keys, itertools.islice(keys, 1, None))):
        return [(position, position + 1, owner) for position, _, owner in _owned_keys(keys)]
    runs: list[OwnerRun] = []
    position, count = 0, len(keys)
    while position < count:
        category, name = keys[position]
        owner = owner_of(name) if is_note_name(name) else None
        if owner is None:
            position += 1
            continue
        prefix = name[: name.index("_") + 1]
        end = bisect.bisect_left(keys, (category, prefix[:-1] + "`"), position)  # "`" follows "_"
        names = list(map(operator.itemgetter(1), keys[position:end]))
        if all(map(str.endswith, names, itertools.repeat(".md"))):
            runs.append((position, end, owner))
        else:
            runs.extend((position + at, position + at + 1, found) for at, _, found in _owned_keys(keys[position:end]))
        position = end
    return runs


def _owned_keys(keys: Sequence[EntryKey]) -> Iterator[tuple[int, EntryKey, str]]:
    """``(position, key, owner)`` of each key whose name is a note name (:func:`is_note_name`),
    with its owner (:func:`owner_of`). The rule runs once per run of names with one owner
    prefix (sorted keys: one run per user and category), not for each of 10k names: a name
    that starts with a checked name's prefix (the owner part and its ``_``) and ends in
    ``.md`` is a note name of that owner."""
    prefix = ""
    owner = ""
    for position, key in enumerate(keys):
        name = key[1]
        if not prefix or not name.startswith(prefix):
            found = owner_of(name) if is_note_name(name) else None
            if found is None:
                continue
            owner, prefix = found, name[: name.index("_") + 1]
        elif not name.endswith(".md"):
            continue
        yield position, key, owner


def _set(mapping: MutableMapping[EntryKey, _V], key: EntryKey, value: _V | None) -> None:
    if value is None:
        if key in mapping:  # not pop(): an EntryMap would decode the entry it returns
            del mapping[key]
    else:
        mapping[key] = value
