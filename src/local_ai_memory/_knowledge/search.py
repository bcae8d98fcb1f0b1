"""Stage 1 search results and the fusion of BM25 with embedding similarity.

:func:`hybrid_flow` is the one description of a hybrid search: given the BM25 candidates and
the user's passage vectors (a :class:`.dense.DenseMatrix`, embedded at index time), it asks
for the query's vector (by yielding a request), scores each note from its passages and fuses
both scores (:func:`.fusion.standard_fusion`, then :func:`.fusion.dense_share`).
:func:`run_hybrid` drives it with an embedder's sync ``embed`` and :func:`arun_hybrid` with its
``aembed``; neither holds any logic of its own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from local_ai_memory._contracts.knowledge import VectorCache
from local_ai_memory._knowledge.dense import DenseMatrix
from local_ai_memory._knowledge.fusion import CONFIDENCE_DEPTH, confident_weight, dense_share, standard_fusion
from local_ai_memory._knowledge.index_file import IndexEntry, lead_text
from local_ai_memory._shared.drive import adrive, drive

__all__ = [
    "BM25_DEPTH",
    "Candidate",
    "HybridCorpus",
    "HybridFlow",
    "arun_hybrid",
    "candidate_of",
    "embedding_items",
    "embedding_text",
    "hybrid_flow",
    "run_hybrid",
]

BM25_DEPTH = 50
"""BM25 answers hybrid search reads (or ``pool``, when larger): a dense candidate BM25 ranks
below its pool still fuses with its own BM25 score, not 0 (see :func:`hybrid_flow`)."""

Vector = npt.NDArray[np.float32]
Request = tuple[Literal["query"], str]
HybridFlow = Generator[Request, Vector, list["Candidate"]]


@dataclass(frozen=True)
class Candidate:
    """One Stage 1 result: an index entry with its score (higher is better)."""

    filename: str
    category: str
    title: str
    description: str
    keywords: tuple[str, ...]
    score: float


def candidate_of(entry: IndexEntry, score: float) -> Candidate:
    """The candidate of an entry with ``score``."""
    return Candidate(entry.filename, entry.category, entry.title, entry.description, tuple(entry.keywords), score)


def embedding_text(entry: IndexEntry) -> str:
    """What hybrid search embeds of a note: its title and first paragraph (with the file-name
    words), which measured better than the metadata with keywords or the text's beginning."""
    return lead_text(entry)


def embedding_items(chosen: Sequence[IndexEntry]) -> list[tuple[str, str]]:
    """The ``(key, text)`` pairs hybrid search embeds for ``chosen`` entries."""
    return [(f"{e.category}/{e.filename}", embedding_text(e)) for e in chosen]


@dataclass(frozen=True)
class HybridCorpus:
    """A user's entries as hybrid search compares them: the entries, their ``(key, text)``
    :func:`embedding_items` and each key's row. Built once per index change, not per query."""

    entries: Sequence[IndexEntry]
    items: Sequence[tuple[str, str]]
    rows: Mapping[str, int]

    @classmethod
    def of(cls, entries: Sequence[IndexEntry]) -> HybridCorpus:
        """The corpus of ``entries``, in their order."""
        items = embedding_items(entries)
        return cls(entries, items, {key: row for row, (key, _) in enumerate(items)})


def hybrid_flow(
    query: str,
    lexical: Sequence[Candidate],
    dense: DenseMatrix,
    pool: int,
    top_n: int,
    weight: float,
) -> HybridFlow:
    """BM25 ``lexical`` (best first) fused with each note's dense score (``dense``, built at index time).

    Candidates are BM25's first ``pool`` and the ``pool`` notes with the best dense scores. Each
    has its BM25 score when it is among the ``lexical`` given (pass :data:`BM25_DEPTH` or
    ``pool`` answers, whichever is more), else 0: a dense candidate BM25 ranks 11th to 50th is
    not scored as one that shares no word with the query. Both scores are put on one scale
    (z-scores) and added with weights ``w`` and ``1 - w``, where ``w`` is ``weight`` moved by how
    sure BM25 is of its first answer, read from its first :data:`.fusion.CONFIDENCE_DEPTH` (see
    :func:`.fusion.confident_weight` and :func:`.fusion.standard_fusion`); the fused list then
    keeps the dense side's share ``1 - w`` of its places (:func:`.fusion.dense_share`). A
    candidate's score is the fused score, between 0 and 1. The only request is the query's unit
    vector: the notes' vectors are already there.

    Measured against BM25 at 0 below its pool and no share of places (``benchmarks/
    bench_natural_questions.py``, dev questions, R@5 / MRR@10; ``bench_quality.py``): 400 man
    pages .895 / .765 -> .912 / .773, 2,000 pages .849 / .701 -> .855 / .723, known items
    ``stdlib`` .929 / .824 -> .949 / .827, ``readmes`` .902 / .812 -> .909 / .811.
    """
    scored = {f"{c.category}/{c.filename}": c.score for c in lexical}
    keyed = {f"{c.category}/{c.filename}": c for c in lexical[:pool]}
    similar: list[tuple[str, float]] = []
    dense_ranked: list[str] = []
    if dense.entries:
        query_vector = yield ("query", query)
        lexical_rows = [row for row in map(dense.rows.get, keyed) if row is not None]
        cosines = dense.pool_scores(query_vector, pool, lexical_rows)
        for row in sorted(cosines):
            entry = dense.entries[row]
            key = f"{entry.category}/{entry.filename}"
            similar.append((key, cosines[row]))
            keyed.setdefault(key, candidate_of(entry, 0.0))
        best_rows = sorted(cosines, key=lambda row: (-cosines[row], row))[:pool]
        dense_ranked = [f"{dense.entries[row].category}/{dense.entries[row].filename}" for row in best_rows]
    bm25_weight = confident_weight([c.score for c in lexical[:CONFIDENCE_DEPTH]], weight)
    bm25 = [(key, score) for key, score in scored.items() if key in keyed and score > 0]  # BM25's order
    fused = standard_fusion(bm25, similar, bm25_weight)
    fused = dense_share(fused, dense_ranked, bm25_weight)
    out = []
    for key, score in fused[:top_n]:
        c = keyed[key]
        out.append(Candidate(c.filename, c.category, c.title, c.description, c.keywords, round(score, 6)))
    return out


def run_hybrid(flow: HybridFlow, cache: VectorCache) -> list[Candidate]:
    """Drive :func:`hybrid_flow` with the cache's sync query embedding."""
    return drive(flow, lambda request: cache.embed_query(request[1]))


async def arun_hybrid(flow: HybridFlow, cache: VectorCache) -> list[Candidate]:
    """Drive :func:`hybrid_flow` with the cache's async embedding calls (the embedder's ``aembed``)."""

    def answer(request: Request) -> Awaitable[Vector]:
        return cache.aembed_query(request[1])

    return await adrive(flow, answer)
