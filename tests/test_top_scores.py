"""``best_slots``: Stage 1's top n taken from a dense score array, exact on any scores."""

from __future__ import annotations

import numpy as np
import pytest

from local_ai_memory._knowledge.bm25 import best_slots


def _expected(scores: np.ndarray, k: int) -> set[int]:
    """Every slot scoring above zero and at least the k-th largest positive score."""
    positive = scores[scores > 0]
    if len(positive) <= k:
        return set(np.flatnonzero(scores > 0).tolist())
    kth = np.sort(positive)[::-1][k - 1]
    return set(np.flatnonzero(scores >= kth).tolist())


@pytest.mark.parametrize("size", [1, 5, 21, 2047, 4096, 50_000])
def test_best_slots_match_a_full_sort(size: int) -> None:
    rng = np.random.default_rng(size)
    sparse = np.where(rng.random(size) < 0.01, rng.random(size), 0.0)
    mostly_zero = np.zeros(size)
    mostly_zero[:3] = [0.5, 2.0, 0.5][:size]
    cases = (rng.random(size) * 7, np.round(rng.random(size) * 3, 1), np.ones(size), np.arange(size) * 1.0)
    for scores in (*cases, sparse, mostly_zero, np.zeros(size)):
        for k in {1, 2, 5, min(size, 50), size}:
            if k <= size:
                chosen = best_slots(scores, k)
                assert set(chosen.tolist()) == _expected(scores, k)
                assert len(chosen) == len(set(chosen.tolist()))
