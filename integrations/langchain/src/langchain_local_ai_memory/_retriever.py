"""``LocalMemoryRetriever``: the knowledge memory of a ``Memory`` as a LangChain ``BaseRetriever``.

``LocalMemoryRetriever(memory=memory, user_id="alice")`` searches ``memory.knowledge``: the
same notes, index and caches as every other object built on that memory (a note written
through a ``LocalMemoryStore`` of it is found at once). ``config=`` is a shortcut that builds
``Memory(config)`` for this retriever alone (with ``embeddings`` as its embedder).

Each call runs the core's three stages for one user: Stage 1 ranks the user's indexed
Markdown files (BM25, or BM25 fused with embeddings when ``search_mode="hybrid"``), Stage 2
lets ``llm`` (any LangChain chat model, or a core ``LLM``; default: the memory's, if any) pick the files to load,
Stage 3 loads them within ``max_tokens``. The result is one ``Document`` per loaded file with
``filename``, ``title``, ``category``, ``score``, ``stage`` (2 when the LLM chose the file,
1 when Stage 1's order was used) and ``tokens`` in its metadata.

``k`` (1 to 100) can be set on the retriever or per call: ``retriever.invoke("query", k=20)``.
Stage 1 finds ``max(k, 5)`` candidates; without an LLM the first ``k`` that fit the budget are
returned, with one the LLM still picks at most 5 of them. The user is bound with ``user_id``, or given per call as
``invoke(..., user_id="alice")`` or ``config={"configurable": {"user_id": "alice"}}``.

The Stage 2 model call is made with the retriever run's child callbacks, so it appears under
the retriever in traces. ``ainvoke`` is a real async path: the model is awaited and the disk
work runs in a worker thread.
"""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
    Callbacks,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableConfig, ensure_config
from pydantic import ConfigDict, Field, PrivateAttr

from local_ai_memory import LLM, InvalidInputError, Memory, MemoryConfig
from local_ai_memory.types import RetrievalResult

from ._adapters import ChatModelLLM, as_embedder, as_llm
from ._scope import lookup, memory_of, resolve_user

__all__ = ["LocalMemoryRetriever", "documents_of"]

MAX_K = 100
MIN_CANDIDATES = 5  # what the LLM chooses from even when fewer documents are asked for


def documents_of(result: RetrievalResult, k: int) -> list[Document]:
    """The first ``k`` loaded files of a retrieval as ``Document`` s (pure)."""
    return [
        Document(
            id=f"{file.category}/{file.filename}",
            page_content=file.content,
            metadata={
                "filename": file.filename,
                "title": file.title,
                "category": file.category,
                "score": file.score,
                "stage": file.stage,
                "tokens": file.tokens,
            },
        )
        for file in result.files[:k]
    ]


