"""The pure part of the memory tool: ``/memories`` paths to notes, and the texts the model reads.

How the tool's file tree maps to a user's notes (the one layout, documented in the README):

* ``/memories`` is the user's memory. Its files are the user's notes in the **default
  category** (the first of ``memory.categories``, ``knowledge`` unless configured):
  ``/memories/deploy.md`` is the note ``deploy``.
* Its directories are the **other configured categories**: ``/memories/projects/alpha.md`` is
  the note ``alpha`` in the category ``projects``. The default category may be named as a
  directory too (``/memories/knowledge/deploy.md`` is ``/memories/deploy.md``).
* There are no deeper directories and no other ones: the categories are what search and
  retrieval look at, so a file elsewhere would be a note the memory never finds. Such a path
  is refused with an error that says where files can go.
* Every note is Markdown: ``/memories/todo`` and ``/memories/todo.md`` are one note, listed as
  ``todo.md``.

Every name is checked by the library's naming rules when it is used (``..``, separators, NUL,
control and invisible characters are refused); here the path is split and its shape checked.
Nothing in this module touches storage, so the sync and async tools share all of it.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from anthropic.lib.tools import ToolError

__all__ = [
    "MAX_VIEW_CHARS",
    "MAX_VIEW_ENTRIES",
    "MAX_VIEW_LINES",
    "ROOT",
    "Target",
    "display_path",
    "edit_snippet",
    "file_tail",
    "file_view",
    "listing_view",
    "parse_path",
]

ROOT = "/memories"
MAX_VIEW_LINES = 400
"""Lines of a file one ``view`` shows at most; the answer says how to ask for the next ones."""
MAX_VIEW_CHARS = 40_000
"""Characters of a file one ``view`` shows at most (long lines fill a page sooner)."""
MAX_VIEW_ENTRIES = 200
"""Entries of a directory listing one ``view`` shows at most."""
_NUMBER_WIDTH = 6


@dataclass(frozen=True)
class Target:
    """What a path names: a directory (``name`` is ``None``: the root when ``category`` is ``None``
    too) or the note ``name`` in ``category``."""

    category: str | None
    name: str | None

    @property
    def is_dir(self) -> bool:
        return self.name is None


def _layout(categories: Sequence[str]) -> str:
    others = ", ".join(f"{ROOT}/{category}/" for category in categories[1:])
    where = f"directly in {ROOT}/" + (f" or in one of {others}" if others else "")
    return f"Files go {where} (directories here are the memory's categories; no other directories)."


def parse_path(path: object, categories: Sequence[str]) -> Target:
    """The :class:`Target` of a tool path; :class:`ToolError` for anything outside the layout."""
    if not isinstance(path, str):
        raise ToolError(f"The path must be a string, got {type(path).__name__}")
    if path != ROOT and not path.startswith(ROOT + "/"):
        raise ToolError(f"The path must start with {ROOT}, got: {path!r}")
    rest = path[len(ROOT) + 1 :]
    as_directory = rest.endswith("/")
    rest = rest.removesuffix("/")
    if not rest:
        return Target(None, None)
    parts = rest.split("/")
    for part in parts:
        folded = unicodedata.normalize("NFKC", part)  # a fullwidth solidus or dot reads as the real one
        if folded.strip(".") == "" or "/" in folded or "\\" in folded or "\x00" in part:
            raise ToolError(f"The path {path!r} is not allowed: no '.', '..', empty or backslashed parts")
    if len(parts) == 1 and parts[0] in categories:
        return Target(parts[0], None)
    if as_directory:
        raise ToolError(f"The directory {path!r} does not exist. {_layout(categories)}")
    if len(parts) == 1:
        return Target(categories[0], parts[0])
    if len(parts) == 2 and parts[0] in categories:
        return Target(parts[0], parts[1])
    raise ToolError(f"The path {path!r} is outside the memory's layout. {_layout(categories)}")


def file_tail(name: str) -> str:
    """The file name a note ``name`` is shown under (``.md`` added unless it has it)."""
    return name if name.endswith(".md") else f"{name}.md"


def display_path(category: str, name: str | None, categories: Sequence[str]) -> str:
    """The path a note (or, with ``name`` ``None``, a category directory) is shown under."""
    base = ROOT if category == categories[0] and name is not None else f"{ROOT}/{category}"
    return base if name is None else f"{base}/{file_tail(name)}"


def _size(count: int) -> str:
    """A byte count the way ``du -h`` writes it: ``512B``, ``1.5K``, ``2M``."""
    if count < 1024:
        return f"{count}B"
    value, unit = (count / 1024, "K") if count < 1024 * 1024 else (count / (1024 * 1024), "M")
    return f"{value:.0f}{unit}" if value.is_integer() else f"{value:.1f}{unit}"


def listing_view(path: str, entries: Sequence[tuple[str, int | None]], view_range: Sequence[int] | None) -> str:
    """A directory listing (``(shown path, size in bytes)`` per entry; size ``None``: the entry
    cannot be read), paged by ``view_range`` (1-based entry numbers, ``-1`` for the end) and
    :data:`MAX_VIEW_ENTRIES`."""
    start, end = _window(view_range, len(entries), MAX_VIEW_ENTRIES, "entries")
    shown = entries[start:end]
    lines = [f"Here are the files and directories in {path} ({len(entries)} entries):"]
    lines += [
        f"{_size(size)}\t{entry}" if size is not None else f"-\t{entry} (cannot be read)" for entry, size in shown
    ]
    if not entries:
        lines.append("(empty)")
    if end < len(entries) or start > 0:
        lines.append(
            f"(entries {start + 1}-{end} of {len(entries)}; view {path} with view_range "
            f"[{end + 1}, {min(end + MAX_VIEW_ENTRIES, len(entries))}] for the next ones)"
            if end < len(entries)
            else f"(entries {start + 1}-{end} of {len(entries)})"
        )
    return "\n".join(lines)


def _window(view_range: Sequence[int] | None, total: int, page: int, what: str) -> tuple[int, int]:
    """0-based ``[start, end)`` of a 1-based inclusive ``view_range`` (end ``-1``: to the end),
    at most ``page`` long."""
    if view_range is None:
        return 0, min(total, page)
    if len(view_range) != 2 or not all(isinstance(bound, int) for bound in view_range):
        raise ToolError(f"view_range must be two integers [start, end], got {list(view_range)!r}")
    first, last = view_range
    if first < 1 or (last != -1 and last < first):
        raise ToolError(f"Invalid view_range {list(view_range)!r}: start is 1 or more, end is -1 or at least start")
    if total and first > total:
        raise ToolError(f"Invalid view_range {list(view_range)!r}: there are only {total} {what}")
    start = first - 1
    end = total if last == -1 else min(last, total)
    return start, min(end, start + page)


def file_view(path: str, text: str, view_range: Sequence[int] | None) -> str:
    """A file's lines, numbered, paged by ``view_range`` and the page limits."""
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    start, end = _window(view_range, len(lines), MAX_VIEW_LINES, "lines")
    shown: list[str] = []
    used = 0
    for number in range(start, end):
        line = f"{number + 1:>{_NUMBER_WIDTH}}\t{lines[number]}"
        if shown and used + len(line) > MAX_VIEW_CHARS:
            end = number
            break
        shown.append(line)
        used += len(line) + 1
    head = f"Here's the content of {path} with line numbers:"
    body = "\n".join(shown)
    if end < len(lines):
        more = f"[{end + 1}, {min(end + MAX_VIEW_LINES, len(lines))}]"
        body += f"\n(lines {start + 1}-{end} of {len(lines)}; view with view_range {more} for more)"
    return f"{head}\n{body}"


def edit_snippet(before: str, after: str) -> str:
    """A few numbered lines of ``after`` around the first place it differs from ``before``."""
    index = next(
        (i for i, (a, b) in enumerate(zip(before, after, strict=False)) if a != b), min(len(before), len(after))
    )
    changed = after[:index].count("\n")
    lines = after.split("\n")
    first, last = max(0, changed - 2), min(len(lines), changed + 4)
    return "\n".join(f"{number + 1:>{_NUMBER_WIDTH}}\t{lines[number]}" for number in range(first, last))
