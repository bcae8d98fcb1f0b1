"""Conversation messages: one normal form, and the append-only session store of a scope.

Agents hand the library messages in several shapes: plain dicts (``{"role": "user",
"content": "..."}``, OpenAI style with ``name`` / ``tool_call_id`` / ``tool_calls``), LangChain
messages (``.type`` is ``human`` / ``ai`` / ``tool`` / ``system``, ``.content`` may be a list
of content blocks) and LlamaIndex ``ChatMessage`` (``.role`` is an enum). :func:`to_message`
turns any of them into a :class:`Message`, so the compressor and the context builder deal
with one shape only.

:class:`SessionMessageStore` keeps a session's messages in
``{runtime_data_dir}/memory/sessions/{scope}.jsonl`` (``global.jsonl`` when unscoped), one
JSON record per line (a typed, versioned :class:`StoredMessage`). Appends go through :func:`_fs.append_bytes` under the
file's cross-process lock; a crash can leave a torn last line, which readers skip and the
next append seals off. :meth:`~SessionMessageStore.compact` rewrites the file atomically.
The post-run step that merges a run into L1 and then compacts the session is in :mod:`._run`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from . import _fs
from ._config import MemoryConfig
from ._errors import InvalidInputError, UnsupportedFormatError
from ._events import Event, log_event
from ._guard import DirectoryGuard, optional_scope

__all__ = [
    "FORMAT_VERSION",
    "Message",
    "MessageLike",
    "SessionMessageStore",
    "StoredMessage",
    "to_message",
    "to_messages",
]

FORMAT_VERSION = 1
GLOBAL_STEM = "global"
MessageLike = Any
"""A dict with ``role``/``content`` or a framework message object with ``.type``/``.role`` and ``.content``."""

_ROLE_ALIASES = {
    "human": "user",
    "user": "user",
    "ai": "assistant",
    "assistant": "assistant",
    "chatbot": "assistant",
    "model": "assistant",
    "system": "system",
    "developer": "system",
    "tool": "tool",
    "function": "tool",
}


@dataclass(frozen=True)
class Message:
    """A message in the library's normal form.

    ``tool_calls`` holds the names of the tools an assistant message asked for.
    """

    role: str
    content: str
    name: str | None = None
    tool_call_id: str | None = None
    tool_calls: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """A plain ``{"role", "content", ...}`` dict (optional keys only when set)."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.name:
            out["name"] = self.name
        if self.tool_call_id:
            out["tool_call_id"] = self.tool_call_id
        if self.tool_calls:
            out["tool_calls"] = list(self.tool_calls)
        return out


def _get(item: Any, key: str) -> Any:
    if isinstance(item, Mapping):
        return item.get(key)
    return getattr(item, key, None)


def _text_of(content: Any) -> str:
    """Plain text of a message content: a string, or a list of strings / text blocks."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Mapping):
        text = content.get("text")
        return text if isinstance(text, str) else ""
    if isinstance(content, Iterable):
        parts = [_text_of(part) for part in content]
        return "\n".join(part for part in parts if part)
    return str(content)


def _role_of(item: Any) -> str:
    raw = _get(item, "role")
    if raw is None:
        raw = _get(item, "type")
    raw = getattr(raw, "value", raw)  # LlamaIndex MessageRole is an enum
    if not isinstance(raw, str) or not raw:
        raise InvalidInputError(f"a message needs a 'role' (or a '.type'), got {type(item).__name__}")
    return _ROLE_ALIASES.get(raw.lower(), raw.lower())


def _tool_call_names(item: Any) -> tuple[str, ...]:
    calls = _get(item, "tool_calls")
    if not calls:
        extra = _get(item, "additional_kwargs")
        calls = extra.get("tool_calls") if isinstance(extra, Mapping) else None
    names: list[str] = []
    for call in calls or ():
        if isinstance(call, str):
            names.append(call)
            continue
        name = _get(call, "name")
        if not name:
            function = _get(call, "function")
            name = _get(function, "name") if function is not None else None
        if isinstance(name, str) and name:
            names.append(name)
    return tuple(names)


def to_message(item: MessageLike) -> Message:
    """Normalize one dict or framework message into a :class:`Message`."""
    if isinstance(item, Message):
        return item
    role = _role_of(item)
    name = _get(item, "name")
    tool_call_id = _get(item, "tool_call_id")
    return Message(
        role=role,
        content=_text_of(_get(item, "content")),
        name=name if isinstance(name, str) and name else None,
        tool_call_id=tool_call_id if isinstance(tool_call_id, str) and tool_call_id else None,
        tool_calls=_tool_call_names(item),
    )


def to_messages(items: Iterable[MessageLike]) -> list[Message]:
    """Normalize a sequence of messages; a bare string or dict is refused as a likely mistake."""
    if isinstance(items, (str, bytes, Mapping)):
        raise InvalidInputError("expected a list of messages, got a single " + type(items).__name__)
    return [to_message(item) for item in items]


class StoredMessage(BaseModel):
    """One line of a session file."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    format_version: int = FORMAT_VERSION
    role: str
    content: str
    name: str | None = None
    tool_call_id: str | None = None
    tool_calls: tuple[str, ...] = ()
    created_at: float = 0.0

    def to_message(self) -> Message:
        return Message(self.role, self.content, self.name, self.tool_call_id, self.tool_calls)


