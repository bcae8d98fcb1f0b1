"""One turn of a real ``Runner`` run in its own process, on a memory folder: the resume test's child.

Usage: ``python agents_child.py ROOT TURN``. The model is the SDK's ``ScriptedModel`` (a fake:
its words are not under test). Turn 1 makes the model call ``search_memory`` and answer; turn 2
answers at once. The child prints, as JSON, the input the model was given on its last call,
its instructions, and the run's final output.
"""

from __future__ import annotations

import asyncio
import json
import sys

from agents import Agent, Runner
from agents.testing import ScriptedModel, assistant_message, function_call
from local_ai_memory_openai_agents import LocalMemorySession, memory_tools

from local_ai_memory import Memory


async def main(root: str, turn: int) -> None:
    with Memory.open(root, fsync=False) as memory:
        session = LocalMemorySession(memory, "alice", "chat-1")
        if turn == 1:
            steps = [
                [function_call("search_memory", {"query": "deploy day"}, call_id="call-1")],
                [assistant_message("We deploy on Fridays.", item_id="msg-1")],
            ]
            text = "When do we deploy?"
        else:
            steps = [[assistant_message("Yes: Fridays, as I said.", item_id="msg-2")]]
            text = "Are you sure?"
        model = ScriptedModel(steps)
        agent = Agent(
            name="assistant",
            instructions=session.instructions("You help Alice."),
            model=model,
            tools=memory_tools(memory, "alice", "chat-1"),
        )
        result = await Runner.run(agent, text, session=session)
        call = model.last_call
        assert call is not None
        print(
            json.dumps({"input": call.input, "instructions": call.system_instructions, "output": result.final_output})
        )


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
