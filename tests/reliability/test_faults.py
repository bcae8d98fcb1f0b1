"""An I/O error (ENOSPC, EIO, EACCES) at the k-th filesystem operation of every write path.

For each write path the operation first runs under a probe that counts its primitive calls
(``N``). Then, on a fresh copy of the same "old" data, the k-th call fails, for every
``k`` in ``1..N`` (``sticky`` also fails every later call, like a full disk). Each time:

* the caller gets :class:`StorageError` (or, for the compressor, which never raises by
  contract, ``ok=False``), never a half-written success;
* a fresh reader sees the old content or the complete new one;
* after recovery (the temp-file sweep a restarted process does) no temp file remains;
* the same objects then retry with no fault and succeed, from another thread (so a lock
  leaked by the failed attempt would show as a :class:`LockTimeoutError`).
"""

from __future__ import annotations

import contextlib
import errno
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import reliability_support as rs
from crash_workloads import FakeEmbedder

from local_ai_memory import StorageError, close_shared_stores
from local_ai_memory._backends.files.vectors import EmbeddingCache
from local_ai_memory._knowledge.index_file import parse_index, stored_entries
from local_ai_memory._knowledge.store import MemoryStore
from local_ai_memory._runtime.checkpoints import CheckpointRun, load_checkpoint, mark_status
from local_ai_memory._runtime.compressor import WorkingMemoryCompressor
from local_ai_memory._runtime.messages import SessionMessageStore
from local_ai_memory._runtime.scope import MemoryManager
from local_ai_memory._runtime.tool_results import RetentionPolicy, ToolResultStore
from local_ai_memory._shared import fs as _fs
from local_ai_memory._shared.config import MemoryConfig
from local_ai_memory._shared.naming import DirectoryGuard
from local_ai_memory.backends import FileKnowledgeBackend, FileRuntimeBackend

CONFIG = MemoryConfig(fsync=True, lock_timeout=3.0, auto_watch=False)  # no watcher thread under injected faults
BIG = "x" * 150_000  # several write() calls per file


def _manager(root: Path) -> MemoryManager:
    return MemoryManager(FileRuntimeBackend.from_config(CONFIG, DirectoryGuard(root)), CONFIG).scoped("alice", "s1")


def _store(root: Path) -> MemoryStore:
    return MemoryStore(FileKnowledgeBackend(DirectoryGuard(root), CONFIG), CONFIG, categories=["knowledge"])


def _messages(root: Path) -> SessionMessageStore:
    return SessionMessageStore(
        FileRuntimeBackend.from_config(CONFIG, DirectoryGuard(root)), CONFIG, user_id="alice", session_id="s1"
    )


@dataclass
class WritePath:
    """``setup(root)`` stores the old data and returns the objects ``op`` uses; ``observe(root)``
    reads the logical content back with fresh objects."""

    setup: Callable[[Path], Any]
    op: Callable[[Any], Any]
    observe: Callable[[Path], Any]
    never_raises: bool = False
    idempotent: bool = True  # False: a retry after an ambiguous failure may store the item twice
    between: bool = False  # a batch of deletions: any state from old down to new is acceptable
    retry: Callable[[Any], Any] | None = None  # how a caller retries (default: ``op`` again)
    per_file: bool = False  # several files, each moved atomically: each part is old or new on its own


def _tool_contents(root: Path) -> list[str]:
    manager = _manager(root)
    return sorted(manager.load_tool_result(r)["content"] for r in manager.list_tool_results())


def _checkpoint_view(root: Path) -> tuple[str, int]:
    checkpoint = load_checkpoint(_manager(root), "run")
    return checkpoint.status, checkpoint.step


def _setup_checkpoint(root: Path) -> CheckpointRun:
    run = CheckpointRun(_manager(root), "run", handle_signals=False)
    run.start()
    run.step(state={"a": BIG})
    return run


def _knowledge_view(root: Path) -> tuple[str, list[str], list[str], str]:
    store = _store(root)
    index = (root / "memory_data/.index/alice_index.json").read_bytes()
    status = parse_index(index)[0]
    text = store.read_file("knowledge/alice_notes.md")
    return text, store.bm25_search("alphaold", user_id="alice"), store.bm25_search("betanew", user_id="alice"), status


def _setup_knowledge(root: Path) -> MemoryStore:
    store = _store(root)
    store.write_file("knowledge/alice_notes.md", "# Notes\n\nalphaold " + "filler " * 3000)
    store.write_file("knowledge/alice_other.md", "# Other\n\nunrelated gamma")
    return store


