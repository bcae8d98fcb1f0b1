"""Child process of the checkpointer crash test: create_agent with LocalMemorySaver as its checkpointer.

Usage: python saver_child.py ROOT [STALL_BEFORE_PAGE]

As ``agent_child.py``, but LangGraph itself persists the run, through the middleware's
``LocalMemorySaver`` (thread ``s1`` of user ``alice``): one L2, LangGraph's. A second start
continues the thread from its last checkpoint (``invoke(None, ...)``) when the first was cut short.
Prints one JSON line with the final answer and the model's call count.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langchain_local_ai_memory import LocalMemoryMiddleware
from lc_fakes import ScriptedChatModel, paging_policy, real_text

from local_ai_memory import Memory

BIG = 200 * 1024


def main() -> None:
    root = Path(sys.argv[1])
    stall = int(sys.argv[2]) if len(sys.argv) > 2 else None
    calls = root / "big_tool_calls"

    @tool
    def big_tool() -> str:
        """Return a large document."""
        with calls.open("a", encoding="utf-8") as handle:
            handle.write("call\n")
        return real_text(BIG)

    model = ScriptedChatModel(policy=paging_policy(stall_before_page=stall, stall_marker=root / "stalled"))
    memory = Memory.open(root / "data", fsync=True)
    middleware = LocalMemoryMiddleware("alice", "s1", memory=memory)
    agent = create_agent(model, tools=[big_tool], middleware=[middleware], checkpointer=middleware.checkpointer())
    thread: RunnableConfig = {"configurable": {"thread_id": "s1"}}
    started = bool(agent.get_state(thread).values)  # the thread has checkpoints: continue it
    task = None if started else {"messages": [HumanMessage("Read the big document.")]}
    # "sync" durability: a step's checkpoint is stored before the next step runs, so a kill repeats
    # at most the step it cut (with the default "async", saves may trail the run by a few steps).
    result = agent.invoke(task, thread, durability="sync")
    answer = {"answer": result["messages"][-1].text, "model_calls": len(model.received), "resumed": started}
    print(json.dumps(answer))


if __name__ == "__main__":
    main()
