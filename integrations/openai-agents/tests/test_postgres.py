"""The session on PostgreSQL: two memories on one database (two hosts) share a conversation,
items exactly, pops atomic, a Runner turn on one continued on the other."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from agents import Agent, Runner, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message
from local_ai_memory_openai_agents import LocalMemorySession

from local_ai_memory import Memory, MemoryConfig

set_tracing_disabled(True)

ITEMS = [
    {"role": "user", "content": "héllo \x00 \r\n 🙂"},
    {"type": "function_call", "call_id": "c1", "name": "grep", "arguments": '{"q": "x"}', "id": "fc_1"},
    {"type": "function_call_output", "call_id": "c1", "output": "3"},
]


async def test_two_hosts_share_one_session(postgres_url: str, postgres_schema: str, tmp_path: Path) -> None:
    def host(name: str) -> Memory:
        return Memory(
            MemoryConfig(runtime_data_dir=tmp_path / name, database_url=postgres_url, database_schema=postgres_schema)
        )

    with host("a") as first, host("b") as second:
        one = LocalMemorySession(first, "alice", "chat")
        other = LocalMemorySession(second, "alice", "chat")
        await one.add_items(ITEMS)
        got = await other.get_items()
        assert [json.dumps(item) for item in got] == [json.dumps(item) for item in ITEMS]
        assert await LocalMemorySession(second, "alice_x", "chat").get_items() == []
        popped = await asyncio.gather(*(session.pop_item() for session in (one, other) * 3))
        assert sorted(json.dumps(item) for item in popped if item is not None) == sorted(json.dumps(i) for i in ITEMS)
        model = ScriptedModel([[assistant_message("first")], [assistant_message("second")]])
        agent = Agent(name="a", model=model)
        await Runner.run(agent, "turn one", session=one)
        await Runner.run(agent, "turn two", session=other)
        call = model.last_call
        assert call is not None
        assert call.input[0] == {"role": "user", "content": "turn one"}
        assert call.input[-1] == {"role": "user", "content": "turn two"}
        assert len(await one.get_items()) == 4
