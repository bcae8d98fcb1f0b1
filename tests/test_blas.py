"""``one_blas_thread``: numpy's BLAS runs on one thread inside the block and as before after it."""

from __future__ import annotations

import numpy as np
import pytest

from local_ai_memory._shared.blas import _controller, one_blas_thread


def test_blas_is_limited_to_one_thread_inside_the_block_only() -> None:
    threadpoolctl = pytest.importorskip("threadpoolctl")
    np.ones((4, 4)) @ np.ones(4)  # numpy's BLAS is loaded
    controller = _controller()
    assert controller is not None
    # The BLAS libraries loaded when the controller was made (numpy's, which a query uses);
    # libraries loaded later by other packages (torch) are not its concern.
    paths = {lib.filepath for lib in controller.lib_controllers if lib.user_api == "blas"}
    assert paths

    def blas_threads() -> list[int]:
        return [info["num_threads"] for info in threadpoolctl.threadpool_info() if info["filepath"] in paths]

    before = blas_threads()
    with one_blas_thread():
        assert set(blas_threads()) == {1}
        product = np.arange(12.0).reshape(3, 4) @ np.ones(4)
    assert product.tolist() == [6.0, 22.0, 38.0]
    assert blas_threads() == before