def _title_view(root: Path) -> str:
    entry = _store(root).find_entry("alice_notes.md")
    assert entry is not None
    return entry.title


def _setup_refresh(root: Path) -> MemoryStore:
    store = _setup_knowledge(root)
    store.bm25_search("alphaold", user_id="alice")
    path = root / "memory_data/knowledge/alice_notes.md"
    path.write_text("# Notes\n\nbetanew edited by hand, longer than before " + "filler " * 3001)  # a user's editor
    return store


def _disk_index_view(root: Path) -> str:
    """The description of alice_notes.md in the stored index (snapshot and journal; no refresh)."""
    data = root / "memory_data"
    status, index, why = parse_index((data / ".index/alice_index.json").read_bytes())
    assert status == "ok", why
    assert index is not None, why
    journal = data / ".index/alice_index.journal"
    tail = journal.read_bytes() if journal.exists() else None
    stored = stored_entries((data / ".index/alice_index.json").read_bytes(), tail)
    (entry,) = [e for e in stored if e.filename == "alice_notes.md"]
    return entry.description


def _embedding_view(root: Path) -> int:
    return len(EmbeddingCache(DirectoryGuard(root), FakeEmbedder(), CONFIG))


def _setup_embeddings(root: Path) -> EmbeddingCache:
    cache = EmbeddingCache(DirectoryGuard(root), FakeEmbedder(), CONFIG)
    cache.vectors_for([("a", "first text"), ("b", "second text")])
    return cache


def _setup_compressor(root: Path) -> WorkingMemoryCompressor:
    manager = _manager(root)
    manager.update_working_memory("# Current Goal\nold goal\n")
    manager.update_state({"current_task": "old goal"})
    return WorkingMemoryCompressor(manager, None, target_tokens=256)


def _setup_prune(root: Path) -> ToolResultStore:
    store = ToolResultStore(_manager(root), RetentionPolicy(max_count=None, max_bytes=None))
    for n in range(4):
        store.externalize("t", f"r{n} " + BIG)
    store.retention = RetentionPolicy(max_count=1, max_bytes=None)
    return store


def _setup_migration(root: Path) -> MemoryManager:
    unscoped = MemoryManager(FileRuntimeBackend.from_config(CONFIG, DirectoryGuard(root)), CONFIG)
    unscoped.update_state({"from": "unscoped", "big": BIG})
    unscoped.save_plan("p", {"v": 1})
    unscoped.save_tool_result("r1", "payload")
    return _manager(root)


def _migration_view(root: Path) -> tuple[Any, ...]:
    """Raw files (a fresh manager would migrate them itself)."""
    memory = root / "memory"
    state = memory / "state/alice_s1.json"
    plans = memory / "plans/alice_s1.json"
    return (
        (memory / "state/global.json").exists(),
        json.loads(state.read_bytes())["state"]["from"] if state.exists() else None,
        (memory / "plans/global.json").exists(),
        sorted(json.loads(plans.read_bytes())["plans"]) if plans.exists() else None,
        frozenset(str(p.relative_to(memory)) for p in (memory / "tool_index").rglob("*.ref")),
    )


def _part_ok(part: Any, old: Any, new: Any) -> bool:
    if isinstance(part, frozenset):  # ownership markers: copied first, then removed; never none left
        return bool(part) and part <= old | new
    return part in (old, new)


