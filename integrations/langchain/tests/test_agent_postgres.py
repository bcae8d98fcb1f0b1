"""The agent round trip on PostgreSQL: create_agent, a 200 KB tool output externalized and paged
back, with the whole memory in the database (``database_url``) and nothing in the data folder."""

from __future__ import annotations

from pathlib import Path

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_local_ai_memory import LocalMemoryMiddleware
from lc_fakes import ScriptedChatModel, paging_policy, real_text

from local_ai_memory import Memory, MemoryConfig
from local_ai_memory._backends.postgres_shared import close_shared_backends

BIG = 200 * 1024


def test_agent_run_pages_a_200_kb_output_back_from_postgres(
    postgres_url: str, postgres_schema: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    config = MemoryConfig(
        runtime_data_dir=tmp_path / "data", fsync=False, database_url=postgres_url, database_schema=postgres_schema
    )
    text = real_text(BIG)

    @tool
    def big_tool() -> str:
        """Return a large document."""
        return text

    model = ScriptedChatModel(policy=paging_policy())
    request.addfinalizer(close_shared_backends)  # the middleware's managers share one pool per setting
    agent = create_agent(model, tools=[big_tool], middleware=[LocalMemoryMiddleware("alice", "s1", config=config)])
    result = agent.invoke({"messages": [HumanMessage("Read the big document.")]})
    pages = [m for m in model.received[-1] if isinstance(m, ToolMessage) and m.name == "load_tool_result"]
    assert len(pages) == 11
    assert "".join(str(p.content).split("\n", 1)[1] for p in pages) == text
    assert result["messages"][-1].text == f"read {len(text)} characters"
    with Memory(config) as memory:  # another Memory (as another host would) sees the run
        session = memory.session("alice", "s1")
        assert [checkpoint.status for checkpoint in session.checkpoints()] == ["completed"]
        assert "# Current Goal" in session.get_working_memory()
        assert len(session.list_tool_results()) == 1
    assert [path for path in tmp_path.rglob("*") if path.is_file()] == []  # nothing went to files
