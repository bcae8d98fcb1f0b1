"""The demo (``./scripts/demo`` runs ``examples/demo.py``) completes offline and shows every level."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

DEMO = Path(__file__).resolve().parent.parent / "examples" / "demo.py"


def test_demo_runs_offline_and_writes_every_level(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCAL_AI_MEMORY_")}
    env["COLUMNS"] = "120"
    result = subprocess.run(
        [sys.executable, str(DEMO), "--data-dir", str(tmp_path)], capture_output=True, text=True, env=env, timeout=300
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for marker in ("notes indexed", "Stage 1 candidates", "Stage 3 loaded", "identical to the original output"):
        assert marker in out
    memory = tmp_path / "memory"
    assert list((memory / "state").glob("*.json"))
    assert list((memory / "working").glob("*.md"))
    assert list((memory / "plans").glob("*.json"))
    assert list((memory / "tool_results").glob("*.json"))
    assert (tmp_path / "memory_data" / "memory_index.json").is_file()
    assert "# Current Goal" in next((memory / "working").glob("*.md")).read_text()


def test_demo_on_postgres_shows_two_hosts_sharing_one_memory() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCAL_AI_MEMORY_")}
    env["COLUMNS"] = "120"
    result = subprocess.run(
        [sys.executable, str(DEMO), "--postgres"], capture_output=True, text=True, env=env, timeout=300
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "notes indexed into the database" in out
    assert "on disk: nothing" in out
    assert "host B saw host A's state, paged its tool output back byte for byte and found its note" in out
