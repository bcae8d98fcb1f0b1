"""The package README's example runs top to bottom. Its client line is swapped for a client on an
in-process Messages API (scripted answers, no network); the tool runner and the tool are real."""

from __future__ import annotations

import re
from pathlib import Path

import anthropic
import httpx2
import pytest
from claude_fakes import ScriptedMessages, memory_use

README = Path(__file__).parents[1] / "README.md"
CLIENT_LINE = re.compile(r"^client = anthropic\.Anthropic\(\).*$", re.MULTILINE)


def test_readme_example_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)
    code = "\n".join(blocks[1:])  # the first, offline example runs unchanged in tests/test_readme.py
    assert CLIENT_LINE.search(code), "the quickstart's client line changed"
    script = ScriptedMessages(
        [
            [memory_use("t1", command="view", path="/memories")],
            [
                memory_use(
                    "t2",
                    command="create",
                    path="/memories/preferences.md",
                    file_text="# Preferences\n- prefers green tea\n- deploy day: Fridays\n",
                )
            ],
            [{"type": "text", "text": "Saved: green tea, deploys on Fridays."}],
        ]
    )
    client = anthropic.Anthropic(api_key="test-key", http_client=httpx2.Client(transport=httpx2.MockTransport(script)))
    code = CLIENT_LINE.sub("client = _client", code)
    monkeypatch.chdir(tmp_path)
    exec(compile(code, str(README), "exec"), {"_client": client, "__name__": "readme"})
    out = capsys.readouterr().out.splitlines()
    assert out == ["Saved: green tea, deploys on Fridays.", "alice_preferences.md"]
    assert (tmp_path / "claude-memory" / "memory_data" / "knowledge" / "alice_preferences.md").is_file()
