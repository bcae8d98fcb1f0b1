"""A lone surrogate (``"a\\ud800b"``) is refused on every write path, on every backend, with
:class:`InvalidInputError` and before anything is written (issue 41): it crashed a write on
files with a raw ``UnicodeEncodeError`` and was kept in memory, so one rule was needed. The
rule and why it refuses rather than escapes: ``local_ai_memory._shared.unicode``."""

from __future__ import annotations

import json
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from local_ai_memory import InvalidInputError, Memory, MemoryConfig, note_hash

BAD = "a\ud800b"
BIG = "zebra output\n" * 1000  # above the inline limit: stored as a tool result


@pytest.fixture(params=["files", "in_memory", "postgres"])
def memory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Memory]:
    if request.param == "files":
        opened = Memory.open(tmp_path / "data", fsync=False)
    elif request.param == "in_memory":
        opened = Memory.in_memory()
    else:
        url, schema = request.getfixturevalue("postgres_url"), request.getfixturevalue("postgres_schema")
        opened = Memory(MemoryConfig(runtime_data_dir=tmp_path / "pg", database_url=url, database_schema=schema))
    with opened:
        yield opened


def _seed(memory: Memory) -> dict[str, Any]:
    """Something of every kind, stored before the refused writes; returns what reading it gives."""
    session = memory.session("alice", "s1")
    session.update_state({"task": "ship", "notes": ["héllo 🙂"]})
    session.update_working_memory("# Working memory\n\nkeep this")
    session.messages.append([{"role": "user", "content": "first"}])
    session.messages.append_items([{"type": "function_call_output", "call_id": "c1", "output": "3"}])
    session.engine.save_plan("p1", {"steps": ["read"]})
    session.engine.append_plan_steps("p1", [{"step": 1}])
    reference = json.loads(session.externalize("grep", BIG))
    memory.knowledge.write_note("alice", "deploy", "# Deploy\n\nblue-green")
    return _read(memory, reference["result_id"])


def _read(memory: Memory, result_id: str) -> dict[str, Any]:
    session = memory.session("alice", "s1")
    return {
        "state": session.get_state(),
        "working": session.get_working_memory(),
        "items": session.messages.items(),
        "plans": session.engine.list_plans(),
        "steps": session.engine.plan_steps("p1"),
        "results": sorted(session.list_tool_results()),
        "output": session.engine.load_tool_result(result_id)["content"],
        "notes": [(n.name, memory.knowledge.read_note("alice", n.name)) for n in memory.knowledge.notes("alice")],
        "hits": [hit.filename for hit in memory.knowledge.search("blue-green", "alice")],
    }


WRITES: dict[str, Callable[[Memory], object]] = {
    "state value": lambda m: m.session("alice", "s1").update_state({"task": BAD}),
    "state key": lambda m: m.session("alice", "s1").update_state({"notes": {BAD: 1}}),
    "state replaced": lambda m: m.session("alice", "s1").replace_state({"deep": [[{"x": BAD}]]}),
    "working memory": lambda m: m.session("alice", "s1").update_working_memory(BAD),
    "working memory swap": lambda m: m.session("alice", "s1").swap_working_memory(None, BAD),
    "messages (the second bad)": lambda m: m.session("alice", "s1").messages.append(
        [{"role": "user", "content": "fine"}, {"role": "user", "content": BAD}]
    ),
    "tool call arguments": lambda m: m.session("alice", "s1").messages.append(
        [{"role": "assistant", "content": "", "tool_calls": [{"name": "grep", "args": {"q": BAD}, "id": "c2"}]}]
    ),
    "items (the second bad)": lambda m: m.session("alice", "s1").messages.append_items(
        [{"role": "user", "content": "fine"}, {"role": "user", "content": [{"type": "input_text", "text": BAD}]}]
    ),
    "item key": lambda m: m.session("alice", "s1").messages.append_items([{"role": "user", "content": "x", BAD: 1}]),
    "plan": lambda m: m.session("alice", "s1").engine.save_plan("p2", {"goal": BAD}),
    "plan steps": lambda m: m.session("alice", "s1").engine.append_plan_steps("p1", [{"step": 2}, {"said": BAD}]),
    "tool output": lambda m: m.session("alice", "s1").externalize("grep", BIG + BAD),
    "tool name": lambda m: m.session("alice", "s1").externalize("gr\udc80ep", BIG),
    "note": lambda m: m.knowledge.write_note("alice", "other", "# Other\n\n" + BAD),
    "note replaced": lambda m: m.knowledge.write_note("alice", "deploy", BAD),
    "note replaced if unchanged": lambda m: m.knowledge.write_note(
        "alice", "deploy", BAD, expected_hash=note_hash(m.knowledge.read_note("alice", "deploy"))
    ),
    "note edit": lambda m: m.knowledge.edit_note("alice", "deploy", "blue-green", BAD),
    "note insert": lambda m: m.knowledge.insert_into_note("alice", "deploy", 1, BAD),
}


