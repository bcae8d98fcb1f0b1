"""Pure ranking maths for hybrid Stage 1: score fusion, reciprocal rank fusion and cosine top-n.

Hybrid search ranks the asking user's files twice, once by BM25 and once by embedding
similarity, and merges the two lists. :func:`standard_fusion` (what hybrid search uses) puts
both scores on one scale by their z-scores over the candidates and adds them with weights
``bm25_weight`` and ``1 - bm25_weight``; :func:`confident_weight` sets that weight per query
from how far BM25's first answer stands above its 10th, and :func:`dense_share` then keeps the
dense side's share of the places. :func:`convex_fusion` (min-max instead of z-scores) was the
first rule. Measured on three corpora (``benchmarks/bench_quality.py``) score fusion beat
reciprocal rank fusion, which looks only at positions and let a weak vector ranking push good
BM25 answers down. Issue 45's proposal, RRF (k=60) of the whole-note vector's ranking, the best
passage's and BM25's at half weight, was checked on every set (``benchmarks/
bench_passage_cap.py --fusions``, 400 man pages, 257 passages a note; R@5 / MRR@10) and lost to
this rule everywhere: held-out natural questions ``held_out`` .842 / .701 against .877 / .732,
``fresh`` .727 / .708 against .741 / .755, ``fresh2`` .762 / .668 against .812 / .733,
``fresh3`` .689 / .641 against .746 / .676; known items ``stdlib`` .885 / .734 against .949 /
.827, ``readmes`` .857 / .778 against .902 / .819 (and at every lower passage cap too).

:func:`reciprocal_rank_fusion` (RRF) is kept for callers that only have rankings: each list
contributes ``weight / (k + rank)`` for every name it holds (``rank`` starts at 1);
BM25 gets ``bm25_weight`` and the vector list ``1 - bm25_weight``::

    >>> reciprocal_rank_fusion(["a", "b"], ["b", "c"], bm25_weight=0.5, k=60)[0][0]
    'b'

Ties are broken deterministically: the name with the better (smaller) best rank in either
list first, then the one the heavier list holds at that rank (BM25 when the weights are
equal), then by name. Nothing here touches the disk or a model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from local_ai_memory._shared.errors import InvalidInputError

__all__ = [
    "CONFIDENCE_DEPTH",
    "CONFIDENT_GAP",
    "CONFIDENT_SWING",
    "DEFAULT_RRF_K",
    "confident_weight",
    "convex_fusion",
    "cosine_scores",
    "cosine_top_n",
    "dense_share",
    "reciprocal_rank_fusion",
    "standard_fusion",
    "top_rows",
    "unit_scores",
]

DEFAULT_RRF_K = 60
CONFIDENT_GAP = 1.0
"""BM25 is fully sure of its first answer when the last of its candidates scores this share below it."""
CONFIDENT_SWING = 0.95
"""How far the per-query weight may move from ``bm25_weight``, as a share of the way to 0 or 1."""
CONFIDENCE_DEPTH = 10
"""BM25's answers :func:`confident_weight` reads: its first 10, whatever pool hybrid search fuses."""


def _positions(ranked: Sequence[str]) -> dict[str, int]:
    """1-based rank of each name (the first occurrence counts when a name repeats)."""
    out: dict[str, int] = {}
    for position, name in enumerate(ranked, start=1):
        out.setdefault(name, position)
    return out


