"""``LocalWorkingMemoryBlock``: L1 working memory as a LlamaIndex ``Memory`` block.

LlamaIndex's ``Memory`` keeps the recent chat in a FIFO queue (an in-process SQLite database
by default) and hands messages that overflow its token limit to its memory blocks. This
block connects that to the library's L1 working memory of one ``(user_id, session_id)``:

* **reading** (``aget``): the block returns the stored L1 Markdown, which ``Memory`` puts
  into the system message of every LLM call;
* **writing** (``aput``): messages flushed out of the queue are merged into L1 by the
  session's compressor (``session.compressor``: with the memory's LLM, or the deterministic
  extractive summary when it has none);
* **end of a run**: :meth:`LocalWorkingMemoryBlock.asummarize_memory` merges the messages
  still in the queue, so L1 is current even when nothing overflowed.

The block works through ``memory.session(user_id, session_id)`` of a
:class:`local_ai_memory.Memory` (not to be confused with LlamaIndex's ``Memory``, which holds
the block). With the default file backend L1 lives in a plain file, so an agent that is
restarted (a new process, a new ``Memory``, a workflow ``Context`` restored from
``to_dict()``, which does not carry the memory) gets its working memory back as soon as the
block is attached again.

What was already merged is remembered by the core's merge cursor (kept with the scope, so it
survives restarts): a message is merged once even if it is first seen at the end of one run
and then flushed later.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, TextBlock, ToolCallBlock
from llama_index.core.bridge.pydantic import ConfigDict, Field, PrivateAttr
from llama_index.core.memory import BaseMemory, BaseMemoryBlock
from llama_index.retrievers.local_ai_memory._adapters import resolve_memory

from local_ai_memory import Memory, MemoryConfig, Session, WorkingMemoryCompressor
from local_ai_memory.types import CompressionResult

__all__ = ["LocalWorkingMemoryBlock", "to_core_message", "to_core_messages"]


def _tool_call_names(message: ChatMessage) -> tuple[str, ...]:
    names = [block.tool_name for block in message.blocks if isinstance(block, ToolCallBlock)]
    for call in message.additional_kwargs.get("tool_calls") or ():
        name = getattr(call, "tool_name", None) or getattr(call, "name", None)
        if name is None and isinstance(call, dict):
            function = call.get("function")
            name = call.get("name") or (function.get("name") if isinstance(function, dict) else None)
        if isinstance(name, str) and name:
            names.append(name)
    return tuple(names)


def _text(message: ChatMessage) -> str:
    return "\n".join(block.text for block in message.blocks if isinstance(block, TextBlock))


def to_core_message(message: ChatMessage, tool_names: dict[str, str] | None = None) -> dict[str, Any]:
    """A LlamaIndex ``ChatMessage`` as the core's message dict (role, text, tool call names).

    ``FunctionAgent`` does not put the tool's name on a tool message, only the call id:
    ``tool_names`` (call id to name, from earlier assistant messages) fills it in.
    """
    out: dict[str, Any] = {"role": str(message.role.value), "content": _text(message)}
    tool_call_id = message.additional_kwargs.get("tool_call_id")
    if isinstance(tool_call_id, str) and tool_call_id:
        out["tool_call_id"] = tool_call_id
    name = message.additional_kwargs.get("name")
    if not (isinstance(name, str) and name) and isinstance(tool_call_id, str):
        name = (tool_names or {}).get(tool_call_id)
    if isinstance(name, str) and name:
        out["name"] = name
    calls = _tool_call_names(message)
    if calls:
        out["tool_calls"] = list(calls)
    return out


def to_core_messages(messages: Iterable[ChatMessage]) -> list[dict[str, Any]]:
    """:func:`to_core_message` over a conversation, naming tool results after their calls."""
    tool_names: dict[str, str] = {}
    out = []
    for message in messages:
        for block in message.blocks:
            if isinstance(block, ToolCallBlock) and block.tool_call_id:
                tool_names[block.tool_call_id] = block.tool_name
        out.append(to_core_message(message, tool_names))
    return out


class LocalWorkingMemoryBlock(BaseMemoryBlock[str]):
    """Serves the L1 working memory of one scope to LlamaIndex's ``Memory`` and merges flushed
    messages into it.

    ``memory=`` is the :class:`local_ai_memory.Memory` whose ``session(user_id, session_id)``
    the block serves (share it with the tool spec and the retriever); ``config=`` instead
    builds one ``Memory(config)`` for the block, with ``llm`` (LlamaIndex or core) writing the
    summaries. The other keywords are the block's fields (``name``, ``priority``, ...)::

        ours = local_ai_memory.Memory.open("~/.local-ai", llm=LlamaIndexLLMAdapter(Settings.llm))
        block = LocalWorkingMemoryBlock(memory=ours, user_id="alice", session_id="s1")
        memory = Memory.from_defaults(session_id="s1", memory_blocks=[block])
    """

    name: str = Field(default="working_memory", description="The name of the block in the memory prompt.")
    description: str | None = Field(
        default="The agent's working memory: goal, completed steps, discoveries, open issues and decisions."
    )
    priority: int = Field(default=0, description="0: never truncated (L1 already has its own token budget).")
    session: Session = Field(exclude=True, description="The (user_id, session_id) runtime memory served.")

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")  # a misspelt argument is an error

    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    def __init__(
        self,
        memory: Memory | None = None,
        *,
        user_id: str,
        session_id: str,
        config: MemoryConfig | None = None,
        llm: Any = None,
        **fields: Any,
    ) -> None:
        ours = resolve_memory(memory, config, llm=llm)
        # mypy checks this call against the base class's fields; ``session`` is this class's own.
        super().__init__(session=ours.session(user_id, session_id), **fields)  # type: ignore[call-arg]

    @classmethod
    def from_config(
        cls, config: MemoryConfig | None = None, *, user_id: str, session_id: str, **kwargs: Any
    ) -> LocalWorkingMemoryBlock:
        """``LocalWorkingMemoryBlock(config=config, ...)``: over one new ``Memory(config)``."""
        return cls(config=config, user_id=user_id, session_id=session_id, **kwargs)

    @property
    def memory(self) -> Memory:
        """The :class:`local_ai_memory.Memory` the block's session belongs to."""
        return self.session.memory

    @property
    def compressor(self) -> WorkingMemoryCompressor:
        """What merges messages into L1: the session's compressor."""
        return self.session.compressor

    # -- reading

    def get_text(self) -> str:
        """The L1 text the block serves (``""`` when none, or when working memory is disabled)."""
        if not self.session.memory.config.working_memory_enabled:
            return ""
        return self.session.get_working_memory()

    async def _aget(self, messages: list[ChatMessage] | None = None, **block_kwargs: Any) -> str:
        if not self.session.memory.config.working_memory_enabled:
            return ""
        return await self.session.aget_working_memory()

    # -- writing

    @staticmethod
    def _worth_merging(messages: Iterable[ChatMessage]) -> list[dict[str, Any]]:
        return [message for message in to_core_messages(messages) if message["content"] or message.get("tool_calls")]

    def summarize_messages(self, messages: Sequence[ChatMessage]) -> CompressionResult | None:
        """Merge the messages L1 has not seen yet; ``None`` when there was nothing new."""
        if not self.session.memory.config.working_memory_enabled:
            return None
        with self._lock:  # one merge at a time per block: the cursor is read, then advanced
            return self.compressor.merge_new(self._worth_merging(messages))

    async def asummarize_messages(self, messages: Sequence[ChatMessage]) -> CompressionResult | None:
        """Async twin of :meth:`summarize_messages`."""
        if not self.session.memory.config.working_memory_enabled:
            return None
        return await self.compressor.amerge_new(self._worth_merging(messages))

    def summarize_memory(self, memory: BaseMemory) -> CompressionResult | None:
        """Merge every message of ``memory`` not summarized yet (call it after a run; not in an event loop)."""
        return self.summarize_messages(memory.get_all())

    async def asummarize_memory(self, memory: BaseMemory) -> CompressionResult | None:
        """Async twin of :meth:`summarize_memory`: ``await block.asummarize_memory(memory)`` after ``await handler``."""
        return await self.asummarize_messages(await memory.aget_all())

    async def _aput(self, messages: list[ChatMessage]) -> None:
        await self.asummarize_messages(messages)

    def __repr__(self) -> str:
        return f"LocalWorkingMemoryBlock(name={self.name!r}, scope={self.session.engine.scope!r})"
