"""A runtime backend on SQLite (stdlib ``sqlite3``), written from the public contract alone.

It is an example of how to write a :class:`~local_ai_memory.backends.RuntimeBackend`: it
imports only public names, and ``tests/test_example_sqlite_runtime.py`` runs the whole
conformance kit on it, the ``cross_process`` and ``durable`` capabilities included.

One database file holds everything; any number of threads and processes of one host may open
it at once (SQLite's locking does not hold over network file systems). ``locked()`` uses
``fcntl.flock``, so this example runs on POSIX systems. How it keeps the guarantees:

* **No lost update, gap-free numbers.** Every write is one transaction begun with
  ``BEGIN IMMEDIATE``, which takes the database's write lock *before* reading. A
  read-modify-write (state, plans, compare-and-swap of the working memory, the next message
  number) therefore cannot interleave with another writer, in this process or any other. (A
  ``threading.Lock`` would hold in one process only: two processes would lose updates.)
* **Consistent reads.** The WAL journal lets readers go on while one writer writes; a read
  that takes several statements runs in one ``BEGIN`` transaction, so it sees one snapshot.
* **Exact text.** Values are stored as UTF-8 JSON (or UTF-8 text) in ``BLOB`` columns, so a
  NUL, a lone CR or a CRLF comes back exactly as given.
* **Durable erasures.** Pending erasures are rows of the same database: an erasure begun
  before a crash still hides the data after a restart.
* **The scope lock** is an ``flock`` on one file per scope beside the database: it excludes
  other threads (each holder opens the file itself) and other processes.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from local_ai_memory import InvalidInputError, RecordNotFoundError
from local_ai_memory.backends import (
    Erasure,
    PlansChange,
    PlanSteps,
    RuntimeBackend,
    Scope,
    ScopeInfo,
    StateChange,
    StoredMessage,
    ToolIndexEntry,
    erased,
    join_step,
    split_step,
)

__all__ = ["SQLiteRuntimeBackend"]

_SCHEMA = [
    # One row per scope that was ever written: its small values and its next message number.
    # The unscoped memory is user_id = session_id = '' (real ids are never empty).
    """CREATE TABLE IF NOT EXISTS scopes (
        key TEXT PRIMARY KEY, user_id TEXT NOT NULL, session_id TEXT NOT NULL,
        state BLOB, working BLOB, plans BLOB, next_seq INTEGER NOT NULL DEFAULT 0, modified REAL NOT NULL)""",
    # AUTOINCREMENT: an id is never reused, so a step id is a safe read cursor.
    """CREATE TABLE IF NOT EXISTS steps (
        id INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL, plan_id TEXT NOT NULL, body BLOB NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS steps_of_plan ON steps (key, plan_id, id)",
    """CREATE TABLE IF NOT EXISTS results (
        result_id TEXT PRIMARY KEY, key TEXT NOT NULL, body BLOB NOT NULL, saved_at REAL NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS results_of_scope ON results (key)",
    """CREATE TABLE IF NOT EXISTS messages (
        key TEXT NOT NULL, seq INTEGER NOT NULL, body BLOB NOT NULL, PRIMARY KEY (key, seq))""",
    # The id orders pending erasures oldest first.
    """CREATE TABLE IF NOT EXISTS erasures (
        id INTEGER PRIMARY KEY AUTOINCREMENT, user_id TEXT NOT NULL, session_id TEXT NOT NULL,
        UNIQUE (user_id, session_id))""",
]


def _pack(value: Any) -> bytes:
    """UTF-8 JSON of a plain JSON value (a lone surrogate is kept, as the other backends do)."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.encode("utf-8", "surrogatepass")


def _unpack(raw: bytes | None, default: Any = None) -> Any:
    return default if raw is None else json.loads(bytes(raw).decode("utf-8", "surrogatepass"))


def _pack_step(step: dict[str, Any]) -> bytes:
    """A step's body: its JSON, or (a step with ``bytes`` values) the JSON header, NUL, the values raw."""
    header, values = split_step(step)
    return _pack(header) if values is None else _pack(header) + b"\x00" + values


def _unpack_step(raw: bytes) -> dict[str, Any]:
    data = bytes(raw)
    cut = data.find(b"\x00")  # JSON text never holds a NUL byte (it escapes control characters)
    if cut < 0:
        step: dict[str, Any] = _unpack(data)
        return step
    return join_step(_unpack(data[:cut]), data[cut + 1 :])


def _text(raw: bytes | None) -> str:
    return "" if raw is None else bytes(raw).decode("utf-8", "surrogatepass")


def _ids(scope: Scope) -> tuple[str, str]:
    return scope.user_id or "", scope.session_id or ""


def _not_found(scope: Scope, result_id: str) -> RecordNotFoundError:
    return RecordNotFoundError(f"no tool result {result_id!r} in {scope.describe()}")


class SQLiteRuntimeBackend(RuntimeBackend):
    """Runtime memory in one SQLite file (``path``); ``timeout`` bounds waits for the write lock."""

    def __init__(self, path: str | os.PathLike[str], *, timeout: float = 30.0) -> None:
        self.path = Path(path)
        self.timeout = timeout
        self._local = threading.local()  # one connection per thread
        self._connections: list[sqlite3.Connection] = []
        self._guard = threading.Lock()
        self._lock_dir = self.path.with_name(self.path.name + ".locks")
        self._db().execute("PRAGMA journal_mode = WAL")
        with self._transaction(write=True) as db:
            for statement in _SCHEMA:
                db.execute(statement)

    def __repr__(self) -> str:
        return f"SQLiteRuntimeBackend({str(self.path)!r})"

    # -- connections and transactions ---------------------------------------------------

    def _db(self) -> sqlite3.Connection:
        """This thread's connection (autocommit mode: transactions are begun explicitly)."""
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None, check_same_thread=False)
            db.execute("PRAGMA synchronous = NORMAL")  # with WAL: durable at each checkpoint, never corrupt
            self._local.db = db
            with self._guard:
                self._connections.append(db)
        return db

    @contextlib.contextmanager
    def _transaction(self, *, write: bool = False) -> Iterator[sqlite3.Connection]:
        """One transaction; ``write`` takes the write lock first (``BEGIN IMMEDIATE``)."""
        db = self._db()
        db.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    def _touch(self, db: sqlite3.Connection, scope: Scope) -> None:
        """Create the scope's row if needed and mark it changed now."""
        db.execute(
            "INSERT INTO scopes (key, user_id, session_id, modified) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (key) DO UPDATE SET modified = excluded.modified",
            (scope.key, *_ids(scope), time.time()),
        )

    def _column(self, scope: Scope, column: str) -> bytes | None:
        """One column of the scope's row, or ``None`` (no row, or an erasure hides the scope)."""
        with self._transaction() as db:
            if self._hidden(db, scope):
                return None
            row = db.execute(f"SELECT {column} FROM scopes WHERE key = ?", (scope.key,)).fetchone()
        return None if row is None else row[0]

    # -- erasure records ----------------------------------------------------------------

    def _erasures(self, db: sqlite3.Connection) -> list[Erasure]:
        rows = db.execute("SELECT user_id, session_id FROM erasures ORDER BY id").fetchall()
        return [Erasure(user, session or None) for user, session in rows]

    def _hidden(self, db: sqlite3.Connection, scope: Scope) -> bool:
        """Whether a pending erasure covers ``scope`` (then it reads as empty)."""
        return scope.scoped and erased(self._erasures(db), scope)

    def begin_erasure(self, erasure: Erasure) -> None:
        with self._transaction(write=True) as db:
            db.execute(
                "INSERT OR IGNORE INTO erasures (user_id, session_id) VALUES (?, ?)",
                (erasure.user_id, erasure.session_id or ""),
            )

    def end_erasure(self, erasure: Erasure) -> None:
        with self._transaction(write=True) as db:
            db.execute(
                "DELETE FROM erasures WHERE user_id = ? AND session_id = ?", (erasure.user_id, erasure.session_id or "")
            )

    def pending_erasures(self) -> list[Erasure]:
        with self._transaction() as db:
            return self._erasures(db)

    # -- L0 state and L1 working memory --------------------------------------------------

    def get_state(self, scope: Scope) -> dict[str, Any]:
        state: dict[str, Any] = _unpack(self._column(scope, "state"), {})
        return state

    def update_state(self, scope: Scope, change: StateChange) -> dict[str, Any]:
        with self._transaction(write=True) as db:  # the write lock is held from the read on
            row = db.execute("SELECT state FROM scopes WHERE key = ?", (scope.key,)).fetchone()
            new = change(_unpack(row[0] if row else None, {}))
            self._touch(db, scope)
            db.execute("UPDATE scopes SET state = ? WHERE key = ?", (_pack(new), scope.key))
        return new

    def get_working_memory(self, scope: Scope) -> str:
        return _text(self._column(scope, "working"))

    def swap_working_memory(self, scope: Scope, expected: str | None, text: str) -> str | None:
        with self._transaction(write=True) as db:
            row = db.execute("SELECT working FROM scopes WHERE key = ?", (scope.key,)).fetchone()
            current = _text(row[0] if row else None)
            if expected is not None and current != expected:
                return current
            self._touch(db, scope)
            db.execute(
                "UPDATE scopes SET working = ? WHERE key = ?", (text.encode("utf-8", "surrogatepass"), scope.key)
            )
        return None

    # -- L2 plans and step logs ---------------------------------------------------------

    def get_plans(self, scope: Scope) -> dict[str, Any]:
        plans: dict[str, Any] = _unpack(self._column(scope, "plans"), {})
        return plans

    def update_plans(self, scope: Scope, change: PlansChange) -> dict[str, Any]:
        with self._transaction(write=True) as db:
            row = db.execute("SELECT plans FROM scopes WHERE key = ?", (scope.key,)).fetchone()
            current: dict[str, Any] = _unpack(row[0] if row else None, {})
            new = change(dict(current))
            if new is None:
                return current
            self._touch(db, scope)
            db.execute("UPDATE scopes SET plans = ? WHERE key = ?", (_pack(new), scope.key))
            for gone in set(current) - set(new):  # a dropped plan loses its step log
                db.execute("DELETE FROM steps WHERE key = ? AND plan_id = ?", (scope.key, gone))
        return new

    def append_plan_steps(self, scope: Scope, plan_id: str, steps: Sequence[dict[str, Any]]) -> bool:
        with self._transaction(write=True) as db:
            found = db.execute("SELECT 1 FROM steps WHERE key = ? AND plan_id = ? LIMIT 1", (scope.key, plan_id))
            was_empty = found.fetchone() is None
            if steps:
                self._touch(db, scope)
                db.executemany(
                    "INSERT INTO steps (key, plan_id, body) VALUES (?, ?, ?)",
                    [(scope.key, plan_id, _pack_step(step)) for step in steps],
                )
        return was_empty

    def get_plan_steps(self, scope: Scope, plan_id: str) -> list[dict[str, Any]]:
        return self.read_plan_steps(scope, plan_id).steps

    def read_plan_steps(self, scope: Scope, plan_id: str, cursor: str | None = None) -> PlanSteps:
        """The cursor is the id of the last step read. Ids are never reused and a log is only
        deleted whole, so while that step is still there the log goes on from it; once it is
        gone, every step left belongs to a log begun anew, and is answered whole."""
        head, _, number = (cursor or "").partition(":")
        after = int(number) if head == "sqlite" and number.isdigit() else 0
        with self._transaction() as db:
            if self._hidden(db, scope):
                return PlanSteps([], "", True)
            rows = db.execute(
                "SELECT id, body FROM steps WHERE key = ? AND plan_id = ? AND id >= ? ORDER BY id",
                (scope.key, plan_id, after),
            ).fetchall()
            if after and not (rows and rows[0][0] == after):  # the log was emptied since
                rows = db.execute(
                    "SELECT id, body FROM steps WHERE key = ? AND plan_id = ? ORDER BY id", (scope.key, plan_id)
                ).fetchall()
                return PlanSteps([_unpack_step(body) for _, body in rows], f"sqlite:{rows[-1][0] if rows else 0}", True)
        continued = bool(after)
        new = rows[1:] if continued else rows
        last = rows[-1][0] if rows else 0
        return PlanSteps([_unpack_step(body) for _, body in new], f"sqlite:{last}", not continued)

    def clear_plan_steps(self, scope: Scope, plan_id: str) -> None:
        with self._transaction(write=True) as db:
            db.execute("DELETE FROM steps WHERE key = ? AND plan_id = ?", (scope.key, plan_id))

    # -- L3 tool results ----------------------------------------------------------------

    def tool_result_exists(self, result_id: str) -> bool:
        with self._transaction() as db:
            return db.execute("SELECT 1 FROM results WHERE result_id = ?", (result_id,)).fetchone() is not None

    def save_tool_result(self, scope: Scope, result_id: str, payload: Any) -> int:
        body = _pack(payload)
        with self._transaction(write=True) as db:
            owner = db.execute("SELECT key FROM results WHERE result_id = ?", (result_id,)).fetchone()
            if owner is not None and owner[0] != scope.key:
                raise InvalidInputError(f"tool result id {result_id!r} is taken by another scope")
            self._touch(db, scope)
            db.execute(
                "INSERT OR REPLACE INTO results (result_id, key, body, saved_at) VALUES (?, ?, ?, ?)",
                (result_id, scope.key, body, time.time()),
            )
        return len(body)  # the bytes stored: what list_tool_results reports as the size

    def load_tool_result(self, scope: Scope, result_id: str) -> Any:
        with self._transaction() as db:
            if self._hidden(db, scope):
                raise _not_found(scope, result_id)
            row = db.execute(  # the owner is part of the key: another scope's id is simply not found
                "SELECT body FROM results WHERE result_id = ? AND key = ?", (result_id, scope.key)
            ).fetchone()
        if row is None:
            raise _not_found(scope, result_id)
        return _unpack(row[0])

    def list_tool_results(self, scope: Scope) -> dict[str, ToolIndexEntry]:
        with self._transaction() as db:
            if self._hidden(db, scope):
                return {}
            rows = db.execute(
                "SELECT result_id, length(body), saved_at FROM results WHERE key = ? ORDER BY result_id", (scope.key,)
            ).fetchall()
        return {result_id: ToolIndexEntry(size=size, saved_at=saved_at) for result_id, size, saved_at in rows}

    def count_tool_results(self, scope: Scope) -> int:
        with self._transaction() as db:
            if self._hidden(db, scope):
                return 0
            row = db.execute("SELECT count(*) FROM results WHERE key = ?", (scope.key,)).fetchone()
        return int(row[0])

    def delete_tool_results(self, scope: Scope, result_ids: Sequence[str]) -> list[str]:
        deleted: list[str] = []
        with self._transaction(write=True) as db:
            for result_id in dict.fromkeys(result_ids):  # each id once, in the order asked
                gone = db.execute("DELETE FROM results WHERE result_id = ? AND key = ?", (result_id, scope.key))
                if gone.rowcount:
                    deleted.append(result_id)
        return deleted

    # -- session messages ---------------------------------------------------------------

    def append_messages(self, scope: Scope, messages: Sequence[StoredMessage]) -> list[int]:
        if not messages:
            return []
        with self._transaction(write=True) as db:  # the number is read and advanced under the write lock
            self._touch(db, scope)
            (first,) = db.execute("SELECT next_seq FROM scopes WHERE key = ?", (scope.key,)).fetchone()
            numbers = list(range(first, first + len(messages)))
            db.executemany(
                "INSERT INTO messages (key, seq, body) VALUES (?, ?, ?)",
                [
                    (scope.key, seq, _pack(message.model_dump(mode="json", exclude={"seq"})))
                    for seq, message in zip(numbers, messages, strict=True)
                ],
            )
            db.execute("UPDATE scopes SET next_seq = ? WHERE key = ?", (first + len(messages), scope.key))
        return numbers

    def get_messages(self, scope: Scope) -> list[StoredMessage]:
        with self._transaction() as db:
            if self._hidden(db, scope):
                return []
            rows = db.execute("SELECT seq, body FROM messages WHERE key = ? ORDER BY seq", (scope.key,)).fetchall()
        return [StoredMessage.model_validate({**_unpack(body), "seq": seq}) for seq, body in rows]

    def compact_messages(self, scope: Scope, keep_last: int) -> int:
        with self._transaction(write=True) as db:  # next_seq stays: dropped numbers are never reused
            gone = db.execute(
                "DELETE FROM messages WHERE key = ? AND seq NOT IN"
                " (SELECT seq FROM messages WHERE key = ? ORDER BY seq DESC LIMIT ?)",
                (scope.key, scope.key, max(keep_last, 0)),
            )
            return int(gone.rowcount)

    def clear_messages(self, scope: Scope) -> bool:
        with self._transaction(write=True) as db:
            row = db.execute("SELECT next_seq FROM scopes WHERE key = ?", (scope.key,)).fetchone()
            gone = db.execute("DELETE FROM messages WHERE key = ?", (scope.key,)).rowcount
            db.execute("UPDATE scopes SET next_seq = 0 WHERE key = ?", (scope.key,))  # a cleared log starts at 0
        return bool(gone) or bool(row and row[0])

    def pop_message(self, scope: Scope) -> StoredMessage | None:
        with self._transaction(write=True) as db:
            if self._hidden(db, scope):
                return None
            row = db.execute(
                "SELECT seq, body FROM messages WHERE key = ? ORDER BY seq DESC LIMIT 1", (scope.key,)
            ).fetchone()
            if row is None:
                return None
            db.execute("DELETE FROM messages WHERE key = ? AND seq = ?", (scope.key, row[0]))
            db.execute("UPDATE scopes SET next_seq = ? WHERE key = ?", (row[0], scope.key))  # the number is given back
        return StoredMessage.model_validate({**_unpack(row[1]), "seq": row[0]})

    # -- the scope as a whole ---------------------------------------------------------

    @contextlib.contextmanager
    def locked(self, scope: Scope) -> Iterator[None]:
        """An ``flock`` on ``{database}.locks/{scope key}.lock``; re-entrant in the holding thread."""
        depth: dict[str, int] = self._local.__dict__.setdefault("locks", {})
        if depth.get(scope.key):
            depth[scope.key] += 1
            try:
                yield
            finally:
                depth[scope.key] -= 1
            return
        self._lock_dir.mkdir(exist_ok=True)
        with open(self._lock_dir / f"{scope.key}.lock", "a+b") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file is closed
            depth[scope.key] = 1
            try:
                yield
            finally:
                depth.pop(scope.key, None)

    def list_scopes(self, *, include_erased: bool = False) -> list[ScopeInfo]:
        with self._transaction() as db:
            rows = db.execute(
                "SELECT c.user_id, c.session_id, c.modified, c.state, c.plans, coalesce(length(c.working), 0),"
                " (SELECT count(*) FROM results r WHERE r.key = c.key),"
                " (SELECT coalesce(sum(length(body)), 0) FROM results r WHERE r.key = c.key),"
                " (SELECT count(*) FROM messages m WHERE m.key = c.key),"
                " (SELECT coalesce(sum(length(body)), 0) FROM messages m WHERE m.key = c.key)"
                " FROM scopes c ORDER BY c.key"
            ).fetchall()
            hidden = [] if include_erased else self._erasures(db)
        infos = []
        for user, session, modified, state, plans, working, results, result_bytes, messages, message_bytes in rows:
            scope = Scope.of(user, session) if user else Scope()
            holds_data = _unpack(state, {}) or working or _unpack(plans, {}) or results or messages
            if holds_data and not erased(hidden, scope):  # a step log alone is not data
                infos.append(ScopeInfo(scope, result_bytes + working + message_bytes, modified))
        return infos

    def delete_scope(self, scope: Scope) -> int:
        with self._transaction(write=True) as db:
            removed = 0
            row = db.execute(
                "SELECT coalesce(length(state), 0) + coalesce(length(working), 0) + coalesce(length(plans), 0)"
                " FROM scopes WHERE key = ?",
                (scope.key,),
            ).fetchone()
            if row is not None:
                removed += row[0]
            for table in ("results", "messages", "steps"):
                (size,) = db.execute(
                    f"SELECT coalesce(sum(length(body)), 0) FROM {table} WHERE key = ?", (scope.key,)
                ).fetchone()
                removed += size
                db.execute(f"DELETE FROM {table} WHERE key = ?", (scope.key,))
            db.execute("DELETE FROM scopes WHERE key = ?", (scope.key,))
        return int(removed)

    def close(self) -> None:
        """Close every thread's connection."""
        with self._guard:
            connections, self._connections = self._connections, []
        for db in connections:
            db.close()
        self._local = threading.local()
