"""The ``local-ai-memory`` command, run as a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest


def run(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "COLUMNS": "200", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "local_ai_memory.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
        check=False,
    )


@pytest.fixture
def data(tmp_path: Path) -> Path:
    folder = tmp_path / "memory_data" / "knowledge"
    folder.mkdir(parents=True)
    (folder / "alice_python.md").write_text("# Python Lists\n\nHow lists and loops work in Python.\n")
    (folder / "alice_rust.md").write_text("# Rust Ownership\n\nBorrowing and lifetimes.\n")
    (folder / "bob%5Fadmin_python.md").write_text("# Admin Python\n\nPython secrets.\n")
    return tmp_path


def test_index_search_retrieve_stats_json(data: Path) -> None:
    done = run("index", "--data-dir", str(data), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["files"] == 3
    assert (data / "memory_data" / "memory_index.json").exists()

    done = run("search", "python loops", "--user", "alice", "--data-dir", str(data), "--json")
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert [f["filename"] for f in found] == ["alice_python.md"]
    assert found[0]["title"] == "Python Lists"
    assert found[0]["category"] == "knowledge"

    done = run("search", "python", "--user", "bob", "--data-dir", str(data), "--json")
    assert json.loads(done.stdout) == []

    done = run("retrieve", "python loops", "-u", "alice", "-d", str(data), "--max-tokens", "500", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["text"].startswith("## alice_python.md\n# Python Lists")
    assert result["used_tokens"] <= 500

    done = run("stats", "--data-dir", str(data), "--json")
    stats = json.loads(done.stdout)
    assert stats["files"] == 3
    assert stats["users"] == {"alice": 2, "bob_admin": 1}


def test_human_output_and_env_data_dir(data: Path) -> None:
    env = {"LOCAL_AI_MEMORY_DATA_DIR": str(data)}
    done = run("search", "rust", "--user", "alice", env=env)
    assert done.returncode == 0, done.stderr
    assert "alice_rust.md" in done.stdout
    assert "Rust Ownership" in done.stdout
    done = run("search", "nothing-matches-this", "--user", "alice", env=env)
    assert done.returncode == 0
    assert "No matches" in done.stdout
    done = run("index", env=env)
    assert done.returncode == 0
    assert "Indexed 3 file(s)" in done.stdout
    done = run("stats", env=env)
    assert "user alice" in done.stdout


def test_config_file(data: Path, tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(f"memory:\n  categories: [knowledge, work]\napp:\n  runtime_data_dir: {data}\n")
    done = run("stats", "--config", str(config), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["categories"] == {"knowledge": 3, "work": 0}


def test_data_dir_option_over_environment_over_config_file(data: Path, tmp_path: Path) -> None:
    """The command line relies on ``MemoryConfig`` for the variable: --data-dir, then the environment, then the file."""
    empty = tmp_path / "empty"
    (empty / "memory_data" / "knowledge").mkdir(parents=True)
    config = tmp_path / "config.yaml"
    config.write_text(f"app:\n  runtime_data_dir: {empty}\n")
    done = run("stats", "--config", str(config), "--json", env={"LOCAL_AI_MEMORY_DATA_DIR": str(data)})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["files"] == 3
    done = run("stats", "-d", str(empty), "--json", env={"LOCAL_AI_MEMORY_DATA_DIR": str(data)})
    assert json.loads(done.stdout)["files"] == 0
    done = run("stats", "-d", str(data), "--json", env={"LOCAL_AI_MEMORY_HYBRID_TOP_N": "lots"})
    assert done.returncode == 1
    assert "LOCAL_AI_MEMORY_HYBRID_TOP_N (memory.hybrid_top_n)" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_errors_are_one_line_and_non_zero(data: Path, tmp_path: Path) -> None:
    done = run("search", "x", "--user", "../etc", "--data-dir", str(data))
    assert done.returncode == 1
    assert done.stderr.strip().startswith("error:")
    assert len(done.stderr.strip().splitlines()) == 1
    assert "Traceback" not in done.stderr
    done = run("search", "x", "--user", "alice", "--data-dir", str(data), "--category", "nope")
    assert done.returncode == 1
    assert "unknown category" in done.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("memory:\n  search_mode: magic\n")
    done = run("stats", "--config", str(bad))
    assert done.returncode == 1
    assert "search_mode" in done.stderr
    done = run("search", "x")
    assert done.returncode == 2
    done = run("frobnicate")
    assert done.returncode == 2


def test_watch_picks_up_a_new_file(data: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "local_ai_memory.cli", "watch", "--data-dir", str(data), "--duration", "4"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 20
        index = data / "memory_data" / "memory_index.json"
        while not index.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
        (data / "memory_data" / "knowledge" / "alice_new.md").write_text("# New\n\nfresh")
        _, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr
    assert "watching" in stderr
    assert "INDEX_REFRESHED" in stderr
    names = {e["filename"] for e in json.loads(index.read_bytes())["files"]}
    assert "alice_new.md" in names


def test_console_script_is_installed() -> None:
    script = Path(sys.executable).with_name("local-ai-memory")
    if not script.exists():
        pytest.skip("package not installed as a distribution in this environment")
    done = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0
    for command in ("index", "search", "retrieve", "watch", "stats"):
        assert command in done.stdout
