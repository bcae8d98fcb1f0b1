"""``LocalMemorySession``: the OpenAI Agents SDK ``Session`` protocol over a local-ai-memory session log.

The SDK hands a session its items (``TResponseInputItem`` dicts: user messages, assistant
messages, ``function_call`` and ``function_call_output`` items, reasoning items...) and wants
them back exactly. Each item is stored in the ``(user_id, session_id)`` message log of a
:class:`~local_ai_memory.Memory` as its JSON text beside its normal form (the core's
``SessionMessageStore.append_items``), so:

* ``get_items`` returns what ``add_items`` was given, equal and ``json.dumps``-identical;
* the same log is the session's history for everything else in the library: the working
  memory (L1) compressor, ``memory.show``, export, ``forget_user``;
* ``pop_item`` is atomic in the core (two callers never get the same item), across processes
  on the file and PostgreSQL backends.

Compaction runs through the working memory: the session has the SDK's compaction hook
(``run_compaction``), which the runner calls after a turn. It merges the items the working
memory has not seen yet into it, then, once the log holds more than ``history_limit`` items,
drops the oldest down to ``keep_last`` (never cutting between a tool call and its output).
:meth:`LocalMemorySession.instructions` puts the working memory and the session state in
front of the agent's own instructions, so what was compacted away stays known.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from agents.memory import SessionSettings
from agents.memory.session_settings import resolve_session_limit

from local_ai_memory import InvalidInputError, Memory, Session

if TYPE_CHECKING:
    from agents import Agent, RunContextWrapper
    from agents.items import TResponseInputItem
    from agents.memory import OpenAIResponsesCompactionArgs

__all__ = ["LocalMemorySession"]

T = TypeVar("T")

_OUTPUT_SUFFIX = "_output"


async def _settled(write: Coroutine[Any, Any, T]) -> T:
    """Run a write to its end even when the caller is cancelled meanwhile, then pass the
    cancellation on: the runner must never believe an item unstored that was stored (or the
    reverse), so the outcome is known before the task unwinds."""
    task = asyncio.ensure_future(write)
    cancelled: asyncio.CancelledError | None = None
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError as error:
            cancelled = cancelled or error
    if cancelled is not None:
        raise cancelled
    return task.result()


def _is_output(item: object) -> bool:
    """Whether ``item`` answers an earlier call (``function_call_output`` and its kin)."""
    kind = item.get("type") if isinstance(item, Mapping) else None
    return isinstance(kind, str) and kind.endswith(_OUTPUT_SUFFIX)


def safe_keep(items: Sequence[object], keep_last: int) -> int:
    """``keep_last`` grown so the kept tail never starts with a tool output whose call was dropped.

    The Responses API refuses an input that begins with a ``function_call_output`` whose
    ``function_call`` is missing; keeping the call too costs an item or two.
    """
    start = max(0, len(items) - keep_last)
    while 0 < start < len(items) and _is_output(items[start]):
        start -= 1
    return len(items) - start


class LocalMemorySession:
    """An Agents SDK session kept in a :class:`~local_ai_memory.Memory` (files by default).

    >>> from local_ai_memory import Memory
    >>> session = LocalMemorySession(Memory.in_memory(), "alice", "chat-1")
    >>> session.session_id
    'chat-1'

    Pass it to ``Runner.run(agent, text, session=session)``. ``user_id`` and ``session_id``
    are checked by the core like every id (a hostile id is refused before anything is
    stored), and sessions of different users never see each other. ``session_settings``
    gives the default ``limit`` of :meth:`get_items`, as for the SDK's own sessions.

    ``compaction``: whether :meth:`run_compaction` works (the runner calls it after each
    turn); ``history_limit`` and ``keep_last`` default to the memory's
    ``working_memory_history_limit`` and ``working_memory_compact_keep_last``.
    """

    session_settings: SessionSettings | None

    def __init__(
        self,
        memory: Memory,
        user_id: str,
        session_id: str,
        *,
        session_settings: SessionSettings | None = None,
        compaction: bool = True,
        history_limit: int | None = None,
        keep_last: int | None = None,
    ) -> None:
        self.memory = memory
        self.memory_session: Session = memory.session(user_id, session_id)
        self.user_id = user_id
        self.session_id = session_id
        self.session_settings = session_settings if session_settings is not None else SessionSettings()
        self.compaction = compaction
        config = memory.config
        self.history_limit = config.working_memory_history_limit if history_limit is None else history_limit
        self.keep_last = config.working_memory_compact_keep_last if keep_last is None else keep_last
        if min(self.history_limit, self.keep_last) < 0:
            raise InvalidInputError("history_limit and keep_last must be non-negative")

    def __repr__(self) -> str:
        return f"LocalMemorySession(user_id={self.user_id!r}, session_id={self.session_id!r})"

    # -- the Session protocol -------------------------------------------------------------

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The history, oldest first: the latest ``limit`` items (default: the settings' limit;
        ``None``: all). ``0`` gives none; a negative limit gives all, as ``SQLiteSession`` does."""
        wanted = resolve_session_limit(limit, self.session_settings)
        if wanted is not None and wanted < 0:
            wanted = None
        items: list[TResponseInputItem] = await self.memory_session.messages.aitems(wanted)
        return items

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items`` in one write (all or none), each kept exactly."""
        if items:
            await _settled(self.memory_session.messages.aappend_items(items))

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove and return the newest item; ``None`` when the session is empty."""
        item: TResponseInputItem | None = await _settled(self.memory_session.messages.apop_item())
        return item

    async def clear_session(self) -> None:
        """Delete the session's items. Its working memory and state stay (they are the memory
        of the session, not its transcript); ``memory.delete_session`` erases everything."""
        await _settled(self.memory_session.messages.aclear())

    # -- compaction through the working memory --------------------------------------------

    async def run_compaction(self, args: OpenAIResponsesCompactionArgs | None = None) -> None:
        """Merge what the working memory has not seen yet, then trim the log if it is too long.

        Called by the runner after a turn (the SDK's compaction-aware session hook), or by
        hand. ``args["force"]`` trims down to ``keep_last`` whatever the length. Items leave
        the log only after the merge succeeded (a failed summary keeps them all).
        """
        if not self.compaction:
            return
        items = await self.memory_session.messages.aitems()
        if not items:
            return
        force = bool(args and args.get("force"))
        limit = min(self.history_limit, self.keep_last) if force else self.history_limit
        await _settled(
            self.memory_session.afinish_run(
                items, new_only=True, history_limit=limit, keep_last=safe_keep(items, self.keep_last)
            )
        )

    def instructions(self, base: str = "") -> Callable[[RunContextWrapper[Any], Agent[Any]], Awaitable[str]]:
        """Dynamic instructions for an ``Agent``: ``base``, then the session's working memory
        and state when they hold anything (what compaction kept of older turns).

        ``Agent(name=..., instructions=session.instructions("You are a helpful assistant."))``
        """

        async def build(_context: RunContextWrapper[Any], _agent: Agent[Any]) -> str:
            return await self.arender_memory(base)

        return build

    async def arender_memory(self, base: str = "") -> str:
        """``base`` followed by the working memory and the state, as :meth:`instructions` gives them."""
        working = await self.memory_session.aget_working_memory()
        state = await self.memory_session.aget_state()
        parts = [base] if base else []
        if working.strip():
            parts.append(f"Working memory of this conversation (earlier turns, summarized):\n{working.strip()}")
        if state:
            lines = "\n".join(f"- {key}: {value}" for key, value in state.items() if not str(key).startswith("_"))
            if lines:
                parts.append(f"Session state:\n{lines}")
        return "\n\n".join(parts)
