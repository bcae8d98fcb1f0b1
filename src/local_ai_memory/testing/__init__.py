"""Conformance suites any storage backend can run (requires pytest).

Subclass a suite in your own test module and give it a ``backend`` fixture that returns a
fresh backend; every test of the suite then runs against it::

    class TestMyBackend(RuntimeBackendTests):
        @pytest.fixture
        def backend(self, tmp_path):
            return MyBackend(tmp_path)
"""

from local_ai_memory.testing._knowledge import KnowledgeBackendTests
from local_ai_memory.testing._runtime import RuntimeBackendTests

__all__ = ["KnowledgeBackendTests", "RuntimeBackendTests"]
