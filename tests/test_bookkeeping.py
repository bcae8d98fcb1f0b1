"""The library's own L0 entries (``BOOKKEEPING_KEY``): merged atomically, kept apart from the agent's state.

Integrations record there what is not the agent's state (which plan a run uses, where it
resumed, what L1 already merged); prompts built from L0 never show it.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from local_ai_memory._runtime.context import format_state
from local_ai_memory._runtime.scope import MemoryManager
from local_ai_memory._shared.config import MemoryConfig
from local_ai_memory._shared.errors import InvalidInputError
from local_ai_memory._shared.naming import DirectoryGuard
from local_ai_memory._shared.records import BOOKKEEPING_KEY
from local_ai_memory.backends import FileRuntimeBackend


@pytest.fixture
def manager(tmp_path: Path) -> MemoryManager:
    return MemoryManager(
        FileRuntimeBackend.from_config(MemoryConfig(fsync=False), DirectoryGuard(tmp_path)), MemoryConfig(fsync=False)
    ).scoped("alice", "s1")


def test_a_damaged_bookkeeping_value_is_replaced(manager: MemoryManager) -> None:
    manager.backend.update_state(manager.scope_info, lambda _: {"current_task": "ship", BOOKKEEPING_KEY: "damaged"})
    assert manager.bookkeeping() == {}
    assert manager.update_bookkeeping({"plan_id": "p"}) == {"plan_id": "p"}
    assert manager.get_state() == {"current_task": "ship"}


def test_manager_updates_bookkeeping_beside_the_state(manager: MemoryManager) -> None:
    manager.update_state({"current_task": "ship", "current_step": 2})
    assert manager.update_bookkeeping({"plan_id": "job-1"}) == {"plan_id": "job-1"}
    manager.update_bookkeeping({"resumed_from_step": 4})
    assert manager.bookkeeping() == {"plan_id": "job-1", "resumed_from_step": 4}
    assert manager.get_state() == {"current_task": "ship", "current_step": 2}
    assert format_state(manager.get_state()) == "current_task: ship\ncurrent_step: 2"
    manager.update_bookkeeping({"plan_id": None, "resumed_from_step": None})
    assert manager.bookkeeping() == {}
    assert manager.get_state() == {"current_task": "ship", "current_step": 2}
    with pytest.raises(InvalidInputError):
        manager.update_bookkeeping({"plan_id": float("nan")})
    with pytest.raises(InvalidInputError):
        manager.update_bookkeeping(["plan_id"])  # type: ignore[arg-type]


def test_the_users_writes_neither_see_nor_clobber_the_bookkeeping(manager: MemoryManager) -> None:
    manager.update_bookkeeping({"plan_id": "job-1"})
    assert manager.replace_state({"current_task": "ship"}) == {"current_task": "ship"}
    assert manager.update_state({"current_task": None}) == {}
    for bad in ({BOOKKEEPING_KEY: None}, {BOOKKEEPING_KEY: {"plan_id": "mine"}, "current_task": "x"}):
        with pytest.raises(InvalidInputError, match="bookkeeping"):
            manager.update_state(bad)
        with pytest.raises(InvalidInputError, match="bookkeeping"):
            manager.replace_state(bad)
    assert manager.get_state() == {}
    assert manager.bookkeeping() == {"plan_id": "job-1"}


async def test_async_twins(manager: MemoryManager) -> None:
    assert await manager.aupdate_bookkeeping({"plan_id": "a"}) == {"plan_id": "a"}
    assert await manager.aupdate_state({"current_task": "ship"}) == {"current_task": "ship"}
    assert await manager.areplace_state({"current_step": 1}) == {"current_step": 1}
    with pytest.raises(InvalidInputError, match="bookkeeping"):
        await manager.areplace_state({BOOKKEEPING_KEY: {}})
    assert await manager.aget_state() == {"current_step": 1}
    assert await manager.abookkeeping() == {"plan_id": "a"}


WRITER = textwrap.dedent(
    """
    import sys
    from local_ai_memory._shared.config import MemoryConfig
    from local_ai_memory._shared.naming import DirectoryGuard
    from local_ai_memory._runtime.scope import MemoryManager
    from local_ai_memory.backends import FileRuntimeBackend

    root, label = sys.argv[1], sys.argv[2]
    config = MemoryConfig(fsync=False)
    manager = MemoryManager(FileRuntimeBackend.from_config(config, DirectoryGuard(root)), config).scoped("alice", "s1")
    for n in range(100):
        if n % 2:
            manager.update_bookkeeping({f"{label}-{n}": n})
        else:
            manager.update_state({f"{label}-{n}": n})
    """
)


def test_processes_writing_state_and_bookkeeping_lose_nothing(tmp_path: Path) -> None:
    workers = [subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), f"p{i}"]) for i in range(3)]
    for worker in workers:
        assert worker.wait(timeout=120) == 0
    manager = MemoryManager(FileRuntimeBackend.from_config(MemoryConfig(), DirectoryGuard(tmp_path))).scoped(
        "alice", "s1"
    )
    assert manager.bookkeeping() == {f"p{i}-{n}": n for i in range(3) for n in range(1, 100, 2)}
    assert manager.get_state() == {f"p{i}-{n}": n for i in range(3) for n in range(0, 100, 2)}
