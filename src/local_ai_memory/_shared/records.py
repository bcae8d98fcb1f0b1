"""Typed models of the runtime-memory files, and their JSON encoding and decoding.

Every JSON file of the runtime memory carries ``format_version``. This library writes
version :data:`FORMAT_VERSION` and reads any version up to it; a file from a newer version is
refused with :class:`UnsupportedFormatError` and left untouched (never "repaired", never
overwritten). A file that is not JSON, or not the expected shape, is *corrupt*
(:class:`CorruptRecordError`): the caller moves it aside to ``{name}.corrupt.bak``.

On-disk shapes::

    L0  state/{scope}.json         {"format_version": 1, "updated_at": 1718123456.0, "state": {...}}
    L2  plans/{scope}.json         {"format_version": 1, "updated_at": ..., "plans": {plan_id: RECORD}}
    L3  tool_results/{id}.json     RECORD
        tool_index/{scope}/{id}.ref   empty marker: the scope owns result {id}

    RECORD = {"format_version": 1, "id": ..., "saved_at": 1718123456.0, "payload": <any JSON>}

An externalized tool output is an L3 record whose payload is a :class:`ToolResultPayload`
(``{id, tool, created_at, content}``); an L2 checkpoint is an L2 record whose payload is an
:class:`AgentCheckpoint`.

:func:`iter_json_bytes` serializes a value as UTF-8 JSON in chunks, so a 100 MB tool output is
written without building the whole document in memory.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator, Mapping
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from local_ai_memory._shared.errors import InvalidInputError, UnsupportedFormatError
from local_ai_memory._shared.unicode import check_texts_in

__all__ = [
    "BOOKKEEPING_KEY",
    "FORMAT_VERSION",
    "AgentCheckpoint",
    "CheckpointStatus",
    "CorruptRecordError",
    "PlanFile",
    "RecordEnvelope",
    "StateEnvelope",
    "StoredMessage",
    "ToolIndexEntry",
    "ToolResultPage",
    "ToolResultPayload",
    "check_json_value",
    "decode_model",
    "encode_model",
    "iter_json_bytes",
    "page_between",
    "page_of",
    "visible_state",
]

FORMAT_VERSION = 1
_STRING_CHUNK = 1 << 18  # characters escaped per piece when streaming a long string
_FLUSH = 1 << 16  # bytes gathered before a piece is yielded
_MAX_DEPTH = 200

CheckpointStatus = Literal["in_progress", "completed", "interrupted"]


BOOKKEEPING_KEY = "_local_ai_memory"
"""The one L0 key the library keeps its own bookkeeping under (e.g. what L1 already merged).

