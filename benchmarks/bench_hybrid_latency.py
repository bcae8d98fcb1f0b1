"""Hybrid Stage 1 latency at scale, warm and from the command line (all-MiniLM-L6-v2 offline).

Warm (default): builds ``--notes`` notes for one user from the standard-library sample corpus
(each sample note repeated with a numbered title, so texts differ), indexes them in hybrid mode
(passages embedded at index time) and times ``hybrid_candidates`` against plain BM25
``search`` in the same run, interleaved, on the held-out queries. Queries are embedded by the
real model through ONNX Runtime (:class:`OnnxModelEmbedder`, no torch). With ``--stand-in``
(the default above 2,000 notes) the notes' passage vectors are stand-ins (random unit vectors
from a hash of the text): a query's cost does not depend on their values, and embedding 10k
notes' ~40k passages with the real model takes longer than this machine has; index-time
throughput with the real model is measured by ``bench_natural_questions.py``. CPU time of the
calling thread is printed beside wall time. The hybrid line is split into its parts, each timed
alone on the same queries: the query embedding (ONNX: the full model, the default, and the
opt-in int8 query model), the dense scoring (as shipped: whole-note vectors first, best passage
within a shortlist; and the product over every passage it replaced) and the BM25 answers it
reads (its pool, or ``search.BM25_DEPTH`` when more); what is left of the hybrid line is the
fusion and the bookkeeping.

CLI (``--cli DATA_DIR``): runs ``local-ai-memory search --mode hybrid`` as a new process
``--runs`` times over an indexed data folder, after one untimed run that writes the bytecode
caches (into ``$PYTHONPYCACHEPREFIX`` or a temporary folder, as ``bench_cli_startup.py`` does),
and prints wall and CPU p50/p95 end to end, and whether the process imported torch.

    python benchmarks/bench_hybrid_latency.py --notes 10000
    python benchmarks/bench_hybrid_latency.py --cli ~/.cache/local-ai-memory-bench/nq-2000 --user bench
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from local_ai_memory import MemoryConfig, MemoryStore, close_shared_stores
from local_ai_memory._knowledge.search import BM25_DEPTH
from local_ai_memory._models.onnx_file import OnnxModelEmbedder, export_model
from local_ai_memory._shared.blas import one_blas_thread
from local_ai_memory._shared.naming import DirectoryGuard
from local_ai_memory.backends import FileKnowledgeBackend
from local_ai_memory.samples import build_corpus

USER = "bench"


def _percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered) * 1000, ordered[int(0.95 * (len(ordered) - 1))] * 1000


class StandIn:
    """Real MiniLM (ONNX) for short calls (queries), hash-seeded unit vectors for batches."""

    model_name = "stand-in-minilm-384"
    dimension = 384

    def __init__(self) -> None:
        self.real = OnnxModelEmbedder()

    def embed(self, texts: list[str]) -> list[list[float]]:
        if len(texts) <= 8:
            return self.real.embed(texts)
        out = []
        for text in texts:
            seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
            vector = np.random.default_rng(seed).standard_normal(384).astype(np.float32)
            out.append((vector / np.linalg.norm(vector)).tolist())
        return out

    async def aembed(self, texts: list[str]) -> list[list[float]]:
        return self.embed(texts)

    def embed_query(self, text: str) -> list[float]:
        return self.real.embed_query(text)  # as shipped: the full model


def warm(notes: int, stand_in: bool) -> None:
    corpus = build_corpus()
    queries = [query.text for query in corpus.queries][:100]
    embedder: object = StandIn() if stand_in else OnnxModelEmbedder()
    with tempfile.TemporaryDirectory() as tmp:
        config = MemoryConfig(runtime_data_dir=Path(tmp), search_mode="hybrid", fsync=False)
        store = MemoryStore(FileKnowledgeBackend(DirectoryGuard(Path(tmp)), config), config, embedder=embedder)  # type: ignore[arg-type]
        for number in range(notes):
            note = corpus.notes[number % len(corpus.notes)]
            text = note.text.replace("\n", f" (copy {number})\n", 1)
            store.backend.write_note("knowledge", f"{USER}_{note.stem}-{number}.md", text.encode())
        plain_config = config.replace(search_mode="bm25")
        plain = MemoryStore(
            FileKnowledgeBackend(DirectoryGuard(Path(tmp)), plain_config), plain_config, embedder=embedder
        )  # type: ignore[arg-type]
        started = time.perf_counter()
        plain.populate_index_from_files(USER)  # BM25 mode: no embedding
        bm25_only = time.perf_counter() - started
        started = time.perf_counter()
        store.populate_index_from_files(USER)  # hybrid mode: embeds the passages too
        indexed = time.perf_counter() - started
        dense = store._dense()
        passages = len(dense.digests_of_user(USER, ["knowledge"])) if dense is not None else 0
        time.sleep(1.0)  # the store's own watcher (on by default) is running by now: no per-query listing
        for query in queries[:5]:  # warm-up: model, matrices, rankers
            store.hybrid_candidates(query, 5, user_id=USER)
            store.search(query, 5, user_id=USER)
        real = embedder.real if isinstance(embedder, StandIn) else embedder
        quick = OnnxModelEmbedder(quantized_queries=True)
        inputs = store._hybrid_inputs(USER, None)
        assert inputs is not None
        matrix, cache = inputs
        vector = cache.embed_query("a query vector for the dense line")
        pool = store._hybrid_plan(5, None)[1]
        depth = max(pool, BM25_DEPTH)  # the BM25 answers a hybrid query reads
        calls = {
            "BM25": lambda query: store.search(query, 5, user_id=USER),
            "hybrid": lambda query: store.hybrid_candidates(query, 5, user_id=USER),
            "query embedding alone (ONNX, full model, shipped)": real.embed_query,  # type: ignore[attr-defined]
            "query embedding by the int8 query model (opt-in)": quick.embed_query,
            "dense scoring alone, shortlist (shipped)": lambda query: matrix.pool_scores(vector, pool),
            "dense scoring, every passage (before)": lambda query: matrix.note_scores(vector),
            f"BM25 answers of the hybrid (top {depth})": lambda query: store.search(query, depth, user_id=USER),
        }
        timings: dict[str, list[tuple[float, float]]] = {name: [] for name in calls}
        with one_blas_thread():  # as the hybrid query runs its product (the parts alone too)
            for query in queries:  # interleaved, so load on the machine hits every line alike
                for name, call in calls.items():
                    wall, cpu = time.perf_counter(), time.thread_time()
                    call(query)
                    timings[name].append((time.perf_counter() - wall, time.thread_time() - cpu))
        close_shared_stores()
    kind = "stand-in vectors" if stand_in else "MiniLM"
    print(f"{notes} notes, {passages} passages ({kind})")
    print(f"index without hybrid: {bm25_only:.1f} s ({notes / bm25_only:.0f} notes/s)")
    print(f"index with hybrid: {indexed:.1f} s ({notes / indexed:.0f} notes/s, {passages / indexed:.0f} passages/s)")
    bm25_p50, _ = _percentiles([wall for wall, _ in timings["BM25"]])
    print("| call | wall p50 / p95 ms | CPU p50 / p95 ms | wall p50 / BM25's |\n|---|---|---|---|")
    for name, samples in timings.items():
        p50, p95 = _percentiles([wall for wall, _ in samples])
        cpu50, cpu95 = _percentiles([cpu for _, cpu in samples])
        print(f"| {name} | {p50:.2f} / {p95:.2f} | {cpu50:.2f} / {cpu95:.2f} | {p50 / bm25_p50:.1f}x |")
    rows, dims = matrix.matrix.shape
    print(
        f"dense matrix: {rows} passages x {dims} ({matrix.matrix.nbytes / 1e6:.0f} MB, read whole by the "
        f"every-passage scoring; the shortlist reads the {matrix.means.nbytes / 1e6:.0f} MB of whole-note vectors "
        "and its notes' rows)"
    )


def cli(data: Path, user: str, runs: int) -> None:
    queries = [
        "count the lines of a file",
        "keep a program running after logout",
        "show free disk space",
        "change the owner of a file",
        "list open network ports",
    ]
    probe = (
        "import sys, json\nfrom local_ai_memory.cli import main\n"
        "sys.argv = ['local-ai-memory', 'search', sys.argv[1], '-u', sys.argv[2], '-d', sys.argv[3], "
        "'--mode', 'hybrid', '--json']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print('torch loaded:', 'torch' in sys.modules, file=sys.stderr)\n"
    )
    walls: list[float] = []
    cpus: list[float] = []  # the child's user + system CPU: leaves out waiting for a busy machine's cores
    torch_seen = set()
    # bytecode cached as an installed package has it (PYTHONDONTWRITEBYTECODE would compile every run)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = env.get("PYTHONPYCACHEPREFIX") or tempfile.mkdtemp(prefix="lam-pycache-")
    warm_up = [sys.executable, "-c", probe, queries[0], user, str(data)]
    subprocess.run(warm_up, env=env, capture_output=True, check=False)
    for run in range(runs):
        query = queries[run % len(queries)]
        started = time.perf_counter()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run(
            [sys.executable, "-c", probe, query, user, str(data)], env=env, capture_output=True, text=True, check=False
        )
        walls.append(time.perf_counter() - started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        if done.returncode != 0:
            print(done.stderr, file=sys.stderr)
            raise SystemExit(1)
        torch_seen.add("torch loaded: True" in done.stderr)
        if run == 0:
            print("first answer:", [hit["filename"] for hit in json.loads(done.stdout)][:5])
    p50, p95 = _percentiles(walls)
    cpu50, cpu95 = _percentiles(cpus)
    print(f"CLI hybrid search, new process each ({runs} runs): wall p50 {p50:.0f} ms, p95 {p95:.0f} ms")
    print(f"  CPU (user + system) p50 {cpu50:.0f} ms, p95 {cpu95:.0f} ms")
    print(f"torch imported: {sorted(torch_seen)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--notes", type=int, default=10_000)
    parser.add_argument("--stand-in", choices=["auto", "yes", "no"], default="auto")
    parser.add_argument("--cli", type=Path, default=None, help="time the CLI over this indexed data folder")
    parser.add_argument("--user", default=USER)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    if args.cli is not None:
        cli(args.cli, args.user, args.runs)
    else:
        stand_in = args.stand_in == "yes" or (args.stand_in == "auto" and args.notes > 2000)
        export_model()  # once per machine (torch, about a minute); a no-op when the export is there
        warm(args.notes, stand_in)
    print(f"\nload average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
