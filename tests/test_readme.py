"""Every ```python block in the READMEs runs, in order, as one script, so the docs cannot rot.

Each README runs in a fresh Python process (as a reader pasting the blocks would), in a
temporary folder that is also ``HOME``, so examples that use the default ``~/.local-ai`` write
there and not into the developer's home. A block whose first line is ``# not run`` is skipped
(for snippets that need a remote model). The LangChain package's README is run by its own test,
which swaps its model line for a scripted model; a block of the main README that starts with
``# same as integrations/langchain/README.md`` must appear there word for word. Each
integration's README starts with an example that runs offline, unchanged, in a fresh process
with no API key and no way out (issue 41: the LangChain Quickstart needed Ollama, the Agents
SDK's an OpenAI key, and neither said so).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
READMES = [ROOT / "README.md", ROOT / "integrations" / "llama-index" / "README.md"]
INTEGRATION_READMES = sorted((ROOT / "integrations").glob("*/README.md"))
FENCE_RE = re.compile(r"^```(\w*)\n", re.MULTILINE)
NO_WAY_OUT = "http://127.0.0.1:9"  # the discard port: a request that tries the network fails at once
BLOCK_RE = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
LANGCHAIN_COPY = "# same as integrations/langchain/README.md"


def readme_blocks(readme: Path) -> list[str]:
    blocks = BLOCK_RE.findall(readme.read_text(encoding="utf-8"))
    return [block for block in blocks if not block.startswith(("# not run", LANGCHAIN_COPY))]


@pytest.mark.parametrize("readme", READMES, ids=lambda p: str(p.relative_to(ROOT)))
def test_readme_python_blocks_run(readme: Path, tmp_path: Path) -> None:
    blocks = readme_blocks(readme)
    assert blocks, f"{readme} has no python examples"
    script = tmp_path / "readme_examples.py"
    script.write_text("\n\n".join(blocks), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCAL_AI_MEMORY_")}
    env["HOME"] = str(tmp_path)
    result = subprocess.run(
        [sys.executable, "-W", "error::DeprecationWarning", str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, f"{readme} examples failed:\n{result.stderr[-3000:]}"


def test_langchain_blocks_are_copies_of_the_tested_package_readme() -> None:
    package = (ROOT / "integrations" / "langchain" / "README.md").read_text(encoding="utf-8")
    copies = [b for b in BLOCK_RE.findall(READMES[0].read_text(encoding="utf-8")) if b.startswith(LANGCHAIN_COPY)]
    assert copies
    for block in copies:
        assert block.split("\n", 1)[1] in package


def _offline_env(home: Path) -> dict[str, str]:
    """This environment without API keys or the library's settings, ``HOME`` at ``home``, and
    every HTTP client's proxy pointing at a closed port: an example that calls out fails."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("LOCAL_AI_MEMORY_") and not k.endswith(("_API_KEY", "_BASE_URL")) and "PROXY" not in k
    }
    return env | {"HOME": str(home), "HTTP_PROXY": NO_WAY_OUT, "HTTPS_PROXY": NO_WAY_OUT, "ALL_PROXY": NO_WAY_OUT}


@pytest.mark.parametrize("readme", INTEGRATION_READMES, ids=lambda p: p.parent.name)
def test_each_integration_readme_starts_with_an_example_that_runs_offline(readme: Path, tmp_path: Path) -> None:
    text = readme.read_text(encoding="utf-8")
    languages = [language for language in FENCE_RE.findall(text) if language]  # opening fences only
    assert next(lang for lang in languages if lang != "bash") == "python", "the first example is not Python"
    first = BLOCK_RE.findall(text)[0]
    script = tmp_path / "first_example.py"
    script.write_text(first, encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-W", "error::DeprecationWarning", str(script)],
        cwd=tmp_path,
        env=_offline_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, f"{readme}'s first example failed offline:\n{result.stderr[-3000:]}"
    assert result.stdout.strip(), "the example shows nothing"
