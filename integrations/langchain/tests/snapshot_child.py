"""Child process of the snapshot tests: reads thread ``t`` of user ``u`` as a fresh process does.

Usage: python snapshot_child.py ROOT [DATABASE_URL SCHEMA]   (files under ROOT, or PostgreSQL)

Prints one JSON line: the summary of ``get_state`` (the newest checkpoint), of
``get_state_history`` with limits 3 and 40, and every ``read_plan_steps`` call the saver made
(whether it was given a cursor, whether the backend answered the whole log, how many steps).
The parent builds the same thread on ``InMemorySaver`` and compares the summaries.
"""

from __future__ import annotations

import json
import operator
import sys
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

THREAD: RunnableConfig = {"configurable": {"thread_id": "t"}}


class Chat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    tally: Annotated[list[int], operator.add]


def _reply(state: Chat) -> dict[str, Any]:
    count = len(state["messages"])
    return {"messages": [AIMessage(f"reply {count} " + "r" * (count * 13 % 400), id=f"a{count}")], "tally": [count]}


def graph(saver: BaseCheckpointSaver[Any]) -> Any:
    builder = StateGraph(Chat)
    builder.add_node("reply", _reply)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)
    return builder.compile(checkpointer=saver)


def turn(app: Any, n: int) -> None:
    """Turn ``n`` of the script both savers run."""
    app.invoke({"messages": [HumanMessage(f"question {n} " + "q" * (n * 31 % 500), id=f"h{n}")]}, THREAD)


def summary(snapshot: Any) -> Any:
    """What a state snapshot holds, as JSON (ids of checkpoints differ between two runs: left out)."""
    values = snapshot.values or {}
    return {
        "messages": [[m.id, m.content] for m in values.get("messages", [])],
        "tally": values.get("tally", []),
        "next": list(snapshot.next),
        "step": (snapshot.metadata or {}).get("step"),
    }


def main() -> None:
    from langchain_local_ai_memory import LocalMemorySaver

    from local_ai_memory import Memory

    root = Path(sys.argv[1])
    if len(sys.argv) > 2:
        memory = Memory.open(root, database_url=sys.argv[2], database_schema=sys.argv[3])
    else:
        memory = Memory.open(root, fsync=False)
    reads: list[list[Any]] = []
    backend = memory.runtime
    original = backend.read_plan_steps

    def counted(scope: Any, plan_id: str, cursor: str | None = None) -> Any:
        found = original(scope, plan_id, cursor)
        reads.append([cursor is not None, found.restarted, len(found.steps)])
        return found

    backend.read_plan_steps = counted  # type: ignore[method-assign]
    app = graph(LocalMemorySaver(memory, user_id="u"))
    latest = summary(app.get_state(THREAD))
    first = list(reads)
    histories = {limit: [summary(s) for s in app.get_state_history(THREAD, limit=limit)] for limit in (3, 40)}
    print(json.dumps({"latest": latest, "histories": histories, "first_reads": first, "reads": reads}))
    memory.close()


if __name__ == "__main__":
    main()