def _encode(messages: Sequence[Message], now: float) -> bytes:
    lines = []
    for message in messages:
        record = StoredMessage(
            role=message.role,
            content=message.content,
            name=message.name,
            tool_call_id=message.tool_call_id,
            tool_calls=message.tool_calls,
            created_at=now,
        )
        lines.append(record.model_dump_json(exclude_defaults=False) + "\n")
    return "".join(lines).encode("utf-8")


def parse_session(data: bytes, path: Path | str = "<session>") -> list[StoredMessage]:
    """The records of a session file. A torn last line is skipped; other bad lines are logged and skipped."""
    records: list[StoredMessage] = []
    lines = data.split(b"\n")
    last = len(lines) - 1  # the piece after the final newline: empty, or a torn record
    for number, raw in enumerate(lines):
        if not raw.strip():
            continue
        try:
            record = StoredMessage.model_validate_json(raw)
        except ValidationError:
            if number != last:
                log_event(Event.MEMORY_CORRUPT, path=str(path), line=number + 1, action="skipped line")
            continue
        if record.format_version > FORMAT_VERSION:
            raise UnsupportedFormatError(
                f"{path}: line {number + 1} has format_version {record.format_version}; "
                f"this version of local-ai-memory reads up to {FORMAT_VERSION}"
            )
        records.append(record)
    return records


class SessionMessageStore:
    """The append-only message log of one ``(user_id, session_id)`` scope."""

    def __init__(
        self,
        guard: DirectoryGuard,
        config: MemoryConfig | None = None,
        *,
        user_id: str | None = None,
        session_id: str | None = None,
    ) -> None:
        self.scope = optional_scope(user_id, session_id)
        self.guard = guard
        self.config = config if config is not None else MemoryConfig()
        self.user_id = user_id
        self.session_id = session_id
        stem = self.scope if self.scope is not None else GLOBAL_STEM
        self.path = guard.resolve("memory", "sessions", f"{stem}.jsonl")

    @classmethod
    def for_manager(cls, manager: Any) -> SessionMessageStore:
        """The store of the scope a ``MemoryManager`` is bound to (``global`` for an unscoped one)."""
        return cls(manager.guard, manager.config, user_id=manager.user_id, session_id=manager.session_id)

    def __repr__(self) -> str:
        return f"SessionMessageStore(user_id={self.user_id!r}, session_id={self.session_id!r})"

    def _read(self) -> list[StoredMessage]:
        data = _fs.read_optional(self.path)
        return [] if data is None else parse_session(data, self.path)

    def messages(self) -> list[Message]:
        """All messages of the session, oldest first."""
        return [record.to_message() for record in self._read()]

    def __len__(self) -> int:
        return len(self._read())

    def append(self, messages: Iterable[MessageLike]) -> int:
        """Append ``messages`` (dicts or framework messages) in one write; return how many."""
        normalized = to_messages(messages)
        if not normalized:
            return 0
        data = _encode(normalized, time.time())
        with _fs.locked(self.path, timeout=self.config.lock_timeout):
            existing = _fs.read_optional(self.path)
            if existing and not existing.endswith(b"\n"):
                data = b"\n" + data  # seal off a line torn by a crash so the new record starts clean
            _fs.append_bytes(self.path, data, durable=self.config.fsync)
        return len(normalized)

    def compact(self, keep_last: int | None = None) -> int:
        """Keep only the last ``keep_last`` messages (default: the config's); return how many were dropped."""
        keep = self.config.working_memory_compact_keep_last if keep_last is None else keep_last
        if not isinstance(keep, int) or keep < 0:
            raise InvalidInputError(f"keep_last must be a non-negative integer, got {keep!r}")
        dropped = 0

        def change(old: bytes | None) -> bytes:
            nonlocal dropped
            records = parse_session(old or b"", self.path)
            kept = records[max(0, len(records) - keep) :] if keep else []
            dropped = len(records) - len(kept)
            return b"".join(record.model_dump_json().encode("utf-8") + b"\n" for record in kept)

        with _fs.locked(self.path, timeout=self.config.lock_timeout):
            if _fs.read_optional(self.path) is None:
                return 0
            _fs.update_bytes(self.path, change, durable=self.config.fsync, timeout=self.config.lock_timeout)
        return dropped

    def clear(self) -> bool:
        """Delete the session's messages; return whether there was a file."""
        with _fs.locked(self.path, timeout=self.config.lock_timeout):
            return _fs.remove(self.path, durable=self.config.fsync)

    async def amessages(self) -> list[Message]:
        """Async twin of :meth:`messages`."""
        return await asyncio.to_thread(self.messages)

    async def aappend(self, messages: Iterable[MessageLike]) -> int:
        """Async twin of :meth:`append`."""
        materialized = list(messages) if not isinstance(messages, (str, bytes, Mapping)) else messages
        return await asyncio.to_thread(self.append, materialized)

    async def acompact(self, keep_last: int | None = None) -> int:
        """Async twin of :meth:`compact`."""
        return await asyncio.to_thread(self.compact, keep_last)

    async def aclear(self) -> bool:
        """Async twin of :meth:`clear`."""
        return await asyncio.to_thread(self.clear)
