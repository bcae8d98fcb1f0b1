"""Adapters built from one ``local_ai_memory.Memory`` share it: the tool spec, the externalizing
wrapper, the memory block and the retriever see the same session and the same notes, and a
``Memory.in_memory()`` keeps all of it in the process (no file anywhere)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.tools import FunctionTool
from llama_index.memory.local_ai_memory import LocalWorkingMemoryBlock
from llama_index.retrievers.local_ai_memory import LocalMemoryRetriever
from llama_index.tools.local_ai_memory import ExternalizingTool, LocalMemoryToolSpec

from local_ai_memory import Memory, MemoryConfig


def _log_tool() -> FunctionTool:
    def read_log() -> str:
        """Return the whole server log."""
        return "\n".join(f"line {i}: all good" for i in range(2_000))

    return FunctionTool.from_defaults(fn=read_log)


def _adapters(memory: Memory) -> tuple[LocalMemoryToolSpec, LocalWorkingMemoryBlock, LocalMemoryRetriever]:
    spec = LocalMemoryToolSpec(memory=memory, user_id="alice", session_id="s1", search=True)
    block = LocalWorkingMemoryBlock(memory=memory, user_id="alice", session_id="s1")
    retriever = LocalMemoryRetriever(memory=memory, user_id="alice")
    return spec, block, retriever


async def test_spec_wrapper_and_block_of_one_in_memory_memory_see_the_same_session() -> None:
    memory = Memory.in_memory()
    spec, block, _ = _adapters(memory)
    assert spec.memory is block.memory is memory
    # An output stored by a wrapper built on its own from the memory is paged back by the spec...
    wrapped = ExternalizingTool(_log_tool(), memory=memory, user_id="alice", session_id="s1")
    reference = json.loads(wrapped.call().content)
    page = spec.load_tool_result(reference["result_id"], offset=0, limit=20)
    assert page.split("\n", 1)[1] == "line 0: all good\nlin"
    # ...and the block's session holds it too.
    assert reference["result_id"] in block.session.list_tool_results()
    # What the block merges into L1 is what the spec's session (and any new one) reads.
    result = await block.asummarize_messages([ChatMessage(role="user", content="Rotate the kestrel keys.")])
    assert result is not None
    assert result.ok
    assert "Rotate the kestrel keys." in spec.session.get_working_memory()
    assert memory.session("alice", "s1").get_working_memory() == await block.aget()
    # Another scope of the same memory sees neither.
    other = LocalMemoryToolSpec(memory=memory, user_id="alice", session_id="s2")
    assert other.session.get_working_memory() == ""
    assert reference["result_id"] not in other.session.list_tool_results()


async def test_a_note_written_through_the_memory_is_found_without_a_refresh() -> None:
    memory = Memory.in_memory()
    spec, _, retriever = _adapters(memory)
    assert retriever.retrieve("kestrel rotation") == []  # the index is loaded and empty
    assert await spec.asearch_memory("kestrel rotation") == "No matching notes in memory."
    memory.knowledge.write_note("alice", "keys", "# Key rotation\n\nRotate the kestrel keys every Monday.\n")
    assert [n.node.metadata["filename"] for n in retriever.retrieve("kestrel rotation")] == ["alice_keys.md"]
    assert [n.node.metadata["filename"] for n in await retriever.aretrieve("kestrel rotation")] == ["alice_keys.md"]
    assert "Rotate the kestrel keys every Monday." in spec.search_memory("kestrel rotation")
    memory.knowledge.delete_note("alice", "keys")
    assert retriever.retrieve("kestrel rotation") == []


async def test_the_same_holds_over_files(memory: Memory) -> None:
    """A file-backed memory shared by the adapters: the same answers, no second index to refresh."""
    spec, block, retriever = _adapters(memory)
    assert retriever.retrieve("tides") == []
    memory.knowledge.write_note("alice", "tides", "# Tides\n\nSpring tides follow the new moon.\n")
    assert [n.node.metadata["filename"] for n in retriever.retrieve("tides")] == ["alice_tides.md"]
    [wrapped] = spec.wrap_tools([_log_tool()])
    reference = json.loads(wrapped.call().content)
    assert reference["result_id"] in block.session.list_tool_results()


async def test_adapters_of_an_in_memory_memory_touch_no_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    work = tmp_path / "work"
    home.mkdir()
    work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    for name in [name for name in os.environ if name.startswith("LOCAL_AI_MEMORY_")]:
        monkeypatch.delenv(name)
    root = tmp_path / "root"  # the configured data folder: never created
    memory = Memory.in_memory(MemoryConfig(runtime_data_dir=root))
    assert memory.root is None
    spec, block, retriever = _adapters(memory)
    memory.knowledge.write_note("alice", "tea", "# Tea\n\nGreen tea steeps at 80 C.\n")
    assert [n.node.metadata["filename"] for n in await retriever.aretrieve("green tea")] == ["alice_tea.md"]
    assert "Green tea" in await spec.asearch_memory("green tea")
    [wrapped] = spec.wrap_tools([_log_tool()])
    reference = json.loads((await wrapped.acall()).content)
    assert "line 1: all good" in await spec.aload_tool_result(reference["result_id"], limit=40)
    await block.asummarize_messages([ChatMessage(role="user", content="Brew the green tea.")])
    assert "Brew the green tea." in await block.aget()
    memory.close()
    assert not root.exists()
    assert list(home.iterdir()) == []
    assert list(work.iterdir()) == []
