"""Remembering across sessions through the Agents SDK: the runner's compaction logs a session's
turns, and an agent in a later session recalls them with the ``recall`` tool."""

from __future__ import annotations

from pathlib import Path

from agents import Agent, Runner, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call
from local_ai_memory_openai_agents import LocalMemorySession, memory_tools

from local_ai_memory import Memory

set_tracing_disabled(True)

FACT = "Our landlord is called Mr Okafor and the rent is due on the 3rd."


async def test_a_fact_from_session_one_is_recalled_in_session_five(tmp_path: Path) -> None:
    with Memory.open(tmp_path, fsync=False) as memory:
        for n, words in enumerate([FACT, "Buy bread.", "Water the basil.", "Call the dentist."], start=1):
            session = LocalMemorySession(memory, "ann", f"s{n}")
            await Runner.run(
                Agent(name="a", model=ScriptedModel([[assistant_message("Noted.")]])), words, session=session
            )
        assert [note.name for note in memory.knowledge.notes("ann", category="conversations")] == [
            "s1",
            "s2",
            "s3",
            "s4",
        ]

        tools = memory_tools(memory, "ann", "s5", recall=True)
        assert [tool.name for tool in tools] == ["load_tool_result", "search_memory", "recall"]
        model = ScriptedModel(
            [
                [function_call("recall", {"query": "who is the landlord?"}, call_id="c1")],
                [assistant_message("Mr Okafor.")],
            ]
        )
        agent = Agent(name="a", model=model, tools=tools)
        await Runner.run(agent, "Who is our landlord again?", session=LocalMemorySession(memory, "ann", "s5"))
        last = model.last_call
        assert last is not None
        outputs = [item for item in last.input if isinstance(item, dict) and item.get("type") == "function_call_output"]
        assert FACT in str(outputs[-1]["output"])
