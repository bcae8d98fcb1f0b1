"""Adapters from LangChain models to the core's model protocols.

The engines of ``local_ai_memory`` talk to "an LLM" (``complete`` / ``acomplete``: prompt text
in, answer text out) and "an embedder" (``embed`` / ``aembed``: texts in, vectors out). This
module wraps any LangChain language model or ``Embeddings`` so they fit:

* :class:`ChatModelLLM` sends the prompt as one human message to a chat model (or as text to
  a plain LLM) and returns the answer's text. Give it callbacks with :meth:`ChatModelLLM.with_callbacks`
  (for instance a retriever's ``run_manager.get_child()``) and the model call shows up as a child
  run of the caller in LangSmith or any other tracer.
* :class:`EmbeddingsEmbedder` calls ``embed_documents`` / ``aembed_documents``.

:func:`as_llm` and :func:`as_embedder` accept either a LangChain object or something that already
speaks the core protocol, and return the protocol object.
"""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks import Callbacks
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel, BaseLanguageModel
from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.runnables import RunnableConfig

from local_ai_memory import LLM, Embedder, InvalidInputError

__all__ = ["ChatModelLLM", "EmbeddingsEmbedder", "as_embedder", "as_llm"]


def _answer_text(answer: Any) -> str:
    """The text of a model answer: a message's text blocks, or the string itself."""
    if isinstance(answer, BaseMessage):
        return str(answer.text)
    return answer if isinstance(answer, str) else str(answer)


class ChatModelLLM:
    """A LangChain chat model (or LLM) seen through the core ``LLM`` protocol.

    ``callbacks`` and ``config`` are passed to every call; ``run_name`` names the run in traces.
    """

    def __init__(
        self,
        model: BaseLanguageModel[Any],
        *,
        callbacks: Callbacks = None,
        config: RunnableConfig | None = None,
        run_name: str = "local_ai_memory",
    ) -> None:
        if not isinstance(model, BaseLanguageModel):
            raise InvalidInputError(f"expected a LangChain chat model or LLM, got {type(model).__name__}")
        self.model = model
        self.callbacks = callbacks
        self.config: RunnableConfig = dict(config) if config else {}  # type: ignore[assignment]
        self.run_name = run_name

    def __repr__(self) -> str:
        return f"ChatModelLLM({type(self.model).__name__})"

    def with_callbacks(self, callbacks: Callbacks, *, run_name: str | None = None) -> ChatModelLLM:
        """A copy whose calls report to ``callbacks`` (e.g. ``run_manager.get_child()``)."""
        return ChatModelLLM(self.model, callbacks=callbacks, config=self.config, run_name=run_name or self.run_name)

    def _config(self) -> RunnableConfig:
        config: RunnableConfig = {**self.config, "run_name": self.run_name}
        if self.callbacks is not None:
            config["callbacks"] = self.callbacks
        return config

    def _input(self, prompt: str) -> Any:
        return [HumanMessage(content=prompt)] if isinstance(self.model, BaseChatModel) else prompt

    def complete(self, prompt: str) -> str:
        """Ask the model; return its answer text."""
        return _answer_text(self.model.invoke(self._input(prompt), config=self._config()))

    async def acomplete(self, prompt: str) -> str:
        """Async twin of :meth:`complete` (uses the model's own async path)."""
        return _answer_text(await self.model.ainvoke(self._input(prompt), config=self._config()))


class EmbeddingsEmbedder:
    """LangChain ``Embeddings`` seen through the core ``Embedder`` protocol."""

    def __init__(self, embeddings: Embeddings) -> None:
        if not isinstance(embeddings, Embeddings):
            raise InvalidInputError(f"expected LangChain Embeddings, got {type(embeddings).__name__}")
        self.embeddings = embeddings

    def __repr__(self) -> str:
        return f"EmbeddingsEmbedder({type(self.embeddings).__name__})"

    def embed(self, texts: list[str]) -> list[list[float]]:
        """One vector per text (``embed_documents``)."""
        return [list(map(float, vector)) for vector in self.embeddings.embed_documents(list(texts))]

    async def aembed(self, texts: list[str]) -> list[list[float]]:
        """Async twin of :meth:`embed` (``aembed_documents``)."""
        vectors = await self.embeddings.aembed_documents(list(texts))
        return [list(map(float, vector)) for vector in vectors]


def as_llm(model: BaseLanguageModel[Any] | LLM | None) -> LLM | None:
    """``model`` as a core ``LLM``: LangChain models are wrapped, protocol objects pass through."""
    if model is None:
        return None
    if isinstance(model, BaseLanguageModel):
        return ChatModelLLM(model)
    if isinstance(model, LLM):
        return model
    raise InvalidInputError(f"expected a LangChain chat model or an object with complete()/acomplete(), got {model!r}")


def as_embedder(embeddings: Embeddings | Embedder | None) -> Embedder | None:
    """``embeddings`` as a core ``Embedder``: LangChain ``Embeddings`` are wrapped, protocol objects pass through."""
    if embeddings is None:
        return None
    if isinstance(embeddings, Embeddings):
        return EmbeddingsEmbedder(embeddings)
    if isinstance(embeddings, Embedder):
        return embeddings
    raise InvalidInputError(f"expected LangChain Embeddings or an object with embed()/aembed(), got {embeddings!r}")
