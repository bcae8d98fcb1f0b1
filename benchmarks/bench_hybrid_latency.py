"""Hybrid Stage 1 latency at scale, once the notes are embedded (the real MiniLM model, offline).

Builds ``--notes`` notes for one user from the standard-library sample corpus (each sample note
repeated with a numbered title, so texts differ), indexes them, embeds them ahead of time with
``MemoryStore.embed_notes`` (what ``local-ai-memory index`` does in hybrid mode) and then times
``hybrid_candidates`` against plain BM25 ``search`` in the same run, on the held-out queries,
with the query embedding alone on ONNX Runtime (the default once a process is warm) and on
torch. CPU time of the calling thread is printed beside wall time: it leaves out waiting for a
busy machine's cores.

Run: ``.venv/bin/python benchmarks/bench_hybrid_latency.py [--notes 10000]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from local_ai_memory import MemoryConfig, MemoryStore, close_shared_stores
from local_ai_memory._models.sentence_transformers import SentenceTransformerEmbedder
from local_ai_memory._shared.naming import DirectoryGuard
from local_ai_memory.backends import FileKnowledgeBackend
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
        store = MemoryStore(FileKnowledgeBackend(DirectoryGuard(Path(tmp)), config), config, embedder=embedder)
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
        onnx = embedder.prepare_onnx()  # what a long-lived process has after its third query
        time.sleep(1.0)  # the store's own watcher (on by default) is running by now: no per-query listing
        for query in queries[:5]:  # warm-up: model, matrices, rankers
            store.hybrid_candidates(query, 5, user_id=USER)
            store.search(query, 5, user_id=USER)
        torch_only = SentenceTransformerEmbedder(onnx=False)
        calls = {
            "BM25": lambda query: store.search(query, 5, user_id=USER),
            "hybrid": lambda query: store.hybrid_candidates(query, 5, user_id=USER),
            "query embedding alone": lambda query: embedder.embed([query]),
            "the same on torch": lambda query: torch_only.embed([query]),
        }
        timings: dict[str, list[tuple[float, float]]] = {name: [] for name in calls}
        for query in queries:  # interleaved, so load on the machine hits every line alike
            for name, call in calls.items():
                wall, cpu = time.perf_counter(), time.thread_time()
                call(query)
                timings[name].append((time.perf_counter() - wall, time.thread_time() - cpu))
        close_shared_stores()  # stop the store's watcher before its folder goes
    print(f"{args.notes} notes: indexed in {indexed:.1f} s, {embedded} embedded ahead of time in {embedding:.1f} s")
    print(f"queries embedded by {'ONNX Runtime' if onnx else 'torch'}")
    bm25_p50, _ = _percentiles([wall for wall, _ in timings["BM25"]])
    print("| call | wall p50 / p95 ms | CPU p50 / p95 ms | wall p50 / BM25's |\n|---|---|---|---|")
    for name, samples in timings.items():
        p50, p95 = _percentiles([wall for wall, _ in samples])
        cpu50, cpu95 = _percentiles([cpu for _, cpu in samples])
        print(f"| {name} | {p50:.2f} / {p95:.2f} | {cpu50:.2f} / {cpu95:.2f} | {p50 / bm25_p50:.1f}x |")
    print(f"\nload average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
