"""The collector pause of bulk builds (:mod:`local_ai_memory._shared.collector`): it nests across
threads, restores what it found, and moves a large build to the oldest generation."""

from __future__ import annotations

import gc
import threading

import pytest

from local_ai_memory.integration import collector_paused


def test_the_collector_pause_nests_across_threads_and_restores_what_it_found() -> None:
    assert gc.isenabled()
    inside = threading.Event()
    leave = threading.Event()

    def other() -> None:
        with collector_paused():
            inside.set()
            leave.wait(5)

    thread = threading.Thread(target=other)
    with collector_paused():
        assert not gc.isenabled()
        thread.start()
        assert inside.wait(5)
    assert not gc.isenabled()  # the other thread's load is still going: still paused
    leave.set()
    thread.join(5)
    assert gc.isenabled()
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("a failed load turns it back on too")
    assert gc.isenabled()
    gc.disable()  # switched off by the application: a load leaves it off
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def _in_generation(obj: object, generation: int) -> bool:
    return any(found is obj for found in gc.get_objects(generation=generation))


@pytest.mark.parametrize("enabled", [True, False])
def test_what_is_built_with_the_collector_paused_goes_to_the_oldest_generation(enabled: bool) -> None:
    """No young collection walks a large build's values after the pause, a small build is left
    to the collector, and the collector's state is kept."""
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        gc.collect()
        with collector_paused():
            assert not gc.isenabled()
            small = [[n] for n in range(10)]
        assert gc.isenabled() is enabled
        assert not _in_generation(small, 2)  # a small build is not moved
        with collector_paused():
            built = [[n] for n in range(20 * gc.get_threshold()[0])]
        assert gc.isenabled() is enabled
        if enabled:
            assert _in_generation(built, 2)
            assert not _in_generation(built, 0)
        else:  # nothing was paused, so nothing is moved
            assert not _in_generation(built, 2)
    finally:
        (gc.enable if was else gc.disable)()


def test_the_applications_frozen_objects_stay_frozen() -> None:
    kept = [["frozen by the application"]]
    gc.freeze()
    frozen = gc.get_freeze_count()
    try:
        with collector_paused():
            built = [[n] for n in range(20 * gc.get_threshold()[0])]
        assert gc.get_freeze_count() == frozen  # not released by the move
        assert not _in_generation(kept, 2)  # still frozen: in no generation
        assert not _in_generation(built, 2)  # the move was skipped
    finally:
        gc.unfreeze()
