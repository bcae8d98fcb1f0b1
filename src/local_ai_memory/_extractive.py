"""The extractive summary: the five L1 sections filled from cue words when no LLM is configured.

Deterministic and offline: the goal comes from the latest user request, completed steps from
tool results, and discoveries, open issues and decisions from cue words in user and assistant
sentences. Tool outputs are data from outside, so they never feed Decisions.
"""

from __future__ import annotations

import json
import re

from ._messages import Message
from ._summary import (
    COMPLETED,
    DECISIONS,
    DISCOVERIES,
    LIST_SECTIONS,
    MAX_BULLETS,
    OPEN_ISSUES,
    Summary,
    clean_line,
    dedupe,
)
from ._tokens import TokenCounter

__all__ = ["extract_summary"]

_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+|\n+")
_DECISION_CUE = re.compile(
    r"\b(decided|decide to|decision|we will|we'll|i will use|i'll use|let's use|let's go with|going with|go with|"
    r"chose|choose|opted|instead of|prefer|agreed|switch(?:ed)? to|settled on)\b",
    re.IGNORECASE,
)
_ISSUE_CUE = re.compile(
    r"\b(todo|to do|need to|needs to|still|not yet|remaining|blocked|unresolved|open question|unclear|"
    r"fails?|failing|failed|error|exception|traceback|bug|broken|missing|unknown)\b",
    re.IGNORECASE,
)
_DISCOVERY_CUE = re.compile(
    r"\b(found|discovered|turns out|noticed|learned|shows?|reveals?|the cause|because|located|defined in|"
    r"is defined|returns|requires|depends on|note that|important|means)\b",
    re.IGNORECASE,
)
_DONE_CUE = re.compile(r"\b(done|completed|finished|fixed|created|updated|wrote|added|removed|implemented)\b", re.I)
_FOLLOW_UP = re.compile(r"^(also|and|additionally|plus|then|next|too|btw|one more thing|as well)\b", re.IGNORECASE)
_TOOL_ERROR = re.compile(r"^\W*(error|exception|traceback|failed|failure|fatal)\b", re.IGNORECASE)


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_SPLIT.split(text) if len(s.strip().split()) >= 3]


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def _goal_from(requests: list[str], previous_goal: str, counter: TokenCounter, cap: int) -> str:
    """The latest request; a follow-up ("Also ...", "And ...") is appended to the goal it extends."""
    goal = previous_goal
    for request in requests:
        text = clean_line(request)
        if goal and _FOLLOW_UP.match(text):
            room = cap - counter.count(text) - 1
            goal = f"{counter.truncate(goal, room)} {text}" if room > 8 else text
        else:
            goal = text
    return counter.truncate(goal, cap)


def _stored_output_line(content: str) -> str:
    """An externalized output's reference, said in words; any other output unchanged."""
    if not content.startswith('{"result_id"'):
        return content
    try:
        reference = json.loads(content)
        where, size = str(reference["result_id"]), int(reference["size"])
        preview = _first_line(str(reference.get("summary", "")))
    except (ValueError, KeyError, TypeError):
        return content
    return f"output of {size:,} bytes stored as tool result {where}: {preview}"


def extract_summary(
    messages: list[Message], counter: TokenCounter, target_tokens: int, previous_goal: str = ""
) -> Summary:
    """A deterministic summary from cue words, used when no LLM is configured.

    * goal: the latest user request (a follow-up such as "Also add a flag" extends the
      previous goal instead of replacing it);
    * completed: one line per tool result (tool name and the first line of its output) and
      assistant sentences reporting work done;
    * open issues: tool results that start with an error, and sentences with words such as
      "still", "need to", "fails";
    * decisions: user and assistant sentences such as "we will", "decided", "instead of"
      (never tool outputs, which are data from outside);
    * discoveries: other assistant sentences with words such as "found", "because", "returns".
    """
    bullet_cap = max(8, min(48, target_tokens // 6))
    summary = Summary()
    requests = [m.content for m in messages if m.role == "user" and m.content.strip()]
    summary.goal = _goal_from(requests, previous_goal, counter, max(8, target_tokens // 4))
    bullets = summary.bullets
    for message in messages:
        content = message.content.strip()
        if message.role == "tool":
            first = clean_line(_first_line(_stored_output_line(content)), counter, bullet_cap)
            label = message.name or "tool"
            if _TOOL_ERROR.match(content):
                bullets[OPEN_ISSUES].append(f"{label} failed: {first}")
            elif first:
                bullets[COMPLETED].append(f"{label}: {first}")
            else:
                bullets[COMPLETED].append(f"{label}: (empty result)")
            continue
        if message.role not in ("user", "assistant"):
            continue
        for sentence in _sentences(content):
            line = clean_line(sentence, counter, bullet_cap)
            if not line:
                continue
            if _DECISION_CUE.search(sentence):
                bullets[DECISIONS].append(line)
            elif message.role == "user":
                continue  # the request itself is the goal
            elif _ISSUE_CUE.search(sentence):
                bullets[OPEN_ISSUES].append(line)
            elif _DONE_CUE.search(sentence):
                bullets[COMPLETED].append(line)
            elif _DISCOVERY_CUE.search(sentence):
                bullets[DISCOVERIES].append(line)
    for name in LIST_SECTIONS:
        bullets[name] = dedupe(bullets[name])[-MAX_BULLETS:]
    return summary
