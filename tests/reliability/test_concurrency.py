"""Processes and threads mixing every write path on shared scopes, for a bounded time.

Three processes with two threads each pick operations at random: ``update_state`` and
``save_plan`` on one shared scope, ``externalize``, knowledge ``write_file`` (each write
re-indexes) and ``retrieve`` with its automatic refresh. Each worker records what it wrote;
at the end a fresh process view must hold every write (no lost update), workers must have
met no exception at all, and a fresh store must find each file by its last version.

Lock hold intervals: around ``update_state`` and ``save_plan`` the worker takes the same
(re-entrant) record lock, stamps ``time.monotonic_ns()`` right after acquiring and right
before releasing, and appends the pair to a log. CLOCK_MONOTONIC is system-wide on Linux, so
the intervals of all processes are comparable: no two may overlap.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import reliability_support as rs

from local_ai_memory._knowledge.index_file import parse_index
from local_ai_memory._knowledge.retriever import MemoryRetriever
from local_ai_memory._knowledge.store import MemoryStore
from local_ai_memory._runtime.scope import MemoryManager
from local_ai_memory._runtime.tool_results import ToolResultStore
from local_ai_memory._shared.config import MemoryConfig
from local_ai_memory._shared.naming import DirectoryGuard
from local_ai_memory.backends import FileKnowledgeBackend, FileRuntimeBackend

WORKER = textwrap.dedent(
    """
    import json, os, random, sys, threading, time, traceback
    from pathlib import Path
    from local_ai_memory._shared import fs as _fs
    from local_ai_memory._shared.config import MemoryConfig
    from local_ai_memory._shared.errors import RecordNotFoundError
    from local_ai_memory._shared.naming import DirectoryGuard
    from local_ai_memory._runtime.scope import MemoryManager
    from local_ai_memory.backends import FileRuntimeBackend
    from local_ai_memory._knowledge.retriever import MemoryRetriever
    from local_ai_memory._knowledge.store import MemoryStore
    from local_ai_memory.backends import FileKnowledgeBackend
    from local_ai_memory._runtime.tool_results import RetentionPolicy, ToolResultStore

    root, label, seconds = Path(sys.argv[1]), sys.argv[2], float(sys.argv[3])
    guard = DirectoryGuard(root / "data")
    config = MemoryConfig(fsync=False, lock_timeout=60)
    store = MemoryStore(FileKnowledgeBackend(guard, config), config, categories=["knowledge"])
    retriever = MemoryRetriever(store)
    result = {"state": [], "plans": [], "results": {}, "files": {}, "ops": 0, "errors": [], "pruned_reads": 0}
    guard_result = threading.Lock()

    def log(name, t0, t1):
        fd = os.open(root / name, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.write(fd, f"{t0} {t1} {label}\\n".encode())
        os.close(fd)

    def work(t):
        rng = random.Random(f"{label}-{t}")
        backend = FileRuntimeBackend.from_config(config, guard)
        manager = MemoryManager(backend, config).scoped("shared user", "shared_session")
        tools = ToolResultStore(manager, RetentionPolicy(max_count=None, max_bytes=None))
        bounded = ToolResultStore(
            MemoryManager(backend, config).scoped("shared user", "bounded"),
            RetentionPolicy(max_count=4, max_bytes=None),
        )
        end = time.monotonic() + seconds
        i = 0
        while time.monotonic() < end:
            op = rng.choice(["state", "state", "plan", "plan", "tool", "bounded", "file", "retrieve"])
            key = f"{label}t{t}n{i}"
            if op == "state":
                with _fs.locked(guard.resolve("memory", "state", manager.stem + ".json")):  # the file backend's lock
                    t0 = time.monotonic_ns()
                    manager.update_state({key: i})
                    t1 = time.monotonic_ns()
                log("state-intervals.log", t0, t1)
                with guard_result:
                    result["state"].append(key)
            elif op == "plan":
                with _fs.locked(guard.resolve("memory", "plans", manager.stem + ".json")):
                    t0 = time.monotonic_ns()
                    manager.save_plan(key, {"i": i})
                    t1 = time.monotonic_ns()
                log("plan-intervals.log", t0, t1)
                with guard_result:
                    result["plans"].append(key)
            elif op == "tool":
                content = f"{key} " + "z" * 7000
                ref = json.loads(tools.externalize("conc", content))
                with guard_result:
                    result["results"][ref["result_id"]] = content
            elif op == "bounded":
                # Another process's retention may prune this result at any time: the documented
                # outcome is RecordNotFoundError ("it may have been pruned"), never a torn read.
                content = f"{key} " + "b" * 7000
                ref = json.loads(bounded.externalize("conc", content))
                try:
                    page = bounded.load_page(ref["result_id"], 0, 100_000)
                except RecordNotFoundError:
                    with guard_result:
                        result["pruned_reads"] += 1
                else:
                    assert page.content == content
            elif op == "file":
                name = f"u_{label}t{t}f{i % 3}.md"
                store.write_file(f"knowledge/{name}", f"# {key}\\n\\ntok{key}x some shared words\\n")
                with guard_result:
                    result["files"][name] = f"tok{key}x"
            else:
                retriever.retrieve("shared words", "u", max_tokens=300)
            i += 1
            with guard_result:
                result["ops"] += 1

    def guarded(t):
        try:
            work(t)
        except BaseException:
            with guard_result:
                result["errors"].append(traceback.format_exc())

    threads = [threading.Thread(target=guarded, args=(t,)) for t in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    (root / f"result-{label}.json").write_text(json.dumps(result))
    """
)


def _intervals(path: Path) -> list[tuple[int, int, str]]:
    out = []
    for line in rs.read_acks(path):
        start, end, label = line.split()
        out.append((int(start), int(end), label))
    return sorted(out)


@pytest.mark.parametrize("seconds", [8, pytest.param(30, marks=pytest.mark.slow)])
def test_processes_and_threads_mixing_every_path(tmp_path: Path, seconds: int) -> None:
    labels = ["p0", "p1", "p2"]
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(tmp_path), label, str(seconds)], stderr=subprocess.PIPE, text=True
        )
        for label in labels
    ]
    for worker in workers:
        _, err = worker.communicate(timeout=200)
        assert worker.returncode == 0, err
    results = [json.loads((tmp_path / f"result-{label}.json").read_text()) for label in labels]
    errors = [e for r in results for e in r["errors"]]
    assert errors == [], errors[0] if errors else ""
    ops = sum(r["ops"] for r in results)
    rs.COUNTS["concurrent_ops"] += ops
    rs.COUNTS["documented_errors_pruned_read"] += sum(r["pruned_reads"] for r in results)
    assert ops > 100

    manager = MemoryManager(
        FileRuntimeBackend.from_config(MemoryConfig(), DirectoryGuard(tmp_path / "data")), MemoryConfig()
    ).scoped("shared user", "shared_session")
    state = manager.get_state()
    lost_state = [k for r in results for k in r["state"] if k not in state]
    plans = manager.list_plans()
    lost_plans = [k for r in results for k in r["plans"] if k not in plans]
    lost_results = []
    for r in results:
        for result_id, content in r["results"].items():
            if manager.load_tool_result(result_id)["content"] != content:
                lost_results.append(result_id)
    rs.LOSSES.extend(f"lost state key {k}" for k in lost_state)
    rs.LOSSES.extend(f"lost plan {k}" for k in lost_plans)
    rs.LOSSES.extend(f"lost tool result {k}" for k in lost_results)
    assert (lost_state, lost_plans, lost_results) == ([], [], [])

    index = tmp_path / "data/memory_data/.index/u_index.json"
    assert parse_index(index.read_bytes())[0] == "ok"
    store = MemoryStore(
        FileKnowledgeBackend(DirectoryGuard(tmp_path / "data"), MemoryConfig()),
        MemoryConfig(),
        categories=["knowledge"],
    )
    for r in results:
        for name, token in r["files"].items():
            assert store.bm25_search(token, user_id="u") == [name], f"index misses {name} at {token}"
    indexed = {e.filename for e in store.read_index().files}
    on_disk = {p.name for p in (tmp_path / "data/memory_data/knowledge").glob("*.md")}
    assert indexed == on_disk

    for log in ("state-intervals.log", "plan-intervals.log"):
        spans = _intervals(tmp_path / log)
        rs.COUNTS["lock_intervals"] += len(spans)
        assert len({label for _, _, label in spans}) == len(labels), "not every process took the lock"
        overlaps = [(a, b) for a, b in itertools.pairwise(spans) if b[0] < a[1]]
        assert overlaps == [], f"{log}: lock held by two writers at once: {overlaps[:3]}"
    assert rs.temp_files(tmp_path) == []
    bounded = MemoryManager(
        FileRuntimeBackend.from_config(MemoryConfig(), DirectoryGuard(tmp_path / "data")), MemoryConfig()
    ).scoped("shared user", "bounded")
    assert len(bounded.list_tool_results()) <= 4 + len(labels) * 2  # each writer may be mid-prune


async def test_async_twins_in_one_event_loop(tmp_path: Path) -> None:
    """Tasks mixing every async twin on one scope: nothing lost, nothing raised."""
    guard = DirectoryGuard(tmp_path)
    manager = MemoryManager(
        FileRuntimeBackend.from_config(MemoryConfig(fsync=False), guard), MemoryConfig(fsync=False)
    ).scoped("alice", "s1")
    tools = ToolResultStore(manager)
    store = MemoryStore(
        FileKnowledgeBackend(guard, MemoryConfig(fsync=False)), MemoryConfig(fsync=False), categories=["knowledge"]
    )
    retriever = MemoryRetriever(store)

    async def task(n: int) -> str:
        await manager.aupdate_state({f"k{n}": n})
        await manager.asave_plan(f"p{n}", {"n": n})
        ref = json.loads(await tools.aexternalize("t", f"{n} " + "y" * 7000))
        await store.awrite_file(f"knowledge/alice_f{n % 5}.md", f"# F\n\ntok{n}x words\n")
        await retriever.aretrieve("words", "alice", max_tokens=200)
        return str(ref["result_id"])

    ids = await asyncio.gather(*(task(n) for n in range(60)))
    rs.COUNTS["concurrent_ops"] += 60 * 5
    state = await manager.aget_state()
    assert state == {f"k{n}": n for n in range(60)}
    assert await manager.alist_plans() == {f"p{n}": {"n": n} for n in range(60)}
    for n, result_id in enumerate(ids):
        page = await tools.aload_page(result_id, 0, 10)
        assert page.content.startswith(f"{n} ")
