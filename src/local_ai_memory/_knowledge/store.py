"""``MemoryStore``: knowledge notes, their index and Stage 1 search, over a knowledge backend.

Notes, the index and keeping it current live in :class:`~.notes.KnowledgeNotes`
(see there for the parts and how they see storage only through the
:class:`~local_ai_memory._contracts.knowledge.KnowledgeBackend` contract); this class adds the searches: BM25
over the asking user's rankers, and hybrid search fused with embedding similarity
(:mod:`.search`, one flow driven by the embedder's ``embed`` or ``aembed``).

The default backend keeps the layout of 0.1.0: ``{root}/memory_data/{category}/{enc(user_id)}_{name}.md``
(see :mod:`local_ai_memory._shared.naming` for the naming rule that keeps ``bob`` out of ``bob_admin``'s files).
Stage 1 ranks each note's text plus its file-name words and keywords (``ranking_field="both"``,
see :func:`.index_file.ranking_text`); ``benchmarks/bench_knowledge.py --quality`` has the
measurement behind that default.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any, Literal

from local_ai_memory._contracts.knowledge import VectorCache
from local_ai_memory._knowledge.bm25 import rank
from local_ai_memory._knowledge.index import INDEX_NAME
from local_ai_memory._knowledge.indexer import StaleEntry
from local_ai_memory._knowledge.notes import KnowledgeNotes
from local_ai_memory._knowledge.search import (
    Candidate,
    HybridCorpus,
    arun_hybrid,
    candidate_of,
    embedding_items,
    hybrid_flow,
    run_hybrid,
)
from local_ai_memory._shared.errors import ConfigError, InvalidInputError
from local_ai_memory._shared.events import Event, log_event
from local_ai_memory._shared.naming import owner_of
from local_ai_memory._shared.twins import thread_twin

CORPORA_KEPT = 64
"""Users whose hybrid-search inputs a store keeps between queries."""

EMBED_BATCH = 256
"""Notes embedded per call of :meth:`MemoryStore.embed_notes` (one progress step each)."""

__all__ = ["Candidate", "MemoryStore", "SearchMode", "StaleEntry"]

SearchMode = Literal["bm25", "hybrid"]


class MemoryStore(KnowledgeNotes):
    """Knowledge notes, their index and Stage 1 search, stored by ``backend``.

    The store is given its backend (:class:`~local_ai_memory.Memory` chooses it from a config).
    Over a folder (the file backend) it shares its index and rankers with the folder's other
    stores in the process; otherwise nothing touches the disk and the paths it returns are
    relative (``memory_data/...``).

    >>> from local_ai_memory.backends import InMemoryKnowledgeBackend
    >>> store = MemoryStore(InMemoryKnowledgeBackend(), categories=["knowledge"])
    >>> _ = store.write_file("knowledge/alice_python.md", "# Python\\n\\nLists, dicts and loops.")
    >>> store.bm25_search("python loops", user_id="alice")
    ['alice_python.md']
    >>> store.bm25_search("python loops", user_id="bob")
    []
    """

    # -- search ----------------------------------------------------------------------------------
    def search(
        self, query: str, top_n: int = 5, *, user_id: str, categories: Iterable[str] | None = None
    ) -> list[Candidate]:
        """Stage 1 BM25 over ``user_id``'s entries only: scored candidates, best first."""
        if not isinstance(query, str):
            raise InvalidInputError(f"query must be str, got {type(query).__name__}")
        if not isinstance(top_n, int) or top_n < 0:
            raise InvalidInputError(f"top_n must be a non-negative integer, got {top_n!r}")
        cats = self._prepare(user_id, categories)
        terms = self._rankers.analyzer.query_terms(query)
        with self._lock:
            entries = self._index.current()
            rankers = [self._rankers.get(user_id, c, self._indexer.stored_tokens) for c in cats]
            hits = rank(rankers, terms, top_n)
            return [candidate_of(entries[(category, name)], round(score, 6)) for category, name, score in hits]

    def bm25_search(
        self, query: str, top_n: int = 5, *, user_id: str, categories: Iterable[str] | None = None
    ) -> list[str]:
        """File names of ``user_id``'s best BM25 matches for ``query``, best first."""
        return [c.filename for c in self.search(query, top_n, user_id=user_id, categories=categories)]

    fast_filter = bm25_search

    def _hybrid_plan(self, top_n: int, bm25_weight: float | None) -> tuple[float, int]:
        weight = self.config.hybrid_bm25_weight if bm25_weight is None else float(bm25_weight)
        if not 0.0 <= weight <= 1.0:
            raise InvalidInputError(f"bm25_weight must be between 0 and 1, got {bm25_weight!r}")
        return weight, max(top_n, self.config.hybrid_top_n)

    def _hybrid_inputs(self, user_id: str, categories: Iterable[str] | None) -> tuple[HybridCorpus, VectorCache] | None:
        """The user's :class:`HybridCorpus` and the vector cache; ``None`` without an embedder.

        The corpus is kept until the index changes (its ``generation``), so a query on an
        unchanged corpus neither rebuilds it nor makes the cache look at every text again.
        """
        embedder = self.embedder
        if embedder is None:
            log_event(Event.EMBEDDINGS_FALLBACK, reason="no embedder configured")
            return None
        cats = self._categories(categories)
        with self._lock:
            if self._vectors is None or self._vectors[0] is not embedder:
                self._vectors = (embedder, self.backend.vector_cache(embedder))
            generation = self._index.generation
            kept = self._parts.hybrid_corpora.pop((user_id, cats), None)
            if kept is None or kept[0] != generation:
                entries = self._index.current()
                chosen = [entries[(c, n)] for c in cats for n in sorted(self._index.names_of(user_id, c))]
                kept = (generation, HybridCorpus.of(chosen))
            self._parts.hybrid_corpora[(user_id, cats)] = kept
            while len(self._parts.hybrid_corpora) > CORPORA_KEPT:
                self._parts.hybrid_corpora.pop(next(iter(self._parts.hybrid_corpora)))
            return kept[1], self._vectors[1]

    def embed_notes(
        self,
        user_id: str | None = None,
        categories: Iterable[str] | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> int:
        """Embed now what hybrid search compares (every user's notes, or ``user_id``'s), so the
        first hybrid query does not wait for it; return how many notes. Vectors already cached
        cost nothing. ``progress(done, total)`` is called after each batch.
        """
        embedder = self.embedder
        if embedder is None:
            raise ConfigError("embedding notes needs an embedder (memory.search_mode: hybrid, or embedder=...)")
        cats = set(self._categories(categories))
        with self._lock:
            entries = self._ensure_loaded()
            chosen = [
                entry
                for (category, name), entry in sorted(entries.items())
                if category in cats and (user_id is None or owner_of(name) == user_id)
            ]
            if self._vectors is None or self._vectors[0] is not embedder:
                self._vectors = (embedder, self.backend.vector_cache(embedder))
            cache = self._vectors[1]
        items = embedding_items(chosen)
        for start in range(0, len(items), EMBED_BATCH):
            cache.vectors_for(items[start : start + EMBED_BATCH])
            if progress is not None:
                progress(min(start + EMBED_BATCH, len(items)), len(items))
        return len(items)

    def hybrid_candidates(
        self,
        query: str,
        top_n: int = 5,
        bm25_weight: float | None = None,
        *,
        user_id: str,
        categories: Iterable[str] | None = None,
    ) -> list[Candidate]:
        """Scored candidates of :meth:`hybrid_search` (score = fused score in 0..1; BM25 score on fallback)."""
        weight, pool = self._hybrid_plan(top_n, bm25_weight)
        lexical = self.search(query, pool, user_id=user_id, categories=categories)
        inputs = self._hybrid_inputs(user_id, categories)
        if inputs is None:
            return lexical[:top_n]
        try:
            return run_hybrid(hybrid_flow(query, lexical, inputs[0], pool, top_n, weight), inputs[1])
        except Exception as exc:  # any embedder failure degrades to BM25 rather than failing the query
            log_event(Event.EMBEDDINGS_FALLBACK, reason=repr(exc))
            return lexical[:top_n]

    async def ahybrid_candidates(
        self,
        query: str,
        top_n: int = 5,
        bm25_weight: float | None = None,
        *,
        user_id: str,
        categories: Iterable[str] | None = None,
    ) -> list[Candidate]:
        """Async twin of :meth:`hybrid_candidates`: the embedder is called through ``aembed``."""
        weight, pool = self._hybrid_plan(top_n, bm25_weight)
        lexical = await self.asearch(query, pool, user_id=user_id, categories=categories)
        inputs = await asyncio.to_thread(self._hybrid_inputs, user_id, categories)
        if inputs is None:
            return lexical[:top_n]
        try:
            flow = hybrid_flow(query, lexical, inputs[0], pool, top_n, weight)
            return await arun_hybrid(flow, inputs[1])
        except Exception as exc:
            log_event(Event.EMBEDDINGS_FALLBACK, reason=repr(exc))
            return lexical[:top_n]

    def hybrid_search(
        self,
        query: str,
        top_n: int = 5,
        bm25_weight: float | None = None,
        *,
        user_id: str,
        categories: Iterable[str] | None = None,
    ) -> list[str]:
        """BM25 fused with embedding similarity (normalized scores, weighted); BM25 alone
        when no embedder is configured or it fails (logged as ``EMBEDDINGS_FALLBACK``)."""
        return [
            c.filename
            for c in self.hybrid_candidates(query, top_n, bm25_weight, user_id=user_id, categories=categories)
        ]

    def stage1(
        self,
        query: str,
        top_n: int = 5,
        *,
        user_id: str,
        categories: Iterable[str] | None = None,
        mode: SearchMode | None = None,
        bm25_weight: float | None = None,
    ) -> list[Candidate]:
        """Stage 1 as the memory is configured: :meth:`hybrid_candidates` when ``search_mode`` is
        ``hybrid``, else :meth:`search` (BM25). The one place that reads the mode; every entry
        point (``Knowledge.search``, the retrievers, the tools, the LangChain store, the CLI) asks
        here. ``mode`` and ``bm25_weight`` override the store's config (a retriever with its own)."""
        if (mode or self.config.search_mode) == "hybrid":
            return self.hybrid_candidates(query, top_n, bm25_weight, user_id=user_id, categories=categories)
        return self.search(query, top_n, user_id=user_id, categories=categories)

    async def astage1(
        self,
        query: str,
        top_n: int = 5,
        *,
        user_id: str,
        categories: Iterable[str] | None = None,
        mode: SearchMode | None = None,
        bm25_weight: float | None = None,
    ) -> list[Candidate]:
        """Async twin of :meth:`stage1`."""
        if (mode or self.config.search_mode) == "hybrid":
            return await self.ahybrid_candidates(query, top_n, bm25_weight, user_id=user_id, categories=categories)
        return await self.asearch(query, top_n, user_id=user_id, categories=categories)

    def stats(self) -> dict[str, Any]:
        """Counts for humans and the CLI: files per category and per user, index size in storage."""
        entries = self._ensure_loaded()
        with self._lock:
            per_category: dict[str, int] = dict.fromkeys(self.categories, 0)
            users: dict[str, int] = {}
            for category, name in entries:
                per_category[category] = per_category.get(category, 0) + 1
                owner = owner_of(name) or "?"
                users[owner] = users.get(owner, 0) + 1
            return {
                "data_dir": str(self.data_dir),
                "files": len(entries),
                "categories": per_category,
                "users": dict(sorted(users.items())),
                "index_bytes": self.backend.blob_size(INDEX_NAME) or 0,
                "ranking_field": self.ranking_field,
                "rankers_loaded": len(self._rankers),
                "vocabulary": len(self._rankers.vocab),
            }

    # -- async twins -----------------------------------------------------------------------------
    asearch = thread_twin(search)
    abm25_search = thread_twin(bm25_search)
    afast_filter = abm25_search
    astats = thread_twin(stats)

    async def ahybrid_search(
        self,
        query: str,
        top_n: int = 5,
        bm25_weight: float | None = None,
        *,
        user_id: str,
        categories: Iterable[str] | None = None,
    ) -> list[str]:
        """Async twin of :meth:`hybrid_search`: the embedder is called through ``aembed``."""
        found = await self.ahybrid_candidates(query, top_n, bm25_weight, user_id=user_id, categories=categories)
        return [c.filename for c in found]
