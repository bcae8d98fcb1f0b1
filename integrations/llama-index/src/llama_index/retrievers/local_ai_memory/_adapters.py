"""Adapters from LlamaIndex models to the core's model protocols, shared by every package here.

The engines of ``local_ai_memory`` talk to "an LLM" (``complete(prompt) -> str`` plus
``acomplete``) and "an embedder" (``embed(texts)`` plus ``aembed``). LlamaIndex models have
richer interfaces (``CompletionResponse``, query vs. text embeddings), so these two small
classes translate. A failing model call becomes :class:`~local_ai_memory.ModelError` (a
``RuntimeError``) with the original exception chained, which the engines know how to degrade
on (Stage 2 keeps the Stage 1 order, the compressor leaves L1 unchanged).

:func:`resolve_memory` is the one rule every adapter here follows to get its
:class:`~local_ai_memory.Memory`: the one passed as ``memory=``, or one built from ``config=``.

This module lives in the retrievers package; the postprocessor, tools and memory packages of
the same distribution import it from here, so there is one copy of the adapter logic.
"""

from __future__ import annotations

from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.llms import LLM as LlamaIndexLLM  # noqa: N811

from local_ai_memory import LLM, Embedder, InvalidInputError, Memory, MemoryConfig, ModelError, Session

__all__ = ["LlamaIndexEmbedderAdapter", "LlamaIndexLLMAdapter", "as_core_embedder", "as_core_llm", "resolve_memory"]


class LlamaIndexLLMAdapter:
    """Presents a LlamaIndex ``LLM`` as the core's :class:`~local_ai_memory.LLM` protocol.

    >>> from llama_index.core.llms import MockLLM
    >>> LlamaIndexLLMAdapter(MockLLM()).complete("hello")
    'hello'
    """

    def __init__(self, llm: LlamaIndexLLM) -> None:
        if not isinstance(llm, LlamaIndexLLM):
            raise InvalidInputError(f"expected a LlamaIndex LLM, got {type(llm).__name__}")
        self.llm = llm

    def __repr__(self) -> str:
        return f"LlamaIndexLLMAdapter({type(self.llm).__name__})"

    def complete(self, prompt: str) -> str:
        """The model's answer text to ``prompt``."""
        try:
            response = self.llm.complete(prompt)
        except Exception as exc:
            raise ModelError(f"{type(self.llm).__name__} failed: {type(exc).__name__}: {exc}") from exc
        return response.text or ""

    async def acomplete(self, prompt: str) -> str:
        """Async twin of :meth:`complete` (uses the model's own ``acomplete``)."""
        try:
            response = await self.llm.acomplete(prompt)
        except Exception as exc:
            raise ModelError(f"{type(self.llm).__name__} failed: {type(exc).__name__}: {exc}") from exc
        return response.text or ""


class LlamaIndexEmbedderAdapter:
    """Presents a LlamaIndex ``BaseEmbedding`` as the core's :class:`~local_ai_memory.Embedder`.

    Texts are embedded with ``get_text_embedding_batch`` (document side); the core embeds
    queries with the same call, as its hybrid search compares like with like.
    """

    def __init__(self, embed_model: BaseEmbedding) -> None:
        if not isinstance(embed_model, BaseEmbedding):
            raise InvalidInputError(f"expected a LlamaIndex BaseEmbedding, got {type(embed_model).__name__}")
        self.embed_model = embed_model
        self.model_name = f"llama-index:{type(embed_model).__name__}:{embed_model.model_name}"

    def __repr__(self) -> str:
        return f"LlamaIndexEmbedderAdapter({self.model_name!r})"

    def embed(self, texts: list[str]) -> list[list[float]]:
        """One vector per text, in order."""
        if not texts:
            return []
        try:
            vectors = self.embed_model.get_text_embedding_batch(list(texts))
        except Exception as exc:
            raise ModelError(f"{type(self.embed_model).__name__} failed: {type(exc).__name__}: {exc}") from exc
        return [list(map(float, vector)) for vector in vectors]

    async def aembed(self, texts: list[str]) -> list[list[float]]:
        """Async twin of :meth:`embed` (uses the model's own async batch call)."""
        if not texts:
            return []
        try:
            vectors = await self.embed_model.aget_text_embedding_batch(list(texts))
        except Exception as exc:
            raise ModelError(f"{type(self.embed_model).__name__} failed: {type(exc).__name__}: {exc}") from exc
        return [list(map(float, vector)) for vector in vectors]


def as_core_llm(llm: Any) -> LLM | None:
    """``llm`` as the core protocol: a LlamaIndex LLM is wrapped, a core LLM passes, ``None`` stays."""
    if llm is None:
        return None
    if isinstance(llm, LlamaIndexLLM):
        return LlamaIndexLLMAdapter(llm)
    if isinstance(llm, LLM):
        return llm
    raise InvalidInputError(f"llm must be a LlamaIndex LLM or have complete()/acomplete(), got {type(llm).__name__}")


def as_core_embedder(embed_model: Any) -> Embedder | None:
    """``embed_model`` as the core protocol: a LlamaIndex ``BaseEmbedding`` is wrapped."""
    if embed_model is None:
        return None
    if isinstance(embed_model, BaseEmbedding):
        return LlamaIndexEmbedderAdapter(embed_model)
    if isinstance(embed_model, Embedder):
        return embed_model
    raise InvalidInputError(
        f"embed_model must be a LlamaIndex BaseEmbedding or have embed()/aembed(), got {type(embed_model).__name__}"
    )


def resolve_memory(
    memory: Memory | None, config: MemoryConfig | None, *, llm: Any = None, embed_model: Any = None
) -> Memory:
    """The :class:`~local_ai_memory.Memory` an adapter works through.

    ``memory`` itself when given: adapters built from one memory share its backends, caches and
    knowledge index. Otherwise one ``Memory(config)`` (default config: ``~/.local-ai``) whose
    models are ``llm`` and ``embed_model`` (LlamaIndex or core). A given memory keeps its own
    models, so ``llm``/``embed_model`` next to it, or ``config`` next to it, is an error rather
    than a setting silently ignored.
    """
    if memory is None:
        if config is not None and not isinstance(config, MemoryConfig):
            raise InvalidInputError(f"config must be a MemoryConfig, got {type(config).__name__}")
        return Memory(config, llm=as_core_llm(llm), embedder=as_core_embedder(embed_model))
    if isinstance(memory, Session):
        raise InvalidInputError(
            "memory must be a Memory, got a Session: pass memory=session.memory with its user_id and session_id"
        )
    if not isinstance(memory, Memory):
        raise InvalidInputError(f"memory must be a local_ai_memory.Memory, got {type(memory).__name__}")
    if config is not None:
        raise InvalidInputError("give memory= or config=, not both (a Memory already has its config)")
    if llm is not None or embed_model is not None:
        raise InvalidInputError(
            "llm= and embed_model= go with config= only; a given Memory uses its own models: "
            "Memory(config, llm=LlamaIndexLLMAdapter(llm), embedder=LlamaIndexEmbedderAdapter(embed_model))"
        )
    return memory
