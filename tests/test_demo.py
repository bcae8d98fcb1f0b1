"""The demo (``./scripts/demo`` runs ``examples/demo.py``) completes offline and shows every level."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

DEMO = Path(__file__).resolve().parent.parent / "examples" / "demo.py"

SLOW_WRITERS = """
import os, runpy, shutil, sys, threading, time
from local_ai_memory._shared import fs

class SlowBackground(fs.Syscalls):
    '''Every disk change made by a thread other than the main one takes 50 ms more.'''
    def before(self, operation):
        if threading.current_thread() is not threading.main_thread():
            time.sleep(0.05)

fs.use_syscalls(SlowBackground()).__enter__()
removing = threading.Event()
plain_rmtree, plain_unlink = shutil.rmtree, os.unlink

def slow_rmtree(path, *args, **kwargs):
    removing.set()
    return plain_rmtree(path, *args, **kwargs)

def slow_unlink(path, *args, **kwargs):
    # The removal of the demo's folder takes over a second (10 ms a file), as on a busy
    # machine: a background writer still running meanwhile puts files back in it.
    if removing.is_set() and threading.current_thread() is threading.main_thread():
        time.sleep(0.01)
    return plain_unlink(path, *args, **kwargs)

shutil.rmtree, os.unlink = slow_rmtree, slow_unlink
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCAL_AI_MEMORY_")}
    env["COLUMNS"] = "120"
    env.update(extra)
    return env


def test_demo_runs_offline_and_writes_every_level(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(DEMO), "--data-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=300,
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
    assert list((tmp_path / "memory_data" / ".index").glob("*_index.json"))
    assert "# Current Goal" in next((memory / "working").glob("*.md")).read_text()


def test_demo_removes_its_folder_while_background_writers_are_slow(tmp_path: Path) -> None:
    """Nothing the library started writes into the folder once the demo closed its memory: with
    every background disk change slowed down and the folder's removal slowed to over a second,
    the removal succeeds and nothing is put back afterwards (not even at interpreter exit)."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    result = subprocess.run(
        [sys.executable, "-c", SLOW_WRITERS, str(DEMO)],
        capture_output=True,
        text=True,
        env=_env(TMPDIR=str(scratch)),
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "removed the demo's temporary folder" in result.stdout
    assert sorted(p.relative_to(scratch).as_posix() for p in scratch.rglob("*")) == []


def test_demo_keep_keeps_the_folder_after_exit(tmp_path: Path) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    result = subprocess.run(
        [sys.executable, str(DEMO), "--keep"],
        capture_output=True,
        text=True,
        env=_env(TMPDIR=str(scratch)),
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    (kept,) = scratch.iterdir()
    assert f"kept the demo's data in {kept}" in " ".join(result.stdout.split())
    assert list((kept / "memory_data" / ".index").glob("*_index.json"))
    assert list((kept / "memory" / "state").glob("*.json"))


def test_demo_on_postgres_shows_two_hosts_sharing_one_memory() -> None:
    result = subprocess.run(
        [sys.executable, str(DEMO), "--postgres"], capture_output=True, text=True, env=_env(), timeout=300
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "notes indexed into the database" in out
    assert "on disk: nothing" in out
    assert "host B saw host A's state, paged its tool output back byte for byte and found its note" in out
