"""The one rule for "which messages are already summarized into L1": a merge cursor.

Frameworks hand the library their view of a conversation after each run or flush, and that
view changes shape between calls: it grows, its front is trimmed (a session log compacted to
its last messages, a chat buffer dropping old turns), its front is compacted (old messages
replaced by a summary message), or it is only a window of it (LlamaIndex flushing the oldest
queued messages). :func:`plan_merge` compares that view with a small stored
:class:`MergeCursor` and returns the messages not merged yet, plus the cursor to store once
they have been merged.

How a message is recognized (:func:`message_key`): by its id when the framework gives one
(a ``"id"`` key or an ``.id`` attribute, as LangChain messages have), otherwise by a
fingerprint of its normalized content (role, text, name, tool call id, tool calls). Keys are
short hashes, so a cursor stays at a few kilobytes whatever the messages hold.

The cursor keeps the keys of the last :data:`TAIL_LENGTH` merged messages, in order, and the
length of the conversation when it was last stored. A new view is aligned against that tail:

1. if the view only grew (the stored length still lines the tail up with the view, and every
   overlapping key agrees), everything after the stored length is new; this is what makes
   repeated identical messages ("ok", "ok") safe in a growing conversation;
2. otherwise the alignment with the longest agreeing run of keys ending where the tail or the
   view ends wins, provided it either agrees across its whole overlap (a trimmed front, or a
   window of already merged messages) or contains the last merged message (a compacted front:
   the messages before the agreeing run, such as a summary message, count as merged); ties
   go to the alignment that returns more messages, because merging a message twice is mostly
   absorbed by the summary's de-duplication while skipping one loses it;
3. with no alignment at all, every message of the view is new.

So a message is never merged twice and never skipped, with one limit when there are no ids:
a view that, after trimming, is key for key identical to a stretch already merged is taken
as that stretch (no information tells them apart).

Pure and framework-free: no I/O; the caller stores ``cursor.to_json()`` wherever it keeps
scope state (an L0 key, a checkpoint, a database row).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from local_ai_memory._runtime.messages import Message, MessageLike, name_outputs, to_message
from local_ai_memory._shared.errors import InvalidInputError, UnsupportedFormatError

__all__ = [
    "CURSOR_VERSION",
    "TAIL_LENGTH",
    "MergeCursor",
    "MergePlan",
    "message_key",
    "plan_merge",
]

CURSOR_VERSION = 1
TAIL_LENGTH = 256
"""How many merged keys a cursor remembers (about 5 KB): enough to line up a LlamaIndex chat
queue or a trimmed history of a few hundred messages with what was merged."""

_KEY_BYTES = 8


class MergeCursor(BaseModel):
    """Where the merge into L1 stands: the keys of the last merged messages and the view's length then.

    ``tail`` holds up to :data:`TAIL_LENGTH` keys (oldest first) from :func:`message_key`;
    ``position`` is how many messages the view had when the cursor was made. The empty cursor
    (``MergeCursor()``) means nothing was merged yet.
    """

    model_config = ConfigDict(extra="ignore", frozen=True)

    format_version: int = CURSOR_VERSION
    tail: tuple[str, ...] = ()
    position: int = Field(default=0, ge=0)

    def to_json(self) -> dict[str, Any]:
        """The cursor as a JSON-ready dict, e.g. ``{"format_version": 1, "tail": ["i3f..."], "position": 7}``."""
        return {"format_version": self.format_version, "tail": list(self.tail), "position": self.position}

    @classmethod
    def from_json(cls, value: object) -> MergeCursor:
        """A stored cursor back (``None``: the empty cursor).

        Raises :class:`InvalidInputError` for a value that is not a cursor and
        :class:`UnsupportedFormatError` for one written by a newer version of the library.
        """
        if value is None:
            return cls()
        if isinstance(value, (str, bytes)):
            text = value
            try:
                value = json.loads(text)
            except ValueError as exc:
                raise InvalidInputError(f"a merge cursor must be JSON, got {text[:40]!r}") from exc
        if not isinstance(value, Mapping):
            raise InvalidInputError(f"a merge cursor must be a JSON object, got {type(value).__name__}")
        version = value.get("format_version", CURSOR_VERSION)
        if isinstance(version, int) and version > CURSOR_VERSION:
            raise UnsupportedFormatError(
                f"the merge cursor has format_version {version}; this version of local-ai-memory reads up to "
                f"{CURSOR_VERSION}"
            )
        try:
            return cls.model_validate(dict(value))
        except ValidationError as exc:
            raise InvalidInputError(f"not a merge cursor: {exc.errors()[0]['msg']}") from exc


@dataclass(frozen=True)
class MergePlan:
    """What :func:`plan_merge` found.

    ``messages`` are the messages not merged yet, in order: always the view from index
    ``start`` on. ``cursor`` is the cursor to store once ``messages`` were merged (or at once
    when ``messages`` is empty); on a failed merge keep the old one so the next call retries.
    """

    messages: list[Message]
    start: int
    cursor: MergeCursor


def _digest(kind: str, text: str) -> str:
    return kind + hashlib.blake2b(text.encode("utf-8"), digest_size=_KEY_BYTES).hexdigest()


def _id_of(item: MessageLike) -> str | None:
    ident = item.get("id") if isinstance(item, Mapping) else getattr(item, "id", None)
    return ident if isinstance(ident, str) and ident else None


def _key(item: MessageLike, message: Message) -> str:
    ident = _id_of(item)
    if ident is not None:
        return _digest("i", ident)
    fields = [message.role, message.content, message.name, message.tool_call_id, list(message.tool_calls)]
    return _digest("f", json.dumps(fields, ensure_ascii=False))


def message_key(item: MessageLike) -> str:
    """The key a cursor remembers a message by: ``i`` + a hash of its id, or ``f`` + a hash of its content."""
    return _key(item, to_message(item))


@dataclass(frozen=True)
class _Alignment:
    """View index ``i`` sits at tail index ``i + shift``; ``end`` is the first view index past the overlap."""

    shift: int
    run: int
    clean: bool
    anchored: bool
    end: int


def _align(view: list[str], tail: tuple[str, ...], shift: int) -> _Alignment | None:
    """The alignment at ``shift`` if it is one rule 2 accepts (see the module docstring)."""
    low, high = max(0, -shift), min(len(view), len(tail) - shift)
    if high <= low:
        return None
    run = 0
    while high - 1 - run >= low and view[high - 1 - run] == tail[high - 1 - run + shift]:
        run += 1
    if run == 0:
        return None
    clean = run == high - low
    anchored = high == len(tail) - shift
    if not (clean or anchored):
        return None
    return _Alignment(shift, run, clean, anchored, high)


def _locate(view: list[str], cursor: MergeCursor) -> _Alignment | None:
    """The alignment of ``view`` with the cursor's tail, or ``None`` when nothing in the view was merged."""
    tail = cursor.tail
    if not view or not tail:
        return None
    grown = _align(view, tail, len(tail) - cursor.position)
    if grown is not None and grown.clean and grown.anchored:
        return grown
    found = [a for shift in range(1 - len(view), len(tail)) if (a := _align(view, tail, shift)) is not None]
    if not found:
        return None
    return max(found, key=lambda a: (a.run, -a.end))


