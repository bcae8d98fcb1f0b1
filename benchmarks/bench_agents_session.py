"""What an OpenAI Agents SDK session costs per call: ``LocalMemorySession`` beside ``SQLiteSession``.

One run, the same items for both (a realistic mix: user and assistant messages, function calls
and their outputs), each session on its own file in a temporary folder:

* ``add_items`` of one turn (4 items), repeated until the session holds ``--items`` items;
* ``get_items()`` (the whole history) and ``get_items(limit=10)`` on the full session;
* ``pop_item`` (the SDK's "undo the last item").

Prints the median per call and the ratio LocalMemorySession / SQLiteSession for each. Both run
with their durability defaults unless ``--no-fsync`` (our files then skip fsync; SQLite keeps
its WAL defaults).

Run: ``.venv/bin/python benchmarks/bench_agents_session.py [--items 200] [--no-fsync]``
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from agents import SQLiteSession
from local_ai_memory_openai_agents import LocalMemorySession

from local_ai_memory import Memory


def turn(number: int) -> list[Any]:
    """One turn's items: a question, a tool call, its output, an answer."""
    call = f"call-{number}"
    return [
        {"role": "user", "content": f"Question {number}: what does the log say about request {number}?"},
        {"type": "function_call", "call_id": call, "name": "read_log", "arguments": f'{{"request": {number}}}'},
        {"type": "function_call_output", "call_id": call, "output": f"12:{number % 60:02d} INFO request served " * 8},
        {
            "type": "message",
            "role": "assistant",
            "id": f"msg-{number}",
            "status": "completed",
            "content": [{"type": "output_text", "text": f"Request {number} was served.", "annotations": []}],
        },
    ]


async def timed(call: Callable[[], Awaitable[Any]], repeat: int) -> float:
    """Median seconds of ``repeat`` awaits of ``call()``."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        await call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


async def measure(session: Any, items: int) -> dict[str, float]:
    turns = items // 4
    adds = []
    for number in range(turns):
        batch = turn(number)
        start = time.perf_counter()
        await session.add_items(batch)
        adds.append(time.perf_counter() - start)
    results = {"add_items (one turn)": statistics.median(adds)}
    results["get_items()"] = await timed(session.get_items, 20)
    results["get_items(limit=10)"] = await timed(lambda: session.get_items(limit=10), 20)
    pops = []
    for _ in range(20):
        start = time.perf_counter()
        await session.pop_item()
        pops.append(time.perf_counter() - start)
    results["pop_item"] = statistics.median(pops)
    return results


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=200)
    parser.add_argument("--no-fsync", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        with Memory.open(root / "memory", fsync=not args.no_fsync) as memory:
            ours = await measure(LocalMemorySession(memory, "alice", "bench"), args.items)
        sqlite = SQLiteSession("bench", root / "sessions.db")
        try:
            theirs = await measure(sqlite, args.items)
        finally:
            sqlite.close()
    print(f"{args.items} items, fsync {'off' if args.no_fsync else 'on'}; median per call")
    print(f"{'operation':<24}{'LocalMemorySession':>20}{'SQLiteSession':>16}{'ratio':>8}")
    for name, value in ours.items():
        other = theirs[name]
        print(f"{name:<24}{value * 1000:>17.2f} ms{other * 1000:>13.2f} ms{value / other:>8.1f}")


if __name__ == "__main__":
    asyncio.run(main())
