"""Fixtures of the LangChain integration tests."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from local_ai_memory import Memory, MemoryConfig

sys.path.insert(0, str(Path(__file__).parent))  # lets tests and the child process import lc_fakes


@pytest.fixture
def config(tmp_path: Path) -> MemoryConfig:
    """Settings rooted in a fresh folder (fsync off: tests measure behaviour, not durability)."""
    return MemoryConfig(runtime_data_dir=tmp_path / "data", fsync=False)


@pytest.fixture
def memory(config: MemoryConfig) -> Iterator[Memory]:
    """The memory on :func:`config`'s folder, closed after the test."""
    with Memory(config) as opened:
        yield opened
