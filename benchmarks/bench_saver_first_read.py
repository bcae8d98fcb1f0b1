"""The first ``get_state`` of a long LangGraph thread in a new process: ``LocalMemorySaver`` beside ``SqliteSaver``.

What a resumed agent pays first (issue 41): a scripted ``create_agent`` thread of ``--steps``
model steps, each adding a ~2 KB AI message (a tool call whose arguments are ~2 KB) and a ~2 KB
tool message, so at 1,000 steps the state holds 2,001 messages (~4 MB). Then, in ``--runs``
new processes one after another, the saver is opened, the graph compiled and one
``get_state`` timed (wall and CPU); the medians are printed, and the ratio to ``SqliteSaver``
(langgraph-checkpoint-sqlite) measured in the same run, so a shared machine's load cancels out.

``LocalMemorySaver`` runs as shipped (files, fsync on, ``durability="sync"``: every step's
checkpoint stored, the log and its snapshots as a user's thread has them). ``SqliteSaver``'s
first read looks up the newest checkpoint by its index whatever came before, so its thread is
written with ``durability="exit"`` (only the final checkpoint): storing every step whole would
take gigabytes at 4 KB a step, and would not change what its read does.

``--profile`` prints the top of a cProfile of one fresh ``LocalMemorySaver`` read.

Run: ``.venv/bin/python benchmarks/bench_saver_first_read.py [--steps 1000] [--runs 7]``
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool

ARGUMENT = "account balance and the last transfers of the ledger, " * 37  # ~2 KB of tool-call arguments
OUTPUT = "The lookup found these lines of the ledger, one per transfer. " * 33  # ~2 KB of tool output


class ScriptedModel(GenericFakeChatModel):
    """``GenericFakeChatModel`` that accepts tools (create_agent binds them; the script ignores them)."""

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        return self


def _script(steps: int) -> Iterator[AIMessage]:
    for n in range(1, steps):
        args = {"query": f"entry {n}: {ARGUMENT}"}
        yield AIMessage("", tool_calls=[{"name": "lookup", "args": args, "id": f"call-{n}"}], id=f"ai-{n}")
    yield AIMessage("All entries are looked up.", id=f"ai-{steps}")


def _agent(checkpointer: Any, steps: int) -> Any:
    @tool
    def lookup(query: str) -> str:
        """Look an entry up in the ledger."""
        return f"{query[:12]} {OUTPUT}"

    return create_agent(ScriptedModel(messages=_script(steps)), tools=[lookup], checkpointer=checkpointer)


def _saver(kind: str, root: Path) -> tuple[Any, Any]:
    """The saver of ``kind`` over ``root`` and what closes it."""
    if kind == "ours":
        from langchain_local_ai_memory import LocalMemorySaver

        from local_ai_memory import Memory

        memory = Memory.open(root / "ours", fsync=True)
        return LocalMemorySaver(memory, user_id="bench"), memory
    from langgraph.checkpoint.sqlite import SqliteSaver

    connection = sqlite3.connect(root / "checkpoints.sqlite", check_same_thread=False)
    return SqliteSaver(connection), connection


def _child(kind: str, root: Path, steps: int, profile: bool) -> None:
    saver, closer = _saver(kind, root)
    agent = _agent(saver, steps)
    thread = {"configurable": {"thread_id": "t1"}}
    profiler = None
    if profile:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    start, cpu = time.perf_counter(), time.process_time()
    state = agent.get_state(thread)
    wall, cpu = (time.perf_counter() - start) * 1000, (time.process_time() - cpu) * 1000
    if profiler is not None:
        import pstats

        profiler.disable()
        pstats.Stats(profiler, stream=sys.stderr).sort_stats(os.environ.get("SORT", "cumulative")).print_stats(35)
    assert len(state.values["messages"]) >= 2 * steps, len(state.values["messages"])
    closer.close()
    print(json.dumps({"wall": wall, "cpu": cpu}))


def _fresh(kind: str, root: Path, steps: int, runs: int) -> tuple[float, float]:
    samples = []
    for _ in range(runs):
        done = subprocess.run(
            [sys.executable, __file__, "--child", kind, "--root", str(root), "--steps", str(steps)],
            capture_output=True,
            text=True,
            check=False,
            timeout=600,
        )
        if done.returncode != 0:
            raise RuntimeError(done.stderr)
        samples.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return statistics.median(s["wall"] for s in samples), statistics.median(s["cpu"] for s in samples)


def _build(kind: str, root: Path, steps: int) -> float:
    saver, closer = _saver(kind, root)
    agent = _agent(saver, steps)
    thread = {"configurable": {"thread_id": "t1"}, "recursion_limit": 10 * steps}
    started = time.perf_counter()
    agent.invoke(
        {"messages": [HumanMessage("Look up every entry.")]}, thread, durability="sync" if kind == "ours" else "exit"
    )
    closer.close()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=7, help="new processes per saver (median)")
    parser.add_argument("--root", help="reuse a folder built by an earlier run (kept)")
    parser.add_argument("--profile", action="store_true", help="profile one fresh LocalMemorySaver read")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child, Path(args.root), args.steps, args.profile)
        return
    with tempfile.TemporaryDirectory(prefix="bench-first-read-") as scratch:
        root = Path(args.root) if args.root else Path(scratch)
        if not (root / "checkpoints.sqlite").exists():
            root.mkdir(parents=True, exist_ok=True)
            for kind in ("ours", "sqlite"):
                seconds = _build(kind, root, args.steps)
                print(f"built {kind}'s thread of {args.steps} steps in {seconds:.0f} s", flush=True)
        if args.profile:
            _child("ours", root, args.steps, True)
            return
        ours, sqlite = _fresh("ours", root, args.steps, args.runs), _fresh("sqlite", root, args.steps, args.runs)
    print(f"\nfirst get_state in a new process, {args.steps} steps (~2 KB AI + ~2 KB tool message each),")
    print(f"median of {args.runs} processes each:")
    print(f"{'saver':<22}{'wall ms':>10}{'CPU ms':>10}{'wall x sqlite':>15}")
    for name, (wall, cpu) in (("LocalMemorySaver", ours), ("SqliteSaver", sqlite)):
        print(f"{name:<22}{wall:>10.1f}{cpu:>10.1f}{wall / sqlite[0]:>15.2f}")


if __name__ == "__main__":
    main()
