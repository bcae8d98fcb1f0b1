"""Index-time throughput: notes/s and passages/s, BM25 only against hybrid, on real man pages.

Indexes ``--notes`` man pages (``manpages.py``: the natural-question corpus, relevant pages first)
for one user into a fresh folder three ways, in one run. Above the pages installed (about 2,150
here), the rest are numbered copies of them (the first line changed, so every text differs):

* BM25 only (``search_mode="bm25"``): what ``index`` costs without embedding;
* hybrid with a stand-in embedder (a unit vector from a hash of each text): everything hybrid
  indexing adds except the model — cutting passages, the vector cache, the passage map;
* hybrid with the real all-MiniLM-L6-v2 (ONNX Runtime, one thread) on the first
  ``--model-notes`` notes only (the model is the whole cost; a full 2,000-note run takes close
  to an hour on a loaded 2-core machine).

Printed: seconds, notes/s, passages/s, passages per note, the passage map and vector cache
sizes on disk.

    python benchmarks/bench_index_throughput.py --notes 2000 --model-notes 100
    python benchmarks/bench_index_throughput.py --notes 10000 --model-notes 0
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import manpages

from local_ai_memory import MemoryConfig, MemoryStore, close_shared_stores
from local_ai_memory._shared.naming import DirectoryGuard
from local_ai_memory.backends import FileKnowledgeBackend

USER = "bench"


class StandIn:
    """A unit vector from a hash of each text: the cost of hybrid indexing without the model."""

    model_name = "stand-in-v1"
    dimension = 384

    def __init__(self) -> None:
        self.texts = 0

    def embed(self, texts: list[str]) -> list[list[float]]:
        self.texts += len(texts)
        out = []
        for text in texts:
            seed = int.from_bytes(hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()[:8], "little")
            vector = np.random.default_rng(seed).standard_normal(self.dimension)
            out.append((vector / np.linalg.norm(vector)).tolist())
        return out

    async def aembed(self, texts: list[str]) -> list[list[float]]:
        return self.embed(texts)


class Counting:
    """The real embedder, counting the texts it embeds."""

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.model_name = getattr(inner, "model_name", "model")
        self.dimension = 384
        self.texts = 0

    def embed(self, texts: list[str]) -> list[list[float]]:
        self.texts += len(texts)
        return self.inner.embed(texts)  # type: ignore[attr-defined,no-any-return]

    async def aembed(self, texts: list[str]) -> list[list[float]]:
        return self.embed(texts)


def size_of(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) if folder.exists() else 0


def run(label: str, notes: dict[str, str], mode: str, embedder: object | None) -> None:
    with tempfile.TemporaryDirectory(prefix="lam-throughput-") as tmp:
        folder = Path(tmp)
        config = MemoryConfig(runtime_data_dir=folder, search_mode=mode, fsync=False, auto_watch=False)  # type: ignore[arg-type]
        store = MemoryStore(FileKnowledgeBackend(DirectoryGuard(folder), config), config, embedder=embedder)  # type: ignore[arg-type]
        target = folder / "memory_data" / "knowledge"
        target.mkdir(parents=True)
        for page, text in notes.items():
            (target / f"{USER}_{manpages.note_name(page)}.md").write_text(text, encoding="utf-8")
        started = time.perf_counter()
        cpu = time.process_time()
        count = store.populate_index_from_files(USER)
        seconds = time.perf_counter() - started
        cpu = time.process_time() - cpu
        passages = getattr(embedder, "texts", 0)
        data = folder / "memory_data"
        maps, vectors = size_of(data / ".passages"), size_of(data / ".embeddings")
        close_shared_stores()
    rate = f"{passages / seconds:.1f}" if passages else "-"
    per = f"{passages / max(1, count):.1f}" if passages else "-"
    print(
        f"| {label} | {count} | {seconds:.1f} | {cpu:.1f} | {count / seconds:.1f} | {rate} | {per} "
        f"| {maps / 1e6:.2f} | {vectors / 1e6:.1f} |",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--notes", type=int, default=2000)
    parser.add_argument("--model-notes", type=int, default=100, help="notes indexed with the real model (0: none)")
    args = parser.parse_args()
    notes = manpages.with_copies(manpages.corpus(args.notes, manpages.relevant_pages()), args.notes)
    words = sum(len(t.split()) for t in notes.values())
    print(f"\nIndex throughput, {len(notes)} man pages ({words} words), load {os.getloadavg()[0]:.1f}\n")
    print("| indexing | notes | wall s | CPU s | notes/s | passages/s | passages/note | map MB | vectors MB |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    run("BM25 only", notes, "bm25", None)
    run("hybrid, stand-in vectors (no model)", notes, "hybrid", StandIn())
    if args.model_notes > 0:
        from local_ai_memory._models.onnx_file import local_embedder

        subset = dict(list(notes.items())[: args.model_notes])
        run(f"BM25 only, first {len(subset)}", subset, "bm25", None)
        run(f"hybrid, MiniLM (ONNX, 1 thread), first {len(subset)}", subset, "hybrid", Counting(local_embedder()))


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main()
