"""Retrieval quality on real text: which Stage 1 ranking finds the right note most often.

Three corpora of real text installed here (see ``quality_corpora.py``), each with held-out
known-item queries (exactly one right note per query, its text not in any note):

* ``stdlib``: one note per Python standard-library module (``local_ai_memory._knowledge.samples``);
* ``packages``: one note per module of the third-party packages in this venv;
* ``readmes``: one note per installed distribution's README.

For every ranking the script prints recall@5 (the right note is among the 5 Stage 1
candidates the LLM gets to see) and MRR@10, all in one run::

    pip install -r benchmarks/requirements.txt
    .venv/bin/python benchmarks/bench_quality.py              # everything, with the real model
    .venv/bin/python benchmarks/bench_quality.py --no-model   # BM25 and peers only
    .venv/bin/python benchmarks/bench_quality.py --corpus stdlib --variants

Rankings:

* ours, ``MemoryStore.search`` as shipped (BM25: stems, exact words and the lead field, see
  ``local_ai_memory._shared.text``) and ``MemoryStore.hybrid_search`` as shipped (with the real
  all-MiniLM-L6-v2 model);
* with ``--variants``: ours without stemming, over metadata or content only, and MiniLM
  alone and fused with ours BM25 over other texts (metadata, title + first paragraph,
  content), by RRF and by score fusion at other weights;
* peers with their defaults on the same note texts: LangChain ``BM25Retriever``
  (rank_bm25), LlamaIndex ``BM25Retriever`` (bm25s, stemmed), and bm25s itself with the
  English Snowball stemmer and stop words.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from local_ai_memory.backends import FileKnowledgeBackend

sys.path.insert(0, str(Path(__file__).resolve().parent))

from quality_corpora import CORPORA

from local_ai_memory import close_shared_stores
from local_ai_memory._knowledge.fusion import convex_fusion, cosine_scores, cosine_top_n, reciprocal_rank_fusion
from local_ai_memory._knowledge.index_file import IndexEntry, ranking_text
from local_ai_memory._knowledge.samples import SampleCorpus, write_corpus
from local_ai_memory._knowledge.search import embedding_text
from local_ai_memory._knowledge.store import MemoryStore
from local_ai_memory._shared.config import MemoryConfig
from local_ai_memory._shared.naming import DirectoryGuard

USER = "bench"
POOL = 10
VECTORS = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "local-ai-memory-bench" / "quality-vectors"

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


def make_store(corpus: SampleCorpus, folder: Path, **settings: object) -> MemoryStore:
    config = MemoryConfig(runtime_data_dir=folder, fsync=False, **settings)  # type: ignore[arg-type]
    store = MemoryStore(FileKnowledgeBackend(DirectoryGuard(folder), config), config)
    write_corpus(store, USER, corpus=corpus)
    return store


def bm25_rows(
    corpus: SampleCorpus, tmp: Path, queries: list[str], expected: list[str], variants: bool
) -> tuple[list[Row], MemoryStore]:
    store = make_store(corpus, tmp / "shipped")
    ranked, ms = timed(lambda: [store.bm25_search(q, 10, user_id=USER) for q in queries])
    rows: list[Row] = [("ours: BM25 (shipped)", *score(ranked, expected), f"{ms:.2f} ms/query")]
    if variants:
        plain = make_store(corpus, tmp / "nostem", stemmer_language=None)
        ranked = [plain.bm25_search(q, 10, user_id=USER) for q in queries]
        rows.append(("ours: BM25 without stemming", *score(ranked, expected), ""))
        for field in ("metadata", "content"):
            config = MemoryConfig(runtime_data_dir=tmp / field, fsync=False)
            other = MemoryStore(FileKnowledgeBackend(DirectoryGuard(tmp / field), config), config, ranking_field=field)  # type: ignore[arg-type]
            write_corpus(other, USER, corpus=corpus)
            ranked = [other.bm25_search(q, 10, user_id=USER) for q in queries]
            rows.append((f"ours: BM25 over {field} only", *score(ranked, expected), ""))
    return rows, store


def model_rows(
    corpus: SampleCorpus,
    tmp: Path,
    store: MemoryStore,
    queries: list[str],
    expected: list[str],
    embedder: object,
    variants: bool,
    corpus_name: str = "",
    weights: Sequence[float] = (),
) -> list[Row]:
    from local_ai_memory._backends.files.vectors import EmbeddingCache

    rows: list[Row] = []
    # Vectors are kept between runs (content-addressed, outside the repository): a second run
    # with other weights embeds nothing. The notes are rewritten into a fresh folder each run.
    kept = VECTORS / corpus_name
    folder = tmp / "hybrid"
    if kept.is_dir():
        shutil.copytree(kept, folder / "memory_data" / ".embeddings")
    config = MemoryConfig(runtime_data_dir=folder, fsync=False, search_mode="hybrid")
    hybrid = MemoryStore(FileKnowledgeBackend(DirectoryGuard(folder), config), config, embedder=embedder)  # type: ignore[arg-type]
    start = time.perf_counter()
    write_corpus(hybrid, USER, corpus=corpus)  # hybrid mode: each note's passages embedded as it is written
    first = time.perf_counter() - start
    shutil.rmtree(kept, ignore_errors=True)
    shutil.copytree(folder / "memory_data" / ".embeddings", kept)
    ranked, ms = timed(lambda: [hybrid.hybrid_search(q, 10, user_id=USER) for q in queries])
    note = f"{ms:.1f} ms/query, {first:.0f} s to write and embed {len(corpus.notes)} notes"
    rows.append(("ours: hybrid (shipped, MiniLM)", *score(ranked, expected), note))
    for weight in weights:
        ranked = [hybrid.hybrid_search(q, 10, weight, user_id=USER) for q in queries]
        rows.append((f"ours: hybrid, BM25 weight {weight}", *score(ranked, expected), ""))
    if not variants:
        return rows
    cache = EmbeddingCache(DirectoryGuard(tmp / "vectors"), embedder, MemoryConfig(fsync=False))  # type: ignore[arg-type]
    names = [note.filename(USER) for note in corpus.notes]
    entries: dict[str, IndexEntry] = {e.filename: e for e in store.read_index().files}
    named = [n for n in names if n in entries]  # a note the store skipped (binary text) has no entry
    row_of = {n: row for row, n in enumerate(named)}
    texts = {
        "metadata": [ranking_text(entries[n], None, "metadata") for n in named],
        "title + first paragraph": [embedding_text(entries[n]) for n in named],
        "content": [note.text for note in corpus.notes if note.filename(USER) in row_of],
    }
    query_vectors = [cache.embed_query(q) for q in queries]
    bm25 = [[(c.filename, c.score) for c in store.search(q, POOL, user_id=USER)] for q in queries]
    for label, items in texts.items():
        matrix = cache.vectors_for([(f"{label}/{n}", t) for n, t in zip(named, items, strict=True)])
        scored = [cosine_scores(matrix, qv) for qv in query_vectors]
        vector = [[named[i] for i, _ in cosine_top_n(matrix, qv, POOL)] for qv in query_vectors]
        rows.append((f"MiniLM cosine over {label}", *score(vector, expected), ""))
        rrf = [
            [n for n, _ in reciprocal_rank_fusion([n for n, _ in b], v, 0.5)] for b, v in zip(bm25, vector, strict=True)
        ]
        rows.append((f"RRF 0.5: ours BM25 + MiniLM over {label}", *score(rrf, expected), ""))
        for weight in (0.5, 0.7, 0.8):
            fused = []
            for lexical, near, cosines in zip(bm25, vector, scored, strict=True):
                candidates = {n for n, _ in lexical} | set(near)
                similar = [(n, float(cosines[row_of[n]])) for n in candidates if n in row_of]
                fused.append([n for n, _ in convex_fusion(lexical, similar, weight)])
            rows.append((f"score fusion {weight}: ours BM25 + MiniLM over {label}", *score(fused, expected), ""))
    return rows


def peer_rows(corpus: SampleCorpus, queries: list[str], expected: list[str]) -> list[Row]:
    rows: list[Row] = []
    names = [note.filename(USER) for note in corpus.notes]
    texts = [note.text for note in corpus.notes]
    try:
        from langchain_community.retrievers import BM25Retriever as LangChainBM25
    except ImportError:
        rows.append(("LangChain BM25Retriever: not installed", math.nan, math.nan, ""))
    else:
        lc = LangChainBM25.from_texts(texts, metadatas=[{"name": n} for n in names], k=10)
        ranked, ms = timed(lambda: [[d.metadata["name"] for d in lc.invoke(q)] for q in queries])
        rows.append(("LangChain BM25Retriever (defaults)", *score(ranked, expected), f"{ms:.2f} ms/query"))
    try:
        from llama_index.core.schema import TextNode
        from llama_index.retrievers.bm25 import BM25Retriever as LlamaIndexBM25  # type: ignore[import-untyped]
    except ImportError:
        rows.append(("LlamaIndex BM25Retriever: not installed", math.nan, math.nan, ""))
    else:
        logging.getLogger("bm25s").setLevel(logging.ERROR)
        nodes = [TextNode(text=t, id_=n) for n, t in zip(names, texts, strict=True)]
        li = LlamaIndexBM25.from_defaults(nodes=nodes, similarity_top_k=10)
        ranked, ms = timed(lambda: [[n.node.node_id for n in li.retrieve(q)] for q in queries])
        rows.append(("LlamaIndex BM25Retriever (defaults)", *score(ranked, expected), f"{ms:.2f} ms/query"))
    try:
        import bm25s
        import Stemmer
    except ImportError:
        rows.append(("bm25s: not installed", math.nan, math.nan, ""))
    else:
        stemmer = Stemmer.Stemmer("english")
        retriever = bm25s.BM25()
        corpus_tokens = bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False)
        retriever.index(corpus_tokens, show_progress=False)

        def bm25s_run() -> list[list[str]]:
            tokens = bm25s.tokenize(queries, stopwords="en", stemmer=stemmer, show_progress=False)
            found, _ = retriever.retrieve(tokens, k=10, show_progress=False)
            return [[names[int(i)] for i in row] for row in found]

        ranked, ms = timed(bm25s_run)
        rows.append(("bm25s, English stemmer and stop words", *score(ranked, expected), f"{ms:.2f} ms/query (batch)"))
    return rows


def print_table(title: str, rows: list[Row]) -> None:
    print(f"\n{title}\n\n| ranking | recall@5 | MRR@10 | note |\n|---|---:|---:|---|")
    for label, recall, mrr, note in rows:
        if math.isnan(recall):
            print(f"| {label} | | | {note} |")
        else:
            print(f"| {label} | {recall:.3f} | {mrr:.3f} | {note} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--no-model", action="store_true", help="skip everything that needs the embedding model")
    parser.add_argument("--corpus", default=",".join(CORPORA), help="corpora to run (comma-separated)")
    parser.add_argument("--variants", action="store_true", help="also the variants behind the shipped choices")
    parser.add_argument("--weights", default="", help="also hybrid at these BM25 weights (comma-separated)")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    embedder = None
    if not args.no_model:
        from local_ai_memory._models.onnx_file import local_embedder

        embedder = local_embedder()  # ONNX Runtime once exported, else torch: the same vectors
        embedder.embed(["warm up"])
    summary: list[tuple[str, list[Row]]] = []
    for name in args.corpus.split(","):
        start = time.perf_counter()
        corpus = CORPORA[name]()
        print(f"corpus {name}: {time.perf_counter() - start:.1f} s", file=sys.stderr)
        queries = [q.text for q in corpus.queries]
        expected = [q.expected(USER) for q in corpus.queries]
        with tempfile.TemporaryDirectory(prefix="lam-quality-") as folder:
            tmp = Path(folder)
            rows, store = bm25_rows(corpus, tmp, queries, expected, args.variants)
            if embedder is not None:
                weights = [float(w) for w in args.weights.split(",") if w]
                rows += model_rows(corpus, tmp, store, queries, expected, embedder, args.variants, name, weights)
            rows += peer_rows(corpus, queries, expected)
            close_shared_stores()  # stop the stores' watchers before their folders are removed
        print_table(f"Corpus {name}: {len(corpus.notes)} notes, {len(queries)} held-out queries", rows)
        summary.append((f"{name} ({len(corpus.notes)} notes, {len(queries)} queries)", rows))
    print(f"\nSummary (Python {sys.version.split()[0]}): recall@5 / MRR@10\n")
    labels = [label for label, r, _, _ in summary[0][1] if not math.isnan(r)] if summary else []
    print("| ranking | " + " | ".join(name for name, _ in summary) + " |")
    print("|---|" + "---:|" * len(summary))
    for label in labels:
        cells = []
        for _, rows in summary:
            found = next(((r, m) for lab, r, m, _ in rows if lab == label), None)
            cells.append(f"{found[0]:.3f} / {found[1]:.3f}" if found else "")
        print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
