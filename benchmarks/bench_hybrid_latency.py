"""Hybrid Stage 1 latency at scale, once the notes are embedded (the real MiniLM model, offline).

Builds ``--notes`` notes for one user from the standard-library sample corpus (each sample note
repeated with a numbered title, so texts differ), indexes them, embeds them ahead of time with
``MemoryStore.embed_notes`` (what ``local-ai-memory index`` does in hybrid mode) and then times
``hybrid_candidates`` against plain BM25 ``search`` in the same run, on the held-out queries.

Run: ``.venv/bin/python benchmarks/bench_hybrid_latency.py [--notes 10000]``
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from local_ai_memory import MemoryConfig, MemoryStore, close_shared_stores
from local_ai_memory._embeddings import SentenceTransformerEmbedder
from local_ai_memory._guard import DirectoryGuard
from local_ai_memory.samples import build_corpus

USER = "bench"


def _percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered) * 1000, ordered[int(0.95 * (len(ordered) - 1))] * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--notes", type=int, default=10_000)
    args = parser.parse_args()
    corpus = build_corpus()
    queries = [query.text for query in corpus.queries][:100]
    with tempfile.TemporaryDirectory() as tmp:
        config = MemoryConfig(runtime_data_dir=Path(tmp), search_mode="hybrid", fsync=False)
        embedder = SentenceTransformerEmbedder()
        store = MemoryStore(DirectoryGuard(Path(tmp)), config, embedder=embedder)
        for number in range(args.notes):
            note = corpus.notes[number % len(corpus.notes)]
            text = note.text.replace("\n", f" (copy {number})\n", 1)
            store.backend.write_note("knowledge", f"{USER}_{note.stem}-{number}.md", text.encode())
        started = time.perf_counter()
        store.populate_index_from_files(USER)
        indexed = time.perf_counter() - started
        started = time.perf_counter()
        embedded = store.embed_notes(USER)
        embedding = time.perf_counter() - started
        time.sleep(1.0)  # the store's own watcher (on by default) is running by now: no per-query listing
        for query in queries[:5]:  # warm-up: model, matrices, rankers
            store.hybrid_candidates(query, 5, user_id=USER)
            store.search(query, 5, user_id=USER)
        timings: dict[str, list[float]] = {"BM25": [], "hybrid": [], "query embedding alone": []}
        for query in queries:
            for name, call in (("BM25", store.search), ("hybrid", store.hybrid_candidates)):
                started = time.perf_counter()
                call(query, 5, user_id=USER)
                timings[name].append(time.perf_counter() - started)
            started = time.perf_counter()
            embedder.embed([query])
            timings["query embedding alone"].append(time.perf_counter() - started)
        close_shared_stores()  # stop the store's watcher before its folder goes
    print(f"{args.notes} notes: indexed in {indexed:.1f} s, {embedded} embedded ahead of time in {embedding:.1f} s")
    bm25_p50, _ = _percentiles(timings["BM25"])
    for name, samples in timings.items():
        p50, p95 = _percentiles(samples)
        print(f"{name:21} p50 {p50:7.2f} ms   p95 {p95:7.2f} ms   p50 / BM25 p50 {p50 / bm25_p50:6.1f}x")


if __name__ == "__main__":
    main()
