"""Every ```python block in the README runs, in order, in one namespace, so the docs cannot rot.

Blocks run in a fresh temporary folder that is also ``HOME``, so examples that use the default
``~/.local-ai`` write there and not into the developer's home. A block whose first line is
``# not run`` is skipped (for snippets that need a remote model).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCK_RE = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def readme_blocks() -> list[str]:
    blocks = BLOCK_RE.findall(README.read_text(encoding="utf-8"))
    return [block for block in blocks if not block.startswith("# not run")]


def test_readme_has_examples() -> None:
    assert len(readme_blocks()) >= 1


def test_readme_python_blocks_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "__readme__"}
    for number, block in enumerate(readme_blocks(), start=1):
        code = compile(block, f"README.md block {number}", "exec")
        try:
            exec(code, namespace)
        except Exception as exc:
            raise AssertionError(f"README python block {number} failed:\n{block}") from exc
    assert os.environ["HOME"] == str(tmp_path)
