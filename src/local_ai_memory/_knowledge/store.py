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
import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal

from local_ai_memory._contracts.knowledge import NoteInfo, VectorCache
from local_ai_memory._knowledge.bm25 import rank
from local_ai_memory._knowledge.dense import DenseIndex, DenseMatrix
from local_ai_memory._knowledge.index import index_names
from local_ai_memory._knowledge.index_file import IndexEntry
from local_ai_memory._knowledge.indexer import NoteLine, StaleEntry
from local_ai_memory._knowledge.notes import ForgottenNotes, KnowledgeNotes
from local_ai_memory._knowledge.search import BM25_DEPTH, Candidate, arun_hybrid, candidate_of, hybrid_flow, run_hybrid
from local_ai_memory._shared.blas import one_blas_thread
from local_ai_memory._shared.errors import ConfigError, InvalidInputError
from local_ai_memory._shared.events import Event, log_event
from local_ai_memory._shared.models import LLM
from local_ai_memory._shared.naming import owner_of
from local_ai_memory._shared.twins import thread_twin

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

    embed_progress: Callable[[int, int], None] | None = None
    """Called as ``progress(done, total)`` (passages) when a hybrid query must embed notes first:
    notes nobody embedded, or every note after a change of model or passage cut. The command
    line sets it to a progress bar while a query runs."""

    # -- search ----------------------------------------------------------------------------------
    def search(
        self, query: str, top_n: int = 5, *, user_id: str, categories: Iterable[str] | None = None
    ) -> list[Candidate]:
        """Stage 1 BM25 over ``user_id``'s entries only: scored candidates, best first."""
        if not isinstance(query, str):
            raise InvalidInputError(f"query must be str, got {type(query).__name__}")
        if not isinstance(top_n, int) or top_n < 0:
            raise InvalidInputError(f"top_n must be a non-negative integer, got {top_n!r}")
        cats, parts = self._prepare(user_id, categories)
        terms = parts.rankers.analyzer.query_terms(query)
        with self._lock:
            entries = parts.index.current()
            rankers = [parts.rankers.get(user_id, c, parts.indexer.stored_tokens) for c in cats]
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

    def _dense(self) -> DenseIndex | None:
        """The passage vectors of this store's embedder (``None`` without one)."""
        embedder = self.embedder
        if embedder is None:
            return None
        with self._lock:
            cache = self._vector_cache(embedder)
            dense = self.__dict__.get("_dense_index")
            if dense is None or dense.cache is not cache:
                dense = DenseIndex(self.backend, cache, embedder, self.config.hybrid_passages)
                self.__dict__["_dense_index"] = dense
            return dense

    def _passage_cache(self) -> VectorCache | None:
        """The vector cache of hybrid search (``None`` unless it is on)."""
        dense = self._dense() if self.embeds_at_index else None
        return dense.cache if dense is not None else None

    def embed_passages(self, items: Sequence[tuple[str, str]]) -> None:
        """Embed the ``(key, text)`` passages now (cached by content) if hybrid search is on, so
        a later :meth:`similarity` finds them: what logging a conversation does."""
        cache = self._passage_cache()
        if cache is not None and items:
            cache.vectors_for(items)

    def similarity(self, query: str, items: Sequence[tuple[str, str]]) -> list[float] | None:
        """The cosine of ``query`` with each ``(key, text)`` of ``items`` (a text is embedded
        once, then cached by content), or ``None`` unless hybrid search is on: what recall
        fuses with its word ranking of passages."""
        cache = self._passage_cache()
        if cache is None:
            return None
        if not items:
            return []
        return [float(x) for x in cache.vectors_for(items) @ cache.embed_query(query)]

    def _read_text(self, category: str, name: str) -> str | None:
        data = self.backend.read_note(category, name)
        return None if data is None else data.decode("utf-8", "replace")

    def _hybrid_inputs(self, user_id: str, categories: Iterable[str] | None) -> tuple[DenseMatrix, VectorCache] | None:
        """The user's passage vectors (a :class:`DenseMatrix`, kept until the index changes)
        and the vector cache; ``None`` without an embedder."""
        dense = self._dense()
        if dense is None:
            log_event(Event.EMBEDDINGS_FALLBACK, reason="no embedder configured")
            return None
        cats = self._query_categories(categories)
        kept = self._kept_matrix(dense, user_id, cats)
        if kept is not None:
            return kept, dense.cache
        generation, chosen = self._chosen(user_id, cats)
        return dense.matrix(user_id, cats, chosen, generation, self._read_text, self.embed_progress), dense.cache

    def _chosen(self, user_id: str, cats: tuple[str, ...]) -> tuple[int, list[IndexEntry]]:
        """The owner's index generation and their entries in ``cats``, sorted by name."""
        parts = self._owner(user_id)
        with self._lock:
            index = parts.index
            entries = index.current()
            return index.generation, [entries[(c, n)] for c in cats for n in sorted(index.names_of(user_id, c))]

    def _kept_matrix(self, dense: DenseIndex, user_id: str, cats: tuple[str, ...]) -> DenseMatrix | None:
        """The user's matrix while the index has not changed since it was built: a warm query
        then does not list and sort the user's notes (about 7 ms at 10k notes)."""
        parts = self._owner(user_id)
        with self._lock:
            generation = parts.index.generation
        return dense._kept_matrix(user_id, cats, generation)

    async def _ahybrid_inputs(
        self, user_id: str, categories: Iterable[str] | None
    ) -> tuple[DenseMatrix, VectorCache] | None:
        """Async twin of :meth:`_hybrid_inputs` (a stale note goes through ``aembed``)."""
        dense = self._dense()
        if dense is None:
            log_event(Event.EMBEDDINGS_FALLBACK, reason="no embedder configured")
            return None
        cats = self._query_categories(categories)
        kept = self._kept_matrix(dense, user_id, cats)
        if kept is not None:
            return kept, dense.cache
        generation, chosen = self._chosen(user_id, cats)
        matrix = await dense.amatrix(user_id, cats, chosen, generation, self._read_text, self.embed_progress)
        return matrix, dense.cache

    @property
    def embeds_at_index(self) -> bool:
        """Whether indexing embeds notes: an embedder is configured and the mode is hybrid."""
        return self.embedder is not None and self.config.search_mode == "hybrid"

    def embed_notes(
        self,
        user_id: str | None = None,
        categories: Iterable[str] | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> int:
        """Embed now the passages of every note (every user's, or ``user_id``'s) not embedded
        since it last changed, so no query has to; return how many notes were checked. Vectors
        the cache keeps cost nothing. ``progress(done, total)`` counts passages."""
        dense = self._dense()
        if dense is None:
            raise ConfigError("embedding notes needs an embedder (memory.search_mode: hybrid, or embedder=...)")
        cats = set(self._categories(categories))
        chosen = [entry for entry in self._entries(user_id) if entry.category in cats]
        stale = dense.stale(chosen)
        dense.embed([(e, self._read_text(e.category, e.filename) or "") for e in stale], progress)
        if progress is not None and not stale:
            progress(0, 0)
        return len(chosen)

    def _embed_after_indexing(self, what: str, run: Callable[[], object]) -> None:
        """Index-time embedding (the hook after a note is (re)indexed): a failing embedder never
        fails the write; the next query embeds what is missing (logged)."""
        if not self.embeds_at_index:
            return
        try:
            run()
        except Exception as exc:
            log_event(Event.EMBEDDINGS_FALLBACK, reason=f"embedding at {what} failed: {exc!r}")

    def _indexed(
        self,
        category: str,
        name: str,
        content: str,
        info: NoteInfo | None = None,
        stored: tuple[NoteLine, tuple[str, int]] | None = None,
    ) -> None:
        """Index a note just written (every write path: :meth:`write_file`, the conditional
        :meth:`update_file`); in hybrid mode its passages are embedded now, not by the next query."""
        super()._indexed(category, name, content, info, stored)

        def embed() -> None:
            dense = self._dense()
            parts = self._owner_of_note(name)
            with self._lock:
                entry = parts.index.current().get((category, name)) if parts is not None else None
            if dense is not None and entry is not None:
                dense.embed([(entry, content)])

        self._embed_after_indexing("write", embed)

    def _unindexed(self, category: str, name: str, slot: tuple[str, int] | None = None) -> None:
        """Drop a deleted note's entry (see :class:`.notes.KnowledgeNotes`) and its passage-map
        row; its vectors leave the cache at the map's next compaction (:mod:`.dense`)."""
        super()._unindexed(category, name, slot)
        dense = self._dense()
        if dense is None:
            return
        try:
            dense.drop(category, name)
        except Exception as exc:  # a failing map append never fails the delete: the row is only unused
            log_event(Event.EMBEDDINGS_FALLBACK, reason=f"dropping the passage row at delete failed: {exc!r}")

    def populate_index_from_files(
        self,
        user_id: str | None = None,
        categories: Iterable[str] | None = None,
        llm: LLM | None = None,
        progress: Callable[[int, int], None] | None = None,
        embed_progress: Callable[[int, int], None] | None = None,
    ) -> int:
        """Index every file from scratch (see :class:`.notes.KnowledgeNotes`); in hybrid mode the
        notes' passages are embedded too, so the first query embeds nothing
        (``embed_progress(done, total)`` counts passages)."""
        count = super().populate_index_from_files(user_id, categories, llm, progress)
        self._embed_after_indexing("index", lambda: self.embed_notes(user_id, categories, embed_progress))
        return count

    async def apopulate_index_from_files(
        self,
        user_id: str | None = None,
        categories: Iterable[str] | None = None,
        llm: LLM | None = None,
        progress: Callable[[int, int], None] | None = None,
        embed_progress: Callable[[int, int], None] | None = None,
    ) -> int:
        """Async twin of :meth:`populate_index_from_files`."""
        count = await super().apopulate_index_from_files(user_id, categories, llm, progress)
        await asyncio.to_thread(
            self._embed_after_indexing, "index", lambda: self.embed_notes(user_id, categories, embed_progress)
        )
        return count

    def refresh_paths(self, paths: Iterable[str | os.PathLike[str]]) -> int:
        """Re-index the given files (an automatic watcher's call); in hybrid mode embed what changed."""
        changed = super().refresh_paths(paths)
        if changed:
            self._embed_after_indexing("watch", self.embed_notes)
        return changed

    def apply_changes(self) -> int:
        """Apply the backend's change feed (a watcher's and a PostgreSQL reader's call); in
        hybrid mode embed what changed and nobody embedded."""
        changed = super().apply_changes()
        if changed:
            self._embed_after_indexing("watch", self.embed_notes)
        return changed

    def refresh_stale_entries(self, user_id: str | None = None, categories: Iterable[str] | None = None) -> int:
        """Re-index what changed on disk (a polling watcher's call); in hybrid mode embed it too."""
        changed = super().refresh_stale_entries(user_id, categories)
        if changed:
            self._embed_after_indexing("watch", lambda: self.embed_notes(user_id, categories))
        return changed

    def forget_user(self, user_id: str) -> ForgottenNotes:
        """Forget the user (see :class:`.notes.KnowledgeNotes`), with their passage vectors and maps."""
        dense = self._dense()
        cats = sorted({*self.backend.list_categories(), *self.categories})
        digests = dense.digests_of_user(user_id, cats) if dense is not None else []
        forgotten = super().forget_user(user_id)
        if dense is not None:
            gone = dense.cache.discard_kept(digests) if digests else 0
            dense.forget_user(user_id, cats)
            forgotten = ForgottenNotes(forgotten.notes, forgotten.size, forgotten.snapshots, forgotten.vectors + gone)
        return forgotten

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
        lexical = self.search(query, max(pool, BM25_DEPTH), user_id=user_id, categories=categories)
        try:
            inputs = self._hybrid_inputs(user_id, categories)
            if inputs is None:
                return lexical[:top_n]
            with one_blas_thread():  # one matrix-vector product: a second BLAS thread only waits on busy cores
                return run_hybrid(hybrid_flow(query, lexical, inputs[0], pool, top_n, weight), inputs[1])
        except ConfigError:  # a misconfiguration is the user's to fix, not a model failure to hide
            raise
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
        lexical = await self.asearch(query, max(pool, BM25_DEPTH), user_id=user_id, categories=categories)
        try:
            inputs = await self._ahybrid_inputs(user_id, categories)
            if inputs is None:
                return lexical[:top_n]
            flow = hybrid_flow(query, lexical, inputs[0], pool, top_n, weight)
            with one_blas_thread():
                return await arun_hybrid(flow, inputs[1])
        except ConfigError:
            raise
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
        """Counts for humans and the CLI: files per category (every configured one, and the
        conversation logs when there are any) and per user, index size in storage."""
        entries = self._entries(None)
        per_category: dict[str, int] = dict.fromkeys(self.searched, 0)
        users: dict[str, int] = {}
        for entry in entries:
            per_category[entry.category] = per_category.get(entry.category, 0) + 1
            owner = owner_of(entry.filename) or "?"
            users[owner] = users.get(owner, 0) + 1
        index_bytes = sum(
            size for owner in users for name in index_names(owner) if (size := self.backend.blob_size(name)) is not None
        )
        with self._lock:
            held = self._parts.held()
            return {
                "data_dir": str(self.data_dir),
                "files": len(entries),
                "categories": per_category,
                "users": dict(sorted(users.items())),
                "index_bytes": index_bytes,
                "ranking_field": self.ranking_field,
                "owners_loaded": len(held),
                "rankers_loaded": sum(len(parts.rankers) for parts in held),
                "vocabulary": sum(len(parts.rankers.vocab) for parts in held),
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
