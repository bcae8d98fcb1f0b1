"""What both PostgreSQL backends share: the database handle, setup on first use, JSON as bytes.

The schema is brought up to date by :meth:`PgStorage.setup` or, at the latest, before the first
operation of a process (once; later calls cost a flag check). Values are stored as UTF-8 JSON
in ``bytea`` columns: exact for every string Python holds, NUL and lone surrogates included.
"""

from __future__ import annotations

import json
import threading
from typing import Any, TypeVar

from local_ai_memory._backends.postgres.pool import Database, DatabaseSettings, Op
from local_ai_memory._backends.postgres.schema import amigrate, migrate
from local_ai_memory._shared.config import MemoryConfig
from local_ai_memory._shared.errors import ConfigError, InvalidInputError

__all__ = ["PgStorage", "pack", "settings_of", "unpack"]

T = TypeVar("T")


def pack(value: Any) -> bytes:
    """Compact UTF-8 JSON of a plain-JSON value (lone surrogates kept)."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.encode("utf-8", "surrogatepass")


def unpack(raw: bytes | memoryview) -> Any:
    """The value :func:`pack` stored."""
    return json.loads(bytes(raw).decode("utf-8", "surrogatepass"))


def settings_of(config: MemoryConfig) -> DatabaseSettings:
    """The database settings of a config (``database_url`` must be set)."""
    if not config.database_url:
        raise ConfigError("database_url is not set: give MemoryConfig(database_url='postgresql://...')")
    return DatabaseSettings(
        url=config.database_url,
        schema=config.database_schema,
        pool_min_size=config.database_pool_min_size,
        pool_max_size=config.database_pool_max_size,
        pool_timeout=config.database_pool_timeout,
        connect_timeout=config.database_connect_timeout,
        prepare_threshold=config.database_prepare_threshold,
    )


def database_of(
    owner: str,
    database: Database | None,
    url: str | None,
    settings: tuple[str, int, int, float, float, int | None],
) -> Database:
    """``database`` when given (one shared by both backends), else a new one on ``url`` with
    ``settings`` (schema, pool sizes, timeouts and prepare threshold, in
    :class:`DatabaseSettings` order); ``owner`` names the backend in the error."""
    if database is not None:
        return database
    if url is None:
        raise InvalidInputError(f"give {owner} a database URL")
    return Database(DatabaseSettings(url, *settings))


class PgStorage:
    """A backend's handle on the database: runs operations once the schema is set up."""

    def __init__(self, database: Database) -> None:
        self.db = database
        self._setup_lock = threading.Lock()

    def setup(self) -> int:
        """Create or upgrade the schema now (safe on many hosts at once); return migrations run.

        Also opens the sync pool, whose first connection is then made in the background: a
        process's first operation (a fresh ``get_state``) finds it ready instead of paying it."""
        with self._setup_lock:
            ran = migrate(self.db)
            self.db.ready = True
        self.db.open()
        return ran

    async def asetup(self) -> int:
        """Async twin of :meth:`setup`."""
        ran = await amigrate(self.db)
        self.db.ready = True
        return ran

    def run(self, what: str, op: Op[T], *, read: bool = False) -> T:
        """``op`` in one transaction (``read``: a read-only operation, see :meth:`Database.run`)."""
        if not self.db.ready:
            with self._setup_lock:
                if not self.db.ready:
                    migrate(self.db)
                    self.db.ready = True
        return self.db.run(what, op, read=read)

    async def arun(self, what: str, op: Op[T], *, read: bool = False) -> T:
        """Async twin of :meth:`run`."""
        if not self.db.ready:
            await self.asetup()
        return await self.db.arun(what, op, read=read)

    def close(self) -> None:
        """Close the connection pools."""
        self.db.close()
