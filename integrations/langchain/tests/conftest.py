"""Fixtures of the LangChain integration tests."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from local_ai_memory import DirectoryGuard, MemoryConfig

sys.path.insert(0, str(Path(__file__).parent))  # lets tests and the child process import lc_fakes


@pytest.fixture
def config(tmp_path: Path) -> MemoryConfig:
    """Settings rooted in a fresh folder (fsync off: tests measure behaviour, not durability)."""
    return MemoryConfig(runtime_data_dir=tmp_path / "data", fsync=False)


@pytest.fixture
def guard(config: MemoryConfig) -> DirectoryGuard:
    return DirectoryGuard(config.runtime_data_dir)
