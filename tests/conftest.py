"""Fixtures shared by the core tests."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest


class EventLog(logging.Handler):
    """Collects the library's structured events as ``(name, fields)`` pairs."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[tuple[str, dict[str, Any]]] = []

    def emit(self, record: logging.LogRecord) -> None:
        name = getattr(record, "event", None)
        if name:
            self.records.append((name, dict(getattr(record, "fields", {}))))

    def names(self) -> list[str]:
        return [name for name, _ in self.records]


@pytest.fixture
def events() -> Iterator[EventLog]:
    """Every event the library logs during the test (at DEBUG level and above)."""
    handler = EventLog()
    logger = logging.getLogger("local_ai_memory")
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(old_level)


@pytest.fixture(autouse=True)
def _no_config_from_the_shell(monkeypatch: pytest.MonkeyPatch) -> None:
    """``MemoryConfig`` reads ``LOCAL_AI_MEMORY_*`` variables: a developer's shell must not change the tests."""
    from local_ai_memory._shared.config import ENV_NAMES

    for name in ENV_NAMES.values():
        monkeypatch.delenv(name, raising=False)
    # Deleting them removed the root conftest's "no automatic watcher" too: set it again.
    monkeypatch.setenv("LOCAL_AI_MEMORY_AUTO_WATCH", "false")
