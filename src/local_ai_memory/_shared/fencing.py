"""Untrusted text as data in a prompt: a fence it cannot close, headings it cannot fake.

Memory put into a prompt (tool outputs, notes, earlier summaries, the conversation) may
contain instructions. :func:`fence` wraps it in a backtick fence longer than any backtick run
inside it, under a title, so the text cannot close its fence and pose as the prompt. The fence
is derived from the content, not random, so identical memory gives an identical prompt
(servers with prefix caches, such as llama.cpp, reuse it). :func:`escape_headings` escapes
line-leading ``#`` so quoted text cannot look like a Markdown heading the caller parses.
"""

from __future__ import annotations

import re

__all__ = ["escape_headings", "fence"]

_BACKTICKS = re.compile(r"`+")


def fence(text: str, title: str) -> str:
    """``title`` then ``text`` inside a backtick fence that no backtick run in ``text`` can close."""
    longest = max((len(run) for run in _BACKTICKS.findall(text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{title}\n{ticks}\n{text}\n{ticks}"


def escape_headings(text: str) -> str:
    """Escape line-leading ``#`` so text quoted in a prompt cannot look like one of our headings."""
    return re.sub(r"(?m)^(\s*)#", r"\1\\#", text)
