"""``kth_largest``: the selection threshold of Stage 1's top n, exact on any score array."""

from __future__ import annotations

import numpy as np
import pytest

from local_ai_memory._ranking import kth_largest


@pytest.mark.parametrize("size", [1, 5, 21, 2047, 4096, 50_000])
def test_kth_largest_matches_a_full_sort(size: int) -> None:
    rng = np.random.default_rng(size)
    for scores in (rng.random(size) * 7, np.round(rng.random(size) * 3, 1), np.ones(size), np.arange(size) * 1.0):
        ordered = np.sort(scores)[::-1]
        for k in {1, 2, 5, min(size, 50), size}:
            if k <= size:
                assert kth_largest(scores, k) == ordered[k - 1]
