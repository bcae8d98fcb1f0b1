"""Fixtures of the Anthropic integration tests: a memory on a folder, and both tools as one callable."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from local_ai_memory_anthropic import AsyncLocalMemoryTool, LocalMemoryTool

from local_ai_memory import Memory

sys.path.insert(0, str(Path(__file__).parent))  # lets the tests import claude_fakes


@pytest.fixture
def memory(tmp_path: Path) -> Iterator[Memory]:
    """A memory on a fresh folder with two categories (fsync off: behaviour, not durability)."""
    with Memory.open(tmp_path / "data", fsync=False, categories=["knowledge", "projects"]) as opened:
        yield opened


Use = Callable[..., str]
"""``use(command, **fields)``: one memory command through the SDK's ``call`` entry; a ``ToolError`` is raised."""


def _sync_use(tool: LocalMemoryTool) -> Use:
    def use(command: str, **fields: Any) -> str:
        result = tool.call({"command": command, **fields})
        assert isinstance(result, str)
        return result

    return use


def _async_use(tool: AsyncLocalMemoryTool) -> Use:
    def use(command: str, **fields: Any) -> str:
        result = asyncio.run(tool.call({"command": command, **fields}))
        assert isinstance(result, str)
        return result

    return use


@pytest.fixture(params=["sync", "async"])
def tool_for(request: pytest.FixtureRequest, memory: Memory) -> Callable[[str], Use]:
    """``tool_for(user)``: the sync or the async tool of ``user``, as a :data:`Use`."""

    def make(user: str) -> Use:
        if request.param == "sync":
            return _sync_use(LocalMemoryTool(memory, user))
        return _async_use(AsyncLocalMemoryTool(memory, user))

    return make
