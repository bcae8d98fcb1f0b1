"""``NoteIndexer``: turns notes into index entries and keeps them current as notes change.

It finds what changed in one of two ways, both through the storage contract only:

* the backend's **change feed** (:meth:`~local_ai_memory._contracts.knowledge.KnowledgeBackend.changes`): the
  notes written or deleted since the last look, re-read one by one (a database, the in-memory
  backend, or files while a watcher feeds them);
* otherwise a **listing comparison**: each note's size and version against its entry
  (``stat()`` only on files). Like git's "racily clean" entries, a note indexed within one
  timestamp tick of its last write keeps a content hash and is re-hashed on each check until
  the tick has safely passed (backends with exact versions skip this). The tick is the
  backend's :attr:`~local_ai_memory._contracts.knowledge.KnowledgeBackend.racy_window_ns`:
  measured on files (about a millisecond on Linux), 3 s where it cannot be.

A note larger than :data:`MAX_INDEXED_BYTES` is indexed by its first that many bytes only
(its entry's ``indexed_bytes`` says so), which bounds the time and memory of indexing it.

Each entry also holds its note's token counts (:mod:`.token_marks`) in the configured
encoding, taken while the note's text is at hand, so Stage 3 does not encode notes.

A changed note updates its entry and, if loaded, its ranker. Callers hold the store's lock
for the mutating methods; reads of notes happen through the backend.
"""

from __future__ import annotations

import codecs
import hashlib
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from local_ai_memory._contracts.knowledge import BlobAppend, KnowledgeBackend, NoteInfo, NoteVersions, is_note_name
from local_ai_memory._knowledge.bm25 import CountedDoc, count_terms
from local_ai_memory._knowledge.index import EntryKey, KnowledgeIndex
from local_ai_memory._knowledge.index_file import (
    IndexEntry,
    RankingField,
    extract_metadata,
    journal_line,
    ranking_tokens,
    tokenize,
)
from local_ai_memory._knowledge.rankers import RankerCache
from local_ai_memory._knowledge.token_marks import PackedMarks, count_marks, pack_marks
from local_ai_memory._shared.collector import collector_paused
from local_ai_memory._shared.errors import InvalidInputError
from local_ai_memory._shared.events import Event, log_event
from local_ai_memory._shared.naming import owner_of
from local_ai_memory._shared.tokens import TokenCounter

__all__ = ["MAX_INDEXED_BYTES", "STALE_CHUNK", "NoteIndexer", "NoteLine", "Scanned", "StaleEntry", "decode_head"]

STALE_CHUNK = 2048
"""Notes compared per hold of the store's lock in a listing comparison (a few ms at most)."""
MAX_INDEXED_BYTES = 1 << 20
"""Of a larger note only the first MiB is read for its entry and ranking (about 150,000 words)."""


def decode_head(data: bytes, complete: bool) -> str:
    """UTF-8 text of a note's first bytes; a character cut in two at the end of an incomplete
    head is left out. Raises :class:`UnicodeDecodeError` for text that is not UTF-8."""
    return codecs.getincrementaldecoder("utf-8")().decode(data, final=complete)


def _head_of(content: str, limit: int) -> tuple[str, bytes, bool]:
    """``content`` cut to its first ``limit`` UTF-8 bytes: text, those bytes, whether all of it."""
    data = content.encode("utf-8")
    if len(data) <= limit:
        return content, data, True
    head = data[:limit]
    return decode_head(head, False), head, False


@dataclass(frozen=True)
class StaleEntry:
    """A file whose index entry is missing, outdated, or points at a deleted file."""

    category: str
    filename: str
    reason: Literal["new", "modified", "deleted"]


@dataclass
class Scanned:
    """One note read and turned into an entry (its text kept until it is ranked)."""

    category: str
    filename: str
    entry: IndexEntry
    content: str
    excerpt: str = field(default="")
    tokens: list[str] | None = None
    counted: CountedDoc | None = None


