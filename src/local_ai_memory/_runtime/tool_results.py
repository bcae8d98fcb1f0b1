"""``ToolResultStore``: keep large tool outputs out of the model's context (L3).

:meth:`ToolResultStore.externalize` returns a tool's output unchanged when it is at most
``config.tool_result_inline_limit`` UTF-8 bytes (default 6,144) or when it is an error message.
Anything larger is saved as an L3 record and the model gets a short JSON reference instead::

    {"result_id": "3f9c0a7be21d4c55", "summary": "<first 1000 characters>…", "size": 128450,
     "chars": 128450, "lines": 2210, "pages": 17}

``size`` is the original UTF-8 byte count, ``chars`` its length in characters, ``lines`` its
number of lines and ``pages`` how many default pages (:data:`DEFAULT_PAGE_CHARS` characters,
about 2,000 tokens) reading it whole takes; the summary ends with ``…`` only when it was cut.
References written before ``chars``/``lines``/``pages`` existed still parse.
Result ids are 16 random hex characters, checked to be unused; they are never derived from a
provider's tool-call id.

The model reads the full output back in pages with :meth:`ToolResultStore.load_page`
(characters ``offset`` to ``offset + limit``), rendered by :func:`render_page`, or by lines
with :meth:`ToolResultStore.read_lines`; or it asks :meth:`ToolResultStore.search` for the
lines matching a literal or regular-expression pattern, with line numbers and context, instead
of paging through it. Pages and search answers are plain text handed to the model and are never
externalized again. Every read goes through the scope's manager, so another scope's id is
"not found" whichever way it is asked for.

Retention (:class:`RetentionPolicy`) bounds each scope's results by count, bytes and age.
:meth:`ToolResultStore.prune` applies it (it also runs after an externalization pushes the
scope over its count or byte bound, sparing the result just stored; the byte total is
re-measured each time another eighth of ``max_bytes`` was written through this store) and never removes a
result referenced by a resumable (``in_progress`` or ``interrupted``) checkpoint of the scope.
Protected results still count toward the bounds, so older unprotected ones go first.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import secrets
import time
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from local_ai_memory._runtime.checkpoints import list_checkpoints
from local_ai_memory._runtime.scope import MemoryManager
from local_ai_memory._shared.errors import InvalidInputError, StorageError
from local_ai_memory._shared.events import Event, log_event
from local_ai_memory._shared.records import AgentCheckpoint, ToolIndexEntry, ToolResultPage

__all__ = [
    "DEFAULT_PAGE_CHARS",
    "DEFAULT_PAGE_LINES",
    "DEFAULT_SEARCH_MATCHES",
    "MAX_SEARCH_MATCHES",
    "RetentionPolicy",
    "SearchHit",
    "ToolResultLines",
    "ToolResultPage",
    "ToolResultReference",
    "ToolResultSearch",
    "ToolResultStore",
    "make_reference",
    "page_number",
    "parse_reference",
    "protected_result_ids",
    "render_lines",
    "render_page",
    "render_search",
    "search_lines",
    "select_for_pruning",
    "summarize",
    "utf8_size",
]

DEFAULT_PAGE_CHARS = 8000
"""Characters in a default page: about 2,000 tokens, sized for a model's context rather than a terminal."""
DEFAULT_PAGE_LINES = 200
"""Lines in a default page read by lines."""
DEFAULT_SEARCH_MATCHES = 20
"""Matching lines one search answer shows by default."""
MAX_SEARCH_MATCHES = 100
MAX_CONTEXT_LINES = 10
MAX_PATTERN_CHARS = 500
_SHOWN_LINE_CHARS = 400  # a search answer cuts longer lines (a minified JSON line is one huge line)
_READ_CHUNK = 1 << 20
_SIZE_CHUNK = 1 << 20
_ID_BYTES = 8


