"""MemoryManager L0-L3: every level sync and async, scoping, migration, hostile ids, corruption, versions."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from local_ai_memory._runtime.scope import MemoryManager
from local_ai_memory._shared import fs as _fs
from local_ai_memory._shared.config import MemoryConfig
from local_ai_memory._shared.errors import (
    InvalidInputError,
    PathEscapeError,
    RecordNotFoundError,
    StorageError,
    UnsupportedFormatError,
)
from local_ai_memory._shared.naming import DirectoryGuard
from local_ai_memory._shared.records import FORMAT_VERSION, iter_json_bytes
from local_ai_memory.backends import FileRuntimeBackend

FAST = MemoryConfig(fsync=False)


@pytest.fixture
def manager(tmp_path: Path) -> MemoryManager:
    return MemoryManager(FileRuntimeBackend.from_config(FAST, DirectoryGuard(tmp_path)), FAST)


def files_under(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def data_files(root: Path) -> list[str]:
    """Files other than lock sidecars."""
    return [name for name in files_under(root) if not name.rsplit("/", 1)[-1].endswith(".lock")]


# -- levels, sync ---------------------------------------------------------------------------


def test_defaults_on_an_empty_root(manager: MemoryManager) -> None:
    assert manager.get_state() == {}
    assert manager.get_working_memory() == ""
    with pytest.raises(RecordNotFoundError):
        manager.load_plan("nope")
    with pytest.raises(FileNotFoundError):  # RecordNotFoundError is a FileNotFoundError
        manager.load_tool_result("nope")
    assert manager.scope is None
    assert manager.user_id is None
    assert manager.session_id is None


def test_l0_state_merges_and_uses_the_seed_envelope(manager: MemoryManager, tmp_path: Path) -> None:
    assert manager.update_state({"current_task": "refactor", "current_step": 1}) == {
        "current_task": "refactor",
        "current_step": 1,
    }
    assert manager.update_state({"current_step": 2, "plan_id": "p"}) == {
        "current_task": "refactor",
        "current_step": 2,
        "plan_id": "p",
    }
    stored = json.loads((tmp_path / "memory/state/global.json").read_text())
    assert stored["format_version"] == 1
    assert isinstance(stored["updated_at"], float)
    assert stored["state"] == {"current_task": "refactor", "current_step": 2, "plan_id": "p"}
    assert (
        MemoryManager(FileRuntimeBackend.from_config(FAST, DirectoryGuard(tmp_path)), FAST).get_state()
        == stored["state"]
    )


def test_l1_working_memory_roundtrip(manager: MemoryManager, tmp_path: Path) -> None:
    text = "# Current Goal\nFix the login — ünïcode ✓\n"
    manager.update_working_memory(text)
    assert manager.get_working_memory() == text
    assert (tmp_path / "memory/working/global.md").read_text(encoding="utf-8") == text
    manager.update_working_memory("")
    assert manager.get_working_memory() == ""


def test_l2_plans_share_one_file_per_scope(manager: MemoryManager, tmp_path: Path) -> None:
    manager.save_plan("auth-refactor", {"steps": ["read", "write", "test"]})
    manager.save_plan("other_plan", [1, 2, 3])
    assert manager.load_plan("auth-refactor") == {"steps": ["read", "write", "test"]}
    assert manager.load_plan("other_plan") == [1, 2, 3]
    manager.save_plan("other_plan", {"replaced": True})
    assert manager.load_plan("other_plan") == {"replaced": True}
    stored = json.loads((tmp_path / "memory/plans/global.json").read_text())
    record = stored["plans"]["auth-refactor"]
    assert set(record) == {"format_version", "id", "saved_at", "payload"}
    assert record["id"] == "auth-refactor"
    assert record["format_version"] == 1
    assert set(manager.list_plans()) == {"auth-refactor", "other_plan"}
    assert manager.delete_plan("other_plan") is True
    assert manager.delete_plan("other_plan") is False
    with pytest.raises(RecordNotFoundError):
        manager.load_plan("other_plan")


def test_l3_tool_results_roundtrip(manager: MemoryManager, tmp_path: Path) -> None:
    payload = {"id": "abc123", "tool": "read_file", "created_at": "2026-06-11T12:00:00+00:00", "content": "x" * 10}
    size = manager.save_tool_result("abc123", payload)
    assert manager.load_tool_result("abc123") == payload
    raw = (tmp_path / "memory/tool_results/abc123.json").read_bytes()
    assert size == len(raw)
    stored = json.loads(raw)
    assert stored["id"] == "abc123"
    assert stored["format_version"] == 1
    assert stored["payload"] == payload
    assert set(manager.list_tool_results()) == {"abc123"}
    assert manager.list_tool_results()["abc123"].size == size
    assert (tmp_path / "memory/tool_index/global/abc123.ref").read_bytes() == b""


def test_a_marker_left_without_its_result_is_dropped_after_a_minute(manager: MemoryManager, tmp_path: Path) -> None:
    import os
    import time

    marker = tmp_path / "memory/tool_index/global/ghost.ref"
    _fs.atomic_write(marker, b"", durable=False)
    assert manager.list_tool_results() == {}
    assert marker.exists()  # could be a save in progress
    old = time.time() - 120
    os.utime(marker, (old, old))
    assert manager.list_tool_results() == {}
    assert not marker.exists()


def test_streamed_json_equals_json_dumps_for_tricky_strings() -> None:
    tricky = {"a": 'é\u2028"\\\n' * 100_000 + "\ud800 lone", "b": [1, 2.5, None, True, {"c": "☃"}]}
    streamed = b"".join(iter_json_bytes(tricky))
    assert json.loads(streamed) == tricky


def test_payloads_that_are_not_json_are_refused_and_write_nothing(manager: MemoryManager, tmp_path: Path) -> None:
    bad_payloads: list[Any] = [{"x": float("nan")}, {"x": object()}, {1: "int key"}, {"x": {1, 2}}]
    for bad in bad_payloads:
        with pytest.raises(InvalidInputError):
            manager.save_plan("p", bad)
        with pytest.raises(InvalidInputError):
            manager.save_tool_result("r", bad)
        with pytest.raises(InvalidInputError):
            manager.update_state(bad)
    with pytest.raises(InvalidInputError):
        manager.update_state(["not", "a", "mapping"])  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        manager.update_working_memory(b"bytes")  # type: ignore[arg-type]
    assert data_files(tmp_path) == []


# -- levels, async --------------------------------------------------------------------------


async def test_every_level_async(manager: MemoryManager) -> None:
    scoped = manager.scoped("alice", "s1")
    assert await scoped.aget_state() == {}
    assert await scoped.aupdate_state({"step": 1}) == {"step": 1}
    assert await scoped.aget_state() == {"step": 1}
    assert await scoped.aget_working_memory() == ""
    await scoped.aupdate_working_memory("# Goal")
    assert await scoped.aget_working_memory() == "# Goal"
    await scoped.asave_plan("p1", {"steps": [1]})
    assert await scoped.aload_plan("p1") == {"steps": [1]}
    with pytest.raises(RecordNotFoundError):
        await scoped.aload_plan("p2")
    await scoped.asave_tool_result("r1", {"content": "big"})
    assert await scoped.aload_tool_result("r1") == {"content": "big"}
    with pytest.raises(RecordNotFoundError):
        await scoped.aload_tool_result("r2")
    assert await scoped.alist_plans() == {"p1": {"steps": [1]}}
    assert await scoped.adelete_plan("p1") is True


async def test_concurrent_async_updates_lose_nothing(manager: MemoryManager) -> None:
    import asyncio

    await asyncio.gather(*(manager.aupdate_state({f"k{i}": i}) for i in range(40)))
    assert manager.get_state() == {f"k{i}": i for i in range(40)}


def test_threads_updating_one_scope_lose_nothing(manager: MemoryManager) -> None:
    scoped = manager.scoped("u", "s")

    def work(label: int) -> None:
        for n in range(50):
            scoped.update_state({f"t{label}-{n}": n})

    threads = [threading.Thread(target=work, args=(label,)) for label in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(scoped.get_state()) == 200


# -- scoping --------------------------------------------------------------------------------


def test_scopes_are_isolated_and_named_unambiguously(manager: MemoryManager, tmp_path: Path) -> None:
    first = manager.scoped("a_b", "c")
    second = manager.scoped("a", "b_c")
    assert first.scope != second.scope
    first.update_state({"who": "a_b/c"})
    second.update_state({"who": "a/b_c"})
    first.update_working_memory("first")
    second.update_working_memory("second")
    first.save_plan("p", 1)
    second.save_plan("p", 2)
    assert first.get_state() == {"who": "a_b/c"}
    assert second.get_state() == {"who": "a/b_c"}
    assert (first.get_working_memory(), second.get_working_memory()) == ("first", "second")
    assert (first.load_plan("p"), second.load_plan("p")) == (1, 2)
    assert (first.user_id, first.session_id) == ("a_b", "c")
    states = sorted(p.name for p in (tmp_path / "memory/state").glob("*.json"))
    assert states == sorted([f"{first.scope}.json", f"{second.scope}.json"])
    assert manager.scoped("a_b", "c").get_state() == {"who": "a_b/c"}


def test_scope_file_stems_are_unicode_safe(manager: MemoryManager) -> None:
    scoped = manager.scoped("Zoë 👩", "séance/1".replace("/", "-"))
    scoped.update_state({"ok": True})
    assert scoped.scope is not None
    assert scoped.scope.isascii()
    assert manager.scoped("Zoë 👩", "séance-1").get_state() == {"ok": True}


HOSTILE = ["../x", "/etc", "", "a\x00b", "x" * 10_240, "..", ".", "a/b", "a\\b", "\n"]


@pytest.mark.parametrize("hostile", HOSTILE, ids=lambda v: repr(v)[:20])
def test_hostile_ids_get_a_clear_error_and_write_nothing(tmp_path: Path, hostile: str) -> None:
    guard = DirectoryGuard(tmp_path)
    manager = MemoryManager(FileRuntimeBackend.from_config(FAST, guard), FAST)
    before = files_under(tmp_path)
    for call in (
        lambda: manager.scoped(hostile, "s"),
        lambda: manager.scoped("u", hostile),
        lambda: MemoryManager(FileRuntimeBackend.from_config(FAST, guard), FAST, user_id=hostile, session_id="s"),
        lambda: manager.save_plan(hostile, {"x": 1}),
        lambda: manager.load_plan(hostile),
        lambda: manager.delete_plan(hostile),
        lambda: manager.save_tool_result(hostile, {"x": 1}),
        lambda: manager.load_tool_result(hostile),
    ):
        with pytest.raises((InvalidInputError, PathEscapeError)) as caught:
            call()
        assert str(caught.value)
        assert len(str(caught.value)) < 400  # the 10 KB value is not echoed whole
    assert files_under(tmp_path) == before
    assert not (tmp_path.parent / "x").exists()


def test_only_both_or_neither_scope_part(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError):
        MemoryManager(FileRuntimeBackend.from_config(FAST, DirectoryGuard(tmp_path)), FAST, user_id="u")


# -- migration ------------------------------------------------------------------------------


def test_first_scoped_use_adopts_the_global_files_once(manager: MemoryManager, tmp_path: Path) -> None:
    manager.update_state({"task": "old"})
    manager.update_working_memory("# old")
    manager.save_plan("p", {"old": True})
    manager.save_tool_result("r1", {"content": "x"})

    alice = manager.scoped("alice", "s1")
    assert alice.get_state() == {"task": "old"}
    assert alice.get_working_memory() == "# old"
    assert alice.load_plan("p") == {"old": True}
    assert set(alice.list_tool_results()) == {"r1"}
    assert not (tmp_path / "memory/state/global.json").exists()
    assert not (tmp_path / "memory/working/global.md").exists()
    assert not (tmp_path / "memory/plans/global.json").exists()
    assert list((tmp_path / "memory/tool_index/global").glob("*.ref")) == []
    assert (tmp_path / f"memory/tool_index/{alice.scope}/r1.ref").exists()

    bob = manager.scoped("bob", "s1")  # the global files went to alice, once
    assert bob.get_state() == {}
    assert bob.get_working_memory() == ""
    assert bob.list_plans() == {}
    assert bob.list_tool_results() == {}
    assert manager.get_state() == {}


def test_migration_never_overwrites_a_scope_that_has_data(manager: MemoryManager) -> None:
    alice = manager.scoped("alice", "s1")
    alice.update_state({"mine": 1})
    manager.update_state({"global": 1})
    manager.update_working_memory("global text")
    fresh = MemoryManager(FileRuntimeBackend.from_config(MemoryConfig(), manager.backend.guard)).scoped(
        "alice", "s1"
    )  # a new process (new backend) migrates on first use
    assert fresh.get_state() == {"mine": 1}
    assert fresh.get_working_memory() == "global text"  # the level it lacked is adopted
    assert manager.get_state() == {"global": 1}  # the level it had stays global


def test_concurrent_first_uses_adopt_global_state_exactly_once(tmp_path: Path) -> None:
    root = MemoryManager(FileRuntimeBackend.from_config(FAST, DirectoryGuard(tmp_path)), FAST)
    root.update_state({"task": "old"})
    scopes = [root.scoped(f"user{i}", "s") for i in range(8)]
    results: list[dict[str, Any]] = []
    barrier = threading.Barrier(len(scopes))

    def first_use(scoped: MemoryManager) -> None:
        barrier.wait()
        results.append(scoped.get_state())

    threads = [threading.Thread(target=first_use, args=(scoped,)) for scoped in scopes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(map(len, results)) == [0] * 7 + [1]


# -- corruption -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "garbage",
    [b"{not json", b"", b"\xff\xfe\x00", b"[1, 2]", b'{"format_version": 1, "state": "not a dict"}', b'{"state": {}}'],
)
def test_corrupt_state_is_backed_up_logged_and_defaulted(
    manager: MemoryManager, tmp_path: Path, events: Any, garbage: bytes
) -> None:
    path = tmp_path / "memory/state/global.json"
    _fs.atomic_write(path, garbage, durable=False)
    assert manager.get_state() == {}
    backup = path.with_name("global.json.corrupt.bak")
    assert backup.read_bytes() == garbage
    assert not path.exists()
    assert [name for name, _ in events.records] == ["MEMORY_CORRUPT"]
    assert events.records[0][1]["backup"] == str(backup)
    assert manager.update_state({"fresh": 1}) == {"fresh": 1}
    assert backup.read_bytes() == garbage


def test_corrupt_file_found_during_update_is_backed_up_before_the_write(manager: MemoryManager, tmp_path: Path) -> None:
    path = tmp_path / "memory/state/global.json"
    _fs.atomic_write(path, b"{torn", durable=False)
    assert manager.update_state({"a": 1}) == {"a": 1}
    assert path.with_name("global.json.corrupt.bak").read_bytes() == b"{torn"
    _fs.atomic_write(path, b"{torn again", durable=False)
    assert manager.update_state({"b": 2}) == {"b": 2}
    assert path.with_name("global.json.corrupt.bak.1").read_bytes() == b"{torn again"


def test_corrupt_working_plans_and_results(manager: MemoryManager, tmp_path: Path, events: Any) -> None:
    memory = tmp_path / "memory"
    _fs.atomic_write(memory / "working/global.md", b"\xc3\x28 invalid utf-8", durable=False)
    _fs.atomic_write(memory / "plans/global.json", b'{"format_version": 1, "plans": 7}', durable=False)
    _fs.atomic_write(memory / "tool_results/r1.json", b"null", durable=False)
    _fs.atomic_write(memory / "tool_index/global/r1.ref", b"", durable=False)  # owned by the unscoped memory
    assert manager.get_working_memory() == ""
    with pytest.raises(RecordNotFoundError):
        manager.load_plan("p")
    with pytest.raises(RecordNotFoundError):
        manager.load_tool_result("r1")
    assert (memory / "working/global.md.corrupt.bak").exists()
    assert (memory / "plans/global.json.corrupt.bak").exists()
    assert (memory / "tool_results/r1.json.corrupt.bak").exists()
    assert [name for name, _ in events.records] == ["MEMORY_CORRUPT"] * 3
    manager.save_plan("p", 1)
    assert manager.load_plan("p") == 1


# -- versions -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("relative", "call"),
    [
        ("state/global.json", lambda m: m.get_state()),
        ("state/global.json", lambda m: m.update_state({"x": 1})),
        ("plans/global.json", lambda m: m.load_plan("p")),
        ("plans/global.json", lambda m: m.save_plan("p", 1)),
        ("tool_results/r1.json", lambda m: m.load_tool_result("r1")),
    ],
)
def test_a_newer_format_version_is_refused_and_left_untouched(
    manager: MemoryManager, tmp_path: Path, relative: str, call: Any
) -> None:
    path = tmp_path / "memory" / relative
    future = json.dumps({"format_version": FORMAT_VERSION + 1, "id": "r1", "state": {}, "new": "shape"}).encode()
    _fs.atomic_write(path, future, durable=False)
    _fs.atomic_write(tmp_path / "memory/tool_index/global/r1.ref", b"", durable=False)
    with pytest.raises(UnsupportedFormatError, match="format_version 2"):
        call(manager)
    assert path.read_bytes() == future
    assert not list(path.parent.glob("*.bak"))


def test_a_newer_plan_inside_the_plans_file_is_refused(manager: MemoryManager, tmp_path: Path) -> None:
    manager.save_plan("mine", 1)
    path = tmp_path / "memory/plans/global.json"
    data = json.loads(path.read_bytes())
    data["plans"]["future"] = {"format_version": 2, "id": "future", "saved_at": 1.0, "payload": {"x": 1}}
    _fs.atomic_write(path, json.dumps(data).encode(), durable=False)
    before = path.read_bytes()
    with pytest.raises(UnsupportedFormatError):
        manager.save_plan("mine", 2)
    with pytest.raises(UnsupportedFormatError):
        manager.load_plan("mine")
    assert path.read_bytes() == before


# -- failures -------------------------------------------------------------------------------


class FailingReplace(_fs.Syscalls):
    def replace(self, src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")


def test_a_failed_write_keeps_the_old_state(manager: MemoryManager) -> None:
    manager.update_state({"kept": 1})
    with _fs.use_syscalls(FailingReplace()), pytest.raises(StorageError):
        manager.update_state({"lost": 2})
    assert manager.get_state() == {"kept": 1}


def test_leftover_temp_files_are_cleaned_on_first_use(tmp_path: Path) -> None:
    folder = tmp_path / "memory/state"
    folder.mkdir(parents=True)
    stale = folder / ".global.json.999999999-0123456789ab.tmp"
    stale.write_bytes(b"half")
    import local_ai_memory._backends.files.runtime as files_module

    files_module._cleaned_roots.discard(str(tmp_path.resolve()))
    MemoryManager(FileRuntimeBackend.from_config(FAST, DirectoryGuard(tmp_path)), FAST).get_state()
    assert not stale.exists()


def test_rename_if_absent_never_overwrites(tmp_path: Path) -> None:
    source, target = tmp_path / "a.json", tmp_path / "b.json"
    _fs.atomic_write(source, b"A", durable=False)
    _fs.atomic_write(target, b"B", durable=False)
    assert _fs.rename_if_absent(source, target) is False
    assert (source.read_bytes(), target.read_bytes()) == (b"A", b"B")
    _fs.remove(target)
    assert _fs.rename_if_absent(source, target) is True
    assert target.read_bytes() == b"A"
    assert not source.exists()
    assert _fs.rename_if_absent(source, target) is False


# RFC 7396, appendix A: (target, patch, result)
RFC7396_CASES = [
    ({"a": "b"}, {"a": "c"}, {"a": "c"}),
    ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
    ({"a": "b"}, {"a": None}, {}),
    ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
    ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
    ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
    ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
    ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
    (["a", "b"], ["c", "d"], ["c", "d"]),
    ({"a": "b"}, ["c"], ["c"]),
    ({"a": "foo"}, None, None),
    ({"a": "foo"}, "bar", "bar"),
    ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
    ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
    ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
]


@pytest.mark.parametrize(("target", "patch", "result"), RFC7396_CASES)
def test_merge_patch_follows_rfc_7396(target: Any, patch: Any, result: Any) -> None:
    from local_ai_memory._runtime.scope import merge_patch

    before = json.dumps(target)
    assert merge_patch(target, patch) == result
    assert json.dumps(target) == before  # the target is not changed in place


async def test_update_state_is_a_merge_patch_and_replace_state_replaces(manager: MemoryManager) -> None:
    scoped = manager.scoped("alice", "s1")
    scoped.update_state({"a": 1, "b": {"x": 1, "y": 2}})
    assert scoped.update_state({"b": {"y": None, "z": 3}}) == {"a": 1, "b": {"x": 1, "z": 3}}
    assert scoped.update_state({"a": None}) == {"b": {"x": 1, "z": 3}}
    assert scoped.get_state() == {"b": {"x": 1, "z": 3}}
    assert scoped.replace_state({"only": True}) == {"only": True}
    assert await scoped.aupdate_state({"only": None, "n": [1]}) == {"n": [1]}
    assert await scoped.areplace_state({}) == {}
    with pytest.raises(InvalidInputError):
        scoped.replace_state(["no"])  # type: ignore[arg-type]
