"""The "done when" run: a real create_agent, a 200 KB tool output, paging, files on disk, crash and resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_local_ai_memory import LocalMemoryMiddleware
from lc_fakes import ScriptedChatModel, paging_policy, real_text

from local_ai_memory import Memory, MemoryConfig
from local_ai_memory._shared.records import BOOKKEEPING_KEY
from local_ai_memory.integration import load_checkpoint, scope_name

BIG = 200 * 1024
CHILD = Path(__file__).parent / "agent_child.py"


def _big_tool(counter: list[int]):  # type: ignore[no-untyped-def]
    text = real_text(BIG)

    @tool
    def big_tool() -> str:
        """Return a large document."""
        counter.append(1)
        return text

    return big_tool, text


def _pages(model: ScriptedChatModel) -> list[ToolMessage]:
    final = model.received[-1]
    return [m for m in final if isinstance(m, ToolMessage) and m.name == "load_tool_result"]


def _check_run(config: MemoryConfig, model: ScriptedChatModel, text: str, answer: str) -> None:
    # The model received the reference, not the 200 KB.
    second_call = model.received[1]
    reference_message = second_call[-1]
    assert isinstance(reference_message, ToolMessage)
    reference = json.loads(str(reference_message.content))
    assert set(reference) == {"result_id", "summary", "size", "chars", "lines", "pages"}
    assert reference["size"] == len(text.encode("utf-8"))
    assert len(str(reference_message.content)) < 2000
    # It paged the whole content back, in order.
    pages = _pages(model)
    assert len(pages) == 11  # 204,800 characters in pages of 20,000
    body = "".join(str(p.content).split("\n", 1)[1] for p in pages)
    assert body == text
    assert answer == f"read {len(text)} characters"
    # load_tool_result pages were never externalized.
    assert all(not str(p.content).startswith('{"result_id"') for p in pages)
    # L0, L1, L2, L3 are on disk.
    memory = config.runtime_data_dir / "memory"
    scope = scope_name("alice", "s1")
    state = json.loads((memory / "state" / f"{scope}.json").read_text())["state"]
    assert state[BOOKKEEPING_KEY]["plan_id"] == "agent"
    assert "plan_id" not in state
    assert "# Current Goal" in (memory / "working" / f"{scope}.md").read_text()
    assert (memory / "plans" / f"{scope}.json").is_file()
    assert (memory / "tool_results" / f"{reference['result_id']}.json").is_file()
    with Memory(config) as reader:  # another Memory on the folder reads what the run left
        checkpoint = load_checkpoint(reader.session("alice", "s1").engine, "agent")
    assert checkpoint.status == "completed"
    assert checkpoint.tool_result_ids == [reference["result_id"]]


def test_agent_run_externalizes_and_pages_sync(config: MemoryConfig, memory: Memory) -> None:
    calls: list[int] = []
    big_tool, text = _big_tool(calls)
    model = ScriptedChatModel(policy=paging_policy())
    agent = create_agent(model, tools=[big_tool], middleware=[LocalMemoryMiddleware("alice", "s1", memory=memory)])
    result = agent.invoke({"messages": [HumanMessage("Read the big document.")]})
    assert "load_tool_result" in model.bound_tools
    assert calls == [1]
    _check_run(config, model, text, result["messages"][-1].text)


async def test_agent_run_externalizes_and_pages_async(config: MemoryConfig, memory: Memory) -> None:
    calls: list[int] = []
    big_tool, text = _big_tool(calls)
    model = ScriptedChatModel(policy=paging_policy())
    agent = create_agent(model, tools=[big_tool], middleware=[LocalMemoryMiddleware("alice", "s1", memory=memory)])
    result = await agent.ainvoke({"messages": [HumanMessage("Read the big document.")]})
    _check_run(config, model, text, result["messages"][-1].text)


def _start_child(root: Path, *extra: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONWARNINGS": "error"}
    return subprocess.Popen(
        [sys.executable, str(CHILD), str(root), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


@pytest.mark.parametrize(
    ("signum", "graceful", "status"),
    [
        (signal.SIGKILL, False, "in_progress"),
        (signal.SIGTERM, False, "in_progress"),
        (signal.SIGTERM, True, "interrupted"),
        (signal.SIGINT, True, "interrupted"),
    ],
)
def test_killed_run_resumes_from_checkpoint(
    tmp_path: Path, signum: signal.Signals, graceful: bool, status: str
) -> None:
    child = _start_child(tmp_path, "4", *(["graceful"] if graceful else []))
    marker = tmp_path / "stalled"
    deadline = time.monotonic() + 120
    while not marker.exists():
        assert child.poll() is None, child.communicate()
        assert time.monotonic() < deadline, "the child never reached page 4"
        time.sleep(0.05)
    child.send_signal(signum)
    child.communicate(timeout=30)
    assert child.returncode == (130 if graceful else -signum)

    manager = Memory.open(tmp_path / "data").session("alice", "s1")
    stopped = load_checkpoint(manager.engine, "agent")
    assert stopped.status == status
    if graceful:
        assert stopped.reason == signal.Signals(signum).name
    assert stopped.step == 5  # big_tool call + pages 0..3 requested and answered

    again = _start_child(tmp_path)
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0, err
    report = json.loads(out.strip().splitlines()[-1])
    assert report["answer"] == f"read {len(real_text(BIG))} characters"
    # Resumed: the big tool ran once in total, and the second run only asked for the remaining pages.
    assert (tmp_path / "big_tool_calls").read_text().count("call") == 1
    assert report["model_calls"] == 13 - 5  # pages 4..10 and the answer
    finished = load_checkpoint(manager.engine, "agent")
    assert finished.status == "completed"
    assert finished.step == 13
    assert manager.bookkeeping()["resumed_from_step"] == 5


def test_scope_from_runtime_context_reaches_the_load_tool(config: MemoryConfig, memory: Memory) -> None:
    calls: list[int] = []
    big_tool, text = _big_tool(calls)
    model = ScriptedChatModel(policy=paging_policy(page_chars=20_000))
    agent = create_agent(model, tools=[big_tool], middleware=[LocalMemoryMiddleware(memory=memory)])
    result = agent.invoke(
        {"messages": [HumanMessage("Read the big document.")]}, context={"user_id": "dana", "session_id": "d-7"}
    )
    assert result["messages"][-1].text == f"read {len(text)} characters"
    pages = _pages(model)
    assert "".join(str(p.content).split("\n", 1)[1] for p in pages) == text
    dana = memory.session("dana", "d-7")
    assert len(dana.list_tool_results()) == 1
    assert load_checkpoint(dana.engine, "agent").status == "completed"
    assert not (config.runtime_data_dir / "memory" / "plans" / f"{scope_name('alice', 's1')}.json").exists()


def test_signal_marks_context_scoped_run_interrupted(memory: Memory) -> None:
    # The scope comes from the runtime context, not from the middleware: handle_signals still finds the run.
    def policy(messages: list[BaseMessage]) -> AIMessage:
        if any(isinstance(m, ToolMessage) for m in messages):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        return AIMessage(content="", tool_calls=[{"name": "big_tool", "args": {}, "id": "c1"}])

    big_tool, _ = _big_tool([])
    middleware = LocalMemoryMiddleware(memory=memory)
    agent = create_agent(ScriptedChatModel(policy=policy), tools=[big_tool], middleware=[middleware])
    with pytest.raises(KeyboardInterrupt), middleware.handle_signals():
        agent.invoke({"messages": [HumanMessage("Read it.")]}, context={"user_id": "erin", "session_id": "e1"})
    erin = memory.session("erin", "e1")
    stopped = load_checkpoint(erin.engine, "agent")
    assert stopped.status == "interrupted"
    assert stopped.reason == "SIGTERM"
    assert stopped.step == 1
    assert len(stopped.tool_result_ids) == 1
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # handlers restored
