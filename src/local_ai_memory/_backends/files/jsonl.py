"""Append-only JSON-lines logs on files: the session messages and the checkpoint step logs.

One JSON object per line, each with ``format_version``. A record with top-level ``bytes`` values
(a checkpointer's snapshot step, see :func:`~local_ai_memory._contracts.runtime.split_step`) is one
line too: its JSON header, a NUL byte (JSON text never holds one) and the values raw, with the two
bytes that would break the line escaped (a newline as ``C1 02``, byte ``C1`` as ``C1 01``; ``C1`` is
a byte neither msgpack nor UTF-8 ever uses, so serialized values rarely hold it, and a read that
finds none, the usual case, costs one scan and no copy: no base64). Appends hold the file's lock
and add whole lines; a crash can still leave a torn last line, which :func:`parse_lines` skips and
the next :func:`append_lines` seals off with a newline, so the new record starts clean.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from local_ai_memory._contracts.runtime import join_step, split_step
from local_ai_memory._shared import fs as _fs
from local_ai_memory._shared.errors import StorageError, UnsupportedFormatError
from local_ai_memory._shared.events import Event, log_event
from local_ai_memory._shared.records import FORMAT_VERSION

__all__ = ["append_lines", "encode_lines", "last_line", "log_end", "parse_lines"]

_TAIL = 1 << 16


def _json(record: dict[str, Any]) -> bytes:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


_ESCAPE = b"\xc1"
_ESCAPED_ESCAPE = b"\xc1\x01"
_ESCAPED_NEWLINE = b"\xc1\x02"


def _escape(values: bytes) -> bytes:
    if _ESCAPE in values:
        values = values.replace(_ESCAPE, _ESCAPED_ESCAPE)
    return values.replace(b"\n", _ESCAPED_NEWLINE) if b"\n" in values else values


def _unescape(data: bytes) -> bytes:
    # Every escape byte of escaped data starts a pair, and pairs never overlap, so the two
    # replacements (newline first) give the values back exactly; each is skipped when a scan
    # (a fast one, for a single byte) finds no escape byte left.
    if _ESCAPE in data:
        data = data.replace(_ESCAPED_NEWLINE, b"\n")
        if _ESCAPE in data:
            data = data.replace(_ESCAPED_ESCAPE, _ESCAPE)
    return data


def encode_lines(records: Sequence[dict[str, Any]]) -> bytes:
    """Compact UTF-8 JSON lines of ``records`` (a record with ``bytes`` values: header, NUL, values)."""
    lines = []
    for record in records:
        header, values = split_step(record)
        lines.append(_json(header) if values is None else _json(header) + b"\x00" + _escape(values))
    return b"\n".join(lines) + b"\n" if lines else b""


def _decode(raw: bytes) -> Any:
    """The record of one line (``None`` when it does not parse)."""
    cut = raw.find(b"\x00")
    try:
        if cut < 0:
            return json.loads(raw)
        header = json.loads(raw[:cut])
        return join_step(header, _unescape(raw[cut + 1 :])) if isinstance(header, dict) else None
    except (ValueError, StorageError):
        return None


def parse_lines(data: bytes, where: Path | str) -> list[dict[str, Any]]:
    """The records of a log. A torn last line is skipped quietly; other bad lines are logged and skipped.

    Raises :class:`UnsupportedFormatError` for a line written by a newer format version.
    """
    records: list[dict[str, Any]] = []
    lines = data.split(b"\n")
    last = len(lines) - 1  # the piece after the final newline: empty, or a torn record
    for number, raw in enumerate(lines):
        if not raw.strip():
            continue
        record = _decode(raw)
        if not isinstance(record, dict):
            if number != last:
                log_event(Event.MEMORY_CORRUPT, path=str(where), line=number + 1, action="skipped line")
            continue
        version = record.get("format_version", FORMAT_VERSION)
        if isinstance(version, int) and version > FORMAT_VERSION:
            raise UnsupportedFormatError(
                f"{where}: line {number + 1} has format_version {version}; "
                f"this version of local-ai-memory reads up to {FORMAT_VERSION}"
            )
        records.append(record)
    return records


def _last_complete(data: bytes) -> tuple[bytes | None, bool, bool]:
    """The last newline-terminated line of ``data`` (``None`` if none), whether ``data`` ends torn,
    and whether that line starts at the very beginning of ``data`` (so it may have been cut)."""
    torn = not data.endswith(b"\n")
    end = data.rfind(b"\n")
    if end < 0:
        return None, torn, True
    before = data.rfind(b"\n", 0, end)
    return data[before + 1 : end], torn, before < 0


def last_line(path: Path) -> tuple[dict[str, Any] | None, bool]:
    """The last complete record of the log and whether the file ends torn (no final newline)."""
    data = _fs.read_tail(path, _TAIL)
    if not data:
        return None, False
    line, torn, at_start = _last_complete(data)
    if at_start and len(data) == _TAIL:
        line, torn, _ = _last_complete(_fs.read_optional(path) or b"")  # the line began before the tail
    try:
        record = json.loads(line) if line and line.strip() else None
    except ValueError:
        record = None
    return (record if isinstance(record, dict) else None), torn


def log_end(path: Path) -> tuple[bool, bool]:
    """Whether the log is empty (or missing), and whether its last line lacks its newline (a
    crash cut an append short): one read of its last byte."""
    tail = _fs.read_tail(path, 1)
    return not tail, bool(tail) and tail != b"\n"


def append_lines(path: Path, data: bytes, *, torn: bool, durable: bool) -> None:
    """Append encoded lines (hold the file's lock); seal a torn last line first."""
    _fs.append_bytes(path, b"\n" + data if torn else data, durable=durable)
