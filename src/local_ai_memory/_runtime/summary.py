"""The L1 summary model: five fixed sections, parsed leniently, rendered by the library, kept in budget.

A :class:`Summary` is the goal as text and four lists of one-line bullets (oldest first).
:func:`parse_summary` reads whatever a model answered (code fences, prose, unknown or repeated
headings, bold or ``Name:`` headings) into one; :func:`render_summary` writes the only shape
that is ever stored: the five headings of :data:`SECTIONS`, in order, even when empty.
:func:`merge_summaries` folds an update into the previous summary (earlier decisions and
what the user stated are carried over), and :func:`enforce_budget` trims bullets oldest first
from the least important section (:data:`TRIM_ORDER`), then the bullets the user stated
(marked with :data:`USER_MARK`), cutting the goal last, until the text fits.
:func:`summary_budget` is the size a summary may take: the target, and never more than
what it summarizes unless the headings, the decisions and what the user stated need it.

Everything here is pure: no I/O, no model calls.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from local_ai_memory._shared.errors import InvalidInputError
from local_ai_memory._shared.tokens import TokenCounter

__all__ = [
    "COMPLETED",
    "DECISIONS",
    "DISCOVERIES",
    "GOAL",
    "LIST_SECTIONS",
    "MAX_BULLETS",
    "OPEN_ISSUES",
    "SECTIONS",
    "TRIM_ORDER",
    "USER_MARK",
    "Summary",
    "cap_summary",
    "clean_line",
    "dedupe",
    "enforce_budget",
    "keep_newest",
    "merge_summaries",
    "parse_existing",
    "parse_summary",
    "render_summary",
    "summary_budget",
    "user_stated",
]

GOAL = "Current Goal"
COMPLETED = "Completed"
DISCOVERIES = "Important Discoveries"
OPEN_ISSUES = "Open Issues"
DECISIONS = "Decisions"
SECTIONS: tuple[str, ...] = (GOAL, COMPLETED, DISCOVERIES, OPEN_ISSUES, DECISIONS)
LIST_SECTIONS: tuple[str, ...] = SECTIONS[1:]
TRIM_ORDER: tuple[str, ...] = (COMPLETED, DISCOVERIES, OPEN_ISSUES, DECISIONS)
"""List sections from least to most important: trimming drains them in this order, the goal last."""

MAX_BULLETS = 40

USER_MARK = "User: "
"""Starts a bullet that repeats what the user stated (a fact, a decision, a preference).

