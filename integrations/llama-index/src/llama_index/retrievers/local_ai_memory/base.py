"""``LocalMemoryRetriever``: the knowledge memory as a LlamaIndex ``BaseRetriever``.

Each query runs ``memory.knowledge.retrieve`` for one bound user (Stage 1 BM25 or hybrid,
Stage 2 LLM selection when the memory has an LLM, Stage 3 loading within ``max_tokens``) and
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

from local_ai_memory import InvalidInputError, Knowledge, Memory, MemoryConfig, MemoryStore
from local_ai_memory.integration import validate_id, validate_name
from local_ai_memory.types import RetrievalResult, RetrievedFile

from ._adapters import resolve_memory

__all__ = ["LocalMemoryRetriever", "file_node", "known_categories", "node_id_for"]

DEFAULT_TOP_K = 5
MAX_TOP_K = 100
_NODE_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "local-ai-memory:knowledge-file")
_HIDDEN_KEYS = ["keywords", "last_modified"]


def node_id_for(category: str, filename: str) -> str:
    """The stable node id of a knowledge file: a UUID5 of ``category/filename``."""
    return str(uuid.uuid5(_NODE_NAMESPACE, f"{category}/{filename}"))


def known_categories(memory: Memory, categories: Sequence[str] | str | None) -> list[str] | None:
    """``categories`` checked against the memory's configured ones (``None``: all of them)."""
    if categories is None:
        return None
    if isinstance(categories, str):
        categories = [categories]
    chosen = [validate_id(c, "category") for c in categories]
    configured = list(memory.knowledge.store.categories)
    unknown = sorted(set(chosen) - set(configured))
    if unknown:
        raise InvalidInputError(f"unknown categories {unknown}: the memory has {configured}")
    return chosen


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
    """Retrieves a bound user's Markdown knowledge files as nodes, through a
    :class:`~local_ai_memory.Memory`'s knowledge (``memory.knowledge``).

    Pass ``memory=`` to share one memory with the other adapters (a note written through
    ``memory.knowledge.write_note`` is found at the next query); ``config=`` instead builds one
    ``Memory(config)`` for this retriever, with ``llm`` (Stage 2) and ``embed_model`` (hybrid
    search) as its models. With ``memory=`` the memory's own models are used.

    >>> from local_ai_memory import Memory
    >>> memory = Memory.in_memory()
    >>> retriever = LocalMemoryRetriever(memory=memory, user_id="alice")
    >>> _ = memory.knowledge.write_note("alice", "tea", "# Tea\\n\\nGreen tea steeps at 80 C.")
    >>> [n.node.metadata["filename"] for n in retriever.retrieve("green tea")]
    ['alice_tea.md']
    """

    def __init__(
        self,
        memory: Memory | None = None,
        *,
        user_id: str,
        config: MemoryConfig | None = None,
        llm: Any = None,
        embed_model: Any = None,
        categories: Sequence[str] | None = None,
        max_tokens: int = 2000,
        similarity_top_k: int = DEFAULT_TOP_K,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
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
        self.user_id = validate_name(user_id, "user_id")
        self.memory = resolve_memory(memory, config, llm=llm, embed_model=embed_model)
        self.categories = known_categories(self.memory, categories)
        self.similarity_top_k = similarity_top_k
        self.max_tokens = max_tokens
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    @classmethod
    def from_config(cls, config: MemoryConfig | None = None, *, user_id: str, **kwargs: Any) -> LocalMemoryRetriever:
        """``LocalMemoryRetriever(config=config, ...)``: over one new ``Memory(config)`` (default ``~/.local-ai``)."""
        return cls(config=config, user_id=user_id, **kwargs)

    @property
    def knowledge(self) -> Knowledge:
        """The knowledge memory read by this retriever (``memory.knowledge``)."""
        return self.memory.knowledge

    @property
    def store(self) -> MemoryStore:
        """The note store under ``memory.knowledge`` (for code written against it; new code
        writes notes with ``memory.knowledge.write_note``)."""
        return self.memory.knowledge.store

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
        result = self.knowledge.retrieve(
            query_bundle.query_str,
            self.user_id,
            categories=self.categories,
            max_tokens=self.max_tokens,
            k=self.similarity_top_k,
        )
        return [file_node(*item) for item in self._details(result)][: self.similarity_top_k]

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        result = await self.knowledge.aretrieve(
            query_bundle.query_str,
            self.user_id,
            categories=self.categories,
            max_tokens=self.max_tokens,
            k=self.similarity_top_k,
        )
        return [file_node(*item) for item in await asyncio.to_thread(self._details, result)][: self.similarity_top_k]