class LocalMemoryRetriever(BaseRetriever):
    """Three-stage retrieval over one user's Markdown knowledge notes (see the module docstring)."""

    memory: Memory = Field(exclude=True, description="The Memory whose knowledge is searched.")
    user_id: str | None = Field(default=None, description="Bound user; else given per call.")
    categories: list[str] | None = Field(default=None, description="Categories searched (default: all configured).")
    k: int = Field(default=4, ge=1, le=MAX_K, description="Documents returned at most.")
    max_tokens: int = Field(default=2000, ge=1, description="Token budget of the loaded files together.")
    llm: Any = Field(
        default=None, description="Stage 2 selector: a LangChain chat model or a core LLM (default: the memory's)."
    )
    embeddings: Any = Field(
        default=None, description="With config= only: LangChain Embeddings or a core Embedder (hybrid search)."
    )

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    _llm: LLM | None = PrivateAttr(None)

    def __init__(self, *, memory: Memory | None = None, config: MemoryConfig | None = None, **fields: Any) -> None:
        """``memory`` (or ``config``, a shortcut for ``Memory(config)``; not both), then the fields."""
        fields["memory"] = memory_of(memory, config, embedder=as_embedder(fields.get("embeddings")))
        super().__init__(**fields)

    def model_post_init(self, context: Any, /) -> None:
        """Check the model objects once."""
        self._llm = as_llm(self.llm) if self.llm is not None else self.memory.llm
        if self.user_id is not None:
            resolve_user(self.user_id)

    @property
    def config(self) -> MemoryConfig:
        """The memory's settings."""
        return self.memory.config

    # -- plumbing ----------------------------------------------------------------------------

    def _selector(self, callbacks: Callbacks) -> LLM | None:
        llm = self._llm
        if isinstance(llm, ChatModelLLM) and callbacks is not None:
            llm = llm.with_callbacks(callbacks, run_name="local_ai_memory_stage2")
        return llm

    def _k(self, k: int | None) -> int:
        value = self.k if k is None else k
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidInputError(f"k must be a whole number >= 1, got {value!r}")
        if value > MAX_K:
            raise InvalidInputError(f"k must be at most {MAX_K}, got {value!r}")
        return value

    @staticmethod
    def _with_user(config: RunnableConfig | None, kwargs: dict[str, Any]) -> dict[str, Any]:
        if kwargs.get("user_id") is None:
            found = lookup("user_id", None, ensure_config(config))
            if found is not None:
                kwargs = {**kwargs, "user_id": found}
        return kwargs

    # -- BaseRetriever -------------------------------------------------------------------------

    def invoke(self, input: str, config: RunnableConfig | None = None, **kwargs: Any) -> list[Document]:
        """Retrieve documents; accepts ``k=`` and ``user_id=`` per call."""
        return super().invoke(input, config, **self._with_user(config, kwargs))

    async def ainvoke(self, input: str, config: RunnableConfig | None = None, **kwargs: Any) -> list[Document]:
        """Async twin of :meth:`invoke`."""
        return await super().ainvoke(input, config, **self._with_user(config, kwargs))

    def _get_relevant_documents(
        self,
        query: str,
        *,
        run_manager: CallbackManagerForRetrieverRun,
        k: int | None = None,
        user_id: str | None = None,
    ) -> list[Document]:
        count = self._k(k)
        result = self.retrieve_result(query, user_id=user_id, callbacks=run_manager.get_child(), k=count)
        return documents_of(result, count)

    async def _aget_relevant_documents(
        self,
        query: str,
        *,
        run_manager: AsyncCallbackManagerForRetrieverRun,
        k: int | None = None,
        user_id: str | None = None,
    ) -> list[Document]:
        count = self._k(k)
        result = await self.aretrieve_result(query, user_id=user_id, callbacks=run_manager.get_child(), k=count)
        return documents_of(result, count)

    # -- the core result, and text for tools ---------------------------------------------------

    def retrieve_result(
        self, query: str, *, user_id: str | None = None, callbacks: Callbacks = None, k: int | None = None
    ) -> RetrievalResult:
        """The core's structured result (files, candidates, decisions) for ``query``, from
        ``max(k, 5)`` Stage 1 candidates (``k`` defaults to the retriever's)."""
        user = resolve_user(user_id if user_id is not None else self.user_id)
        count = max(self._k(k), MIN_CANDIDATES)
        return self.memory.knowledge.retrieve_with(
            query, user, llm=self._selector(callbacks), categories=self.categories, max_tokens=self.max_tokens, k=count
        )

    async def aretrieve_result(
        self, query: str, *, user_id: str | None = None, callbacks: Callbacks = None, k: int | None = None
    ) -> RetrievalResult:
        """Async twin of :meth:`retrieve_result`."""
        user = resolve_user(user_id if user_id is not None else self.user_id)
        count = max(self._k(k), MIN_CANDIDATES)
        return await self.memory.knowledge.aretrieve_with(
            query, user, llm=self._selector(callbacks), categories=self.categories, max_tokens=self.max_tokens, k=count
        )

    def _search_user(self, user_id: str | None, config: RunnableConfig | None) -> str | None:
        if user_id is not None:
            return user_id
        return self.user_id if self.user_id is not None else lookup("user_id", None, config)

    def search_text(
        self,
        query: str,
        *,
        user_id: str | None = None,
        config: RunnableConfig | None = None,
        callbacks: Callbacks = None,
    ) -> str:
        """The loaded files as ``## filename`` blocks fenced as data (what ``search_memory`` returns to a model).

        The user is ``user_id``, else the retriever's own, else the runtime context / configurable.
        """
        user = self._search_user(user_id, config)
        return self.retrieve_result(query, user_id=user, callbacks=callbacks).for_model()

    async def asearch_text(
        self,
        query: str,
        *,
        user_id: str | None = None,
        config: RunnableConfig | None = None,
        callbacks: Callbacks = None,
    ) -> str:
        """Async twin of :meth:`search_text`."""
        user = self._search_user(user_id, config)
        return (await self.aretrieve_result(query, user_id=user, callbacks=callbacks)).for_model()
