"""Score fusion, weighted reciprocal rank fusion and cosine top-n on hand-checked examples."""

from __future__ import annotations

import numpy as np
import pytest

from local_ai_memory._knowledge.fusion import (
    convex_fusion,
    cosine_scores,
    cosine_top_n,
    reciprocal_rank_fusion,
)
from local_ai_memory._shared.errors import InvalidInputError
from local_ai_memory._shared.vectors import normalize_rows


def test_fusion_order_hand_checked() -> None:
    # a = .5/61 + .5/62 = .016261; c = .5/63 + .5/61 = .016134; b = .5/62 = .008065; d = .5/63 = .007937
    fused = reciprocal_rank_fusion(["a", "b", "c"], ["c", "a", "d"], bm25_weight=0.5, k=60)
    assert [name for name, _ in fused] == ["a", "c", "b", "d"]
    scores = dict(fused)
    assert scores["a"] == pytest.approx(0.5 / 61 + 0.5 / 62)
    assert scores["c"] == pytest.approx(0.5 / 63 + 0.5 / 61)
    assert scores["b"] == pytest.approx(0.5 / 62)
    assert scores["d"] == pytest.approx(0.5 / 63)


def test_weight_moves_the_order() -> None:
    bm25, vector = ["x", "y", "z"], ["z", "y", "x"]
    # Weight 0.9: x = .9/61 + .1/63 = .016341, y = 1/62 = .016129, z = .9/63 + .1/61 = .015925.
    assert [n for n, _ in reciprocal_rank_fusion(bm25, vector, 0.9)] == ["x", "y", "z"]
    assert [n for n, _ in reciprocal_rank_fusion(bm25, vector, 0.1)] == ["z", "y", "x"]
    assert [n for n, _ in reciprocal_rank_fusion(bm25, vector, 1.0)] == ["x", "y", "z"]
    assert [n for n, _ in reciprocal_rank_fusion(bm25, vector, 0.0)] == ["z", "y", "x"]


def test_small_k_rewards_the_top_ranks_more() -> None:
    # With k=0 rank 1 is worth twice rank 2, so p (1st in BM25 only), r (1st in vectors only) and q
    # (2nd in both) all score 0.5; the better best rank goes first, and BM25 wins equal weights.
    fused = reciprocal_rank_fusion(["p", "q"], ["r", "q"], bm25_weight=0.5, k=0)
    assert dict(fused) == {"p": pytest.approx(0.5), "q": pytest.approx(0.5), "r": pytest.approx(0.5)}
    assert [n for n, _ in fused] == ["p", "r", "q"]


def test_ties_are_deterministic() -> None:
    # Equal weights, each name first in one list: BM25's first comes first, whatever the names.
    assert [n for n, _ in reciprocal_rank_fusion(["b"], ["a"], 0.5)] == ["b", "a"]
    assert [n for n, _ in reciprocal_rank_fusion(["a", "b"], ["b", "a"], 0.5)] == ["a", "b"]
    # The vector list is heavier: its first comes first.
    assert [n for n, _ in reciprocal_rank_fusion(["b"], ["a"], 0.3)] == ["a", "b"]
    # Repeated calls give the same list.
    runs = {tuple(reciprocal_rank_fusion(["m", "n", "o"], ["o", "n", "m"], 0.5)) for _ in range(5)}
    assert len(runs) == 1


def test_duplicates_and_empty_lists() -> None:
    assert reciprocal_rank_fusion([], [], 0.5) == []
    fused = reciprocal_rank_fusion(["a", "a", "b"], [], 0.5)
    assert dict(fused)["a"] == pytest.approx(0.5 / 61)
    assert dict(fused)["b"] == pytest.approx(0.5 / 63)


@pytest.mark.parametrize(("weight", "k"), [(-0.1, 60), (1.5, 60), (0.5, -1), (0.5, 1.5), (0.5, True)])
def test_bad_arguments(weight: float, k: int) -> None:
    with pytest.raises(InvalidInputError):
        reciprocal_rank_fusion(["a"], ["b"], weight, k)


def test_cosine_top_n_hand_checked() -> None:
    matrix = np.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0], [0.0, 0.0], [3.0, 0.0]])
    top = cosine_top_n(matrix, np.array([1.0, 0.0]), 3)
    # rows 0 and 4 both have cosine 1 (tie broken by index), then row 2 with 1/sqrt(2)
    assert [i for i, _ in top] == [0, 4, 2]
    assert top[2][1] == pytest.approx(2**-0.5, rel=1e-6)
    assert cosine_scores(matrix, [1.0, 0.0])[3] == 0.0
    assert cosine_top_n(matrix, [0.0, 0.0], 2) == [(0, 0.0), (1, 0.0)]
    assert len(cosine_top_n(matrix, [1.0, 0.0], 50)) == 5
    assert cosine_top_n(matrix, [1.0, 0.0], 0) == []
    assert cosine_top_n(np.zeros((0, 2)), [1.0, 0.0], 3) == []
    with pytest.raises(InvalidInputError):
        cosine_top_n(matrix, [1.0, 0.0, 0.0], 2)