class NoteLine:
    """The index journal line of a note being written, made from the version its write gets:
    the :class:`~local_ai_memory._contracts.knowledge.BlobAppend` that a backend stores with the
    note (:meth:`~local_ai_memory._contracts.knowledge.KnowledgeBackend.write_note_with`).

    Given the text, the entry is built before the write and the call only sets the note's
    version, size and time (a database calls it inside the note's transaction); for an update
    the text is known only inside, so the call scans it. :attr:`scanned` is what it stored."""

    def __init__(self, indexer: NoteIndexer, category: str, name: str, content: str | None = None) -> None:
        self.indexer = indexer
        self.key: EntryKey = (category, name)
        self.ready: Scanned | None = None
        if content is not None:  # size, version and time are the write's: stamped in __call__
            self.ready = indexer.scan(NoteInfo(category, name, 0, 0, 0.0), content)
        self.scanned: Scanned | None = None

    def append(self) -> BlobAppend:
        """What the backend appends with the note."""
        return BlobAppend(self.indexer.index.journal_name, self)

    def __call__(self, data: bytes, info: NoteInfo) -> bytes:
        ready = self.ready
        if ready is None:
            scanned = self.indexer.scan(info, data.decode("utf-8"))
            assert scanned is not None  # text given: never skipped
        else:
            stamped = {"last_modified": info.modified, "size": info.size, "mtime_ns": info.version}
            scanned = replace(ready, entry=ready.entry.model_copy(update=stamped))
        self.scanned = scanned
        return journal_line(self.key, scanned.entry, None)


def _signature(info: NoteInfo) -> tuple[int, int]:
    return info.version, info.size


def _listed_as_indexed(entry: IndexEntry, info: NoteInfo) -> bool:
    """Whether the listing shows the note as its entry was indexed: same version and size
    (entries of older indexes, without them: the same modification time)."""
    if entry.mtime_ns is not None and entry.size is not None:
        return entry.mtime_ns == info.version and entry.size == info.size
    return entry.last_modified == info.modified


