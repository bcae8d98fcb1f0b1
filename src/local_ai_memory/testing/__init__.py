"""Conformance suites any storage backend can run (requires pytest, nothing else).

Subclass a suite in your own test module and give it a fixture that opens a fresh store;
every test of the suite then runs against it, over the sync methods and the async twins::

    import functools
    import pytest
    from local_ai_memory.testing import RuntimeBackendTests

    class TestMyBackend(RuntimeBackendTests):
        capabilities = frozenset({"cross_process", "durable"})  # what your backend offers

        @pytest.fixture
        def opener(self, tmp_path):  # a picklable callable that opens the same store again
            return functools.partial(MyBackend, str(tmp_path / "store.db"))

A backend without the optional capabilities (:data:`RUNTIME_CAPABILITIES`,
:data:`KNOWLEDGE_CAPABILITIES`) may give just a ``backend`` fixture; the tests of capabilities
it does not claim are skipped. Both suites name the reopening fixture ``opener``.
"""

from local_ai_memory.testing._knowledge import CAPABILITIES as KNOWLEDGE_CAPABILITIES
from local_ai_memory.testing._knowledge import KnowledgeBackendTests
from local_ai_memory.testing._runtime import CROSS_PROCESS, DURABLE, RUNTIME_CAPABILITIES, RuntimeBackendTests

__all__ = [
    "CROSS_PROCESS",
    "DURABLE",
    "KNOWLEDGE_CAPABILITIES",
    "RUNTIME_CAPABILITIES",
    "KnowledgeBackendTests",
    "RuntimeBackendTests",
]
