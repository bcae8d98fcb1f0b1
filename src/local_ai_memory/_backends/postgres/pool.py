"""Connections to PostgreSQL for both PG backends: pools, one transaction per operation, errors.

An operation is written once, as a generator that yields :class:`Stmt` objects and receives
their results; :meth:`Database.run` drives it on a connection of the sync pool and
:meth:`Database.arun` on one of the async pool (native ``psycopg`` async, no threads). The
whole generator runs in one transaction: it commits when the generator returns and rolls back
when anything raises, so a killed process or a cut connection leaves no partial record.

A connection is not probed when it is taken for an operation (that would be one more round trip
each time): the operation's ``BEGIN`` is the probe. A connection found dead there (the server
restarted, or ended it) has run nothing of the operation, so it is dropped and the operation
starts again on another (:func:`_dead_at_begin`); once the statements have begun, a cut
connection is an error, as before. An operation run with ``read=True`` (one that only reads, a
statement at a time, such as a single ``SELECT``) sends no ``BEGIN``/``COMMIT``: each statement is
its own transaction, one round trip instead of three, and a statement that finds its connection
dead is sent again on another (it changed nothing). The sync pool opens with the schema setup
(:meth:`Database.open`), so its first connection is made in the background while the
application builds the rest, not inside its first call.

Errors become the library's own: a failed connection is a :class:`StorageError` naming host
and database (never the password), a pool that stays exhausted past ``pool_timeout`` is a
:class:`LockTimeoutError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import weakref
from collections.abc import AsyncIterator, Generator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool, PoolTimeout

from local_ai_memory._shared.drive import adrive, drive
from local_ai_memory._shared.errors import ConfigError, LockTimeoutError, StorageError

__all__ = ["Database", "DatabaseSettings", "Op", "Stmt", "describe_url"]

T = TypeVar("T")

Fetch = Literal["none", "one", "all", "rowcount"]


@dataclass(frozen=True)
class Stmt:
    """One statement of an operation: the query, its parameters and what to hand back.

    ``many`` runs the query once per parameter row (pipelined by psycopg) and yields nothing.
    """

    query: sql.Composed
    params: Sequence[Any] = ()
    fetch: Fetch = "none"
    many: Sequence[Sequence[Any]] | None = None


Op = Generator[Stmt, Any, T]
"""An operation: yields statements, receives each one's result, returns the answer."""


@dataclass(frozen=True)
class DatabaseSettings:
    """Where the database is and how to use it (see ``MemoryConfig.database_*``)."""

    url: str
    schema: str = "local_ai_memory"
    pool_min_size: int = 1
    pool_max_size: int = 10
    pool_timeout: float = 30.0
    connect_timeout: float = 10.0
    prepare_threshold: int | None = 5
    check_connections: bool = True
    """Replace a connection found dead at ``BEGIN`` and run the operation on another
    (``False``: the operation fails with the dead connection's error)."""


def describe_url(url: str) -> str:
    """``host H, database D`` of a connection string, without user or password (for messages)."""
    try:
        parts = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "an unreadable database URL"
    host = parts.get("host") or parts.get("hostaddr") or "localhost"
    port = f":{parts['port']}" if parts.get("port") else ""
    return f"host {host}{port}, database {parts.get('dbname') or parts.get('user') or '(default)'}"


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


def _check_url(url: str) -> None:
    try:
        conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        raise ConfigError("database_url is not a PostgreSQL connection string (postgresql://user@host/db)") from None