def test_cosine_top_n_matches_a_full_sort() -> None:
    rng = np.random.default_rng(7)
    matrix = rng.normal(size=(2000, 16)).astype(np.float32)
    query = rng.normal(size=16).astype(np.float32)
    unit = normalize_rows(matrix)
    expected = sorted(range(2000), key=lambda i: (-float(unit[i] @ (query / np.linalg.norm(query))), i))[:10]
    assert [i for i, _ in cosine_top_n(matrix, query, 10)] == expected
    assert np.allclose(np.linalg.norm(normalize_rows(matrix), axis=1), 1.0, atol=1e-5)


def test_convex_fusion_weighs_normalized_scores() -> None:
    bm25 = [("a", 9.0), ("b", 5.0), ("c", 1.0)]
    vector = [("a", 0.1), ("b", 0.9), ("c", 0.5), ("d", 0.3)]
    fused = dict(convex_fusion(bm25, vector, bm25_weight=0.5))
    # a: bm25 1.0, cosine 0.0; b: 0.5 + 1.0; c: 1/9 + 0.5; d: 0 + 0.25 (not returned by BM25)
    assert fused["a"] == pytest.approx(0.5)
    assert fused["b"] == pytest.approx(0.5 * 5 / 9 + 0.5)
    assert fused["c"] == pytest.approx(0.5 * 1 / 9 + 0.25)
    assert fused["d"] == pytest.approx(0.5 * 0.25)
    assert [n for n, _ in convex_fusion(bm25, vector, 0.5)] == ["b", "a", "c", "d"]
    assert all(0.0 <= s <= 1.0 for _, s in convex_fusion(bm25, vector, 0.7))


def test_convex_fusion_extremes_follow_one_list_and_ties_are_deterministic() -> None:
    bm25 = [("x", 3.0), ("y", 2.0), ("z", 1.0)]
    vector = [("x", 0.1), ("y", 0.2), ("z", 0.3)]
    assert [n for n, _ in convex_fusion(bm25, vector, 1.0)] == ["x", "y", "z"]
    assert [n for n, _ in convex_fusion(bm25, vector, 0.0)] == ["z", "y", "x"]
    # Equal fused scores: the better BM25 rank first, then the name.
    assert [n for n, _ in convex_fusion([("q", 1.0), ("p", 1.0)], [("p", 0.5), ("q", 0.5)], 0.5)] == ["q", "p"]
    assert convex_fusion([], [], 0.5) == []
    assert [n for n, _ in convex_fusion([], [("m", 0.2), ("k", 0.9)], 0.5)] == ["k", "m"]
    with pytest.raises(InvalidInputError):
        convex_fusion(bm25, vector, 1.5)


def test_confident_weight_follows_how_far_bm25s_first_answer_stands_above_its_last() -> None:
    from local_ai_memory._knowledge.fusion import confident_weight

    # A flat head (a question in other words than the note's): the dense side leads almost alone.
    assert confident_weight([10.0, 9.9, 9.5, 9.0], 0.5) == pytest.approx(0.5 + 0.475 * (2 * 0.1 - 1))
    # Two notes share the named words and the rest is far below: BM25 leads, though its first
    # two nearly tie (the gap to the second alone would have called this unsure).
    assert confident_weight([10.0, 9.9, 2.0], 0.5) == pytest.approx(0.5 + 0.475 * (2 * 0.8 - 1))
    assert confident_weight([10.0, 5.0], 0.5) == pytest.approx(0.5)
    assert confident_weight([3.0], 0.5) == pytest.approx(0.975)  # below 1: the dense side still orders the rest
    assert confident_weight([], 0.5) == pytest.approx(0.025)
    assert confident_weight([10.0, 1.0], 0.0) == 0.0  # the ends stay pure
    assert confident_weight([10.0, 9.9], 1.0) == 1.0
    assert confident_weight([10.0, 9.0, 0.0], 0.2) == pytest.approx(0.2 + 0.19)
    with pytest.raises(InvalidInputError):
        confident_weight([1.0], 1.5)