def reciprocal_rank_fusion(
    bm25_ranked: list[str], vector_ranked: list[str], bm25_weight: float, k: int = DEFAULT_RRF_K
) -> list[tuple[str, float]]:
    """Fuse two best-first name lists into ``[(name, score)]``, best first.

    ``score = bm25_weight / (k + bm25_rank) + (1 - bm25_weight) / (k + vector_rank)``, where a
    list that does not hold the name contributes nothing. With ``bm25_weight=1`` the result is
    the BM25 order (vector-only names follow with score 0); with ``0`` it is the vector order.
    """
    _check_weight(bm25_weight)
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise InvalidInputError(f"k must be a non-negative integer, got {k!r}")
    vector_weight = 1.0 - bm25_weight
    lexical = _positions(bm25_ranked)
    semantic = _positions(vector_ranked)
    missing = len(bm25_ranked) + len(vector_ranked) + 1
    keyed: list[tuple[float, int, int, str]] = []
    for name in {**lexical, **semantic}:
        lex_rank = lexical.get(name)
        sem_rank = semantic.get(name)
        score = 0.0
        if lex_rank is not None:
            score += bm25_weight / (k + lex_rank)
        if sem_rank is not None:
            score += vector_weight / (k + sem_rank)
        best = min(lex_rank or missing, sem_rank or missing)
        # 0 when the heavier list (BM25 on equal weights) holds the name at its best rank.
        heavier_is_bm25 = bm25_weight >= vector_weight
        held_by_heavier = (lex_rank == best) if heavier_is_bm25 else (sem_rank == best)
        keyed.append((-score, best, 0 if held_by_heavier else 1, name))
    keyed.sort()
    return [(name, -neg_score) for neg_score, _, _, name in keyed]


def _check_weight(bm25_weight: float) -> None:
    if not 0.0 <= bm25_weight <= 1.0:
        raise InvalidInputError(f"bm25_weight must be between 0 and 1, got {bm25_weight!r}")


def _unit_range(values: dict[str, float]) -> dict[str, float]:
    """``values`` scaled to 0..1 by min-max; all equal (or one) map to 1."""
    if not values:
        return {}
    low, high = min(values.values()), max(values.values())
    if high <= low:
        return dict.fromkeys(values, 1.0)
    return {name: (value - low) / (high - low) for name, value in values.items()}


def _weighted(
    bm25_scored: Sequence[tuple[str, float]],
    vector_scored: Sequence[tuple[str, float]],
    bm25_weight: float,
    normalize: Callable[[dict[str, float]], dict[str, float]],
) -> list[tuple[str, float]]:
    """The rule both fusions share: candidates are the names of either list, a name BM25 did
    not return scores 0 there, one without a vector score the lowest given; each side is put on
    one scale by ``normalize``, then weighted. Best first; ties: better BM25 rank, then name."""
    _check_weight(bm25_weight)
    lexical = dict(bm25_scored)
    semantic = dict(vector_scored)
    names = list(dict.fromkeys([*lexical, *semantic]))
    if not names:
        return []
    floor = min(semantic.values()) if semantic else 0.0
    lex = normalize({n: lexical.get(n, 0.0) for n in names})
    sem = normalize({n: semantic.get(n, floor) for n in names})
    order = {name: i for i, name in enumerate(lexical)}
    fused = [(bm25_weight * lex[n] + (1.0 - bm25_weight) * sem[n], n) for n in names]
    fused.sort(key=lambda item: (-item[0], order.get(item[1], len(order)), item[1]))
    return [(name, score) for score, name in fused]


def convex_fusion(
    bm25_scored: Sequence[tuple[str, float]], vector_scored: Sequence[tuple[str, float]], bm25_weight: float
) -> list[tuple[str, float]]:
    """Fuse two scored lists into ``[(name, score)]``, best first, scores between 0 and 1.

    Candidates are the names of either list. A name's BM25 score is 0 when BM25 did not
    return it; a name's vector score must be given for every candidate the caller can score
    (pass all of them in ``vector_scored``; missing ones count as the lowest given). Each side
    is min-max normalized over the candidates, then
    ``score = bm25_weight * bm25 + (1 - bm25_weight) * vector``. Ties: better BM25 rank, then name.
    """
    return _weighted(bm25_scored, vector_scored, bm25_weight, _unit_range)


def _standard(values: dict[str, float]) -> dict[str, float]:
    """``values`` as z-scores (mean 0, standard deviation 1); all equal map to 0."""
    if not values:
        return {}
    array = np.fromiter(values.values(), dtype=np.float64, count=len(values))
    spread = float(array.std())
    mean = float(array.mean())
    if spread <= 0.0:
        return dict.fromkeys(values, 0.0)
    return {name: (value - mean) / spread for name, value in values.items()}


