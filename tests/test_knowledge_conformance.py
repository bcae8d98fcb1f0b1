"""The knowledge backend conformance suite, run for the file and the in-memory backends,
plus what only the file backend does: 0.1.0 files, its watcher-fed change feed."""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from local_ai_memory._backends.files.knowledge import FileKnowledgeBackend
from local_ai_memory._backends.memory.knowledge import InMemoryKnowledgeBackend
from local_ai_memory._contracts.knowledge import KnowledgeBackend
from local_ai_memory._knowledge.index import index_names
from local_ai_memory._knowledge.store import MemoryStore
from local_ai_memory._shared.config import MemoryConfig
from local_ai_memory._shared.naming import DirectoryGuard
from local_ai_memory.testing import KnowledgeBackendTests


def _file_backend(root: Path) -> FileKnowledgeBackend:
    return FileKnowledgeBackend(DirectoryGuard(root), MemoryConfig(fsync=False))


class TestFileKnowledgeBackend(KnowledgeBackendTests):
    """With its watcher-fed change feed (the feed covers this process's writes and the
    watcher's events, so it does not claim cross-process feeds; the suite without it does)."""

    capabilities = frozenset({"change_feed", "durable"})

    @pytest.fixture
    def backend(self, tmp_path: Path) -> FileKnowledgeBackend:
        return _file_backend(tmp_path / "data")

    @pytest.fixture
    def opener(self, tmp_path: Path) -> Callable[[], KnowledgeBackend]:
        return functools.partial(_file_backend, tmp_path / "data")

    def open_feed(self, backend: KnowledgeBackend) -> None:
        assert isinstance(backend, FileKnowledgeBackend)
        backend.start_feed()


class TestFileKnowledgeBackendWithoutFeed(KnowledgeBackendTests):
    """Files edited by other programs with no watcher: searches compare stat() listings."""

    capabilities = frozenset({"durable", "cross_process"})

    @pytest.fixture
    def backend(self, tmp_path: Path) -> FileKnowledgeBackend:
        return _file_backend(tmp_path / "data")

    @pytest.fixture
    def opener(self, tmp_path: Path) -> Callable[[], KnowledgeBackend]:
        return functools.partial(_file_backend, tmp_path / "data")


class TestInMemoryKnowledgeBackend(KnowledgeBackendTests):
    capabilities = frozenset({"change_feed", "atomic_appends"})

    @pytest.fixture
    def backend(self) -> InMemoryKnowledgeBackend:
        return InMemoryKnowledgeBackend()


def test_files_written_by_0_1_0_open_unchanged(tmp_path: Path) -> None:
    """A data folder as 0.1.0 left it (notes, index v3, no snapshots) opens through the backend."""
    folder = tmp_path / "memory_data" / "knowledge"
    folder.mkdir(parents=True)
    note = folder / "alice_tea.md"
    note.write_bytes(b"# Tea\r\n\r\nGreen tea steeps at 80 C. \xf0\x9f\x8d\xb5\r\n")
    st = note.stat()
    entry = {
        "filename": "alice_tea.md",
        "title": "Tea",
        "description": "Green tea steeps at 80 C.",
        "keywords": ["tea", "green", "steeps"],
        "category": "knowledge",
        "last_modified": st.st_mtime,
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
    }
    index = {"index_version": 3, "last_updated": st.st_mtime, "files": [entry]}
    (tmp_path / "memory_data" / "memory_index.json").write_text(json.dumps(index))
    store = MemoryStore(
        FileKnowledgeBackend(DirectoryGuard(tmp_path), MemoryConfig(fsync=False)),
        MemoryConfig(fsync=False),
        categories=["knowledge"],
    )
    assert store.bm25_search("green tea", user_id="alice") == ["alice_tea.md"]
    assert store.index_reads == 1
    assert store.find_entry("alice_tea.md") is not None
    assert store.find_entry("alice_tea.md").keywords == ["tea", "green", "steeps"]  # type: ignore[union-attr]
    assert store.read_file("knowledge/alice_tea.md").encode() == note.read_bytes()
    assert store.backend.read_note("knowledge", "alice_tea.md") == note.read_bytes()


def test_watcher_paths_feed_the_file_backend(tmp_path: Path) -> None:
    backend = FileKnowledgeBackend(DirectoryGuard(tmp_path), MemoryConfig(fsync=False))
    assert backend.changes(None) is None  # no watcher: listings are compared
    backend.start_feed()
    opened = backend.changes(None)
    assert opened is not None
    assert not opened.complete
    folder = backend.data_dir / "knowledge"
    folder.mkdir()
    (folder / "alice_a.md").write_text("edited by hand")
    named = backend.record_paths(
        [folder / "alice_a.md", folder / ".alice_a.md.tmp", tmp_path / "elsewhere.md", folder / "notes.txt"]
    )
    assert named == 1
    fed = backend.changes(opened.cursor)
    assert fed is not None
    assert fed.complete
    assert fed.keys == {("knowledge", "alice_a.md")}
    backend.write_blob("memory_index.json", b"{}")
    backend.record_paths([os.fspath(backend.data_dir / "memory_index.json")])  # a file, not a folder: no rescan
    assert backend.changes(fed.cursor).complete  # type: ignore[union-attr]
    backend.record_paths([backend.data_dir / "work"])  # a category folder vanished: compare everything
    assert not backend.changes(fed.cursor).complete  # type: ignore[union-attr]
    backend.stop_feed()
    assert backend.changes(fed.cursor) is None


