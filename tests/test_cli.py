"""The ``local-ai-memory`` command, run as a real subprocess; and, in this process, the
``memory.knowledge`` calls behind ``index`` and ``watch``."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from local_ai_memory._knowledge.index_file import stored_entries


def run(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60, without: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "COLUMNS": "200", **(env or {})}
    for name in without:
        full_env.pop(name, None)
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
    assert (data / "memory_data" / ".index" / "manifest.json").exists()
    assert (data / "memory_data" / ".index" / "alice_index.json").exists()

    done = run("search", "python loops", "--user", "alice", "--data-dir", str(data), "--json")
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert [f["filename"] for f in found] == ["alice_python.md"]
    assert found[0]["title"] == "Python Lists"
    assert found[0]["category"] == "knowledge"

    done = run("search", "python", "--user", "bob", "--data-dir", str(data), "--json")
    assert done.returncode == 1  # nobody called bob: a typo, not "no matches"
    assert "no memory for user 'bob'" in done.stderr

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
    assert done.returncode == 1  # like grep
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
    assert not (data / "memory_data" / "work").exists(), "a read-only command created a category folder"


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
        index = data / "memory_data" / ".index" / "alice_index.json"
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
    # Not a terminal: no wrapping at 80 columns, the long first line (it names the folder) stays whole.
    first = next(line for line in stderr.splitlines() if "watching" in line)
    assert len(first) > 80
    assert first.endswith("Ctrl-C to stop")
    journal = index.with_suffix(".journal")  # the snapshot and the writes after it
    names = {e.filename for e in stored_entries(index.read_bytes(), journal.read_bytes() if journal.exists() else None)}
    assert "alice_new.md" in names


def test_console_script_is_installed() -> None:
    script = Path(sys.executable).with_name("local-ai-memory")
    if not script.exists():
        pytest.skip("package not installed as a distribution in this environment")
    done = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0
    for command in ("index", "search", "retrieve", "watch", "stats"):
        assert command in done.stdout


def tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under ``root`` with its mtime (ns) and size: any write or new entry changes it."""
    return {str(p.relative_to(root)): (p.stat().st_mtime_ns, p.stat().st_size) for p in sorted(root.rglob("*"))}


READ_ONLY = (("stats",), ("stats", "--json"), ("search", "x", "-u", "ops"), ("retrieve", "x", "-u", "ops", "--json"))


@pytest.mark.parametrize("command", READ_ONLY, ids="-".join)
def test_read_only_commands_refuse_a_missing_data_folder(tmp_path: Path, command: tuple[str, ...]) -> None:
    missing = tmp_path / "nonexistent2"
    done = run(*command, "-d", str(missing))
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        f"error: no memory at {missing} "
        f"(check --data-dir, or start one with `local-ai-memory index -d {missing} --create`)"
    ]
    assert not missing.exists()
    # A folder that exists but holds no memory_data/ is no memory either, and stays as it was.
    empty = tmp_path / "empty"
    empty.mkdir()
    done = run(*command, "-d", str(empty))
    assert done.returncode == 1
    assert f"no memory at {empty}" in done.stderr
    assert list(empty.iterdir()) == []


