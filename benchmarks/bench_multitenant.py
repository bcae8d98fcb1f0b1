"""Many users on one PostgreSQL: loading, then several hosts answering random users' queries.

What a service for many end users runs: ``--users`` users with ``--notes`` notes each (real
text: 1-4 KB windows of the Python standard library's sources, docstrings and comments
included), written through ``memory.knowledge.write_note`` by 1, 2 and 4 writer processes,
then ``--hosts`` host processes (each its own ``Memory`` on the same database) asking BM25
queries for random users, with ``--write-share`` of the operations writing a note that the
user's next query on any other host must find.

Printed, in one run on an embedded PostgreSQL 18 (as the test suite starts it):

* load throughput through ``write_note`` with 1, 2 and 4 writers on the same sample of the users
  (each into a schema of its own), then every user with 4 writers, counted from the moment the
  writers are let go; beside each, how busy the machine's CPU was and whether any backend waited
  for a lock (writers of different users share no row: a load that scales no further is bound by
  the cores); and the per-note cost of the second and the last tenth of the full load (flat when
  nothing grows with the notes already stored);
* per host: query p50/p95/p99, a user's first query on that host (p50/p99), peak RSS against the
  number of users it served, and missed writes;
* the same queries answered by PostgreSQL's own full-text search (a ``tsvector`` column with a
  GIN index, ranked by ``ts_rank``: what a user would build instead), side by side, as ratios.

Then, on files: a folder with every user's notes, indexed, and fresh processes each asking one
random user's first query (ours beside reading that user's notes and ranking them with
rank_bm25), and whether any process loaded another user's index.

Defaults finish in a few minutes on 2 cores; ``--large`` is 1,000 users x 200 notes.

Run: ``.venv/bin/python benchmarks/bench_multitenant.py [--users 100 --notes 200 --hosts 4 --ops 1500]``
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import textwrap
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench_postgres import embedded_server  # the same embedded server as the files-vs-PostgreSQL benchmark

WORD = re.compile(r"[A-Za-z]{4,}")


def corpus(users: int, notes: int, seed: int = 7) -> list[tuple[str, str, str]]:
    """``(user, title, text)`` for every note: windows of 1-4 KB of the standard library's
    sources, each note's own, in a stable order (the same corpus on every run)."""
    rng = random.Random(seed)
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    sources = sorted(p for p in stdlib.rglob("*.py") if "test" not in p.parts and p.stat().st_size > 4096)
    texts = [p.read_text(encoding="utf-8", errors="replace") for p in sources]
    out: list[tuple[str, str, str]] = []
    for u in range(users):
        for n in range(notes):
            text = texts[rng.randrange(len(texts))]
            size = rng.randint(1024, 4096)
            start = rng.randrange(max(1, len(text) - size))
            out.append((f"user{u:04d}", f"note{n:03d}", f"# Note {n} of user {u}\n\n{text[start : start + size]}"))
    return out


def query_of(text: str, rng: random.Random) -> str:
    """Three words of a note's text: a query its user might ask."""
    words = WORD.findall(text) or ["python"]
    return " ".join(rng.choice(words) for _ in range(3))


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


# -- the processes -------------------------------------------------------------------------------
WRITER = textwrap.dedent(
    """
    import json, sys, time
    from local_ai_memory import Memory, MemoryConfig
    url, schema, root, path = sys.argv[1:5]
    notes = [tuple(line) for line in json.loads(open(path).read())]
    memory = Memory(MemoryConfig(database_url=url, database_schema=schema, runtime_data_dir=root, fsync=False))
    print("ready", flush=True)
    sys.stdin.readline()
    stamps = []
    for user, title, text in notes:
        memory.knowledge.write_note(user, title, text)
        stamps.append(time.perf_counter())
    memory.close()
    print(json.dumps(stamps), flush=True)
    """
)