class Database:
    """A sync and an async pool on one database and schema; runs operations in transactions."""

    def __init__(self, settings: DatabaseSettings) -> None:
        _check_url(settings.url)
        self.settings = settings
        self.where = describe_url(settings.url)
        self.ready = False  # set once the schema is known to be current (shared by both backends)
        self.schema = sql.Identifier(settings.schema)
        self._lock = threading.Lock()
        self._pool: ConnectionPool | None = None
        self._apools: dict[int, _LoopConnections] = {}
        self._queries: dict[str, sql.Composed] = {}

    def __repr__(self) -> str:
        return f"Database({self.where}, schema {self.settings.schema})"

    def q(self, text: str) -> sql.Composed:
        """``text`` with ``{s}`` bound to the schema identifier (cached: the query text never changes)."""
        found = self._queries.get(text)
        if found is None:
            found = self._queries[text] = sql.SQL(text).format(s=self.schema)
        return found

    # -- connections --------------------------------------------------------------------------------
    def _kwargs(self) -> dict[str, Any]:
        return {"prepare_threshold": self.settings.prepare_threshold}

    def connect(self) -> psycopg.Connection[Any]:
        """A fresh connection outside the pools (setup, checks); errors name host and database."""
        try:
            return psycopg.connect(
                self.settings.url, connect_timeout=max(1, round(self.settings.connect_timeout)), **self._kwargs()
            )
        except psycopg.Error as exc:
            raise StorageError(f"cannot connect to PostgreSQL ({self.where}): {_first_line(exc)}") from None

    async def aconnect(self) -> psycopg.AsyncConnection[Any]:
        """Async twin of :meth:`connect`."""
        try:
            return await psycopg.AsyncConnection.connect(
                self.settings.url,
                autocommit=True,  # each operation opens its own transaction block
                connect_timeout=max(1, round(self.settings.connect_timeout)),
                **self._kwargs(),
            )
        except psycopg.Error as exc:
            raise StorageError(f"cannot connect to PostgreSQL ({self.where}): {_first_line(exc)}") from None

    def _sync_pool(self) -> ConnectionPool:
        pool = self._pool
        if pool is None:
            with self._lock:
                if self._pool is None:
                    self._pool = ConnectionPool(
                        self.settings.url,
                        min_size=self.settings.pool_min_size,
                        max_size=self.settings.pool_max_size,
                        timeout=self.settings.pool_timeout,
                        kwargs=self._kwargs(),
                        name=f"local-ai-memory {self.settings.schema}",
                        open=True,
                    )
                    weakref.finalize(self, _close_abandoned, self._pool)
                pool = self._pool
        return pool

    def open(self) -> None:
        """Open the sync pool now: its first ``pool_min_size`` connections are made in the
        background, so the first operation finds one ready (schema setup calls this)."""
        self._sync_pool()

    def _attempts(self) -> int:
        """How many connections an operation may try: each dead one found at ``BEGIN`` is
        replaced, and a pool holds at most ``pool_max_size`` (plus one freshly made)."""
        return self.settings.pool_max_size + 1 if self.settings.check_connections else 1

    def _async_connections(self) -> _LoopConnections:
        loop = asyncio.get_running_loop()
        with self._lock:
            for key, old in list(self._apools.items()):  # connections of finished event loops go
                if old.finished():
                    old.discard()
                    del self._apools[key]
            found = self._apools.get(id(loop))
            if found is None or found.loop() is not loop:
                found = self._apools[id(loop)] = _LoopConnections(self, loop)
            return found

    def close(self) -> None:
        """Close the sync pool and every idle async connection."""
        with self._lock:
            pool, self._pool = self._pool, None
            loops, self._apools = list(self._apools.values()), {}
        for connections in loops:
            connections.discard()
        if pool is not None:
            pool.close()

    async def aclose(self) -> None:
        """Close this event loop's async connections and the sync pool."""
        loop = asyncio.get_running_loop()
        with self._lock:
            found = self._apools.pop(id(loop), None)
        if found is not None:
            await found.aclose()
        self.close()

    # -- running operations -------------------------------------------------------------------------
    def _reachable(self) -> str | None:
        """``None`` if a fresh connection works, else why not (tells a dead server from a full pool)."""
        try:
            self.connect().close()
        except StorageError as exc:
            return str(exc)
        return None

    def _error(self, what: str, exc: BaseException) -> StorageError:
        if isinstance(exc, PoolTimeout):
            down = self._reachable()
            if down is not None:
                return StorageError(f"{what} failed: {down}")
            return LockTimeoutError(
                f"{what}: no database connection free within {self.settings.pool_timeout:g} s "
                f"(pool of {self.settings.pool_max_size}, {self.where}); raise database_pool_max_size "
                "or database_pool_timeout"
            )
        return StorageError(f"{what} failed on PostgreSQL ({self.where}): {_first_line(exc)}")

    def run(self, what: str, op: Op[T], *, pooled: bool = True, read: bool = False) -> T:
        """Run ``op`` in one transaction on a pooled connection; ``what`` names it in errors.

        ``pooled=False`` uses a connection of its own (schema setup: a wrong URL or password
        fails at once with a clear message instead of after the pool's timeout). ``read=True``
        is for an operation that only reads and needs no snapshot across its statements (one
        ``SELECT``): each statement runs on its own, with no ``BEGIN``/``COMMIT`` round trips.
        """
        try:
            if read and pooled:
                return drive(op, self._read_statement)
            if not pooled:
                with self.connect() as conn:
                    return _alive(_run_on(conn, op, last=True))
            pool = self._sync_pool()
            attempts = self._attempts()
            for attempt in range(1, attempts + 1):
                with pool.connection() as conn:  # a dead connection goes back broken: the pool drops it
                    done = _run_on(conn, op, last=attempt == attempts)
                if not isinstance(done, _Dead):
                    return done
            raise AssertionError("unreachable: the last attempt raises")  # pragma: no cover
        except (psycopg.Error, PoolTimeout) as exc:
            raise self._error(what, exc) from exc
        finally:
            op.close()

    async def arun(self, what: str, op: Op[T], *, pooled: bool = True, read: bool = False) -> T:
        """Async twin of :meth:`run` on this event loop's async pool."""
        try:
            if read and pooled:
                return await adrive(op, self._aread_statement)
            if not pooled:
                async with await self.aconnect() as conn:
                    return _alive(await _arun_on(conn, op, last=True))
            connections = self._async_connections()
            attempts = self._attempts()
            for attempt in range(1, attempts + 1):
                async with connections.connection() as conn:
                    done = await _arun_on(conn, op, last=attempt == attempts)
                if not isinstance(done, _Dead):
                    return done
            raise AssertionError("unreachable: the last attempt raises")  # pragma: no cover
        except (psycopg.Error, PoolTimeout) as exc:
            raise self._error(what, exc) from exc
        finally:
            op.close()

    def _read_statement(self, stmt: Stmt) -> Any:
        """One statement of a ``read`` operation, in a transaction of its own (autocommit) on a
        pooled connection; sent again on another connection if this one was dead (see ``run``)."""
        pool = self._sync_pool()
        attempts = self._attempts()
        for attempt in range(1, attempts + 1):
            with pool.connection() as conn:
                conn.autocommit = True  # a local flag: no round trip
                try:
                    with conn.cursor(binary=True) as cur:
                        return _execute(cur, stmt)
                except psycopg.Error as exc:
                    if attempt == attempts or not _dead_at_begin(conn, exc):
                        raise
                finally:
                    with contextlib.suppress(psycopg.Error):  # a dead connection is dropped by the pool anyway
                        conn.autocommit = False
        raise AssertionError("unreachable: the last attempt raises")  # pragma: no cover

    async def _aread_statement(self, stmt: Stmt) -> Any:
        """Async twin of :meth:`_read_statement` (async connections are in autocommit already)."""
        connections = self._async_connections()
        attempts = self._attempts()
        for attempt in range(1, attempts + 1):
            async with connections.connection() as conn:
                try:
                    async with conn.cursor(binary=True) as cur:
                        return await _aexecute(cur, stmt)
                except psycopg.Error as exc:
                    if attempt == attempts or not _dead_at_begin(conn, exc):
                        raise
        raise AssertionError("unreachable: the last attempt raises")  # pragma: no cover