def test_default_data_folder_is_not_created_by_stats(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    done = run("stats", env={"HOME": str(home)}, without=("LOCAL_AI_MEMORY_DATA_DIR",))
    assert done.returncode == 1
    assert f"no memory at {home / '.local-ai'}" in done.stderr
    assert list(home.iterdir()) == []


def test_read_only_commands_write_nothing_when_the_index_is_current(data: Path) -> None:
    hour_ago = time.time() - 3600  # notes older than the index (fresh ones are re-checked once: racy mtimes)
    for note in (data / "memory_data" / "knowledge").iterdir():
        os.utime(note, (hour_ago, hour_ago))
    assert run("index", "-d", str(data)).returncode == 0
    before = tree(data)
    for command in (*READ_ONLY[:2], ("search", "python", "-u", "alice"), ("retrieve", "python", "-u", "alice")):
        done = run(*command, "-d", str(data))
        assert done.returncode == 0, (command, done.stderr)
    assert tree(data) == before
    # A note changed behind the index: the next query sees it (and updates the index cache once).
    changed = data / "memory_data" / "knowledge" / "alice_go.md"
    changed.write_text("# Go Channels\n\nGoroutines.\n")
    # An old mtime, so the entry is trusted at once: a note written within the last 3 s is re-checked
    # until that racy window passes, which would rewrite the index again on a loaded machine.
    os.utime(changed, (hour_ago + 60, hour_ago + 60))
    done = run("search", "goroutines", "-u", "alice", "-d", str(data), "--json")
    assert [f["filename"] for f in json.loads(done.stdout)] == ["alice_go.md"]
    settled = tree(data)
    assert run("search", "goroutines", "-u", "alice", "-d", str(data)).returncode == 0
    assert tree(data) == settled


@pytest.mark.parametrize("command", ["index", "search", "retrieve", "stats"])
def test_json_is_a_plain_flag(command: str) -> None:
    done = run(command, "--help")
    assert done.returncode == 0
    line = next(line for line in done.stdout.splitlines() if "--json" in line)
    assert "--json" in line.split()
    assert "BOOL" not in line.upper()
    assert "--no-json" not in line


def test_json_flag_takes_no_value(data: Path) -> None:
    done = run("stats", "-d", str(data), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["files"] == 3
    done = run("stats", "-d", str(data), "--json", "true")
    assert done.returncode == 2  # 'true' is an unexpected argument: --json is a flag, not an option with a value


CLOSED = ("--llm-base-url", "http://127.0.0.1:9/v1", "--llm-model", "qwen")  # nothing listens on port 9


def test_retrieve_reports_a_model_that_failed(data: Path) -> None:
    done = run("retrieve", "python loops", "-u", "alice", "-d", str(data), *CLOSED, "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["selection_fallback"] is True
    assert "LLM call failed" in result["selection_fallback_reason"]
    first = result["files"][0]
    assert (first["filename"], first["stage"], first["truncated"]) == ("alice_python.md", 1, False)
    warning = done.stderr.strip().splitlines()
    assert len(warning) == 1
    assert "'qwen'" in warning[0]
    assert "http://127.0.0.1:9/v1" in warning[0]
    assert "kept the Stage 1 order" in warning[0]

    done = run("retrieve", "python loops", "-u", "alice", "-d", str(data), *CLOSED)
    assert done.returncode == 0, done.stderr
    assert "kept the Stage 1 order" in done.stderr
    assert done.stdout.startswith("## alice_python.md")

    done = run("retrieve", "python loops", "-u", "alice", "-d", str(data), "--json")  # no model asked for: no warning
    assert done.stderr == ""
    assert json.loads(done.stdout)["selection_fallback_reason"] == "no LLM"


def test_retrieve_json_marks_a_file_cut_to_fit(data: Path) -> None:
    words = " ".join(f"python loops lesson {i}." for i in range(200))
    (data / "memory_data" / "knowledge" / "alice_long.md").write_text(f"# Python Loops at Length\n\n{words}\n")
    done = run("retrieve", "python loops lesson", "-u", "alice", "-d", str(data), "-t", "120", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["used_tokens"] <= 120
    assert result["files"][0]["filename"] == "alice_long.md"
    assert result["files"][0]["truncated"] is True


def test_index_in_hybrid_mode_embeds_the_notes(data: Path) -> None:
    """With search_mode hybrid, `index` embeds every note (the real MiniLM model, offline) up front."""
    env = {"LOCAL_AI_MEMORY_SEARCH_MODE": "hybrid"}
    done = run("index", "-d", str(data), "--json", env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["files"] == 3
    assert report["embedded"] == 3
    shards = list((data / "memory_data" / ".embeddings").glob("shard-*.npz"))
    assert shards  # the vectors are on disk for the first query of any process


class _KeywordLLM:
    """A scripted model for keyword refinement: answers every prompt with the same keywords."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def complete(self, prompt: str) -> str:
        self.calls.append("sync")
        return '["scripted", "keywords", "refined"]'

    async def acomplete(self, prompt: str) -> str:
        self.calls.append("async")
        return '["scripted", "keywords", "refined"]'


class _LetterEmbedder:
    """A tiny deterministic embedder (letter counts), so embedding needs no model download."""

    model_name = "letter-counts"

    def embed(self, texts: list[str]) -> list[list[float]]:
        return [[float(text.lower().count(letter)) + 0.5 for letter in "aeiou"] for text in texts]

    async def aembed(self, texts: list[str]) -> list[list[float]]:
        return self.embed(texts)


async def test_the_knowledge_calls_behind_index_and_watch(data: Path) -> None:
    """What ``index`` and ``watch`` call on ``memory.knowledge``, sync and async, in this process."""
    from local_ai_memory import ConfigError, Memory

    llm = _KeywordLLM()
    with Memory.open(data, fsync=False, llm=llm, embedder=_LetterEmbedder(), search_mode="hybrid") as memory:
        knowledge = memory.knowledge
        seen: list[tuple[int, int]] = []
        assert knowledge.build_index(progress=lambda done, total: seen.append((done, total))) == 3
        assert seen[-1] == (3, 3)
        assert llm.calls == ["sync"] * 3  # the memory's LLM refined each note's keywords
        assert await knowledge.abuild_index("alice") == 2
        assert llm.calls[3:] == ["async"] * 2
        entry = knowledge.store.find_entry("alice_rust.md")
        assert entry is not None
        assert "scripted" in entry.keywords
        assert knowledge.embed_notes("alice") == 2
        assert await knowledge.aembed_notes() == 3
    with Memory.open(data, fsync=False) as plain:
        with pytest.raises(ConfigError):
            plain.knowledge.embed_notes()
        with pytest.raises(ConfigError):
            await plain.knowledge.aembed_notes()
        async with plain.knowledge.watch(mode="poll", poll_interval=0.1) as service:
            assert service.active_mode == "poll"
            (data / "memory_data" / "knowledge" / "alice_go.md").write_text("# Go Channels\n\nGoroutines.\n")
            deadline = time.monotonic() + 20
            while not plain.knowledge.search("goroutines", "alice") and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert [c.filename for c in plain.knowledge.search("goroutines", "alice")] == ["alice_go.md"]
