"""``LocalMemoryCallbackHandler``: memory for chains and classic agents that do not use middleware.

A callback handler only *observes* a run: LangChain hands it copies of inputs and outputs
after the fact. It therefore cannot make a tool's output smaller for the model, which has
already received it in full. What it can do is keep memory:

* every tool output above ``config.tool_result_inline_limit`` bytes is saved to L3 as it
  happens (``on_tool_end``), so it can be paged back later with ``load_tool_result``;
* when a top-level chain run ends, the run (its input, the model answers, the tool outputs,
  large ones as their L3 reference, and its output) is merged into the L1 working memory.

To change what the model sees, use :class:`~langchain_local_ai_memory.ToolResultMiddleware`
with ``create_agent``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models import BaseLanguageModel
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatGeneration, LLMResult

from local_ai_memory import (
    LLM,
    LocalMemoryError,
    Memory,
    MemoryConfig,
    Session,
    TokenCounter,
)
from local_ai_memory.integration import parse_reference

from ._adapters import as_llm
from ._scope import memory_of, resolve_scope

__all__ = ["LocalMemoryCallbackHandler", "text_of"]

logger = logging.getLogger("langchain_local_ai_memory")
_INPUT_KEYS = ("input", "question", "query", "messages")
_OUTPUT_KEYS = ("output", "answer", "result", "text", "messages")


def text_of(value: Any) -> str:
    """Readable text of a chain input or output: strings, messages, lists of them, common dict keys."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, BaseMessage):
        return str(value.text)
    if isinstance(value, Mapping):
        for key in (*_INPUT_KEYS, *_OUTPUT_KEYS):
            if key in value:
                return text_of(value[key])
        return ""
    if isinstance(value, Sequence):
        items = list(value)
        if items and isinstance(items[-1], BaseMessage):
            return text_of(items[-1])
        return "\n".join(filter(None, (text_of(item) for item in items)))
    return str(value)


class LocalMemoryCallbackHandler(BaseCallbackHandler):
    """Persists large tool outputs to L3 and compresses each top-level chain run into L1.

    Callbacks observe and cannot shrink what the model already received: a large tool output
    is stored, but the model still got it whole. For agents built with ``create_agent`` use
    the middleware, which replaces the output by a reference before the model sees it.

    It keeps ``memory.session(user_id, session_id)`` of ``memory`` (``config=`` builds
    ``Memory(config)``). ``llm`` (a LangChain chat model or a core ``LLM``; default: the
    memory's) writes the L1 summary; without one the extractive summary is used. Memory errors
    are logged, never raised into the run.
    """

    raise_error: bool = False

    def __init__(
        self,
        user_id: str,
        session_id: str,
        *,
        memory: Memory | None = None,
        config: MemoryConfig | None = None,
        llm: BaseLanguageModel[Any] | LLM | None = None,
        persist_tool_outputs: bool = True,
        compress: bool = True,
        token_counter: TokenCounter | None = None,
    ) -> None:
        super().__init__()
        self.memory = memory_of(memory, config)
        self.user_id, self.session_id = resolve_scope(user_id, session_id)
        self.session: Session = self.memory.session(self.user_id, self.session_id)
        self.tool_results = self.session.tool_results
        self.compressor = self.session.compressor_with(
            as_llm(llm) if llm is not None else self.memory.llm, token_counter or self.memory.token_counter
        )
        self.persist_tool_outputs = persist_tool_outputs
        self.compress = compress
        self.stored_result_ids: list[str] = []
        self._lock = threading.Lock()
        self._root_of: dict[UUID, UUID] = {}
        self._transcripts: dict[UUID, list[dict[str, str]]] = {}

    @property
    def manager(self) -> Session:
        """The session (an older name of :attr:`session`)."""
        return self.session

    # -- run bookkeeping -------------------------------------------------------------------------

    def _track(self, run_id: UUID, parent_run_id: UUID | None) -> UUID | None:
        with self._lock:
            if parent_run_id is None:
                return None
            root = self._root_of.get(parent_run_id, parent_run_id)
            self._root_of[run_id] = root
            return root

    def _add(self, run_id: UUID, message: dict[str, str]) -> None:
        with self._lock:
            root = self._root_of.get(run_id, run_id)
            transcript = self._transcripts.get(root)
            if transcript is not None and message["content"]:
                transcript.append(message)

    def _close(self, run_id: UUID) -> list[dict[str, str]] | None:
        with self._lock:
            transcript = self._transcripts.pop(run_id, None)
            if transcript is not None:
                for child in [key for key, root in self._root_of.items() if root == run_id]:
                    del self._root_of[child]
            return transcript

    # -- callbacks ---------------------------------------------------------------------------------

    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: dict[str, Any] | Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """Open a transcript for a top-level run; remember which root a nested run belongs to."""
        if parent_run_id is not None:
            self._track(run_id, parent_run_id)
            return
        with self._lock:
            self._transcripts[run_id] = []
        self._add(run_id, {"role": "user", "content": text_of(inputs)})

    def on_chat_model_start(
        self,
        serialized: dict[str, Any] | None,
        messages: list[list[BaseMessage]],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """Track the model run under its root."""
        self._track(run_id, parent_run_id)

    def on_llm_start(
        self,
        serialized: dict[str, Any] | None,
        prompts: list[str],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """Track the model run under its root."""
        self._track(run_id, parent_run_id)

    def on_tool_start(
        self,
        serialized: dict[str, Any] | None,
        input_str: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """Track the tool run under its root."""
        self._track(run_id, parent_run_id)

    def on_llm_end(
        self, response: LLMResult, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        """Record the model's answer (text and the tools it called)."""
        for generations in response.generations:
            for generation in generations:
                if isinstance(generation, ChatGeneration):
                    message = generation.message
                    calls = [call["name"] for call in getattr(message, "tool_calls", [])]
                    text = str(message.text)
                    if calls:
                        text = f"{text}\n[calls tools: {', '.join(calls)}]".strip()
                else:
                    text = generation.text
                self._add(run_id, {"role": "assistant", "content": text})

    def on_tool_end(self, output: Any, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any) -> None:
        """Store a large output in L3 (the model has already seen it; this keeps it for later)."""
        text = text_of(getattr(output, "content", output))
        name = str(kwargs.get("name") or getattr(output, "name", None) or "tool")
        failed = getattr(output, "status", "success") == "error"
        shown = text
        if self.persist_tool_outputs and not failed:
            try:
                shown = self.tool_results.externalize(name, text)
            except LocalMemoryError as exc:  # callbacks must not break the run they observe
                logger.warning("could not store the output of tool %s: %s", name, exc)
            if shown != text:
                with self._lock:
                    self.stored_result_ids.append(str(_result_id(shown)))
        self._add(run_id, {"role": "tool", "content": shown, "name": name})

    def on_chain_end(
        self, outputs: dict[str, Any] | Any, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        """At the end of a top-level run, merge its transcript into L1."""
        if parent_run_id is not None:
            return
        self._add(run_id, {"role": "assistant", "content": text_of(outputs)})
        transcript = self._close(run_id)
        if transcript and self.compress:
            self.compressor.update_summary(transcript)

    def on_chain_error(
        self, error: BaseException, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        """Drop the transcript of a failed top-level run (L1 keeps what it had)."""
        if parent_run_id is None:
            self._close(run_id)


def _result_id(text: str) -> str | None:
    reference = parse_reference(text)
    return None if reference is None else reference.result_id
