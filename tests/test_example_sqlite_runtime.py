"""The example SQLite runtime backend (``examples/sqlite_backend``) passes the whole runtime kit,
processes and restarts included, and needs no private name of the library."""

from __future__ import annotations

import ast
import functools
import sys
from pathlib import Path
from typing import ClassVar

import pytest

from local_ai_memory.testing import CROSS_PROCESS, DURABLE, RuntimeBackendTests
from local_ai_memory.testing._processes import Opener

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # the examples live beside src/, not inside the package
    sys.path.insert(0, str(ROOT))

from examples.sqlite_backend.runtime import SQLiteRuntimeBackend  # noqa: E402


class TestSQLiteRuntimeBackend(RuntimeBackendTests):
    capabilities: ClassVar[frozenset[str]] = frozenset({CROSS_PROCESS, DURABLE})

    @pytest.fixture
    def opener(self, tmp_path: Path) -> Opener:
        return functools.partial(SQLiteRuntimeBackend, str(tmp_path / "memory.db"))


def test_the_example_imports_only_public_names() -> None:
    tree = ast.parse((ROOT / "examples/sqlite_backend/runtime.py").read_text(encoding="utf-8"))
    modules = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    modules |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    ours = {module for module in modules if module.split(".")[0] == "local_ai_memory"}
    assert ours == {"local_ai_memory", "local_ai_memory.backends"}
    assert not any(part.startswith("_") for module in ours for part in module.split("."))
