"""Resource bounds: a 100 MB tool output, page sizes, retention of L3."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pytest
import reliability_support as rs
from hypothesis import given, settings
from hypothesis import strategies as st

from local_ai_memory._runtime.checkpoints import CheckpointRun
from local_ai_memory._runtime.scope import MemoryManager
from local_ai_memory._runtime.tool_results import RetentionPolicy, ToolResultStore, render_page
from local_ai_memory._shared.config import MemoryConfig
from local_ai_memory._shared.naming import DirectoryGuard
from local_ai_memory.backends import FileRuntimeBackend

MB = 1 << 20


def _manager(root: Path) -> MemoryManager:
    return MemoryManager(
        FileRuntimeBackend.from_config(MemoryConfig(fsync=False), DirectoryGuard(root)), MemoryConfig(fsync=False)
    ).scoped("alice", "s1")


def test_externalizing_100_mb_holds_no_extra_copy(tmp_path: Path) -> None:
    content = "é" * (50 * MB)  # 100 MB of UTF-8 (the test's own copy is the str itself)
    store = ToolResultStore(_manager(tmp_path), RetentionPolicy(max_count=None, max_bytes=None))
    store.externalize("warmup", "w" * 10_000)  # imports and folders out of the measurement
    tracemalloc.start()
    try:
        reference = store.externalize("big_tool", content)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    ref = json.loads(reference)
    assert ref["size"] == 100 * MB
    assert len(ref["summary"]) == 1001
    assert ref["summary"].endswith("…")
    # One more copy of the content would be >= 100 MB; streaming stays within a few MB.
    assert peak < 8 * MB, f"peak {peak / MB:.1f} MB while externalizing 100 MB"
    rs.COUNTS["bytes_externalized_mb"] += 100
    path = tmp_path / "memory/tool_results" / f"{ref['result_id']}.json"
    assert path.stat().st_size > 100 * MB
    with path.open("rb") as handle:  # the file ends as complete JSON
        handle.seek(-64, 2)
        assert handle.read().rstrip().endswith(b"}}")


@settings(max_examples=40, deadline=None)
@given(offset=st.integers(min_value=0, max_value=30_000), limit=st.integers(min_value=1, max_value=9_000))
def test_pages_never_exceed_the_limit(tmp_path_factory: pytest.TempPathFactory, offset: int, limit: int) -> None:
    root = tmp_path_factory.mktemp("pages")
    store = ToolResultStore(_manager(root))
    content = "".join(f"line {i} ünï\n" for i in range(2_000))  # 25,780 characters
    result_id = json.loads(store.externalize("t", content))["result_id"]
    page = store.load_page(result_id, offset, limit)
    assert len(page.content) <= limit
    assert page.content == content[min(offset, len(content)) : min(offset, len(content)) + limit]
    assert page.total_chars == len(content)
    assert (page.next_offset is None) == (page.offset + len(page.content) >= len(content))
    rendered = render_page(page)
    assert len(rendered) <= limit + 200  # the one-line header is short
    assert rendered.split("\n", 1)[1] == page.content


def test_paging_reassembles_the_whole_output(tmp_path: Path) -> None:
    store = ToolResultStore(_manager(tmp_path))
    content = "".join(chr(0x41 + i % 26) + ("\U0001f600" if i % 7 == 0 else "") for i in range(50_000))
    result_id = json.loads(store.externalize("t", content))["result_id"]
    pieces, offset, pages = [], 0, 0
    while offset is not None:
        page = store.load_page(result_id, offset, 3_000)
        assert len(page.content) <= 3_000
        pieces.append(page.content)
        offset = page.next_offset
        pages += 1
    assert "".join(pieces) == content
    assert pages == -(-len(content) // 3_000)


def test_retention_keeps_l3_within_its_bounds(tmp_path: Path) -> None:
    manager = _manager(tmp_path)
    policy = RetentionPolicy(max_count=6, max_bytes=120_000)
    store = ToolResultStore(manager, policy)
    with CheckpointRun(manager, "run", handle_signals=False) as run:
        first = json.loads(store.externalize("t", "protected " + "p" * 9_000))["result_id"]
        run.step(tool_result_ids=[first])
        largest = 0
        for n in range(60):
            size = 7_000 + (n % 5) * 4_000
            store.externalize("t", f"r{n} " + "x" * size)
            largest = max(largest, size + 400)
            listed = manager.list_tool_results()
            assert len(listed) <= policy.max_count
            total = sum(entry.size for entry in listed.values())
            # The byte bound is re-measured every max_bytes/8 written, so it may overshoot by that much.
            assert total <= policy.max_bytes + policy.max_bytes // 8 + largest
            assert first in listed, "a result referenced by a resumable checkpoint was pruned"
        store.prune()
        listed = manager.list_tool_results()
        assert sum(entry.size for entry in listed.values()) <= policy.max_bytes
        assert first in listed
    store.prune()  # the run completed: its results are no longer protected
    files = list((tmp_path / "memory/tool_results").glob("*.json"))
    markers = list((tmp_path / "memory/tool_index").rglob("*.ref"))
    assert len(files) <= policy.max_count
    assert len(markers) == len(files)
