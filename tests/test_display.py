"""Jupyter views: the tables show what happened and escape everything they show."""

from __future__ import annotations

from pathlib import Path

from local_ai_memory import (
    DirectoryGuard,
    Memory,
    MemoryConfig,
    MemoryRetriever,
    MemoryStore,
)
from local_ai_memory.backends import FileKnowledgeBackend


def test_session_html_shows_every_level_escaped(tmp_path: Path) -> None:
    session = Memory.open(tmp_path).session("alice", "s1")
    session.update_state({"current_task": "<script>alert(1)</script>"})
    session.update_working_memory("# Current Goal\n<b>bold?</b>\n")
    session.externalize("dump", "x" * 10_000)
    with session.checkpoint_run("plan-1") as run:
        run.step()
    view = session._repr_html_()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in view
    assert "<script>" not in view
    assert "&lt;b&gt;bold?&lt;/b&gt;" in view
    assert "plan-1" in view
    assert "completed" in view
    assert "1 stored tool result(s)" in view


def test_retrieval_result_html_marks_loaded_files(tmp_path: Path) -> None:
    store = MemoryStore(
        FileKnowledgeBackend(DirectoryGuard(tmp_path), MemoryConfig(runtime_data_dir=tmp_path)),
        MemoryConfig(runtime_data_dir=tmp_path),
    )
    store.write_file("knowledge/alice_tea.md", "# Tea\n\nGreen tea & oolong <notes>.\n")
    store.write_file("knowledge/alice_coffee.md", "# Coffee\n\nEspresso and tea blends.\n")
    result = MemoryRetriever(store).retrieve_result("green tea", "alice", max_tokens=500)
    view = result._repr_html_()
    assert "alice_tea.md" in view
    assert "loaded," in view
    assert "&#x27;green tea&#x27;" in view
    assert "Stage 1 order" in view
