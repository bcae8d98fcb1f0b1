"""Fast by default: a searched store watches its folder by itself, stores of one folder share
their index, and the watchers stop cleanly (at exit too)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from local_ai_memory import Memory, MemoryIndexService, close_shared_stores
from local_ai_memory._knowledge.retriever import MemoryRetriever
from local_ai_memory._knowledge.store import MemoryStore
from local_ai_memory._shared.config import MemoryConfig
from local_ai_memory._shared.naming import DirectoryGuard
from local_ai_memory.backends import FileKnowledgeBackend, InMemoryKnowledgeBackend

WATCHER = "local-ai-memory-auto-watch"


def watchers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == WATCHER]


def make_store(root: Path, **settings: object) -> MemoryStore:
    """A store with the default ``auto_watch`` (the test suite turns it off elsewhere)."""
    settings.setdefault("auto_watch", True)
    config = MemoryConfig(fsync=False, **settings)  # type: ignore[arg-type]
    return MemoryStore(FileKnowledgeBackend(DirectoryGuard(root), config), config)


def wait_for(condition: Callable[[], bool], seconds: float = 10.0) -> float:
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > seconds:
            raise AssertionError("condition not met in time")
        time.sleep(0.01)
    return time.monotonic() - start


def test_a_searched_store_watches_its_folder_and_sees_other_writers(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    store.write_file("knowledge/alice_a.md", "# A\n\napples")
    assert not store.watched
    assert store.bm25_search("apples", user_id="alice") == ["alice_a.md"]  # starts the watcher
    wait_for(lambda: store.watched)
    assert len(watchers()) == 1
    assert store.backend.changes(None) is not None  # the change feed is open: queries list nothing

    # Another process writes a note: the next queries see it, with no listing compared.
    writer = "import pathlib, sys; pathlib.Path(sys.argv[1]).write_text('# B\\n\\nbananas from elsewhere')"
    target = store.data_dir / "knowledge" / "alice_b.md"
    subprocess.run([sys.executable, "-c", writer, str(target)], check=True, timeout=30)
    wait_for(lambda: store.bm25_search("bananas", user_id="alice") == ["alice_b.md"])
    target.unlink()
    wait_for(lambda: store.bm25_search("bananas", user_id="alice") == [])

    # A change through the store's own API is seen by the very next query.
    store.write_file("knowledge/alice_c.md", "# C\n\ncherries")
    assert store.bm25_search("cherries", user_id="alice") == ["alice_c.md"]
    store.delete_file("knowledge/alice_c.md")
    assert store.bm25_search("cherries", user_id="alice") == []

    close_shared_stores()
    assert watchers() == []
    assert not store.watched


def test_closing_a_memory_stops_its_watcher_so_the_folder_can_be_removed(tmp_path: Path) -> None:
    import shutil

    root = tmp_path / "data"
    with Memory.open(root, fsync=False, auto_watch=True) as memory:
        for i in range(50):
            memory.knowledge.write_note("alice", f"n{i}", f"# Note {i}\n\ntea number {i}\n")
        assert memory.knowledge.retrieve("tea", "alice").files
        wait_for(lambda: memory.knowledge.store.watched)
        assert len(watchers()) == 1
    assert watchers() == []
    shutil.rmtree(root)
    time.sleep(0.3)  # a watcher would have written the index of the deletions by now
    assert not root.exists()


def test_closing_the_stores_while_the_first_query_starts_the_watcher_stops_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first query starts the watcher while another thread closes the stores: the close
    waits for the start and stops the thread (it could not join a thread made but not yet
    started, and a start could clear the stop's flag)."""
    from local_ai_memory._knowledge import service

    starting = threading.Event()

    class SlowStart(threading.Thread):
        def start(self) -> None:
            if self.name == WATCHER:
                starting.set()
                time.sleep(0.2)  # the close arrives between the thread's making and its start
            super().start()

    monkeypatch.setattr(service.threading, "Thread", SlowStart)
    store = make_store(tmp_path)
    store.write_file("knowledge/alice_a.md", "# A\n\napples")
    failures: list[BaseException] = []

    def first_query() -> None:
        try:
            store.bm25_search("apples", user_id="alice")
        except BaseException as exc:
            failures.append(exc)

    query = threading.Thread(target=first_query)
    query.start()
    assert starting.wait(10)
    close_shared_stores()
    query.join(10)
    assert failures == []
    wait_for(lambda: watchers() == [])


