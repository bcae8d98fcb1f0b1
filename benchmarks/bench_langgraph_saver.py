"""LangGraph checkpointers side by side: ``LocalMemorySaver`` against LangGraph's own savers.

One LangGraph graph runs ``--steps`` steps with ``durability="sync"`` (each step's checkpoint is
stored before the next step runs). Its state has a 50 KB document written once and a message
list that grows by one 200-character message per step, which is what an agent's state looks like.
For each saver, in the same run: the time per step early and late in the run (median of 20
steps around step 10 and around the last step), the bytes on disk at the end, and the time to
read the latest checkpoint back (``get_state``, as a resumed run does first), and to read it
again after one more checkpoint (``again``: what a long-lived saver pays per read).

Savers: ``LocalMemorySaver`` on files (fsync on, as shipped, and off), ``InMemorySaver`` (keeps
nothing) and ``SqliteSaver`` (langgraph-checkpoint-sqlite, a single SQLite file) when installed.

Run: ``.venv/bin/python benchmarks/bench_langgraph_saver.py [--steps 300]``
"""

from __future__ import annotations

import argparse
import itertools
import operator
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_local_ai_memory import LocalMemorySaver
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph

from local_ai_memory import Memory
from local_ai_memory.samples import build_corpus


class AgentLike(TypedDict):
    document: str
    messages: Annotated[list[str], operator.add]


def _graph(saver: BaseCheckpointSaver[Any], steps: int, stamps: list[float]) -> Any:
    text = " ".join(note.text for note in build_corpus().notes)
    document = text[:50_000]

    def start(state: AgentLike) -> dict[str, Any]:
        stamps.append(time.perf_counter())
        return {"document": document, "messages": ["start"]}

    def step(state: AgentLike) -> dict[str, Any]:
        stamps.append(time.perf_counter())
        n = len(state["messages"])
        return {"messages": [text[n * 200 : n * 200 + 200]]}

    builder = StateGraph(AgentLike)
    builder.add_node("start", start)
    builder.add_node("step", step)
    builder.add_edge(START, "start")
    builder.add_edge("start", "step")
    builder.add_conditional_edges("step", lambda state: END if len(state["messages"]) > steps else "step")
    return builder.compile(checkpointer=saver)


def _size(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


@contextmanager
def _local(folder: Path, fsync: bool) -> Iterator[BaseCheckpointSaver[Any]]:
    yield LocalMemorySaver(Memory.open(folder, fsync=fsync), user_id="bench")


@contextmanager
def _memory(folder: Path) -> Iterator[BaseCheckpointSaver[Any]]:
    yield InMemorySaver()


@contextmanager
def _sqlite(folder: Path) -> Iterator[BaseCheckpointSaver[Any]]:
    from langgraph.checkpoint.sqlite import SqliteSaver

    connection = sqlite3.connect(folder / "checkpoints.sqlite", check_same_thread=False)
    try:
        yield SqliteSaver(connection)
    finally:
        connection.close()


def _savers() -> dict[str, Callable[[Path], Any]]:
    savers: dict[str, Callable[[Path], Any]] = {
        "LocalMemorySaver, files, fsync": lambda folder: _local(folder, True),
        "LocalMemorySaver, files, no fsync": lambda folder: _local(folder, False),
        "InMemorySaver (keeps nothing)": _memory,
    }
    try:
        import langgraph.checkpoint.sqlite  # noqa: F401
    except ImportError:
        print("langgraph-checkpoint-sqlite is not installed: SqliteSaver is left out")
    else:
        savers["SqliteSaver, one file"] = _sqlite
    return savers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    rows = []
    for name, make in _savers().items():
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            stamps: list[float] = []
            with make(folder) as saver:
                graph = _graph(saver, args.steps, stamps)
                thread = {"configurable": {"thread_id": "t1"}}
                graph.invoke({"messages": []}, thread, durability="sync")
                gaps = [b - a for a, b in itertools.pairwise(stamps)]
                early = statistics.median(gaps[5:25]) * 1000
                late = statistics.median(gaps[-20:]) * 1000
                start = time.perf_counter()
                state = graph.get_state(thread)
                read_ms = (time.perf_counter() - start) * 1000
                assert len(state.values["messages"]) == args.steps + 1
                graph.update_state(thread, {"messages": ["one more"]})  # a new checkpoint, then read again
                start = time.perf_counter()
                state = graph.get_state(thread)
                again_ms = (time.perf_counter() - start) * 1000
                assert state.values["messages"][-1] == "one more"
                rows.append((name, early, late, read_ms, again_ms, _size(folder)))
    base = next(row for row in rows if row[0].startswith("InMemorySaver"))
    print(f"{args.steps} steps, durability='sync'; time per step includes the graph's own work")
    header = ("saver", "step ~10 ms", "last steps ms", "x in-memory", "get_state ms", "again ms", "disk KB")
    print(
        f"{header[0]:36} {header[1]:>11} {header[2]:>13} {header[3]:>11} {header[4]:>12} {header[5]:>9} {header[6]:>9}"
    )
    for name, early, late, read_ms, again_ms, size in rows:
        print(
            f"{name:36} {early:11.2f} {late:13.2f} {late / base[2]:11.1f} {read_ms:12.1f} {again_ms:9.1f}"
            f" {size / 1024:9.0f}"
        )
    print("again: get_state after one more checkpoint, on the same saver (a saver that keeps its reads pays less)")


if __name__ == "__main__":
    main()