PATHS: dict[str, WritePath] = {
    "migrate_unscoped_to_scope": WritePath(
        _setup_migration,
        lambda m: m.get_state(),
        _migration_view,
        per_file=True,
    ),
    "update_state": WritePath(
        lambda root: _manager(root).update_state({"a": 1, "keep": BIG}) and _manager(root),
        lambda m: m.update_state({"a": 2, "b": [1, 2, {"c": None}]}),
        lambda root: _manager(root).get_state(),
    ),
    "update_state_first_write": WritePath(  # no folder yet: covers mkdir
        _manager,
        lambda m: m.update_state({"a": 2}),
        lambda root: _manager(root).get_state(),
    ),
    "update_working_memory": WritePath(
        lambda root: _manager(root).update_working_memory("old " + BIG) or _manager(root),
        lambda m: m.update_working_memory("new " + BIG),
        lambda root: _manager(root).get_working_memory(),
    ),
    "save_plan": WritePath(
        lambda root: (
            (_manager(root).save_plan("p1", {"v": "old"}), _manager(root).save_plan("p2", BIG)) and _manager(root)
        ),
        lambda m: m.save_plan("p1", {"v": "new", "big": BIG}),
        lambda root: _manager(root).list_plans(),
    ),
    "delete_plan": WritePath(
        lambda root: (
            (_manager(root).save_plan("p1", {"v": "old"}), _manager(root).save_plan("p2", BIG)) and _manager(root)
        ),
        lambda m: m.delete_plan("p1"),
        lambda root: _manager(root).list_plans(),
    ),
    "save_tool_result": WritePath(
        lambda root: _manager(root).save_tool_result("r1", {"content": "old " + BIG}) and _manager(root),
        lambda m: m.save_tool_result("r1", {"content": "new " + BIG}),
        _tool_contents,
    ),
    "externalize": WritePath(
        lambda root: (
            ToolResultStore(_manager(root)).externalize("t", "first " + BIG) and ToolResultStore(_manager(root))
        ),
        lambda store: store.externalize("t", "second " + BIG),
        _tool_contents,
        idempotent=False,
    ),
    "prune": WritePath(
        _setup_prune,
        lambda store: store.prune(),
        _tool_contents,
        between=True,
    ),
    "checkpoint_step": WritePath(
        _setup_checkpoint,
        lambda run: run.step(state={"b": BIG}),
        _checkpoint_view,
    ),
    "checkpoint_mark_status": WritePath(
        _setup_checkpoint,
        lambda run: mark_status(run.manager, "run", "interrupted", reason="SIGTERM"),
        _checkpoint_view,
    ),
    "session_append": WritePath(
        lambda root: _messages(root).append([{"role": "user", "content": "old " + BIG}]) and _messages(root),
        lambda store: store.append([{"role": "assistant", "content": "new " + BIG}]),
        lambda root: [m.content[:3] for m in _messages(root).messages()],
        idempotent=False,
    ),
    "session_compact": WritePath(
        lambda root: (
            _messages(root).append([{"role": "user", "content": f"m{i} " + BIG} for i in range(4)]) and _messages(root)
        ),
        lambda store: store.compact(keep_last=1),
        lambda root: [m.content[:3] for m in _messages(root).messages()],
    ),
    "compressor": WritePath(
        _setup_compressor,
        lambda c: c.compress([{"role": "user", "content": "Please fix the login bug"}]),
        lambda root: _manager(root).get_working_memory(),
        never_raises=True,
    ),
    "store_write_file": WritePath(
        _setup_knowledge,
        lambda store: store.write_file("knowledge/alice_notes.md", "# Notes\n\nbetanew " + "filler " * 3001),
        _knowledge_view,
    ),
    "store_update_index_entry": WritePath(
        _setup_knowledge,
        lambda store: store.update_index_entry("alice_notes.md", "New title", "desc", ["k1"], "knowledge"),
        _title_view,
    ),
    "store_refresh": WritePath(
        _setup_refresh,
        lambda store: store.refresh_stale_entries("alice"),
        _disk_index_view,
        # refresh_stale_entries finds nothing stale the second time and does not write the dirty
        # index (test_refresh_after_failed_index_write_persists_it); flush() does.
        retry=lambda store: (store.refresh_stale_entries("alice"), store.flush()),
    ),
    "store_write_index": WritePath(
        _setup_knowledge,
        lambda store: store.write_index(
            [e.model_copy(update={"title": "Rewritten"}) for e in store.read_index().files]
        ),
        _title_view,
    ),
    "embeddings": WritePath(
        _setup_embeddings,
        lambda cache: cache.vectors_for([("a", "first text"), ("c", "third text"), ("d", "fourth text")]),
        _embedding_view,
    ),
}


def _retry_in_thread(path: WritePath, ctx: Any) -> None:
    box: dict[str, BaseException] = {}

    def target() -> None:
        try:
            (path.retry or path.op)(ctx)
        except BaseException as exc:
            box["error"] = exc

    worker = threading.Thread(target=target)
    worker.start()
    worker.join(30)
    assert not worker.is_alive(), "retry hung: a lock was leaked by the failed attempt"
    if "error" in box:
        raise box["error"]


