"""``LocalMemoryChatMessageHistory``: a ``BaseChatMessageHistory`` over the session files.

``messages`` is the L1 working memory, fenced as data in one system message, followed by
the session's recent messages. ``add_messages`` appends to ``memory/sessions/{scope}.jsonl``;
when a batch ends an exchange (it contains a final model answer), the new messages are merged
into L1 and the session is compacted to the last ``working_memory_compact_keep_last``
messages (only after the merge succeeded, so nothing is lost before it reached L1).

``BaseChatMessageHistory`` is deprecated upstream since langchain-core 1.6.4 (removal planned
for 2.0). This class is kept because existing ``RunnableWithMessageHistory`` code uses it; it
does not emit deprecation warnings itself (the upstream warning fires only for direct
instances of the base class). ``RunnableWithMessageHistory``, which drives such histories,
is deprecated upstream as well and warns on its own; this class also works called directly
(``add_messages`` / ``messages``). New code should use ``create_agent`` with
:class:`~langchain_local_ai_memory.LocalMemoryMiddleware`, which keeps the same L1 memory.

Stored messages keep role, text, name and tool call id; tool-call arguments are not stored,
so an assistant turn that called tools comes back as text.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.language_models import BaseLanguageModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from local_ai_memory import (
    LLM,
    Memory,
    MemoryConfig,
    Session,
    TokenCounter,
)
from local_ai_memory.integration import afinish_run, assemble_context, finish_run
from local_ai_memory.types import Message

from ._adapters import as_llm
from ._scope import memory_of, resolve_scope

__all__ = ["LocalMemoryChatMessageHistory", "to_langchain"]


def to_langchain(message: Message) -> BaseMessage:
    """A stored message as a LangChain message."""
    if message.role == "user":
        return HumanMessage(content=message.content, name=message.name)
    if message.role == "assistant":
        return AIMessage(content=message.content, name=message.name)
    if message.role == "tool":
        return ToolMessage(content=message.content, tool_call_id=message.tool_call_id or "", name=message.name)
    return SystemMessage(content=message.content, name=message.name)


def _ends_exchange(messages: Sequence[BaseMessage]) -> bool:
    return any(isinstance(m, AIMessage) and not m.tool_calls for m in messages)


class LocalMemoryChatMessageHistory(BaseChatMessageHistory):
    """Chat history of one ``(user_id, session_id)`` with L1 working memory and compaction.

    Deprecated upstream (``BaseChatMessageHistory``, langchain-core 1.6.4); prefer
    ``create_agent`` with ``LocalMemoryMiddleware``. The history is ``memory.session(user_id,
    session_id)`` of ``memory`` (``config=`` builds ``Memory(config)``). ``llm`` writes the L1
    summary (a LangChain chat model or a core ``LLM``; default: the memory's; extractive
    without one). ``keep_last`` defaults to the config's ``working_memory_compact_keep_last``.
    """

    def __init__(
        self,
        user_id: str,
        session_id: str,
        *,
        memory: Memory | None = None,
        config: MemoryConfig | None = None,
        llm: BaseLanguageModel[Any] | LLM | None = None,
        keep_last: int | None = None,
        max_memory_tokens: int = 1024,
        token_counter: TokenCounter | None = None,
    ) -> None:
        super().__init__()
        self.memory = memory_of(memory, config)
        self.user_id, self.session_id = resolve_scope(user_id, session_id)
        self.session: Session = self.memory.session(self.user_id, self.session_id)
        self.store = self.session.messages
        self.counter = token_counter or self.memory.token_counter
        self.compressor = self.session.compressor_with(
            as_llm(llm) if llm is not None else self.memory.llm, self.counter
        )
        self.max_memory_tokens = max_memory_tokens
        self.keep_last = keep_last if keep_last is not None else self.memory.config.working_memory_compact_keep_last

    def __repr__(self) -> str:
        return f"LocalMemoryChatMessageHistory(user_id={self.user_id!r}, session_id={self.session_id!r})"

    @property
    def manager(self) -> Session:
        """The session (an older name of :attr:`session`)."""
        return self.session

    def _read(self) -> list[BaseMessage]:
        working = self.session.get_working_memory() if self.session.memory.config.working_memory_enabled else ""
        memory = assemble_context({}, working, "", [], self.counter, self.max_memory_tokens).text
        head: list[BaseMessage] = [SystemMessage(content=memory)] if memory else []
        return head + [to_langchain(m) for m in self.store.messages()]

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The working memory as a system message, then the stored recent messages."""
        return self._read()

    async def aget_messages(self) -> list[BaseMessage]:
        """Async twin of :attr:`messages`."""
        return await asyncio.to_thread(self._read)

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Append ``messages``; after a final answer, merge what L1 has not seen and compact the session."""
        batch = list(messages)
        self.store.append(batch)
        if _ends_exchange(batch):
            finish_run(
                self.compressor,
                self.store,
                self.store.messages(),
                new_only=True,
                history_limit=self.keep_last,
                keep_last=self.keep_last,
            )

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Async twin of :meth:`add_messages` (the summary uses the model's async path)."""
        batch = list(messages)
        await self.store.aappend(batch)
        if _ends_exchange(batch):
            await afinish_run(
                self.compressor,
                self.store,
                await self.store.amessages(),
                new_only=True,
                history_limit=self.keep_last,
                keep_last=self.keep_last,
            )

    def clear(self) -> None:
        """Delete the session's messages and its L1 working memory."""
        self.store.clear()
        self.session.update_working_memory("")
        self.compressor.forget_merged()

    async def aclear(self) -> None:
        """Async twin of :meth:`clear`."""
        await asyncio.to_thread(self.clear)
