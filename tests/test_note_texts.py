"""Stage 3 keeps small notes' texts per index entry: read once per version, never stale past
the index, never kept for a forgotten user."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from local_ai_memory import Memory
from local_ai_memory._backends.files.knowledge import FileKnowledgeBackend
from local_ai_memory._knowledge.retriever import MemoryRetriever
from local_ai_memory._knowledge.store import MemoryStore
from local_ai_memory._knowledge.texts import NoteTexts
from local_ai_memory._shared.config import MemoryConfig
from local_ai_memory._shared.naming import DirectoryGuard


class CountingBackend(FileKnowledgeBackend):
    """The real file backend, counting the note reads Stage 3 makes."""

    reads = 0

    def read_note_head(self, category: str, name: str, max_bytes: int) -> tuple[bytes, bool] | None:
        self.reads += 1
        return super().read_note_head(category, name, max_bytes)


def _store(root: Path) -> tuple[MemoryStore, CountingBackend]:
    config = MemoryConfig(runtime_data_dir=root, fsync=False, auto_watch=False)
    guard = DirectoryGuard(root)
    backend = CountingBackend(guard, config)
    return MemoryStore(backend, config), backend


def _texts(retriever: MemoryRetriever, query: str) -> list[str]:
    return [f.content for f in retriever.retrieve_result(query, "alice").files]


def _aged(path: Path) -> None:
    """Set ``path``'s mtime a minute back: past the window in which a listing comparison
    re-reads recently changed notes, so the reads counted below are Stage 3's."""
    old = time.time() - 60
    os.utime(path, (old, old))


def test_a_small_note_is_read_once_per_version(tmp_path: Path) -> None:
    store, backend = _store(tmp_path)
    _aged(store.write_file("knowledge/alice_tea.md", "# Tea\n\nGreen tea at four.\n"))
    retriever = MemoryRetriever(store)
    assert _texts(retriever, "green tea") == ["# Tea\n\nGreen tea at four.\n"]
    reads = backend.reads
    assert _texts(retriever, "green tea") == ["# Tea\n\nGreen tea at four.\n"]
    assert backend.reads == reads  # answered from memory

    _aged(store.write_file("knowledge/alice_tea.md", "# Tea\n\nGreen tea at five now.\n"))  # a new entry
    assert _texts(retriever, "green tea") == ["# Tea\n\nGreen tea at five now.\n"]
    reads = backend.reads
    assert _texts(retriever, "green tea") == ["# Tea\n\nGreen tea at five now.\n"]
    assert backend.reads == reads


def test_an_edit_by_another_process_is_read_once_the_index_sees_it(tmp_path: Path) -> None:
    store, _ = _store(tmp_path)
    note = store.write_file("knowledge/alice_tea.md", "# Tea\n\nGreen tea at four.\n")
    retriever = MemoryRetriever(store)
    assert _texts(retriever, "green tea") == ["# Tea\n\nGreen tea at four.\n"]
    edit = f"import pathlib; pathlib.Path({str(note)!r}).write_text('# Tea\\n\\nGreen tea, then mint.\\n')"
    subprocess.run([sys.executable, "-c", edit], check=True)
    _aged(note)
    assert _texts(retriever, "green tea") == ["# Tea\n\nGreen tea, then mint.\n"]


def test_a_large_note_is_not_kept_and_a_partial_read_never_is(tmp_path: Path) -> None:
    store, backend = _store(tmp_path)
    _aged(store.write_file("knowledge/alice_big.md", "# Big\n\n" + "zebra stripes and more. " * 60_000))  # 1.4 MB
    retriever = MemoryRetriever(store)
    assert retriever.retrieve_result("zebra stripes", "alice", max_tokens=300).files[0].truncated
    reads = backend.reads
    assert retriever.retrieve_result("zebra stripes", "alice", max_tokens=300).files[0].truncated
    assert backend.reads == reads + 1  # its head, read again
    assert len(store._parts.note_texts) == 0


def test_forgetting_a_user_drops_their_kept_texts(tmp_path: Path) -> None:
    memory = Memory.open(tmp_path, fsync=False, auto_watch=False)
    memory.knowledge.write_note("alice", "tea", "# Tea\n\nGreen tea at four.\n")
    memory.knowledge.write_note("bob", "tea", "# Tea\n\nBlack tea at noon.\n")
    for user in ("alice", "bob"):
        assert memory.knowledge.retrieve("tea", user).files
    texts = memory.knowledge.store._parts.note_texts
    assert ("knowledge", "alice_tea.md") in texts
    assert ("knowledge", "bob_tea.md") in texts
    memory.forget_user("alice")
    assert ("knowledge", "alice_tea.md") not in texts
    assert ("knowledge", "bob_tea.md") in texts


def test_kept_texts_stay_within_their_limit_least_recently_used_out() -> None:
    from local_ai_memory._knowledge.index_file import IndexEntry

    texts = NoteTexts(limit=64 * 100)  # a note of up to 100 characters is kept
    entries = {i: IndexEntry(filename=f"alice_{i}.md", category="k") for i in range(66)}
    texts.put(("k", "alice_big.md"), entries[0], "y" * 101)
    assert len(texts) == 0
    for i in range(64):
        texts.put(("k", f"alice_{i}.md"), entries[i], "x" * 100)
    assert texts.size == texts.limit
    assert texts.get(("k", "alice_0.md"), entries[0]) == "x" * 100  # now the most recently used
    assert texts.get(("k", "alice_0.md"), entries[1]) is None  # another entry: not this text
    texts.put(("k", "alice_64.md"), entries[64], "x" * 100)
    assert ("k", "alice_0.md") in texts
    assert ("k", "alice_1.md") not in texts
    assert texts.size == texts.limit
    assert len(texts) == 64


def test_on_postgres_another_hosts_edit_is_read_at_the_next_query(
    postgres_url: str, postgres_schema: str, tmp_path: Path
) -> None:
    """Two hosts on one database: a text kept by one is not served once the other has changed
    the note (the change feed gives the first host a new index entry at its next query)."""
    config = MemoryConfig(runtime_data_dir=tmp_path, database_url=postgres_url, database_schema=postgres_schema)
    with Memory(config) as host_a, Memory(config) as host_b:
        host_a.knowledge.write_note("alice", "tea", "# Tea\n\nGreen tea at four.\n")
        for _ in range(2):  # the second answer comes from the kept text
            assert [f.content for f in host_a.knowledge.retrieve("green tea", "alice").files] == [
                "# Tea\n\nGreen tea at four.\n"
            ]
        assert ("knowledge", "alice_tea.md") in host_a.knowledge.store._parts.note_texts
        host_b.knowledge.write_note("alice", "tea", "# Tea\n\nGreen tea, then mint.\n")
        assert [f.content for f in host_a.knowledge.retrieve("green tea", "alice").files] == [
            "# Tea\n\nGreen tea, then mint.\n"
        ]
