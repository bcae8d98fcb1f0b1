"""Framework items kept exactly in the session log (``append_items`` / ``items`` / ``pop_item``)
and ``Knowledge.rename_note``: the two core capabilities the Agents SDK session and Claude's
memory tool stand on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from local_ai_memory import ConflictError, InvalidInputError, Memory, RecordNotFoundError
from local_ai_memory._runtime.messages import to_message

ITEMS = [
    {"role": "user", "content": "héllo \x00 \r\n 🙂"},
    {"type": "function_call", "call_id": "c1", "name": "grep", "arguments": '{"q": "x"}', "id": "fc_1"},
    {"type": "function_call_output", "call_id": "c1", "output": "found 3"},
    {
        "type": "message",
        "role": "assistant",
        "id": "msg_1",
        "status": "completed",
        "content": [{"type": "output_text", "text": "done", "annotations": [], "logprobs": []}],
    },
    {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "thinking"}], "n": 1.5},
]


@pytest.fixture(params=["files", "in_memory"])
def memory(request: pytest.FixtureRequest, tmp_path: Path) -> Memory:
    return Memory.open(tmp_path) if request.param == "files" else Memory.in_memory()


def test_items_round_trip_exactly_and_have_a_normal_form(memory: Memory) -> None:
    log = memory.session("alice", "s1").messages
    assert log.append_items(ITEMS) == len(ITEMS)
    back = log.items()
    assert back == ITEMS
    assert [json.dumps(item) for item in back] == [json.dumps(item) for item in ITEMS]
    assert log.items(2) == ITEMS[-2:]
    assert log.items(0) == []
    assert log.items(99) == ITEMS
    roles = [message.role for message in log.messages()]
    assert roles == ["user", "assistant", "tool", "assistant", "assistant"]
    assert log.messages()[1].tool_calls == ("grep",)
    assert log.messages()[2].content == "found 3"
    with pytest.raises(InvalidInputError):
        log.items(-1)


def test_pop_item_takes_the_newest(memory: Memory) -> None:
    log = memory.session("alice", "s1").messages
    assert log.pop_item() is None
    log.append([{"role": "user", "content": "plain"}])
    log.append_items(ITEMS[:2])
    assert log.pop_item() == ITEMS[1]
    assert log.pop_item() == ITEMS[0]
    assert log.pop_item() == {"role": "user", "content": "plain"}  # appended as a message: its normal form
    assert log.pop_item() is None


async def test_async_twins(memory: Memory) -> None:
    log = memory.session("alice", "s1").messages
    assert await log.aappend_items(ITEMS) == len(ITEMS)
    assert await log.aitems(1) == ITEMS[-1:]
    assert await log.apop_item() == ITEMS[-1]
    assert await log.aitems() == ITEMS[:-1]
    assert await log.aappend_items([]) == 0


def test_items_that_are_no_json_are_refused(memory: Memory) -> None:
    log = memory.session("alice", "s1").messages
    with pytest.raises(InvalidInputError):
        log.append_items([{"role": "user", "content": b"bytes"}])
    with pytest.raises(InvalidInputError):
        log.append_items({"role": "user", "content": "one dict, not a list"})  # type: ignore[arg-type]
    assert log.items() == []


def test_pop_never_reaches_another_scope(memory: Memory) -> None:
    memory.session("bob", "s1").messages.append_items([{"role": "user", "content": "bob's"}])
    memory.session("bob_admin", "s1").messages.append_items([{"role": "user", "content": "admin's"}])
    assert memory.session("bob", "s2").messages.pop_item() is None
    assert memory.session("bob", "s1").messages.pop_item() == {"role": "user", "content": "bob's"}
    assert memory.session("bob_admin", "s1").messages.items() == [{"role": "user", "content": "admin's"}]


def test_responses_items_normalize() -> None:
    assert to_message({"type": "computer_call_output", "call_id": "c", "output": [{"text": "a"}]}).role == "tool"
    assert to_message({"type": "file_search_call", "id": "x"}).tool_calls == ("file_search_call",)
    assert to_message({"type": "compaction", "content": "summary"}).role == "compaction"


def test_rename_note_moves_text_and_index(memory: Memory) -> None:
    knowledge = memory.knowledge
    knowledge.write_note("alice", "old", "the zebra password is blue")
    assert knowledge.rename_note("alice", "old", "new") == "alice_new.md"
    assert knowledge.read_note("alice", "new") == "the zebra password is blue"
    with pytest.raises(RecordNotFoundError):
        knowledge.read_note("alice", "old")
    assert [hit.filename for hit in knowledge.search("zebra", "alice")] == ["alice_new.md"]
    knowledge.write_note("alice", "taken", "x")
    with pytest.raises(ConflictError):
        knowledge.rename_note("alice", "new", "taken")
    assert knowledge.read_note("alice", "new") == "the zebra password is blue"  # nothing lost on refusal
    with pytest.raises(RecordNotFoundError):
        knowledge.rename_note("alice", "missing", "other")
    assert knowledge.rename_note("alice", "new", "new") == "alice_new.md"


async def test_rename_note_async_and_across_categories(tmp_path: Path) -> None:
    memory = Memory.open(tmp_path, categories=["knowledge", "projects"])
    knowledge = memory.knowledge
    await knowledge.awrite_note("alice", "plan", "ship it")
    await knowledge.arename_note("alice", "plan", "plan", new_category="projects")
    assert knowledge.read_note("alice", "plan", category="projects") == "ship it"
    assert [tuple(note) for note in knowledge.notes("alice")] == [("plan", "projects")]
    assert await knowledge.aedit_note("alice", "plan", "ship", "test", category="projects")
    assert await knowledge.ainsert_into_note("alice", "plan", 0, "# Plan", category="projects")
    assert knowledge.read_note("alice", "plan", category="projects") == "# Plan\ntest it\n"


def test_items_survive_export_and_import(tmp_path: Path) -> None:
    source = Memory.open(tmp_path / "a", fsync=False)
    source.session("alice", "s1").messages.append_items(ITEMS)
    source.export(tmp_path / "alice.zip", "alice")
    target = Memory.open(tmp_path / "b", fsync=False)
    target.import_archive(tmp_path / "alice.zip")
    back = target.session("alice", "s1").messages.items()
    assert [json.dumps(item) for item in back] == [json.dumps(item) for item in ITEMS]
