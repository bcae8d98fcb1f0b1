"""A knowledge backend on the standard library's ``sqlite3``: an example written from the public
contract alone (``local_ai_memory.backends``), and a real one: it passes the whole knowledge
conformance kit, across processes and across restarts.

One database file holds everything::

    notes(category, name, data, size, version, modified)   the notes, exact bytes
    changes(id, category, name)                            the change feed: one row per write or delete
    blobs(name, data)                                      derived data and erasure markers
    vectors(model, digest, vector)                         unit vectors by model identity and text
    vector_keys(model, key, digest)                        which item asked for which vector (for discard)

How it keeps the promises:

* **Several processes.** The database runs in WAL mode (readers never wait for a writer) and
  every write is one ``BEGIN IMMEDIATE`` transaction: it takes SQLite's write lock first, so
  writers of every process run one after another and none is lost; ``busy_timeout`` makes a
  writer wait for the lock instead of failing.
* **The change feed.** A write appends a row to ``changes``; its ``id`` is the feed cursor and
  the note's version. Writers hold the write lock while they take an id, so ids commit in
  order, and a reader that sees cursor ``n`` has seen every change up to ``n``.
* **Durability.** Everything, erasure markers included, is in the file once a write returns
  (``synchronous=NORMAL`` in WAL mode survives a crash of the process; use ``FULL`` to survive
  a power cut). Nothing the contract needs lives only in this process's memory.
* **Vectors.** Kept per :func:`model_id_of` of the embedder and :func:`text_digest` of the
  text; what an embedder answers goes through :func:`unit_vectors` before it is kept.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from local_ai_memory import Embedder
from local_ai_memory.backends import (
    KnowledgeBackend,
    NoteChanges,
    NoteInfo,
    VectorCache,
    is_note_name,
    model_id_of,
    text_digest,
    unit_vectors,
)

__all__ = ["SqliteKnowledgeBackend"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS notes (
    category TEXT NOT NULL, name TEXT NOT NULL, data BLOB NOT NULL,
    size INTEGER NOT NULL, version INTEGER NOT NULL, modified REAL NOT NULL,
    PRIMARY KEY (category, name)
);
CREATE TABLE IF NOT EXISTS changes (id INTEGER PRIMARY KEY AUTOINCREMENT, category TEXT NOT NULL, name TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS blobs (name TEXT PRIMARY KEY, data BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS vectors (model TEXT NOT NULL, digest TEXT NOT NULL, vector BLOB NOT NULL,
    PRIMARY KEY (model, digest));
CREATE TABLE IF NOT EXISTS vector_keys (model TEXT NOT NULL, key TEXT NOT NULL, digest TEXT NOT NULL,
    PRIMARY KEY (model, key));
"""

Matrix = npt.NDArray[np.float32]


