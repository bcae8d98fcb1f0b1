"""The runtime conformance suite on the file and in-memory backends (PostgreSQL: test_postgres_conformance.py)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import ClassVar

import pytest

from local_ai_memory._backends.files.runtime import FileRuntimeBackend
from local_ai_memory._backends.memory.runtime import InMemoryRuntimeBackend
from local_ai_memory._contracts.runtime import RuntimeBackend
from local_ai_memory._shared.naming import DirectoryGuard
from local_ai_memory.testing import CROSS_PROCESS, DURABLE, RuntimeBackendTests
from local_ai_memory.testing._processes import Opener


class TestFileRuntimeBackend(RuntimeBackendTests):
    capabilities: ClassVar[frozenset[str]] = frozenset({CROSS_PROCESS, DURABLE})

    @pytest.fixture
    def opener(self, tmp_path: Path) -> Opener:
        return functools.partial(FileRuntimeBackend, DirectoryGuard(tmp_path), durable=False)


class TestInMemoryRuntimeBackend(RuntimeBackendTests):
    """Lives in one process's memory: neither shared between processes nor durable."""

    @pytest.fixture
    def backend(self) -> RuntimeBackend:
        return InMemoryRuntimeBackend()
