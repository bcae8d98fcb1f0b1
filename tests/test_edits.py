"""The shared note-editing rules: unique replacement, line insertion, expected hashes."""

from __future__ import annotations

from pathlib import Path

import pytest

from local_ai_memory import ConflictError, InvalidInputError, Memory, RecordNotFoundError, note_hash
from local_ai_memory._knowledge.edits import check_expected, insert_lines, replace_unique


def test_replace_unique_replaces_the_one_occurrence() -> None:
    assert replace_unique("deploy on friday", "friday", "monday") == "deploy on monday"


@pytest.mark.parametrize(("old", "says"), [("", "empty"), ("tuesday", "does not occur"), ("a", "occurs 4 times")])
def test_replace_unique_refuses_what_is_not_exactly_one(old: str, says: str) -> None:
    with pytest.raises(InvalidInputError, match=says):
        replace_unique("a banana", old, "x")


@pytest.mark.parametrize(
    ("text", "line", "expected"),
    [("a\nb\n", 0, "x\na\nb\n"), ("a\nb\n", 1, "a\nx\nb\n"), ("a\nb", 2, "a\nb\nx\n"), ("", 0, "x\n")],
)
def test_insert_lines_places_whole_lines(text: str, line: int, expected: str) -> None:
    assert insert_lines(text, line, "x") == expected


@pytest.mark.parametrize("line", [-1, 3])
def test_insert_lines_refuses_a_line_outside_the_note(line: int) -> None:
    with pytest.raises(InvalidInputError, match="outside"):
        insert_lines("a\nb\n", line, "x")


def test_note_hash_is_the_same_for_text_and_its_utf8_bytes() -> None:
    assert note_hash("café") == note_hash("café".encode()) != note_hash("cafe")


def test_check_expected_names_the_current_hash_on_a_mismatch() -> None:
    check_expected("v1", None, "n")  # no expectation: anything goes
    check_expected("v1", note_hash("v1"), "n")
    check_expected(None, "", "n")  # "must not exist yet" and it does not
    with pytest.raises(ConflictError) as caught:
        check_expected("v2", note_hash("v1"), "n")
    assert caught.value.current_hash == note_hash("v2")
    with pytest.raises(ConflictError) as created:
        check_expected("v1", "", "n")
    assert created.value.current_hash == note_hash("v1")
    with pytest.raises(ConflictError) as gone:
        check_expected(None, note_hash("v1"), "n")
    assert gone.value.current_hash is None


def test_knowledge_edits_apply_the_rules_and_check_the_expected_hash(tmp_path: Path) -> None:
    with Memory.open(tmp_path) as memory:
        notes = memory.knowledge
        notes.write_note("alice", "deploy", "# Deploy\n\nRun make ship on friday.\n", expected_hash="")
        with pytest.raises(ConflictError):  # "" means create: it exists now
            notes.write_note("alice", "deploy", "other", expected_hash="")
        first = note_hash(notes.read_note("alice", "deploy"))
        second = notes.edit_note("alice", "deploy", "friday", "monday", expected_hash=first)
        assert notes.read_note("alice", "deploy") == "# Deploy\n\nRun make ship on monday.\n"
        assert second == note_hash(notes.read_note("alice", "deploy"))
        with pytest.raises(ConflictError) as stale:
            notes.insert_into_note("alice", "deploy", 1, "Owner: ops", expected_hash=first)
        assert stale.value.current_hash == second
        notes.insert_into_note("alice", "deploy", 1, "Owner: ops", expected_hash=second)
        assert notes.read_note("alice", "deploy").splitlines()[1] == "Owner: ops"
        with pytest.raises(RecordNotFoundError):
            notes.edit_note("alice", "missing", "a", "b")
        assert [hit.filename for hit in notes.search("monday ship", user_id="alice")] == ["alice_deploy.md"]


def test_a_rename_never_loses_an_edit_made_during_the_move(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with Memory.open(tmp_path) as memory:
        notes = memory.knowledge
        notes.write_note("alice", "draft", "v1\n")
        write = type(notes).write_note

        def write_then_edit_the_source(self: object, user_id: str, name: str, text: str, **options: object) -> str:
            written = write(notes, user_id, name, text, **options)  # type: ignore[arg-type]
            if name == "final":  # another writer edits the source between the copy and the delete
                write(notes, "alice", "draft", "v2\n")
            return written

        monkeypatch.setattr(type(notes), "write_note", write_then_edit_the_source)
        with pytest.raises(ConflictError):
            notes.rename_note("alice", "draft", "final")
        monkeypatch.undo()
        assert notes.read_note("alice", "draft") == "v2\n"
        assert [note.name for note in notes.notes("alice")] == ["draft"]
        assert notes.rename_note("alice", "draft", "final") == "alice_final.md"
        assert [note.name for note in notes.notes("alice")] == ["final"]
