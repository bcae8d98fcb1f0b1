"""Child process of the delta crash test: a conversation that grows one message per step, forever.

Usage: python delta_child.py ROOT [DATABASE_URL SCHEMA]   (files under ROOT/data, or PostgreSQL)

Each step appends message ``m{n}`` (about 20 KB, so a kill often lands inside a write) to thread
``t`` of user ``u`` through ``LocalMemorySaver`` with ``durability="sync"`` (the step's checkpoint
is stored before ``invoke`` returns), then appends ``n`` to ``ROOT/acks``. A second start
continues the thread from what the first one stored.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage
from langchain_core.runnables import RunnableConfig
from langchain_local_ai_memory import LocalMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

from local_ai_memory import Memory


class Chat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def body(n: int) -> str:
    """The text of message ``n`` (the parent checks it)."""
    return f"message {n} " + chr(0x41 + n % 26) * 20_000


def step(state: Chat) -> dict[str, Any]:
    n = len(state["messages"])
    return {"messages": [AIMessage(body(n), id=f"m{n}")]}


def open_memory(root: Path, database: list[str]) -> Memory:
    """The memory of the test: files under ``root/data`` (fsync on), or ``[url, schema]`` on PostgreSQL."""
    if database:
        return Memory.open(root / "data", database_url=database[0], database_schema=database[1])
    return Memory.open(root / "data", fsync=True)


def main() -> None:
    root = Path(sys.argv[1])
    builder = StateGraph(Chat)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_edge("step", END)
    graph = builder.compile(checkpointer=LocalMemorySaver(open_memory(root, sys.argv[2:]), user_id="u"))
    config: RunnableConfig = {"configurable": {"thread_id": "t"}}
    while True:
        result = graph.invoke({"messages": []}, config, durability="sync")
        with (root / "acks").open("a") as acks:
            acks.write(f"{len(result['messages'])}\n")


if __name__ == "__main__":
    main()
