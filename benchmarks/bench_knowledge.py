"""Knowledge-memory benchmark: speed at 1k/10k/100k files and retrieval quality on real text.

Speed (generated corpora, one user, one category; cached under ``$TMPDIR/lam-bench-*``)::

    .venv/bin/python benchmarks/bench_knowledge.py --sizes 1000,10000,100000

measures, per size, each in a fresh subprocess (so peak memory is per engine):

* ours: index build (read + extract + rank structures + index write), open of an existing
  index plus first query, no-change refresh (``stat`` scan), refresh after one file changed,
  ``bm25_search`` p50/p95 while the index service watches (no scan per query) and without it
  (``stat`` scan per query), one-file change visible to the next query through the watcher,
  ``retrieve`` without LLM p50/p95, index reads during the query loop, peak RSS;
* LangChain ``BM25Retriever`` (``langchain_community.retrievers``) and LlamaIndex
  ``BM25Retriever`` (``llama_index.retrievers.bm25``) on the same texts and queries: build,
  query p50/p95, peak RSS, and the ratio to ours. A missing peer is reported by name.

Default configuration against LlamaIndex (what a LangChain or LlamaIndex user gets, no watcher
started by hand, no LLM), every engine in a fresh subprocess, one run::

    .venv/bin/python benchmarks/bench_knowledge.py --retrievers --sizes 2000,10000,100000

* Stage 1: ``MemoryStore.search`` p50/p95 with default settings (the store watches its folder
  by itself from its first query; the time until it does is shown) vs LlamaIndex
  ``BM25Retriever.retrieve`` (bm25s) p50/p95, as a ratio; and over 200 other queries asked
  once each (their words are new to the index's kept contributions, unless shared);
* the whole retriever (Stages 1-3 with the default 2000-token budget, no LLM): LangChain
  ``LocalMemoryRetriever.invoke`` and LlamaIndex ``LocalMemoryRetriever.retrieve``, p50/p95,
  and their p50 against LlamaIndex ``BM25Retriever``'s;
* a retriever built per request (as a web server does) vs a warm one, p50;
* a note written by another process: how long until a query finds it.

Quality (real text: one note per standard-library module, queries from held-out docstrings,
see ``local_ai_memory._knowledge.samples``)::

    .venv/bin/python benchmarks/bench_knowledge.py --quality

prints recall@5 and MRR@10 for BM25 over metadata, full content and both, and for the peers.
Peers: ``pip install -r benchmarks/requirements.txt``.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from local_ai_memory.backends import FileKnowledgeBackend

USER = "alice"
QUERIES = 60
REPEAT_QUERIES = 200
NOVEL_QUERIES = 200


# -- corpus -----------------------------------------------------------------------------------
def _vocabulary(rng: random.Random, size: int) -> list[str]:
    syllables = ["ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "ze", "pa", "qu", "dor", "lin", "tra", "bel", "fen"]
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))))
    return sorted(words)


def corpus_dir(size: int) -> Path:
    """A data root holding ``size`` generated notes of USER (generated once, then reused)."""
    root = Path(tempfile.gettempdir()) / f"lam-bench-{size}"
    folder = root / "memory_data" / "knowledge"
    marker = root / "complete"
    if marker.exists():
        return root
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(size)
    vocab = _vocabulary(rng, 30_000)
    cumulative = list(itertools.accumulate(1.0 / (rank + 1) ** 1.05 for rank in range(len(vocab))))

    def pick(k: int) -> list[str]:
        return rng.choices(vocab, cum_weights=cumulative, k=k)

    for i in range(size):
        title = " ".join(pick(3)).title()
        desc = " ".join(pick(14))
        body = "\n\n".join(" ".join(pick(50)) for _ in range(3))
        (folder / f"{USER}_doc{i:06d}.md").write_text(f"# {title}\n\n{desc}.\n\n{body}\n", encoding="utf-8")
    marker.write_text("ok")
    return root


def queries_for(root: Path, count: int = QUERIES, seed: int = 42) -> list[tuple[str, str]]:
    """``(query, expected file)``: three words taken from a random note's body."""
    folder = root / "memory_data" / "knowledge"
    names = sorted(os.listdir(folder))
    rng = random.Random(seed)
    out = []
    for name in rng.sample(names, min(count, len(names))):
        words = (folder / name).read_text(encoding="utf-8").split("\n\n")[2].split()
        out.append((" ".join(rng.sample(words, 3)), name))
    return out


