"""Fencing untrusted text: the fence cannot be closed from inside, headings cannot be faked."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from local_ai_memory._shared.fencing import escape_headings, fence


def test_fence_is_longer_than_any_backtick_run_and_deterministic() -> None:
    text = "a ``` b ```````` c"
    block = fence(text, "Title:")
    title, opening, body, closing = block.split("\n")
    assert (title, body) == ("Title:", text)
    assert opening == closing == "`" * 9
    assert fence(text, "Title:") == block  # same memory, same prompt (prefix caches)
    assert fence("plain", "T:").split("\n")[1] == "```"


@given(st.text())
def test_no_line_inside_can_close_the_fence(text: str) -> None:
    lines = fence(text, "T:").split("\n")
    ticks = lines[1]
    inner = lines[2:-1]
    assert lines[-1] == ticks
    assert all(not line.strip().startswith(ticks) for line in inner)


def test_escape_headings_only_touches_line_leading_hashes() -> None:
    text = "# Decisions\n  ## Goal\nissue #12 stays\n#tag"
    assert escape_headings(text) == "\\# Decisions\n  \\## Goal\nissue #12 stays\n\\#tag"
    assert all(not line.lstrip().startswith("#") for line in escape_headings(text).splitlines())