It is stored with the state (one record, one lock, so its writers and the user's never lose
each other's updates) but is not the user's: ``MemoryManager.get_state`` returns the state
without it, a user's patch or replacement can neither set nor remove it, and the library reads
and writes it with ``bookkeeping()`` / ``update_bookkeeping()``. Prompts never show it.
"""


def visible_state(state: Mapping[str, Any]) -> dict[str, Any]:
    """The user's L0 state: the stored record without the library's bookkeeping."""
    return {key: value for key, value in state.items() if key != BOOKKEEPING_KEY}


class CorruptRecordError(ValueError):
    """A stored file is not valid JSON or not the expected shape (internal signal, not raised to users)."""


class _Versioned(BaseModel):
    model_config = ConfigDict(extra="ignore")

    format_version: int = Field(default=FORMAT_VERSION, ge=1)


class StateEnvelope(_Versioned):
    """L0: the agent state of one scope."""

    updated_at: float = Field(default_factory=time.time)
    state: dict[str, Any] = Field(default_factory=dict)


class ErasureRecord(_Versioned):
    """A pending deletion of a user's memory (``session_id`` null) or of one session."""

    user_id: str
    session_id: str | None = None
    started_at: float = Field(default_factory=time.time)


class RecordEnvelope(_Versioned):
    """L2 and L3: one saved payload with its id and save time."""

    id: str
    saved_at: float = Field(default_factory=time.time)
    payload: Any = None


class PlanFile(_Versioned):
    """L2 file of one scope: every plan (checkpoint) of the scope, keyed by plan id.

    The seed keeps one ``plans/{scope}.json`` per scope; several plan ids share it as a map of
    id to :class:`RecordEnvelope`. Saving one plan rewrites the file under its lock.
    """

    updated_at: float = Field(default_factory=time.time)
    plans: dict[str, RecordEnvelope] = Field(default_factory=dict)


class ToolIndexEntry(BaseModel):
    """What retention needs to know about one stored tool result without opening it (from ``stat``)."""

    model_config = ConfigDict(extra="ignore")

    size: int = Field(ge=0, description="Bytes of the stored file.")
    saved_at: float = Field(
        description="When the result was saved: wall-clock seconds since the Unix epoch (time.time(), not ms, "
        "not a monotonic clock); retention compares it with time.time()."
    )


class ToolResultPayload(BaseModel):
    """The payload of an externalized tool output (inside an L3 :class:`RecordEnvelope`)."""

    model_config = ConfigDict(extra="ignore")

    id: str
    tool: str
    created_at: str = Field(description="ISO 8601 time with offset, e.g. 2026-06-11T12:00:00+00:00.")
    content: str
    size: int | None = Field(default=None, ge=0, description="UTF-8 bytes of content (added by this library).")


class ToolResultPage(BaseModel):
    """One page of a stored tool output, by characters."""

    model_config = ConfigDict(frozen=True)

    result_id: str
    tool: str
    offset: int
    content: str
    total_chars: int
    next_offset: int | None = Field(description="Where the next page starts; None at the end.")
    limit: int | None = Field(default=None, description="The page size asked for (pages are numbered by it).")

    @property
    def remaining(self) -> int:
        """Characters after this page."""
        return self.total_chars - self.offset - len(self.content)


def payload_text(result_id: str, raw: Any) -> ToolResultPayload:
    """The stored output as a :class:`ToolResultPayload`; a payload of another shape is shown as JSON."""
    try:
        return ToolResultPayload.model_validate(raw)
    except ValidationError:
        tool = raw.get("tool", "") if isinstance(raw, dict) else ""
        text = json.dumps(raw, ensure_ascii=False, indent=1)
        return ToolResultPayload(id=result_id, tool=str(tool), created_at="", content=text)


def page_between(result_id: str, tool: str, piece: str, start: int, end: int, total: int) -> ToolResultPage:
    """The page holding characters ``start`` to ``end`` (``piece``) of a ``total``-character
    output; the next page starts at ``end``, unless that is the end of the output."""
    return ToolResultPage(
        result_id=result_id,
        tool=tool,
        offset=start,
        content=piece,
        total_chars=total,
        next_offset=end if end < total else None,
    )


def slice_page(result_id: str, tool: str, content: str, offset: int, limit: int) -> ToolResultPage:
    """Characters ``offset`` to ``offset + limit`` of ``content`` as a page (offset past the end: empty)."""
    total = len(content)
    start = min(offset, total)
    piece = content[start : start + limit]
    return page_between(result_id, tool, piece, start, start + len(piece), total)


def page_of(result_id: str, raw: Any, offset: int, limit: int) -> ToolResultPage:
    """A page of a stored payload (see :func:`payload_text` and :func:`slice_page`)."""
    payload = payload_text(result_id, raw)
    return slice_page(result_id, payload.tool, payload.content, offset, limit)


class StoredMessage(BaseModel):
    """One message of a session log (one line of ``sessions/{scope}.jsonl``).

    ``seq`` numbers a scope's messages from 0 in append order, without gaps; compaction drops
    the oldest but never renumbers. Lines written by 0.1.0 have no ``seq``: their position is it.

    ``raw`` is the JSON text of a framework's own item when it must come back exactly as given
    (an OpenAI Agents SDK session item, say); ``role``/``content`` are then its normal form,
    which the compressor and the context builder read. Older readers ignore the field.

    ``tool_arguments`` is the JSON text of each tool call's arguments, in the order of
    ``tool_calls``. Added without a format change: records written before have none (read as
    ``()``), and older readers ignore the field, as they do ``raw``.
    """

    model_config = ConfigDict(extra="ignore", frozen=True)

    format_version: int = FORMAT_VERSION
    seq: int | None = None
    role: str
    content: str
    name: str | None = None
    tool_call_id: str | None = None
    tool_calls: tuple[str, ...] = ()
    tool_arguments: tuple[str, ...] = ()
    created_at: float = 0.0
    raw: str | None = None


class AgentCheckpoint(BaseModel):
    """An L2 checkpoint: where an agent run stands, and what a resumed run needs.

    ``in_progress`` means mid-run (or crashed mid-run) and resumable; ``interrupted`` means the
    run stopped on SIGINT/SIGTERM and is resumable too; ``completed`` means it finished.
    ``tool_result_ids`` lists the L3 results the run still refers to: retention never removes
    those while the checkpoint is resumable.
    """

    model_config = ConfigDict(extra="ignore")

    plan_id: str
    status: CheckpointStatus = "in_progress"
    step: int = Field(default=0, ge=0, description="Number of steps done so far.")
    task: str = Field(default="", description="What the run is trying to do.")
    plan: list[str] = Field(default_factory=list, description="Planned steps, if the agent makes a plan.")
    messages: list[dict[str, Any]] = Field(default_factory=list, description="Conversation so far (JSON messages).")
    state: dict[str, Any] = Field(default_factory=dict, description="Anything else a resumed run needs.")
    tool_result_ids: list[str] = Field(default_factory=list)
    started_at: float = Field(default_factory=time.time)
    updated_at: float = Field(default_factory=time.time)
    pid: int | None = Field(default=None, description="Process that last wrote the checkpoint.")
    reason: str | None = Field(default=None, description="Why the run stopped (e.g. 'SIGTERM').")
    journal_seq: int = Field(
        default=0, ge=0, description="Last step-log entry folded into this record; later entries add to it."
    )

    @property
    def resumable(self) -> bool:
        """Whether a new run should pick this checkpoint up."""
        return self.status != "completed"


Model = TypeVar("Model", bound=BaseModel)


def decode_model(raw: bytes, model: type[Model]) -> Model:
    """Parse ``raw`` as ``model``.

    Raises :class:`UnsupportedFormatError` for a newer ``format_version`` and
    :class:`CorruptRecordError` for anything unreadable.
    """
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise CorruptRecordError(f"not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise CorruptRecordError(f"expected a JSON object, found {type(data).__name__}")
    version = data.get("format_version")
    if issubclass(model, _Versioned):
        if isinstance(version, int) and not isinstance(version, bool) and version > FORMAT_VERSION:
            raise UnsupportedFormatError(
                f"written by format_version {version}; this library reads up to {FORMAT_VERSION}. "
                "Upgrade local-ai-memory to read it (the file was left untouched)."
            )
        if version is None:
            raise CorruptRecordError("no format_version")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise CorruptRecordError(f"unexpected shape: {exc.error_count()} error(s): {exc.errors()[0]['msg']}") from None


def encode_model(value: BaseModel) -> bytes:
    """Compact UTF-8 JSON of a small model (state, plans, index)."""
    return json.dumps(value.model_dump(mode="json"), ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def check_json_value(value: object, what: str = "value") -> None:
    """Raise :class:`InvalidInputError` unless ``value`` is plain JSON (str keys, finite numbers)
    whose strings are Unicode text (no lone surrogate: :mod:`local_ai_memory._shared.unicode`).

    Walks the structure without serializing it, so checking a 100 MB ASCII string costs nothing.
    """
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > _MAX_DEPTH:
            raise InvalidInputError(f"{what} is nested deeper than {_MAX_DEPTH} levels")
        if item is None or isinstance(item, (str, bool, int)):
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                raise InvalidInputError(f"{what} contains {item!r}, which JSON cannot hold")
            continue
        if isinstance(item, Mapping):
            for key, child in item.items():
                if not isinstance(key, str):
                    raise InvalidInputError(f"{what} has a non-string key {key!r}")
                stack.append((child, depth + 1))
            continue
        if isinstance(item, (list, tuple)):
            stack.extend((child, depth + 1) for child in item)
            continue
        raise InvalidInputError(f"{what} contains a {type(item).__name__}, which is not JSON")
    check_texts_in(value, what)


def _escape(text: str) -> bytes:
    """One JSON string body (without quotes) as UTF-8; lone surrogates are kept as ``\\udXXX``."""
    try:
        return json.dumps(text, ensure_ascii=False)[1:-1].encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(text, ensure_ascii=True)[1:-1].encode("ascii")


def _pieces(value: object) -> Iterator[bytes]:
    if isinstance(value, str) and len(value) > _STRING_CHUNK:
        yield b'"'
        for start in range(0, len(value), _STRING_CHUNK):
            yield _escape(value[start : start + _STRING_CHUNK])
        yield b'"'
    elif isinstance(value, Mapping):
        yield b"{"
        for index, (key, child) in enumerate(value.items()):
            yield (b',"' if index else b'"') + _escape(key) + b'":'
            yield from _pieces(child)
        yield b"}"
    elif isinstance(value, (list, tuple)):
        yield b"["
        for index, child in enumerate(value):
            if index:
                yield b","
            yield from _pieces(child)
        yield b"]"
    elif isinstance(value, str):
        yield b'"' + _escape(value) + b'"'
    else:
        yield json.dumps(value, allow_nan=False).encode("ascii")


def iter_json_bytes(value: object) -> Iterator[bytes]:
    """Compact UTF-8 JSON of ``value`` in pieces of about 64 KB; long strings are streamed.

    Check ``value`` with :func:`check_json_value` first: a failure half way through would
    leave a half-written temporary file behind.
    """
    buffer = bytearray()
    for piece in _pieces(value):
        buffer += piece
        if len(buffer) >= _FLUSH:
            yield bytes(buffer)
            buffer.clear()
    if buffer:
        yield bytes(buffer)
