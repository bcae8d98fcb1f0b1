"""How a LangGraph store item becomes a Markdown note and back (pure functions, no storage).

An item ``(namespace, key, value)`` is one knowledge note of the namespace's user, readable
and searchable::

    # tea-preference

    Bob drinks green tea, no sugar.

    ```json
    {
      "content": "↑ above",
      "confidence": 0.9
    }
    ```

    <!-- langgraph-store-item {"body": "content", "created_at": "2026-...", "updated_at": "2026-..."} -->

* the heading is the key;
* the **body** under it is the value's longest top-level string (here ``content``), written
  as it is: the index takes it as the note's description, BM25 and embeddings see its words
  once, and a person reads (and may edit) it as plain text;
* the ```` ```json ```` block is the rest of the value, exactly, in its key order, with
  ``"↑ above"`` standing in for the body;
* the last line names the body field and keeps the two timestamps.

Writing the body only once matters: measured on the sample corpus, a note holding the text
twice (as prose and inside the JSON) ranked 2 of 156 held-out queries out of the top 5.
A note without the last line (written by hand or with ``Knowledge.write_note``) reads as an
item whose value is ``{"text": <the note's text>}``, so an agent sees a user's whole
knowledge memory through the store. Parsing goes from the end of the note, so nothing a body
holds can be mistaken for the block or the marker; a note whose parts no longer parse after
an edit reads as such a plain item too, and loses nothing.

Keys become the note's plain name with only ``%``, path separators, invisible characters
and a trailing dot or space percent-encoded (``"tea preference"`` stays readable); see
:func:`key_to_name`.
"""

from __future__ import annotations

import json
import math
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any
from urllib.parse import unquote

from local_ai_memory import InvalidInputError

__all__ = [
    "BODY_PLACEHOLDER",
    "MARKER",
    "PLAIN_TEXT_FIELD",
    "StoredItem",
    "body_field",
    "check_value",
    "key_to_name",
    "name_to_key",
    "parse_note",
    "plain_item",
    "render_note",
]

MARKER = "<!-- langgraph-store-item "
PLAIN_TEXT_FIELD = "text"
"""The value field under which a note written outside the store shows its text."""
BODY_PLACEHOLDER = "↑ above"
"""What the JSON block shows in place of the body field (the note's text above it)."""
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
    ttl: float | None = None  # minutes, when put with a TTL
    expires_at: datetime | None = None

    def expired(self, now: datetime) -> bool:
        """Whether the item's TTL ran out before ``now`` (an item without one never expires)."""
        return self.expires_at is not None and self.expires_at <= now


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


def body_field(value: Mapping[str, Any]) -> str | None:
    """The top-level field written as the note's body: the longest non-empty string (first on ties)."""
    best: str | None = None
    for field, inner in value.items():
        if isinstance(inner, str) and inner and (best is None or len(inner) > len(value[best])):
            best = field
    return best


# -- notes ---------------------------------------------------------------------------------------
def render_note(
    key: str,
    value: Mapping[str, Any],
    created_at: datetime,
    updated_at: datetime,
    ttl: float | None = None,
    expires_at: datetime | None = None,
) -> str:
    """The Markdown text of an item (see the module docstring); ``ttl`` (minutes) and
    ``expires_at`` go on the metadata line of an item put with a TTL."""
    body = body_field(value)
    rest = dict(value)
    if body is not None:
        rest[body] = BODY_PLACEHOLDER
    block = json.dumps(rest, ensure_ascii=False, indent=2, allow_nan=False)
    meta: dict[str, Any] = {"body": body, "created_at": created_at.isoformat(), "updated_at": updated_at.isoformat()}
    if ttl is not None and expires_at is not None:
        meta["ttl"] = ttl
        meta["expires_at"] = expires_at.isoformat()
    # ``>`` is escaped so nothing can close the comment early; the JSON stays valid.
    marker = json.dumps(meta, ensure_ascii=False).replace(">", "\\u003e")
    heading = "# " + (" ".join(key.split()) or "(blank key)")
    text = value[body] if body is not None else ""
    return f"{heading}\n\n{text}\n\n{_JSON_OPEN}{block}{_JSON_CLOSE}\n\n{MARKER}{marker}{_MARKER_END}\n"


def parse_note(text: str, key: str) -> StoredItem | None:
    """The item of a note the store wrote, or ``None`` for any other note (or one whose parts
    no longer parse). The file name, not the note, is the authority on ``key``."""
    start = text.rfind("\n\n" + MARKER)
    block_start = text.rfind("\n\n" + _JSON_OPEN, 0, start) if start >= 0 else -1
    block_end = text.rfind(_JSON_CLOSE, block_start, start) if block_start >= 0 else -1
    body_start = text.find("\n") + 2
    line = text[start + 2 + len(MARKER) :].rstrip("\n")
    if block_end < 0 or not line.endswith(_MARKER_END) or text[body_start - 2 : body_start] != "\n\n":
        return None
    try:
        meta = json.loads(line[: -len(_MARKER_END)])
        value = json.loads(text[block_start + 2 + len(_JSON_OPEN) : block_end])
        created, updated = datetime.fromisoformat(meta["created_at"]), datetime.fromisoformat(meta["updated_at"])
        body = meta["body"]
        ttl = float(meta["ttl"]) if meta.get("ttl") is not None else None
        expires = datetime.fromisoformat(meta["expires_at"]) if meta.get("expires_at") is not None else None
    except (ValueError, KeyError, TypeError):
        return None
    if not isinstance(value, dict) or not (body is None or (isinstance(body, str) and body in value)):
        return None
    if body is not None:
        value[body] = text[body_start:block_start] if block_start >= body_start else ""
    return StoredItem(key, value, created, updated, managed=True, ttl=ttl, expires_at=expires)


def plain_item(text: str, key: str, modified: float) -> StoredItem:
    """A note the store did not write, as an item: ``{"text": text}``, written at ``modified``."""
    when = datetime.fromtimestamp(modified, tz=timezone.utc)
    return StoredItem(key, {PLAIN_TEXT_FIELD: text}, when, when, managed=False)