class RetentionPolicy(BaseModel):
    """How many stored tool results a scope keeps. ``None`` switches a bound off."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_count: int | None = Field(default=500, ge=0, description="Results kept per scope (newest first).")
    max_bytes: int | None = Field(default=512 * 1024 * 1024, ge=0, description="Bytes of stored files kept per scope.")
    max_age_seconds: float | None = Field(default=None, gt=0, description="Results older than this are removed.")


def utf8_size(text: str) -> int:
    """UTF-8 byte count of ``text`` without building a full encoded copy (lone surrogates count 3)."""
    if len(text) <= _SIZE_CHUNK:
        return len(text.encode("utf-8", "surrogatepass"))
    return sum(
        len(text[start : start + _SIZE_CHUNK].encode("utf-8", "surrogatepass"))
        for start in range(0, len(text), _SIZE_CHUNK)
    )


def summarize(content: str, max_chars: int) -> str:
    """The first ``max_chars`` characters of ``content``, plus ``…`` when it was cut."""
    return content if len(content) <= max_chars else content[:max_chars] + "…"


class ToolResultReference(BaseModel):
    """What the model sees in place of an externalized output: ``{result_id, summary, size}``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    result_id: str
    summary: str
    size: int = Field(ge=0, description="UTF-8 bytes of the whole output.")
    chars: int | None = Field(default=None, ge=0, description="Characters of the whole output.")
    lines: int | None = Field(default=None, ge=0, description="Lines of the whole output.")
    pages: int | None = Field(default=None, ge=0, description="Default pages (DEFAULT_PAGE_CHARS) it takes to read.")


def _line_count(content: str) -> int:
    return content.count("\n") + (1 if content and not content.endswith("\n") else 0)


def make_reference(result_id: str, content: str, size: int, summary_max_chars: int) -> str:
    """The JSON reference the model sees in place of an externalized output.

    Besides the id, a summary and ``size`` (UTF-8 bytes), it says how long the output is in
    characters and lines and how many default pages reading it takes, so a model can tell
    whether to page or to search (:meth:`ToolResultStore.search`).
    """
    reference = {
        "result_id": result_id,
        "summary": summarize(content, summary_max_chars),
        "size": size,
        "chars": len(content),
        "lines": _line_count(content),
        "pages": max(1, math.ceil(len(content) / DEFAULT_PAGE_CHARS)),
    }
    return json.dumps(reference, ensure_ascii=False)


def parse_reference(text: object) -> ToolResultReference | None:
    """The reference in a tool message's text, or ``None`` if it is not exactly one.

    The one parser of the format :func:`make_reference` writes; both integrations call it.

    >>> parse_reference('{"result_id": "3f9c0a7be21d4c55", "summary": "ab…", "size": 9000}').result_id
    '3f9c0a7be21d4c55'
    >>> parse_reference("plain tool output") is None
    True
    """
    if not isinstance(text, str) or not text.startswith('{"result_id"'):
        return None
    try:
        return ToolResultReference.model_validate_json(text)
    except ValidationError:
        return None


