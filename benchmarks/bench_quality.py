"""Retrieval quality on real text: which Stage 1 ranking finds the right note most often.

Corpus: one Markdown note per Python standard-library module installed here, queries from
docstrings that were left out of the notes (see ``local_ai_memory._samples``). Each query
has exactly one right file. For every ranking the script prints recall@5 (the right file is
among the 5 Stage 1 candidates the LLM gets to see) and MRR@10::

    .venv/bin/python benchmarks/bench_quality.py            # everything, with the real model
    .venv/bin/python benchmarks/bench_quality.py --no-model # BM25 variants and peers only

Rankings:

* ours, BM25 over the index metadata only (title, description, keywords), over the full
  content, and over both (``MemoryStore(ranking_field=...)``, the shipped default is "both");
* all-MiniLM-L6-v2 alone (cosine) over the metadata text and over the content (the model
  reads the first 256 word pieces), and RRF hybrids of BM25 "both" with each, BM25 weight
  0.5 (the default) and 0.7, with a pool of 10 from each side (``hybrid_top_n``);
* ours, ``MemoryStore.hybrid_search`` as shipped (the store decides what it embeds);
* LangChain ``BM25Retriever`` and LlamaIndex ``BM25Retriever`` with their defaults, on the
  same note texts (``pip install -r benchmarks/requirements.txt``).

It also prints the embedding throughput of the model on this machine.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from local_ai_memory._config import MemoryConfig
from local_ai_memory._fusion import cosine_top_n, reciprocal_rank_fusion
from local_ai_memory._guard import DirectoryGuard
from local_ai_memory._index import IndexEntry, ranking_text
from local_ai_memory._samples import SampleCorpus, build_corpus, write_corpus
from local_ai_memory._store import MemoryStore

USER = "bench"
POOL = 10
WEIGHT = 0.5

Row = tuple[str, float, float, str]


def score(ranked: Sequence[Sequence[str]], expected: Sequence[str]) -> tuple[float, float]:
    """recall@5 and MRR@10 of best-first name lists against one expected name per query."""
    recall = sum(e in r[:5] for r, e in zip(ranked, expected, strict=True)) / len(expected)
    mrr = sum(
        next((1 / (i + 1) for i, n in enumerate(r[:10]) if n == e), 0.0) for r, e in zip(ranked, expected, strict=True)
    )
    return recall, mrr / len(expected)


def timed(fn: Callable[[], list[list[str]]]) -> tuple[list[list[str]], float]:
    start = time.perf_counter()
    out = fn()
    return out, (time.perf_counter() - start) * 1000 / max(1, len(out))


def bm25_rows(
    corpus: SampleCorpus, tmp: Path, queries: list[str], expected: list[str]
) -> tuple[list[Row], MemoryStore]:
    rows: list[Row] = []
    both: MemoryStore | None = None
    for field in ("metadata", "content", "both"):
        store = MemoryStore(
            DirectoryGuard(tmp / field), MemoryConfig(runtime_data_dir=tmp / field, fsync=False), ranking_field=field
        )
        write_corpus(store, USER, corpus=corpus)
        ranked, ms = timed(lambda s=store: [s.bm25_search(q, 10, user_id=USER) for q in queries])  # type: ignore[misc]
        rows.append((f"ours: BM25 over {field}", *score(ranked, expected), f"{ms:.2f} ms/query"))
        if field == "both":
            both = store
    assert both is not None
    return rows, both


def model_rows(
    corpus: SampleCorpus,
    tmp: Path,
    store: MemoryStore,
    queries: list[str],
    expected: list[str],
    weights: Sequence[float] = (WEIGHT,),
) -> list[Row]:
    from local_ai_memory._embeddings import EmbeddingCache, SentenceTransformerEmbedder

    rows: list[Row] = []
    embedder = SentenceTransformerEmbedder()
    start = time.perf_counter()
    embedder.embed(["warm up"])
    print(f"model load: {time.perf_counter() - start:.1f} s", file=sys.stderr)
    cache = EmbeddingCache(DirectoryGuard(tmp / "vectors"), embedder, MemoryConfig(fsync=False))
    names = [note.filename(USER) for note in corpus.notes]
    entries: dict[str, IndexEntry] = {e.filename: e for e in store.read_index().files}
    meta_texts = [ranking_text(entries[n], None, "metadata") for n in names]
    content_texts = [note.text for note in corpus.notes]

    start = time.perf_counter()
    query_vectors = [cache.embed_query(q) for q in queries]
    short_rate = len(queries) / (time.perf_counter() - start)
    start = time.perf_counter()
    meta = cache.vectors_for([(f"meta/{n}", t) for n, t in zip(names, meta_texts, strict=True)])
    meta_rate = len(names) / (time.perf_counter() - start)
    start = time.perf_counter()
    content = cache.vectors_for([(f"content/{n}", t) for n, t in zip(names, content_texts, strict=True)])
    content_rate = len(names) / (time.perf_counter() - start)
    print(
        f"throughput: {short_rate:.0f} queries/s one at a time, {meta_rate:.0f} metadata texts/s batched, "
        f"{content_rate:.1f} note texts/s batched (256 word pieces)",
        file=sys.stderr,
    )
    bm25 = [store.bm25_search(q, POOL, user_id=USER) for q in queries]
    for label, matrix in (("metadata", meta), ("content", content)):
        vector = [[names[i] for i, _ in cosine_top_n(matrix, qv, POOL)] for qv in query_vectors]
        rows.append((f"MiniLM cosine over {label}", *score(vector, expected), ""))
        for weight in weights:
            fused = [[n for n, _ in reciprocal_rank_fusion(b, v, weight)] for b, v in zip(bm25, vector, strict=True)]
            rows.append((f"RRF {weight}: BM25 both + MiniLM over {label}", *score(fused, expected), ""))
    hybrid_store = MemoryStore(
        DirectoryGuard(tmp / "hybrid"), MemoryConfig(runtime_data_dir=tmp / "hybrid", fsync=False), embedder=embedder
    )
    write_corpus(hybrid_store, USER, corpus=corpus)
    hybrid_store.hybrid_search("warm up the vectors", 10, user_id=USER)
    ranked, ms = timed(lambda: [hybrid_store.hybrid_search(q, 10, user_id=USER) for q in queries])
    rows.append(("ours: MemoryStore.hybrid_search (shipped)", *score(ranked, expected), f"{ms:.1f} ms/query"))
    rows.append(("(model throughput)", float("nan"), float("nan"), f"{short_rate:.0f} q/s, {content_rate:.1f} notes/s"))
    return rows


def peer_rows(corpus: SampleCorpus, queries: list[str], expected: list[str]) -> list[Row]:
    rows: list[Row] = []
    names = [note.filename(USER) for note in corpus.notes]
    texts = [note.text for note in corpus.notes]
    try:
        from langchain_community.retrievers import BM25Retriever as LangChainBM25
    except ImportError:
        rows.append(("LangChain BM25Retriever: not installed", float("nan"), float("nan"), ""))
    else:
        lc = LangChainBM25.from_texts(texts, metadatas=[{"name": n} for n in names], k=10)
        ranked, ms = timed(lambda: [[d.metadata["name"] for d in lc.invoke(q)] for q in queries])
        rows.append(("LangChain BM25Retriever (defaults)", *score(ranked, expected), f"{ms:.2f} ms/query"))
    try:
        from llama_index.core.schema import TextNode
        from llama_index.retrievers.bm25 import BM25Retriever as LlamaIndexBM25  # type: ignore[import-untyped]
    except ImportError:
        rows.append(("LlamaIndex BM25Retriever: not installed", float("nan"), float("nan"), ""))
    else:
        logging.getLogger("bm25s").setLevel(logging.ERROR)
        nodes = [TextNode(text=t, id_=n) for n, t in zip(names, texts, strict=True)]
        li = LlamaIndexBM25.from_defaults(nodes=nodes, similarity_top_k=10)
        ranked, ms = timed(lambda: [[n.node.node_id for n in li.retrieve(q)] for q in queries])
        rows.append(("LlamaIndex BM25Retriever (defaults)", *score(ranked, expected), f"{ms:.2f} ms/query"))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--no-model", action="store_true", help="skip everything that needs the embedding model")
    parser.add_argument("--weights", default="0.5,0.7", help="BM25 weights of the RRF rows (comma-separated)")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    start = time.perf_counter()
    corpus = build_corpus()
    print(f"corpus: {time.perf_counter() - start:.1f} s", file=sys.stderr)
    queries = [q.text for q in corpus.queries]
    expected = [q.expected(USER) for q in corpus.queries]
    with tempfile.TemporaryDirectory(prefix="lam-quality-") as name:
        tmp = Path(name)
        rows, both = bm25_rows(corpus, tmp, queries, expected)
        if not args.no_model:
            weights = [float(w) for w in args.weights.split(",") if w]
            rows += model_rows(corpus, tmp, both, queries, expected, weights)
        rows += peer_rows(corpus, queries, expected)
    print(
        f"\nRetrieval quality: {len(corpus.notes)} standard-library notes, {len(queries)} held-out queries "
        f"(Python {sys.version.split()[0]})\n"
    )
    print("| ranking | recall@5 | MRR@10 | note |\n|---|---:|---:|---|")
    for label, recall, mrr, note in rows:
        if math.isnan(recall):  # an informational row
            print(f"| {label} | | | {note} |")
        else:
            print(f"| {label} | {recall:.3f} | {mrr:.3f} | {note} |")


if __name__ == "__main__":
    main()