HOST = textwrap.dedent(
    """
    import json, os, random, resource, sys, time
    url, schema, root, path, log, seed, ops, share, engine = sys.argv[1:10]
    rng = random.Random(int(seed))
    queries = json.loads(open(path).read())  # {user: [query, ...]}
    users = sorted(queries)
    me = f"host{seed}"
    if engine == "ours":
        from local_ai_memory import Memory, MemoryConfig

        memory = Memory(MemoryConfig(database_url=url, database_schema=schema, runtime_data_dir=root, fsync=False))

        def ask(user, query):
            return [hit.filename for hit in memory.knowledge.search(query, user, k=5)]

        def write(user, title, text):
            memory.knowledge.write_note(user, title, text)
    else:
        import psycopg

        conn = psycopg.connect(url, autocommit=True)
        conn.execute(f"SET search_path TO {schema}")

        def ask(user, query):
            rows = conn.execute(
                "SELECT name FROM fts WHERE owner = %s AND tsv @@ plainto_tsquery('english', %s)"
                " ORDER BY ts_rank(tsv, plainto_tsquery('english', %s)) DESC LIMIT 5",
                (user, query, query),
            ).fetchall()
            return [row[0] for row in rows]

        def write(user, title, text):
            conn.execute(
                "INSERT INTO fts (owner, name, tsv) VALUES (%s, %s, to_tsvector('english', %s))"
                " ON CONFLICT (owner, name) DO UPDATE SET tsv = EXCLUDED.tsv",
                (user, title, text),
            )
    print("ready", flush=True)
    sys.stdin.readline()
    seen_users, latencies, firsts, missed, checked, offset = set(), [], [], 0, 0, 0
    pending = {}  # user -> the newest token another host wrote for them
    with open(log, "a+", encoding="utf-8") as shared:
        for n in range(int(ops)):
            shared.seek(offset)
            for line in shared.readlines():
                if not line.endswith("\\n"):  # another host is writing it: read it next time
                    break
                offset += len(line.encode())
                host, user, token, title = line.split()
                if host != me:
                    pending[user] = (token, title)
            user = rng.choice(users)
            if rng.random() < float(share):
                token, title = f"zq{seed}x{n}tok", f"written-{me}-{n}"
                write(user, title, f"# Written on {me}\\n\\n{token} and more words")
                shared.write(f"{me} {user} {token} {title}\\n")
                shared.flush()
                continue
            written = pending.pop(user, None)
            query = written[0] if written is not None else rng.choice(queries[user])
            start = time.perf_counter()
            hits = ask(user, query)
            elapsed = (time.perf_counter() - start) * 1000
            (latencies if user in seen_users else firsts).append(elapsed)
            seen_users.add(user)
            if written is not None:  # another host wrote it: this query must find it
                checked += 1
                missed += not any(written[1] in hit for hit in hits)
    try:  # the peak of this process's own memory (ru_maxrss would keep the forking parent's peak)
        rss = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM")) / 1024
    except (OSError, StopIteration):
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"lat": latencies, "first": firsts, "rss": rss, "users": len(seen_users),
                      "missed": missed, "checked": checked}), flush=True)
    """
)


def run_processes(script: str, argv_list: list[list[str]], **settings: str) -> tuple[list[str], float]:
    """Start one process per argument list (``settings``: more environment), wait until all are
    ready, let them go together, and return each one's last line of output and the moment
    (``time.perf_counter()``) they were let go."""
    env = {**os.environ, "LOCAL_AI_MEMORY_AUTO_WATCH": "false", **settings}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, *argv],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for argv in argv_list
    ]
    for proc in procs:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        if line != "ready":
            raise RuntimeError(proc.stderr.read() if proc.stderr else "a process did not start")
    outs = []
    released = time.perf_counter()
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    for proc in procs:
        out, err = proc.communicate(timeout=7200)
        if proc.returncode != 0:
            raise RuntimeError(err[-3000:])
        outs.append(out.strip().splitlines()[-1])
    return outs, released