def page_number(page: ToolResultPage) -> tuple[int, int]:
    """``(number, count)`` of ``page`` among the pages of its size (:attr:`~ToolResultPage.limit`,
    else its own length) that tile the output around it: the pages before it from the start
    (the first one maybe shorter when the offset is not a multiple of the size), this one, and
    those after it to the end.

    So reading on from any offset with one limit labels the pages ``k``, ``k+1``, ... of one
    count, the last page is ``count of count``, and the short last page no longer changes the
    count (it used to divide by its own length: "page 2 of 3", then "page 5 of 6").
    """
    size = max(1, page.limit or len(page.content))
    number = -(-page.offset // size) + 1
    return number, number + -(-page.remaining // size)


def render_page(page: ToolResultPage) -> str:
    """A page as text for the model: a one-line header saying where it is, then the content."""
    end = page.offset + len(page.content)
    if page.next_offset is None:
        where = "end of result"
    else:
        where = f"{page.remaining} more characters; call load_tool_result with offset={page.next_offset} for the next"
    if page.content or not page.total_chars:
        number, count = page_number(page)
        position = f"page {number} of {count}"
    else:  # an offset at or past the end: no page holds it
        position = "past the last page"
    header = (
        f"[tool result {page.result_id} ({page.tool or 'unknown tool'}): "
        f"characters {page.offset}-{end} of {page.total_chars}; {position}; {where}]"
    )
    return f"{header}\n{page.content}"


@dataclass(frozen=True)
class ToolResultLines:
    """Lines ``first`` to ``first + len(lines) - 1`` (1-based) of a stored output, out of ``total_lines``."""

    result_id: str
    tool: str
    first: int
    lines: tuple[str, ...]
    total_lines: int

    @property
    def next_line(self) -> int | None:
        """Where the next page of lines starts; ``None`` at the end."""
        after = self.first + len(self.lines)
        return after if after <= self.total_lines else None


def render_lines(page: ToolResultLines) -> str:
    """A page of lines for the model: a header, then each line after its number."""
    last = page.first + len(page.lines) - 1
    if page.next_line is None:
        where = "end of result"
    else:
        where = f"{page.total_lines - last} more lines; call load_tool_result with line={page.next_line} for the next"
    span = f"lines {page.first}-{last}" if page.lines else f"no lines from line {page.first}"
    header = f"[tool result {page.result_id} ({page.tool or 'unknown tool'}): {span} of {page.total_lines}; {where}]"
    body = "\n".join(f"{page.first + index}: {line}" for index, line in enumerate(page.lines))
    return f"{header}\n{body}".rstrip("\n")


@dataclass(frozen=True)
class SearchHit:
    """One matching line (``line``, 1-based) with the lines around it (``(number, text)`` pairs, in order)."""

    line: int
    around: tuple[tuple[int, str], ...]


@dataclass(frozen=True)
class ToolResultSearch:
    """What :meth:`ToolResultStore.search` found: the hits shown, how many match in all, where the next start."""

    result_id: str
    tool: str
    pattern: str
    hits: tuple[SearchHit, ...]
    total_matches: int
    total_lines: int
    skip: int

    @property
    def next_skip(self) -> int | None:
        """The ``skip`` that shows the next matches; ``None`` when none are left."""
        after = self.skip + len(self.hits)
        return after if after < self.total_matches else None


def _shown(text: str) -> str:
    return text if len(text) <= _SHOWN_LINE_CHARS else text[:_SHOWN_LINE_CHARS] + f"… [{len(text):,} characters]"


def render_search(found: ToolResultSearch) -> str:
    """A search answer for the model: a header, then each hit's lines, the matching one marked with ``>``."""
    tool = found.tool or "unknown tool"
    if not found.total_matches:
        return (
            f"[search in tool result {found.result_id} ({tool}), {found.total_lines} lines: "
            f"no line matches {found.pattern!r}]"
        )
    if not found.hits:
        return (
            f"[search in tool result {found.result_id} ({tool}): {found.total_matches} matching lines, "
            f"none after skip={found.skip}]"
        )
    first, last = found.skip + 1, found.skip + len(found.hits)
    more = f"; call search_tool_result with skip={found.next_skip} for more" if found.next_skip is not None else ""
    header = (
        f"[search in tool result {found.result_id} ({tool}), {found.total_lines} lines: "
        f"matches {first}-{last} of {found.total_matches} for {found.pattern!r}{more}]"
    )
    blocks: list[str] = []
    shown_until = 0
    for hit in found.hits:
        lines = [(number, text) for number, text in hit.around if number > shown_until]
        if blocks and lines and lines[0][0] > shown_until + 1:
            blocks.append("--")
        for number, text in lines:
            mark = ">" if number == hit.line else " "
            blocks.append(f"{mark}{number}: {_shown(text)}")
        shown_until = max(shown_until, hit.around[-1][0] if hit.around else hit.line)
    return header + "\n" + "\n".join(blocks)


def _whole_number(name: str, value: object, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        bound = f" and <= {high}" if high is not None else ""
        raise InvalidInputError(f"{name} must be a whole number >= {low}{bound}, got {value!r}")
    return value


def _matcher(pattern: object, regex: bool, ignore_case: bool) -> re.Pattern[str]:
    if not isinstance(pattern, str) or not pattern:
        raise InvalidInputError("pattern must be a non-empty string")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise InvalidInputError(f"pattern must be at most {MAX_PATTERN_CHARS} characters, got {len(pattern)}")
    try:
        return re.compile(pattern if regex else re.escape(pattern), re.IGNORECASE if ignore_case else 0)
    except re.error as exc:
        raise InvalidInputError(f"pattern is not a valid regular expression: {exc}") from exc


def search_lines(
    result_id: str,
    tool: str,
    content: str,
    pattern: str,
    *,
    regex: bool = False,
    ignore_case: bool = True,
    context: int = 2,
    skip: int = 0,
    max_matches: int = DEFAULT_SEARCH_MATCHES,
) -> ToolResultSearch:
    """The lines of ``content`` matching ``pattern`` (pure; :meth:`ToolResultStore.search` loads the content)."""
    matcher = _matcher(pattern, regex, ignore_case)
    context = _whole_number("context", context, 0, MAX_CONTEXT_LINES)
    skip = _whole_number("skip", skip, 0)
    max_matches = _whole_number("max_matches", max_matches, 1, MAX_SEARCH_MATCHES)
    lines = content.splitlines()
    matching = [index for index, line in enumerate(lines) if matcher.search(line)]
    hits = tuple(
        SearchHit(
            index + 1,
            tuple(
                (number + 1, lines[number])
                for number in range(max(0, index - context), min(len(lines), index + context + 1))
            ),
        )
        for index in matching[skip : skip + max_matches]
    )
    return ToolResultSearch(result_id, tool, pattern, hits, len(matching), len(lines), skip)


def protected_result_ids(checkpoints: Sequence[AgentCheckpoint]) -> set[str]:
    """Result ids referenced by the resumable ones among ``checkpoints``."""
    return {result_id for item in checkpoints if item.resumable for result_id in item.tool_result_ids}


def select_for_pruning(
    entries: Mapping[str, ToolIndexEntry],
    policy: RetentionPolicy,
    now: float,
    protected: AbstractSet[str] = frozenset(),
) -> list[str]:
    """Ids to delete so the scope fits ``policy``: expired first, then oldest first; never ``protected``."""
    order = sorted(entries, key=lambda result_id: (entries[result_id].saved_at, result_id))
    doomed: list[str] = []
    kept: list[str] = []
    for result_id in order:
        expired = policy.max_age_seconds is not None and now - entries[result_id].saved_at > policy.max_age_seconds
        (doomed if expired and result_id not in protected else kept).append(result_id)
    count = len(kept)
    total = sum(entries[result_id].size for result_id in kept)
    for result_id in list(kept):
        over_count = policy.max_count is not None and count > policy.max_count
        over_bytes = policy.max_bytes is not None and total > policy.max_bytes
        if not (over_count or over_bytes):
            break
        if result_id in protected:
            continue
        doomed.append(result_id)
        count -= 1
        total -= entries[result_id].size
    return doomed


def _over_bounds(entries: Mapping[str, ToolIndexEntry], policy: RetentionPolicy) -> bool:
    if policy.max_count is not None and len(entries) > policy.max_count:
        return True
    return policy.max_bytes is not None and sum(entry.size for entry in entries.values()) > policy.max_bytes


class ToolResultStore:
    """Externalizes large tool outputs of one manager's scope and pages them back."""

    def __init__(self, manager: MemoryManager, retention: RetentionPolicy | None = None) -> None:
        self.manager = manager
        config = manager.config
        self.retention = retention or RetentionPolicy(
            max_count=config.tool_result_max_count,
            max_bytes=config.tool_result_max_bytes,
            max_age_seconds=config.tool_result_max_age_seconds,
        )
        self._unchecked_bytes = 0

    def with_retention(self, retention: RetentionPolicy | None) -> ToolResultStore:
        """A store over the same scope that prunes by ``retention`` instead (``None``: this store)."""
        return self if retention is None else ToolResultStore(self.manager, retention)

    def _new_id(self) -> str:
        for _ in range(8):
            result_id = secrets.token_hex(_ID_BYTES)
            if not self.manager.tool_result_exists(result_id):
                return result_id
        raise StorageError(17, "could not find an unused tool result id")  # pragma: no cover

    def externalize(self, tool_name: str, content: str, *, is_error: bool = False) -> str:
        """Return ``content`` if small or an error; else store it and return a JSON reference."""
        if not isinstance(content, str):
            raise InvalidInputError(f"tool output must be a string, got {type(content).__name__}")
        if not isinstance(tool_name, str):
            raise InvalidInputError(f"tool name must be a string, got {type(tool_name).__name__}")
        config = self.manager.config
        if is_error:
            return content
        size = utf8_size(content)
        if size <= config.tool_result_inline_limit:
            return content
        result_id = self._new_id()
        payload = {
            "id": result_id,
            "tool": tool_name,
            "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "content": content,
            "size": size,
        }
        self.manager.save_tool_result(result_id, payload)
        log_event(Event.TOOL_RESULT_STORED, tool=tool_name, result_id=result_id, size=size, scope=self.manager.scope)
        if self._needs_prune(size):
            self.prune(keep=(result_id,))
        return make_reference(result_id, content, size, config.tool_result_summary_max_chars)

    def _needs_prune(self, added: int) -> bool:
        """Whether the scope may be over its bounds; the byte bound is checked every 1/8 of it."""
        policy = self.retention
        if policy.max_count is not None and self.manager.count_tool_results() > policy.max_count:
            return True
        if policy.max_bytes is None:
            return False
        self._unchecked_bytes += added
        if self._unchecked_bytes <= policy.max_bytes // 8:
            return False
        self._unchecked_bytes = 0
        return _over_bounds(self.manager.list_tool_results(), policy)

    def load_page(self, result_id: str, offset: int = 0, limit: int = DEFAULT_PAGE_CHARS) -> ToolResultPage:
        """Characters ``offset`` to ``offset + limit`` of a stored output of this scope, with what is left.

        Another scope's id gives :class:`RecordNotFoundError`, as a missing one does.
        """
        return self.manager.load_tool_result_page(result_id, offset, limit)

    def read(
        self,
        result_id: str,
        offset: int = 0,
        limit: int = DEFAULT_PAGE_CHARS,
        *,
        line: int | None = None,
        lines: int = DEFAULT_PAGE_LINES,
    ) -> str:
        """A page rendered for the model: what a ``load_tool_result`` tool returns.

        By characters (``offset``, ``limit``; :func:`render_page`), or by lines when ``line``
        (1-based) is given: ``lines`` lines from there, numbered (:func:`render_lines`).
        """
        if line is not None:
            return render_lines(self.load_lines(result_id, line, lines))
        return render_page(self.load_page(result_id, offset, limit))

    async def aread(
        self,
        result_id: str,
        offset: int = 0,
        limit: int = DEFAULT_PAGE_CHARS,
        *,
        line: int | None = None,
        lines: int = DEFAULT_PAGE_LINES,
    ) -> str:
        """Async twin of :meth:`read`."""
        if line is not None:
            return render_lines(await asyncio.to_thread(self.load_lines, result_id, line, lines))
        return render_page(await self.aload_page(result_id, offset, limit))

    def _whole(self, result_id: str) -> tuple[str, str]:
        """The tool name and the whole stored output, read through the scope check in chunks."""
        page = self.load_page(result_id, 0, _READ_CHUNK)
        parts = [page.content]
        while page.next_offset is not None:
            page = self.load_page(result_id, page.next_offset, _READ_CHUNK)
            parts.append(page.content)
        return page.tool, "".join(parts)

    def load_lines(self, result_id: str, line: int = 1, lines: int = DEFAULT_PAGE_LINES) -> ToolResultLines:
        """Lines ``line`` to ``line + lines - 1`` (1-based) of a stored output of this scope.

        The same scope check as :meth:`load_page`: another scope's id gives :class:`RecordNotFoundError`.
        """
        line = _whole_number("line", line, 1)
        lines = _whole_number("lines", lines, 1)
        tool, content = self._whole(result_id)
        all_lines = content.splitlines()
        return ToolResultLines(result_id, tool, line, tuple(all_lines[line - 1 : line - 1 + lines]), len(all_lines))

    def search(
        self,
        result_id: str,
        pattern: str,
        *,
        regex: bool = False,
        ignore_case: bool = True,
        context: int = 2,
        skip: int = 0,
        max_matches: int = DEFAULT_SEARCH_MATCHES,
    ) -> ToolResultSearch:
        """The lines of a stored output of this scope that match ``pattern``, with ``context`` lines around each.

        ``pattern`` is a literal string unless ``regex``; case is ignored unless ``ignore_case``
        is false. At most ``max_matches`` (up to :data:`MAX_SEARCH_MATCHES`) hits are returned,
        after skipping the first ``skip``; ``next_skip`` says where the next ones start. The
        output is read with the same scope check as :meth:`load_page`, so another scope's id
        gives the same :class:`RecordNotFoundError` as a missing one. A bad pattern or bound
        gives :class:`InvalidInputError` before anything is read.
        """
        _matcher(pattern, regex, ignore_case)
        _whole_number("context", context, 0, MAX_CONTEXT_LINES)
        _whole_number("skip", skip, 0)
        _whole_number("max_matches", max_matches, 1, MAX_SEARCH_MATCHES)
        tool, content = self._whole(result_id)
        return search_lines(
            result_id,
            tool,
            content,
            pattern,
            regex=regex,
            ignore_case=ignore_case,
            context=context,
            skip=skip,
            max_matches=max_matches,
        )

    async def asearch(
        self,
        result_id: str,
        pattern: str,
        *,
        regex: bool = False,
        ignore_case: bool = True,
        context: int = 2,
        skip: int = 0,
        max_matches: int = DEFAULT_SEARCH_MATCHES,
    ) -> ToolResultSearch:
        """Async twin of :meth:`search`."""
        return await asyncio.to_thread(
            self.search,
            result_id,
            pattern,
            regex=regex,
            ignore_case=ignore_case,
            context=context,
            skip=skip,
            max_matches=max_matches,
        )

    def search_text(self, result_id: str, pattern: str, **options: Any) -> str:
        """:meth:`search` rendered for the model (:func:`render_search`): what a ``search_tool_result`` tool returns."""
        return render_search(self.search(result_id, pattern, **options))

    async def asearch_text(self, result_id: str, pattern: str, **options: Any) -> str:
        """Async twin of :meth:`search_text`."""
        return render_search(await self.asearch(result_id, pattern, **options))

    def prune(self, now: float | None = None, *, keep: Sequence[str] = ()) -> list[str]:
        """Apply the retention policy to this scope; return the ids removed.

        Results in ``keep`` and those referenced by a resumable checkpoint are never removed
        (they still count toward the bounds). Holds the scope's tool-index and plan locks, so a
        checkpoint cannot start referring to a result while it is being removed.
        """
        manager = self.manager
        moment = time.time() if now is None else now
        with manager.tool_index_locked():
            entries = manager.list_tool_results()
            protected = protected_result_ids(list_checkpoints(manager)) | set(keep)
            doomed = select_for_pruning(entries, self.retention, moment, protected)
            removed = manager.delete_tool_results(doomed) if doomed else []
        if removed:
            log_event(
                Event.TOOL_RESULTS_PRUNED,
                scope=manager.scope,
                removed=len(removed),
                kept=len(entries) - len(removed),
                protected=len(protected & set(entries)),
            )
        return removed

    async def aexternalize(self, tool_name: str, content: str, *, is_error: bool = False) -> str:
        """Async twin of :meth:`externalize`."""
        return await asyncio.to_thread(self.externalize, tool_name, content, is_error=is_error)

    async def aload_page(self, result_id: str, offset: int = 0, limit: int = DEFAULT_PAGE_CHARS) -> ToolResultPage:
        """Async twin of :meth:`load_page`."""
        return await self.manager.aload_tool_result_page(result_id, offset, limit)

    async def aprune(self, now: float | None = None, *, keep: Sequence[str] = ()) -> list[str]:
        """Async twin of :meth:`prune`."""
        return await asyncio.to_thread(self.prune, now, keep=keep)