def _run_case(name: str, tmp_path: Path, error: int, sticky: bool) -> int:
    path = PATHS[name]
    base = tmp_path / "base"
    ctx = path.setup(base)
    old = path.observe(base)
    probe = rs.FailAt(0)
    with _fs.use_syscalls(probe):
        path.op(ctx)
    new = path.observe(base)
    assert new != old, "the operation under test changed nothing"
    steps = len(probe.calls)
    assert steps > 0
    for k in range(1, steps + 1):
        root = tmp_path / f"k{k}"
        ctx = path.setup(root)
        assert path.observe(root) == old
        fault = rs.FailAt(k, error, sticky=sticky)
        raised: BaseException | None = None
        result: Any = None
        with _fs.use_syscalls(fault):
            try:
                result = path.op(ctx)
            except StorageError as exc:
                raised = exc
        rs.COUNTS["fault_runs"] += 1
        rs.COUNTS["faults"] += fault.fired
        where = f"{name}: {errno.errorcode[error]} at call {k}/{steps} ({probe.calls[k - 1]}, sticky={sticky})"
        rs.cleanup_everywhere(root)
        assert rs.temp_files(root) == [], f"{where}: temp file left after recovery"
        seen = path.observe(root)
        if path.between:
            acceptable = set(new) <= set(seen) <= set(old)
        elif path.per_file:
            acceptable = all(_part_ok(part, o, n) for part, o, n in zip(seen, old, new, strict=True))
        else:
            acceptable = seen in (old, new)
        if not acceptable:
            rs.LOSSES.append(where)
        assert acceptable, f"{where}: neither old nor new content"
        if path.never_raises:
            assert raised is None
            if not result.ok and seen == new:
                rs.COUNTS["ambiguous_failures"] += 1  # the fault hit after the rename (fsync of the folder)
            elif result.ok:
                assert seen == new
        elif raised is None:
            if seen != new:
                rs.LOSSES.append(f"{where}: success reported, old content on disk")
            assert seen == new, f"{where}: success reported but the new content is not stored"
        elif seen == new and not (path.between or path.per_file):
            rs.COUNTS["ambiguous_failures"] += 1  # StorageError after the rename: new content, not yet durable
        _retry_in_thread(path, ctx)
        after = path.observe(root)
        if path.idempotent:
            assert after == new, f"{where}: retry after the fault did not store the new content"
        else:  # the failed call may have stored its item before failing: at least once
            assert sorted(set(after)) == sorted(set(new)), f"{where}: retry after the fault lost or invented items"
        assert rs.temp_files(root) == []
    return steps


@pytest.mark.parametrize("name", list(PATHS))
@pytest.mark.parametrize("error", rs.ERRORS, ids=[errno.errorcode[e] for e in rs.ERRORS])
def test_fault_at_every_step(name: str, error: int, tmp_path: Path) -> None:
    _run_case(name, tmp_path, error, sticky=False)


@pytest.mark.parametrize("name", list(PATHS))
def test_disk_stays_full_from_step_k(name: str, tmp_path: Path) -> None:
    _run_case(name, tmp_path, errno.ENOSPC, sticky=True)


def test_embedding_cache_after_faults_returns_correct_vectors(tmp_path: Path) -> None:
    """Vectors served after a failed commit are the embedder's, and a restart still serves them."""
    items = [("a", "first text"), ("c", "third text")]
    want = np.asarray(FakeEmbedder().embed([t for _, t in items]), dtype=np.float32)
    want /= np.linalg.norm(want, axis=1, keepdims=True)
    for k in range(1, 8):
        root = tmp_path / f"k{k}"
        cache = _setup_embeddings(root)
        with _fs.use_syscalls(rs.FailAt(k, errno.EIO)), pytest.raises(StorageError):
            cache.vectors_for(items)
        rs.COUNTS["faults"] += 1
        assert np.allclose(cache.vectors_for(items), want, atol=1e-6)
        assert np.allclose(EmbeddingCache(DirectoryGuard(root), FakeEmbedder(), CONFIG).vectors_for(items), want)
        manifest = json.loads((root / "memory_data/.embeddings/manifest.json").read_bytes())
        on_disk = {p.name for p in (root / "memory_data/.embeddings").glob("shard-*.npz")}
        rs.COUNTS["orphan_shards_after_faults"] += len(on_disk - set(manifest["shards"]))


def test_refresh_after_failed_index_write_persists_it(tmp_path: Path) -> None:
    store = _setup_refresh(tmp_path)
    with _fs.use_syscalls(rs.FailAt(1, errno.ENOSPC)), pytest.raises(StorageError):
        store.refresh_stale_entries("alice")
    rs.COUNTS["faults"] += 1
    store.refresh_stale_entries("alice")  # the caller retries once the disk has room
    assert "betanew" in _disk_index_view(tmp_path)