def _fused_first(bm25: list[float], dense_best: int) -> str:
    """The first note of :func:`.search.hybrid_flow` over 12 one-passage notes ``n0``..``n11``:
    BM25 returns ``n0``..``n{len(bm25)-1}`` with ``bm25`` scores, the dense side likes ``n{dense_best}``
    best (cosine 0.9) and the BM25 ones in their order behind it (0.5 down to 0.4)."""
    from local_ai_memory._knowledge.dense import DenseMatrix
    from local_ai_memory._knowledge.index_file import IndexEntry
    from local_ai_memory._knowledge.search import candidate_of, hybrid_flow
    from local_ai_memory._shared.drive import drive

    entries = [IndexEntry(filename=f"n{i}.md", category="k", title=f"n{i}") for i in range(12)]
    cosines = np.full(12, 0.1, dtype=np.float32)
    cosines[: len(bm25)] = np.linspace(0.5, 0.4, len(bm25))
    cosines[dense_best] = 0.9
    # unit passage rows whose cosine with the query [1, 0] is exactly ``cosines``
    rows = np.stack([cosines, np.sqrt(1.0 - cosines**2)], axis=1).astype(np.float32)
    dense = DenseMatrix(entries, rows, np.arange(12, dtype=np.int64))
    lexical = [candidate_of(entries[i], score) for i, score in enumerate(bm25)]
    flow = hybrid_flow("q", lexical, dense, 10, 10, 0.5)
    found = drive(flow, lambda request: np.array([1.0, 0.0], dtype=np.float32))
    return found[0].filename


def test_hybrid_keeps_bm25s_pair_far_above_the_rest_and_follows_dense_on_a_flat_head() -> None:
    # Two notes share the named words, far above the other eight: a known item, BM25 keeps it
    # first although its first two nearly tie (the old rule, gap to the second, let dense win).
    assert _fused_first([10.0, 9.9, 2.0, 1.9, 1.8, 1.7, 1.6, 1.5, 1.4, 1.3], dense_best=9) == "n0.md"
    # A flat head (common words in long notes): the note the dense side is sure of comes first.
    assert _fused_first([10.0, 9.0, 8.9, 8.8, 8.7, 8.6, 8.5, 8.4, 8.3, 8.2], dense_best=11) == "n11.md"


def test_dense_share_keeps_the_dense_sides_share_of_places_from_the_second_on() -> None:
    from local_ai_memory._knowledge.fusion import dense_share

    fused = [("b1", 1.0), ("b2", 0.9), ("b3", 0.8), ("d1", 0.7), ("d2", 0.6), ("d3", 0.5), ("d4", 0.4)]
    dense = ["d1", "d2", "d3", "d4", "b1"]
    # At 0.25 the dense side is owed round(0.75 n) of the first n places from the second on
    # (2 of 2, 2 of 3, 3 of 4, 4 of 5): BM25 keeps the first place and then one in five.
    assert [n for n, _ in dense_share(fused, dense, 0.25)] == ["b1", "d1", "d2", "d3", "d4", "b2", "b3"]
    # A note moved up takes the score of the place it took: scores stay best first.
    scores = [s for _, s in dense_share(fused, dense, 0.25)]
    assert scores == sorted(scores, reverse=True)
    assert dict(dense_share(fused, dense, 0.25))["d1"] == 0.9
    # BM25 at 1 keeps the fused order; at 0 the dense order follows the fused first place.
    assert dense_share(fused, dense, 1.0) == fused
    assert [n for n, _ in dense_share(fused, dense, 0.0)][:5] == ["b1", "d1", "d2", "d3", "d4"]
    # A sure BM25 (0.9) is owed nothing before five places, then one: the fused head stays.
    assert [n for n, _ in dense_share(fused, dense, 0.9)] == [n for n, _ in fused]
    # Names the fused list does not hold are skipped; empty lists stay empty.
    assert [n for n, _ in dense_share([("a", 1.0), ("b", 0.5)], ["x", "b"], 0.0)] == ["a", "b"]
    assert dense_share([], ["x"], 0.5) == []
    with pytest.raises(InvalidInputError):
        dense_share(fused, dense, -0.1)


