"""``KnowledgeIndex``: the index entries in memory and their ``memory_index.json`` (v3) blob.

The blob is read once, when first needed, and written after each batch of changes (never per
query; see :meth:`KnowledgeIndex.flush`). A broken blob is quarantined and an outdated one
ignored: the caller rebuilds from the notes. Besides the entries it keeps, per
``(user, category)``, the names each user owns, and the signatures of notes that were skipped
(not UTF-8 or binary) so they are not re-read until they change: they are kept in the blob
too, so no other process re-reads them either. Callers hold ``lock``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Container

from local_ai_memory._contracts.knowledge import KnowledgeBackend, is_note_name
from local_ai_memory._knowledge.index_file import IndexEntry, SkippedNote, parse_index, serialize_index
from local_ai_memory._shared.events import Event, log_event
from local_ai_memory._shared.naming import owner_of

__all__ = ["INDEX_NAME", "EntryKey", "KnowledgeIndex", "StoredIndex"]

INDEX_NAME = "memory_index.json"
EntryKey = tuple[str, str]  # (category, filename)
Signature = tuple[int, int]  # (version, size) of a note
StoredIndex = tuple[dict[EntryKey, IndexEntry], dict[EntryKey, SkippedNote]]


class KnowledgeIndex:
    """Index entries by ``(category, filename)``, who owns which, and the index blob."""

    def __init__(self, backend: KnowledgeBackend, categories: tuple[str, ...], lock: threading.RLock) -> None:
        self.backend = backend
        self.categories = categories
        self.lock = lock
        self._write_lock = threading.Lock()
        self.entries: dict[EntryKey, IndexEntry] | None = None
        self.owned: dict[tuple[str, str], set[str]] = {}
        self.skipped: dict[EntryKey, SkippedNote] = {}
        self.generation = 0
        self._dirty = False
        self.last_write = 0.0
        self.reads = 0
        self.writes = 0

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

    def current(self) -> dict[EntryKey, IndexEntry]:
        """The entries (the index must be loaded)."""
        entries = self.entries
        if entries is None:
            raise RuntimeError("index not loaded")
        return entries

    def load_stored(self) -> StoredIndex | None:
        """The entries and skipped notes of the stored blob; ``None`` when missing, outdated or
        broken (quarantined)."""
        data = self.backend.read_blob(INDEX_NAME)
        self.reads += 1
        if data is None:
            return None
        status, index, why = parse_index(data)
        if status == "corrupt":
            moved = self.backend.quarantine_blob(INDEX_NAME)
            log_event(Event.MEMORY_CORRUPT, path=INDEX_NAME, moved_to=str(moved), reason=why)
            return None
        if status == "outdated" or index is None:
            log_event(Event.INDEX_REBUILT, path=INDEX_NAME, reason=why)
            return None
        entries = {
            (e.category, e.filename): e
            for e in index.files
            if is_note_name(e.filename) and e.category in self.categories
        }
        skipped = {
            (n.category, n.filename): n
            for n in index.skipped
            if is_note_name(n.filename) and n.category in self.categories and (n.category, n.filename) not in entries
        }
        return entries, skipped

    def replace(self, entries: dict[EntryKey, IndexEntry], skipped: dict[EntryKey, SkippedNote] | None = None) -> None:
        """Use ``entries`` (and ``skipped``) as the whole index (rebuilding who owns what)."""
        self.entries = entries
        self.generation += 1
        self.skipped = dict(skipped) if skipped is not None else {}
        self.owned = {}
        for category, filename in entries:
            owner = owner_of(filename)
            if owner is not None:
                self.owned.setdefault((owner, category), set()).add(filename)

    def names_of(self, user_id: str, category: str) -> set[str]:
        """The file names ``user_id`` owns in ``category`` (a live set: copy before iterating unlocked)."""
        return self.owned.get((user_id, category), set())

    def skip(self, category: str, filename: str, signature: Signature, reason: str) -> None:
        """Remember that a note could not be indexed, until its signature changes."""
        version, size = signature
        self.skipped[(category, filename)] = SkippedNote(
            category=category, filename=filename, size=size, mtime_ns=version, reason=reason
        )
        self.dirty = True

    def is_skipped(self, category: str, filename: str, signature: Signature) -> bool:
        """Whether the note was skipped with exactly this signature (unchanged since)."""
        note = self.skipped.get((category, filename))
        return note is not None and (note.mtime_ns, note.size) == signature

    def unskip(self, category: str, filename: str) -> None:
        """Forget that a note was skipped (it was deleted)."""
        if self.skipped.pop((category, filename), None) is not None:
            self.dirty = True

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
        if gone:
            self.dirty = True

    def put(self, entry: IndexEntry) -> str | None:
        """Add or replace an entry; return its owner (``None``: not a user's note, ignored)."""
        owner = owner_of(entry.filename)
        if owner is None:
            return None
        key = (entry.category, entry.filename)
        self.current()[key] = entry
        if self.skipped.pop(key, None) is not None:
            self.dirty = True
        self.owned.setdefault((owner, entry.category), set()).add(entry.filename)
        self.dirty = True
        return owner

    def drop(self, category: str, filename: str) -> bool:
        """Remove an entry; return whether it was there (a skipped note stays remembered)."""
        if self.current().pop((category, filename), None) is None:
            return False
        owner = owner_of(filename)
        if owner is not None:
            self.owned.get((owner, category), set()).discard(filename)
        self.dirty = True
        return True

    def flush(self) -> bool:
        """Write the blob now if the entries changed since the last write; return whether it wrote."""
        with self._write_lock:
            with self.lock:
                if not self.dirty or self.entries is None:
                    return False
                snapshot = list(self.entries.values())
                skipped = list(self.skipped.values())
                self.dirty = False
            now = time.time()
            try:
                self.backend.write_blob(INDEX_NAME, serialize_index(snapshot, now, skipped))
            except BaseException:
                with self.lock:
                    self.dirty = True
                raise
            self.last_write = now
            self.writes += 1
            return True
