"""Which memory, and whose: the :class:`~local_ai_memory.Memory`, and the ``(user_id, session_id)`` of a call.

Every class of this package takes ``memory`` (a :class:`~local_ai_memory.Memory`: its data
root, backends, index and caches). ``config=`` (a :class:`~local_ai_memory.MemoryConfig`) is a
shortcut that builds ``Memory(config)`` for that one object; objects meant to share one index
and one set of caches are given the same ``memory``. The user and session are either bound
when the object is made, or read per call from, in order:

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

from local_ai_memory import Embedder, InvalidInputError, Memory, MemoryConfig, Session
from local_ai_memory.integration import validate_name

__all__ = ["MemoryLocation", "lookup", "memory_of", "resolve_scope", "resolve_user"]

SESSION_CACHE = 256
_RUNTIME_KEY = "__pregel_runtime"  # where LangGraph keeps its Runtime inside the configurable dict


def memory_of(memory: Any, config: MemoryConfig | None, *, embedder: Embedder | None = None) -> Memory:
    """``memory``, or ``Memory(config, embedder=embedder)`` when only ``config`` (or nothing) is given.

    Giving both is an :class:`InvalidInputError`: ``config=`` only builds a memory, and a
    ready memory has its own settings. So is an ``embedder`` beside a ready memory (the
    memory's own embedder ranks its notes).
    """
    if memory is None:
        return Memory(config, embedder=embedder)
    if config is not None:
        raise InvalidInputError(
            "give memory= or config=, not both: config= is a shortcut that builds Memory(config), "
            "and the memory has its settings already (memory.config)"
        )
    if not isinstance(memory, Memory):
        hint = ": pass config=... or Memory(config)" if isinstance(memory, MemoryConfig) else ""
        raise InvalidInputError(f"memory must be a local_ai_memory.Memory, got {type(memory).__name__}{hint}")
    if embedder is not None:
        raise InvalidInputError(
            "a ready memory ranks with its own embedder: build it as Memory(config, embedder=...) "
            "instead of passing embeddings= beside memory="
        )
    return memory


class MemoryLocation:
    """The :class:`~local_ai_memory.Memory` of an object and the sessions it handed out.

    Sessions (``memory.session(user_id, session_id)``) are reused (the most recent
    :data:`SESSION_CACHE` scopes), so the one-time checks a session makes on first use are not
    repeated on every model or tool call. They are views: the data and caches are the memory's.
    """

    def __init__(self, memory: Memory) -> None:
        self.memory = memory
        self._sessions: OrderedDict[tuple[str, str], Session] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def config(self) -> MemoryConfig:
        """The memory's settings."""
        return self.memory.config

    def session(self, user_id: str, session_id: str) -> Session:
        """The runtime memory of one scope."""
        key = (user_id, session_id)
        with self._lock:
            found = self._sessions.get(key)
            if found is not None:
                self._sessions.move_to_end(key)
                return found
        created = self.memory.session(user_id, session_id)
        with self._lock:
            self._sessions[key] = created
            while len(self._sessions) > SESSION_CACHE:
                self._sessions.popitem(last=False)
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
