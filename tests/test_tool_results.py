"""ToolResultStore: externalization at the byte limit, references, paging, retention."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from local_ai_memory._runtime.checkpoints import CheckpointRun
from local_ai_memory._runtime.scope import MemoryManager
from local_ai_memory._runtime.tool_results import (
    DEFAULT_PAGE_CHARS,
    RetentionPolicy,
    ToolResultPage,
    ToolResultStore,
    protected_result_ids,
    render_page,
    select_for_pruning,
    summarize,
    utf8_size,
)
from local_ai_memory._shared.config import MemoryConfig
from local_ai_memory._shared.errors import InvalidInputError, RecordNotFoundError
from local_ai_memory._shared.naming import DirectoryGuard
from local_ai_memory._shared.records import AgentCheckpoint, ToolIndexEntry, slice_page
from local_ai_memory.backends import FileRuntimeBackend

LIMIT = 6144


@pytest.fixture
def manager(tmp_path: Path) -> MemoryManager:
    return MemoryManager(
        FileRuntimeBackend.from_config(MemoryConfig(fsync=False), DirectoryGuard(tmp_path)), MemoryConfig(fsync=False)
    ).scoped("alice", "s1")


@pytest.fixture
def store(manager: MemoryManager) -> ToolResultStore:
    return ToolResultStore(manager)


def stored_files(manager: MemoryManager) -> list[Path]:
    folder = manager.backend.guard.root / "memory/tool_results"
    return sorted(folder.glob("*.json")) if folder.exists() else []


# -- the limit ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("unit", "count"),
    [("a", LIMIT), ("é", LIMIT // 2), ("€", LIMIT // 3), ("😀", LIMIT // 4)],
    ids=["ascii", "2-byte", "3-byte", "4-byte"],
)
def test_exactly_at_the_limit_stays_inline(store: ToolResultStore, unit: str, count: int) -> None:
    content = unit * count
    assert len(content.encode()) == LIMIT
    assert store.externalize("read_file", content) is content
    assert stored_files(store.manager) == []


@pytest.mark.parametrize("unit", ["a", "é", "€", "😀"])
def test_one_byte_over_the_limit_is_externalized(store: ToolResultStore, events: Any, unit: str) -> None:
    body = unit * (LIMIT // len(unit.encode()))
    content = body + "x"  # LIMIT + 1 bytes
    assert utf8_size(content) == LIMIT + 1
    reference = json.loads(store.externalize("read_file", content))
    assert set(reference) == {"result_id", "summary", "size", "chars", "lines", "pages"}
    assert reference["size"] == LIMIT + 1
    assert reference["chars"] == len(content)
    assert reference["lines"] == 1
    assert reference["pages"] == -(-len(content) // DEFAULT_PAGE_CHARS)
    assert reference["summary"] == content[:1000] + "…"
    result_id = reference["result_id"]
    assert len(result_id) == 16
    payload = store.manager.load_tool_result(result_id)
    assert payload["content"] == content
    assert payload["tool"] == "read_file"
    assert payload["id"] == result_id
    assert payload["created_at"].endswith("+00:00")
    stored = [(name, fields) for name, fields in events.records if name == "TOOL_RESULT_STORED"]
    assert stored == [
        ("TOOL_RESULT_STORED", {"tool": "read_file", "result_id": result_id, "size": LIMIT + 1, "scope": "alice_s1"})
    ]


def test_a_multibyte_character_straddling_the_limit(store: ToolResultStore) -> None:
    content = "a" * (LIMIT - 1) + "é"  # LIMIT - 1 characters of ASCII + one 2-byte char = LIMIT + 1 bytes
    assert len(content) == LIMIT
    assert json.loads(store.externalize("t", content))["size"] == LIMIT + 1


def test_errors_always_stay_inline(store: ToolResultStore) -> None:
    huge = "Traceback " * 10_000
    assert store.externalize("t", huge, is_error=True) is huge
    assert stored_files(store.manager) == []


def test_short_summary_has_no_ellipsis(tmp_path: Path) -> None:
    config = MemoryConfig(fsync=False, tool_result_inline_limit=10, tool_result_summary_max_chars=50)
    store = ToolResultStore(MemoryManager(FileRuntimeBackend.from_config(config, DirectoryGuard(tmp_path)), config))
    reference = json.loads(store.externalize("t", "y" * 20))
    assert reference["summary"] == "y" * 20
    assert summarize("abc", 2) == "ab…"
    assert summarize("abc", 3) == "abc"


def test_ids_are_short_random_and_distinct(tmp_path: Path) -> None:
    config = MemoryConfig(fsync=False, tool_result_inline_limit=0)
    store = ToolResultStore(
        MemoryManager(FileRuntimeBackend.from_config(config, DirectoryGuard(tmp_path)), config),
        RetentionPolicy(max_count=None),
    )
    ids = {json.loads(store.externalize("call_" + "x" * 5000, "z"))["result_id"] for _ in range(300)}
    assert len(ids) == 300
    assert all(len(result_id) == 16 and int(result_id, 16) >= 0 for result_id in ids)


def test_bad_arguments(store: ToolResultStore) -> None:
    with pytest.raises(InvalidInputError):
        store.externalize("t", b"bytes")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        store.externalize(None, "text")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        store.load_page("../etc", 0, 10)
    with pytest.raises(RecordNotFoundError):
        store.load_page("missing", 0, 10)


# -- paging ---------------------------------------------------------------------------------


def test_paging_a_multi_megabyte_result_gives_back_the_identical_string(store: ToolResultStore) -> None:
    parts = [f'line {i}: ünïcödé ✓ 😀 "quoted" \\ back\n' for i in range(80_000)]
    content = "".join(parts) + "\U0001f600 astral end"
    assert utf8_size(content) > 3_000_000
    reference = json.loads(store.externalize("big_tool", content))
    pieces: list[str] = []
    offset: int | None = 0
    pages = 0
    while offset is not None:
        page = store.load_page(reference["result_id"], offset, 500_000)
        assert page.offset == offset
        assert page.total_chars == len(content)
        assert page.remaining == len(content) - offset - len(page.content)
        pieces.append(page.content)
        offset = page.next_offset
        pages += 1
    assert "".join(pieces) == content
    assert pages == -(-len(content) // 500_000)


async def test_async_externalize_and_paging(store: ToolResultStore) -> None:
    content = "ab" * 5000
    reference = json.loads(await store.aexternalize("t", content))
    first = await store.aload_page(reference["result_id"], 0, 4000)
    assert first.content == content[:4000]
    assert first.next_offset == 4000
    last = await store.aload_page(reference["result_id"], 8000, 4000)
    assert last.content == content[8000:]
    assert last.next_offset is None
    assert last.remaining == 0
    assert await store.aexternalize("t", "small") == "small"
    assert await store.aprune() == []


def test_paging_past_the_end_and_bad_bounds(store: ToolResultStore) -> None:
    reference = json.loads(store.externalize("t", "q" * 7000))
    page = store.load_page(reference["result_id"], 10_000, 10)
    assert (page.content, page.offset, page.next_offset, page.remaining) == ("", 7000, None, 0)
    for offset, limit in ((-1, 10), (0, 0), (0, -5), (True, 10)):
        with pytest.raises(InvalidInputError):
            store.load_page(reference["result_id"], offset, limit)


def test_rendered_pages_are_never_externalized(store: ToolResultStore) -> None:
    reference = json.loads(store.externalize("t", "w" * 50_000))
    page = store.load_page(reference["result_id"], 0, 20_000)
    text = render_page(page)
    assert "w" * 20_000 in text
    assert "offset=20000" in text
    assert len(stored_files(store.manager)) == 1  # rendering stored nothing new
    end = render_page(store.load_page(reference["result_id"], 40_000, 20_000))
    assert "end of result" in end


def test_render_page_is_pure() -> None:
    page = ToolResultPage(result_id="r", tool="grep", offset=5, content="hello", total_chars=20, next_offset=10)
    assert render_page(page) == (
        "[tool result r (grep): characters 5-10 of 20; page 2 of 4; 10 more characters; "
        "call load_tool_result with offset=10 for the next]\nhello"
    )


HEADER = re.compile(
    r"^\[tool result r \(t\): characters (\d+)-(\d+) of (\d+); (?:page (\d+) of (\d+)|past the last page); (.*)\]$"
)


def _labels(pages: list[ToolResultPage]) -> list[tuple[int, int, int, int | None, int | None, str]]:
    found = []
    for page in pages:
        match = HEADER.match(render_page(page).split("\n", 1)[0])
        assert match is not None, render_page(page)
        start, end, total, number, count, where = match.groups()
        found.append(
            (
                int(start),
                int(end),
                int(total),
                None if number is None else int(number),
                None if count is None else int(count),
                where,
            )
        )
    return found


def _read_on(content: str, offset: int, limit: int) -> list[ToolResultPage]:
    pages = [slice_page("r", "t", content, offset, limit).model_copy(update={"limit": limit})]
    while pages[-1].next_offset is not None:
        pages.append(slice_page("r", "t", content, pages[-1].next_offset, limit).model_copy(update={"limit": limit}))
    return pages


@settings(max_examples=400, deadline=None)
@given(total=st.integers(0, 5_000), limit=st.integers(1, 1_500), start=st.integers(0, 5_500))
def test_page_labels_agree_for_any_size_offset_and_limit(total: int, limit: int, start: int) -> None:
    """Reading on from any offset with one limit: one count on every page, numbers one apart,
    the last page "count of count" and the only one that says "end of result", and the count
    is the number of pages a read from the start takes when the offset is a page boundary."""
    labels = _labels(_read_on("x" * total, start, limit))
    if start >= total and total:
        assert labels == [(total, total, total, None, None, "end of result")]
        return
    counts = {count for *_, count, _ in labels}
    assert len(counts) == 1
    numbers = [number for _, _, _, number, _, _ in labels]
    assert numbers == list(range(numbers[0], numbers[0] + len(numbers)))
    assert numbers[-1] == counts.pop()
    assert [where == "end of result" for *_, where in labels] == [False] * (len(labels) - 1) + [True]
    assert all(end - begin == limit for begin, end, *_ in labels[:-1])
    first = min(start, total)  # an offset past the end of an empty output reads from its end
    if first % limit == 0:
        assert labels[0][3] == first // limit + 1
        assert labels[-1][4] == max(1, -(-total // limit))


def test_the_demo_s_pages_are_labelled_1_2_3_of_3(store: ToolResultStore) -> None:
    """The 99,661-character output read 40,000 characters at a time said "page 5 of 6" last."""
    reference = json.loads(store.externalize("read_source", "s" * 99_661))
    offset: int | None = 0
    headers = []
    while offset is not None:
        page = store.load_page(reference["result_id"], offset, 40_000)
        headers.append(render_page(page).split("\n", 1)[0])
        offset = page.next_offset
    assert ["page 1 of 3;" in headers[0], "page 2 of 3;" in headers[1], "page 3 of 3; end of result" in headers[2]] == [
        True,
        True,
        True,
    ], headers


def test_pages_of_a_payload_saved_directly(manager: MemoryManager) -> None:
    manager.save_tool_result("raw1", {"tool": "x", "rows": [1, 2, 3]})
    page = ToolResultStore(manager).load_page("raw1")
    assert json.loads(page.content) == {"tool": "x", "rows": [1, 2, 3]}


# -- retention ------------------------------------------------------------------------------


def entry(size: int, age: float, now: float = 1000.0) -> ToolIndexEntry:
    return ToolIndexEntry(size=size, saved_at=now - age)


def test_select_for_pruning_by_count_bytes_and_age() -> None:
    def policy(**bounds: Any) -> RetentionPolicy:
        return RetentionPolicy(**{"max_count": None, "max_bytes": None, **bounds})

    entries = {"old": entry(10, 300), "mid": entry(10, 200), "new": entry(10, 100)}
    assert select_for_pruning(entries, policy(max_count=2), 1000.0) == ["old"]
    assert select_for_pruning(entries, policy(max_bytes=15), 1000.0) == ["old", "mid"]
    assert select_for_pruning(entries, policy(max_age_seconds=150), 1000.0) == [
        "old",
        "mid",
    ]
    protected = {"old"}
    assert select_for_pruning(entries, policy(max_count=2), 1000.0, protected) == ["mid"]
    assert select_for_pruning(entries, policy(max_count=1), 1000.0, protected) == [
        "mid",
        "new",
    ]
    assert select_for_pruning(entries, policy(max_count=0), 1000.0, set(entries)) == []
    assert select_for_pruning(entries, policy(max_count=None), 1000.0) == []


def test_protected_ids_come_from_resumable_checkpoints_only() -> None:
    checkpoints = [
        AgentCheckpoint(plan_id="a", status="in_progress", tool_result_ids=["r1"]),
        AgentCheckpoint(plan_id="b", status="interrupted", tool_result_ids=["r2"]),
        AgentCheckpoint(plan_id="c", status="completed", tool_result_ids=["r3"]),
    ]
    assert protected_result_ids(checkpoints) == {"r1", "r2"}


def test_prune_keeps_the_newest_and_anything_an_in_progress_checkpoint_needs(tmp_path: Path, events: Any) -> None:
    config = MemoryConfig(fsync=False, tool_result_inline_limit=10)
    manager = MemoryManager(FileRuntimeBackend.from_config(config, DirectoryGuard(tmp_path)), config).scoped("u", "s")
    store = ToolResultStore(manager, RetentionPolicy(max_count=None, max_bytes=None))
    ids = []
    for number in range(6):
        ids.append(json.loads(store.externalize("t", f"{number}" * 100))["result_id"])
        time.sleep(0.002)
    run = CheckpointRun(manager, "job", handle_signals=False)
    run.start()
    run.step(tool_result_ids=[ids[0]])

    store.retention = RetentionPolicy(max_count=2, max_bytes=None)
    removed = store.prune()
    assert sorted(removed) == sorted(ids[1:5])  # the protected one counts toward the bound
    assert set(manager.list_tool_results()) == {ids[0], ids[5]}
    assert manager.load_tool_result(ids[0])["content"] == "0" * 100
    for gone in ids[1:5]:
        with pytest.raises(RecordNotFoundError):
            store.load_page(gone)
    pruned = [fields for name, fields in events.records if name == "TOOL_RESULTS_PRUNED"]
    assert pruned == [{"scope": "u_s", "removed": 4, "kept": 2, "protected": 1}]

    store.retention = RetentionPolicy(max_count=1, max_bytes=None)
    assert store.prune() == [ids[5]]  # the newest goes before a protected one
    run.finish("completed")  # no longer resumable: its result may go now
    store.retention = RetentionPolicy(max_count=0, max_bytes=None)
    assert store.prune() == [ids[0]]


def test_prune_by_age_and_other_scopes_untouched(tmp_path: Path) -> None:
    config = MemoryConfig(fsync=False, tool_result_inline_limit=10)
    root = MemoryManager(FileRuntimeBackend.from_config(config, DirectoryGuard(tmp_path)), config)
    mine, theirs = root.scoped("u", "s1"), root.scoped("u", "s2")
    policy = RetentionPolicy(max_count=None, max_bytes=None, max_age_seconds=60)
    mine_id = json.loads(ToolResultStore(mine, policy).externalize("t", "m" * 50))["result_id"]
    their_id = json.loads(ToolResultStore(theirs, policy).externalize("t", "t" * 50))["result_id"]
    assert ToolResultStore(mine, policy).prune(now=time.time() + 30) == []
    assert ToolResultStore(mine, policy).prune(now=time.time() + 120) == [mine_id]
    assert mine.delete_tool_results([their_id]) == []  # not this scope's result
    assert theirs.load_tool_result(their_id)["content"] == "t" * 50


def test_externalize_prunes_automatically_past_the_count_bound(tmp_path: Path) -> None:
    config = MemoryConfig(fsync=False, tool_result_inline_limit=10)
    manager = MemoryManager(FileRuntimeBackend.from_config(config, DirectoryGuard(tmp_path)), config)
    store = ToolResultStore(manager, RetentionPolicy(max_count=3, max_bytes=None))
    ids = [json.loads(store.externalize("t", "z" * 100))["result_id"] for _ in range(10)]
    assert len(manager.list_tool_results()) == 3
    assert len(stored_files(manager)) == 3
    assert set(manager.list_tool_results()) <= set(ids)


def test_auto_prune_never_removes_the_result_just_stored(tmp_path: Path) -> None:
    config = MemoryConfig(fsync=False, tool_result_inline_limit=10)
    manager = MemoryManager(FileRuntimeBackend.from_config(config, DirectoryGuard(tmp_path)), config)
    store = ToolResultStore(manager, RetentionPolicy(max_count=0, max_bytes=None))
    for _ in range(3):
        result_id = json.loads(store.externalize("t", "n" * 100))["result_id"]
        assert store.load_page(result_id).content == "n" * 100
        assert set(manager.list_tool_results()) == {result_id}


def test_bytes_bound_counts_stored_bytes(tmp_path: Path) -> None:
    config = MemoryConfig(fsync=False, tool_result_inline_limit=10)
    manager = MemoryManager(FileRuntimeBackend.from_config(config, DirectoryGuard(tmp_path)), config)
    store = ToolResultStore(manager, RetentionPolicy(max_count=None, max_bytes=5_000))
    for _ in range(5):
        store.externalize("t", "b" * 2_000)
    total = sum(item.size for item in manager.list_tool_results().values())
    assert total <= 5_000
    assert len(manager.list_tool_results()) == 2


def test_a_large_output_is_written_without_copying_it_whole(store: ToolResultStore) -> None:
    import tracemalloc

    content = "ü" * 15_000_000  # 30 MB of UTF-8
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        reference = json.loads(store.externalize("big", content))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert reference["size"] == 30_000_000
    assert peak < 8_000_000  # streamed in pieces: no 30 MB encoded copy was built
    assert store.load_page(reference["result_id"], 14_999_990, 100).content == "ü" * 10


async def test_a_store_of_another_scope_cannot_page_a_result(tmp_path: Path) -> None:
    root = MemoryManager(
        FileRuntimeBackend.from_config(MemoryConfig(fsync=False), DirectoryGuard(tmp_path)), MemoryConfig(fsync=False)
    )
    alice = ToolResultStore(root.scoped("alice", "s1"))
    result_id = json.loads(alice.externalize("dump", "secret " * 2000))["result_id"]
    for user, session in (("bob", "s1"), ("alice", "s2"), ("alice_s1", "x")):
        other = ToolResultStore(root.scoped(user, session))
        with pytest.raises(RecordNotFoundError, match="no tool result"):
            other.load_page(result_id)
        with pytest.raises(RecordNotFoundError):
            await other.aload_page(result_id)
        with pytest.raises(RecordNotFoundError):
            other.read(result_id)
    assert alice.load_page(result_id, 0, 7).content == "secret "
