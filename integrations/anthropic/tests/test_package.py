"""The package surface: every exported name resolves, and it imports only public library names."""

from __future__ import annotations

import ast
from pathlib import Path

import local_ai_memory_anthropic

SOURCE = Path(local_ai_memory_anthropic.__file__).parent


def test_every_exported_name_resolves() -> None:
    for name in local_ai_memory_anthropic.__all__:
        assert getattr(local_ai_memory_anthropic, name) is not None


def test_only_public_names_of_the_library_are_imported() -> None:
    for path in SOURCE.glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("local_ai_memory."):
                assert not any(part.startswith("_") for part in node.module.split(".")[1:]), (path, node.module)
