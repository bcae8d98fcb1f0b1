"""The two drivers of every sans-IO flow in the library: one blocking, one async.

A flow is a generator that yields requests (a statement to run, a text to embed, a record to
read, a prompt to ask) and receives each answer back, so its logic is written once and knows
nothing of threads or event loops. :func:`drive` answers the requests with a blocking
function, :func:`adrive` with a coroutine function. An ``Exception`` raised while answering is
thrown into the flow at the request that caused it, so the flow decides whether to handle it
(the L1 compressor falls back to the extractive summary when the LLM fails) or let it out.

>>> def flow():
...     total = 0
...     for word in ("a", "bb"):
...         total += yield word
...     return total
>>> drive(flow(), len)
3
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from typing import Any, TypeVar

__all__ = ["adrive", "drive"]

Request = TypeVar("Request")
Answer = TypeVar("Answer")
Result = TypeVar("Result")


def drive(flow: Generator[Request, Answer, Result], answer: Callable[[Request], Answer]) -> Result:
    """Run ``flow`` to its end, answering each request with ``answer``; return what it returns."""
    reply: Any = None
    error: Exception | None = None
    while True:
        try:
            request = flow.throw(error) if error is not None else flow.send(reply)
        except StopIteration as done:
            result: Result = done.value
            return result
        reply, error = None, None
        try:
            reply = answer(request)
        except Exception as exc:  # handed to the flow, which may recover or re-raise
            error = exc


async def adrive(flow: Generator[Request, Answer, Result], answer: Callable[[Request], Awaitable[Answer]]) -> Result:
    """Async twin of :func:`drive`: each request is answered by awaiting ``answer(request)``."""
    reply: Any = None
    error: Exception | None = None
    while True:
        try:
            request = flow.throw(error) if error is not None else flow.send(reply)
        except StopIteration as done:
            result: Result = done.value
            return result
        reply, error = None, None
        try:
            reply = await answer(request)
        except Exception as exc:  # handed to the flow, which may recover or re-raise
            error = exc