def standard_fusion(
    bm25_scored: Sequence[tuple[str, float]], vector_scored: Sequence[tuple[str, float]], bm25_weight: float
) -> list[tuple[str, float]]:
    """Fuse two scored lists by z-scores: what hybrid search uses.

    Like :func:`convex_fusion` (same candidates, same missing-score rules, same ties), but each
    side is put on one scale by its mean and standard deviation over the candidates instead of
    its minimum and maximum: one outlier (a BM25 score far above the rest on a word-for-word
    match, or one very close passage) no longer squeezes the other candidates of its side
    together. The fused value is then scaled to 0..1 (best 1) for the caller; the order is
    that of ``bm25_weight * z(bm25) + (1 - bm25_weight) * z(vector)``.

    Measured (``benchmarks/bench_natural_questions.py``, dev split, 1,000 man pages; and the
    known-item ``stdlib`` set of ``bench_quality.py``) with passage max as the vector score: at
    weight 0.5, recall@5 / MRR@10 .753 / .664 on natural questions (min-max at 0.8, the old
    default: .680 / .565; min-max at 0.5: .691 / .639) and .929 / .793 on known items (min-max
    at 0.8: .917 / .805). Lower weights gain on questions and lose on known items.
    """
    fused = _weighted(bm25_scored, vector_scored, bm25_weight, _standard)
    scaled = _unit_range(dict(fused))
    return [(name, scaled[name]) for name, _ in fused]


def confident_weight(bm25_scores: Sequence[float], bm25_weight: float) -> float:
    """The BM25 weight for one query: ``bm25_weight`` moved by how sure BM25 is of its first answer.

    ``bm25_scores`` are BM25's scores of its candidates, best first. Its confidence is how far
    the first stands above the last, ``c = min(1, (first - last) / first / CONFIDENT_GAP)``
    (1 with a single answer, 0 with none); the weight is ``bm25_weight + swing * (2c - 1)``
    where ``swing = CONFIDENT_SWING * min(bm25_weight, 1 - bm25_weight)``: about ``c`` itself
    around the default 0.5 (0.025 to 0.975), and exactly 0 or 1 stay pure dense or pure BM25.

    Why: a query that names its note (a known item: the words of the note) gives BM25 a first
    answer well above the rest of its candidates; a question asked in other words than the
    note's gives BM25 a flat head (common words matched by long notes), where the dense side
    knows better and should lead almost alone. The gap to the last (hybrid search passes BM25's
    first :data:`CONFIDENCE_DEPTH` answers, whatever its pool, so the weight does not shift with
    ``memory.hybrid_top_n``) measured better than the gap to the second, which is small whenever
    two notes share the named words. Measured (``benchmarks/bench_natural_questions.py --notes 400``, dev
    questions, R@5 / MRR@10; ``bench_quality.py`` known-item sets), the gap to the second with a
    0.3-0.7 swing against this rule: natural questions .865 / .750 against .895 / .756, known
    items ``stdlib`` .917 / .814 against .929 / .824 (the CHANGELOG has ``readmes`` and the rules
    that lost).
    """
    _check_weight(bm25_weight)
    if not bm25_scores:
        confidence = 0.0
    elif len(bm25_scores) == 1 or bm25_scores[0] <= 0.0:
        confidence = 1.0 if bm25_scores[0] > 0.0 else 0.0
    else:
        gap = (bm25_scores[0] - bm25_scores[-1]) / bm25_scores[0]
        confidence = min(1.0, max(0.0, gap / CONFIDENT_GAP))
    swing = CONFIDENT_SWING * min(bm25_weight, 1.0 - bm25_weight)
    return min(1.0, max(0.0, bm25_weight + swing * (2.0 * confidence - 1.0)))