@dataclass
class Load:
    """One load's figures: each write's time in seconds from the moment the writers were let go
    (their start-up and imports left out), the machine's CPU busy share meanwhile (``None``
    where ``/proc/stat`` is not there), and how many of the samples of ``pg_stat_activity``
    taken meanwhile saw a backend waiting for a lock."""

    stamps: list[float]
    busy: float | None
    lock_waits: int
    samples: int

    @property
    def rate(self) -> float:
        return len(self.stamps) / self.stamps[-1]


def cpu_ticks() -> tuple[int, int] | None:
    """``(busy, total)`` CPU ticks of the whole machine since boot (Linux), or ``None``."""
    try:
        values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    return sum(values) - values[3] - values[4], sum(values)  # idle and iowait are not busy


def load(url: str, schema: str, work: Path, notes: list[tuple[str, str, str]], writers: int) -> Load:
    """Load ``notes`` with ``writers`` processes (users split between them), watching the
    machine's CPU and the database's lock waits while they write."""
    import psycopg

    users = sorted({user for user, _, _ in notes})
    shares = [set(users[w::writers]) for w in range(writers)]
    argv = []
    for w, mine in enumerate(shares):
        path = work / f"load-{schema}-{w}.json"
        path.write_text(json.dumps([n for n in notes if n[0] in mine]))
        argv.append([url, schema, str(work / f"root-{schema}-{w}"), str(path)])
    done = threading.Event()
    seen = [0, 0]  # samples with a lock wait, samples

    def watch() -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            while not done.wait(0.05):
                row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'").fetchone()
                seen[0] += bool(row and row[0])
                seen[1] += 1

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    before = cpu_ticks()
    outs, released = run_processes(WRITER, argv)
    after = cpu_ticks()
    done.set()
    watcher.join()
    busy = (after[0] - before[0]) / (after[1] - before[1]) if before and after and after[1] > before[1] else None
    stamps = sorted(t - released for out in outs for t in json.loads(out))
    return Load(stamps, busy, seen[0], seen[1])


