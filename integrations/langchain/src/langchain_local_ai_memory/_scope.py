"""Where memory lives and whose it is: the root folder, and the ``(user_id, session_id)`` of a call.

Every class of this package takes ``config`` (a :class:`~local_ai_memory.MemoryConfig`; its
``runtime_data_dir`` is the root folder) and optionally a ready ``DirectoryGuard``. The user
and session are either bound when the object is made, or read per call from, in order:

1. the LangGraph runtime context (``agent.invoke(..., context={"user_id": ..., "session_id": ...})``,
   a mapping or any object with ``user_id`` / ``session_id`` attributes),
2. ``config["configurable"]["user_id"]`` / ``["session_id"]`` of the ``RunnableConfig``.

They are never tool arguments, so a model cannot choose whose memory it reads.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from langchain_core.runnables import RunnableConfig

from local_ai_memory import DirectoryGuard, InvalidInputError, MemoryConfig, MemoryManager
from local_ai_memory.integration import validate_name

__all__ = ["MemoryLocation", "lookup", "resolve_scope", "resolve_user"]

MANAGER_CACHE = 256
_RUNTIME_KEY = "__pregel_runtime"  # where LangGraph keeps its Runtime inside the configurable dict


class MemoryLocation:
    """The root folder and settings shared by the objects of one application.

    Scoped managers are reused (the most recent :data:`MANAGER_CACHE` scopes), so the one-time
    checks a manager makes on first use are not repeated on every model or tool call.
    """

    def __init__(self, config: MemoryConfig | None = None, guard: DirectoryGuard | None = None) -> None:
        self.config = config if config is not None else MemoryConfig()
        self.guard = guard if guard is not None else DirectoryGuard(self.config.runtime_data_dir)
        self._managers: OrderedDict[tuple[str, str], MemoryManager] = OrderedDict()
        self._lock = threading.Lock()

    def manager(self, user_id: str, session_id: str) -> MemoryManager:
        """The runtime memory of one scope."""
        key = (user_id, session_id)
        with self._lock:
            found = self._managers.get(key)
            if found is not None:
                self._managers.move_to_end(key)
                return found
        created = MemoryManager(self.guard, self.config).scoped(user_id, session_id)
        with self._lock:
            self._managers[key] = created
            while len(self._managers) > MANAGER_CACHE:
                self._managers.popitem(last=False)
        return created


def _get(source: Any, key: str) -> Any:
    if source is None:
        return None
    if isinstance(source, Mapping):
        return source.get(key)
    return getattr(source, key, None)


def lookup(key: str, runtime: Any = None, config: RunnableConfig | Mapping[str, Any] | None = None) -> str | None:
    """``key`` from a runtime's context, else from ``config["configurable"]``; ``None`` if absent."""
    value = _get(_get(runtime, "context"), key)
    configurable = _get(config, "configurable") if config is not None else None
    if value is None and isinstance(configurable, Mapping):
        value = _get(_get(configurable.get(_RUNTIME_KEY), "context"), key)
        if value is None:
            value = configurable.get(key)
    return None if value is None else str(value)


def resolve_user(
    bound: str | None, runtime: Any = None, config: RunnableConfig | Mapping[str, Any] | None = None
) -> str:
    """The user id: bound, or from the runtime context / configurable; :class:`InvalidInputError` if none."""
    user_id = bound if bound is not None else lookup("user_id", runtime, config)
    if user_id is None:
        raise InvalidInputError(
            "no user_id: bind one when creating the object, or pass context={'user_id': ...} "
            "or config={'configurable': {'user_id': ...}}"
        )
    return validate_name(user_id, "user_id")


def resolve_scope(
    user_id: str | None,
    session_id: str | None,
    runtime: Any = None,
    config: RunnableConfig | Mapping[str, Any] | None = None,
) -> tuple[str, str]:
    """``(user_id, session_id)``: bound values first, else from the runtime context / configurable."""
    user = resolve_user(user_id, runtime, config)
    session = session_id if session_id is not None else lookup("session_id", runtime, config)
    if session is None:
        raise InvalidInputError(
            "no session_id: bind one when creating the object, or pass context={'session_id': ...} "
            "or config={'configurable': {'session_id': ...}}"
        )
    return user, validate_name(session, "session_id")
