"""Typos on the command line are loud (issue 41): an unknown user is an error that names the
known ones, a mistyped folder starts no memory without --create, "nothing found" has one exit
code, and what the commands print reads as people write (sizes, plurals, help, names)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from local_ai_memory import Memory, __version__

sys.path.insert(0, str(Path(__file__).parent))  # the command-line helpers of test_cli_edges
from test_cli_edges import one_line_error, run


@pytest.fixture
def data(tmp_path: Path) -> Path:
    with Memory.open(tmp_path / "data", fsync=False) as memory:
        memory.knowledge.write_note("alice", "deploy", "# Deploy\n\nblue-green on Fridays\n")
        memory.knowledge.write_note("alice", "tea", "# Tea\n\ngreen tea at four\n")
        session = memory.session("alice", "s1")
        session.update_state({"task": "ship"})
        session.externalize("grep", "zebra\n" * 2000)
    return tmp_path / "data"


@pytest.mark.parametrize(
    "command",
    [
        ["search", "deploy", "-u", "alcie"],
        ["retrieve", "deploy", "-u", "alcie"],
        ["notes", "list", "-u", "alcie"],
        ["sessions", "-u", "alcie"],
    ],
)
def test_an_unknown_user_is_an_error_that_names_the_known_ones(data: Path, command: list[str]) -> None:
    one_line_error(run(*command, "-d", str(data)), "'alcie'", "alice")


def test_nothing_found_exits_1_with_or_without_the_folder_hint(data: Path) -> None:
    for command in ("search", "retrieve"):
        missed = run(command, "zeppelin", "-u", "alice", "-d", str(data))
        assert missed.returncode == 1, missed.stderr
        assert run(command, "deploy", "-u", "alice", "-d", str(data)).returncode == 0


@pytest.mark.parametrize(
    "command",
    [
        ["notes", "add", "-u", "alice", "x", "--text", "hello"],
        ["notes", "import", "NOTES"],
        ["import", "ARCHIVE"],
    ],
)
def test_writing_commands_start_no_memory_at_a_mistyped_folder(data: Path, tmp_path: Path, command: list[str]) -> None:
    archive = tmp_path / "alice.zip"
    assert run("export", "-u", "alice", "-o", str(archive), "-d", str(data)).returncode == 0
    notes = tmp_path / "notes"
    assert run("notes", "export", str(notes), "-d", str(data)).returncode == 0
    command = [{"NOTES": str(notes), "ARCHIVE": str(archive)}.get(part, part) for part in command]
    typo = tmp_path / "dta"
    one_line_error(run(*command, "-d", str(typo)), "--create")
    assert not typo.exists()
    created = run(*command, "-d", str(typo), "--create")
    assert created.returncode == 0, created.stderr
    assert (typo / "memory_data").is_dir()


def test_the_mcp_server_starts_no_memory_at_a_mistyped_folder(tmp_path: Path) -> None:
    """``mcp -d ./typo`` served (and let a model fill) a new, empty memory; like every writing
    command it now needs --create. Over stdio with nothing on stdin the server ends at once."""
    pytest.importorskip("mcp")
    typo = tmp_path / "dta"
    for transport in ([], ["--http"]):
        one_line_error(run("mcp", *transport, "-u", "alice", "-d", str(typo)), "--create")
        assert not typo.exists()
    created = run("mcp", "-u", "alice", "-d", str(typo), "--create")
    assert created.returncode == 0, created.stderr
    assert (typo / "memory_data").is_dir()


def test_replace_names_every_conflict_as_the_user_names_it(data: Path, tmp_path: Path) -> None:
    archive = tmp_path / "alice.zip"
    assert run("export", "-u", "alice", "-o", str(archive), "-d", str(data)).returncode == 0
    one_line_error(
        run("import", str(archive), "-d", str(data)),
        "--replace",
        "session s1",
        "note knowledge/deploy",
        "note knowledge/tea",
    )
    notes = tmp_path / "notes"
    assert run("notes", "export", str(notes), "-d", str(data)).returncode == 0
    refused = run("notes", "import", str(notes), "-d", str(data))
    one_line_error(refused, "--replace", "knowledge/deploy of alice", "knowledge/tea of alice")
    assert "alice_" not in refused.stderr


def test_sizes_plurals_version_and_help_read_as_people_write(data: Path) -> None:
    with Memory.open(data) as memory:
        memory.knowledge.write_note("bob", "one", "# One\n\nonly note")
    shown = run("show", "-u", "alice", "-s", "s1", "-d", str(data))
    assert shown.returncode == 0, shown.stderr
    assert "size (bytes)" not in shown.stdout
    assert " KB │" in shown.stdout  # 12,000 characters of tool output (and its record), in the unit shown
    listed = run("sessions", "-d", str(data)).stdout
    assert "(1 note)" in listed
    assert "(2 notes)" in listed
    stats = run("stats", "-d", str(data))
    assert stats.returncode == 0, stats.stderr
    assert "index bytes" not in stats.stdout
    assert " KB" in stats.stdout or " B" in stats.stdout
    version = run("--version")
    assert (version.returncode, version.stdout.strip()) == (0, f"local-ai-memory {__version__}")
    for command in (["index"], ["watch"], ["notes", "list"], ["export"], ["import"], ["search"]):
        helped = run(*command, "--help")
        assert helped.returncode == 0, helped.stderr
        assert "``" not in helped.stdout, (command, helped.stdout)
    assert json.loads(run("notes", "list", "-u", "alice", "-d", str(data), "--json").stdout) == {
        "knowledge": ["deploy", "tea"]
    }
