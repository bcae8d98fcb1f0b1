"""Passages per note against quality: how many of a note's passages hybrid search must embed.

Index-time cost grows with the passages embedded per note (``memory.hybrid_passages``); this
prints, in one run, Stage 1 quality (recall@5 / MRR@10) at several caps on every question set
that exists, with the passages each cap embeds, so the default can be read off the curve:

* natural questions over man pages (``benchmarks/data/natural_questions/``): ``dev`` and
  ``dev2`` (tuning sets) and the held-out ``held_out``, ``fresh``, ``fresh2``, ``fresh3``, over
  one corpus holding every page any set names plus filler pages (``--notes``, 400 by default);
* known items (``bench_quality.py``'s corpora, held-out queries): ``stdlib`` and ``readmes``.

Rankers, per cap: ``hybrid (shipped)`` (``MemoryStore.hybrid_candidates``) and, with
``--fusions``, the rule issue 45 proposed: reciprocal-rank fusion (k=60) of the whole-note
vector's ranking, the best passage's ranking and BM25's at half weight. BM25 alone is the
baseline. The notes are embedded once, at the highest cap (the passages under a lower cap are
the first of those under a higher one, so every other cap reuses their cached vectors); the
folders under ``~/.cache/local-ai-memory-bench/cap/`` keep the vectors for the next run.

    python benchmarks/bench_passage_cap.py --caps 2,4,8,16,257 [--fusions] [--notes 400]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import manpages
from bench_natural_questions import metrics
from quality_corpora import CORPORA

from local_ai_memory import MemoryConfig, MemoryStore, close_shared_stores
from local_ai_memory._shared.naming import DirectoryGuard
from local_ai_memory.backends import FileKnowledgeBackend

USER = "bench"
CATEGORY = "knowledge"
ROOT = manpages.CACHE.parent / "cap"
NQ = Path(__file__).parent / "data" / "natural_questions"
NQ_FILES = (
    "questions.json",
    "questions_dev2.json",
    "questions_fresh.json",
    "questions_fresh2.json",
    "questions_fresh3.json",
)
TUNING = ("dev", "dev2")

Ranker = Callable[[str], list[str]]
Query = tuple[str, list[str], str]  # text, relevant file names, split


def nq_corpus(notes: int) -> tuple[dict[str, str], list[Query]]:
    """Man-page notes holding every page a question set names, and every set's questions."""
    questions: list[dict[str, Any]] = []
    for name in NQ_FILES:
        questions += json.loads((NQ / name).read_text(encoding="utf-8"))
    relevant = sorted({p for q in questions for p in q["relevant"]})
    pages = manpages.corpus(max(notes, len(relevant)), relevant)
    files = {f"{USER}_{manpages.note_name(page)}.md": text for page, text in pages.items()}
    queries = [
        (q["question"], [f"{USER}_{manpages.note_name(p)}.md" for p in q["relevant"]], q["split"]) for q in questions
    ]
    return files, [q for q in queries if set(q[1]) & set(files)]


def known_items(name: str) -> tuple[dict[str, str], list[Query]]:
    corpus = CORPORA[name]()
    files = {note.filename(USER): note.text for note in corpus.notes}
    return files, [(q.text, [q.expected(USER)], name) for q in corpus.queries]


def write_folder(folder: Path, files: dict[str, str]) -> None:
    """The corpus's notes as files (only those that changed are written again)."""
    target = folder / "memory_data" / CATEGORY
    target.mkdir(parents=True, exist_ok=True)
    for stale in target.glob(f"{USER}_*.md"):
        if stale.name not in files:
            stale.unlink()
    for name, text in files.items():
        path = target / name
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")


def open_store(folder: Path, embedder: object, cap: int) -> tuple[MemoryStore, float, int]:
    """The store at passage cap ``cap``, indexed and embedded; seconds spent and passages stored."""
    config = MemoryConfig(
        runtime_data_dir=folder, search_mode="hybrid", fsync=False, auto_watch=False, hybrid_passages=cap
    )
    store = MemoryStore(FileKnowledgeBackend(DirectoryGuard(folder), config), config, embedder=embedder)  # type: ignore[arg-type]
    started = time.perf_counter()
    store.populate_index_from_files(USER)
    seconds = time.perf_counter() - started
    dense = store._dense()
    assert dense is not None
    passages = sum(len(dense._map(e.category, USER)[e.filename][1]) for e in store._entries(USER))
    return store, seconds, passages


