"""Hybrid indexing from scratch with the real model: what a user pays, and what it buys.

In one run over ``--notes`` real man pages (2,000 by default; ``manpages.py``), with
all-MiniLM-L6-v2 on ONNX Runtime (the shipped default):

1. ``local-ai-memory index --mode hybrid`` on a new data folder, as a user runs it: wall time,
   the CPU time of the process (user + system), the load average around it, and what an idle
   machine would take (the CPU time over the cores ONNX Runtime uses: embedding is CPU-bound);
2. the passages and vectors it stored;
3. the first query after it, ``local-ai-memory search --mode hybrid`` in a new process: wall
   time and the vectors it added (0: a query embeds only its own text);
4. quality, recall@5 / MRR@10, at the default passage cap and at ``--compare-cap`` (16, what a
   cheaper default would embed): natural questions over these pages (every set,
   ``bench_passage_cap.py``'s splits) and the known-item sets ``stdlib`` and ``readmes`` (their
   folders are shared with ``bench_passage_cap.py``, so their vectors are usually cached). A
   cap below the default reuses the vectors already embedded.

    python benchmarks/bench_hybrid_index.py [--notes 2000] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_passage_cap import USER, Query, known_items, metrics, nq_corpus, open_store, write_folder

from local_ai_memory import MemoryConfig, MemoryStore, close_shared_stores
from local_ai_memory._models.onnx_file import cores, export_dir, export_model, local_embedder
from local_ai_memory._shared.naming import DirectoryGuard
from local_ai_memory.backends import FileKnowledgeBackend

FIRST_QUERY = "how do I see which program is listening on a network port"


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def cli(*args: str) -> tuple[subprocess.CompletedProcess[str], float, float]:
    """Run the command line in a new process: its result, wall seconds and CPU seconds."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    cpu, wall = children_cpu(), time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "local_ai_memory.cli", *args], env=env, capture_output=True, text=True, check=False
    )
    wall, cpu = time.perf_counter() - wall, children_cpu() - cpu
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args[:2])} failed: {done.stderr[-2000:]}")
    return done, wall, cpu


def stored(folder: Path) -> tuple[int, int]:
    """Passages recorded in the maps and vectors in the cache of the data folder."""
    config = MemoryConfig(runtime_data_dir=folder, search_mode="hybrid", fsync=False, auto_watch=False)
    store = MemoryStore(FileKnowledgeBackend(DirectoryGuard(folder), config), config, embedder=local_embedder())
    dense = store._dense()
    assert dense is not None
    passages = sum(len(dense._map(e.category, USER)[e.filename][1]) for e in store._entries(USER))
    vectors = len(dense.cache)
    close_shared_stores()
    return passages, vectors


def quality(store: MemoryStore, queries: list[Query]) -> dict[str, tuple[float, float]]:
    ranked = {q[0]: [c.filename for c in store.hybrid_candidates(q[0], 10, user_id=USER)] for q in queries}
    out = {}
    for split in dict.fromkeys(q[2] for q in queries):
        chosen = [q for q in queries if q[2] == split]
        out[split] = metrics([ranked[q[0]] for q in chosen], [q[1] for q in chosen])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--notes", type=int, default=2000)
    parser.add_argument("--keep", action="store_true", help="keep the data folder (printed)")
    parser.add_argument("--compare-cap", type=int, default=16, help="the other passage cap whose quality is printed")
    args = parser.parse_args()
    started = time.perf_counter()
    if not (export_dir() / "export.json").is_file():
        export_model()
        print(f"model built once for this machine: {time.perf_counter() - started:.1f} s", flush=True)
    files, queries = nq_corpus(args.notes)
    root = Path(tempfile.mkdtemp(prefix="lam-hybrid-index-"))
    write_folder(root, files)
    words = sum(len(t.split()) for t in files.values())
    default_cap = MemoryConfig().hybrid_passages
    print(f"{len(files)} man pages ({words:,} words), default cap {default_cap} passages a note", flush=True)

    load_before = os.getloadavg()[0]
    _, wall, cpu = cli("index", "-d", str(root), "--mode", "hybrid", "--json")
    load_after = os.getloadavg()[0]
    passages, vectors = stored(root)
    _, query_wall, _ = cli("search", FIRST_QUERY, "-u", USER, "-d", str(root), "--mode", "hybrid", "--json")
    _, after_query = stored(root)
    threads = cores()

    rows = [
        ("index from scratch, wall", f"{wall:.0f} s (load average {load_before:.1f} before, {load_after:.1f} after)"),
        ("index from scratch, CPU (user + system)", f"{cpu:.0f} s"),
        (f"idle {threads}-core machine, estimated (CPU / {threads})", f"{cpu / threads:.0f} s"),
        ("passages stored / vectors in the cache", f"{passages:,} / {vectors:,} ({passages / len(files):.1f} a note)"),
        ("first query after index (new process, wall)", f"{query_wall:.2f} s, {after_query - vectors} vectors added"),
    ]

    embedder = local_embedder()
    after: dict[str, tuple[float, float]] = {}
    before: dict[str, tuple[float, float]] = {}
    other = args.compare_cap
    for cap, found in ((default_cap, after), (other, before)):
        store, seconds, _ = open_store(root, embedder, cap)
        if cap == other:
            rows.append((f"passages at a cap of {other} (recorded in {seconds:.0f} s)", f"{stored_passages(store):,}"))
        found.update(quality(store, queries))
        close_shared_stores()
    for name in ("stdlib", "readmes"):
        items, known = known_items(name)
        folder = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "local-ai-memory-bench" / "cap" / name
        write_folder(folder, items)
        for cap, found in ((default_cap, after), (other, before)):
            store, _, _ = open_store(folder, embedder, cap)
            found.update(quality(store, known))
            close_shared_stores()

    print("\n| measure | value |\n|---|---:|")
    for label, value in rows:
        print(f"| {label} | {value} |")
    print(f"\nQuality, recall@5 / MRR@10 (tuning sets: dev, dev2; the rest held out), {len(files)} pages\n")
    print(f"| set | cap {other} | cap {default_cap} (the default) |\n|---|---:|---:|")
    for split, a in after.items():
        b = before[split]
        print(f"| {split} | {b[0]:.3f} / {b[1]:.3f} | {a[0]:.3f} / {a[1]:.3f} |")
    print(f"\nload average (1 min) at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    if args.keep:
        print(f"data folder kept: {root}")
    else:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps({"wall": wall, "cpu": cpu, "passages": passages, "first_query": query_wall}))


def stored_passages(store: MemoryStore) -> int:
    dense = store._dense()
    assert dense is not None
    return sum(len(dense._map(e.category, USER)[e.filename][1]) for e in store._entries(USER))


if __name__ == "__main__":
    main()
