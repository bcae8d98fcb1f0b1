"""Conversation logs: what was said in a session, kept as a plain Markdown note per session.

A finished run appends its turns to the user's note ``conversations/{user}_{session}.md``::

    ---
    format: local-ai-memory/conversation
    version: 1
    session: s1
    ---
    # Conversation s1

    ## 2026-03-02 09:15 +01:00

    **user** (09:15): I switched to green tea last week.

    **assistant** (09:16): Noted: green tea, not coffee.

    **tool** (09:16): read_log -> stored result r_ab12cd (40.1 KB)

A turn is one paragraph: its speaker in bold, its local time, its text; further lines of a
turn are indented four spaces, so nothing a user says can start a heading or a turn of its
own. A tool's output is never copied in: only the tool's name and, when the output was
stored (L3), its reference. Everything here is pure (no disk, no model): the knowledge
facade appends what :func:`render_run` makes, and recall reads turns back with
:func:`parse_turns`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Protocol

from pydantic import BaseModel, ConfigDict

__all__ = [
    "CONVERSATIONS",
    "FORMAT",
    "VERSION",
    "ConversationHeader",
    "LoggedTurn",
    "Said",
    "Turn",
    "header_text",
    "parse_turns",
    "render_run",
    "turns_of",
]

CONVERSATIONS = "conversations"
"""The category (folder) of conversation logs."""
FORMAT = "local-ai-memory/conversation"
VERSION = 1

_TURN = re.compile(r"^\*\*(?P<speaker>[^*\n]{1,40})\*\* \((?P<time>\d\d:\d\d)\): ?(?P<text>.*)$")
_RUN = re.compile(r"^## (?P<date>\d{4}-\d\d-\d\d) (?P<time>\d\d:\d\d)(?: (?P<offset>[+-]\d\d:\d\d))?\s*$")
_CONTINUED = "    "


class ConversationHeader(BaseModel):
    """The front matter of a conversation log: what it is and which session it records."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    format: str = FORMAT
    version: int = VERSION
    session: str


class Said(Protocol):
    """A message as a log reads it (the runtime's ``Message`` is one; the knowledge engine does
    not import the runtime's)."""

    @property
    def role(self) -> str: ...
    @property
    def content(self) -> str: ...
    @property
    def name(self) -> str | None: ...
    @property
    def tool_calls(self) -> tuple[str, ...]: ...
    @property
    def time(self) -> float | None: ...


@dataclass(frozen=True)
class Turn:
    """One turn to log: who spoke, when (seconds since the epoch), and what they said."""

    speaker: str
    time: float
    text: str


@dataclass(frozen=True)
class LoggedTurn:
    """A turn read back from a log: ``ordinal`` counts the log's turns from 0, ``line`` is its
    first line (0-based) in the note, ``run`` the run heading it sits under (``2026-03-02 09:15``)."""

    ordinal: int
    line: int
    speaker: str
    time: str
    run: str
    text: str


def _reference(content: str) -> str | None:
    """``" -> stored result <id> (<size>)"`` when ``content`` is a stored output's reference."""
    try:
        data = json.loads(content)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("result_id"), str):
        return None
    size = data.get("size")
    return f" -> stored result {data['result_id']}" + (f" ({size})" if isinstance(size, str) and size else "")


def _turn_text(message: Said) -> str | None:
    """What a log keeps of ``message``: the words of users and assistants, a tool's name and
    stored reference (never its output), the tools an assistant called; ``None``: nothing."""
    if message.role == "system":
        return None
    if message.role == "tool":
        return (message.name or "a tool") + (_reference(message.content) or "")
    text = message.content.strip()
    if message.tool_calls:
        calls = "called " + ", ".join(message.tool_calls)
        text = f"{text}\n{calls}" if text else calls
    return text or None


def turns_of(messages: Sequence[Said], now: float) -> list[Turn]:
    """The turns of ``messages`` to log, each at its own time (``Message.time``), else at the
    time of the turn before it (a reply given without one), else ``now``."""
    turns: list[Turn] = []
    for message in messages:
        text = _turn_text(message)
        if text is not None:
            when = message.time if message.time is not None else (turns[-1].time if turns else now)
            turns.append(Turn("tool" if message.role == "tool" else message.role, when, text))
    return turns


def _local(when: float) -> datetime:
    return datetime.fromtimestamp(when, tz=timezone.utc).astimezone()


def header_text(session_id: str) -> str:
    """The opening of a new log: front matter (:class:`ConversationHeader`) and a title."""
    header = ConversationHeader(session=session_id)
    session = json.dumps(session_id, ensure_ascii=False)
    return (
        f"---\nformat: {header.format}\nversion: {header.version}\nsession: {session}\n---\n"
        f"# Conversation {' '.join(session_id.split())}\n"
    )


def _paragraph(text: str) -> str:
    """``text`` as the rest of one paragraph: blank lines dropped, later lines indented."""
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    return ("\n" + _CONTINUED).join(lines)


def render_run(turns: Sequence[Turn]) -> str:
    """One run's section: a heading with the run's local date, time and UTC offset, then a
    paragraph per turn. ``""`` for no turns (nothing is logged)."""
    if not turns:
        return ""
    start = _local(turns[0].time)
    offset = start.strftime("%z")
    parts = [f"## {start:%Y-%m-%d %H:%M} {offset[:3]}:{offset[3:]}"]
    parts.extend(f"**{turn.speaker}** ({_local(turn.time):%H:%M}): {_paragraph(turn.text)}" for turn in turns)
    return "\n\n".join(parts) + "\n"


def parse_turns(text: str) -> list[LoggedTurn]:
    """The turns of a log, in order, with the run each belongs to."""
    turns: list[LoggedTurn] = []
    run = ""
    current: tuple[int, str, str, list[str]] | None = None

    def close() -> None:
        if current is not None:
            line, speaker, time, parts = current
            turns.append(LoggedTurn(len(turns), line, speaker, time, run, "\n".join(parts)))

    for number, line in enumerate(text.splitlines()):
        if current is not None and line.startswith(_CONTINUED):
            current[3].append(line[len(_CONTINUED) :])
            continue
        close()
        current = None
        if (heading := _RUN.match(line)) is not None:
            run = f"{heading['date']} {heading['time']}"
        elif (turn := _TURN.match(line)) is not None:
            current = (number, turn["speaker"], turn["time"], [turn["text"]])
    close()
    return turns
