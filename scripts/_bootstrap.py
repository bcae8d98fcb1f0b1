"""Shared setup for ``scripts/test`` and ``scripts/demo``: a ``.venv`` with all three packages.

Only the standard library is used, so this runs on a machine with nothing but Python 3.10+.
The virtual environment is created once and reinstalled only when a ``pyproject.toml`` changed.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PYTHON = BIN / ("python.exe" if os.name == "nt" else "python")
STAMP = VENV / ".setup-stamp"

# torch first, pinned: on this machine 2.13.0 resolves to the CPU wheel already on disk, so the
# embeddings extra (all-MiniLM-L6-v2 via sentence-transformers) never pulls a multi-GB CUDA build.
TORCH = ["torch==2.13.0"]

REQUIREMENTS = [
    "-e",
    f"{ROOT}[test,openai,embeddings,postgres,mcp]",
    "-e",
    f"{ROOT / 'integrations' / 'langchain'}[test,agents]",
    "-e",
    f"{ROOT / 'integrations' / 'llama-index'}[test]",
    "-e",
    f"{ROOT / 'integrations' / 'openai-agents'}[test]",
    "-e",
    f"{ROOT / 'integrations' / 'anthropic'}[test]",
]


def say(text: str) -> None:
    print(f"==> {text}", flush=True)


def run(*args: str | Path, env: dict[str, str] | None = None) -> int:
    return subprocess.call([str(a) for a in args], cwd=ROOT, env=env)


def _fingerprint() -> str:
    digest = hashlib.sha256()
    for path in sorted(ROOT.glob("**/pyproject.toml")):
        if ".venv" not in path.parts:
            digest.update(path.read_bytes())
    digest.update(" ".join(TORCH + REQUIREMENTS).encode())
    digest.update(sys.version.encode())
    return digest.hexdigest()


def ensure_venv() -> Path:
    """Create or update ``.venv``; return its Python."""
    if sys.version_info < (3, 10):  # noqa: UP036 - this script may run on an old Python
        sys.exit(f"Python 3.10 or newer is required, this is {sys.version.split()[0]}")
    if not PYTHON.exists():
        say(f"creating virtual environment in {VENV}")
        venv.EnvBuilder(with_pip=True).create(VENV)
    fingerprint = _fingerprint()
    if not STAMP.exists() or STAMP.read_text() != fingerprint:
        say("installing torch (CPU), local-ai-memory and its integrations (editable, with test extras)")
        code = run(PYTHON, "-m", "pip", "install", "--disable-pip-version-check", "-q", *TORCH)
        if code == 0:
            code = run(PYTHON, "-m", "pip", "install", "--disable-pip-version-check", "-q", *REQUIREMENTS)
        if code != 0:
            sys.exit(f"installation failed (pip exit code {code}); see the messages above")
        STAMP.write_text(fingerprint)
    return PYTHON
