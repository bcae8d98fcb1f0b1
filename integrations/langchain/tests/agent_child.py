"""Child process of the crash test: one create_agent run with the memory middleware.

Usage: python agent_child.py ROOT [STALL_BEFORE_PAGE [graceful]]

The big tool appends a line to ROOT/big_tool_calls each time it runs. With STALL_BEFORE_PAGE
the model writes ROOT/stalled and sleeps before asking for that page, waiting to be killed.
With ``graceful`` the run is wrapped in ``middleware.handle_signals()``: SIGTERM/SIGINT mark
the checkpoint ``interrupted`` and the process exits with status 130.
Prints one JSON line with the final answer and the model's call count.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langchain_local_ai_memory import LocalMemoryMiddleware
from lc_fakes import ScriptedChatModel, paging_policy, real_text

from local_ai_memory import Memory

BIG = 200 * 1024


def main() -> None:
    root = Path(sys.argv[1])
    stall = int(sys.argv[2]) if len(sys.argv) > 2 else None
    graceful = len(sys.argv) > 3 and sys.argv[3] == "graceful"
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
    agent = create_agent(model, tools=[big_tool], middleware=[middleware])
    task = {"messages": [HumanMessage("Read the big document.")]}
    if graceful:
        try:
            with middleware.handle_signals():
                result = agent.invoke(task)
        except KeyboardInterrupt:
            sys.exit(130)
    else:
        result = agent.invoke(task)
    print(json.dumps({"answer": result["messages"][-1].text, "model_calls": len(model.received)}))


if __name__ == "__main__":
    main()
