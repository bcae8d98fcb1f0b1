"""The runtime conformance suite, run against the two backends the package ships."""

from __future__ import annotations

from pathlib import Path

import pytest

from local_ai_memory._backends.files.runtime import FileRuntimeBackend
from local_ai_memory._backends.memory.runtime import InMemoryRuntimeBackend
from local_ai_memory._contracts.runtime import RuntimeBackend
from local_ai_memory._shared.naming import DirectoryGuard
from local_ai_memory.testing import RuntimeBackendTests


class TestFileRuntimeBackend(RuntimeBackendTests):
    @pytest.fixture
    def backend(self, tmp_path: Path) -> RuntimeBackend:
        return FileRuntimeBackend(DirectoryGuard(tmp_path), durable=False)


class TestInMemoryRuntimeBackend(RuntimeBackendTests):
    @pytest.fixture
    def backend(self) -> RuntimeBackend:
        return InMemoryRuntimeBackend()
