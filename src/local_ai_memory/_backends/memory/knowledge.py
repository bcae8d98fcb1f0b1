"""``InMemoryKnowledgeBackend``: the reference knowledge backend, kept in dictionaries.

Nothing touches the disk, so it suits users' own unit tests and shows the contract at its
simplest: every write bumps a version (strictly increasing, so versions are exact) and appends
to a change log, which makes the change feed complete at all times. One lock guards it all.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from local_ai_memory._contracts.knowledge import (
    BlobAppend,
    KnowledgeBackend,
    NoteChanges,
    NoteInfo,
    NoteKey,
    VectorCache,
    is_note_name,
)
from local_ai_memory._shared.vectors import QueryEmbedding, stacked, text_digest, unit_vectors

if TYPE_CHECKING:
    from local_ai_memory._shared.models import Embedder

__all__ = ["InMemoryKnowledgeBackend"]


class _MemoryVectors(QueryEmbedding):
    """Vectors by SHA-256 of their text, held in a dictionary (one per embedder)."""

    discards_cheaply = True
    """Deleting kept vectors costs only their rows: a deleted note's passages go at once."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self._lock = threading.Lock()
        self._vectors: dict[str, npt.NDArray[np.float32]] = {}
        self._keys: dict[str, str] = {}  # key -> digest of its latest text

    def _missing(self, items: Sequence[tuple[str, str]]) -> tuple[list[str], dict[str, str]]:
        digests = [text_digest(text) for _, text in items]
        with self._lock:
            self._keys.update((key, digest) for (key, _), digest in zip(items, digests, strict=True))
            wanted = {d: text for d, (_, text) in zip(digests, items, strict=True) if d not in self._vectors}
        return digests, wanted

    def _stack(self, digests: list[str], new: list[str], vectors: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        with self._lock:
            self._vectors.update(zip(new, vectors, strict=True))
            return stacked(self._vectors, digests)

    def vectors_for(self, items: Sequence[tuple[str, str]]) -> npt.NDArray[np.float32]:
        digests, new = self._missing(items)
        texts = list(new.values())
        vectors = unit_vectors(texts, self.embedder.embed(texts)) if texts else np.zeros((0, 0), np.float32)
        return self._stack(digests, list(new), vectors)

    async def avectors_for(self, items: Sequence[tuple[str, str]]) -> npt.NDArray[np.float32]:
        digests, new = self._missing(items)
        texts = list(new.values())
        vectors = unit_vectors(texts, await self.embedder.aembed(texts)) if texts else np.zeros((0, 0), np.float32)
        return self._stack(digests, list(new), vectors)

    def digest_of(self, text: str) -> str:
        return text_digest(text)

    def kept(self, digests: Sequence[str]) -> npt.NDArray[np.float32] | None:
        with self._lock:
            if any(d not in self._vectors for d in digests):
                return None
            return stacked(self._vectors, digests)

    def discard_kept(self, digests: Sequence[str]) -> int:
        with self._lock:
            gone = {d for d in digests if self._vectors.pop(d, None) is not None}
            for key in [k for k, d in self._keys.items() if d in gone]:
                del self._keys[key]
            return len(gone)

    def discard(self, items: Sequence[tuple[str, str]]) -> int:
        with self._lock:
            gone = {key: self._keys.pop(key) for key, _ in items if key in self._keys}
            still_used = set(self._keys.values())
            for digest in set(gone.values()) - still_used:
                self._vectors.pop(digest, None)
            return len(gone)


class InMemoryKnowledgeBackend(KnowledgeBackend):
    """Notes, change log, blobs and vectors in this process's memory (thread-safe, no disk).

    >>> backend = InMemoryKnowledgeBackend()
    >>> _ = backend.write_note("knowledge", "alice_tea.md", b"# Tea")
    >>> sorted(backend.list_notes("knowledge", "alice_"))
    ['alice_tea.md']
    """

    exact_versions = True

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._notes: dict[NoteKey, tuple[bytes, NoteInfo]] = {}
        self._blobs: dict[str, bytes] = {}
        self._log: list[tuple[int, NoteKey]] = []
        self._cursor = 0
        self._quiet: NoteChanges | None = None  # the answer 'nothing new since cursor', reused
        self._version = 0

    def __repr__(self) -> str:
        return f"InMemoryKnowledgeBackend({len(self._notes)} notes)"

    def _changed(self, key: NoteKey) -> None:
        self._cursor += 1
        self._log.append((self._cursor, key))

    def read_note(self, category: str, name: str) -> bytes | None:
        with self._lock:
            found = self._notes.get((category, name))
        return found[0] if found is not None else None

    def write_note(self, category: str, name: str, data: bytes) -> NoteInfo:
        data = bytes(data)
        with self._lock:
            return self._put(category, name, data)

    def _put(self, category: str, name: str, data: bytes, append: BlobAppend | None = None) -> NoteInfo:
        """Store a note, and ``append``'s line with it (the lock held; a line that fails
        stores nothing: it is made before anything changes)."""
        now = time.time_ns()
        version = max(self._version + 1, now)
        info = NoteInfo(category, name, len(data), version, now / 1e9)
        line = append.line(data, info) if append is not None else None
        self._version = version
        self._notes[(category, name)] = (data, info)
        self._changed((category, name))
        if append is not None and line is not None:
            self._append(append.blob, line)
        return info

    def write_note_with(self, category: str, name: str, data: bytes, append: BlobAppend) -> NoteInfo:
        data = bytes(data)
        with self._lock:
            return self._put(category, name, data, append)

    def update_note(self, category: str, name: str, change: Callable[[bytes | None], bytes]) -> tuple[bytes, NoteInfo]:
        return self._update(category, name, change, None)

    def update_note_with(
        self, category: str, name: str, change: Callable[[bytes | None], bytes], append: BlobAppend
    ) -> tuple[bytes, NoteInfo]:
        return self._update(category, name, change, append)

    def _update(
        self, category: str, name: str, change: Callable[[bytes | None], bytes], append: BlobAppend | None
    ) -> tuple[bytes, NoteInfo]:
        with self._lock:  # read, change and write in one hold: no write of this store comes between
            found = self._notes.get((category, name))
            data = bytes(change(found[0] if found is not None else None))
            return data, self._put(category, name, data, append)

    def delete_note_if(self, category: str, name: str, check: Callable[[bytes | None], None]) -> bool:
        return self._delete(category, name, check)

    def delete_note(self, category: str, name: str) -> bool:
        return self._delete(category, name)

    def delete_note_with(
        self,
        category: str,
        name: str,
        blob: str,
        line: Callable[[], bytes],
        check: Callable[[bytes | None], None] | None = None,
    ) -> bool:
        return self._delete(category, name, check, (blob, line))

    def _delete(
        self,
        category: str,
        name: str,
        check: Callable[[bytes | None], None] | None = None,
        append: tuple[str, Callable[[], bytes]] | None = None,
    ) -> bool:
        """Check, delete and append in one hold of the lock (the line is made before anything
        changes: a line that fails deletes nothing)."""
        key = (category, name)
        with self._lock:
            found = self._notes.get(key)
            if check is not None:
                check(found[0] if found is not None else None)
            if found is None:
                return False
            line = append[1]() if append is not None else None
            del self._notes[key]
            self._changed(key)
            if append is not None and line is not None:
                self._append(append[0], line)
            return True

    def note_info(self, category: str, name: str) -> NoteInfo | None:
        with self._lock:
            found = self._notes.get((category, name))
        return found[1] if found is not None else None

    def list_notes(self, category: str, user_prefix: str | None = None) -> dict[str, NoteInfo]:
        with self._lock:
            items = [(name, info) for (cat, name), (_, info) in self._notes.items() if cat == category]
        if user_prefix is not None:
            return {name: info for name, info in items if name.startswith(user_prefix) and name.endswith(".md")}
        return {name: info for name, info in items if is_note_name(name)}

    def list_categories(self) -> list[str]:
        with self._lock:
            return sorted({category for category, _ in self._notes})

    def changes(self, since: int | None) -> NoteChanges | None:
        with self._lock:
            if since is None or since > self._cursor:  # first look, or a cursor this feed never gave
                return NoteChanges(self._cursor, frozenset(), complete=False)
            if since == self._cursor:
                quiet = self._quiet
                if quiet is None or quiet.cursor != since:
                    quiet = self._quiet = NoteChanges(since, frozenset(), complete=True)
                return quiet
            start = bisect.bisect_right(self._log, since, key=lambda item: item[0])
            return NoteChanges(self._cursor, frozenset(key for _, key in self._log[start:]), complete=True)

    def read_blob(self, name: str) -> bytes | None:
        with self._lock:
            return self._blobs.get(name)

    def write_blob(self, name: str, data: bytes) -> None:
        with self._lock:
            self._blobs[name] = bytes(data)

    def append_blob(self, name: str, data: bytes) -> None:
        with self._lock:
            self._append(name, data)

    def _append(self, name: str, data: bytes) -> None:
        """Append to blob ``name`` (the lock held)."""
        self._blobs[name] = self._blobs.get(name, b"") + bytes(data)

    def rewrite_blobs(self, names: Sequence[str], change: Callable[[list[bytes | None]], list[bytes]]) -> None:
        with self._lock:
            new = change([self._blobs.get(name) for name in names])
            self._blobs.update((name, bytes(data)) for name, data in zip(names, new, strict=True))

    def blob_size(self, name: str) -> int | None:
        with self._lock:
            data = self._blobs.get(name)
        return len(data) if data is not None else None

    def delete_blob(self, name: str) -> bool:
        with self._lock:
            return self._blobs.pop(name, None) is not None

    def quarantine_blob(self, name: str) -> str | None:
        with self._lock:
            data = self._blobs.pop(name, None)
            if data is None:
                return None
            self._blobs[f"{name}.corrupt.bak"] = data
        return f"{name}.corrupt.bak"

    def vector_cache(self, embedder: Embedder) -> VectorCache:
        return _MemoryVectors(embedder)
