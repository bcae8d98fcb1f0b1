"""The agent on PostgreSQL: create_agent, a 200 KB tool output externalized and paged back, with
the whole memory in the database (``database_url``) and nothing in the data folder; a run killed
on one host resumes on another."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from langchain.agents import create_agent
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_local_ai_memory import LocalMemoryMiddleware
from lc_fakes import ScriptedChatModel, paging_policy, real_text

from local_ai_memory import Memory, MemoryConfig

BIG = 200 * 1024


def test_agent_run_pages_a_200_kb_output_back_from_postgres(
    postgres_url: str, postgres_schema: str, tmp_path: Path
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
    with Memory(config) as running:  # the agent's memory: both backends on the database
        agent = create_agent(model, tools=[big_tool], middleware=[LocalMemoryMiddleware("alice", "s1", memory=running)])
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


def test_a_run_killed_on_one_host_resumes_on_another(postgres_url: str, postgres_schema: str, tmp_path: Path) -> None:
    """Host A (its own folder) is SIGKILLed before page 4; host B (another folder) resumes the run
    from the checkpoint in the database and finishes it without calling the big tool again."""
    child = Path(__file__).parent / "agent_child.py"
    env = {
        **os.environ,
        "PYTHONWARNINGS": "error",
        "LOCAL_AI_MEMORY_DATABASE_URL": postgres_url,
        "LOCAL_AI_MEMORY_DATABASE_SCHEMA": postgres_schema,
    }
    host_a, host_b = tmp_path / "a", tmp_path / "b"
    host_a.mkdir()
    host_b.mkdir()

    def start(folder: Path, *args: str) -> subprocess.Popen[str]:
        command = [sys.executable, str(child), str(folder), *args]
        return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)

    first = start(host_a, "4")
    deadline = time.monotonic() + 120
    while not (host_a / "stalled").exists():
        assert first.poll() is None, first.communicate()
        assert time.monotonic() < deadline, "host A never reached page 4"
        time.sleep(0.05)
    first.send_signal(signal.SIGKILL)
    first.communicate(timeout=30)
    second = start(host_b)
    out, err = second.communicate(timeout=300)
    assert second.returncode == 0, err
    report = json.loads(out.strip().splitlines()[-1])
    assert report["answer"] == f"read {len(real_text(BIG))} characters"
    assert report["model_calls"] == 13 - 5  # host B asked only for pages 4..10 and the answer
    assert (host_a / "big_tool_calls").read_text().count("call") == 1
    assert not (host_b / "big_tool_calls").exists()
    config = MemoryConfig(runtime_data_dir=tmp_path / "c", database_url=postgres_url, database_schema=postgres_schema)
    with Memory(config) as memory:
        checkpoints = memory.session("alice", "s1").checkpoints()
        assert [(checkpoint.status, checkpoint.step) for checkpoint in checkpoints] == [("completed", 13)]
