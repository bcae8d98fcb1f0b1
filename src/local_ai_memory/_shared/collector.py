"""Python's cyclic garbage collector paused for a bulk build: one rule for every loader.

A bulk build (an index of 10k entries, a listing, a ranker snapshot, a LangGraph thread's 2,000
messages) allocates enough objects to set off collections, and a full one walks every object of
the process: measured, two of them were 80-100 ms of a fresh process's first query at 10k
notes, and most of a fresh ``get_state`` of a long thread. What these builds make holds no
reference cycles, so nothing waits for the collector meanwhile.

Sections nest across threads: the last one to end turns the collector back on, and only if it
was on when the first one began (an application that switched it off keeps it off).

Before it runs again, what a large build made (more than ten young collections' worth of
objects) goes straight to the oldest generation (``gc.freeze()`` then ``gc.unfreeze()``: two
list moves, no walk). Otherwise the first allocation after the pause sets off a young
collection that walks every object just built (6-8 ms of CPU of a fresh ``get_state`` at 1,000
steps). The values are long-lived (the caller keeps them), so that is where they belong. Other
young objects of the process move with them, so any garbage cycles among them wait for the next
full collection (hence only after large builds, where the walk costs). If the application has
frozen objects itself (``gc.get_freeze_count()``, e.g. before forking workers), the move is
skipped, because ``unfreeze`` would release those objects too.

Example::

    with collector_paused():
        entries = [parse(line) for line in lines]
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

__all__ = ["collector_paused"]

_LARGE_BUILD = 10
"""Young collections' worth of objects from which a build moves to the oldest generation."""

_lock = threading.Lock()
_depth = 0  # sections in progress that paused the collector (any thread)


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Run the block with the cyclic collector paused (see the module's docstring)."""
    global _depth
    with _lock:
        counted = _depth > 0 or gc.isenabled()  # else switched off by someone else: left so
        if counted:
            if _depth == 0:
                gc.disable()
            _depth += 1
    try:
        yield
    finally:
        if counted:
            with _lock:
                _depth -= 1
                if _depth == 0:
                    if gc.get_count()[0] > _LARGE_BUILD * gc.get_threshold()[0] and not gc.get_freeze_count():
                        gc.freeze()
                        gc.unfreeze()
                    gc.enable()