def rrf_three(store: MemoryStore) -> Ranker:
    """Issue 45's rule: RRF (k=60) of whole-note vector, best passage and BM25 at half weight."""

    def rank(query: str) -> list[str]:
        inputs = store._hybrid_inputs(USER, None)
        assert inputs is not None
        dense, cache = inputs
        vector = cache.embed_query(query)
        best = np.maximum.reduceat(dense.matrix @ vector, dense.starts)
        whole = dense.means @ vector
        scores: dict[str, float] = {}
        for weight, ranking in (
            (1.0, [dense.entries[i].filename for i in np.argsort(-whole)[:50]]),
            (1.0, [dense.entries[i].filename for i in np.argsort(-best)[:50]]),
            (0.5, [c.filename for c in store.search(query, 50, user_id=USER)]),
        ):
            for position, name in enumerate(ranking, start=1):
                scores[name] = scores.get(name, 0.0) + weight / (60 + position)
        return sorted(scores, key=lambda n: -scores[n])[:10]

    return rank


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--caps", default="2,4,8,16,257", help="passages per note at most (comma-separated)")
    parser.add_argument("--notes", type=int, default=400, help="man pages in the natural-question corpus")
    parser.add_argument("--sets", default="nq,stdlib,readmes", help="corpora: nq, stdlib, readmes")
    parser.add_argument("--fusions", action="store_true", help="also issue 45's three-way RRF rule")
    args = parser.parse_args()
    from local_ai_memory._models.onnx_file import local_embedder

    caps = sorted({int(c) for c in args.caps.split(",")}, reverse=True)  # the highest first: it embeds
    embedder = local_embedder()
    table: dict[str, dict[str, tuple[float, float]]] = {}
    splits: list[str] = []
    costs: dict[str, dict[int, float]] = {}
    for name in args.sets.split(","):
        files, queries = nq_corpus(args.notes) if name == "nq" else known_items(name)
        folder = ROOT / (f"nq-{args.notes}" if name == "nq" else name)
        write_folder(folder, files)
        print(f"{name}: {len(files)} notes, {len(queries)} queries", file=sys.stderr)
        for cap in caps:
            store, seconds, passages = open_store(folder, embedder, cap)
            costs.setdefault(name, {})[cap] = passages / len(files)
            print(f"  cap {cap}: {passages} passages ({seconds:.0f} s)", file=sys.stderr, flush=True)
            rankers: dict[str, Ranker] = {
                f"hybrid (shipped), {cap} passages": lambda q, s=store: [
                    c.filename for c in s.hybrid_candidates(q, 10, user_id=USER)
                ]
            }
            if cap == caps[0]:
                rankers = {"BM25": lambda q, s=store: s.bm25_search(q, 10, user_id=USER), **rankers}
            if args.fusions:
                rankers[f"RRF whole + best + BM25/2, {cap} passages"] = rrf_three(store)
            for label, rank in rankers.items():
                ranked = {q[0]: rank(q[0]) for q in queries}
                for split in dict.fromkeys(q[2] for q in queries):
                    chosen = [q for q in queries if q[2] == split]
                    splits.append(split) if split not in splits else None
                    table.setdefault(label, {})[split] = metrics([ranked[q[0]] for q in chosen], [q[1] for q in chosen])
            close_shared_stores()
    print(f"\nPassages per note embedded, by cap: {json.dumps(costs)}")
    print("\nRecall@5 / MRR@10 (tuning sets: " + ", ".join(TUNING) + "; the rest are held out)\n")
    print("| ranking | " + " | ".join(splits) + " |")
    print("|---|" + "---:|" * len(splits))
    for label, cells in table.items():
        row = [f"{cells[s][0]:.3f} / {cells[s][1]:.3f}" if s in cells else "" for s in splits]
        print(f"| {label} | " + " | ".join(row) + " |")
    print(f"\nload average (1 min) at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