class SqliteKnowledgeBackend(KnowledgeBackend):
    """Notes, change feed, blobs and vectors in one SQLite file, shared by every process that opens it.

    >>> import tempfile, pathlib
    >>> backend = SqliteKnowledgeBackend(pathlib.Path(tempfile.mkdtemp()) / "notes.db")
    >>> _ = backend.write_note("knowledge", "alice_tea.md", b"# Tea")
    >>> sorted(backend.list_notes("knowledge", "alice_"))
    ['alice_tea.md']
    >>> backend.close()
    """

    exact_versions = True  # a note's version is its change id, which grows on every write

    def __init__(self, path: str | Path, *, busy_timeout_s: float = 30.0) -> None:
        self.path = Path(path)
        # One connection, used by one thread at a time (the lock); other processes have their own.
        self._db = sqlite3.connect(self.path, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False)
        self._lock = threading.Lock()
        self._closed = False
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
        with self._write() as db:
            for statement in SCHEMA.split(";"):
                if statement.strip():
                    db.execute(statement)

    def __repr__(self) -> str:
        return f"SqliteKnowledgeBackend({str(self.path)!r})"

    # -- transactions ----------------------------------------------------------------------------
    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """A write transaction: takes SQLite's write lock at once (``BEGIN IMMEDIATE``), so
        writers in every process run one at a time; commits, or rolls back on an error."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """A read transaction: every statement in it sees the same snapshot of the database."""
        with self._lock:
            self._db.execute("BEGIN")
            try:
                yield self._db
            finally:
                self._db.execute("COMMIT")

    def _log(self, db: sqlite3.Connection, category: str, name: str) -> int:
        """Append a change of ``(category, name)`` to the feed; its id is the new cursor."""
        cursor = db.execute("INSERT INTO changes (category, name) VALUES (?, ?)", (category, name))
        assert cursor.lastrowid is not None
        return cursor.lastrowid

    # -- notes -----------------------------------------------------------------------------------
    def read_note(self, category: str, name: str) -> bytes | None:
        with self._read() as db:
            row = db.execute("SELECT data FROM notes WHERE category = ? AND name = ?", (category, name)).fetchone()
        return None if row is None else bytes(row[0])

    def write_note(self, category: str, name: str, data: bytes) -> NoteInfo:
        with self._write() as db:
            return self._put(db, category, name, bytes(data))

    def _put(self, db: sqlite3.Connection, category: str, name: str, data: bytes) -> NoteInfo:
        """Store a note inside a write transaction."""
        modified = time.time()
        version = self._log(db, category, name)
        db.execute(
            "INSERT INTO notes (category, name, data, size, version, modified) VALUES (?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (category, name) DO UPDATE SET data = excluded.data, size = excluded.size,"
            " version = excluded.version, modified = excluded.modified",
            (category, name, data, len(data), version, modified),
        )
        return NoteInfo(category, name, len(data), version, modified)

    def update_note(self, category: str, name: str, change: Callable[[bytes | None], bytes]) -> tuple[bytes, NoteInfo]:
        # BEGIN IMMEDIATE holds the database's write lock from the read to the commit, in every process
        with self._write() as db:
            row = db.execute("SELECT data FROM notes WHERE category = ? AND name = ?", (category, name)).fetchone()
            data = bytes(change(None if row is None else bytes(row[0])))
            return data, self._put(db, category, name, data)

    def delete_note_if(self, category: str, name: str, check: Callable[[bytes | None], None]) -> bool:
        with self._write() as db:  # the write lock from the read to the commit, as in update_note
            row = db.execute("SELECT data FROM notes WHERE category = ? AND name = ?", (category, name)).fetchone()
            check(None if row is None else bytes(row[0]))
            gone = db.execute("DELETE FROM notes WHERE category = ? AND name = ?", (category, name)).rowcount
            if gone:
                self._log(db, category, name)
        return bool(gone)

    def delete_note(self, category: str, name: str) -> bool:
        with self._write() as db:
            gone = db.execute("DELETE FROM notes WHERE category = ? AND name = ?", (category, name)).rowcount
            if gone:
                self._log(db, category, name)  # deletes reach the feed like writes
        return bool(gone)

    def note_info(self, category: str, name: str) -> NoteInfo | None:
        with self._read() as db:
            row = db.execute(
                "SELECT size, version, modified FROM notes WHERE category = ? AND name = ?", (category, name)
            ).fetchone()
        return None if row is None else NoteInfo(category, name, row[0], row[1], row[2])

    def list_notes(self, category: str, user_prefix: str | None = None) -> dict[str, NoteInfo]:
        query = "SELECT name, size, version, modified FROM notes WHERE category = ?"
        params: tuple[Any, ...] = (category,)
        if user_prefix is not None:
            # substr, not LIKE: '_' and '%' in a prefix are plain characters ('bob_' is not 'bob%5Fadmin_').
            query += " AND substr(name, 1, ?) = ?"
            params = (category, len(user_prefix), user_prefix)
        with self._read() as db:
            rows = db.execute(query, params).fetchall()
        # With a prefix: names ending in .md; without: note names only (README.md is not a note).
        wanted = (lambda n: n.endswith(".md")) if user_prefix is not None else is_note_name
        return {
            name: NoteInfo(category, name, size, version, modified)
            for name, size, version, modified in rows
            if wanted(name)
        }

    def list_categories(self) -> list[str]:
        with self._read() as db:
            return [row[0] for row in db.execute("SELECT DISTINCT category FROM notes ORDER BY category")]

    # -- change feed -----------------------------------------------------------------------------
    def changes(self, since: int | None) -> NoteChanges | None:
        with self._read() as db:  # one snapshot: the cursor and the keys up to it agree
            cursor = db.execute("SELECT coalesce(max(id), 0) FROM changes").fetchone()[0]
            if since is None or since > cursor:  # first look, or a cursor this file never gave
                return NoteChanges(cursor, frozenset(), complete=False)
            rows = db.execute("SELECT DISTINCT category, name FROM changes WHERE id > ? AND id <= ?", (since, cursor))
            return NoteChanges(cursor, frozenset((category, name) for category, name in rows), complete=True)

    # -- blobs (derived data and erasure markers) --------------------------------------------------
    def read_blob(self, name: str) -> bytes | None:
        with self._read() as db:
            row = db.execute("SELECT data FROM blobs WHERE name = ?", (name,)).fetchone()
        return None if row is None else bytes(row[0])

    def write_blob(self, name: str, data: bytes) -> None:
        with self._write() as db:
            db.execute("INSERT OR REPLACE INTO blobs (name, data) VALUES (?, ?)", (name, bytes(data)))

    def append_blob(self, name: str, data: bytes) -> None:
        with self._write() as db:  # the write lock: concurrent appends and rewrites queue
            row = db.execute("SELECT data FROM blobs WHERE name = ?", (name,)).fetchone()
            old = bytes(row[0]) if row is not None else b""  # (SQL's || would make the bytes text)
            db.execute("INSERT OR REPLACE INTO blobs (name, data) VALUES (?, ?)", (name, old + bytes(data)))

    def rewrite_blobs(self, names: Sequence[str], change: Callable[[list[bytes | None]], list[bytes]]) -> None:
        with self._write() as db:  # read and writes in one transaction that holds the write lock
            found = {
                row[0]: bytes(row[1])
                for row in db.execute(
                    f"SELECT name, data FROM blobs WHERE name IN ({', '.join('?' * len(names))})", list(names)
                )
            }
            new = change([found.get(name) for name in names])
            db.executemany(
                "INSERT OR REPLACE INTO blobs (name, data) VALUES (?, ?)",
                [(name, bytes(data)) for name, data in zip(names, new, strict=True)],
            )

    def blob_size(self, name: str) -> int | None:
        with self._read() as db:
            row = db.execute("SELECT length(data) FROM blobs WHERE name = ?", (name,)).fetchone()
        return None if row is None else int(row[0])

    def delete_blob(self, name: str) -> bool:
        with self._write() as db:
            return bool(db.execute("DELETE FROM blobs WHERE name = ?", (name,)).rowcount)

    def quarantine_blob(self, name: str) -> str | None:
        aside = f"{name}.corrupt.bak"
        with self._write() as db:
            row = db.execute("SELECT data FROM blobs WHERE name = ?", (name,)).fetchone()
            if row is None:
                return None
            db.execute("INSERT OR REPLACE INTO blobs (name, data) VALUES (?, ?)", (aside, row[0]))
            db.execute("DELETE FROM blobs WHERE name = ?", (name,))
        return aside

    # -- vectors ---------------------------------------------------------------------------------
    def vector_cache(self, embedder: Embedder) -> VectorCache:
        return SqliteVectors(self, embedder)

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._db.close()


class SqliteVectors:
    """The vector cache of one embedder in the ``vectors`` table (see :class:`VectorCache`)."""

    def __init__(self, backend: SqliteKnowledgeBackend, embedder: Embedder) -> None:
        self.backend = backend
        self.embedder = embedder
        self.model = model_id_of(embedder)  # its model_name, else its class: the identity vectors are kept by

    def _plan(self, items: Sequence[tuple[str, str]]) -> tuple[list[str], dict[str, Matrix], dict[str, str]]:
        """Each item's digest, the vectors already kept, and the texts still to embed (by digest)."""
        digests = [text_digest(text) for _, text in items]
        kept: dict[str, Matrix] = {}
        with self.backend._read() as db:
            for digest in set(digests):
                row = db.execute(
                    "SELECT vector FROM vectors WHERE model = ? AND digest = ?", (self.model, digest)
                ).fetchone()
                if row is not None:
                    kept[digest] = np.frombuffer(row[0], dtype=np.float32)
        missing = {d: text for d, (_, text) in zip(digests, items, strict=True) if d not in kept}
        return digests, kept, missing

    def _keep(self, items: Sequence[tuple[str, str]], digests: list[str], new: dict[str, Matrix]) -> None:
        with self.backend._write() as db:
            db.executemany(
                "INSERT OR IGNORE INTO vectors (model, digest, vector) VALUES (?, ?, ?)",
                [(self.model, digest, vector.astype(np.float32).tobytes()) for digest, vector in new.items()],
            )
            db.executemany(
                "INSERT OR REPLACE INTO vector_keys (model, key, digest) VALUES (?, ?, ?)",
                [(self.model, key, digest) for (key, _), digest in zip(items, digests, strict=True)],
            )

    @staticmethod
    def _stack(digests: list[str], vectors: dict[str, Matrix]) -> Matrix:
        if not digests:
            return np.zeros((0, 0), dtype=np.float32)
        return np.stack([vectors[digest] for digest in digests])  # row i is items[i]'s vector

    def vectors_for(self, items: Sequence[tuple[str, str]]) -> Matrix:
        digests, kept, missing = self._plan(items)
        texts = list(missing.values())
        new = dict(zip(missing, unit_vectors(texts, self.embedder.embed(texts)), strict=True)) if texts else {}
        self._keep(items, digests, new)
        return self._stack(digests, {**kept, **new})

    async def avectors_for(self, items: Sequence[tuple[str, str]]) -> Matrix:
        import asyncio

        digests, kept, missing = await asyncio.to_thread(self._plan, items)
        texts = list(missing.values())
        new = dict(zip(missing, unit_vectors(texts, await self.embedder.aembed(texts)), strict=True)) if texts else {}
        await asyncio.to_thread(self._keep, items, digests, new)
        return self._stack(digests, {**kept, **new})

    def embed_query(self, text: str) -> npt.NDArray[np.float32]:
        vector: Matrix = unit_vectors([text], self.embedder.embed([text]))[0]
        return vector

    async def aembed_query(self, text: str) -> npt.NDArray[np.float32]:
        vector: Matrix = unit_vectors([text], await self.embedder.aembed([text]))[0]
        return vector

    def digest_of(self, text: str) -> str:
        return text_digest(text)

    def kept(self, digests: Sequence[str]) -> Matrix | None:
        """The kept vectors of ``digests`` in order, or ``None`` when one is missing (never embeds)."""
        found: dict[str, Matrix] = {}
        with self.backend._read() as db:
            for digest in set(digests):
                row = db.execute(
                    "SELECT vector FROM vectors WHERE model = ? AND digest = ?", (self.model, digest)
                ).fetchone()
                if row is None:
                    return None
                found[digest] = np.frombuffer(row[0], dtype=np.float32)
        return self._stack(list(digests), found)

    def discard_kept(self, digests: Sequence[str]) -> int:
        with self.backend._write() as db:
            had = 0
            for digest in set(digests):
                had += db.execute("DELETE FROM vectors WHERE model = ? AND digest = ?", (self.model, digest)).rowcount
                db.execute("DELETE FROM vector_keys WHERE model = ? AND digest = ?", (self.model, digest))
        return had

    def discard(self, items: Sequence[tuple[str, str]]) -> int:
        """Forget the items' keys and delete their texts' vectors (shared ones too: re-embedded on demand)."""
        with self.backend._write() as db:
            had = 0
            for key, text in items:
                had += db.execute("DELETE FROM vector_keys WHERE model = ? AND key = ?", (self.model, key)).rowcount
                db.execute("DELETE FROM vectors WHERE model = ? AND digest = ?", (self.model, text_digest(text)))
        return had