def fill_fts(url: str, schema: str, notes: list[tuple[str, str, str]]) -> None:
    """The baseline: the same notes in a table with a ``tsvector`` column and a GIN index."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
        conn.execute(f"SET search_path TO {schema}")
        conn.execute("CREATE TABLE fts (owner text, name text, tsv tsvector, PRIMARY KEY (owner, name))")
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO fts VALUES (%s, %s, to_tsvector('english', %s))",
                [(user, title, text) for user, title, text in notes],
            )
        conn.execute("CREATE INDEX fts_tsv ON fts USING gin (tsv)")
        conn.execute("ANALYZE fts")


def serve(
    url: str, schema: str, work: Path, queries: dict[str, list[str]], args: argparse.Namespace, engine: str
) -> list[dict[str, float]]:
    path = work / f"queries-{engine}.json"
    path.write_text(json.dumps(queries))
    log = work / f"written-{engine}.log"
    log.write_text("")
    argv = [
        [
            url,
            schema,
            str(work / f"host-{engine}-{h}"),
            str(path),
            str(log),
            str(h),
            str(args.ops),
            str(args.write_share),
            engine,
        ]
        for h in range(args.hosts)
    ]
    settings = {"LOCAL_AI_MEMORY_OWNER_CACHE_MB": str(args.cache_mb)} if args.cache_mb else {}
    return [json.loads(out) for out in run_processes(HOST, argv, **settings)[0]]


FIRST_QUERY = textwrap.dedent(
    """
    import json, sys, time
    start = time.perf_counter()
    root, user, query, engine = sys.argv[1:5]
    if engine == "ours":
        from local_ai_memory import Memory, MemoryConfig

        memory = Memory(MemoryConfig(runtime_data_dir=root, fsync=False, auto_watch=False))
        opened = time.perf_counter()
        hits = [hit.filename for hit in memory.knowledge.search(query, user, k=5)]
        loaded = sorted(p.index.owner for p in memory.knowledge.store._parts.held())
    else:  # what a user would write instead: read the user's notes, rank them with rank_bm25
        from pathlib import Path

        from rank_bm25 import BM25Okapi

        opened = time.perf_counter()
        files = sorted((Path(root) / "memory_data" / "knowledge").glob(f"{user}_*.md"))
        docs = [f.read_text(encoding="utf-8").lower().split() for f in files]
        scores = BM25Okapi(docs).get_scores(query.lower().split())
        hits = [files[i].name for i in sorted(range(len(files)), key=lambda i: -scores[i])[:5]]
        loaded = [user]
    done = time.perf_counter()
    print(json.dumps({"open": opened - start, "first": done - opened, "hits": hits, "loaded": loaded}))
    """
)


def files_first_queries(work: Path, notes: list[tuple[str, str, str]], trials: int) -> None:
    """A folder of every user's notes, indexed; then fresh processes each asking one random
    user's first query: ours (``Memory.open`` then ``search``) beside reading that user's notes
    and ranking them with rank_bm25, as ratios."""
    from local_ai_memory import Memory, MemoryConfig

    root = work / "files"
    folder = root / "memory_data" / "knowledge"
    folder.mkdir(parents=True)
    for user, title, text in notes:
        (folder / f"{user}_{title}.md").write_text(text, encoding="utf-8")
    start = time.perf_counter()
    with Memory(MemoryConfig(runtime_data_dir=root, fsync=False, auto_watch=False)) as memory:
        memory.knowledge.build_index()
    built = time.perf_counter() - start
    print(f"\nfiles: {len(notes):,} notes in one folder, indexed in {built:.0f} s; a user's first query"
          " in a new process (the query after opening the memory):")  # fmt: skip
    rng = random.Random(11)
    by_user: dict[str, list[str]] = {}
    for user, _, text in notes:
        by_user.setdefault(user, []).append(text)
    times: dict[str, list[float]] = {"ours": [], "rank_bm25": []}
    foreign = 0
    for _ in range(trials):
        user = rng.choice(sorted(by_user))
        query = query_of(rng.choice(by_user[user]), rng)
        for engine in ("ours", "rank_bm25"):
            out = subprocess.run(
                [sys.executable, "-c", FIRST_QUERY, str(root), user, query, engine],
                capture_output=True, text=True, timeout=300, check=True,
            )  # fmt: skip
            result = json.loads(out.stdout.strip().splitlines()[-1])
            times[engine].append(result["first"] * 1000)
            foreign += engine == "ours" and result["loaded"] != [user]
    ours, peer = statistics.median(times["ours"]), statistics.median(times["rank_bm25"])
    print(f"  ours p50 {ours:.1f} ms (max {max(times['ours']):.1f}), rank_bm25 over the user's files p50 {peer:.1f} ms:"
          f" {ours / peer:.2f}x; processes that loaded another user's index: {foreign} of {trials}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=100)
    parser.add_argument("--notes", type=int, default=200, help="notes per user")
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--ops", type=int, default=1500, help="operations per host")
    parser.add_argument("--write-share", type=float, default=0.1)
    parser.add_argument("--sample-users", type=int, default=20, help="users loaded by the 1- and 2-writer runs")
    parser.add_argument("--large", action="store_true", help="1,000 users x 200 notes")
    parser.add_argument("--url", default="", help="a PostgreSQL URL (default: start an embedded server)")
    parser.add_argument("--files-trials", type=int, default=12, help="new processes asking a first query on files")
    parser.add_argument("--skip-postgres", action="store_true", help="only the files part")
    parser.add_argument("--cache-mb", type=float, default=0, help="the hosts' owner_cache_mb (0: the default)")
    args = parser.parse_args()
    if args.large:
        args.users, args.notes = 1000, 200
    work = Path(tempfile.mkdtemp(prefix="laim-multitenant-"))
    stop: Callable[[], None] = lambda: None  # noqa: E731
    try:
        notes = corpus(args.users, args.notes)
        print(f"{args.users} users x {args.notes} notes = {len(notes):,} notes of stdlib text; {args.hosts} hosts")
        if args.files_trials:
            files_first_queries(work, notes, args.files_trials)
        if args.skip_postgres:
            return
        url = args.url
        if not url:
            url, stop = embedded_server(work / "pg")
        sample = [n for n in notes if int(n[0][4:]) < args.sample_users]
        loads = {writers: load(url, f"bench_{uuid.uuid4().hex[:8]}", work, sample, writers) for writers in (1, 2, 4)}
        schema = f"bench_{uuid.uuid4().hex[:8]}"
        full = load(url, schema, work, notes, 4)
        stamps = full.stamps
        tenth = max(1, len(stamps) // 10)
        first = (stamps[2 * tenth - 1] - stamps[tenth - 1]) / tenth  # the second tenth: past the first writes
        last = (stamps[-1] - stamps[-tenth - 1]) / tenth
        cores = os.cpu_count() or 1
        print(f"\nloading through write_note (notes/s, from the moment the writers are let go; {cores} cores):")
        for label, done in [(f"{w} writer{'s' * (w > 1)}", d) for w, d in loads.items()] + [("4, all notes", full)]:
            busy = f"{done.busy * 100:3.0f}%" if done.busy is not None else "  ?"
            base = (
                f"{len(sample):,} notes of {args.sample_users} users" if done is not full else f"{len(notes):,} notes"
            )
            print(f"  {label:<13} {done.rate:8.1f}  ({done.rate / loads[1].rate:.2f}x one writer; {base};"
                  f" machine CPU busy {busy}; lock waits in {done.lock_waits} of {done.samples} samples)")  # fmt: skip
        print(f"  per-note cost, second tenth {first * 1000:.2f} ms, last tenth {last * 1000:.2f} ms"
              f" ({last / first:.2f}x)")  # fmt: skip

        rng = random.Random(3)
        queries: dict[str, list[str]] = {}
        for user, _, text in notes:
            if len(queries.setdefault(user, [])) < 20 and rng.random() < 0.2:
                queries[user].append(query_of(text, rng))
        fts_schema = f"fts_{uuid.uuid4().hex[:8]}"
        fill_fts(url, fts_schema, notes)
        results = {"ours": serve(url, schema, work, queries, args, "ours")}
        results["fts"] = serve(url, fts_schema, work, queries, args, "fts")
        print("\nqueries (ms), per host:")
        print(f"  {'engine':<8} {'host':>4} {'p50':>7} {'p95':>7} {'p99':>7} {'1st p50':>8} {'1st p99':>8}"
              f" {'RSS MB':>7} {'users':>6} {'missed':>7}")  # fmt: skip
        summary: dict[str, dict[str, float]] = {}
        for engine, hosts in results.items():
            every, firsts = [], []
            for h, r in enumerate(hosts):
                lat, fst = r["lat"], r["first"]
                every += lat
                firsts += fst
                print(f"  {engine:<8} {h:>4} {percentile(lat, 50):7.2f} {percentile(lat, 95):7.2f}"
                      f" {percentile(lat, 99):7.2f} {percentile(fst, 50):8.2f} {percentile(fst, 99):8.2f}"
                      f" {r['rss']:7.0f} {r['users']:>6} {r['missed']:>3}/{r['checked']:<3}")  # fmt: skip
            summary[engine] = {
                "p50": percentile(every, 50),
                "p99": percentile(every, 99),
                "first99": percentile(firsts, 99),
            }
        ours, fts = summary["ours"], summary["fts"]
        print("\nours / PostgreSQL full-text search (below 1: ours is faster):")
        print(f"  p50 {ours['p50']:.2f} / {fts['p50']:.2f} ms = {ours['p50'] / fts['p50']:.2f}x;"
              f" p99 {ours['p99']:.2f} / {fts['p99']:.2f} ms = {ours['p99'] / fts['p99']:.2f}x;"
              f" a user's first query p99 {ours['first99']:.2f} / {fts['first99']:.2f} ms"
              f" = {ours['first99'] / fts['first99']:.2f}x")  # fmt: skip
        print(f"  (median of {statistics.median(len(r['lat']) for r in results['ours']):.0f} warm queries per host)")
    finally:
        stop()
        shutil.rmtree(work, ignore_errors=True)  # the --large folders take gigabytes


if __name__ == "__main__":
    main()
