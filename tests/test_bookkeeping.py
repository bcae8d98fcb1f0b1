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
    manager.replace_state({"current_task": "ship", BOOKKEEPING_KEY: "damaged"})
    assert manager.update_bookkeeping({"plan_id": "p"}) == {"current_task": "ship", BOOKKEEPING_KEY: {"plan_id": "p"}}


def test_manager_updates_bookkeeping_beside_the_state(manager: MemoryManager) -> None:
    manager.update_state({"current_task": "ship", "current_step": 2})
    state = manager.update_bookkeeping({"plan_id": "job-1"})
    assert state == {"current_task": "ship", "current_step": 2, BOOKKEEPING_KEY: {"plan_id": "job-1"}}
    manager.update_bookkeeping({"resumed_from_step": 4})
    assert manager.get_state()[BOOKKEEPING_KEY] == {"plan_id": "job-1", "resumed_from_step": 4}
    assert format_state(manager.get_state()) == "current_task: ship\ncurrent_step: 2"
    manager.update_bookkeeping({"plan_id": None, "resumed_from_step": None})
    assert manager.get_state() == {"current_task": "ship", "current_step": 2, BOOKKEEPING_KEY: {}}
    with pytest.raises(InvalidInputError):
        manager.update_bookkeeping({"plan_id": float("nan")})
    with pytest.raises(InvalidInputError):
        manager.update_bookkeeping(["plan_id"])  # type: ignore[arg-type]


async def test_async_twin(manager: MemoryManager) -> None:
    await manager.aupdate_bookkeeping({"plan_id": "a"})
    assert (await manager.aget_state()) == {BOOKKEEPING_KEY: {"plan_id": "a"}}


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
    state = (
        MemoryManager(FileRuntimeBackend.from_config(MemoryConfig(), DirectoryGuard(tmp_path)))
        .scoped("alice", "s1")
        .get_state()
    )
    books = state.pop(BOOKKEEPING_KEY)
    assert books == {f"p{i}-{n}": n for i in range(3) for n in range(1, 100, 2)}
    assert state == {f"p{i}-{n}": n for i in range(3) for n in range(0, 100, 2)}