The agent can find again what a tool returned or what it worked out; it cannot find again what
only the user said. Such bullets are therefore trimmed after all others (only the goal goes
later) and carried over when a model's update leaves them out.
"""

_ALIASES = {
    "current goal": GOAL,
    "goal": GOAL,
    "current task": GOAL,
    "task": GOAL,
    "completed": COMPLETED,
    "done": COMPLETED,
    "completed steps": COMPLETED,
    "important discoveries": DISCOVERIES,
    "discoveries": DISCOVERIES,
    "findings": DISCOVERIES,
    "open issues": OPEN_ISSUES,
    "open questions": OPEN_ISSUES,
    "issues": OPEN_ISSUES,
    "decisions": DECISIONS,
    "decisions made": DECISIONS,
}
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s*(?P<name>.*?)\s*#*\s*$")
_BOLD_HEADING = re.compile(r"^\s*(?:\*\*|__)(?P<name>[^*_]{1,60}?):?(?:\*\*|__):?\s*$")
_PLAIN_HEADING = re.compile(r"^\s*(?P<name>[A-Za-z ]{3,40}):\s*$")
_FENCE_LINE = re.compile(r"^\s*(```|~~~)")
_BULLET = re.compile(r"^\s*(?:[-*+•]|\d{1,3}[.)])\s+")
_LEADING_MARKS = re.compile(r"^(?:[\s#>*+•]|-(?![\d.]))+")  # "-0.3%" keeps its sign
_EMPTY_MARKERS = {"", "none", "n/a", "na", "-", "...", "…", "(none)", "none yet", "nothing", "nothing yet", "tbd"}


@dataclass
class Summary:
    """The five sections: the goal as text, the others as bullets (oldest first)."""

    goal: str = ""
    bullets: dict[str, list[str]] = field(default_factory=lambda: {name: [] for name in LIST_SECTIONS})

    def copy(self) -> Summary:
        return Summary(self.goal, {name: list(items) for name, items in self.bullets.items()})


def user_stated(item: str) -> bool:
    """Whether a bullet repeats what the user stated (it starts with :data:`USER_MARK`)."""
    return item.startswith(USER_MARK)


def keep_newest(items: list[str], limit: int) -> list[str]:
    """At most ``limit`` items: the oldest ones the user did not state go first, in order kept."""
    extra = len(items) - limit
    if extra <= 0:
        return items
    dropped: set[int] = set()
    for wanted in (False, True):
        for index, item in enumerate(items):
            if len(dropped) == extra:
                break
            if user_stated(item) == wanted:
                dropped.add(index)
    return [item for index, item in enumerate(items) if index not in dropped]


def clean_line(text: str, counter: TokenCounter | None = None, max_tokens: int = 0) -> str:
    """One line of plain text: whitespace collapsed, leading Markdown marks removed, optionally cut."""
    line = " ".join(text.replace("```", "").replace("~~~", "").split())
    line = _LEADING_MARKS.sub("", line).strip()
    if counter is not None and max_tokens > 0:
        line = counter.truncate(line, max_tokens)
    return line


def render_summary(summary: Summary) -> str:
    """The L1 Markdown text: every section heading, in order, even when empty."""
    blocks = [f"# {GOAL}\n{summary.goal}".rstrip()]
    for name in LIST_SECTIONS:
        lines = [f"# {name}", *(f"* {item}" for item in summary.bullets[name])]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"


def _section_of(line: str) -> tuple[bool, str | None]:
    """Whether ``line`` is a heading, and which section it names (``None`` for an unknown one)."""
    for pattern in (_HEADING, _BOLD_HEADING, _PLAIN_HEADING):
        match = pattern.match(line)
        if match:
            name = re.sub(r"[^a-z ]", "", match["name"].lower()).strip()
            name = " ".join(name.split())
            if pattern is not _HEADING and name not in _ALIASES:
                continue  # "Note:" is prose, not a heading
            return True, _ALIASES.get(name)
    return False, None


def parse_summary(text: str) -> tuple[Summary, set[str]] | None:
    """Parse a model's answer leniently; ``None`` when it names none of the five sections.

    Returns the summary and the set of sections whose headings appeared. Code fences are
    ignored, text before the first heading and under unknown headings is dropped, repeated
    headings are merged, and prose after a section's bullets (after a blank line) is dropped.
    """
    summary = Summary()
    found: set[str] = set()
    current: str | None = None
    goal_lines: list[str] = []
    saw_bullet = False
    after_blank = False
    for raw in text.splitlines():
        if _FENCE_LINE.match(raw):
            continue
        is_heading, section = _section_of(raw)
        if is_heading:
            current, saw_bullet, after_blank = section, False, False
            if section is not None:
                found.add(section)
            continue
        if current is None:
            continue
        if not raw.strip():
            after_blank = True
            continue
        if current == GOAL:
            cleaned = clean_line(raw)
            if cleaned.lower() not in _EMPTY_MARKERS:
                goal_lines.append(cleaned)
            continue
        is_bullet = bool(_BULLET.match(raw))
        items = summary.bullets[current]
        if not is_bullet and saw_bullet and after_blank:
            continue  # closing prose ("Let me know if ...") after the list
        cleaned = clean_line(_BULLET.sub("", raw, count=1))
        if cleaned.lower().strip(".") in _EMPTY_MARKERS:
            continue
        if not is_bullet and saw_bullet and not after_blank and raw[:1].isspace() and items:
            items[-1] = f"{items[-1]} {cleaned}"  # an indented continuation line
        else:
            items.append(cleaned)
        saw_bullet = saw_bullet or is_bullet
        after_blank = False
    if not found:
        return None
    summary.goal = " ".join(goal_lines)
    return summary, found


def parse_existing(text: str) -> Summary:
    """The stored L1 as a :class:`Summary`; free text written directly becomes discoveries."""
    parsed = parse_summary(text)
    if parsed is not None:
        return parsed[0]
    summary = Summary()
    for raw in text.splitlines():
        cleaned = clean_line(raw)
        if cleaned:
            summary.bullets[DISCOVERIES].append(cleaned)
    return summary


def _key(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


def dedupe(items: Iterable[str]) -> list[str]:
    seen: set[str] = set()
    out: list[str] = []
    for item in items:
        key = _key(item)
        if key and key not in seen:
            seen.add(key)
            out.append(item)
    return out


def merge_summaries(old: Summary, new: Summary, answered: set[str] | None = None) -> Summary:
    """Merge an update into the previous summary.

    ``answered`` is the set of sections the update actually contains (``None``: the update is
    additive, as in the extractive path, and every list is appended to the old one). A
    section the update left out keeps its old content; old decisions missing from the update
    are kept, before the new ones, and so are old bullets the user stated (:data:`USER_MARK`)
    that the update has in none of its sections.
    """
    merged = Summary(new.goal or old.goal)
    present = {_key(item) for items in new.bullets.values() for item in items}
    for name in LIST_SECTIONS:
        if answered is None:
            merged.bullets[name] = dedupe([*old.bullets[name], *new.bullets[name]])
        elif name not in answered:
            merged.bullets[name] = list(old.bullets[name])
        else:
            carried = [
                item
                for item in old.bullets[name]
                if (name == DECISIONS or user_stated(item)) and _key(item) not in present
            ]
            merged.bullets[name] = dedupe([*carried, *new.bullets[name]])
    return merged


def cap_summary(summary: Summary, counter: TokenCounter, target_tokens: int) -> Summary:
    """Bound each piece: the goal to a quarter of the budget, each bullet to a sixth, at most 40 per section.

    Over 40 bullets, the oldest ones the user did not state go first.
    """
    goal_cap = max(8, target_tokens // 4)
    bullet_cap = max(8, target_tokens // 6)
    capped = Summary(clean_line(summary.goal, counter, goal_cap))
    for name in LIST_SECTIONS:
        items = [clean_line(item, counter, bullet_cap) for item in summary.bullets[name]]
        capped.bullets[name] = keep_newest([item for item in dedupe(items) if item], MAX_BULLETS)
    return capped


def summary_budget(summary: Summary, counter: TokenCounter, target_tokens: int, tokens_before: int) -> int:
    """The most tokens ``summary`` may take once stored: never more than it summarizes, if that is less.

    ``tokens_before`` is the size of the messages the summary was written from. The budget is
    ``target_tokens`` when that is smaller, otherwise ``tokens_before``: a summary of a short
    exchange is not longer than the exchange. Two things are never given up for that rule: the
    five headings (the stored format) and the goal with the decisions (from either side) and the
    bullets the user stated (:data:`USER_MARK`), which nothing else keeps once the messages are
    compacted (a run that ends "We will keep the REST paths unchanged." must leave that
    decision in L1); only when those alone are larger than the input is the summary longer. The compressor applies the
    rule when there is no earlier L1: merged into one, a summary also stands for messages that
    are gone, and only the target bounds it.
    """
    if tokens_before >= target_tokens:
        return target_tokens
    core = Summary(
        summary.goal,
        {name: [i for i in items if user_stated(i) or name == DECISIONS] for name, items in summary.bullets.items()},
    )
    return min(target_tokens, max(tokens_before, counter.count(render_summary(core))))


def enforce_budget(summary: Summary, counter: TokenCounter, target_tokens: int) -> tuple[Summary, bool]:
    """Trim ``summary`` until its rendering fits ``target_tokens``; return it and whether it was cut.

    Bullets go oldest first from the least important section (:data:`TRIM_ORDER`), first those
    the user did not state, then those the user stated (:data:`USER_MARK`); the goal is cut
    last. Raises :class:`InvalidInputError` if even the five empty headings do not fit.
    """
    if counter.count(render_summary(Summary())) > target_tokens:
        raise InvalidInputError(f"target_tokens={target_tokens} is too small for the five section headings")
    result = summary.copy()
    size = counter.count(render_summary(result))
    if size <= target_tokens:
        return result, False
    # Estimate with per-bullet costs so a long answer is not re-counted once per removed bullet.
    over = size - target_tokens
    for protected in (False, True):
        for name in TRIM_ORDER:
            items = result.bullets[name]
            while over > 0 and (index := _oldest(items, protected)) is not None:
                over -= counter.count(f"* {items.pop(index)}\n")
        if over <= 0:
            break
    size = counter.count(render_summary(result))
    while size > target_tokens:
        found = next(
            (
                (name, index)
                for protected in (False, True)
                for name in TRIM_ORDER
                if (index := _oldest(result.bullets[name], protected)) is not None
            ),
            None,
        )
        if found is not None:
            result.bullets[found[0]].pop(found[1])
        else:
            keep = counter.count(result.goal) - (size - target_tokens)
            result.goal = counter.truncate(result.goal, keep) if keep > 0 else ""
        size = counter.count(render_summary(result))
    return result, True


def _oldest(items: list[str], protected: bool) -> int | None:
    """The index of the oldest bullet the user stated (``protected``) or did not state; ``None``: none."""
    return next((index for index, item in enumerate(items) if user_stated(item) == protected), None)
