"""Message normalization and the append-only session store."""

from __future__ import annotations

import errno
import json
import logging
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from local_ai_memory import MemoryConfig
from local_ai_memory._runtime.compressor import WorkingMemoryCompressor
from local_ai_memory._runtime.messages import Message, SessionMessageStore, to_message
from local_ai_memory._runtime.run import afinish_run, finish_run
from local_ai_memory._runtime.scope import MemoryManager
from local_ai_memory._shared import fs as _fs
from local_ai_memory._shared.errors import InvalidInputError, StorageError, UnsupportedFormatError
from local_ai_memory._shared.naming import DirectoryGuard
from local_ai_memory.backends import FileRuntimeBackend


@pytest.fixture
def manager(tmp_path: Path) -> MemoryManager:
    return MemoryManager(FileRuntimeBackend.from_config(MemoryConfig(), DirectoryGuard(tmp_path))).scoped("alice", "s1")


@pytest.fixture
def store(manager: MemoryManager) -> SessionMessageStore:
    return SessionMessageStore.for_manager(manager)


def turns(n: int, start: int = 0) -> list[dict[str, Any]]:
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i}"} for i in range(start, start + n)]


def test_to_message_shapes() -> None:
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
    from llama_index.core.llms import ChatMessage, MessageRole

    assert to_message({"role": "user", "content": "hi"}) == Message("user", "hi")
    openai_call = {"role": "assistant", "content": None, "tool_calls": [{"id": "1", "function": {"name": "ls"}}]}
    assert to_message(openai_call) == Message("assistant", "", tool_calls=("ls",))
    assert to_message(HumanMessage("q")) == Message("user", "q")
    assert to_message(SystemMessage("s")).role == "system"
    blocks = AIMessage([{"type": "text", "text": "a"}, "b"], tool_calls=[{"name": "grep", "args": {}, "id": "9"}])
    assert to_message(blocks) == Message("assistant", "a\nb", tool_calls=("grep",))
    assert to_message(ToolMessage("out", tool_call_id="9", name="grep")) == Message("tool", "out", "grep", "9")
    assert to_message(ChatMessage(role=MessageRole.ASSISTANT, content="x")) == Message("assistant", "x")
    assert to_message(ChatMessage(role=MessageRole.TOOL, content="y")).role == "tool"
    with pytest.raises(InvalidInputError):
        to_message({"content": "no role"})


def session_file(store: SessionMessageStore) -> Path:
    """Where the file backend keeps the store's messages."""
    assert store.backend.guard is not None
    return store.backend.guard.resolve("memory", "sessions", f"{store.scope_info.key}.jsonl")


def test_append_read_and_file_format(store: SessionMessageStore) -> None:
    assert store.messages() == []
    assert len(store) == 0
    assert store.append(turns(3)) == 3
    assert store.append([{"role": "tool", "name": "ls", "tool_call_id": "7", "content": "a\nb ✓"}]) == 1
    assert store.append([]) == 0
    messages = store.messages()
    assert [m.content for m in messages] == ["turn 0", "turn 1", "turn 2", "a\nb ✓"]
    assert messages[-1] == Message("tool", "a\nb ✓", "ls", "7")
    assert session_file(store).name == "alice_s1.jsonl"
    lines = session_file(store).read_bytes().splitlines()
    assert len(lines) == 4
    record = json.loads(lines[0])
    assert record["format_version"] == 1
    assert record["role"] == "user"
    assert record["created_at"] > 0


def test_torn_last_line_is_skipped_and_sealed(store: SessionMessageStore, caplog: pytest.LogCaptureFixture) -> None:
    store.append(turns(2))
    _fs.append_bytes(session_file(store), b'{"format_version": 1, "role": "user", "cont')  # a crash mid-append
    assert [m.content for m in store.messages()] == ["turn 0", "turn 1"]
    store.append(turns(1, start=2))
    with caplog.at_level(logging.INFO, logger="local_ai_memory"):
        assert [m.content for m in store.messages()] == ["turn 0", "turn 1", "turn 2"]
    assert any(getattr(r, "event", "") == "MEMORY_CORRUPT" for r in caplog.records)


def test_newer_format_is_refused(store: SessionMessageStore) -> None:
    store.append(turns(1))
    _fs.append_bytes(session_file(store), b'{"format_version": 2, "role": "user", "content": "future"}\n')
    with pytest.raises(UnsupportedFormatError):
        store.messages()


