"""``LocalMemoryStore`` beside LangGraph's ``InMemoryStore``: time per operation and search quality.

Both stores get the sample corpus (one item ``{"text": note}`` per standard-library module,
about 160) and answer the corpus's held-out queries. ``LocalMemoryStore`` runs on real files
(fsync on, as shipped) and on the in-memory knowledge backend; ``InMemoryStore`` has no index
(it needs an embedding model for ``query``, and without one returns items unranked). Quality is
hits in the top 5; the last line is the core's knowledge search over the same texts written as
plain notes, which the store should match.

Run: ``.venv/bin/python benchmarks/bench_store.py``
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable

from langchain_local_ai_memory import LocalMemoryStore
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore

from local_ai_memory import Memory
from local_ai_memory.samples import SampleCorpus, build_corpus, write_corpus


def _per_op(action: Callable[[], object], count: int) -> float:
    start = time.perf_counter()
    action()
    return (time.perf_counter() - start) / count * 1000


def measure(store: BaseStore, corpus: SampleCorpus) -> dict[str, float]:
    notes, queries = corpus.notes, corpus.queries
    figures = {
        "put": _per_op(lambda: [store.put(("alice",), n.module, {"text": n.text}) for n in notes], len(notes)),
        "get": _per_op(lambda: [store.get(("alice",), n.module) for n in notes], len(notes)),
        "list 10": _per_op(lambda: [store.search(("alice",), limit=10) for _ in range(20)], 20),
        "search": _per_op(lambda: [store.search(("alice",), query=q.text, limit=5) for q in queries], len(queries)),
    }
    found = [[i.key for i in store.search(("alice",), query=q.text, limit=5)] for q in queries]
    figures["top-5 hits"] = sum(q.module in keys for q, keys in zip(queries, found, strict=True))
    return figures


def main() -> None:
    corpus = build_corpus()
    with tempfile.TemporaryDirectory() as root:
        rows = {
            "LocalMemoryStore (files)": measure(LocalMemoryStore(Memory.open(root)), corpus),
            "LocalMemoryStore (in memory)": measure(LocalMemoryStore(Memory.in_memory()), corpus),
            "InMemoryStore (no index)": measure(InMemoryStore(), corpus),
        }
    plain = Memory.in_memory()
    write_corpus(plain.knowledge.store, "alice", corpus=corpus)
    core_hits = sum(
        q.expected("alice") in [c.filename for c in plain.knowledge.search(q.text, "alice", k=5)]
        for q in corpus.queries
    )
    print(f"{len(corpus.notes)} items, {len(corpus.queries)} queries; ms per operation")
    names = list(next(iter(rows.values())))
    print(f"{'':30}" + "".join(f"{name:>12}" for name in names))
    base = rows["InMemoryStore (no index)"]
    for label, figures in rows.items():
        print(
            f"{label:30}"
            + "".join(f"{figures[n]:>12.3f}" if n != "top-5 hits" else f"{figures[n]:>12.0f}" for n in names)
        )
    for label in ("LocalMemoryStore (files)", "LocalMemoryStore (in memory)"):
        ratios = "  ".join(f"{n} x{rows[label][n] / base[n]:.1f}" for n in names if n != "top-5 hits")
        print(f"{label} / InMemoryStore: {ratios}")
    print(f"core knowledge search on the same texts as plain notes: {core_hits} top-5 hits")


if __name__ == "__main__":
    main()
