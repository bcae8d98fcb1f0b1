"""SIGKILL at random points of every write path, SIGTERM of checkpointed runs.

Writers are real processes forked from a warm fork server (see ``reliability_support``) so a
kill costs milliseconds. After every kill, each file the path owns must parse and hold a
complete version, every acknowledged write must still be there, and after all kills a
restarted process removes every orphaned temporary file.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import re
import signal
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import reliability_support as rs
from crash_workloads import SESSION, USER, FakeEmbedder, blob, doc, tool_output

from local_ai_memory._backends.files.jsonl import parse_lines
from local_ai_memory._backends.files.vectors import EmbeddingCache, EmbeddingManifest
from local_ai_memory._knowledge.index_file import parse_index
from local_ai_memory._knowledge.store import MemoryStore
from local_ai_memory._runtime.checkpoints import load_checkpoint
from local_ai_memory._runtime.scope import MemoryManager
from local_ai_memory._shared.config import MemoryConfig
from local_ai_memory._shared.naming import DirectoryGuard, scope_name
from local_ai_memory._shared.records import StoredMessage
from local_ai_memory.backends import FileKnowledgeBackend, FileRuntimeBackend

SCOPE = scope_name(USER, SESSION)


def _manager(root: Path) -> MemoryManager:
    return MemoryManager(
        FileRuntimeBackend.from_config(MemoryConfig(fsync=False), DirectoryGuard(root / "data")),
        MemoryConfig(fsync=False),
    ).scoped(USER, SESSION)


def _loss(what: str) -> None:
    rs.LOSSES.append(what)
    raise AssertionError(what)


def _last_ack(root: Path) -> int:
    acks = rs.read_acks(root / "acks.log")
    return int(acks[-1].split()[0]) if acks else -1


def check_state(root: Path) -> None:
    path = root / "data/memory/state" / f"{SCOPE}.json"
    if not path.exists():
        assert _last_ack(root) == -1
        return
    state = json.loads(path.read_bytes())["state"]  # parses: never torn
    n = state["n"]
    assert state["body"] == blob(n)
    if n < _last_ack(root):
        _loss(f"state: acknowledged n={_last_ack(root)} but disk holds {n}")
    for key, value in state.items():
        if key.startswith("k"):
            assert int(key[1:]) == value % 40


def check_working(root: Path) -> None:
    path = root / "data/memory/working" / f"{SCOPE}.md"
    if not path.exists():
        assert _last_ack(root) == -1
        return
    head, _, body = path.read_text().partition("\n")
    n = int(head[1:])
    assert body == blob(n)
    if n < _last_ack(root):
        _loss(f"working memory: acknowledged {_last_ack(root)} but disk holds {n}")


def check_plans(root: Path) -> None:
    path = root / "data/memory/plans" / f"{SCOPE}.json"
    if not path.exists():
        return
    plans = json.loads(path.read_bytes())["plans"]
    for plan_id, record in plans.items():
        n = record["payload"]["n"]
        assert plan_id == f"p{n % 3}"
        assert record["payload"]["body"] == blob(n, 60_000)
    last = _last_ack(root)
    if last >= 0 and plans.get(f"p{last % 3}", {"payload": {"n": -1}})["payload"]["n"] < last:
        _loss(f"plans: acknowledged {last} lost")


def check_tool_results(root: Path) -> None:
    folder = root / "data/memory/tool_results"
    for path in folder.glob("*.json") if folder.exists() else []:
        payload = json.loads(path.read_bytes())["payload"]  # every stored result parses
        n = int(payload["content"].split(" ", 1)[0][1:])
        assert payload["content"] == tool_output(n)
    for line in rs.read_acks(root / "acks.log"):
        n_text, result_id = line.split()
        path = folder / f"{result_id}.json"
        if not path.exists():
            _loss(f"tool result {result_id} (n={n_text}) acknowledged but missing")
        assert json.loads(path.read_bytes())["payload"]["content"] == tool_output(int(n_text))


def check_checkpoint(root: Path) -> None:
    acks = rs.read_acks(root / "acks.log")
    path = root / "data/memory/plans" / f"{SCOPE}.json"
    if not path.exists():
        assert not acks
        return
    json.loads(path.read_bytes())
    checkpoint = load_checkpoint(_manager(root), "crashrun")
    assert checkpoint.status == "in_progress"  # a hard kill leaves the run resumable
    if acks and checkpoint.step < int(acks[-1].split()[1]):
        _loss(f"checkpoint: acknowledged step {acks[-1]} but disk holds {checkpoint.step}")
    if "last" in checkpoint.state:
        assert checkpoint.state["body"] == blob(checkpoint.state["last"], 20_000)


_VERSION = re.compile(r"version tok(\d+)x slot(\d)")


def check_knowledge(root: Path) -> None:
    folder = root / "data/memory_data/knowledge"
    for index in (root / "data/memory_data/.index").glob("*_index.json"):
        status, _, why = parse_index(index.read_bytes())
        assert status == "ok", why
    current = {}
    for path in sorted(folder.glob("*.md")) if folder.exists() else []:
        text = path.read_text()
        match = _VERSION.search(text)
        assert match is not None, f"{path.name} is torn"
        n, slot = int(match[1]), int(match[2])
        assert text == doc(n, slot)
        current[path.name] = n
    last = _last_ack(root)
    if last >= 0:
        name = f"crash%20user_doc{last % 4}.md"
        if current.get(name, -1) < last:
            _loss(f"knowledge: acknowledged version {last} of {name} lost")


def check_knowledge_index(root: Path) -> None:
    """A restarted store finds every file by the token of the version on disk."""
    store = MemoryStore(
        FileKnowledgeBackend(DirectoryGuard(root / "data"), MemoryConfig(fsync=False)),
        MemoryConfig(fsync=False),
        categories=["knowledge"],
    )
    for path in sorted((root / "data/memory_data/knowledge").glob("*.md")):
        match = _VERSION.search(path.read_text())
        assert match is not None
        assert store.bm25_search(f"tok{match[1]}x", user_id=USER) == [path.name]


def check_embeddings(root: Path) -> None:
    folder = root / "data/memory_data/.embeddings"
    manifest = folder / "manifest.json"
    if manifest.exists():
        EmbeddingManifest.model_validate_json(manifest.read_bytes())  # never torn


def check_embeddings_values(root: Path) -> None:
    last = _last_ack(root)
    cache = EmbeddingCache(DirectoryGuard(root / "data"), FakeEmbedder(), MemoryConfig(fsync=False))
    items = [(f"k{i}", f"text {max(last, 0)} {i}") for i in range(3)]
    got = cache.vectors_for(items)
    want = np.asarray(FakeEmbedder().embed([text for _, text in items]), dtype=np.float32)
    want /= np.linalg.norm(want, axis=1, keepdims=True)
    assert np.allclose(got, want, atol=1e-6)


def parse_session(data: bytes, path: Path) -> list[StoredMessage]:
    """The messages of a session file as the file backend reads them."""
    return [StoredMessage.model_validate(record) for record in parse_lines(data, path) if "role" in record]


def check_session(root: Path) -> None:
    path = root / "data/memory/sessions" / f"{SCOPE}.jsonl"
    if not path.exists():
        assert _last_ack(root) == -1
        return
    records = parse_session(path.read_bytes(), path)
    numbers = [int(r.content.split(" ", 1)[0][1:]) for r in records]
    for record, n in zip(records, numbers, strict=True):
        assert record.content == f"m{n} " + blob(n, 30_000)
    # A writer killed after its append but before its ack retries that message: a repeat of the
    # previous number is the caller's retry, anything else is damage.
    assert all(b - a in (0, 1) for a, b in itertools.pairwise(numbers)), "messages out of order or skipped"
    missing = set(range(_last_ack(root) + 1)) - set(numbers)
    if missing:
        _loss(f"session: acknowledged messages {sorted(missing)[:5]} lost")


def check_session_compact(root: Path) -> None:
    path = root / "data/memory/sessions" / f"{SCOPE}.jsonl"
    if not path.exists():
        return
    records = parse_session(path.read_bytes(), path)
    numbers = [int(r.content.split(" ", 1)[0][1:]) for r in records]
    for record, n in zip(records, numbers, strict=True):
        assert record.content == f"m{n} " + blob(n, 30_000)
    last = _last_ack(root)
    if last >= 0 and last not in numbers and not any(n > last for n in numbers):
        _loss(f"session compact: acknowledged message {last} lost")


def check_compressor(root: Path) -> None:
    path = root / "data/memory/working" / f"{SCOPE}.md"
    if not path.exists():
        return
    from local_ai_memory._runtime.summary import SECTIONS

    text = path.read_text()
    assert re.findall(r"(?m)^# (.+)$", text) == list(SECTIONS)
    goal = re.search(r"T(\d+)", text)
    assert goal is not None
    if int(goal[1]) < _last_ack(root):
        _loss(f"compressor: acknowledged L1 for T{_last_ack(root)} but disk holds T{goal[1]}")


CHECKS: dict[str, Callable[[Path], None]] = {
    "state": check_state,
    "working": check_working,
    "plans": check_plans,
    "tool_results": check_tool_results,
    "checkpoint": check_checkpoint,
    "knowledge": check_knowledge,
    "embeddings": check_embeddings,
    "session": check_session,
    "session_compact": check_session_compact,
    "compressor": check_compressor,
}
FINAL_CHECKS: dict[str, Callable[[Path], None]] = {
    "knowledge": check_knowledge_index,
    "embeddings": check_embeddings_values,
}


def _kill_loop(server: rs.ForkServer, workload: str, root: Path, kills: int, budget: float, seed: int) -> int:
    rng = random.Random(seed)
    deadline = time.monotonic() + budget
    done = orphans = 0
    large = workload in ("state", "working", "plans", "tool_results")  # kills must land inside some writes
    # Kill until the quota is met, one write completed between kills and, for large writes, one
    # kill cut a write short (on a loaded machine a write can slip between the random kill times
    # for a while: keep trying, bounded).
    while time.monotonic() < deadline:
        short = (large and orphans == 0) or _last_ack(root) < 0  # a kind of kill still missing
        if done >= kills and not (short and done < 4 * kills):
            break
        pid = server.start(workload, root, done)
        # After each full quota still missing a kind of kill, the kill window doubles: on a
        # loaded machine a child may reach (or finish) its write only after the usual window.
        widen = 2 ** (done // kills) if short else 1
        time.sleep(rng.uniform(0.0, SLOWER.get(workload, 0.04) * widen))
        os.kill(pid, signal.SIGKILL)
        status = server.reap(pid)
        assert os.WIFSIGNALED(status), f"writer ended by itself (status {status}): it crashed"
        done += 1
        rs.COUNTS["kills"] += 1
        orphans += len(rs.temp_files(root))
        CHECKS[workload](root)
    rs.COUNTS["orphans_seen"] += orphans
    if large:
        assert orphans > 0, "no kill landed in the middle of a write"
    return done


def _recover(workload: str, root: Path) -> None:
    before = len(rs.temp_files(root))
    # A restarted process: the manager removes temp files of dead writers on first use,
    # knowledge and embedding folders are swept the same way.
    _manager(root).get_state()
    removed = rs.cleanup_everywhere(root)
    rs.COUNTS["orphans_removed"] += removed
    assert rs.temp_files(root) == [], f"{workload}: temp files survive recovery"
    assert removed <= before
    FINAL_CHECKS.get(workload, lambda _: None)(root)
    CHECKS[workload](root)
    shards = root / "data/memory_data/.embeddings"
    if (shards / "manifest.json").exists():
        listed = set(json.loads((shards / "manifest.json").read_bytes())["shards"])
        rs.COUNTS["orphan_shards_after_kills"] += len({p.name for p in shards.glob("shard-*.npz")} - listed)


WORKLOADS = list(CHECKS)
SLOWER = {"compressor": 0.12}  # seconds of random delay before the kill, where one write takes longer


@pytest.mark.parametrize("workload", WORKLOADS)
def test_sigkill_at_random_points_keeps_old_or_new(workload: str, tmp_path: Path, fork_server: rs.ForkServer) -> None:
    kills = 40
    done = _kill_loop(fork_server, workload, tmp_path, kills, budget=25.0, seed=hash(workload) & 0xFFFF)
    assert done >= 30, f"only {done} kills fit in the time bound"
    assert _last_ack(tmp_path) >= 0, "no write completed between kills: the delays are too short"
    _recover(workload, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("workload", WORKLOADS)
def test_sigkill_soak(workload: str, tmp_path: Path, fork_server: rs.ForkServer) -> None:
    done = _kill_loop(fork_server, workload, tmp_path, 200, budget=60.0, seed=7 + len(workload))
    assert done >= 100
    _recover(workload, tmp_path)


@pytest.mark.parametrize("workload", ["sigterm", "sigterm_async"])
def test_sigterm_leaves_checkpoint_interrupted(workload: str, tmp_path: Path, fork_server: rs.ForkServer) -> None:
    rng = random.Random(5)
    manager = _manager(tmp_path)
    for round_ in range(12):
        seen = len(rs.read_acks(tmp_path / "acks.log"))
        pid = fork_server.start(workload, tmp_path, round_)
        deadline = time.monotonic() + 20
        while len(rs.read_acks(tmp_path / "acks.log")) == seen:  # the handlers are installed
            assert time.monotonic() < deadline, "the run never started"
            time.sleep(0.002)
        time.sleep(rng.uniform(0.0, 0.05))
        os.kill(pid, signal.SIGTERM)
        status = fork_server.reap(pid)
        assert os.WIFEXITED(status), "the run did not exit through its handler"
        rs.COUNTS["sigterms"] += 1
        checkpoint = load_checkpoint(manager, "termrun")
        if checkpoint.status != "interrupted" or checkpoint.reason != "SIGTERM":
            _loss(f"{workload}: checkpoint reads {checkpoint.status}/{checkpoint.reason} after SIGTERM")
        if "last" in checkpoint.state:
            assert checkpoint.state["body"] == blob(checkpoint.state["last"], 50_000)
        assert rs.temp_files(tmp_path) == [], "the interrupted write left a temp file"


class _SlowStepManager(MemoryManager):
    """A real manager whose next step append starts late, as under a loaded CPU or a slow disk."""

    slow_next = False

    def append_plan_steps(self, plan_id: str, steps: Sequence[dict[str, Any]]) -> None:
        if self.slow_next:
            self.slow_next = False
            time.sleep(0.3)
        super().append_plan_steps(plan_id, steps)


async def test_cancelled_astep_cannot_overwrite_interrupted(tmp_path: Path) -> None:
    import asyncio

    from local_ai_memory._runtime.checkpoints import CheckpointRun

    manager = _SlowStepManager(
        FileRuntimeBackend.from_config(MemoryConfig(fsync=False), DirectoryGuard(tmp_path)),
        MemoryConfig(fsync=False),
        user_id="u",
        session_id="s",
    )
    run = CheckpointRun(manager, "run", handle_signals=False)
    await run.astart()
    manager.slow_next = True
    step = asyncio.create_task(run.astep(state={"n": 1}))
    await asyncio.sleep(0.05)  # the step's worker thread is running
    step.cancel()  # what the SIGTERM handler of ``async with CheckpointRun`` does
    await run.afinish("interrupted", "SIGTERM")  # what __aexit__ then does
    with pytest.raises(asyncio.CancelledError):
        await step
    await asyncio.sleep(0.5)  # the abandoned worker thread finishes its write
    assert load_checkpoint(manager, "run").status == "interrupted"
