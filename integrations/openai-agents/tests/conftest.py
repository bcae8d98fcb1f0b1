"""Fixtures of the OpenAI Agents SDK integration tests."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from local_ai_memory import Memory

sys.path.insert(0, str(Path(__file__).parent))  # lets the tests start agents_child.py by path


@pytest.fixture
def memory(tmp_path: Path) -> Iterator[Memory]:
    """A memory on a fresh folder (fsync off: these tests measure behaviour, not durability)."""
    with Memory.open(tmp_path / "data", fsync=False) as opened:
        yield opened
