"""``thread_twin``: the async twin of a blocking method, as one line in a class body.

``aread = thread_twin(read)`` defines ``aread`` as an ``async`` method that runs ``read`` in a
worker thread (``asyncio.to_thread``), with the same parameters for type checkers and
``inspect.signature``. The twin looks ``read`` up on the instance when called, so in a
contract's base class it runs the subclass's implementation (a backend overrides only the
sync method, or the twin too when it has a native async driver). Twins that need their own
logic (an embedder's ``aembed``, an LLM's ``acomplete``) are written out instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, TypeVar

__all__ = ["thread_twin"]

S = TypeVar("S")
P = ParamSpec("P")
R = TypeVar("R")


def thread_twin(method: Callable[Concatenate[S, P], R]) -> Callable[Concatenate[S, P], Coroutine[Any, Any, R]]:
    """An async method running ``method`` in a worker thread."""

    name = method.__name__

    async def twin(self: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
        bound: Callable[P, R] = getattr(self, name)  # the override, when a subclass has one
        return await asyncio.to_thread(bound, *args, **kwargs)

    vars(twin)["__wrapped__"] = method  # inspect.signature() shows the sync method's parameters
    twin.__module__ = method.__module__
    twin.__name__ = f"a{method.__name__}"
    twin.__qualname__ = method.__qualname__.rpartition(".")[0] + "." + twin.__name__
    twin.__doc__ = f"Async twin of :meth:`{method.__name__}` (runs it in a worker thread)."
    return twin
