"""Tool-call arguments survive normalization and storage (a summary of the run may name them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from local_ai_memory import MemoryConfig
from local_ai_memory._runtime.merge_cursor import message_key
from local_ai_memory._runtime.messages import Message, SessionMessageStore, to_message
from local_ai_memory._runtime.scope import MemoryManager
from local_ai_memory._shared import fs as _fs
from local_ai_memory._shared.naming import DirectoryGuard
from local_ai_memory.backends import FileRuntimeBackend


@pytest.fixture
def store(tmp_path: Path) -> SessionMessageStore:
    backend = FileRuntimeBackend.from_config(MemoryConfig(), DirectoryGuard(tmp_path))
    return SessionMessageStore.for_manager(MemoryManager(backend).scoped("alice", "s1"))


def test_arguments_of_each_framework_shape_are_kept() -> None:
    from langchain_core.messages import AIMessage

    langchain = AIMessage("", tool_calls=[{"name": "read_file", "args": {"path": "src/app.py"}, "id": "1"}])
    assert to_message(langchain) == Message(
        "assistant", "", tool_calls=("read_file",), tool_arguments=('{"path": "src/app.py"}',)
    )
    openai = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "1", "type": "function", "function": {"name": "search", "arguments": '{"query": "p99"}'}},
            {"id": "2", "type": "function", "function": {"name": "ls"}},
        ],
    }
    assert to_message(openai).tool_calls == ("search", "ls")
    assert to_message(openai).tool_arguments == ('{"query": "p99"}', "")  # in the order of the calls
    responses = {"type": "function_call", "call_id": "c1", "name": "grep", "arguments": '{"pattern": "ERR"}'}
    assert to_message(responses).tool_arguments == ('{"pattern": "ERR"}',)
    # no arguments at all: nothing kept, so such a message is equal to what it was before
    bare = AIMessage("", tool_calls=[{"name": "grep", "args": {}, "id": "9"}])
    assert to_message(bare) == Message("assistant", "", tool_calls=("grep",))


def test_normal_form_dict_round_trips_the_arguments() -> None:
    message = Message("assistant", "", tool_calls=("a", "b"), tool_arguments=('{"x": 1}', ""))
    assert message.to_dict()["tool_arguments"] == ['{"x": 1}', ""]
    assert to_message(message.to_dict()) == message
    assert "tool_arguments" not in Message("assistant", "hi").to_dict()


def test_arguments_are_stored_and_old_records_still_read(store: SessionMessageStore) -> None:
    call = {"role": "assistant", "content": "", "tool_calls": [{"name": "read_file", "args": {"path": "a.py"}}]}
    store.append([call])
    assert store.messages()[0].tool_arguments == ('{"path": "a.py"}',)
    assert isinstance(store.backend, FileRuntimeBackend)
    assert store.backend.guard is not None
    path = store.backend.guard.resolve("memory", "sessions", f"{store.scope_info.key}.jsonl")
    # a record written before arguments were kept: same format version, no field
    old = {"format_version": 1, "seq": 1, "role": "assistant", "content": "", "tool_calls": ["ls"]}
    _fs.append_bytes(path, (json.dumps(old) + "\n").encode())
    assert store.messages()[1] == Message("assistant", "", tool_calls=("ls",))


def test_arguments_do_not_change_the_merge_key() -> None:
    """Cursors written before arguments were kept must still find their messages after an upgrade."""
    with_args = {"role": "assistant", "content": "", "tool_calls": [{"name": "ls", "args": {"path": "/"}}]}
    without = {"role": "assistant", "content": "", "tool_calls": ["ls"]}
    assert message_key(with_args) == message_key(without)
