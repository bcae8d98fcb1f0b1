"""``one_blas_thread``: BLAS runs on one thread inside the block and as before after it."""

from __future__ import annotations

import numpy as np
import pytest

from local_ai_memory._shared.blas import one_blas_thread


def test_blas_is_limited_to_one_thread_inside_the_block_only() -> None:
    threadpoolctl = pytest.importorskip("threadpoolctl")
    np.ones((4, 4)) @ np.ones(4)  # numpy's BLAS is loaded

    def blas_threads() -> list[int]:
        return [info["num_threads"] for info in threadpoolctl.threadpool_info() if info["user_api"] == "blas"]

    before = blas_threads()
    with one_blas_thread():
        assert set(blas_threads()) <= {1}
        product = np.arange(12.0).reshape(3, 4) @ np.ones(4)
    assert product.tolist() == [6.0, 22.0, 38.0]
    assert blas_threads() == before