def test_auto_watch_off_starts_nothing_and_queries_still_see_changes(tmp_path: Path) -> None:
    store = make_store(tmp_path, auto_watch=False)
    store.write_file("knowledge/alice_a.md", "# A\n\napples")
    assert store.bm25_search("apples", user_id="alice") == ["alice_a.md"]
    (store.data_dir / "knowledge" / "alice_b.md").write_text("# B\n\nbananas", encoding="utf-8")
    assert store.bm25_search("bananas", user_id="alice") == ["alice_b.md"]  # a listing comparison
    assert watchers() == []
    assert not store.watched


def test_auto_watch_follows_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCAL_AI_MEMORY_AUTO_WATCH", "false")
    memory = Memory.open(tmp_path / "off", fsync=False)
    memory.knowledge.write_note("alice", "tea", "# Tea\n\ngreen tea")
    assert [c.filename for c in memory.knowledge.search("tea", "alice")] == ["alice_tea.md"]
    assert watchers() == []
    monkeypatch.delenv("LOCAL_AI_MEMORY_AUTO_WATCH")  # the default: on
    memory = Memory.open(tmp_path / "on", fsync=False)
    memory.knowledge.write_note("alice", "tea", "# Tea\n\ngreen tea")
    assert [c.filename for c in memory.knowledge.search("tea", "alice")] == ["alice_tea.md"]
    wait_for(lambda: memory.knowledge.store.watched)
    assert len(watchers()) == 1


def test_stores_of_one_folder_share_index_and_rankers(tmp_path: Path) -> None:
    first = make_store(tmp_path)
    first.write_file("knowledge/alice_a.md", "# A\n\napples")
    assert first.bm25_search("apples", user_id="alice") == ["alice_a.md"]
    second = make_store(tmp_path)  # as a retriever built per request would
    assert second._parts is first._parts
    assert second.index_loaded()
    assert second.bm25_search("apples", user_id="alice") == ["alice_a.md"]
    assert second.index_reads == first.index_reads <= 1
    config = MemoryConfig(fsync=False, auto_watch=True)
    other_categories = MemoryStore(FileKnowledgeBackend(DirectoryGuard(tmp_path), config), config, categories=["work"])
    assert other_categories._parts is not first._parts
    same_folder = MemoryStore(first.backend, MemoryConfig(fsync=False, auto_watch=True), categories=first.categories)
    assert same_folder._parts is first._parts  # the folder, not the backend object, is what is shared
    in_process = MemoryStore(InMemoryKnowledgeBackend(), config)
    assert in_process._parts is not first._parts
    assert not in_process.shared
    # Retrievers over fresh stores of the folder reuse it as well.
    retriever = MemoryRetriever(make_store(tmp_path))
    assert retriever.store._parts is first._parts
    assert [f.filename for f in retriever.retrieve_result("apples", "alice").files] == ["alice_a.md"]


def test_stores_shared_across_threads_stay_consistent(tmp_path: Path) -> None:
    root_store = make_store(tmp_path)
    for i in range(20):
        root_store.write_file(f"knowledge/alice_n{i:02d}.md", f"# N{i}\n\nshared words number{i}")
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for i in range(10):
                store = make_store(tmp_path)
                store.write_file(f"knowledge/alice_t{n}_{i}.md", f"# T\n\nthreadword{n} item{i}")
                found = store.bm25_search(f"threadword{n}", 50, user_id="alice")
                assert len(found) == i + 1, found
        except BaseException as exc:  # collected and re-raised by the test
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(make_store(tmp_path).bm25_search("shared", 100, user_id="alice")) == 20


