"""What a new user trips over on the command line (issue 25), run as real subprocesses, and
the Python side of the same edges."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from local_ai_memory import InvalidInputError, Memory, RecordNotFoundError


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "local_ai_memory.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        input="",  # stdin is no terminal: nothing may wait for an answer
        env={**os.environ, "COLUMNS": "200", **(env or {})},
        check=False,
    )


def one_line_error(result: subprocess.CompletedProcess[str], *words: str) -> None:
    """A non-zero exit with one ``error:`` line on stderr that holds ``words``, and no traceback."""
    assert result.returncode != 0, result.stdout
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error:"), result.stderr
    for word in words:
        assert word in lines[0], result.stderr


def man_pages(root: Path) -> Path:
    """A data folder whose notes all sit in ``memory_data/man/``, a folder no default category covers."""
    folder = root / "memory_data" / "man"
    folder.mkdir(parents=True)
    (folder / "alice_ls.md").write_text("# ls\n\nlist directory contents\n", encoding="utf-8")
    (folder / "alice_cp.md").write_text("# cp\n\ncopy files and directories\n", encoding="utf-8")
    return root


# -- notes in folders no category covers --------------------------------------------------


def test_search_says_which_folders_no_category_covers(tmp_path: Path) -> None:
    data = man_pages(tmp_path / "data")
    for command in ("search", "retrieve"):
        result = run(command, "directory", "-u", "alice", "-d", str(data))
        one_line_error(result, "memory_data/man/ (2)", "no configured category", "LOCAL_AI_MEMORY_CATEGORIES")
    as_json = run("search", "directory", "-u", "alice", "-d", str(data), "--json")
    assert as_json.returncode == 1
    assert json.loads(as_json.stdout) == []
    # Another user, unknown there: an error that names the users there are.
    one_line_error(run("search", "directory", "-u", "bob", "-d", str(data)), "'bob'", "alice")
    # Naming the folder as a category searches it.
    found = run("search", "directory", "-u", "alice", "-d", str(data), "--json",
                env={"LOCAL_AI_MEMORY_CATEGORIES": "knowledge,man"})  # fmt: skip
    assert found.returncode == 0, found.stderr
    assert {hit["filename"] for hit in json.loads(found.stdout)} == {"alice_ls.md", "alice_cp.md"}
    assert not (data / "memory_data" / "knowledge").exists()


def test_python_search_names_uncovered_folders_and_creates_nothing(tmp_path: Path) -> None:
    data = man_pages(tmp_path / "data")
    with Memory.open(data) as memory:
        assert memory.knowledge.search("directory", "alice") == []
        assert memory.knowledge.uncovered_folders("alice") == {"man": 2}
        assert memory.knowledge.uncovered_folders("bob") == {}
        assert memory.knowledge.notes("alice") == []
        assert [info.notes for info in memory.users()] == [2]
    created = sorted(p.name for p in (data / "memory_data").iterdir() if not p.name.startswith("."))
    assert created == ["man"]  # no category folder, and no index for a user without notes


# -- files that are not text ----------------------------------------------------------------


@pytest.fixture
def data(tmp_path: Path) -> Path:
    with Memory.open(tmp_path / "data", fsync=False) as memory:
        memory.session("ops", "s1").update_state({"task": "rotate keys"})
        memory.knowledge.write_note("ops", "runbook", "# Runbook\n\nRestart the kestrel cluster.\n")
    return tmp_path / "data"


def bad_files(folder: Path) -> dict[str, Path]:
    files = {
        "binary": folder / "tool.bin",
        "empty": folder / "empty.md",
        "blank": folder / "blank.md",
        "latin-1": folder / "latin1.md",
    }
    files["binary"].write_bytes(Path(sys.executable).resolve().read_bytes()[:4096])  # an ELF/Mach-O head
    files["empty"].write_bytes(b"")
    files["blank"].write_bytes(b"  \n\n")
    files["latin-1"].write_bytes("# Caf\u00e9\n\nna\u00efve\n".encode("latin-1"))
    return files


def test_notes_add_refuses_binary_empty_and_non_utf8_files_in_one_line(data: Path, tmp_path: Path) -> None:
    expected = {"binary": "binary file", "empty": "is empty", "blank": "is empty", "latin-1": "not UTF-8 text"}
    for kind, path in bad_files(tmp_path).items():
        result = run("notes", "add", "x", "-u", "ops", "--file", str(path), "-d", str(data))
        one_line_error(result, str(path), expected[kind])
    one_line_error(run("notes", "add", "x", "-u", "ops", "--text", " ", "-d", str(data)), "empty")
    one_line_error(run("notes", "add", "x", "-u", "ops", "--file", str(tmp_path / "gone.md"), "-d", str(data)))
    assert not (data / "memory_data" / "knowledge" / "ops_x.md").exists()


def test_a_config_file_that_is_not_text_is_one_line(data: Path, tmp_path: Path) -> None:
    files = bad_files(tmp_path)
    for kind in ("binary", "latin-1"):
        for command in (("stats",), ("search", "x", "-u", "ops"), ("sessions",)):
            one_line_error(run(*command, "-d", str(data), "--config", str(files[kind])), str(files[kind]))
    assert run("stats", "-d", str(data), "--config", str(files["empty"])).returncode == 0  # empty: the defaults
    # An archive that is no archive (binary, empty, text) was already refused in one line.
    for path in files.values():
        one_line_error(run("import", str(path), "-d", str(data)), "not a local-ai-memory archive")


# -- export: where it writes ---------------------------------------------------------------


def test_export_refuses_a_missing_folder_and_an_existing_file_without_force(data: Path, tmp_path: Path) -> None:
    missing = tmp_path / "nonexistent" / "dir" / "x.zip"
    one_line_error(run("export", "-u", "ops", "-o", str(missing), "-d", str(data)), "no folder", "create it first")
    assert not (tmp_path / "nonexistent").exists()
    archive = tmp_path / "ops.zip"
    archive.write_bytes(b"keep me")
    one_line_error(run("export", "-u", "ops", "-o", str(archive), "-d", str(data)), "exists", "--force")
    assert archive.read_bytes() == b"keep me"
    forced = run("export", "-u", "ops", "-o", str(archive), "--force", "-d", str(data))
    assert forced.returncode == 0, forced.stderr
    assert archive.read_bytes()[:2] == b"PK"
    one_line_error(run("export", "-u", "ops", "-o", str(tmp_path), "-d", str(data)), "is a folder")


# -- unknown users and sessions, a folder that holds no memory ------------------------------


def test_unknown_users_and_sessions_are_no_memory_not_empty_success(data: Path, tmp_path: Path) -> None:
    archive = tmp_path / "nobody.zip"
    for command in (
        ("export", "-u", "nobody", "-o", str(archive)),
        ("export", "-u", "ops", "-s", "nosuch", "-o", str(archive)),
        ("forget", "-u", "nobody", "-y"),
        ("forget", "-u", "ops", "-s", "nosuch", "-y"),
        ("show", "-u", "ops", "-s", "nosuch"),
        ("show", "-u", "nobody", "-s", "s1"),
    ):
        result = run(*command, "-d", str(data))
        one_line_error(result, "no memory for")
        assert ("nosuch" if "nosuch" in command else "nobody") in result.stderr
    assert not archive.exists()
    assert run("show", "-u", "ops", "-s", "s1", "-d", str(data)).returncode == 0
    # A user with notes and no session is known.
    assert run("export", "-u", "ops", "-o", str(archive), "-d", str(data)).returncode == 0


def test_python_tells_an_unknown_user_or_session(data: Path, tmp_path: Path) -> None:
    with Memory.open(data) as memory:
        assert memory.holds("ops")
        assert memory.holds("ops", "s1")
        assert not memory.holds("nobody")
        assert not memory.holds("ops", "nosuch")
        with pytest.raises(RecordNotFoundError, match="no memory for user 'nobody'"):
            memory.export(tmp_path / "x.zip", "nobody")
        with pytest.raises(RecordNotFoundError, match="no memory for session 'nosuch' of user 'ops'"):
            memory.show("ops", "nosuch")
        assert not (tmp_path / "x.zip").exists()
        report = memory.forget_user("nobody")  # erasing stays idempotent: an empty report
        assert (report.sessions, report.notes) == ([], [])
        listed = memory.sessions()
        assert [(info.user_id, info.session_id) for info in listed] == [("ops", "s1")]


def test_index_on_a_folder_without_memory_needs_create(tmp_path: Path) -> None:
    typo = tmp_path / "typo"
    one_line_error(run("index", "-d", str(typo)), "no memory at", "--create")
    assert not typo.exists()
    typo.mkdir()
    one_line_error(run("index", "-d", str(typo)), "--create")
    assert list(typo.iterdir()) == []
    created = run("index", "-d", str(typo), "--create", "--json")
    assert created.returncode == 0, created.stderr
    assert json.loads(created.stdout)["files"] == 0
    assert (typo / "memory_data").is_dir()
    assert run("index", "-d", str(typo)).returncode == 0  # now it holds a memory


# -- messages that say why ------------------------------------------------------------------


def test_import_refusal_names_the_flag_and_a_blank_user_says_blank(data: Path, tmp_path: Path) -> None:
    archive = tmp_path / "ops.zip"
    assert run("export", "-u", "ops", "-o", str(archive), "-d", str(data)).returncode == 0
    one_line_error(run("import", str(archive), "-d", str(data)), "--replace")
    assert run("import", str(archive), "--replace", "-d", str(data)).returncode == 0
    for blank in (" ", "   "):
        one_line_error(run("show", "-u", blank, "-s", "s1", "-d", str(data)), "blank")
    with pytest.raises(InvalidInputError, match="blank"):
        Memory.in_memory().session(" ", "s1")
    with pytest.raises(InvalidInputError, match="only dots"):
        Memory.in_memory().session("..", "s1")
    with pytest.raises(InvalidInputError, match="path separator"):
        Memory.in_memory().session("a/b", "s1")


def test_watch_on_a_folder_without_memory_needs_create(tmp_path: Path) -> None:
    """``watch`` keeps the rule ``index`` has: a mistyped folder is refused and left uncreated."""
    typo = tmp_path / "typo"
    one_line_error(run("watch", "-d", str(typo), "--duration", "0"), "no memory at", "--create")
    assert not typo.exists()
    started = run("watch", "-d", str(typo), "--duration", "0", "--poll", "--create")
    assert started.returncode == 0, started.stderr
    assert (typo / "memory_data").is_dir()
