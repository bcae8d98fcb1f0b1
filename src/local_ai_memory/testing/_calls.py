"""One way for the conformance tests to call a backend: its sync methods or their async twins.

Every runtime conformance test runs twice, with ``mode`` ``"sync"`` and ``"async"``. The test
body is plain sync code that calls ``api.get_state(scope)``; in async mode :class:`Calls` turns
that into ``await backend.aget_state(scope)`` on an event loop of its own, so the suite needs
no pytest-asyncio setup from the user. The loop lives in one thread for the whole test: a
native async backend keeps its connections between calls, and many threads may call at once
(their coroutines then run concurrently on that loop, as they would in an async application).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Literal, TypeVar

__all__ = ["MODES", "Calls", "EventLoopThread", "Mode"]

Mode = Literal["sync", "async"]
MODES: tuple[Mode, ...] = ("sync", "async")
T = TypeVar("T")

_NO_TWIN = frozenset({"locked", "close", "recover"})
_WAIT = 300.0  # seconds a single call may take before the test is failed instead of hanging


class EventLoopThread:
    """An event loop running in a daemon thread; :meth:`run` waits for a coroutine from any thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="conformance-event-loop", daemon=True)
        self.thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the loop and return its result (or raise its exception)."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(_WAIT)

    def close(self) -> None:
        """Finish the loop's worker threads and async generators, then stop and close it."""

        async def drain() -> None:
            await self.loop.shutdown_asyncgens()
            await self.loop.shutdown_default_executor()

        try:
            self.run(drain())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(_WAIT)
            self.loop.close()


class Calls:
    """Calls ``backend.name(...)`` (mode ``"sync"``) or ``await backend.aname(...)`` (``"async"``).

    Methods without an async twin (:meth:`RuntimeBackend.locked`, ``close``, ``recover``) are
    not offered: tests call them on the backend itself.
    """

    def __init__(self, backend: Any, mode: Mode) -> None:
        self.backend = backend
        self.mode = mode
        self._loop: EventLoopThread | None = EventLoopThread() if mode == "async" else None

    def __repr__(self) -> str:
        return f"Calls({self.backend!r}, {self.mode!r})"

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("_") or name in _NO_TWIN:
            raise AttributeError(name)
        if self._loop is None:
            method: Callable[..., Any] = getattr(self.backend, name)
            return method
        twin: Callable[..., Coroutine[Any, Any, Any]] = getattr(self.backend, "a" + name)
        loop = self._loop

        def call(*args: Any, **kwargs: Any) -> Any:
            return loop.run(twin(*args, **kwargs))

        return call

    def close(self) -> None:
        """Stop the event loop of async mode (nothing to do in sync mode)."""
        if self._loop is not None:
            self._loop.close()
            self._loop = None
