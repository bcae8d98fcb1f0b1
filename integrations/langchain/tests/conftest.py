"""Fixtures of the LangChain integration tests."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from local_ai_memory import DirectoryGuard, MemoryConfig, close_shared_stores

sys.path.insert(0, str(Path(__file__).parent))  # lets tests and the child process import lc_fakes


@pytest.fixture
def config(tmp_path: Path) -> MemoryConfig:
    """Settings rooted in a fresh folder (fsync off: tests measure behaviour, not durability)."""
    return MemoryConfig(runtime_data_dir=tmp_path / "data", fsync=False)


@pytest.fixture
def guard(config: MemoryConfig) -> DirectoryGuard:
    return DirectoryGuard(config.runtime_data_dir)


@pytest.fixture(autouse=True)
def _no_watchers_left(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No automatic watcher here (edits behind a store's back must show at the very next
    search, not within a second), and none outlives its test."""
    monkeypatch.setenv("LOCAL_AI_MEMORY_AUTO_WATCH", "false")
    yield
    close_shared_stores()
