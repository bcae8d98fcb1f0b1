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
    from local_ai_memory._config import ENV_NAMES

    for name in ENV_NAMES.values():
        monkeypatch.delenv(name, raising=False)
    # A watcher makes edits behind a store's back visible within a second, not to the very next
    # search, which is what most tests check right after writing a file: they run without one,
    # deterministically. tests/test_auto_watch.py turns it on (configs given in code are not
    # affected: an argument wins over the environment).
    monkeypatch.setenv("LOCAL_AI_MEMORY_AUTO_WATCH", "false")


@pytest.fixture(autouse=True)
def _no_watchers_left() -> Iterator[None]:
    """Stores watch their folders by themselves: stop those watchers after each test, so no
    thread outlives its test and the next test starts with no shared per-folder state."""
    yield
    from local_ai_memory import close_shared_stores

    close_shared_stores()
