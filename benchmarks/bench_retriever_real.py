"""The whole retriever on real notes, queries asked once: ours against LlamaIndex ``BM25Retriever``.

Issue 27's Stage 3 target: LangChain ``LocalMemoryRetriever.invoke`` (Stages 1-3, default
2000-token budget, no LLM, BM25 mode) at most 1.5x the p50 of LlamaIndex ``BM25Retriever``
(``llama-index-retrievers-bm25``, bm25s) on the same notes, **each query asked once** (so no
per-process cache of a query's words or of a note's tokens helps). The notes are real: English
manual pages rendered by ``manpages.py`` (``--notes``, 2,000 by default; about 2,150 pages are
installed here: above that, the rest are numbered copies of them, the first line changed so
every text differs, as in ``bench_index_throughput.py``). The queries are the blind natural
questions of ``data/natural_questions`` plus known-item queries (three words of a note), all
distinct; before timing, every engine answers the same few warm-up queries that are not
timed.

Every engine runs in a fresh subprocess, one after the other, ``--rounds`` times in turn (3 by
default), and the table gives the medians over the rounds of wall and calling-thread CPU
p50/p95 and the ratios to the peer's p50 (on a shared machine the CPU figures are the steadier):

* LlamaIndex ``BM25Retriever.from_defaults(nodes=..., similarity_top_k=5)`` ``.retrieve``;
* ours: LangChain ``LocalMemoryRetriever(config=...).invoke`` and LlamaIndex
  ``LocalMemoryRetriever.from_config(...).retrieve`` over the index ``local-ai-memory index``
  builds (built here once, timed, with the token counts Stage 3 reads);
* ours again with the stored token counts ignored (``--no-stored-counts``: the index entries'
  ``tokens`` are not used, so Stage 3 encodes every note it loads as before).

``--profile`` prints, for the LangChain retriever, the share of its time spent in tiktoken and
in Stage 1 (cProfile, cumulative).

    python benchmarks/bench_retriever_real.py --notes 2000 [--profile] [--reindex]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import manpages

USER = "bench"
CATEGORY = "knowledge"
WARMUP = ["copy files", "network interface", "disk usage", "print text", "user password"]
KNOWN_ITEM = 227


def data_root(notes: int) -> Path:
    return manpages.CACHE.parent / f"retriever-{notes}"


def file_of(page: str) -> str:
    return f"{USER}_{manpages.note_name(page)}.md"


def prepare(notes: int, reindex: bool) -> dict[str, Any]:
    """Write the notes (where changed) and build the index once; returns what it did."""
    from local_ai_memory import DirectoryGuard, MemoryConfig, MemoryStore, close_shared_stores
    from local_ai_memory.backends import FileKnowledgeBackend

    root = data_root(notes)
    target = root / "memory_data" / CATEGORY
    target.mkdir(parents=True, exist_ok=True)
    pages = manpages.with_copies(manpages.corpus(notes, manpages.relevant_pages()), notes)
    wanted = {file_of(p): t for p, t in pages.items()}
    for stale in target.glob(f"{USER}_*.md"):
        if stale.name not in wanted:
            stale.unlink()
    for name, text in wanted.items():
        path = target / name
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
    index = root / "memory_data" / ".index" / f"{USER}_index.json"
    out: dict[str, Any] = {"notes": len(wanted), "bytes": sum(len(t.encode()) for t in wanted.values())}
    if reindex or not index.exists():
        for stale in (index, index.with_suffix(".journal")):
            stale.unlink(missing_ok=True)
        config = MemoryConfig(runtime_data_dir=root, fsync=False, auto_watch=False)
        store = MemoryStore(FileKnowledgeBackend(DirectoryGuard(root), config), config)
        start = time.perf_counter()
        store.populate_index_from_files(USER)
        out["index_s"] = time.perf_counter() - start
        close_shared_stores()
    return out


def queries(notes: int) -> list[str]:
    """The natural questions, then known-item queries (three words of a note's body), all distinct."""
    data = json.loads(manpages.QUESTIONS.read_text(encoding="utf-8"))
    asked = [q["question"] for q in data]
    folder = data_root(notes) / "memory_data" / CATEGORY
    rng = random.Random(27)
    for name in rng.sample(sorted(os.listdir(folder)), KNOWN_ITEM):
        words = [w for w in (folder / name).read_text(encoding="utf-8").split() if w.isalpha() and len(w) > 3]
        if len(words) >= 3:
            asked.append(" ".join(rng.sample(words, 3)))
    seen: set[str] = set()
    return [q for q in asked if not (q in seen or seen.add(q)) and q not in WARMUP]


def _percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def time_once(run: Callable[[str], Any], asked: list[str], store: Any = None) -> dict[str, float]:
    """Warm-up queries (untimed; and for ours, until the automatic watcher has caught up, as in
    a running application), then every query once: wall and thread-CPU p50/p95 in ms."""
    for query in WARMUP:
        run(query)
    started = time.perf_counter()
    while store is not None and not store.watched and time.perf_counter() - started < 30:
        run(WARMUP[0])
        time.sleep(0.01)
    time.sleep(0.5)
    wall, cpu = [], []
    for query in asked:
        start, start_cpu = time.perf_counter(), time.thread_time()
        run(query)
        cpu.append((time.thread_time() - start_cpu) * 1000)
        wall.append((time.perf_counter() - start) * 1000)
    (p50, p95), (c50, c95) = _percentiles(wall), _percentiles(cpu)
    return {"p50": p50, "p95": p95, "cpu_p50": c50, "cpu_p95": c95}


def child_peer(notes: int) -> dict[str, Any]:
    import logging

    try:
        from llama_index.core.schema import TextNode
        from llama_index.retrievers.bm25 import BM25Retriever  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return {"missing": "llama-index-retrievers-bm25 (pip install -r benchmarks/requirements.txt)"}
    logging.getLogger("bm25s").setLevel(logging.ERROR)
    folder = data_root(notes) / "memory_data" / CATEGORY
    names = sorted(os.listdir(folder))
    nodes = [TextNode(text=(folder / n).read_text(encoding="utf-8"), id_=n) for n in names]
    start = time.perf_counter()
    retriever = BM25Retriever.from_defaults(nodes=nodes, similarity_top_k=5)
    build = time.perf_counter() - start
    return {"build_s": build, **time_once(retriever.retrieve, queries(notes))}


def _config(notes: int, stored_counts: bool) -> Any:
    from local_ai_memory import MemoryConfig

    if not stored_counts:  # Stage 3 as before the counts were stored: every loaded note is encoded
        from local_ai_memory._knowledge import retriever

        retriever.usable_marks = lambda marks, counter: None  # type: ignore[assignment]
        retriever.least_tokens = lambda marks, counter: None  # type: ignore[assignment]
    return MemoryConfig(runtime_data_dir=data_root(notes), fsync=False)


def child_langchain(notes: int, stored_counts: bool = True) -> dict[str, Any]:
    from langchain_local_ai_memory import LocalMemoryRetriever

    retriever = LocalMemoryRetriever(config=_config(notes, stored_counts), user_id=USER)
    return time_once(retriever.invoke, queries(notes), retriever.memory.knowledge.store)


def child_llamaindex(notes: int) -> dict[str, Any]:
    from llama_index.retrievers.local_ai_memory import LocalMemoryRetriever

    retriever = LocalMemoryRetriever.from_config(_config(notes, True), user_id=USER)
    return time_once(retriever.retrieve, queries(notes), retriever.memory.knowledge.store)


def child_profile(notes: int) -> dict[str, Any]:
    """cProfile of the LangChain retriever over the queries asked once: tiktoken's and Stage 1's share."""
    import cProfile
    import pstats

    from langchain_local_ai_memory import LocalMemoryRetriever

    retriever = LocalMemoryRetriever(config=_config(notes, True), user_id=USER)
    asked = queries(notes)
    for query in WARMUP:
        retriever.invoke(query)
    profile = cProfile.Profile()
    profile.enable()
    for query in asked:
        retriever.invoke(query)
    profile.disable()
    stats = pstats.Stats(profile)
    total = max(stats.total_tt, 1e-9)  # type: ignore[attr-defined]
    tiktoken = stage1 = stage3 = 0.0
    for (path, _line, func), (_cc, _nc, tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        if "tiktoken" in path or "encode_ordinary" in func or func.startswith("<method 'encode"):
            tiktoken += tt
        if path.endswith("retriever.py") and func == "_stage1":
            stage1 = max(stage1, ct)
        if path.endswith("retriever.py") and func == "_pack":
            stage3 = max(stage3, ct)
    return {"tiktoken_share": tiktoken / total, "stage1_share": stage1 / total, "stage3_share": stage3 / total}


CHILDREN: dict[str, Callable[[int], dict[str, Any]]] = {
    "peer": child_peer,
    "langchain": child_langchain,
    "langchain-recount": lambda n: child_langchain(n, stored_counts=False),
    "llamaindex": child_llamaindex,
    "profile": child_profile,
}


def run_child(engine: str, notes: int) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, __file__, "--child", engine, "--notes", str(notes)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "TQDM_DISABLE": "1"},
    )
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1:]}
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def _median_row(found: list[dict[str, Any]]) -> dict[str, Any]:
    """Each figure's median over the rounds (or the first failure)."""
    good = [row for row in found if "p50" in row]
    if not good:
        return found[0]
    return {key: statistics.median(row[key] for row in good) for key in ("p50", "p95", "cpu_p50", "cpu_p95")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--notes", type=int, default=2000)
    parser.add_argument("--profile", action="store_true", help="also profile the LangChain retriever")
    parser.add_argument("--reindex", action="store_true", help="rebuild the index (timed)")
    parser.add_argument("--engines", default="peer,langchain,llamaindex,langchain-recount", help="which to run")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each engine (the median is shown)")
    parser.add_argument("--child", choices=sorted(CHILDREN), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(CHILDREN[args.child](args.notes)))
        return
    prepared = prepare(args.notes, args.reindex)
    print(
        f"{prepared['notes']} notes ({prepared['bytes'] / 1e6:.1f} MB), {len(queries(args.notes))} queries asked once"
    )
    if "index_s" in prepared:
        print(f"index built in {prepared['index_s']:.1f} s (with token counts)")
    engines = args.engines.split(",")
    runs: dict[str, list[dict[str, Any]]] = {engine: [] for engine in engines}
    for _ in range(args.rounds):  # engines alternate, so a change of load on the machine hits all alike
        for engine in engines:
            row = run_child(engine, args.notes)
            print(json.dumps({"engine": engine, **row}), file=sys.stderr)
            runs[engine].append(row)
    rows = {engine: _median_row(found) for engine, found in runs.items()}
    if args.profile:
        rows["profile"] = run_child("profile", args.notes)
    base = rows.get("peer", {}).get("p50")
    cpu_base = rows.get("peer", {}).get("cpu_p50")
    labels = {
        "peer": "LlamaIndex BM25Retriever.retrieve (bm25s)",
        "langchain": "ours: LangChain LocalMemoryRetriever.invoke",
        "llamaindex": "ours: LlamaIndex LocalMemoryRetriever.retrieve",
        "langchain-recount": "ours: LangChain invoke, stored token counts ignored",
    }
    print(
        "\n| retriever | p50 / p95 ms | CPU p50 / p95 ms | p50 ratio to LlamaIndex BM25 | CPU p50 ratio |"
        "\n|---|---|---|---|---|"
    )
    for engine, label in labels.items():
        row = rows.get(engine, {"error": "not run"})
        if "p50" not in row:
            print(f"| {label} | {row.get('missing') or row.get('error')} | | | |")
            continue
        ratio = f"{row['p50'] / base:.2f}x" if base else "n/a"
        cpu_ratio = f"{row['cpu_p50'] / cpu_base:.2f}x" if cpu_base else "n/a"
        print(
            f"| {label} | {row['p50']:.2f} / {row['p95']:.2f} | {row['cpu_p50']:.2f} / {row['cpu_p95']:.2f}"
            f" | {ratio} | {cpu_ratio} |"
        )
    if args.profile and "tiktoken_share" in rows["profile"]:
        p = rows["profile"]
        print(
            f"\nLangChain retriever profile (cProfile, queries asked once): tiktoken {p['tiktoken_share']:.0%},"
            f" Stage 1 {p['stage1_share']:.0%}, Stage 3 {p['stage3_share']:.0%} of the time"
        )
    print(f"\nload average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
