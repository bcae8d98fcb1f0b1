"""How a LangGraph store item becomes a Markdown note and back (pure functions, no storage).

An item ``(namespace, key, value)`` is one knowledge note of the namespace's user. The note
stays readable and searchable::

    # tea-preference

    Bob drinks green tea, no sugar.

    ```json
    {
      "content": "Bob drinks green tea, no sugar.",
      "confidence": 0.9
    }
    ```

    <!-- langgraph-store-item {"key": "tea-preference", "created_at": "2026-...", "updated_at": "2026-..."} -->

* the heading is the key, the paragraph under it the value's text (its strings, in order):
  that is what the index takes as title and description, and what BM25 and embeddings see
  as words (JSON escapes such as ``\\n`` would glue words together, so the text is also
  written plainly);
* the ```` ```json ```` block is the value, exactly (edit it to change the value);
* the last line keeps the exact key and the two timestamps.

A note without that last line (one written by hand or with ``Knowledge.write_note``) reads
as an item whose value is ``{"text": <the note's text>}``, so an agent sees a user's whole
knowledge memory through the store. Parsing starts from the end of the note, so nothing the
value's text holds can be mistaken for the block or the marker.

Keys become the note's plain name with only ``%``, path separators, invisible characters
and a trailing dot or space percent-encoded (``"tea preference"`` stays readable); see
:func:`key_to_name`.
"""

from __future__ import annotations

import json
import math
import unicodedata
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any
from urllib.parse import unquote

from local_ai_memory import InvalidInputError

__all__ = [
    "MARKER",
    "PLAIN_TEXT_FIELD",
    "StoredItem",
    "check_value",
    "key_to_name",
    "name_to_key",
    "parse_note",
    "plain_item",
    "render_note",
    "value_text",
]

MARKER = "<!-- langgraph-store-item "
PLAIN_TEXT_FIELD = "text"
"""The value field under which a note written outside the store shows its text."""
_MARKER_END = " -->"
_JSON_OPEN = "```json\n"
_JSON_CLOSE = "\n```"
_ENCODED = frozenset("%/\\")
_INVISIBLE = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


@dataclass(frozen=True)
class StoredItem:
    """What one note holds: the key, the value and the timestamps (``managed``: written by the store)."""

    key: str
    value: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    managed: bool


# -- keys ----------------------------------------------------------------------------------------
def key_to_name(key: str) -> str:
    """The plain note name of a key: the key, with ``%``, ``/``, ``\\``, invisible characters and a
    trailing dot or space percent-encoded (UTF-8), so any key maps to one file name and back."""
    if not isinstance(key, str) or not key:
        raise InvalidInputError(f"a store key must be a non-empty string, got {key!r}")
    out = [_escape(char) if char in _ENCODED or unicodedata.category(char) in _INVISIBLE else char for char in key]
    if out[-1] in (".", " "):
        out[-1] = _escape(out[-1])
    return "".join(out)


def _escape(char: str) -> str:
    return "".join(f"%{byte:02X}" for byte in char.encode("utf-8", "surrogatepass"))


def name_to_key(name: str) -> str:
    """Invert :func:`key_to_name`; a hand-made name that is no valid encoding stays as it is."""
    try:
        key = unquote(name, errors="strict")
    except UnicodeDecodeError:
        return name
    return key if key_to_name(key) == name else name


# -- values --------------------------------------------------------------------------------------
def check_value(value: object) -> dict[str, Any]:
    """``value`` as a dict if it survives JSON exactly, else :class:`InvalidInputError` naming the part.

    Allowed: mappings with string keys, lists and tuples (read back as lists), strings, finite
    numbers, booleans and ``None``.
    """
    if not isinstance(value, Mapping):
        raise InvalidInputError(f"a store value must be a mapping, got {type(value).__name__}")
    _check_part(value, "value")
    return dict(value)


def _check_part(part: object, where: str) -> None:
    if part is None or isinstance(part, (str, bool, int)):
        return
    if isinstance(part, float):
        if not math.isfinite(part):
            raise InvalidInputError(f"{where} is {part!r}: JSON has no such number")
        return
    if isinstance(part, Mapping):
        for key, inner in part.items():
            if not isinstance(key, str):
                raise InvalidInputError(f"{where} has the key {key!r}: JSON object keys must be strings")
            _check_part(inner, f"{where}[{key!r}]")
        return
    if isinstance(part, (list, tuple)):
        for index, inner in enumerate(part):
            _check_part(inner, f"{where}[{index}]")
        return
    raise InvalidInputError(f"{where} is a {type(part).__name__}: store values must be JSON (dict, list, str, ...)")


def _strings(part: object) -> Iterator[str]:
    if isinstance(part, str):
        yield part
    elif isinstance(part, Mapping):
        for inner in part.values():
            yield from _strings(inner)
    elif isinstance(part, (list, tuple)):
        for inner in part:
            yield from _strings(inner)


def value_text(value: Mapping[str, Any]) -> str:
    """The value's strings in order, one per line (blank lines inside a string are kept)."""
    return "\n".join(text.strip() for text in _strings(value) if text.strip())


# -- notes ---------------------------------------------------------------------------------------
def render_note(key: str, value: Mapping[str, Any], created_at: datetime, updated_at: datetime) -> str:
    """The Markdown text of an item (see the module docstring)."""
    heading = " ".join(key.split()) or key
    body = json.dumps(value, ensure_ascii=False, indent=2, allow_nan=False)
    meta = {"key": key, "created_at": created_at.isoformat(), "updated_at": updated_at.isoformat()}
    # ``>`` is escaped so no key can close the comment early; the JSON stays valid.
    marker = json.dumps(meta, ensure_ascii=False).replace(">", "\\u003e")
    text = value_text(value)
    parts = [f"# {heading}", text] if text else [f"# {heading}"]
    return "\n\n".join([*parts, f"{_JSON_OPEN}{body}{_JSON_CLOSE}", f"{MARKER}{marker}{_MARKER_END}"]) + "\n"


def parse_note(text: str, key: str) -> StoredItem | None:
    """The item of a note the store wrote, or ``None`` for any other note (or one whose block
    or marker no longer parses). The file name is the authority on ``key``; the marker repeats
    it for people. Line ends edited to CRLF are read as LF."""
    text = text.replace("\r\n", "\n")
    start = text.rfind("\n" + MARKER)
    if start < 0:
        return None
    line = text[start + 1 + len(MARKER) :].rstrip()
    if not line.endswith(_MARKER_END):
        return None
    block_start = text.rfind(_JSON_OPEN, 0, start)
    block_end = text.rfind(_JSON_CLOSE, block_start + len(_JSON_OPEN) - 1, start) if block_start >= 0 else -1
    if block_end < 0:
        return None
    try:
        meta = json.loads(line[: -len(_MARKER_END)])
        value = json.loads(text[block_start + len(_JSON_OPEN) : block_end])
        created, updated = datetime.fromisoformat(meta["created_at"]), datetime.fromisoformat(meta["updated_at"])
    except (ValueError, KeyError, TypeError):
        return None
    return StoredItem(key, value, created, updated, managed=True) if isinstance(value, dict) else None


def plain_item(text: str, key: str, modified: float) -> StoredItem:
    """A note the store did not write, as an item: ``{"text": text}``, written at ``modified``."""
    when = datetime.fromtimestamp(modified, tz=timezone.utc)
    return StoredItem(key, {PLAIN_TEXT_FIELD: text}, when, when, managed=False)