def test_a_weak_bm25_lift_no_longer_pushes_the_dense_sides_fourth_out_of_the_first_five() -> None:
    """A flat BM25 head (weight about 0.25) over notes the dense side ranks 6th to 8th: the
    z-score sum alone lifted n5, n6 and n7 into the first five, over the dense side's 4th; with
    the dense side's share of places (4 of the first 5) its first four stay there."""
    from local_ai_memory._knowledge.dense import DenseMatrix
    from local_ai_memory._knowledge.index_file import IndexEntry
    from local_ai_memory._knowledge.search import candidate_of, hybrid_flow
    from local_ai_memory._shared.drive import drive

    entries = [IndexEntry(filename=f"n{i}.md", category="k", title=f"n{i}") for i in range(12)]
    # The dense order is n0 > n1 > ... > n11; BM25's flat head (its 10th at 0.74 of its first:
    # weight about 0.26) is n5, n6, n7 (the dense side's 6th to 8th), then n8.. and n0..n2.
    cosines = np.array([0.60, 0.58, 0.56, 0.54, 0.53, 0.50, 0.49, 0.48, 0.40, 0.39, 0.38, 0.37], dtype=np.float32)
    rows = np.stack([cosines, np.sqrt(1.0 - cosines**2)], axis=1).astype(np.float32)
    dense = DenseMatrix(entries, rows, np.arange(12, dtype=np.int64))
    bm25 = [10.0, 9.9, 9.8, 9.0, 8.5, 8.0, 7.8, 7.6, 7.5, 7.4]
    order = [5, 6, 7, 8, 9, 10, 11, 0, 1, 2]
    lexical = [candidate_of(entries[i], score) for i, score in zip(order, bm25, strict=True)]
    found = drive(hybrid_flow("q", lexical, dense, 10, 10, 0.5), lambda request: np.array([1.0, 0.0], dtype=np.float32))
    first_five = [c.filename for c in found[:5]]
    assert {"n0.md", "n1.md", "n2.md", "n3.md"} <= set(first_five), first_five
    scores = [c.score for c in found]
    assert scores == sorted(scores, reverse=True)


def test_bm25s_confidence_is_read_at_its_tenth_answer_whatever_the_pool() -> None:
    """hybrid_flow reads BM25's weight from its first ten answers (the store passes at least
    ten): a pool of 20 follows the dense side on a flat BM25 head as a pool of 10 does. Read at
    the pool's last answer, the 20th (far below), the weight rose to BM25's side with the pool."""
    from local_ai_memory._knowledge.dense import DenseMatrix
    from local_ai_memory._knowledge.index_file import IndexEntry
    from local_ai_memory._knowledge.search import candidate_of, hybrid_flow
    from local_ai_memory._shared.drive import drive

    entries = [IndexEntry(filename=f"n{i}.md", category="k", title=f"n{i}") for i in range(30)]
    cosines = np.full(30, 0.1, dtype=np.float32)
    cosines[:20] = np.linspace(0.5, 0.4, 20)
    cosines[29] = 0.9  # the note the dense side is sure of; BM25 does not return it
    rows = np.stack([cosines, np.sqrt(1.0 - cosines**2)], axis=1).astype(np.float32)
    dense = DenseMatrix(entries, rows, np.arange(30, dtype=np.int64))
    # BM25: a flat head (its 10th at 0.7 of its first: c = 0.3), its 20th at 0.05 (c = 0.95).
    bm25 = [*np.linspace(10.0, 7.0, 10), *np.linspace(1.0, 0.5, 10)]
    lexical = [candidate_of(entries[i], float(score)) for i, score in enumerate(bm25)]

    def first(pool: int) -> str:
        flow = hybrid_flow("q", lexical[: max(pool, 10)], dense, pool, 10, 0.5)
        return drive(flow, lambda request: np.array([1.0, 0.0], dtype=np.float32))[0].filename

    assert first(10) == first(20) == "n29.md"


def test_a_dense_candidate_bm25_ranks_just_below_its_pool_keeps_its_bm25_score() -> None:
    """n20 is the dense side's near-tied second and BM25's 11th, just below its 10th: read
    from BM25's first 50 answers it fuses with its own score and leads; with only the pool
    read (the old flow) it counted as sharing no word with the query and came second."""
    from local_ai_memory._knowledge.dense import DenseMatrix
    from local_ai_memory._knowledge.index_file import IndexEntry
    from local_ai_memory._knowledge.search import candidate_of, hybrid_flow
    from local_ai_memory._shared.drive import drive

    entries = [IndexEntry(filename=f"n{i}.md", category="k", title=f"n{i}") for i in range(24)]
    cosines = np.full(24, 0.40, dtype=np.float32)
    cosines[:10] = [0.60, 0.54, 0.53, 0.52, 0.51, 0.50, 0.49, 0.48, 0.47, 0.46]
    cosines[20] = 0.59
    rows = np.stack([cosines, np.sqrt(1.0 - cosines**2)], axis=1).astype(np.float32)
    dense = DenseMatrix(entries, rows, np.arange(24, dtype=np.int64))
    # BM25: a flat head n10..n19 (20 down to 15.5), then n20 at 15.4, then three far below.
    bm25 = [*((10 + i, 20.0 - 0.5 * i) for i in range(10)), (20, 15.4), (21, 3.0), (22, 2.5), (23, 2.0)]
    lexical = [candidate_of(entries[i], score) for i, score in bm25]

    def first(answers: int) -> str:
        flow = hybrid_flow("q", lexical[:answers], dense, 10, 10, 0.5)
        return drive(flow, lambda request: np.array([1.0, 0.0], dtype=np.float32))[0].filename

    assert first(len(lexical)) == "n20.md"
    assert first(10) == "n0.md"  # what the store passed before: the pool alone
