"""The conformance suites against PostgreSQL (an embedded server, see ``conftest.py``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from local_ai_memory._backends.postgres_runtime import PostgresRuntimeBackend
from local_ai_memory._backends.runtime import RuntimeBackend
from local_ai_memory.testing import RuntimeBackendTests


class TestPostgresRuntimeBackend(RuntimeBackendTests):
    @pytest.fixture
    def backend(self, postgres_url: str, postgres_schema: str) -> Iterator[RuntimeBackend]:
        backend = PostgresRuntimeBackend(postgres_url, schema=postgres_schema, pool_max_size=12)
        yield backend
        backend.close()