def _close_abandoned(pool: ConnectionPool) -> None:
    """Close the pool of a :class:`Database` dropped without :meth:`Database.close`.

    The garbage collection that drops it can run on any thread, one of the pool's own workers
    included, and a worker cannot wait for itself to stop: the pool's own finalizer then fails
    with "cannot join current thread" and leaves its connections open. So the pool is closed
    from a thread of its own (directly while the interpreter exits, when no thread starts).
    A pool already closed returns at once."""
    try:
        threading.Thread(target=pool.close, name=f"{pool.name} close", daemon=True).start()
    except RuntimeError:  # interpreter shutdown: no new threads
        pool.close()


class _Dead:
    """What :func:`_run_on` hands back when the connection was dead at ``BEGIN`` (nothing ran)."""


_DEAD = _Dead()


def _alive(done: T | _Dead) -> T:
    """The answer of a last attempt (which raises rather than hand back ``_DEAD``)."""
    assert not isinstance(done, _Dead)
    return done


def _dead_at_begin(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any], exc: psycopg.Error) -> bool:
    """Whether ``BEGIN`` failed because the connection is gone (the server ended it or
    restarted): then no statement of the operation ran and it may start again elsewhere."""
    return isinstance(exc, psycopg.OperationalError) and (conn.broken or conn.closed)