def dense_share(
    fused: Sequence[tuple[str, float]], dense_ranked: Sequence[str], bm25_weight: float
) -> list[tuple[str, float]]:
    """``fused`` (best first) reordered so that BM25 takes no more than its weight's share of places.

    The dense side is owed ``floor((1 - bm25_weight) * n + 0.5)`` of the first ``n`` places, as
    its own first answers (``dense_ranked``, best first; names not in ``fused`` are skipped).
    From the second place on, place ``n`` goes to the best of those not placed yet while fewer
    are, with the score of the note it moved down (so scores stay best first); else to the
    next fused note. The first place stays the best fused score (a share of one place would turn
    the weight into a switch at 0.5). ``bm25_weight`` 0 gives the dense order after the first
    place, 1 leaves ``fused`` as it is.

    Why: in the z-score sum, being among BM25's candidates at all is worth about two standard
    deviations against the notes it did not return, so even at a weight of 0.25 (a flat BM25
    head, :func:`confident_weight`) BM25's candidates that the dense side ranks 6th to 8th pass
    the relevant notes it ranks 4th and 5th. The weight says how much BM25 counts for the query;
    the share says it in places too. The figures are with :func:`.search.hybrid_flow`.
    """
    _check_weight(bm25_weight)
    share = 1.0 - bm25_weight
    present = {name for name, _ in fused}
    dense = [name for name in dict.fromkeys(dense_ranked) if name in present]
    rest = list(fused)
    out: list[tuple[str, float]] = []
    placed: set[str] = set()
    while rest:
        places = len(out) + 1
        owed = int(share * places + 0.5) if places > 1 else 0
        missing = next((name for name in dense[:owed] if name not in placed), None)
        if missing is None:
            name, score = rest.pop(0)
        else:
            score = rest[0][1]
            rest = [item for item in rest if item[0] != missing]
            name = missing
        out.append((name, score))
        placed.add(name)
    return out


def cosine_scores(matrix: npt.ArrayLike, query: npt.ArrayLike) -> npt.NDArray[np.float32]:
    """Cosine similarity of ``query`` with every row of ``matrix`` (zero rows score 0)."""
    rows = np.asarray(matrix, dtype=np.float32)
    vector = np.asarray(query, dtype=np.float32).reshape(-1)
    if rows.ndim != 2:
        raise InvalidInputError(f"expected a 2-D matrix of vectors, got {rows.ndim} dimensions")
    if rows.shape[0] == 0:
        return np.zeros(0, dtype=np.float32)
    if rows.shape[1] != vector.shape[0]:
        raise InvalidInputError(f"query has dimension {vector.shape[0]}, the matrix {rows.shape[1]}")
    qnorm = float(np.linalg.norm(vector))
    if qnorm == 0.0:
        return np.zeros(rows.shape[0], dtype=np.float32)
    norms = np.linalg.norm(rows, axis=1)
    norms[norms == 0] = np.inf
    scores: npt.NDArray[np.float32] = ((rows @ vector) / (norms * qnorm)).astype(np.float32, copy=False)
    return scores


def unit_scores(matrix: npt.NDArray[np.float32], query: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """Cosine similarity of unit ``query`` with every unit row of ``matrix``: one matrix-vector
    product, for vectors already normalized (as the embedding cache gives them; zero rows score 0).
    """
    if matrix.ndim != 2 or query.ndim != 1:
        raise InvalidInputError(f"expected a matrix and a vector, got {matrix.ndim} and {query.ndim} dimensions")
    if matrix.shape[0] == 0:
        return np.zeros(0, dtype=np.float32)
    if matrix.shape[1] != query.shape[0]:
        raise InvalidInputError(f"query has dimension {query.shape[0]}, the matrix {matrix.shape[1]}")
    scores: npt.NDArray[np.float32] = matrix @ query
    return scores


def top_rows(scores: npt.NDArray[np.float32], n: int) -> list[int]:
    """Indexes of the ``n`` highest ``scores``, best first, ties by index.

    A partial sort, so it stays fast for 100k rows.
    """
    total = scores.shape[0]
    if n <= 0 or total == 0:
        return []
    if n < total:
        # Everything at least as good as the n-th best, so ties at the cut are ordered by index.
        cut = np.argpartition(-scores, n - 1)[:n]
        chosen = np.flatnonzero(scores >= scores[cut].min())
    else:
        chosen = np.arange(total)
    order = np.lexsort((chosen, -scores[chosen].astype(np.float64)))
    return [int(i) for i in chosen[order][:n]]


def cosine_top_n(matrix: npt.ArrayLike, query: npt.ArrayLike, n: int) -> list[tuple[int, float]]:
    """The ``n`` rows most similar to ``query``: ``[(row_index, cosine)]`` best first, ties by index."""
    if n <= 0:
        return []
    scores = cosine_scores(matrix, query)
    return [(row, float(scores[row])) for row in top_rows(scores, n)]
