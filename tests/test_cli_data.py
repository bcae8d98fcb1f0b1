"""The lifecycle commands (sessions, show, notes, forget, export, import), run as real subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from local_ai_memory import Memory


def run(*args: str, stdin: str | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "local_ai_memory.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        input=stdin,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
        check=False,
    )


@pytest.fixture
def data(tmp_path: Path) -> Path:
    memory = Memory.open(tmp_path / "data", fsync=False)
    session = memory.session("ops", "s1")
    session.update_state({"task": "rotate keys"})
    session.externalize("grep", "match\n" * 5000)
    memory.session("ops", "s2").update_working_memory("## Current Goal\nship")
    memory.knowledge.write_note("ops", "runbook", "# Runbook\n\nRestart the kestrel cluster.\n")
    memory.knowledge.write_note("ops_admin", "secret", "# Admin secret\n\nkestrel root password rotation.\n")
    return tmp_path / "data"


def test_read_only_commands_refuse_a_missing_folder_and_create_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "typo"
    for args in (["sessions"], ["show", "-u", "a", "-s", "b"], ["export", "-u", "a", "-o", str(tmp_path / "x.zip")]):
        result = run(*args, "-d", str(missing))
        assert result.returncode == 1, result.stderr
        assert "no memory at" in result.stderr
    assert not missing.exists()
    assert not (tmp_path / "x.zip").exists()


def test_sessions_and_show(data: Path) -> None:
    listed = json.loads(run("sessions", "-d", str(data), "--json").stdout)
    assert [(u["user_id"], u["notes"], [s["session_id"] for s in u["sessions"]]) for u in listed] == [
        ("ops", 1, ["s1", "s2"]),
        ("ops_admin", 1, []),
    ]
    assert listed[0]["sessions"][0]["size"] > 30_000
    table = run("sessions", "-d", str(data)).stdout
    assert "ops_admin" in table
    assert "s2" in table
    shown = json.loads(run("show", "-u", "ops", "-s", "s1", "-d", str(data), "--json").stdout)
    assert shown["state"] == {"task": "rotate keys"}
    assert len(shown["tool_results"]) == 1
    text = run("show", "-u", "ops", "-s", "s1", "-d", str(data)).stdout
    assert '"task": "rotate keys"' in text


def test_notes_add_list_rm_apply_the_naming_rule(data: Path, tmp_path: Path) -> None:
    source = tmp_path / "deploy.md"
    source.write_text("# Deploy\n\nmake deploy\n")
    added = run("notes", "add", "-u", "ops_admin", "deploy", "--file", str(source), "-d", str(data))
    assert added.returncode == 0, added.stderr
    assert "ops%5Fadmin_deploy.md" in added.stdout
    listed = json.loads(run("notes", "list", "-u", "ops_admin", "-d", str(data), "--json").stdout)
    assert listed == {"knowledge": ["deploy", "secret"]}
    assert json.loads(run("notes", "list", "-u", "ops", "-d", str(data), "--json").stdout) == {"knowledge": ["runbook"]}
    found = json.loads(run("search", "deploy", "-u", "ops_admin", "-d", str(data), "--json").stdout)
    assert found[0]["filename"] == "ops%5Fadmin_deploy.md"
    assert run("notes", "rm", "-u", "ops_admin", "deploy", "-d", str(data)).returncode == 0
    again = run("notes", "rm", "-u", "ops_admin", "deploy", "-d", str(data))
    assert again.returncode == 1
    assert "has no note" in again.stderr


def test_forget_asks_first_then_erases_and_reports(data: Path) -> None:
    refused = run("forget", "-u", "ops", "-d", str(data), stdin="")
    assert refused.returncode == 1
    assert "without --yes" in refused.stderr
    assert (data / "memory_data" / "knowledge" / "ops_runbook.md").exists()
    report = json.loads(run("forget", "-u", "ops", "--yes", "-d", str(data), "--json").stdout)
    assert report["sessions"] == ["s1", "s2"]
    assert report["notes"] == ["knowledge/ops_runbook.md"]
    assert report["runtime_bytes"] > 30_000
    users = json.loads(run("sessions", "-d", str(data), "--json").stdout)
    assert [u["user_id"] for u in users] == ["ops_admin"]
    gone = run("search", "kestrel", "-u", "ops", "-d", str(data), "--json")
    assert (gone.returncode, gone.stdout) == (1, "")
    assert "no memory for user 'ops'" in gone.stderr


def test_forget_one_session(data: Path) -> None:
    result = run("forget", "-u", "ops", "-s", "s2", "-y", "-d", str(data))
    assert result.returncode == 0, result.stderr
    assert "1 session(s)" in result.stdout
    users = json.loads(run("sessions", "-u", "ops", "-d", str(data), "--json").stdout)
    assert [s["session_id"] for s in users[0]["sessions"]] == ["s1"]
    assert users[0]["notes"] == 1


def test_export_then_import_elsewhere_round_trips(data: Path, tmp_path: Path) -> None:
    archive = tmp_path / "ops.zip"
    exported = run("export", "-u", "ops", "-o", str(archive), "-d", str(data))
    assert exported.returncode == 0, exported.stderr
    other = tmp_path / "other"
    imported = json.loads(run("import", str(archive), "-d", str(other), "--create", "--json").stdout)
    assert imported["sessions"] == ["s1", "s2"]
    assert imported["notes"] == ["knowledge/ops_runbook.md"]
    again = tmp_path / "again.zip"
    run("export", "-u", "ops", "-o", str(again), "-d", str(other))
    assert again.read_bytes() == archive.read_bytes()
    twice = run("import", str(archive), "-d", str(other))
    assert twice.returncode == 1
    assert "already has 3 of these: session s1, session s2, note knowledge/runbook" in twice.stderr


def test_notes_move_from_files_to_postgres_and_back(
    data: Path, tmp_path: Path, postgres_url: str, postgres_schema: str
) -> None:
    """A team moves its notes into PostgreSQL and back; the CLI works on PostgreSQL with no folder at all."""
    pg = {"LOCAL_AI_MEMORY_DATABASE_URL": postgres_url, "LOCAL_AI_MEMORY_DATABASE_SCHEMA": postgres_schema}
    nowhere = tmp_path / "no-folder"
    imported = run("notes", "import", str(data / "memory_data"), "-d", str(nowhere), env=pg)
    assert imported.returncode == 0, imported.stderr
    assert "Imported 2 note(s)" in imported.stdout
    found = json.loads(run("search", "kestrel", "-u", "ops", "-d", str(nowhere), "--json", env=pg).stdout)
    assert [f["filename"] for f in found] == ["ops_runbook.md"]
    users = json.loads(run("sessions", "-d", str(nowhere), "--json", env=pg).stdout)
    assert [(u["user_id"], u["notes"]) for u in users] == [("ops", 1), ("ops_admin", 1)]
    again = run("notes", "import", str(data / "memory_data"), "-d", str(nowhere), env=pg)
    assert again.returncode == 1
    assert "already exist" in again.stderr
    back = tmp_path / "back"
    exported = run("notes", "export", str(back), "-d", str(nowhere), env=pg)
    assert exported.returncode == 0, exported.stderr
    for name in ("ops_runbook.md", "ops%5Fadmin_secret.md"):
        assert (back / "knowledge" / name).read_bytes() == (data / "memory_data" / "knowledge" / name).read_bytes()
    assert not nowhere.exists()