async def test_async_hybrid_search_calls_aembed(tmp_path: Path) -> None:
    class CountingEmbedder:
        model_name = "counting"

        def __init__(self) -> None:
            self.sync_calls = 0
            self.async_calls = 0

        @staticmethod
        def _vectors(texts: list[str]) -> list[list[float]]:
            return [[float("apple" in t.lower()), float("pear" in t.lower()), 1.0] for t in texts]

        def embed(self, texts: list[str]) -> list[list[float]]:
            self.sync_calls += 1
            return self._vectors(texts)

        async def aembed(self, texts: list[str]) -> list[list[float]]:
            self.async_calls += 1
            return self._vectors(texts)

    for backend in (
        InMemoryKnowledgeBackend(),
        FileKnowledgeBackend(DirectoryGuard(tmp_path), MemoryConfig(fsync=False)),
    ):
        embedder = CountingEmbedder()
        store = MemoryStore(backend, MemoryConfig(fsync=False), categories=["knowledge"], embedder=embedder)
        store.write_file("knowledge/alice_apple.md", "# Apple\n\nAn apple a day.")
        store.write_file("knowledge/alice_pear.md", "# Pear\n\nPear season.")
        found = await store.ahybrid_search("apple", user_id="alice")
        assert found[0] == "alice_apple.md"
        assert embedder.async_calls >= 1
        assert embedder.sync_calls == 0
        assert store.hybrid_search("apple", user_id="alice") == found
        assert embedder.sync_calls >= 1


def test_the_watcher_refuses_a_backend_that_keeps_its_own_feed(tmp_path: Path) -> None:
    from local_ai_memory._knowledge.service import MemoryIndexService
    from local_ai_memory._shared.errors import InvalidInputError

    store = MemoryStore(InMemoryKnowledgeBackend(), categories=["knowledge"])
    with pytest.raises(InvalidInputError, match="needs no watcher"):
        MemoryIndexService(store).start()
    assert not store.watched


async def test_apply_changes_indexes_what_the_feed_names(tmp_path: Path) -> None:
    backend = InMemoryKnowledgeBackend()
    store = MemoryStore(backend, categories=["knowledge"])
    store.ensure_index()
    assert store.bm25_search("apples", user_id="alice") == []  # alice's index is held from now on
    assert store.apply_changes() == 0  # the feed of the owners held: nothing new
    backend.write_note("knowledge", "alice_a.md", b"# A\n\napples")
    backend.write_note("knowledge", "alice_b.md", b"# B\n\nbananas")
    assert await store.aapply_changes() == 2
    assert store.find_entry("alice_b.md") is not None
    backend.delete_note("knowledge", "alice_a.md")
    assert store.apply_changes() == 1
    assert store.find_entry("alice_a.md") is None


def test_the_whole_store_surface_runs_on_the_in_memory_backend(tmp_path: Path) -> None:
    backend = InMemoryKnowledgeBackend()
    for i in range(3):
        backend.write_note("knowledge", f"alice_n{i}.md", f"# Note {i}\n\nkiwi number {i}".encode())
    backend.write_note("knowledge", "bob_x.md", b"# X\n\nkiwi for bob")
    backend.write_note("knowledge", "alice_bin.md", b"\x00\x01binary")
    store = MemoryStore(backend, MemoryConfig(fsync=False), categories=["knowledge"])
    assert store.populate_index_from_files("alice") == 3  # the binary note is skipped
    assert store.index_exists()
    # bob has no index yet: it is built from his notes when he is first asked for, here by the
    # stale check over every owner (so nothing is stale), and never while only alice is asked for.
    assert {parts.index.owner for parts in store._parts.held()} == {"alice"}
    backend.write_note("knowledge", "alice_new.md", b"# New\n\nkiwi, written behind the index")
    assert {s.filename for s in store.get_stale_entries()} == {"alice_new.md"}
    assert store.find_entry("bob_x.md") is not None
    assert store.refresh_stale_entries() == 1
    assert store.update_index_entry("alice_n0.md", "Fruit", "about fruit", ["mango"], "knowledge").title == "Fruit"
    assert store.bm25_search("mango", user_id="alice") == ["alice_n0.md"]
    assert store.remove_index_entry("alice_n1.md", "knowledge") is True
    assert store.stats()["users"] == {"alice": 3, "bob": 1}
    assert store.stats()["index_bytes"] == sum(
        backend.blob_size(name) or 0 for user in ("alice", "bob") for name in index_names(user)
    )
    assert repr(store).startswith("MemoryStore(InMemoryKnowledgeBackend(")
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []  # nothing reached the disk


def test_a_store_without_a_data_folder_keeps_everything_in_its_backend(tmp_path: Path) -> None:
    from local_ai_memory._shared.errors import ConfigError, InvalidInputError, PathEscapeError

    with pytest.raises(InvalidInputError, match="needs a KnowledgeBackend"):
        MemoryStore(None, categories=["knowledge"])
    store = MemoryStore(InMemoryKnowledgeBackend(), categories=["knowledge"])
    store.write_file("knowledge/alice_a.md", "# A\n\napples\r\n")
    assert store.read_file("knowledge/alice_a.md") == "# A\n\napples\r\n"
    assert store.bm25_search("apples", user_id="alice") == ["alice_a.md"]
    assert [str(p) for p in store.list_user_files("alice", "knowledge")] == ["memory_data/knowledge/alice_a.md"]
    with pytest.raises(PathEscapeError):
        store.read_file("knowledge/../../etc/passwd")
    with pytest.raises(ConfigError):
        store.category_dir("knowledge")