def _run_on(conn: psycopg.Connection[Any], op: Op[T], *, last: bool) -> T | _Dead:
    """``op`` in one transaction on ``conn``; ``_DEAD`` if ``conn`` was dead at ``BEGIN`` and
    this is not the ``last`` attempt."""
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(conn.transaction())
        except psycopg.Error as exc:
            if not last and _dead_at_begin(conn, exc):
                return _DEAD
            raise
        cur = stack.enter_context(conn.cursor(binary=True))
        return drive(op, lambda stmt: _execute(cur, stmt))


async def _arun_on(conn: psycopg.AsyncConnection[Any], op: Op[T], *, last: bool) -> T | _Dead:
    """Async twin of :func:`_run_on`."""
    async with contextlib.AsyncExitStack() as stack:
        try:
            await stack.enter_async_context(conn.transaction())
        except psycopg.Error as exc:
            if not last and _dead_at_begin(conn, exc):
                return _DEAD
            raise
        cur = await stack.enter_async_context(conn.cursor(binary=True))
        return await adrive(op, lambda stmt: _aexecute(cur, stmt))


class _LoopConnections:
    """The async connections of one event loop: at most ``pool_max_size``, reused, none in the background.

    ``psycopg_pool.AsyncConnectionPool`` keeps worker tasks on the loop that opened it; the
    library's async API is called from many loops (each ``asyncio.run`` is one), and a worker
    caught mid-reconnect when its loop ends can hold up the loop's shutdown. This keeps idle
    connections only: a finished loop's are closed synchronously by the next loop that comes.
    """

    def __init__(self, db: Database, loop: asyncio.AbstractEventLoop) -> None:
        self.db = db
        self.loop = weakref.ref(loop)
        self._idle: list[psycopg.AsyncConnection[Any]] = []
        self._slots = asyncio.Semaphore(db.settings.pool_max_size)

    def finished(self) -> bool:
        loop = self.loop()
        return loop is None or loop.is_closed()

    def discard(self) -> None:
        """Close the idle connections of a finished loop (closing a libpq handle needs no loop)."""
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.pgconn.finish()

    def __del__(self) -> None:
        self.discard()

    async def aclose(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            await conn.close()

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A connection for one operation; waits at most ``pool_timeout`` for a free slot."""
        try:
            await asyncio.wait_for(self._slots.acquire(), self.db.settings.pool_timeout)
        except asyncio.TimeoutError:
            raise PoolTimeout(f"no async connection free in {self.db.settings.pool_timeout:g} s") from None
        conn: psycopg.AsyncConnection[Any] | None = None
        try:
            while self._idle and conn is None:
                candidate = self._idle.pop()
                if candidate.closed or candidate.broken:
                    continue
                conn = candidate  # not probed: the operation's BEGIN is the probe (Database.arun)
            if conn is None:
                conn = await self.db.aconnect()
            yield conn
        finally:
            if conn is not None:
                if conn.closed or conn.broken or conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                    await conn.close()
                else:
                    self._idle.append(conn)
            self._slots.release()


def _execute(cur: psycopg.Cursor[Any], stmt: Stmt) -> Any:
    """Run one statement of an operation on ``cur``; what it hands back (see :func:`_result`)."""
    if stmt.many is not None:
        cur.executemany(stmt.query, stmt.many)
        return None
    cur.execute(stmt.query, stmt.params)
    return _result(cur, stmt.fetch)


async def _aexecute(cur: psycopg.AsyncCursor[Any], stmt: Stmt) -> Any:
    """Async twin of :func:`_execute`."""
    if stmt.many is not None:
        await cur.executemany(stmt.query, stmt.many)
        return None
    await cur.execute(stmt.query, stmt.params)
    return await _aresult(cur, stmt.fetch)


def _has_rows(cur: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any]) -> bool:
    pgresult = cur.pgresult
    return pgresult is not None and pgresult.status == psycopg.pq.ExecStatus.TUPLES_OK


def _result(cur: psycopg.Cursor[Any], fetch: Fetch) -> Any:
    """What a statement hands back to its operation: nothing, the row count, a row or every row."""
    if fetch == "none":
        return None
    if fetch == "rowcount":
        return cur.rowcount
    if not _has_rows(cur):
        return None if fetch == "one" else []
    return cur.fetchone() if fetch == "one" else cur.fetchall()


async def _aresult(cur: psycopg.AsyncCursor[Any], fetch: Fetch) -> Any:
    """Async twin of :func:`_result`."""
    if fetch == "none":
        return None
    if fetch == "rowcount":
        return cur.rowcount
    if not _has_rows(cur):
        return None if fetch == "one" else []
    return await cur.fetchone() if fetch == "one" else await cur.fetchall()