def test_compact_and_clear(store: SessionMessageStore) -> None:
    store.append(turns(10))
    assert store.compact(4) == 6
    assert [m.content for m in store.messages()] == [f"turn {i}" for i in range(6, 10)]
    assert store.compact() == 0  # the config's keep_last is 6 and only 4 are left
    assert store.compact(0) == 4
    assert store.messages() == []
    with pytest.raises(InvalidInputError):
        store.compact(-1)
    assert store.clear() is True
    assert store.clear() is False
    assert store.compact(3) == 0
    assert not session_file(store).exists()


class FailReplace(_fs.Syscalls):
    def replace(self, src: str, dst: str) -> None:
        raise OSError(errno.EIO, "injected")


def test_compact_is_atomic(store: SessionMessageStore) -> None:
    store.append(turns(8))
    before = session_file(store).read_bytes()
    with _fs.use_syscalls(FailReplace()), pytest.raises(StorageError):
        store.compact(2)
    assert session_file(store).read_bytes() == before
    assert [p.name for p in session_file(store).parent.iterdir() if p.name.endswith(".tmp")] == []


def test_scopes_are_separate(manager: MemoryManager) -> None:
    a = SessionMessageStore.for_manager(manager)
    b = SessionMessageStore.for_manager(manager.scoped("alice_s1", "x"))
    unscoped = SessionMessageStore(FileRuntimeBackend.from_config(MemoryConfig(), manager.backend.guard))
    a.append(turns(2))
    assert b.messages() == []
    assert unscoped.messages() == []
    assert session_file(unscoped).name == "global.jsonl"
    assert session_file(a) != session_file(b)
    with pytest.raises(InvalidInputError):
        SessionMessageStore(
            FileRuntimeBackend.from_config(MemoryConfig(), manager.backend.guard), user_id="../x", session_id="s"
        )


def test_concurrent_appends_from_processes(store: SessionMessageStore) -> None:
    script = textwrap.dedent(
        f"""
        import sys
        from local_ai_memory._shared.naming import DirectoryGuard
        from local_ai_memory._runtime.messages import SessionMessageStore
        from local_ai_memory.backends import FileRuntimeBackend
        backend = FileRuntimeBackend(DirectoryGuard({str(store.backend.guard.root)!r}))
        store = SessionMessageStore(backend, user_id="alice", session_id="s1")
        for i in range(40):
            store.append([{{"role": "user", "content": sys.argv[1] + str(i)}}])
        """
    )
    workers = [subprocess.Popen([sys.executable, "-c", script, tag]) for tag in ("a", "b", "c")]
    assert [w.wait(timeout=120) for w in workers] == [0, 0, 0]
    contents = [m.content for m in store.messages()]
    assert len(contents) == 120
    for tag in "abc":
        assert [c for c in contents if c.startswith(tag)] == [f"{tag}{i}" for i in range(40)]


class BrokenLLM:
    def complete(self, prompt: str) -> str:
        raise RuntimeError("down")

    async def acomplete(self, prompt: str) -> str:
        raise RuntimeError("down")


def test_finish_run_compacts_only_after_a_successful_summary(
    manager: MemoryManager, store: SessionMessageStore
) -> None:
    run = turns(12)
    store.append(run)
    outcome = finish_run(WorkingMemoryCompressor(manager, BrokenLLM()), store, run, history_limit=8)
    assert outcome.status == "summary_failed"
    assert len(store) == 12
    outcome = finish_run(WorkingMemoryCompressor(manager), store, run, history_limit=20)
    assert outcome.status == "kept"
    assert len(store) == 12
    outcome = finish_run(WorkingMemoryCompressor(manager), store, run, history_limit=8, keep_last=3)
    assert outcome.status == "compacted"
    assert outcome.compacted == 9
    assert [m.content for m in store.messages()] == ["turn 9", "turn 10", "turn 11"]
    assert manager.get_state()["current_task"] == "turn 10"


async def test_async_twins(manager: MemoryManager, store: SessionMessageStore) -> None:
    assert await store.aappend(turns(9)) == 9
    assert len(await store.amessages()) == 9
    outcome = await afinish_run(WorkingMemoryCompressor(manager), store, turns(9), history_limit=4)
    assert outcome.status == "compacted"
    assert len(await store.amessages()) == 6
    assert await store.acompact(1) == 5
    assert await store.aclear() is True