class NoteIndexer:
    """Reads notes into :class:`KnowledgeIndex` entries and :class:`RankerCache` rankers."""

    def __init__(
        self,
        backend: KnowledgeBackend,
        index: KnowledgeIndex,
        rankers: RankerCache,
        ranking_field: RankingField,
        lock: threading.RLock,
        token_encoding: str | None = None,
    ) -> None:
        self.backend = backend
        self.token_encoding = token_encoding  # counts each note's tokens for Stage 3 (None: not counted)
        self._counter: TokenCounter | None = None
        self.index = index
        self.rankers = rankers
        self.ranking_field = ranking_field
        self.lock = lock
        self.cursor: int | None = None  # position in the backend's change feed

    # -- one note ------------------------------------------------------------------------------
    def read_text(self, category: str, filename: str) -> str | None:
        """A note's indexed text (at most :data:`MAX_INDEXED_BYTES`), or ``None`` when it is missing or not UTF-8."""
        head = self.backend.read_note_head(category, filename, MAX_INDEXED_BYTES)
        try:
            return decode_head(*head) if head is not None else None
        except UnicodeDecodeError:
            return None

    def tokens(self, entry: IndexEntry, content: str | None, content_tokens: list[str] | None = None) -> list[str]:
        """The ranking tokens of an entry (reading its note when the content is needed and not given)."""
        if content is None and self.ranking_field != "metadata":
            content = self.read_text(entry.category, entry.filename)
        return ranking_tokens(entry, content, self.ranking_field, content_tokens, self.rankers.analyzer)

    def stored_tokens(self, entries: list[IndexEntry]) -> list[list[str]]:
        """The ranking tokens of entries, reading their notes if the ranking field needs the
        content: one :meth:`~KnowledgeBackend.read_note_heads` per category (one query on a
        database, where one read per note cost a round trip each)."""
        if self.ranking_field == "metadata":
            return [self.tokens(entry, None) for entry in entries]
        texts: dict[tuple[str, str], str] = {}
        by_category: dict[str, list[str]] = {}
        for entry in entries:
            by_category.setdefault(entry.category, []).append(entry.filename)
        for category, names in by_category.items():
            for name, head in self.backend.read_note_heads(category, names, MAX_INDEXED_BYTES).items():
                try:
                    texts[(category, name)] = decode_head(*head)
                except UnicodeDecodeError:
                    continue
        return [
            ranking_tokens(
                entry, texts.get((entry.category, entry.filename)), self.ranking_field, None, self.rankers.analyzer
            )
            for entry in entries
        ]

    def put(self, entry: IndexEntry, content: str | None, content_tokens: list[str] | None = None) -> None:
        """Add or replace an entry and update its ranker."""
        owner = self.index.put(entry)
        if owner is not None:
            self.rankers.add(owner, entry, lambda: self.tokens(entry, content, content_tokens))

    def drop(self, category: str, filename: str) -> bool:
        """Remove an entry and take it out of its ranker; return whether it was there."""
        if not self.index.drop(category, filename):
            return False
        owner = owner_of(filename)
        if owner is not None:
            self.rankers.remove(owner, category, filename)
        return True

    def _racy_changed(self, entry: IndexEntry) -> bool:
        """Whether a note indexed within one timestamp tick of its last write may differ now.

        An unchanged note read once its tick is over (the clock read *before* its bytes) loses
        its content hash: any later change gets a later version, which the listing shows."""
        before = time.time_ns()
        head = self.backend.read_note_head(entry.category, entry.filename, MAX_INDEXED_BYTES)
        if head is None or hashlib.sha256(head[0]).hexdigest() != entry.content_hash:
            return True
        if before - (entry.mtime_ns or 0) > self.backend.racy_window_ns and self.index.entries is not None:
            self.index.set_entry(entry.model_copy(update={"content_hash": None}))
        return False

    def racy_pending(self) -> int:
        """Nanoseconds until every hashed entry's tick is over (0: none is within it now)."""
        entries = self.index.current()
        newest = max((entries[k].mtime_ns or 0 for k in self.index.racy if k in entries), default=0)
        return max(0, newest + self.backend.racy_window_ns - time.time_ns() + 1) if newest else 0

    def settle_racy(self, keys: Iterable[EntryKey]) -> int:
        """Check the entries of ``keys`` indexed within a timestamp tick of their write, now
        that the tick is over: an unchanged note loses its content hash, a changed one is
        re-indexed. Done before a snapshot so a new process does not read and hash every note
        this one wrote (one head read per note, once); returns how many were re-indexed."""
        entries = self.index.current()
        now = time.time_ns()
        window = self.backend.racy_window_ns
        changed = 0
        for key in keys:
            entry = entries.get(key)
            if entry is None or entry.content_hash is None or now - (entry.mtime_ns or 0) <= window:
                continue
            if self._racy_changed(entry):
                changed += self.refresh_one(*key)
        return changed

    def _skip(self, info: NoteInfo, reason: str) -> None:
        self.index.skip(info.category, info.name, _signature(info), reason)
        log_event(Event.FILE_SKIPPED, path=f"{info.category}/{info.name}", reason=reason)

    def scan(self, info: NoteInfo, content: str | None = None) -> Scanned | None:
        """Read one note (unless ``content`` is given) into an entry; ``None`` if gone or not text.

        Only the first :data:`MAX_INDEXED_BYTES` of a note are read and indexed.
        """
        category, filename = info.category, info.name
        before = time.time_ns()  # the clock before the bytes are read (see racy_window_ns)
        given = content is not None  # bytes we hold, not read: the listing may be a later write's
        if content is None:
            head = self.backend.read_note_head(category, filename, MAX_INDEXED_BYTES)
            if head is None:
                return None
            data, complete = head
            try:
                content = decode_head(data, complete)
            except UnicodeDecodeError:
                self._skip(info, "not UTF-8 text")
                return None
            if b"\x00" in data:
                self._skip(info, "binary content")
                return None
        else:
            content, data, complete = _head_of(content, MAX_INDEXED_BYTES)
        tokens = tokenize(content)
        title, description, keywords = extract_metadata(filename, category, content, content_tokens=tokens)
        racy = not self.backend.exact_versions and (given or before - info.version <= self.backend.racy_window_ns)
        entry = IndexEntry(
            filename=filename,
            title=title,
            description=description,
            keywords=keywords,
            category=category,
            last_modified=info.modified,
            size=info.size,
            mtime_ns=info.version,
            content_hash=hashlib.sha256(data).hexdigest() if racy else None,
            indexed_bytes=None if complete else len(data),
            tokens=self._marks(content, complete),
        )
        return Scanned(category, filename, entry, content, excerpt=content[:1500], tokens=tokens)

    def _marks(self, content: str, complete: bool) -> PackedMarks | None:
        """The note's token counts, packed as the index stores them, or ``None`` when the
        configured encoding is not known (the encoding is loaded on the first note, not when
        the store opens)."""
        if self.token_encoding is None:
            return None
        if self._counter is None:
            try:
                self._counter = TokenCounter(self.token_encoding)
            except InvalidInputError:
                self.token_encoding = None
                return None
        return pack_marks(count_marks(self._counter, content, complete))

    def refresh_one(
        self, category: str, filename: str, content: str | None = None, info: NoteInfo | None = None
    ) -> bool:
        """Re-index one note from storage (or drop it if gone); return whether the index changed.

        ``content`` and ``info``: the text just written and what its write returned (then
        nothing is read)."""
        if info is None:
            info = self.backend.note_info(category, filename)
        scanned = self.scan(info, content) if info is not None else None
        if scanned is None:
            if info is None:
                self.index.unskip(category, filename)
            return self.drop(category, filename)
        self.put(scanned.entry, scanned.content, scanned.tokens)
        return True

    def refresh_if_changed(self, category: str, filename: str) -> bool:
        """Re-index one note only if its signature differs from its entry's; return whether it changed."""
        info = self.backend.note_info(category, filename)
        if info is None:
            self.index.unskip(category, filename)
            return self.drop(category, filename)
        entry = self.index.current().get((category, filename))
        if entry is not None and _listed_as_indexed(entry, info):
            return False
        if entry is None and self.index.is_skipped(category, filename, _signature(info)):
            return False
        return self.refresh_one(category, filename)

    # -- what changed --------------------------------------------------------------------------
    def listing(self, category: str) -> dict[str, NoteInfo]:
        """The owner's notes in ``category``."""
        return self.backend.list_notes(category, self.index.prefix)

    def stale(self, categories: tuple[str, ...], listings: Sequence[NoteVersions] | None = None) -> list[StaleEntry]:
        """The owner's notes created, modified or deleted since they were indexed, by listing
        comparison (with ``listings``, one per category in order: those, as the backend just
        listed them; else each category is listed here).

        The lock is taken per :data:`STALE_CHUNK` notes, not for the whole comparison: a
        catch-up over 100k notes would otherwise hold every query of the process for its
        whole length (hundreds of ms). What changes between two chunks is found by the next
        look, as a change after the comparison would be.
        """
        entries = self.index.current()
        prefix = self.index.prefix
        stale: list[StaleEntry] = []
        for at, category in enumerate(categories):
            if listings is not None:
                listed = listings[at]
            else:
                with collector_paused():  # a listing of 10k notes is 10k objects (see collector_paused)
                    listed = self.backend.list_versions(category, prefix)
            with self.lock:
                indexed = set(self.index.names_of(self.index.owner, category))
            for start in range(0, len(listed.names), STALE_CHUNK):
                with self.lock:
                    for position in entries.not_as_listed(listed, start, start + STALE_CHUNK):
                        info = listed.info(position)
                        entry = entries.get((category, info.name))
                        if entry is None:
                            if not self.index.is_skipped(category, info.name, _signature(info)):
                                stale.append(StaleEntry(category, info.name, "new"))
                            continue
                        if not _listed_as_indexed(entry, info) or (
                            entry.content_hash is not None and self._racy_changed(entry)
                        ):
                            stale.append(StaleEntry(category, info.name, "modified"))
            gone = indexed.difference(listed.names)
            stale.extend(StaleEntry(category, name, "deleted") for name in sorted(gone))
            if self.index.skipped:
                with self.lock:
                    self.index.forget_skipped(category, set(listed.names), prefix)
        return stale

    def refresh_stale(self, categories: tuple[str, ...], listings: Sequence[NoteVersions] | None = None) -> int:
        """Re-index what :meth:`stale` finds; return how many entries changed (the lock is
        taken per note, so queries of other threads go on between them)."""
        changed = 0
        for item in self.stale(categories, listings):
            with self.lock:
                changed += self.refresh_one(item.category, item.filename)
        return changed

    def follow_feed(self, categories: tuple[str, ...]) -> int | None:
        """Apply the owner's change feed since the last call; ``None`` if the backend keeps none.

        An incomplete answer (first call, or the feed lost track) compares the owner's listing once.
        The first call asks for the feed's cursor and that listing together
        (:meth:`~KnowledgeBackend.follow_owner`: one round trip on a database).
        """
        if self.cursor is None:
            with collector_paused():  # a listing of 10k notes is 10k objects (see collector_paused)
                start = self.backend.follow_owner(self.index.prefix, categories)
            if start is None:
                return None
            changed = self.refresh_stale(categories, start.listings)
            self.cursor = start.cursor
            return changed
        feed = self.backend.owner_changes(self.index.prefix, self.cursor)
        if feed is None:
            return None
        if not feed.complete:
            changed = self.refresh_stale(categories)
            self.cursor = feed.cursor
            return changed
        if not feed.keys:
            self.cursor = feed.cursor
            return 0
        changed = 0
        with self.lock:
            for category, name in sorted(feed.keys):
                if category in categories and is_note_name(name) and name.startswith(self.index.prefix):
                    changed += self.refresh_if_changed(category, name)
        self.cursor = feed.cursor
        return changed

    # -- population from scratch ---------------------------------------------------------------
    def collect(
        self,
        categories: tuple[str, ...],
        *,
        precount: bool,
        progress: Callable[[int, int], None] | None = None,
    ) -> list[Scanned]:
        """Read every note; with ``precount`` keep only term counts (not the text) in memory.

        ``progress(done, total)`` is called every 64 notes and at the end.
        """
        listing = [info for c in categories for _, info in sorted(self.listing(c).items())]
        scanned: list[Scanned] = []
        total = len(listing)
        for done, info in enumerate(listing, 1):
            item = self.scan(info)
            if item is not None:
                if precount:
                    tokens = ranking_tokens(
                        item.entry, item.content, self.ranking_field, item.tokens, self.rankers.analyzer
                    )
                    with self.lock:
                        item.counted = count_terms(self.rankers.vocab, tokens)
                    item.tokens, item.content, item.excerpt = None, "", ""
                scanned.append(item)
            if progress is not None and (done == total or done % 64 == 0):
                progress(done, total)
        if progress is not None and total == 0:
            progress(0, 0)
        return scanned

    def apply_population(self, categories: tuple[str, ...], scanned: list[Scanned]) -> None:
        """Replace the owner's entries and rankers in ``categories`` by ``scanned``."""
        with self.lock:
            if self.index.entries is None:
                # Keep the other categories' entries from the blob; a missing or broken index
                # starts empty (their notes show up as stale "new" on their next refresh).
                found = dict(self.index.skipped)  # what this population skipped
                stored = self.index.load_stored()
                self.index.replace(*(stored or ({}, None)), stored=stored is not None)
                self.index.skipped.update(found)
                self.rankers.clear()
            entries = self.index.current()
            keep: set[EntryKey] = {(s.category, s.filename) for s in scanned}
            for key in list(entries):
                category, filename = key
                if category in categories and key not in keep:
                    self.drop(category, filename)
            groups: dict[tuple[str, str], list[tuple[str, CountedDoc]]] = {}
            for item in scanned:
                owner = owner_of(item.filename)
                assert owner is not None
                entries[(item.category, item.filename)] = item.entry
                self.index.owned.setdefault((owner, item.category), set()).add(item.filename)
                counted = item.counted
                if counted is None:
                    tokens = ranking_tokens(
                        item.entry, item.content, self.ranking_field, item.tokens, self.rankers.analyzer
                    )
                    counted = count_terms(self.rankers.vocab, tokens)
                groups.setdefault((owner, item.category), []).append((item.filename, counted))
            for (owner, category), names in list(self.index.owned.items()):
                if category in categories:
                    self.rankers.rebuild(owner, category, groups.get((owner, category), []))
                    if not names:
                        del self.index.owned[(owner, category)]
            self.index.mark_replaced()
