"""``LocalMemoryRetriever``: the knowledge memory as a LlamaIndex ``BaseRetriever``.

Each query runs the core's three-stage retrieval for one bound user (Stage 1 BM25 or hybrid,
Stage 2 LLM selection when an LLM is given, Stage 3 loading within ``max_tokens``) and
returns one ``NodeWithScore`` per loaded file:

* the node's text is the whole file, its score the Stage 1 score (BM25, positive, or
  the fused score between 0 and 1 in hybrid mode), in the order Stage 2 chose;
* the node id is derived from ``category/filename`` only, so the same file always gets the
  same id (``QueryFusionRetriever`` and caches can rely on it);
* metadata: ``filename``, ``title``, ``category``, ``keywords``, ``last_modified``. Only
  ``filename``, ``title`` and ``category`` are shown to the LLM and the embed model.

``similarity_top_k`` (LlamaIndex's name; 1 to 100, default 5) is how many Stage 1 candidates
there are and how many nodes come back at most; with an LLM, Stage 2 still picks at most 5.

``_aretrieve`` is truly asynchronous (the LLM's ``acomplete``, the disk work in worker
threads); LlamaIndex's default would run the sync code on the event loop.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks import CallbackManager
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from local_ai_memory import DirectoryGuard, InvalidInputError, MemoryConfig, MemoryRetriever, MemoryStore
from local_ai_memory.integration import validate_id, validate_name
from local_ai_memory.types import RetrievalResult, RetrievedFile

from ._adapters import as_core_embedder, as_core_llm

__all__ = ["LocalMemoryRetriever", "file_node", "node_id_for"]

DEFAULT_TOP_K = 5
MAX_TOP_K = 100
_NODE_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "local-ai-memory:knowledge-file")
_HIDDEN_KEYS = ["keywords", "last_modified"]


def node_id_for(category: str, filename: str) -> str:
    """The stable node id of a knowledge file: a UUID5 of ``category/filename``."""
    return str(uuid.uuid5(_NODE_NAMESPACE, f"{category}/{filename}"))


def file_node(file: RetrievedFile, keywords: Sequence[str], last_modified: float | None) -> NodeWithScore:
    """One retrieved file as a scored ``TextNode`` (pure)."""
    node = TextNode(
        id_=node_id_for(file.category, file.filename),
        text=file.content,
        metadata={
            "filename": file.filename,
            "title": file.title,
            "category": file.category,
            "keywords": list(keywords),
            "last_modified": last_modified,
        },
        excluded_llm_metadata_keys=list(_HIDDEN_KEYS),
        excluded_embed_metadata_keys=list(_HIDDEN_KEYS),
    )
    return NodeWithScore(node=node, score=float(file.score))


class LocalMemoryRetriever(BaseRetriever):
    """Retrieves a bound user's Markdown knowledge files as nodes.

    >>> import tempfile
    >>> from local_ai_memory import MemoryConfig
    >>> config = MemoryConfig(runtime_data_dir=tempfile.mkdtemp(), fsync=False)
    >>> retriever = LocalMemoryRetriever.from_config(config, user_id="alice")
    >>> _ = retriever.store.write_file("knowledge/alice_tea.md", "# Tea\\n\\nGreen tea steeps at 80 C.")
    >>> [n.node.metadata["filename"] for n in retriever.retrieve("green tea")]
    ['alice_tea.md']
    """

    def __init__(
        self,
        retriever: MemoryRetriever,
        *,
        user_id: str,
        categories: Sequence[str] | None = None,
        max_tokens: int = 2000,
        similarity_top_k: int = DEFAULT_TOP_K,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        if not isinstance(retriever, MemoryRetriever):
            raise InvalidInputError(f"expected a local_ai_memory MemoryRetriever, got {type(retriever).__name__}")
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise InvalidInputError(f"max_tokens must be a positive integer, got {max_tokens!r}")
        if (
            isinstance(similarity_top_k, bool)
            or not isinstance(similarity_top_k, int)
            or not 1 <= similarity_top_k <= MAX_TOP_K
        ):
            raise InvalidInputError(
                f"similarity_top_k must be a whole number from 1 to {MAX_TOP_K}, got {similarity_top_k!r}"
            )
        if isinstance(categories, str):
            categories = [categories]
        self.similarity_top_k = similarity_top_k
        self.memory_retriever = retriever
        self.user_id = validate_name(user_id, "user_id")
        self.categories = [validate_id(c, "category") for c in categories] if categories is not None else None
        unknown = sorted(set(self.categories or ()) - set(retriever.store.categories))
        if unknown:
            raise InvalidInputError(f"unknown categories {unknown}: the store has {list(retriever.store.categories)}")
        self.max_tokens = max_tokens
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    @classmethod
    def from_store(
        cls,
        store: MemoryStore,
        *,
        user_id: str,
        llm: Any = None,
        categories: Sequence[str] | None = None,
        max_tokens: int = 2000,
        **kwargs: Any,
    ) -> LocalMemoryRetriever:
        """Over an existing ``MemoryStore``; ``llm`` (LlamaIndex or core) enables Stage 2."""
        return cls(
            MemoryRetriever(store, as_core_llm(llm)),
            user_id=user_id,
            categories=categories,
            max_tokens=max_tokens,
            **kwargs,
        )

    @classmethod
    def from_config(
        cls,
        config: MemoryConfig | None = None,
        *,
        user_id: str,
        llm: Any = None,
        embed_model: Any = None,
        categories: Sequence[str] | None = None,
        max_tokens: int = 2000,
        **kwargs: Any,
    ) -> LocalMemoryRetriever:
        """Over ``config.runtime_data_dir`` (default ``~/.local-ai``); ``embed_model`` serves hybrid search."""
        config = config if config is not None else MemoryConfig()
        store = MemoryStore(DirectoryGuard(config.runtime_data_dir), config, embedder=as_core_embedder(embed_model))
        return cls.from_store(store, user_id=user_id, llm=llm, categories=categories, max_tokens=max_tokens, **kwargs)

    @property
    def store(self) -> MemoryStore:
        """The ``MemoryStore`` read by this retriever (write knowledge files through it)."""
        return self.memory_retriever.store

    def __repr__(self) -> str:
        return f"LocalMemoryRetriever(user_id={self.user_id!r}, categories={self.categories!r})"

    def _details(self, result: RetrievalResult) -> list[tuple[RetrievedFile, Sequence[str], float | None]]:
        keywords = {(c.category, c.filename): c.keywords for c in result.candidates}
        details: list[tuple[RetrievedFile, Sequence[str], float | None]] = []
        for file in result.files:
            entry = self.store.find_entry(file.filename, file.category)
            words = entry.keywords if entry is not None else keywords.get((file.category, file.filename), ())
            details.append((file, words, entry.last_modified if entry is not None else None))
        return details

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        result = self.memory_retriever.retrieve_result(
            query_bundle.query_str, self.user_id, self.categories, self.max_tokens, k=self.similarity_top_k
        )
        return [file_node(*item) for item in self._details(result)][: self.similarity_top_k]

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        result = await self.memory_retriever.aretrieve_result(
            query_bundle.query_str, self.user_id, self.categories, self.max_tokens, k=self.similarity_top_k
        )
        return [file_node(*item) for item in await asyncio.to_thread(self._details, result)][: self.similarity_top_k]
