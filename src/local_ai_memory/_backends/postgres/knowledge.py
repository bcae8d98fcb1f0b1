"""``PostgresKnowledgeBackend``: knowledge notes, their change feed, blobs and vectors in PostgreSQL.

Tables (see :mod:`.schema`): ``notes`` keyed ``(owner, category, name)`` where ``owner``
is the user's file-name prefix (``bob_``), so a user's listing is one index range;
``note_owners`` holds one change counter per owner and ``note_changes`` each owner's change
log; a derived blob is a ``blob_heads`` row followed by its ``blob_tails`` rows (one per
append). Every note write bumps its owner's counter first: the row lock makes that owner's
writers commit in counter order, so a reader that sees counter ``n`` has seen every change of the owner
up to ``n``, and :meth:`owner_changes` is complete on every host at every moment: a note written
on one host is found by the very next query of its owner on another. Writers of different
owners share no row. A note's version comes from a sequence, taken under the owner's row lock
(exact: it grows on every write of the note). There is no feed across owners
(:meth:`changes` answers ``None``).

An owner's cursor carries the counter's incarnation (the sequence value when the owner's row
was made): forgetting a user deletes their counter and log, and a cursor from before that is
then told apart from the new counter's.

Search itself stays in each process (the engines are backend-agnostic), so rankings and scores
are the file backend's by construction; embeddings are cached in the ``vectors`` table.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from local_ai_memory._backends.postgres.pool import Database, Op, Stmt
from local_ai_memory._backends.postgres.storage import PgStorage, database_of, settings_of
from local_ai_memory._contracts.knowledge import (
    BlobAppend,
    KnowledgeBackend,
    NoteChanges,
    NoteInfo,
    NoteKey,
    NoteVersions,
    OwnerListing,
    VectorCache,
    is_note_name,
)
from local_ai_memory._shared.config import MemoryConfig
from local_ai_memory._shared.vectors import QueryEmbedding, stacked, text_digest, unit_vectors

if TYPE_CHECKING:
    from local_ai_memory._shared.models import Embedder

__all__ = ["PostgresKnowledgeBackend"]

_NOW = "extract(epoch FROM clock_timestamp())"
_COUNT_BITS = 32
"""An owner's cursor is ``incarnation << 32 | count`` (see the module's docstring)."""
_COUNT_MASK = (1 << _COUNT_BITS) - 1
_BUMP = (
    "INSERT INTO {s}.note_owners AS o (owner, cursor, incarnation) VALUES (%s, 1, nextval('{s}.note_versions'))"
    " ON CONFLICT (owner) DO UPDATE SET cursor = o.cursor + 1 RETURNING o.cursor"
)
"""Bump an owner's change counter (made at 1 for a new owner) and return it: the row every
write of that owner locks first."""
_REWRITE_LOCKS = 0x4C41494F
"""The advisory-lock class of blob rewrites (the schema's and the scopes' are the two below)."""


def _owner(name: str) -> str:
    """The owner column of a note name: its user prefix (``bob_``), ``''`` for a name without one."""
    head, sep, _ = name.partition("_")
    return head + sep if sep else ""


def _is_owner(prefix: str) -> bool:
    """Whether ``prefix`` is a whole owner column value (a user's file prefix, ``bob_``)."""
    return prefix.endswith("_") and "_" not in prefix[:-1]


def _cursor(count: int, incarnation: int) -> int:
    """An owner's feed cursor: their counter's incarnation and count (see the module's docstring)."""
    return (incarnation << _COUNT_BITS) | count


def _joined(data: bytes, tail: bytes | None) -> bytes:
    """A blob's bytes: its row's data and the tail rows appended since (``None``: none)."""
    return bytes(data) if tail is None else bytes(data) + bytes(tail)


def _info(category: str, row: Sequence[Any]) -> NoteInfo:
    name, size, version, modified = row
    return NoteInfo(category, name, int(size), int(version), float(modified))


class PostgresKnowledgeBackend(PgStorage, KnowledgeBackend):
    """Notes and derived data in a PostgreSQL schema, shared by every host that uses it."""

    exact_versions = True

    def __init__(
        self,
        url: str | None = None,
        *,
        schema: str = "local_ai_memory",
        pool_min_size: int = 1,
        pool_max_size: int = 10,
        pool_timeout: float = 30.0,
        connect_timeout: float = 10.0,
        prepare_threshold: int | None = 5,
        database: Database | None = None,
    ) -> None:
        settings = (schema, pool_min_size, pool_max_size, pool_timeout, connect_timeout, prepare_threshold)
        super().__init__(database_of("PostgresKnowledgeBackend", database, url, settings))

    @classmethod
    def from_config(cls, config: MemoryConfig, database: Database | None = None) -> PostgresKnowledgeBackend:
        """The backend of ``config.database_url`` (or of an open ``database`` shared with the runtime backend)."""
        return cls(database=database if database is not None else Database(settings_of(config)))

    def __repr__(self) -> str:
        return f"PostgresKnowledgeBackend({self.db.where}, schema {self.db.settings.schema})"

    # -- notes ---------------------------------------------------------------------------------
    def _read(self, category: str, name: str) -> Op[bytes | None]:
        row = yield Stmt(
            self.db.q("SELECT data FROM {s}.notes WHERE owner = %s AND category = %s AND name = %s"),
            (_owner(name), category, name),
            "one",
        )
        return None if row is None else bytes(row[0])

    def _read_heads(self, category: str, names: Sequence[str], size: int) -> Op[dict[str, tuple[bytes, bool]]]:
        """The first ``size`` bytes of several notes in one statement (one round trip)."""
        if not names:
            return {}
        rows = yield Stmt(
            self.db.q(
                "SELECT name, substring(data FROM 1 FOR %s), size FROM {s}.notes WHERE category = %s AND name = ANY(%s)"
            ),
            (max(0, size), category, list(names)),
            "all",
        )
        return {row[0]: (bytes(row[1]), int(row[2]) <= size) for row in rows}

    def _bump(self, name: str) -> Op[int]:
        """Take the next change number of ``name``'s owner; holds the owner's row until commit,
        so that owner's commits follow counter order (other owners' writers never wait here)."""
        row = yield Stmt(self.db.q(_BUMP), (_owner(name),), "one")
        return int(row[0])

    def _log(self, cursor: int, category: str, name: str) -> Stmt:
        return Stmt(
            self.db.q("INSERT INTO {s}.note_changes (owner, id, category, name) VALUES (%s, %s, %s, %s)"),
            (_owner(name), cursor, category, name),
        )

    def _write(self, category: str, name: str, data: bytes, cursor: int | None = None) -> Op[NoteInfo]:
        """One statement: the owner's counter bumped (unless ``cursor`` was taken already), the
        note's row, then its change-log row. The note's insert reads the counter's row, so the
        counter's lock is taken first, as every writer takes it."""
        data = bytes(data)
        owner = _owner(name)
        counter = f"o AS ({_BUMP})" if cursor is None else "o AS (SELECT %s::bigint AS cursor)"
        row = yield Stmt(
            self.db.q(
                f"WITH {counter}, n AS (INSERT INTO {{s}}.notes AS n"
                " (owner, category, name, data, size, version, modified)"
                f" SELECT %s, %s, %s, %s, %s, nextval('{{s}}.note_versions'), {_NOW} FROM o"
                " ON CONFLICT (owner, category, name) DO UPDATE SET"
                " data = EXCLUDED.data, size = EXCLUDED.size, version = EXCLUDED.version,"
                " modified = EXCLUDED.modified RETURNING n.version, n.modified),"
                " c AS (INSERT INTO {s}.note_changes (owner, id, category, name) SELECT %s, o.cursor, %s, %s FROM o)"
                " SELECT n.version, n.modified FROM n"
            ),
            (owner if cursor is None else cursor, owner, category, name, data, len(data), owner, category, name),
            "one",
        )
        return NoteInfo(category, name, len(data), int(row[0]), float(row[1]))

    def _write_many(self, category: str, notes: Mapping[str, bytes]) -> Op[dict[str, NoteInfo]]:
        """Many notes in one transaction: each owner's counter taken once for all of its notes
        (owners in name order, then the notes' rows: the lock order of :meth:`_write`), the notes
        in one statement, their change-log rows in another."""
        names = sorted(notes)
        owners = sorted({_owner(name) for name in names})
        ids: list[int] = []
        last: dict[str, int] = {}
        for owner in owners:
            count = sum(1 for name in names if _owner(name) == owner)
            row = yield Stmt(
                self.db.q(
                    "INSERT INTO {s}.note_owners AS o (owner, cursor, incarnation)"
                    " VALUES (%s, %s, nextval('{s}.note_versions'))"
                    " ON CONFLICT (owner) DO UPDATE SET cursor = o.cursor + EXCLUDED.cursor RETURNING o.cursor"
                ),
                (owner, count),
                "one",
            )
            last[owner] = int(row[0]) - count
        for name in names:
            last[_owner(name)] += 1
            ids.append(last[_owner(name)])
        datas = [bytes(notes[name]) for name in names]
        rows = yield Stmt(
            self.db.q(
                "INSERT INTO {s}.notes AS n (owner, category, name, data, size, version, modified)"
                f" SELECT o, %s, m, d, octet_length(d), nextval('{{s}}.note_versions'), {_NOW}"
                " FROM unnest(%s::text[], %s::text[], %s::bytea[]) AS t(o, m, d)"
                " ON CONFLICT (owner, category, name) DO UPDATE SET"
                " data = EXCLUDED.data, size = EXCLUDED.size, version = EXCLUDED.version,"
                " modified = EXCLUDED.modified RETURNING n.name, n.size, n.version, n.modified"
            ),
            (category, [_owner(name) for name in names], names, datas),
            "all",
        )
        yield Stmt(
            self.db.q(
                "INSERT INTO {s}.note_changes (owner, id, category, name)"
                " SELECT o, i, %s, m FROM unnest(%s::text[], %s::bigint[], %s::text[]) AS t(o, i, m)"
            ),
            (category, [_owner(name) for name in names], ids, names),
        )
        return {row[0]: _info(category, row) for row in rows}

    def _update(self, category: str, name: str, change: Callable[[bytes | None], bytes]) -> Op[tuple[bytes, NoteInfo]]:
        """Read, change and write in one transaction. The feed row is taken first (as every write
        does), and it stays held until commit: updates of any host run one after the other, and
        each reads (READ COMMITTED: a fresh snapshot per statement) what the one before committed."""
        cursor = yield from self._bump(name)
        current = yield from self._read(category, name)
        data = bytes(change(current))
        info = yield from self._write(category, name, data, cursor)
        return data, info

    def _write_with(self, category: str, name: str, data: bytes, append: BlobAppend) -> Op[NoteInfo]:
        """The note and its index line in one transaction (the feed row, the note's row, then the
        blob's: one lock order for every writer). The line is made after the note's statement,
        from the version it got."""
        data = bytes(data)
        info = yield from self._write(category, name, data)
        yield from self._append_blob(append.blob, append.line(data, info))
        return info

    def _update_with(
        self, category: str, name: str, change: Callable[[bytes | None], bytes], append: BlobAppend
    ) -> Op[tuple[bytes, NoteInfo]]:
        data, info = yield from self._update(category, name, change)
        yield from self._append_blob(append.blob, append.line(data, info))
        return data, info

    def _delete_if(self, category: str, name: str, check: Callable[[bytes | None], None]) -> Op[bool]:
        """Read, check and delete in one transaction, behind the feed row like :meth:`_update`."""
        cursor = yield from self._bump(name)
        check((yield from self._read(category, name)))
        return (yield from self._delete(category, name, cursor))

    def _delete_with(
        self,
        category: str,
        name: str,
        blob: str,
        line: Callable[[], bytes],
        check: Callable[[bytes | None], None] | None,
    ) -> Op[bool]:
        """The delete and its index line in one transaction (the same lock order as
        :meth:`_write_with`); nothing is appended when there was no note to delete."""
        if check is None:
            existed = yield from self._delete(category, name)
        else:
            existed = yield from self._delete_if(category, name, check)
        if existed:
            yield from self._append_blob(blob, line())
        return existed

    def _delete(self, category: str, name: str, cursor: int | None = None) -> Op[bool]:
        if cursor is None:  # the owner's row first, as in _write: one lock order, no deadlock
            cursor = yield from self._bump(name)
        count = yield Stmt(
            self.db.q("DELETE FROM {s}.notes WHERE owner = %s AND category = %s AND name = %s"),
            (_owner(name), category, name),
            "rowcount",
        )
        if count:
            yield self._log(cursor, category, name)
        return bool(count)

    def _note_info(self, category: str, name: str) -> Op[NoteInfo | None]:
        row = yield Stmt(
            self.db.q(
                "SELECT name, size, version, modified FROM {s}.notes WHERE owner = %s AND category = %s AND name = %s"
            ),
            (_owner(name), category, name),
            "one",
        )
        return None if row is None else _info(category, row)

    def _list(self, category: str, user_prefix: str | None) -> Op[dict[str, NoteInfo]]:
        columns = "SELECT name, size, version, modified FROM {s}.notes WHERE category = %s"
        if user_prefix is not None and _is_owner(user_prefix):
            rows = yield Stmt(self.db.q(columns + " AND owner = %s"), (category, user_prefix), "all")
        elif user_prefix is not None:
            rows = yield Stmt(self.db.q(columns + " AND starts_with(name, %s)"), (category, user_prefix), "all")
        else:
            rows = yield Stmt(self.db.q(columns), (category,), "all")
        if user_prefix is not None:
            return {row[0]: _info(category, row) for row in rows if row[0].endswith(".md")}
        return {row[0]: _info(category, row) for row in rows if is_note_name(row[0])}

    def _categories(self) -> Op[list[str]]:
        rows = yield Stmt(self.db.q("SELECT DISTINCT category FROM {s}.notes ORDER BY category"), fetch="all")
        return [row[0] for row in rows]

    def read_note(self, category: str, name: str) -> bytes | None:
        return self.run("read_note", self._read(category, name), read=True)

    async def aread_note(self, category: str, name: str) -> bytes | None:
        return await self.arun("read_note", self._read(category, name), read=True)

    def read_note_heads(self, category: str, names: Sequence[str], size: int) -> dict[str, tuple[bytes, bool]]:
        return self.run("read_note_heads", self._read_heads(category, names, size), read=True)

    async def aread_note_heads(self, category: str, names: Sequence[str], size: int) -> dict[str, tuple[bytes, bool]]:
        return await self.arun("read_note_heads", self._read_heads(category, names, size), read=True)

    def write_note(self, category: str, name: str, data: bytes) -> NoteInfo:
        return self.run("write_note", self._write(category, name, data))

    async def awrite_note(self, category: str, name: str, data: bytes) -> NoteInfo:
        return await self.arun("write_note", self._write(category, name, data))

    def write_notes(self, category: str, notes: Mapping[str, bytes]) -> dict[str, NoteInfo]:
        """One transaction for all of them: a crash stores every note or none."""
        return self.run("write_notes", self._write_many(category, notes)) if notes else {}

    async def awrite_notes(self, category: str, notes: Mapping[str, bytes]) -> dict[str, NoteInfo]:
        return await self.arun("write_notes", self._write_many(category, notes)) if notes else {}

    def write_note_with(self, category: str, name: str, data: bytes, append: BlobAppend) -> NoteInfo:
        """One transaction: a crash stores both the note and its line, or neither."""
        return self.run("write_note", self._write_with(category, name, data, append))

    async def awrite_note_with(self, category: str, name: str, data: bytes, append: BlobAppend) -> NoteInfo:
        return await self.arun("write_note", self._write_with(category, name, data, append))

    def update_note_with(
        self, category: str, name: str, change: Callable[[bytes | None], bytes], append: BlobAppend
    ) -> tuple[bytes, NoteInfo]:
        return self.run("update_note", self._update_with(category, name, change, append))

    async def aupdate_note_with(
        self, category: str, name: str, change: Callable[[bytes | None], bytes], append: BlobAppend
    ) -> tuple[bytes, NoteInfo]:
        return await self.arun("update_note", self._update_with(category, name, change, append))

    def update_note(self, category: str, name: str, change: Callable[[bytes | None], bytes]) -> tuple[bytes, NoteInfo]:
        return self.run("update_note", self._update(category, name, change))

    async def aupdate_note(
        self, category: str, name: str, change: Callable[[bytes | None], bytes]
    ) -> tuple[bytes, NoteInfo]:
        return await self.arun("update_note", self._update(category, name, change))

    def delete_note(self, category: str, name: str) -> bool:
        return self.run("delete_note", self._delete(category, name))

    def delete_note_if(self, category: str, name: str, check: Callable[[bytes | None], None]) -> bool:
        return self.run("delete_note", self._delete_if(category, name, check))

    async def adelete_note_if(self, category: str, name: str, check: Callable[[bytes | None], None]) -> bool:
        return await self.arun("delete_note", self._delete_if(category, name, check))

    async def adelete_note(self, category: str, name: str) -> bool:
        return await self.arun("delete_note", self._delete(category, name))

    def delete_note_with(
        self,
        category: str,
        name: str,
        blob: str,
        line: Callable[[], bytes],
        check: Callable[[bytes | None], None] | None = None,
    ) -> bool:
        """One transaction: a crash deletes the note and stores its line, or neither."""
        return self.run("delete_note", self._delete_with(category, name, blob, line, check))

    async def adelete_note_with(
        self,
        category: str,
        name: str,
        blob: str,
        line: Callable[[], bytes],
        check: Callable[[bytes | None], None] | None = None,
    ) -> bool:
        return await self.arun("delete_note", self._delete_with(category, name, blob, line, check))

    def note_info(self, category: str, name: str) -> NoteInfo | None:
        return self.run("note_info", self._note_info(category, name), read=True)

    async def anote_info(self, category: str, name: str) -> NoteInfo | None:
        return await self.arun("note_info", self._note_info(category, name), read=True)

    def list_notes(self, category: str, user_prefix: str | None = None) -> dict[str, NoteInfo]:
        return self.run("list_notes", self._list(category, user_prefix), read=True)

    async def alist_notes(self, category: str, user_prefix: str | None = None) -> dict[str, NoteInfo]:
        return await self.arun("list_notes", self._list(category, user_prefix), read=True)

    def list_categories(self) -> list[str]:
        return self.run("list_categories", self._categories())

    # -- change feed ---------------------------------------------------------------------------
    def _owner_changes(self, prefix: str, since: int | None) -> Op[NoteChanges]:
        row = yield Stmt(
            self.db.q("SELECT cursor, incarnation FROM {s}.note_owners WHERE owner = %s"), (prefix,), "one"
        )
        if row is None:  # never written, or forgotten: only the cursor of 'nothing yet' is current
            return NoteChanges(0, frozenset(), complete=since == 0)
        count, incarnation = int(row[0]), int(row[1])
        cursor = _cursor(count, incarnation)
        if since is None or since >> _COUNT_BITS not in (0, incarnation) or since > cursor:
            return NoteChanges(cursor, frozenset(), complete=False)  # first look, or a cursor not of this counter
        if since == cursor:  # the usual answer to a query: nothing new
            return NoteChanges(cursor, frozenset(), complete=True)
        rows = yield Stmt(
            self.db.q("SELECT DISTINCT category, name FROM {s}.note_changes WHERE owner = %s AND id > %s AND id <= %s"),
            (prefix, since & _COUNT_MASK if since >> _COUNT_BITS else 0, count),
            "all",
        )
        keys: frozenset[NoteKey] = frozenset((category, name) for category, name in rows)
        return NoteChanges(cursor, keys, complete=True)

    def changes(self, since: int | None) -> NoteChanges | None:
        """``None``: this backend keeps a feed per owner only (see :meth:`owner_changes`)."""
        return None

    def owner_changes(self, user_prefix: str, since: int | None) -> NoteChanges | None:
        return self.run("changes", self._owner_changes(user_prefix, since), read=True)

    async def aowner_changes(self, user_prefix: str, since: int | None) -> NoteChanges | None:
        return await self.arun("changes", self._owner_changes(user_prefix, since), read=True)

    def _follow_owner(self, prefix: str, categories: Sequence[str]) -> Op[OwnerListing]:
        """The owner's counter and their notes of ``categories`` in one statement: one snapshot,
        so the cursor is exactly the listing's (a write is in both or in neither). One row per
        note, each carrying the counter; one row of NULL note columns when there is none."""
        rows = yield Stmt(
            self.db.q(
                "SELECT o.cursor, o.incarnation, n.category, n.name, n.size, n.version, n.modified"
                " FROM (SELECT 1) AS one LEFT JOIN {s}.note_owners AS o ON o.owner = %s"
                " LEFT JOIN {s}.notes AS n ON n.owner = %s AND n.category = ANY(%s)"
            ),
            (prefix, prefix, list(categories)),
            "all",
        )
        count, incarnation = rows[0][:2]  # (SELECT 1): always one row at least
        cursor = 0 if count is None else _cursor(int(count), int(incarnation))
        columns: dict[str, NoteVersions] = {c: NoteVersions(c, [], [], [], []) for c in categories}
        for row in rows:
            listed = columns.get(row[2]) if row[2] is not None else None
            if listed is not None and row[3].endswith(".md"):
                listed.names.append(row[3])
                listed.sizes.append(int(row[4]))
                listed.versions.append(int(row[5]))
                listed.modified.append(float(row[6]))
        return OwnerListing(cursor, [columns[c] for c in categories])

    def follow_owner(self, user_prefix: str, categories: Sequence[str]) -> OwnerListing | None:
        """One statement (see :meth:`_follow_owner`) for a user's prefix; another prefix is
        listed as the default does."""
        if not _is_owner(user_prefix):
            return super().follow_owner(user_prefix, categories)
        return self.run("follow_owner", self._follow_owner(user_prefix, categories), read=True)

    async def afollow_owner(self, user_prefix: str, categories: Sequence[str]) -> OwnerListing | None:
        if not _is_owner(user_prefix):
            return await super().afollow_owner(user_prefix, categories)
        return await self.arun("follow_owner", self._follow_owner(user_prefix, categories), read=True)

    def _forget_feed(self, prefix: str) -> Op[None]:
        yield Stmt(self.db.q("DELETE FROM {s}.note_changes WHERE owner = %s"), (prefix,))
        yield Stmt(self.db.q("DELETE FROM {s}.note_owners WHERE owner = %s"), (prefix,))

    def forget_feed(self, user_prefix: str) -> None:
        """Delete the owner's change counter and log: no name of a note they erased is left."""
        self.run("forget_feed", self._forget_feed(user_prefix))

    # -- derived data --------------------------------------------------------------------------
    # A blob is its ``blob_heads`` row's data followed by its ``blob_tails`` rows in ``seq`` order: an
    # append inserts a tail row (it used to rewrite the whole value), and a write of the whole
    # blob replaces the row's data and deletes the tail. Each of these first takes the head
    # row's lock (an append makes an empty row when there is none), so appends get their ``seq``
    # in the order they commit and a write never leaves an append's row behind it.
    _TAIL = "(SELECT string_agg(t.data, ''::bytea ORDER BY t.seq) FROM {s}.blob_tails AS t WHERE t.name = b.name)"

    def _read_blob(self, name: str) -> Op[bytes | None]:
        row = yield Stmt(
            self.db.q(f"SELECT b.data, {self._TAIL} FROM {{s}}.blob_heads AS b WHERE b.name = %s"), (name,), "one"
        )
        return None if row is None else _joined(row[0], row[1])

    def _read_blobs(self, names: Sequence[str]) -> Op[dict[str, bytes]]:
        rows = yield Stmt(
            self.db.q(f"SELECT b.name, b.data, {self._TAIL} FROM {{s}}.blob_heads AS b WHERE b.name = ANY(%s)"),
            (list(names),),
            "all",
        )
        return {row[0]: _joined(row[1], row[2]) for row in rows}

    def _write_blob(self, name: str, data: bytes) -> Op[None]:
        yield Stmt(
            self.db.q(
                "INSERT INTO {s}.blob_heads (name, data) VALUES (%s, %s)"
                " ON CONFLICT (name) DO UPDATE SET data = EXCLUDED.data"
            ),
            (name, bytes(data)),
        )
        yield Stmt(self.db.q("DELETE FROM {s}.blob_tails WHERE name = %s"), (name,))

    def _append_blob(self, name: str, data: bytes) -> Op[None]:
        yield Stmt(
            self.db.q(
                "WITH b AS (INSERT INTO {s}.blob_heads AS b (name, data) VALUES (%s, ''::bytea)"
                " ON CONFLICT (name) DO UPDATE SET data = b.data RETURNING b.name)"
                " INSERT INTO {s}.blob_tails (name, data) SELECT b.name, %s FROM b"
            ),
            (name, bytes(data)),
        )

    def _blob_size(self, name: str) -> Op[int | None]:
        row = yield Stmt(
            self.db.q(
                "SELECT octet_length(b.data) + coalesce((SELECT sum(octet_length(t.data)) FROM {s}.blob_tails AS t"
                " WHERE t.name = b.name), 0) FROM {s}.blob_heads AS b WHERE b.name = %s"
            ),
            (name,),
            "one",
        )
        return None if row is None else int(row[0])

    def _delete_blob(self, name: str) -> Op[bool]:
        count = yield Stmt(self.db.q("DELETE FROM {s}.blob_heads WHERE name = %s"), (name,), "rowcount")
        yield Stmt(self.db.q("DELETE FROM {s}.blob_tails WHERE name = %s"), (name,))
        return bool(count)

    def _lock_blobs(self, names: Sequence[str]) -> Op[None]:
        """Hold the rows of blobs ``names`` (those that exist) until commit, in name order. A
        statement of its own: in READ COMMITTED the next statement then reads every append
        committed before the lock was granted, and no other can come until commit (a read in
        the locking statement would see the row as of the lock but its tail as of the start)."""
        yield Stmt(
            self.db.q("SELECT name FROM {s}.blob_heads WHERE name = ANY(%s) ORDER BY name FOR UPDATE"), (list(names),)
        )

    def _quarantine(self, name: str) -> Op[str | None]:
        aside = f"{name}.corrupt.bak"
        yield from self._lock_blobs([name])
        data = yield from self._read_blob(name)
        if data is None:
            return None
        yield from self._delete_blob(name)
        yield from self._write_blob(aside, data)
        return aside

    def read_blob(self, name: str) -> bytes | None:
        return self.run("read_blob", self._read_blob(name), read=True)

    async def aread_blob(self, name: str) -> bytes | None:
        return await self.arun("read_blob", self._read_blob(name), read=True)

    def read_blobs(self, names: Sequence[str]) -> dict[str, bytes]:
        """One statement: the blobs as of one moment (a snapshot and its journal as one
        compaction, a transaction, left them)."""
        return self.run("read_blobs", self._read_blobs(names), read=True) if names else {}

    async def aread_blobs(self, names: Sequence[str]) -> dict[str, bytes]:
        return await self.arun("read_blobs", self._read_blobs(names), read=True) if names else {}

    def write_blob(self, name: str, data: bytes) -> None:
        self.run("write_blob", self._write_blob(name, data))

    async def awrite_blob(self, name: str, data: bytes) -> None:
        await self.arun("write_blob", self._write_blob(name, data))

    def append_blob(self, name: str, data: bytes) -> None:
        """One statement that adds a tail row: concurrent appends queue on the blob's row lock."""
        self.run("append_blob", self._append_blob(name, data))

    async def aappend_blob(self, name: str, data: bytes) -> None:
        await self.arun("append_blob", self._append_blob(name, data))

    def _rewrite(self, names: Sequence[str], change: Callable[[list[bytes | None]], list[bytes]]) -> Op[None]:
        # Rewrites of the same blobs wait for each other first (a row that does not exist yet
        # cannot be locked FOR UPDATE: two rewrites inserting it in different orders deadlocked),
        # then the rows are locked and written in one order, the names sorted, as appends are.
        yield Stmt(
            self.db.q("SELECT pg_advisory_xact_lock(%s, hashtext(%s))"), (_REWRITE_LOCKS, "/".join(sorted(names)))
        )
        yield from self._lock_blobs(names)
        found = yield from self._read_blobs(names)
        new = dict(zip(names, change([found.get(name) for name in names]), strict=True))
        for name in sorted(new):  # one transaction: the order of the writes is not seen, only of the locks
            yield from self._write_blob(name, new[name])

    def rewrite_blobs(self, names: Sequence[str], change: Callable[[list[bytes | None]], list[bytes]]) -> None:
        """One transaction holding the blobs' rows: appends to them wait for it, and a crash
        leaves all of them as they were or all rewritten."""
        self.run("rewrite_blobs", self._rewrite(names, change))

    def blob_size(self, name: str) -> int | None:
        return self.run("blob_size", self._blob_size(name), read=True)

    async def ablob_size(self, name: str) -> int | None:
        return await self.arun("blob_size", self._blob_size(name), read=True)

    def delete_blob(self, name: str) -> bool:
        return self.run("delete_blob", self._delete_blob(name))

    def quarantine_blob(self, name: str) -> str | None:
        return self.run("quarantine_blob", self._quarantine(name))

    async def aquarantine_blob(self, name: str) -> str | None:
        return await self.arun("quarantine_blob", self._quarantine(name))

    def vector_cache(self, embedder: Embedder) -> VectorCache:
        return _PgVectors(self, embedder)


class _PgVectors(QueryEmbedding):
    """Unit vectors by SHA-256 of their text and the embedder's model name, in the ``vectors`` table.

    Kept in this process too, so a vector is fetched from the database at most once per process;
    a vector embedded on one host is reused by every other host.
    """

    discards_cheaply = True
    """Deleting kept vectors costs only their rows: a deleted note's passages go at once."""

    def __init__(self, backend: PostgresKnowledgeBackend, embedder: Embedder) -> None:
        from local_ai_memory._shared.vectors import model_id_of

        self.backend = backend
        self.embedder = embedder
        self.model = model_id_of(embedder)
        self._lock = threading.Lock()
        self._vectors: dict[str, npt.NDArray[np.float32]] = {}

    def _digests(self, items: Sequence[tuple[str, str]]) -> list[str]:
        return [text_digest(text) for _, text in items]

    def _fetch(self, digests: Sequence[str]) -> Op[None]:
        with self._lock:
            wanted = sorted({d for d in digests if d not in self._vectors})
        if not wanted:
            return
        rows = yield Stmt(
            self.backend.db.q("SELECT digest, vector FROM {s}.vectors WHERE model = %s AND digest = ANY(%s)"),
            (self.model, wanted),
            "all",
        )
        with self._lock:
            for digest, vector in rows:
                self._vectors[digest] = np.asarray(vector, dtype=np.float32)

    def _store(self, digests: Sequence[str], vectors: npt.NDArray[np.float32]) -> Op[None]:
        yield Stmt(
            self.backend.db.q(
                "INSERT INTO {s}.vectors (model, digest, vector) VALUES (%s, %s, %s::real[]) ON CONFLICT DO NOTHING"
            ),
            many=[(self.model, digest, vector.tolist()) for digest, vector in zip(digests, vectors, strict=True)],
        )
        with self._lock:
            self._vectors.update(zip(digests, vectors, strict=True))

    def _missing(self, items: Sequence[tuple[str, str]], digests: Sequence[str]) -> dict[str, str]:
        with self._lock:
            return {d: text for d, (_, text) in zip(digests, items, strict=True) if d not in self._vectors}

    def _stack(self, digests: Sequence[str]) -> npt.NDArray[np.float32]:
        with self._lock:
            return stacked(self._vectors, digests)

    def vectors_for(self, items: Sequence[tuple[str, str]]) -> npt.NDArray[np.float32]:
        digests = self._digests(items)
        self.backend.run("vectors", self._fetch(digests))
        new = self._missing(items, digests)
        if new:
            texts = list(new.values())
            self.backend.run("vectors", self._store(list(new), unit_vectors(texts, self.embedder.embed(texts))))
        return self._stack(digests)

    async def avectors_for(self, items: Sequence[tuple[str, str]]) -> npt.NDArray[np.float32]:
        digests = self._digests(items)
        await self.backend.arun("vectors", self._fetch(digests))
        new = self._missing(items, digests)
        if new:
            texts = list(new.values())
            vectors = unit_vectors(texts, await self.embedder.aembed(texts))
            await self.backend.arun("vectors", self._store(list(new), vectors))
        return self._stack(digests)

    def digest_of(self, text: str) -> str:
        return text_digest(text)

    def kept(self, digests: Sequence[str]) -> npt.NDArray[np.float32] | None:
        self.backend.run("vectors", self._fetch(digests))
        with self._lock:
            if any(d not in self._vectors for d in digests):
                return None
        return self._stack(digests)

    def discard_kept(self, digests: Sequence[str]) -> int:
        wanted = sorted(set(digests))
        with self._lock:
            for digest in wanted:
                self._vectors.pop(digest, None)
        if not wanted:
            return 0
        return self.backend.run("vectors", self._discard(wanted))

    def _discard(self, digests: Sequence[str]) -> Op[int]:
        rows = yield Stmt(
            self.backend.db.q("DELETE FROM {s}.vectors WHERE model = %s AND digest = ANY(%s) RETURNING digest"),
            (self.model, list(digests)),
            "all",
        )
        return len(rows)

    def discard(self, items: Sequence[tuple[str, str]]) -> int:
        digests = sorted(set(self._digests(items)))
        with self._lock:
            for digest in digests:
                self._vectors.pop(digest, None)
        if not digests:
            return 0
        return self.backend.run("vectors", self._discard(digests))
