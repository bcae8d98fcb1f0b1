"""One BLAS thread for the short matrix products of a query, when ``threadpoolctl`` is there.

A hybrid query multiplies the user's passage matrix (tens of MB at 10k notes) by one vector.
numpy's OpenBLAS splits that product over all cores; on a machine whose cores are busy the
calling thread then waits for a helper thread that is not scheduled, and the product takes
several times its CPU time in wall time (measured: 52 ms wall for 8 ms of CPU with two
threads, 20 ms with one, on two busy cores). A memory-bound product gains little from a
second thread on an idle machine either. ``threadpoolctl`` (installed with scikit-learn, which
the ``embeddings`` extra brings) limits BLAS to one thread for the duration of a block; without
it the block runs as it would anyway.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

__all__ = ["one_blas_thread"]


@functools.cache
def _controller() -> Any:
    try:
        import threadpoolctl  # type: ignore[import-untyped, import-not-found, unused-ignore]
    except ImportError:
        return None
    try:
        return threadpoolctl.ThreadpoolController()
    except Exception:  # a controller that cannot inspect the loaded libraries: leave BLAS alone
        return None


@contextlib.contextmanager
def one_blas_thread() -> Iterator[None]:
    """Run the block with BLAS limited to one thread (no change without ``threadpoolctl``)."""
    controller = _controller()
    if controller is None:
        yield
        return
    with controller.limit(limits=1, user_api="blas"):
        yield