def test_an_explicit_service_takes_over_from_the_automatic_watcher(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    store.write_file("knowledge/alice_a.md", "# A\n\napples")
    store.bm25_search("apples", user_id="alice")
    wait_for(lambda: store.watched)
    with MemoryIndexService(store):
        assert watchers() == []
        assert store.watched
        (store.data_dir / "knowledge" / "alice_b.md").write_text("# B\n\nbananas", encoding="utf-8")
        wait_for(lambda: store.bm25_search("bananas", user_id="alice") == ["alice_b.md"])
    assert not store.watched
    store.bm25_search("apples", user_id="alice")  # the automatic watcher starts again
    wait_for(lambda: store.watched)
    assert len(watchers()) == 1


def test_a_process_with_a_watcher_exits_cleanly_with_its_index_written(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import sys, time
        from local_ai_memory import DirectoryGuard, MemoryConfig, MemoryStore
        from local_ai_memory.backends import FileKnowledgeBackend
        config = MemoryConfig(fsync=False, auto_watch=True)
        store = MemoryStore(FileKnowledgeBackend(DirectoryGuard(sys.argv[1]), config), config)
        store.write_file("knowledge/alice_a.md", "# A\\n\\napples")
        store.bm25_search("apples", user_id="alice")
        deadline = time.monotonic() + 10
        while not store.watched and time.monotonic() < deadline:
            time.sleep(0.01)
        print("watched" if store.watched else "not watched")
        """
    )
    done = subprocess.run(
        [sys.executable, "-X", "dev", "-c", script, str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "watched"
    assert "Traceback" not in done.stderr
    assert "Warning" not in done.stderr
    stored = [tmp_path / "memory_data" / ".index" / name for name in ("alice_index.json", "alice_index.journal")]
    assert any("alice_a.md" in path.read_text(encoding="utf-8") for path in stored if path.exists())


def _half_forget(root: Path, user_id: str, *deleted: str) -> None:
    """Another process begins forgetting ``user_id`` (its marker) and dies after deleting ``deleted``."""
    code = textwrap.dedent(
        """
        import sys
        from pathlib import Path
        from local_ai_memory._backends.files.knowledge import FileKnowledgeBackend
        from local_ai_memory._shared.naming import DirectoryGuard
        from local_ai_memory._shared.naming import user_file_prefix

        backend = FileKnowledgeBackend(DirectoryGuard(sys.argv[1]))
        backend.write_blob(".erasing/" + user_file_prefix(sys.argv[2]), b"")
        for name in sys.argv[3:]:
            backend.delete_note("knowledge", name)
        """
    )
    subprocess.run([sys.executable, "-c", code, str(root), user_id, *deleted], check=True, timeout=60)


def test_a_watched_store_learns_of_a_forgetting_elsewhere_from_its_watcher(tmp_path: Path) -> None:
    """With a watcher, searches ask storage for no erasure marker; one written by another process
    still makes every search answer the user whole or gone, never half remembered."""
    memory = Memory.open(tmp_path, fsync=False, auto_watch=True)
    for name in ("deploy", "cluster"):
        memory.knowledge.write_note("bob", name, f"# {name}\n\nkestrel {name}")
    memory.knowledge.write_note("alice", "deploy", "# deploy\n\nkestrel deploy")
    store = memory.knowledge.store
    assert len(memory.knowledge.search("kestrel", "bob")) == 2  # starts the watcher
    wait_for(lambda: store.watched and store.backend.blob_known_absent(".erasing/bob_"))

    _half_forget(tmp_path, "bob", "bob_deploy.md")
    answers: list[int] = []
    wait_for(lambda: answers.append(len(memory.knowledge.search("kestrel", "bob"))) or answers[-1] == 0)
    assert set(answers) <= {0, 2}  # whole (the watcher has not reported yet) or gone
    assert not (store.data_dir / "knowledge" / "bob_cluster.md").exists()  # the search finished the job
    assert len(memory.knowledge.search("kestrel", "alice")) == 1


def test_forgetting_a_user_while_a_flush_holds_the_index_write_lock_does_not_deadlock(tmp_path: Path) -> None:
    """A watcher's flush takes the index's write lock, then the store's lock; forgetting a user
    must not hold the store's lock while it waits for the write lock (it did, and the two waited
    for each other until pytest-timeout ended the marker test below)."""
    memory = Memory.open(tmp_path, fsync=False, auto_watch=False)
    memory.knowledge.write_note("bob", "deploy", "# deploy\n\nkestrel deploy")
    store = memory.knowledge.store
    index = store._owner("alice").index
    holding = threading.Event()
    flushed = threading.Event()
    forgotten = threading.Event()

    def flush_like_a_watcher() -> None:
        with index._write_lock:
            holding.set()
            time.sleep(0.3)  # forget_user starts meanwhile
            with index.lock:
                flushed.set()

    def forget() -> None:
        store.forget_user("bob")
        forgotten.set()

    threading.Thread(target=flush_like_a_watcher, daemon=True).start()
    assert holding.wait(5)
    threading.Thread(target=forget, daemon=True).start()
    assert flushed.wait(10), "the flush waited for the store's lock forever"
    assert forgotten.wait(10), "forget_user waited for the index's write lock forever"
    assert memory.knowledge.search("kestrel", "bob") == []
    memory.close()


def test_a_watcher_starting_while_a_marker_exists_follows_it(tmp_path: Path) -> None:
    memory = Memory.open(tmp_path, fsync=False, auto_watch=True)
    memory.knowledge.write_note("bob", "deploy", "# deploy\n\nkestrel deploy")
    memory.knowledge.write_note("alice", "deploy", "# deploy\n\nkestrel deploy")
    _half_forget(tmp_path, "bob")  # the marker only, before any watcher runs
    assert len(memory.knowledge.search("kestrel", "alice")) == 1  # starts the watcher
    wait_for(lambda: memory.knowledge.store.backend.blob_known_absent(".erasing/alice_"))
    assert not memory.knowledge.store.backend.blob_known_absent(".erasing/bob_")
    assert memory.knowledge.search("kestrel", "bob") == []


def test_a_large_users_first_query_waits_for_the_watchers_catch_up_instead_of_listing_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From CATCH_UP_WAIT_NOTES notes on, the query that starts the watcher lets the watcher's
    first listing comparison stand for its own: one comparison at open, not two at once."""
    from local_ai_memory._knowledge import notes as _knowledge_notes
    from local_ai_memory._knowledge.indexer import NoteIndexer

    monkeypatch.setattr(_knowledge_notes, "CATCH_UP_WAIT_NOTES", 3)
    writer = make_store(tmp_path, auto_watch=False)
    for i in range(4):
        writer.write_file(f"knowledge/alice_n{i}.md", f"# N{i}\n\nnote{i} text")
    writer.flush()
    close_shared_stores()
    # Changed while no process watched: only a listing comparison can find it.
    (tmp_path / "memory_data" / "knowledge" / "alice_n3.md").write_text("# N3\n\nrewritten elsewhere")
    compared: list[str] = []
    original = NoteIndexer.stale

    def counted(self: NoteIndexer, categories: tuple[str, ...], *listed: Any) -> object:
        compared.append(threading.current_thread().name)
        return original(self, categories, *listed)

    monkeypatch.setattr(NoteIndexer, "stale", counted)
    store = make_store(tmp_path)
    assert store.bm25_search("rewritten", user_id="alice") == ["alice_n3.md"]
    assert store.watched  # the first query already is a watched one
    assert compared == [WATCHER]
    # Below the threshold the first query compares the user's own listing as before.
    close_shared_stores()
    compared.clear()
    monkeypatch.setattr(_knowledge_notes, "CATCH_UP_WAIT_NOTES", 100)
    assert make_store(tmp_path).bm25_search("note1", user_id="alice") == ["alice_n1.md"]
    assert "MainThread" in compared
    close_shared_stores()


def test_a_listing_comparison_taken_in_chunks_finds_every_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from local_ai_memory._knowledge import indexer as _note_indexing

    monkeypatch.setattr(_note_indexing, "STALE_CHUNK", 2)
    store = make_store(tmp_path, auto_watch=False)
    paths = [store.write_file(f"knowledge/alice_n{i}.md", f"# N{i}\n\nnote {i}") for i in range(7)]
    store.write_file("knowledge/bob_other.md", "# Bob\n\nnot alice's")
    old = time.time_ns() - 10_000_000_000
    for path in paths:
        os.utime(path, ns=(old, old))
    store.refresh_stale_entries()
    paths[1].write_text("# N1\n\nchanged text")
    paths[5].write_text("# N5\n\nchanged too")
    paths[3].unlink()
    (tmp_path / "memory_data" / "knowledge" / "alice_new.md").write_text("# New\n\nnew note")
    found = {(s.filename, s.reason) for s in store.get_stale_entries("alice")}
    assert found == {
        ("alice_n1.md", "modified"),
        ("alice_n5.md", "modified"),
        ("alice_n3.md", "deleted"),
        ("alice_new.md", "new"),
    }
    assert store.refresh_stale_entries() == 4
    assert store.get_stale_entries() == []


def test_a_watcher_start_scheduled_before_a_stop_never_starts(tmp_path: Path) -> None:
    """The query that starts the watcher schedules it a moment later; a close (which stops the
    watcher) in between must drop that start, or the watcher writes into a closed folder."""
    store = make_store(tmp_path)
    store.write_file("knowledge/alice_a.md", "# A\n\napples")
    assert store.bm25_search("apples", user_id="alice") == ["alice_a.md"]  # schedules the start
    assert store._parts.auto_pending
    store.stop_watching()  # what Memory.close() does, before the timer fires
    wait_for(lambda: not store._parts.auto_pending)
    assert store._parts.auto is None
    assert not store.watched
    assert store.bm25_search("apples", user_id="alice") == ["alice_a.md"]  # a later query starts it anew
    wait_for(lambda: store.watched)
    store.stop_watching()
