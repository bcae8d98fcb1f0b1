"""The SQLite example knowledge backend (examples/sqlite_backend/knowledge.py) passes the whole
knowledge kit, cross-process and durability included, and imports only public names."""

from __future__ import annotations

import ast
import functools
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
if str(EXAMPLES) not in sys.path:  # importable by name, so child processes can unpickle the factory
    sys.path.insert(0, str(EXAMPLES))

from sqlite_backend.knowledge import SqliteKnowledgeBackend  # noqa: E402

from local_ai_memory.backends import KnowledgeBackend  # noqa: E402
from local_ai_memory.testing import KnowledgeBackendTests  # noqa: E402


class TestSqliteKnowledgeBackend(KnowledgeBackendTests):
    capabilities = frozenset({"change_feed", "durable", "cross_process"})

    @pytest.fixture
    def backend(self, tmp_path: Path) -> Iterator[KnowledgeBackend]:
        backend = SqliteKnowledgeBackend(tmp_path / "notes.db")
        yield backend
        backend.close()

    @pytest.fixture
    def opener(self, tmp_path: Path) -> Callable[[], KnowledgeBackend]:
        return functools.partial(SqliteKnowledgeBackend, tmp_path / "notes.db")


def test_the_example_imports_only_public_names() -> None:
    tree = ast.parse((EXAMPLES / "sqlite_backend" / "knowledge.py").read_text())
    modules = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    modules |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    ours = {m for m in modules if m.split(".")[0] == "local_ai_memory"}
    assert ours, "the example uses the library"
    assert all(not part.startswith("_") for m in ours for part in m.split(".")), sorted(ours)
