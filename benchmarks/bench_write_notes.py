"""Bulk loading: ``knowledge.write_notes`` against ``write_note`` in a loop, on files and PostgreSQL.

Loads ``--users`` new tenants of ``--notes`` notes each (real text: 1-4 KB windows of the
standard library's sources, as ``bench_multitenant.py`` makes them) twice into empty stores:
once one note at a time through ``memory.knowledge.write_note``, once each user's notes in
batches of ``--batch`` through ``memory.knowledge.write_notes``; on files (fsync on, as
configured by default) and on an embedded PostgreSQL (or ``--url``). Prints notes/s of each and
the ratio, then checks that a search finds a sample of the notes either way.

Run: ``.venv/bin/python benchmarks/bench_write_notes.py [--users 10 --notes 200 --batch 200]``
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from bench_multitenant import corpus, query_of
from bench_postgres import embedded_server

from local_ai_memory import Memory, MemoryConfig


def load(memory: Memory, notes: list[tuple[str, str, str]], batch: int) -> float:
    """Seconds to store ``notes`` (``batch`` 0: one ``write_note`` each)."""
    start = time.perf_counter()
    if batch == 0:
        for user, title, text in notes:
            memory.knowledge.write_note(user, title, text)
    else:
        by_user: dict[str, dict[str, str]] = {}
        for user, title, text in notes:
            by_user.setdefault(user, {})[title] = text
        for user, mine in by_user.items():
            titles = list(mine)
            for at in range(0, len(titles), batch):
                memory.knowledge.write_notes(user, {title: mine[title] for title in titles[at : at + batch]})
    return time.perf_counter() - start


def found(memory: Memory, notes: list[tuple[str, str, str]]) -> str:
    """How many of 50 sampled notes a search of three of their words finds in its top 10."""
    rng = random.Random(3)
    sample = rng.sample(notes, min(50, len(notes)))
    hits = sum(
        f"{user}_{title}.md" in [hit.filename for hit in memory.knowledge.search(query_of(text, rng), user, k=10)]
        for user, title, text in sample
    )
    return f"{hits}/{len(sample)}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=10)
    parser.add_argument("--notes", type=int, default=200)
    parser.add_argument("--batch", type=int, default=200)
    parser.add_argument("--url", default="", help="a PostgreSQL URL (default: start an embedded server)")
    args = parser.parse_args()
    notes = corpus(args.users, args.notes)
    work = Path(tempfile.mkdtemp(prefix="laim-bulk-"))
    stop: Callable[[], None] = lambda: None  # noqa: E731
    try:
        url = args.url
        if not url:
            url, stop = embedded_server(work / "pg")
        print(f"{len(notes)} notes of {args.users} users; write_notes batches of {args.batch}")
        print(f"{'backend':<12}{'write_note/s':>14}{'write_notes/s':>15}{'ratio':>8}  found (loop, batch)")
        for backend in ("files", "postgres"):
            rates: list[float] = []
            hits: list[str] = []
            for batch in (0, args.batch):
                tag = uuid.uuid4().hex[:8]
                if backend == "files":
                    config = MemoryConfig(runtime_data_dir=work / f"files_{tag}")
                else:
                    config = MemoryConfig(
                        database_url=url, database_schema=f"bulk_{tag}", runtime_data_dir=work / f"rt_{tag}"
                    )
                with Memory(config) as memory:
                    rates.append(len(notes) / load(memory, notes, batch))
                    hits.append(found(memory, notes))
            print(f"{backend:<12}{rates[0]:>14.0f}{rates[1]:>15.0f}{rates[1] / rates[0]:>7.1f}x  {hits[0]}, {hits[1]}")
    finally:
        stop()


if __name__ == "__main__":
    main()
