"""Runtime memory speed: update_state, get_state, externalize / load of a 100 KB tool result, paging.

Each library operation is timed beside what a user would otherwise write, in the same run:

* a plain ``json.dump`` rewrite of the file (no lock, not atomic: a crash can tear it),
* SQLite (``sqlite3`` from the standard library) with ``synchronous=FULL`` (durable) or ``OFF``.

"fsync" rows use ``MemoryConfig(fsync=True)`` / ``os.fsync`` / ``synchronous=FULL``;
"no fsync" rows skip the flush to disk. Run::

    .venv/bin/python benchmarks/bench_runtime.py            # about 25 s
    .venv/bin/python benchmarks/bench_runtime.py --seconds 0.5
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from local_ai_memory._contracts.runtime import Erasure
from local_ai_memory._runtime.scope import MemoryManager
from local_ai_memory._runtime.tool_results import ToolResultStore
from local_ai_memory._shared.config import MemoryConfig
from local_ai_memory._shared.naming import DirectoryGuard
from local_ai_memory.backends import FileRuntimeBackend


def rate(operation: Callable[[int], object], seconds: float) -> float:
    """Operations per second of ``operation(i)``, run for about ``seconds``."""
    operation(-1)  # warm up
    done = 0
    start = time.perf_counter()
    while True:
        operation(done)
        done += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds and done >= 5:
            return done / elapsed


def plain_json_rewrite(path: Path, durable: bool) -> Callable[[int], object]:
    state: dict[str, object] = {}

    def step(i: int) -> None:
        try:
            with path.open(encoding="utf-8") as handle:
                state.update(json.load(handle))
        except FileNotFoundError:
            pass
        state["current_step"] = i
        state["current_task"] = "refactor auth"
        with path.open("w", encoding="utf-8") as handle:
            json.dump({"format_version": 1, "updated_at": time.time(), "state": state}, handle)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())

    return step


def sqlite_db(path: Path, durable: bool) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(f"PRAGMA synchronous={'FULL' if durable else 'OFF'}")
    db.execute("CREATE TABLE IF NOT EXISTS state (scope TEXT PRIMARY KEY, body TEXT)")
    db.execute("CREATE TABLE IF NOT EXISTS results (id TEXT PRIMARY KEY, body TEXT)")
    return db


def sqlite_update(db: sqlite3.Connection) -> Callable[[int], object]:
    def step(i: int) -> None:
        db.execute("BEGIN IMMEDIATE")
        row = db.execute("SELECT body FROM state WHERE scope = 'alice_s1'").fetchone()
        state = json.loads(row[0]) if row else {}
        state["current_step"] = i
        state["current_task"] = "refactor auth"
        db.execute("INSERT OR REPLACE INTO state VALUES ('alice_s1', ?)", (json.dumps(state),))
        db.execute("COMMIT")

    return step


Row = tuple[str, str, float, float, float]


def measure(base: Path, durable: bool, content: str, seconds: float) -> list[Row]:
    """Rows ``(operation, mode, ours, json.dump, sqlite3)`` in ops/s for one fsync mode."""
    mode = "fsync" if durable else "no fsync"
    root = base / mode.replace(" ", "_")
    manager = MemoryManager(
        FileRuntimeBackend.from_config(MemoryConfig(fsync=durable), DirectoryGuard(root)), MemoryConfig(fsync=durable)
    ).scoped("alice", "s1")
    gone = Erasure("mallory")  # an erasure done earlier leaves memory/erasing/ in place (empty): the usual case
    manager.backend.begin_erasure(gone)
    manager.backend.end_erasure(gone)
    store = ToolResultStore(manager)
    db = sqlite_db(root / "bench.sqlite", durable)
    rows: list[Row] = []

    def update(i: int) -> None:
        manager.update_state({"current_step": i, "current_task": "refactor auth"})

    rows.append(
        (
            "update_state",
            mode,
            rate(update, seconds),
            rate(plain_json_rewrite(root / "plain.json", durable), seconds),
            rate(sqlite_update(db), seconds),
        )
    )

    def read_state(i: int) -> None:
        manager.get_state()

    def plain_json_read(i: int) -> None:
        with (root / "plain.json").open(encoding="utf-8") as handle:
            json.load(handle)

    def sqlite_state_read(i: int) -> None:
        db.execute("SELECT body FROM state WHERE scope = 'alice_s1'").fetchone()

    rows.append(
        ("get_state", mode, rate(read_state, seconds), rate(plain_json_read, seconds), rate(sqlite_state_read, seconds))
    )

    ids: list[str] = []

    def externalize(i: int) -> None:
        ids.append(json.loads(store.externalize("read_file", content))["result_id"])

    def plain_write(i: int) -> None:
        with (root / f"plain-{i}.json").open("w", encoding="utf-8") as handle:
            json.dump({"id": str(i), "tool": "read_file", "content": content}, handle)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())

    def sqlite_write(i: int) -> None:
        db.execute("INSERT OR REPLACE INTO results VALUES (?, ?)", (str(i), content))

    rows.append(
        (
            "externalize 100 KB",
            mode,
            rate(externalize, seconds),
            rate(plain_write, seconds),
            rate(sqlite_write, seconds),
        )
    )
    result_id = ids[-1]  # the newest: retention (500 per scope) may have pruned the first ones

    def plain_read(i: int) -> None:
        with (root / "plain-0.json").open(encoding="utf-8") as handle:
            json.load(handle)

    def sqlite_read(i: int) -> None:
        db.execute("SELECT body FROM results WHERE id = '0'").fetchone()

    def load(i: int) -> None:
        manager.load_tool_result(result_id)

    def first_page_new_store(i: int) -> None:
        ToolResultStore(manager).load_page(result_id, 0, 4000)

    def next_page_same_store(i: int) -> None:
        store.load_page(result_id, (max(i, 0) * 4000) % 100_000, 4000)

    read_plain = rate(plain_read, seconds)
    read_lite = rate(sqlite_read, seconds)
    rows.append(("load_tool_result 100 KB", mode, rate(load, seconds), read_plain, read_lite))
    rows.append(("load_page 4000 chars (cold)", mode, rate(first_page_new_store, seconds), read_plain, read_lite))
    rows.append(("load_page 4000 chars (warm)", mode, rate(next_page_same_store, seconds), read_plain, read_lite))
    db.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=1.0, help="time per measurement")
    args = parser.parse_args()
    seconds = args.seconds
    content = ("0123456789abcdef ünïcödé\n" * 4200)[:100_000]  # 100,000 characters, about 104 KB
    rows: list[Row] = []

    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as folder:
        for durable in (True, False):
            rows.extend(measure(Path(folder), durable, content, seconds))

    print(f"{'operation':30} {'mode':9} {'ops/s':>9} {'json.dump':>10} {'ratio':>6} {'sqlite3':>9} {'ratio':>6}")
    for name, mode, ours, plain, lite in rows:
        print(f"{name:30} {mode:9} {ours:9.0f} {plain:10.0f} {ours / plain:6.2f} {lite:9.0f} {ours / lite:6.2f}")
    print("ratio = local-ai-memory ops/s divided by the alternative's (above 1: faster).")
    print("json.dump baseline: no lock, not atomic; sqlite3: WAL, one transaction per operation.")


if __name__ == "__main__":
    main()