def texts_of(root: Path) -> tuple[list[str], list[str]]:
    folder = root / "memory_data" / "knowledge"
    names = sorted(n for n in os.listdir(folder) if n.endswith(".md"))
    return names, [(folder / n).read_text(encoding="utf-8") for n in names]


# -- measuring ------------------------------------------------------------------------------------
def _percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def _time_queries(run: Callable[[str], Any], queries: list[tuple[str, str]], repeat: int) -> tuple[float, float]:
    samples = []
    for i in range(repeat):
        query = queries[i % len(queries)][0]
        start = time.perf_counter()
        run(query)
        samples.append((time.perf_counter() - start) * 1000)
    return _percentiles(samples)


def _time_warm(run: Callable[[str], Any], queries: list[tuple[str, str]], repeat: int) -> tuple[float, ...]:
    """After one pass over the queries: wall p50, wall p95, and the calling thread's CPU time
    p50 and p95 (the CPU figures leave out waits for a busy machine's cores)."""
    for query, _ in queries:
        run(query)
    wall, cpu = [], []
    for i in range(repeat):
        query = queries[i % len(queries)][0]
        start, start_cpu = time.perf_counter(), time.thread_time()
        run(query)
        cpu.append((time.thread_time() - start_cpu) * 1000)
        wall.append((time.perf_counter() - start) * 1000)
    return (*_percentiles(wall), *_percentiles(cpu))


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child_ours(size: int) -> dict[str, Any]:
    from local_ai_memory._knowledge.service import MemoryIndexService
    from local_ai_memory._knowledge.store import MemoryStore
    from local_ai_memory._shared.config import MemoryConfig
    from local_ai_memory._shared.naming import DirectoryGuard

    root = corpus_dir(size)
    queries = queries_for(root)
    config = MemoryConfig(fsync=False, auto_watch=False)  # the stat-scan path and the explicit service
    shutil.rmtree(root / "memory_data" / ".index", ignore_errors=True)  # every user's index: built anew
    result: dict[str, Any] = {"engine": "ours", "size": size}

    store = MemoryStore(FileKnowledgeBackend(DirectoryGuard(root), config), config)
    start = time.perf_counter()
    store.populate_index_from_files(None)
    result["build_s"] = time.perf_counter() - start
    hits = sum(store.bm25_search(q, 5, user_id=USER)[:5].count(name) for q, name in queries)
    result["sanity_recall5"] = hits / len(queries)

    from local_ai_memory import close_shared_stores

    close_shared_stores()  # the store below opens the folder as a new process would (no shared parts)
    del store
    gc.collect()
    start, start_cpu = time.perf_counter(), time.process_time()
    store = MemoryStore(FileKnowledgeBackend(DirectoryGuard(root), config), config)
    store.bm25_search(queries[0][0], 5, user_id=USER)
    result["open_first_query_s"] = time.perf_counter() - start
    result["open_first_query_cpu_s"] = time.process_time() - start_cpu  # every thread of the process

    start = time.perf_counter()
    changed = store.refresh_stale_entries(USER)
    result["refresh_nochange_ms"] = (time.perf_counter() - start) * 1000
    assert changed == 0

    target = root / "memory_data" / "knowledge" / queries[1][1]
    original = target.read_text(encoding="utf-8")
    target.write_text(original + "\nzebracorn\n", encoding="utf-8")
    start = time.perf_counter()
    store.refresh_stale_entries(USER)
    result["refresh_1change_ms"] = (time.perf_counter() - start) * 1000
    assert store.bm25_search("zebracorn", user_id=USER) == [target.name]

    reads = store.index_reads
    p50, p95 = _time_queries(lambda q: store.bm25_search(q, 5, user_id=USER), queries, 20)
    result["query_scan_p50_ms"], result["query_scan_p95_ms"] = p50, p95

    from local_ai_memory._knowledge.retriever import MemoryRetriever

    with MemoryIndexService(store, flush_interval=5.0):
        p50, p95 = _time_queries(lambda q: store.bm25_search(q, 5, user_id=USER), queries, REPEAT_QUERIES)
        result["bm25_p50_ms"], result["bm25_p95_ms"] = p50, p95
        retriever = MemoryRetriever(store, None)
        p50, p95 = _time_queries(lambda q: retriever.retrieve(q, USER, None, 2000), queries, REPEAT_QUERIES // 2)
        result["retrieve_p50_ms"], result["retrieve_p95_ms"] = p50, p95
        result["index_reads_during_queries"] = store.index_reads - reads
        # One-file change seen by the next query through the watcher (event + debounce + re-index).
        latencies = []
        for round_ in range(3):
            word = f"quokkafish{round_}"
            target.write_text(original + f"\n{word}\n", encoding="utf-8")
            start = time.perf_counter()
            while store.bm25_search(word, user_id=USER) != [target.name]:
                time.sleep(0.005)
                if time.perf_counter() - start > 10:
                    raise RuntimeError("watcher did not pick up the change")
            latencies.append((time.perf_counter() - start) * 1000)
        result["watch_change_visible_ms"] = statistics.median(latencies)
        start = time.perf_counter()
        store.refresh_paths([target])
        result["reindex_one_file_ms"] = (time.perf_counter() - start) * 1000
    target.write_text(original, encoding="utf-8")
    result["peak_rss_mb"] = _peak_mb()
    return result


def child_langchain(size: int) -> dict[str, Any]:
    try:
        from langchain_community.retrievers import BM25Retriever
    except ImportError:
        return {"engine": "langchain", "size": size, "missing": "langchain-community (pip install langchain-community)"}
    root = corpus_dir(size)
    queries = queries_for(root)
    names, texts = texts_of(root)
    start = time.perf_counter()
    retriever = BM25Retriever.from_texts(texts, metadatas=[{"name": n} for n in names], k=5)
    build = time.perf_counter() - start
    repeat = 20 if size >= 100_000 else 60
    p50, p95 = _time_queries(retriever.invoke, queries, repeat)
    hits = sum(name in [d.metadata["name"] for d in retriever.invoke(q)] for q, name in queries)
    return {
        "engine": "langchain",
        "size": size,
        "build_s": build,
        "bm25_p50_ms": p50,
        "bm25_p95_ms": p95,
        "sanity_recall5": hits / len(queries),
        "peak_rss_mb": _peak_mb(),
    }


def child_llamaindex(size: int) -> dict[str, Any]:
    try:
        from llama_index.core.schema import TextNode
        from llama_index.retrievers.bm25 import BM25Retriever  # type: ignore[import-untyped]
    except ImportError:
        return {
            "engine": "llamaindex",
            "size": size,
            "missing": "llama-index-retrievers-bm25 (pip install llama-index-retrievers-bm25)",
        }
    import logging

    logging.getLogger("bm25s").setLevel(logging.ERROR)
    root = corpus_dir(size)
    queries = queries_for(root)
    names, texts = texts_of(root)
    start = time.perf_counter()
    nodes = [TextNode(text=t, id_=n) for n, t in zip(names, texts, strict=False)]
    retriever = BM25Retriever.from_defaults(nodes=nodes, similarity_top_k=5)
    build = time.perf_counter() - start
    p50, p95, cpu_p50, cpu_p95 = _time_warm(retriever.retrieve, queries, REPEAT_QUERIES)
    hits = sum(name in [n.node.node_id for n in retriever.retrieve(q)] for q, name in queries)
    return {
        "engine": "llamaindex",
        "size": size,
        "build_s": build,
        "bm25_p50_ms": p50,
        "bm25_p95_ms": p95,
        "bm25_cpu_p50_ms": cpu_p50,
        "bm25_cpu_p95_ms": cpu_p95,
        "sanity_recall5": hits / len(queries),
        "peak_rss_mb": _peak_mb(),
    }


def _existing_index(root: Path) -> float:
    """Build the index once if missing (as ``local-ai-memory index`` would); seconds spent."""
    from local_ai_memory import DirectoryGuard, MemoryConfig, MemoryStore, close_shared_stores

    if (root / "memory_data" / ".index" / "manifest.json").exists():
        return 0.0
    start = time.perf_counter()
    MemoryStore(
        FileKnowledgeBackend(DirectoryGuard(root), MemoryConfig(fsync=False, auto_watch=False)),
        MemoryConfig(fsync=False, auto_watch=False),
    ).ensure_index()
    close_shared_stores()
    return time.perf_counter() - start


def child_default(size: int) -> dict[str, Any]:
    """Ours with default settings in a fresh process over an existing index: Stage 1 and both
    integrations' retrievers end to end (no LLM), warm and built per request."""
    from langchain_local_ai_memory import LocalMemoryRetriever as LangChainRetriever
    from llama_index.retrievers.local_ai_memory import LocalMemoryRetriever as LlamaIndexRetriever

    from local_ai_memory import DirectoryGuard, MemoryConfig, MemoryStore

    root = corpus_dir(size)
    queries = queries_for(root)
    result: dict[str, Any] = {"engine": "default", "size": size, "index_build_s": _existing_index(root)}
    config = MemoryConfig(runtime_data_dir=root, fsync=False)
    start = time.perf_counter()
    store = MemoryStore(FileKnowledgeBackend(DirectoryGuard(root), config), config)
    store.search(queries[0][0], 5, user_id=USER)
    result["open_first_query_s"] = time.perf_counter() - start
    while not store.watched and time.perf_counter() - start < 30:
        store.search(queries[0][0], 5, user_id=USER)
        time.sleep(0.001)
    result["until_watched_ms"] = (time.perf_counter() - start) * 1000
    # Queries asked once each, never before: what a word costs the first time (nothing kept yet).
    novel = queries_for(root, NOVEL_QUERIES, seed=7)
    result["novel_p50_ms"], result["novel_p95_ms"] = _time_queries(
        lambda q: store.search(q, 5, user_id=USER), novel, len(novel)
    )
    timed = _time_warm(lambda q: store.search(q, 5, user_id=USER), queries, REPEAT_QUERIES)
    result["stage1_p50_ms"], result["stage1_p95_ms"], result["stage1_cpu_p50_ms"], result["stage1_cpu_p95_ms"] = timed
    hits = sum(name in [c.filename for c in store.search(q, 5, user_id=USER)] for q, name in queries)
    result["sanity_recall5"] = hits / len(queries)

    lc = LangChainRetriever(config=config, user_id=USER)
    timed = _time_warm(lc.invoke, queries, REPEAT_QUERIES)
    result["lc_p50_ms"], result["lc_p95_ms"], result["lc_cpu_p50_ms"], result["lc_cpu_p95_ms"] = timed
    li = LlamaIndexRetriever.from_config(config, user_id=USER)
    timed = _time_warm(li.retrieve, queries, REPEAT_QUERIES)
    result["li_p50_ms"], result["li_p95_ms"], result["li_cpu_p50_ms"], result["li_cpu_p95_ms"] = timed
    result["lc_fresh_p50_ms"] = _time_warm(
        lambda q: LangChainRetriever(config=config, user_id=USER).invoke(q), queries, REPEAT_QUERIES
    )[0]
    result["li_fresh_p50_ms"] = _time_warm(
        lambda q: LlamaIndexRetriever.from_config(config, user_id=USER).retrieve(q), queries, REPEAT_QUERIES
    )[0]

    # A note written by another process (an editor): time until a query finds it.
    target = root / "memory_data" / "knowledge" / f"{USER}_zz_visible.md"
    writer = f"import pathlib; pathlib.Path({str(target)!r}).write_text('# New\\n\\nokapizebra here')"
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", writer], check=True)
    written = time.perf_counter()
    while [c.filename for c in store.search("okapizebra", 5, user_id=USER)] != [target.name]:
        time.sleep(0.002)
        if time.perf_counter() - written > 10:
            break
    result["other_process_visible_ms"] = (time.perf_counter() - written) * 1000
    target.unlink()
    result["peak_rss_mb"] = _peak_mb()
    return result


FIELD_LABELS = {
    "metadata": "metadata only (title, description, keywords)",
    "content": "full content",
    "both": "both (content + file-name words + keywords; the default)",
}
CHILDREN = {
    "ours": child_ours,
    "default": child_default,
    "langchain": child_langchain,
    "llamaindex": child_llamaindex,
}


def run_child(engine: str, size: int) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, __file__, "--child", engine, "--sizes", str(size)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "TQDM_DISABLE": "1"},
    )
    if done.returncode != 0:
        return {"engine": engine, "size": size, "error": done.stderr.strip().splitlines()[-1:]}
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def speed(sizes: list[int], peers: bool) -> None:
    rows: list[dict[str, Any]] = []
    for size in sizes:
        corpus_dir(size)
        for engine in ["ours", *(["langchain", "llamaindex"] if peers else [])]:
            row = run_child(engine, size)
            rows.append(row)
            print(json.dumps(row), file=sys.stderr)
    print("\n## Speed (one user, one category, generated notes of ~170 words)\n")
    print(
        "| files | build s | open+1st query s (CPU s) | no-change refresh ms | 1-change refresh ms"
        " | watcher change visible ms | bm25 p50/p95 ms (watched) | bm25 p50 ms (stat scan)"
        " | retrieve p50/p95 ms | index reads | peak RSS MB |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r["engine"] != "ours" or "error" in r:
            continue
        print(
            f"| {r['size']:,} | {r['build_s']:.1f} | {r['open_first_query_s']:.2f} ({r['open_first_query_cpu_s']:.2f})"
            f" | {r['refresh_nochange_ms']:.0f}"
            f" | {r['refresh_1change_ms']:.0f} | {r['watch_change_visible_ms']:.0f}"
            f" | {r['bm25_p50_ms']:.2f} / {r['bm25_p95_ms']:.2f} | {r['query_scan_p50_ms']:.1f}"
            f" | {r['retrieve_p50_ms']:.2f} / {r['retrieve_p95_ms']:.2f} | {r['index_reads_during_queries']}"
            f" | {r['peak_rss_mb']:.0f} |"
        )
    if peers:
        print("\n## Peers on the same corpus and queries (ratio = peer / ours; > 1 means ours is faster)\n")
        print(
            "| files | engine | build s | query p50 ms | query p95 ms | p50 ratio | peak RSS MB | recall@5 (sanity) |"
        )
        print("|---|---|---|---|---|---|---|---|")
        ours = {r["size"]: r for r in rows if r["engine"] == "ours" and "error" not in r}
        for r in rows:
            if "missing" in r:
                print(f"| {r['size']:,} | {r['engine']} | MISSING: {r['missing']} | | | | | |")
                continue
            if "error" in r:
                print(f"| {r['size']:,} | {r['engine']} | ERROR: {r['error']} | | | | | |")
                continue
            base = ours.get(r["size"])
            ratio = f"{r['bm25_p50_ms'] / base['bm25_p50_ms']:.1f}x" if base and r["engine"] != "ours" else "1.0x"
            print(
                f"| {r['size']:,} | {r['engine']} | {r['build_s']:.1f} | {r['bm25_p50_ms']:.2f}"
                f" | {r['bm25_p95_ms']:.2f} | {ratio} | {r['peak_rss_mb']:.0f} | {r['sanity_recall5']:.2f} |"
            )


def retrievers(sizes: list[int]) -> None:
    rows: dict[tuple[str, int], dict[str, Any]] = {}
    for size in sizes:
        corpus_dir(size)
        for engine in ("default", "llamaindex"):
            row = run_child(engine, size)
            rows[(engine, size)] = row
            print(json.dumps(row), file=sys.stderr)
    print("\n## Default configuration vs LlamaIndex BM25Retriever (same corpus and queries, one run)\n")
    print(
        "Ratios are ours / LlamaIndex BM25Retriever p50 (below 1 means ours is faster). Ours: no watcher"
        " started by hand, default settings, no LLM; the whole retrievers include Stage 3 (2000-token budget)."
    )
    print(
        "\n| notes | until watched ms | Stage 1 p50 / p95 ms | LlamaIndex BM25 p50 / p95 ms | Stage 1 ratio"
        " | LangChain invoke p50 / p95 ms | ratio | LlamaIndex retrieve p50 / p95 ms | ratio"
        " | per request p50 ms (LC / LI) | other process visible ms | recall@5 ours / LI"
        " | Stage 1 on new queries p50 / p95 ms (ratio) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    cpu_rows = []
    for size in sizes:
        ours, peer = rows[("default", size)], rows[("llamaindex", size)]
        if "error" in ours or "error" in peer or "missing" in peer:
            print(f"| {size:,} | ERROR / MISSING: {ours.get('error')} {peer.get('error') or peer.get('missing')} |")
            continue
        base = peer["bm25_p50_ms"]
        print(
            f"| {size:,} | {ours['until_watched_ms']:.0f}"
            f" | {ours['stage1_p50_ms']:.3f} / {ours['stage1_p95_ms']:.3f}"
            f" | {base:.3f} / {peer['bm25_p95_ms']:.3f} | {ours['stage1_p50_ms'] / base:.2f}"
            f" | {ours['lc_p50_ms']:.2f} / {ours['lc_p95_ms']:.2f} | {ours['lc_p50_ms'] / base:.2f}"
            f" | {ours['li_p50_ms']:.2f} / {ours['li_p95_ms']:.2f} | {ours['li_p50_ms'] / base:.2f}"
            f" | {ours['lc_fresh_p50_ms']:.2f} / {ours['li_fresh_p50_ms']:.2f}"
            f" | {ours['other_process_visible_ms']:.0f}"
            f" | {ours['sanity_recall5']:.2f} / {peer['sanity_recall5']:.2f}"
            f" | {ours['novel_p50_ms']:.3f} / {ours['novel_p95_ms']:.3f} ({ours['novel_p50_ms'] / base:.2f}) |"
        )
        cpu_rows.append(
            f"| {size:,} | {ours['stage1_cpu_p50_ms']:.3f} / {ours['stage1_cpu_p95_ms']:.3f}"
            f" | {peer['bm25_cpu_p50_ms']:.3f} / {peer['bm25_cpu_p95_ms']:.3f}"
            f" | {ours['lc_cpu_p50_ms']:.2f} / {ours['lc_cpu_p95_ms']:.2f}"
            f" | {ours['li_cpu_p50_ms']:.2f} / {ours['li_cpu_p95_ms']:.2f} |"
        )
    print("\nThe same loops in CPU time of the calling thread (p50 / p95 ms; waits for a busy machine left out):\n")
    print("| notes | Stage 1 | LlamaIndex BM25 | LangChain invoke | LlamaIndex retrieve |\n|---|---|---|---|---|")
    print("\n".join(cpu_rows))
    print(f"\nload average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


# -- quality --------------------------------------------------------------------------------------
def _score(ranked: list[list[str]], expected: list[str]) -> tuple[float, float]:
    recall = sum(e in r[:5] for r, e in zip(ranked, expected, strict=False)) / len(expected)
    mrr = sum(
        next((1 / (i + 1) for i, n in enumerate(r[:10]) if n == e), 0.0) for r, e in zip(ranked, expected, strict=False)
    )
    return recall, mrr / len(expected)


def quality(hybrid: bool) -> None:
    from local_ai_memory._knowledge.samples import build_corpus, write_corpus
    from local_ai_memory._knowledge.store import MemoryStore
    from local_ai_memory._shared.config import MemoryConfig
    from local_ai_memory._shared.naming import DirectoryGuard

    corpus = build_corpus()
    queries = [q.text for q in corpus.queries]
    expected = [q.expected(USER) for q in corpus.queries]
    results: list[tuple[str, float, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for field in ("metadata", "content", "both"):
            store = MemoryStore(
                FileKnowledgeBackend(DirectoryGuard(Path(tmp) / field), MemoryConfig(fsync=False)),
                MemoryConfig(fsync=False),
                ranking_field=field,
            )
            write_corpus(store, USER, corpus=corpus)
            ranked = [store.bm25_search(q, 10, user_id=USER) for q in queries]
            results.append((f"ours BM25 over {FIELD_LABELS[field]}", *_score(ranked, expected)))
        if hybrid:
            from local_ai_memory._models.sentence_transformers import SentenceTransformerEmbedder

            store = MemoryStore(
                FileKnowledgeBackend(DirectoryGuard(Path(tmp) / "hybrid"), MemoryConfig(fsync=False)),
                MemoryConfig(fsync=False),
                embedder=SentenceTransformerEmbedder(),
            )
            write_corpus(store, USER, corpus=corpus)
            ranked = [store.hybrid_search(q, 10, user_id=USER) for q in queries]
            results.append(("ours hybrid (both + MiniLM on metadata, RRF 0.5)", *_score(ranked, expected)))
        names = [note.filename(USER) for note in corpus.notes]
        texts = [note.text for note in corpus.notes]
        try:
            from langchain_community.retrievers import BM25Retriever as LangChainBM25

            lc = LangChainBM25.from_texts(texts, metadatas=[{"name": n} for n in names], k=10)
            ranked = [[d.metadata["name"] for d in lc.invoke(q)] for q in queries]
            results.append(("LangChain BM25Retriever (defaults)", *_score(ranked, expected)))
        except ImportError:
            results.append(("LangChain BM25Retriever: MISSING (pip install langchain-community)", 0.0, 0.0))
        try:
            import logging

            from llama_index.core.schema import TextNode
            from llama_index.retrievers.bm25 import BM25Retriever as LlamaIndexBM25

            logging.getLogger("bm25s").setLevel(logging.ERROR)
            li = LlamaIndexBM25.from_defaults(
                nodes=[TextNode(text=t, id_=n) for n, t in zip(names, texts, strict=False)], similarity_top_k=10
            )
            ranked = [[n.node.node_id for n in li.retrieve(q)] for q in queries]
            results.append(("LlamaIndex BM25Retriever (defaults)", *_score(ranked, expected)))
        except ImportError:
            results.append(("LlamaIndex BM25Retriever: MISSING (pip install llama-index-retrievers-bm25)", 0.0, 0.0))
    print(f"\n## Retrieval quality: {len(corpus.notes)} stdlib module notes, {len(queries)} held-out queries\n")
    print("| ranking | recall@5 | MRR@10 |\n|---|---|---|")
    for name, recall, mrr in results:
        print(f"| {name} | {recall:.3f} | {mrr:.3f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000", help="comma-separated corpus sizes")
    parser.add_argument("--no-peers", action="store_true", help="skip LangChain and LlamaIndex")
    parser.add_argument("--quality", action="store_true", help="run the real-text quality evaluation instead")
    parser.add_argument("--hybrid", action="store_true", help="with --quality: include hybrid with the real model")
    parser.add_argument(
        "--retrievers", action="store_true", help="default configuration and whole retrievers vs LlamaIndex"
    )
    parser.add_argument("--child", choices=sorted(CHILDREN), help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    if args.child:
        print(json.dumps(CHILDREN[args.child](sizes[0])))
        return
    if args.quality:
        quality(args.hybrid)
        return
    if args.retrievers:
        retrievers(sizes)
        return
    speed(sizes, not args.no_peers)


if __name__ == "__main__":
    main()
