"""``ToolResultStore``: keep large tool outputs out of the model's context (L3).

:meth:`ToolResultStore.externalize` returns a tool's output unchanged when it is at most
``config.tool_result_inline_limit`` UTF-8 bytes (default 6,144) or when it is an error message.
Anything larger is saved as an L3 record and the model gets a short JSON reference instead::

    {"result_id": "3f9c0a7be21d4c55", "summary": "<first 1000 characters>…", "size": 128450}

``size`` is the original UTF-8 byte count; the summary ends with ``…`` only when it was cut.
Result ids are 16 random hex characters, checked to be unused; they are never derived from a
provider's tool-call id.

The model reads the full output back in pages with :meth:`ToolResultStore.load_page`
(characters ``offset`` to ``offset + limit``), rendered by :func:`render_page`; a page is
plain text handed to the model and is never externalized again.

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
import secrets
import time
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from datetime import datetime, timezone

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from local_ai_memory._runtime.checkpoints import list_checkpoints
from local_ai_memory._runtime.scope import MemoryManager
from local_ai_memory._shared.errors import InvalidInputError, StorageError
from local_ai_memory._shared.events import Event, log_event
from local_ai_memory._shared.records import AgentCheckpoint, ToolIndexEntry, ToolResultPage

__all__ = [
    "DEFAULT_PAGE_CHARS",
    "RetentionPolicy",
    "ToolResultPage",
    "ToolResultReference",
    "ToolResultStore",
    "make_reference",
    "parse_reference",
    "protected_result_ids",
    "render_page",
    "select_for_pruning",
    "summarize",
    "utf8_size",
]

DEFAULT_PAGE_CHARS = 4000
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


def make_reference(result_id: str, content: str, size: int, summary_max_chars: int) -> str:
    """The JSON reference the model sees in place of an externalized output."""
    reference = {"result_id": result_id, "summary": summarize(content, summary_max_chars), "size": size}
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


def render_page(page: ToolResultPage) -> str:
    """A page as text for the model: a one-line header saying where it is, then the content."""
    end = page.offset + len(page.content)
    if page.next_offset is None:
        where = "end of result"
    else:
        where = f"{page.remaining} more characters; call load_tool_result with offset={page.next_offset} for the next"
    header = (
        f"[tool result {page.result_id} ({page.tool or 'unknown tool'}): "
        f"characters {page.offset}-{end} of {page.total_chars}; {where}]"
    )
    return f"{header}\n{page.content}"


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

    def read(self, result_id: str, offset: int = 0, limit: int = DEFAULT_PAGE_CHARS) -> str:
        """A page rendered for the model (:func:`render_page`): what a ``load_tool_result`` tool returns."""
        return render_page(self.load_page(result_id, offset, limit))

    async def aread(self, result_id: str, offset: int = 0, limit: int = DEFAULT_PAGE_CHARS) -> str:
        """Async twin of :meth:`read`."""
        return render_page(await self.aload_page(result_id, offset, limit))

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
