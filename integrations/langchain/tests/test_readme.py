"""The package README's examples run top to bottom (the model line is swapped for a scripted model)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from lc_fakes import ScriptedChatModel

README = Path(__file__).parents[1] / "README.md"
MODEL_LINE = re.compile(r"^model = init_chat_model\(.*\)$", re.MULTILINE)


def _policy(messages: Sequence[BaseMessage]) -> AIMessage:
    first = messages[0]
    if isinstance(first, HumanMessage) and "working memory of an AI agent" in str(first.content):
        return AIMessage(content="# Current Goal\nCheck the log for errors\n\n# Completed\n* read the log\n")
    tools = [m for m in messages if isinstance(m, ToolMessage)]
    if not tools:
        return AIMessage(content="", tool_calls=[{"name": "read_log", "args": {}, "id": "c1"}])
    if tools[-1].name == "read_log":
        result_id = json.loads(str(tools[-1].content))["result_id"]
        args = {"result_id": result_id, "offset": 0, "limit": 2000}
        return AIMessage(content="", tool_calls=[{"name": "load_tool_result", "args": args, "id": "c2"}])
    return AIMessage(content="No errors: every line is INFO.")


def test_readme_examples_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)
    code = "\n".join(blocks[1:])  # the first, offline example runs unchanged in tests/test_readme.py
    assert MODEL_LINE.search(code), "the quickstart's model line changed"
    code = MODEL_LINE.sub("model = _scripted_model", code)
    monkeypatch.chdir(tmp_path)
    model = ScriptedChatModel(policy=_policy)
    exec(compile(code, str(README), "exec"), {"_scripted_model": model, "__name__": "readme"})
    out = capsys.readouterr().out
    assert "No errors: every line is INFO." in out
    assert "alice_json.md" in out
    assert "## alice_json.md" in out
    assert "Working memory:" in out
    assert re.search(r"^editor \{'content': 'Alice edits in Helix, dark theme', 'since': 2024\} \d", out, re.M)
    assert re.search(r"^alice_editor\.md$", out, re.M)  # the store's note, found by the retriever of one memory
    memory = tmp_path / "agent-memory" / "memory"
    for level in ("state", "working", "plans", "tool_results"):
        assert any((memory / level).iterdir()), level
    assert "Check the log for errors" in (memory / "working" / "alice_incident-42.md").read_text()
