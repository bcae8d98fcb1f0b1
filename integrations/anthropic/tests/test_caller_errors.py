"""A hostile model driving the memory tool: no error answer names a host path (the data folder,
a link's target) or a user's file prefix; a link to another user's note is refused; and one
category folder linked out of the data folder does not hide the rest of ``/memories``."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from anthropic.lib.tools import ToolError
from claude_fakes import Use, refused

from local_ai_memory import Memory


@pytest.fixture
def linked(memory: Memory, tmp_path: Path) -> tuple[Memory, list[str]]:
    """``memory`` where alice's folder holds a link to bob's note and one out of the data folder,
    and the ``projects`` category is a folder linked outside; returns the host paths to hide."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "alice_o.md").write_text("outside", encoding="utf-8")
    memory.knowledge.write_note("alice", "mine", "alpha")
    memory.knowledge.write_note("bob", "secret", "bob's secret")
    root = memory.root
    assert root is not None
    notes = root / "memory_data"
    (notes / "knowledge" / "alice_link.md").symlink_to(notes / "knowledge" / "bob_secret.md")
    (notes / "knowledge" / "alice_out.md").symlink_to(outside / "alice_o.md")
    projects = notes / "projects"
    for child in projects.iterdir() if projects.is_dir() else ():
        child.unlink()
    if projects.is_dir():
        projects.rmdir()
    projects.symlink_to(outside, target_is_directory=True)
    hidden = {str(root), os.path.realpath(root), str(outside), os.path.realpath(outside), str(tmp_path)}
    return memory, sorted(hidden)


PATHS = [
    "/memories/link.md",
    "/memories/out.md",
    "/memories/projects/o.md",
    "/memories/projects",
    "/memories/bob_secret.md",
    "/memories/alice_mine.md",
    "/memories/nope.md",
    "/memories/../etc/passwd",
    "/etc/passwd",
    "/memories/a\x00.md",
    "/memories/elsewhere/a.md",
    "/memories/" + "a" * 300 + ".md",
    "/memories/a\u202e.md",
]


def calls(path: str) -> list[tuple[str, dict[str, Any]]]:
    return [
        ("view", {"path": path}),
        ("create", {"path": path, "file_text": "x"}),
        ("str_replace", {"path": path, "old_str": "alpha", "new_str": "beta"}),
        ("insert", {"path": path, "insert_line": 0, "insert_text": "x"}),
        ("delete", {"path": path}),
        ("rename", {"old_path": path, "new_path": "/memories/ok.md"}),
        ("rename", {"old_path": "/memories/mine.md", "new_path": path}),
    ]


def test_no_error_answer_names_a_host_path_or_a_file_prefix(
    linked: tuple[Memory, list[str]], tool_for: Callable[[str], Use]
) -> None:
    _, hidden = linked
    use = tool_for("alice")
    errors = 0
    for path in PATHS:
        for command, fields in calls(path):
            done = False
            try:
                answer, done = use(command, **fields), True
            except ToolError as error:
                answer = str(error)
                errors += 1
            sent = "".join(str(value) for value in fields.values())
            assert not [folder for folder in hidden if folder in answer], (command, fields, answer)
            for prefix in ("alice_", "bob_"):
                assert prefix in sent or prefix not in answer, (command, fields, answer)
            if done and command == "rename" and fields["old_path"] == "/memories/mine.md":
                use("rename", old_path=fields["new_path"], new_path="/memories/mine.md")  # put it back
    assert errors > 60


def test_a_link_to_another_users_note_is_refused(
    linked: tuple[Memory, list[str]], tool_for: Callable[[str], Use]
) -> None:
    use = tool_for("alice")
    assert "bob's secret" not in refused(use, "view", path="/memories/link.md")
    assert "outside your notes" in refused(use, "view", path="/memories/link.md")
    assert "outside your notes" in refused(use, "str_replace", path="/memories/link.md", old_str="bob", new_str="x")
    memory, _ = linked
    assert memory.knowledge.read_note("bob", "secret") == "bob's secret"


def test_one_category_linked_outside_does_not_hide_the_rest(
    linked: tuple[Memory, list[str]], tool_for: Callable[[str], Use]
) -> None:
    listing = tool_for("alice")("view", path="/memories")
    assert "/memories/mine.md" in listing
    assert "/memories/projects/ (cannot be read)" in listing
    assert "outside your notes" in refused(tool_for("alice"), "view", path="/memories/projects")
