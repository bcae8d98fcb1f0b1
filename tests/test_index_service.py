"""MemoryIndexService: the watcher (and the polling fallback) keep the index live."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from local_ai_memory._contracts.knowledge import NoteInfo
from local_ai_memory._knowledge.service import MemoryIndexService
from local_ai_memory._knowledge.store import MemoryStore
from local_ai_memory._shared.config import MemoryConfig
from local_ai_memory._shared.errors import InvalidInputError
from local_ai_memory._shared.naming import DirectoryGuard
from local_ai_memory.backends import FileKnowledgeBackend

sys.path.insert(0, str(Path(__file__).parent))  # the helpers the test files share
from index_support import stored_index


def make_store(root: Path) -> MemoryStore:
    return MemoryStore(
        FileKnowledgeBackend(DirectoryGuard(root), MemoryConfig(fsync=False)),
        MemoryConfig(fsync=False),
        categories=["knowledge", "work"],
    )


def is_watched(store: MemoryStore) -> bool:
    return store.watched


def is_running(service: MemoryIndexService) -> bool:
    return service.running


def wait_for(check: Callable[[], bool], timeout: float) -> float:
    """Seconds until ``check()`` is true; fails after ``timeout``."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if check():
            return time.monotonic() - start
        time.sleep(0.02)
    pytest.fail(f"condition not met within {timeout}s")


def test_watcher_picks_up_create_modify_rename_delete(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    folder = store.category_dir("knowledge")
    (folder / "alice_old.md").write_text("# Old\n\nancient scrolls")
    scans = 0
    original = store.backend.list_notes

    def counting_scan(category: str, user_prefix: str | None = None) -> dict[str, NoteInfo]:
        nonlocal scans
        scans += 1
        return original(category, user_prefix)

    store.backend.list_notes = counting_scan  # type: ignore[method-assign]
    with MemoryIndexService(store) as service:
        assert service.active_mode == "watch"
        assert store.bm25_search("ancient", user_id="alice") == ["alice_old.md"]
        scans_at_start = scans
        (folder / "alice_new.md").write_text("# New\n\nfresh lemons")
        took = wait_for(lambda: store.bm25_search("lemons", user_id="alice") == ["alice_new.md"], 2.0)
        assert took < 2.0
        (folder / "alice_new.md").write_text("# New\n\nripe mangoes")
        wait_for(lambda: store.bm25_search("mangoes", user_id="alice") == ["alice_new.md"], 2.0)
        assert store.bm25_search("lemons", user_id="alice") == []
        os.rename(folder / "alice_new.md", folder / "alice_renamed.md")
        wait_for(lambda: store.bm25_search("mangoes", user_id="alice") == ["alice_renamed.md"], 2.0)
        (folder / "alice_old.md").unlink()
        wait_for(lambda: store.bm25_search("ancient", user_id="alice") == [], 2.0)
        # Queries while the service runs never scan the folder.
        assert scans == scans_at_start
    assert not service.running
    on_disk = {e.filename for e in stored_index(store.data_dir)}
    assert on_disk == {"alice_renamed.md"}


def test_editor_atomic_save_and_temp_files(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    folder = store.category_dir("knowledge")
    target = folder / "alice_doc.md"
    target.write_text("# Doc\n\nfirst draft")
    with MemoryIndexService(store):
        # vim-style: write a swap/temp file, then rename it over the target.
        temp = folder / ".alice_doc.md.swp"
        temp.write_text("# Doc\n\nsecond version with walnuts")
        os.replace(temp, target)
        (folder / "alice_doc.md~").write_text("backup walnuts")
        (folder / "4913").write_text("")
        wait_for(lambda: store.bm25_search("walnuts", user_id="alice") == ["alice_doc.md"], 2.0)
        assert store.find_entry(".alice_doc.md.swp") is None
        assert [e.filename for e in store.read_index().files] == ["alice_doc.md"]


def test_burst_of_files_is_indexed(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    folder = store.category_dir("work")
    with MemoryIndexService(store) as service:
        for i in range(1500):
            (folder / f"alice_n{i:04d}.md").write_text(f"# Note {i}\n\nticket{i} burst")
        wait_for(lambda: len(store.read_index().files) == 1500, 10.0)
        assert store.bm25_search("ticket1234", user_id="alice") == ["alice_n1234.md"]
        assert service.batches < 1500
        writes_before = store.index_writes
    assert store.index_writes <= writes_before + 1
    assert len(stored_index(store.data_dir)) == 1500


def test_start_builds_missing_index_and_catches_up(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    (store.category_dir("knowledge") / "alice_a.md").write_text("# A\n\napples")
    assert not store.index_exists()
    with MemoryIndexService(store):
        assert store.index_exists()
        assert store.bm25_search("apples", user_id="alice") == ["alice_a.md"]


def test_polling_fallback(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    folder = store.category_dir("knowledge")
    with MemoryIndexService(store, mode="poll", poll_interval=0.2) as service:
        assert service.active_mode == "poll"
        (folder / "alice_p.md").write_text("# P\n\npolled pears")
        wait_for(lambda: store.bm25_search("pears", user_id="alice") == ["alice_p.md"], 2.0)
        (folder / "alice_p.md").unlink()
        wait_for(lambda: store.bm25_search("pears", user_id="alice") == [], 2.0)


async def test_async_context_manager(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    folder = store.category_dir("knowledge")
    async with MemoryIndexService(store) as service:
        assert service.running
        assert is_watched(store)
        (folder / "alice_x.md").write_text("# X\n\nxylophone")
        start = time.monotonic()
        while await store.abm25_search("xylophone", user_id="alice") != ["alice_x.md"]:
            assert time.monotonic() - start < 2.0
            await __import__("asyncio").sleep(0.02)
    assert not is_running(service)
    assert not is_watched(store)


def test_bad_arguments() -> None:
    with pytest.raises(InvalidInputError):
        MemoryIndexService(None, mode="inotify")  # type: ignore[arg-type]


def test_an_explicit_service_keeps_the_stored_index_of_users_no_query_asked_for(tmp_path: Path) -> None:
    """`local-ai-memory watch` keeps every user's stored index current for other processes,
    including users this process never held: the owner of a changed note is loaded first."""
    folder = tmp_path / "memory_data" / "knowledge"
    folder.mkdir(parents=True)
    (folder / "alice_a.md").write_text("# A\n\napples")
    (folder / "bob_b.md").write_text("# B\n\nbananas")
    make_store(tmp_path).ensure_index()  # both users' indexes stored
    from local_ai_memory import close_shared_stores

    close_shared_stores()
    store = make_store(tmp_path)
    with MemoryIndexService(store):
        assert store._parts.held() == []  # nobody asked for yet
        (folder / "bob_new.md").write_text("# New\n\ncherries")
        wait_for(lambda: "bob_new.md" in {e.filename for e in stored_index(store.data_dir)}, 3.0)
    assert "bob_new.md" in {e.filename for e in stored_index(tmp_path / "memory_data")}