@pytest.mark.parametrize("write", list(WRITES))
def test_a_lone_surrogate_is_refused_and_nothing_stored_changes(memory: Memory, write: str) -> None:
    before = _seed(memory)
    result_id = before["results"][0]
    with pytest.raises(InvalidInputError, match=r"not Unicode text: a lone surrogate U\+D[89A-F][0-9A-F]{2}"):
        WRITES[write](memory)
    assert _read(memory, result_id) == before


async def test_the_async_twins_refuse_it_too(memory: Memory) -> None:
    before = _seed(memory)
    session = memory.session("alice", "s1")
    for write in (
        session.aupdate_state({"task": BAD}),
        session.messages.aappend([{"role": "user", "content": BAD}]),
        session.messages.aappend_items([{"role": "user", "content": BAD}]),
        session.aexternalize("grep", BIG + BAD),
        session.aupdate_working_memory(BAD),
    ):
        with pytest.raises(InvalidInputError, match="lone surrogate"):
            await write
    assert _read(memory, before["results"][0]) == before


def test_the_error_says_where_the_character_is() -> None:
    with Memory.in_memory() as memory, pytest.raises(InvalidInputError) as refused:
        memory.session("alice", "s1").update_state({"notes": ["ok", {"text": "abc\udc9f"}]})
    assert "state patch['notes'][1]['text']" in str(refused.value)
    assert "U+DC9F at character 3" in str(refused.value)


def test_text_that_is_unicode_still_goes_in_whole() -> None:
    """Astral characters, NUL and a surrogate pair's character written as one code point pass."""
    with Memory.in_memory() as memory:
        session = memory.session("alice", "s1")
        text = "🙂 \x00 \U0010ffff ünï"
        session.update_state({text: text})
        assert session.get_state() == {text: text}
        memory.knowledge.write_note("alice", "n", text)
        assert memory.knowledge.read_note("alice", "n") == text


def test_an_archive_holding_one_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    """An archive carries what an older version may have kept (it escapes lone surrogates):
    importing it refuses the whole archive, naming the session and the place."""
    with Memory.open(tmp_path / "src", fsync=False) as source:
        session = source.session("alice", "s1")
        session.update_state({"task": "ship"})
        source.knowledge.write_note("alice", "deploy", "# Deploy\n\nblue-green")
        source.export(tmp_path / "alice.zip", "alice")
    hostile = tmp_path / "hostile.zip"
    with zipfile.ZipFile(tmp_path / "alice.zip") as plain, zipfile.ZipFile(hostile, "w") as out:
        for info in plain.infolist():
            data = plain.read(info)
            if info.filename.endswith("state.json"):
                data = json.dumps({"task": BAD}).encode("ascii")  # JSON's \ud800 escape
            out.writestr(info, data)
    with Memory.open(tmp_path / "dst", fsync=False) as target:
        with pytest.raises(InvalidInputError, match=r"session 's1' of the archive\['state'\]\['task'\]"):
            target.import_archive(hostile)
        assert target.users() == []
        assert target.knowledge.notes("alice") == []