@pytest.mark.parametrize("stale", [False, True], ids=["fresh-index", "stale-index"])
def test_search_answers_while_the_disk_is_full(tmp_path: Path, stale: bool) -> None:
    """A query only reads; caches it would like to write (index, BM25 snapshots) must not fail it."""
    store = _setup_knowledge(tmp_path)
    store.flush()
    if stale:
        (tmp_path / "memory_data/knowledge/alice_third.md").write_text("# Third\n\nalphaold too, longer\n")
    for snapshot in (tmp_path / "memory_data").rglob("*.npz"):
        snapshot.unlink()
    fresh = _store(tmp_path)
    fault = rs.FailAt(1, errno.ENOSPC, sticky=True)
    with _fs.use_syscalls(fault):
        found = fresh.bm25_search("alphaold", user_id="alice")
    rs.COUNTS["faults"] += fault.fired
    assert "alice_notes.md" in found


def test_faults_while_saving_bm25_snapshots_never_corrupt_search(tmp_path: Path) -> None:
    """Snapshots are caches: a fault at any step leaves a store (fresh or the same) that finds the same files."""
    base = tmp_path / "base"
    _setup_knowledge(base)
    close_shared_stores()  # the stores below start as new processes would
    for snapshot in (base / "memory_data").rglob("*.npz"):
        snapshot.unlink()
    probe = rs.FailAt(0)
    with _fs.use_syscalls(probe):
        _store(base).bm25_search("alphaold", user_id="alice")
    assert probe.calls, "searching a fresh store wrote no snapshot"
    for k in range(1, len(probe.calls) + 1):
        root = tmp_path / f"k{k}"
        _setup_knowledge(root)
        close_shared_stores()
        for snapshot in (root / "memory_data").rglob("*.npz"):
            snapshot.unlink()
        store = _store(root)
        with _fs.use_syscalls(rs.FailAt(k, errno.EIO)), contextlib.suppress(StorageError):
            store.bm25_search("alphaold", user_id="alice")
        rs.COUNTS["faults"] += 1
        rs.COUNTS["fault_runs"] += 1
        rs.cleanup_everywhere(root)
        assert rs.temp_files(root) == []
        assert store.bm25_search("alphaold", user_id="alice") == ["alice_notes.md"]
        close_shared_stores()  # a fresh store, as in a new process
        assert _store(root).bm25_search("alphaold", user_id="alice") == ["alice_notes.md"]
        close_shared_stores()
        assert _store(root).bm25_search("gamma", user_id="alice") == ["alice_other.md"]


def _listed(root: Path) -> set[str]:
    return set(json.loads((root / "memory_data/.embeddings/manifest.json").read_bytes())["shards"])


def _unlisted_shards(root: Path) -> set[str]:
    return {p.name for p in (root / "memory_data/.embeddings").glob("shard-*.npz")} - _listed(root)


def test_embedding_shards_orphaned_by_a_failed_commit_are_swept(tmp_path: Path) -> None:
    cache = _setup_embeddings(tmp_path)
    probe_cache = _setup_embeddings(tmp_path / "probe")
    probe = rs.FailAt(0)
    with _fs.use_syscalls(probe):
        probe_cache.vectors_for([("c", "third text")])
    manifest_open = [i for i, name in enumerate(probe.calls, 1) if name == "open_new"][-1]
    with _fs.use_syscalls(rs.FailAt(manifest_open, errno.ENOSPC)), pytest.raises(StorageError):
        cache.vectors_for([("c", "third text")])
    rs.COUNTS["faults"] += 1
    assert _unlisted_shards(tmp_path) == set()  # the failed commit removed its own shard
    # A writer killed between its shard and the manifest leaves one behind; the next commit
    # (here by a restarted process) sweeps it.
    folder = tmp_path / "memory_data/.embeddings"
    (folder / "shard-999999-0123456789abcdef.npz").write_bytes((folder / next(iter(_listed(tmp_path)))).read_bytes())
    assert _unlisted_shards(tmp_path)
    fresh = EmbeddingCache(DirectoryGuard(tmp_path), FakeEmbedder(), CONFIG)
    fresh.vectors_for([("d", "fourth text")])
    rs.cleanup_everywhere(tmp_path)
    assert _unlisted_shards(tmp_path) == set()