def plan_merge(conversation: Iterable[MessageLike], cursor: MergeCursor | None = None) -> MergePlan:
    """The messages of ``conversation`` not merged into L1 yet, and the cursor to store after merging them.

    ``conversation`` is the framework's current view (dicts or framework messages, normalized
    with :func:`~.messages.to_message`); ``cursor`` is the stored cursor (``None``: nothing
    merged yet). Pure: the caller merges ``plan.messages`` and then stores ``plan.cursor``.
    """
    if isinstance(conversation, (str, bytes, Mapping)):
        raise InvalidInputError("expected a list of messages, got a single " + type(conversation).__name__)
    items = list(conversation)
    messages = [to_message(item) for item in items]
    view = [_key(item, message) for item, message in zip(items, messages, strict=True)]
    cursor = cursor if cursor is not None else MergeCursor()
    if not view:
        return MergePlan([], 0, cursor)
    found = _locate(view, cursor)
    if found is None:
        start, combined = 0, [*cursor.tail, *view]
    elif found.anchored:
        start, combined = found.end, [*cursor.tail[: max(0, found.shift)], *view]
    else:  # a window of messages merged earlier: nothing new, the cursor stays as it is
        return MergePlan([], len(view), cursor)
    after = MergeCursor(tail=tuple(combined[-TAIL_LENGTH:]), position=len(view))
    # Keys stay those of the messages as given; what is merged names each tool output after
    # its call, even one merged earlier in the view.
    return MergePlan(name_outputs(messages)[start:], start, after)
