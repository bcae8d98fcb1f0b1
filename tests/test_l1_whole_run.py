"""L1 covers the whole run: the last assistant message, explicit goals, tool calls, and the merge cursor."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from local_ai_memory import Memory
from local_ai_memory._runtime.summary import COMPLETED, DECISIONS, DISCOVERIES, Summary, parse_summary

PORT = [
    {"role": "user", "content": "I want to port the billing service to Python 3.12."},
    {"role": "assistant", "content": "OK. We will keep the REST paths unchanged."},
]


def _l1(text: str) -> Summary:
    parsed = parse_summary(text)
    assert parsed is not None
    return parsed[0]


def test_finish_run_keeps_the_last_assistant_decision() -> None:
    session = Memory.in_memory().session("u", "s")
    outcome = session.finish_run(PORT)
    summary = _l1(outcome.summary.text)
    assert summary.goal == "I want to port the billing service to Python 3.12."
    assert summary.bullets[DECISIONS] == ["We will keep the REST paths unchanged."]


def test_finish_run_new_only_merges_the_last_message_once_across_calls() -> None:
    session = Memory.in_memory().session("u", "s")
    session.finish_run(PORT, new_only=True)
    assert session.finish_run(PORT, new_only=True).summary.changed is False  # nothing new: nothing merged twice
    more = [*PORT, {"role": "user", "content": "Also add a health endpoint."}]
    more.append({"role": "assistant", "content": "Let's use /healthz for it."})
    summary = _l1(session.finish_run(more, new_only=True).summary.text)
    assert summary.bullets[DECISIONS] == ["We will keep the REST paths unchanged.", "Let's use /healthz for it."]
    assert summary.goal.endswith("Also add a health endpoint.")


def test_merge_cursor_is_exact_across_processes(tmp_path: Path) -> None:
    """Two processes finish runs of one growing conversation: each message reaches L1 once."""
    script = textwrap.dedent(
        """
        import json, sys
        from local_ai_memory import Memory
        root, conversation = sys.argv[1], json.loads(sys.argv[2])
        with Memory.open(root, fsync=False) as memory:
            outcome = memory.session("u", "s").finish_run(conversation, new_only=True)
            print(json.dumps({"changed": outcome.summary.changed, "text": outcome.summary.text}))
        """
    )
    first = [*PORT]
    second = [*PORT, {"role": "user", "content": "The deadline is May 3."}, {"role": "assistant", "content": "Noted."}]
    answers = []
    for conversation in (first, first, second):
        done = subprocess.run(
            [sys.executable, "-c", script, str(tmp_path / "m"), json.dumps(conversation)],
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        )
        answers.append(json.loads(done.stdout))
    assert [answer["changed"] for answer in answers] == [True, False, True]
    summary = _l1(answers[-1]["text"])
    assert summary.bullets[DECISIONS] == ["We will keep the REST paths unchanged."]
    assert summary.bullets[DISCOVERIES] == ["User: The deadline is May 3."]


def test_a_goal_line_is_the_current_goal() -> None:
    session = Memory.in_memory().session("u", "s")
    messages = [
        {"role": "user", "content": "Goal: port the billing service to Python 3.12 and keep the API stable."},
        {"role": "assistant", "content": "OK. We will keep the REST paths unchanged."},
    ]
    summary = _l1(session.finish_run(messages).summary.text)
    assert summary.goal == "port the billing service to Python 3.12 and keep the API stable."
    assert not any("Goal:" in item for items in summary.bullets.values() for item in items)
    assert summary.bullets[DECISIONS] == ["We will keep the REST paths unchanged."]


def test_an_explicit_change_of_goal_wins_and_the_earlier_one_moves_to_completed() -> None:
    session = Memory.in_memory().session("u", "s")
    session.finish_run([{"role": "user", "content": "Goal: write the Alembic migration for tenant_id."}])
    change = "Hold on, the DBAs said no. New task: write a rollout plan for an online backfill instead."
    summary = _l1(session.finish_run([{"role": "user", "content": change}]).summary.text)
    assert summary.goal.startswith("write a rollout plan for an online backfill instead.")  # label dropped
    assert "earlier goal: write the Alembic migration for tenant_id." in summary.bullets[COMPLETED]
    # Requests about the task at hand and constraints do not replace it.
    later = "Send it to me as a PR. Don't touch the audit tables."
    summary = _l1(session.finish_run([{"role": "user", "content": later}]).summary.text)
    assert summary.goal.startswith("write a rollout plan")
    assert "User: Don't touch the audit tables." in summary.bullets[DECISIONS]


def test_decisions_in_other_languages() -> None:
    session = Memory.in_memory().session("u", "s")
    messages = [
        {"role": "user", "content": "Wir wollen den auftrag-service von Spring Boot 2.7 auf 3.2 heben."},
        {"role": "assistant", "content": "Alles klar."},
        {"role": "user", "content": "Ganz wichtig: die REST-API bleibt exakt gleich."},
        {"role": "assistant", "content": "Verstanden, die Pfade bleiben unverändert."},
    ]
    summary = _l1(session.finish_run(messages).summary.text)
    assert "auftrag-service" in summary.goal
    assert any("REST-API bleibt exakt gleich" in item for item in summary.bullets[DECISIONS])


def test_tool_calls_collapse_and_raw_tool_text_is_never_an_item() -> None:
    session = Memory.in_memory().session("u", "s")
    raw = 'r"""JSON (JavaScript Object Notation) <https://json.org> is a subset of JavaScript syntax'
    messages: list[dict[str, str]] = [
        {"role": "user", "content": "Find why the exporter writes NaN."},
        {"role": "tool", "name": "read_source", "content": raw + "\n" + "x = 1\n" * 50},
    ]
    for page in range(1, 51):
        header = (
            f"[tool result r-3 (read_log): characters {(page - 1) * 8000}-{page * 8000} of 400000; "
            f"page {page} of 50; call load_tool_result with offset={page * 8000} for the next]"
        )
        messages.append({"role": "tool", "name": "load_tool_result", "content": header + "\nINFO all good"})
    messages.append({"role": "assistant", "content": "Found it: json.dumps is called with allow_nan=True."})
    messages.append({"role": "assistant", "content": "We will pass allow_nan=False."})
    summary = _l1(session.finish_run(messages).summary.text)
    assert summary.bullets[COMPLETED] == ["ran read_source", "read result r-3 (pages 1-50)"]
    assert summary.bullets[DISCOVERIES] == ["Found it: json.dumps is called with allow_nan=True."]
    assert summary.bullets[DECISIONS] == ["We will pass allow_nan=False."]
    everything = " ".join(item for items in summary.bullets.values() for item in items)
    assert "JavaScript" not in everything
    assert "characters" not in everything


def test_words_of_change_inside_a_constraint_do_not_replace_the_goal() -> None:
    session = Memory.in_memory().session("u", "s")
    messages = [
        {"role": "user", "content": "Fix the flaky login test."},
        {"role": "assistant", "content": "On it."},
        {"role": "user", "content": "Don't forget the changelog. We should switch to pytest-xdist later."},
    ]
    summary = _l1(session.finish_run(messages).summary.text)
    assert summary.goal == "Fix the flaky login test."
    assert summary.bullets[DECISIONS] == [
        "User: Don't forget the changelog.",
        "User: We should switch to pytest-xdist later.",
    ]
