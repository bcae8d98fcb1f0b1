"""The PostgreSQL backends of a config, one pair per database setting in a process.

Code that builds a ``MemoryManager`` or a ``MemoryStore`` from a config alone (the LangChain
and LlamaIndex integrations, the CLI) gets PostgreSQL when ``config.database_url`` is set,
exactly as ``Memory(config)`` does; sharing one pair per setting keeps one connection pool per
process however many managers and stores are made. They live as long as the process.
"""

from __future__ import annotations

import threading

from local_ai_memory._backends.postgres.knowledge import PostgresKnowledgeBackend
from local_ai_memory._backends.postgres.pool import Database, DatabaseSettings
from local_ai_memory._backends.postgres.runtime import PostgresRuntimeBackend
from local_ai_memory._backends.postgres.storage import settings_of
from local_ai_memory._shared.config import MemoryConfig

__all__ = ["close_shared_backends", "shared_backends"]

_lock = threading.Lock()
_shared: dict[DatabaseSettings, tuple[PostgresRuntimeBackend, PostgresKnowledgeBackend]] = {}


def shared_backends(config: MemoryConfig) -> tuple[PostgresRuntimeBackend, PostgresKnowledgeBackend]:
    """The runtime and knowledge backends of ``config.database_url`` (made once per process)."""
    settings = settings_of(config)
    with _lock:
        found = _shared.get(settings)
        if found is None:
            runtime = PostgresRuntimeBackend(database=Database(settings), lock_timeout=config.lock_timeout)
            found = _shared[settings] = (runtime, PostgresKnowledgeBackend(database=runtime.db))
    return found


def close_shared_backends() -> None:
    """Close and forget every shared pair (tests; a long-lived process never needs to)."""
    with _lock:
        pairs = list(_shared.values())
        _shared.clear()
    for runtime, _ in pairs:
        runtime.close()
