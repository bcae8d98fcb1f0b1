"""The package README's example runs top to bottom (its model line is swapped for the SDK's
``ScriptedModel``, a fake whose words are not under test; everything else is real)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from agents import set_tracing_disabled
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call

README = Path(__file__).parents[1] / "README.md"
MODEL_LINE = re.compile(r"^model = \"[^\"]+\".*$", re.MULTILINE)


def _outputs(call: ModelCall) -> list[dict[str, Any]]:
    return [item for item in call.input if isinstance(item, dict) and item.get("type") == "function_call_output"]


def _page_request(call: ModelCall) -> list[Any]:
    reference = json.loads(_outputs(call)[-1]["output"])
    return [function_call("load_tool_result", {"result_id": reference["result_id"], "line": 1}, call_id="c3")]


def _answer(call: ModelCall) -> list[Any]:
    outputs = _outputs(call)
    assert "Fridays, after the review" in outputs[0]["output"]
    assert "request 0 served" in outputs[-1]["output"]
    return [assistant_message("Fridays; the log is clean (all INFO).")]


def test_readme_example_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    set_tracing_disabled(True)
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)
    code = "\n".join(blocks[1:])  # the first, offline example runs unchanged in tests/test_readme.py
    assert MODEL_LINE.search(code), "the quickstart's model line changed"
    model = ScriptedModel(
        [
            [
                function_call("search_memory", {"query": "deploy"}, call_id="c1"),
                function_call("read_log", {}, call_id="c2"),
            ],
            ModelStep.respond(_page_request),
            ModelStep.respond(_answer),
            [assistant_message("You're welcome.")],
        ]
    )
    code = MODEL_LINE.sub("model = _scripted_model", code)
    monkeypatch.chdir(tmp_path)
    exec(compile(code, str(README), "exec"), {"_scripted_model": model, "__name__": "readme"})
    out = capsys.readouterr().out
    assert "Fridays; the log is clean (all INFO)." in out
    assert "You're welcome." in out
    assert re.search(r"^\d+ items in the session$", out, re.M)
    model.assert_complete()
    assert (tmp_path / "agent-memory" / "memory" / "sessions").is_dir()
