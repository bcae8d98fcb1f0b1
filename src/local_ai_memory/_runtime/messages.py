"""Conversation messages: one normal form, and the append-only session store of a scope.

Agents hand the library messages in several shapes: plain dicts (``{"role": "user",
"content": "..."}``, OpenAI style with ``name`` / ``tool_call_id`` / ``tool_calls``), LangChain
messages (``.type`` is ``human`` / ``ai`` / ``tool`` / ``system``, ``.content`` may be a list
of content blocks) and LlamaIndex ``ChatMessage`` (``.role`` is an enum). :func:`to_message`
turns any of them into a :class:`Message`, so the compressor and the context builder deal
with one shape only.

:class:`SessionMessageStore` keeps a session's messages in the runtime backend, each a typed,
versioned :class:`StoredMessage` with a gap-free sequence number (on files:
``{runtime_data_dir}/memory/sessions/{scope}.jsonl``, one JSON record per line; a crash can
leave a torn last line, which readers skip and the next append seals off).
The post-run step that merges a run into L1 and then compacts the session is in :mod:`.run`.

A framework whose own items must come back exactly (the OpenAI Agents SDK's session items,
Responses API shapes such as ``function_call`` and ``function_call_output``) stores them with
:meth:`SessionMessageStore.append_items`: each record keeps the item's JSON text in ``raw``
beside its normal form, so the compressor still reads the conversation.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from local_ai_memory._contracts.runtime import RuntimeBackend, Scope
from local_ai_memory._runtime.scope import MemoryManager
from local_ai_memory._shared.config import MemoryConfig
from local_ai_memory._shared.errors import InvalidInputError
from local_ai_memory._shared.records import StoredMessage
from local_ai_memory._shared.unicode import check_texts_in

Item = Any
"""A framework's own JSON-able item (a dict), kept exactly by :meth:`SessionMessageStore.append_items`."""

__all__ = [
    "Item",
    "Message",
    "MessageLike",
    "SessionMessageStore",
    "StoredMessage",
    "from_stored",
    "item_of",
    "stored",
    "stored_items",
    "to_message",
    "to_messages",
]

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

    ``tool_calls`` holds the names of the tools an assistant message asked for, and
    ``tool_arguments`` what it passed to each, as JSON text, in the same order (``""`` for a
    call given without arguments; ``()`` when no call had any). The arguments are often what
    a run did ("read_file path=src/app.py"), which a summary of the run wants to say.

    ``time`` is when the message was said (seconds since the epoch) when the caller gave one
    (a ``timestamp`` key or attribute, epoch seconds or ISO 8601; LangChain's
    ``additional_kwargs["timestamp"]``): a conversation log records it instead of the time of
    logging, so an imported chat keeps its dates. It is not part of a message's identity.
    """

    role: str
    content: str
    name: str | None = None
    tool_call_id: str | None = None
    tool_calls: tuple[str, ...] = ()
    tool_arguments: tuple[str, ...] = ()
    time: float | None = field(default=None, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """A plain ``{"role", "content", ...}`` dict (optional keys only when set)."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.name:
            out["name"] = self.name
        if self.tool_call_id:
            out["tool_call_id"] = self.tool_call_id
        if self.tool_calls:
            out["tool_calls"] = list(self.tool_calls)
        if self.tool_arguments:
            out["tool_arguments"] = list(self.tool_arguments)
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


def _time_of(item: Any) -> float | None:
    """When ``item`` was said, if it says (see :attr:`Message.time`); a value that is no time is refused."""
    raw = _get(item, "timestamp")
    if raw is None:
        extra = _get(item, "additional_kwargs")
        raw = extra.get("timestamp") if isinstance(extra, Mapping) else None
    if raw is None:
        return None
    if isinstance(raw, datetime):
        return raw.timestamp()
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        return float(raw)
    if isinstance(raw, str):
        try:
            return datetime.fromisoformat(raw).timestamp()
        except ValueError:
            pass
    raise InvalidInputError(f"a message's timestamp must be epoch seconds or ISO 8601 text, got {raw!r}")


def _role_of(item: Any) -> str:
    raw = _get(item, "role")
    if raw is None:
        raw = _get(item, "type")
    raw = getattr(raw, "value", raw)  # LlamaIndex MessageRole is an enum
    if not isinstance(raw, str) or not raw:
        raise InvalidInputError(f"a message needs a 'role' (or a '.type'), got {type(item).__name__}")
    return _ROLE_ALIASES.get(raw.lower(), raw.lower())


def _arguments_text(arguments: Any) -> str:
    """A call's arguments as JSON text: a string as given (OpenAI sends JSON text), anything else dumped."""
    if arguments is None or arguments in ({}, "", "{}"):
        return ""
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, ensure_ascii=False, default=str)


def _tool_calls_of(item: Any) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The names of the tools a message asks for and the arguments of each (see :class:`Message`).

    Reads LangChain calls (``{"name", "args"}``), OpenAI calls (``{"function": {"name",
    "arguments"}}``, also under ``additional_kwargs``) and plain names, which may come with a
    parallel ``tool_arguments`` list (the normal form's own dict).
    """
    calls = _get(item, "tool_calls")
    if not calls:
        extra = _get(item, "additional_kwargs")
        calls = extra.get("tool_calls") if isinstance(extra, Mapping) else None
    given = _get(item, "tool_arguments")
    given = list(given) if isinstance(given, (list, tuple)) else []
    names: list[str] = []
    arguments: list[str] = []
    for call in calls or ():
        if isinstance(call, str):
            names.append(call)
            text = given[len(arguments)] if len(arguments) < len(given) else ""
            arguments.append(text if isinstance(text, str) else _arguments_text(text))
            continue
        name = _get(call, "name")
        function = _get(call, "function")
        if not name and function is not None:
            name = _get(function, "name")
        if isinstance(name, str) and name:
            names.append(name)
            args = _get(call, "args")
            if args is None and function is not None:
                args = _get(function, "arguments")
            arguments.append(_arguments_text(args))
    return tuple(names), (tuple(arguments) if any(arguments) else ())


def _responses_item(item: Mapping[str, Any]) -> Message | None:
    """The normal form of a Responses API item without a role (a tool call, its output, a
    reasoning summary), or ``None`` when ``item`` is no such item."""
    kind = item.get("type")
    if "role" in item or not isinstance(kind, str):
        return None
    call_id = item.get("call_id")
    call_id = call_id if isinstance(call_id, str) and call_id else None
    if kind.endswith("_output"):  # function_call_output, computer_call_output, ...
        return Message("tool", _text_of(item.get("output")), tool_call_id=call_id)
    if kind.endswith("_call"):  # function_call, file_search_call, ...
        name = item.get("name")
        arguments = item.get("arguments")
        text = arguments if isinstance(arguments, str) else ""
        return Message(
            "assistant",
            text,
            tool_call_id=call_id,
            tool_calls=(name if isinstance(name, str) and name else kind,),
            tool_arguments=(text,) if text else (),
        )
    if kind == "reasoning":
        return Message("assistant", _text_of(item.get("summary")))
    return Message(kind, _text_of(item.get("content")))


def to_message(item: MessageLike) -> Message:
    """Normalize one dict or framework message into a :class:`Message`."""
    if isinstance(item, Message):
        return item
    if isinstance(item, Mapping) and (responses := _responses_item(item)) is not None:
        return responses
    role = _role_of(item)
    name = _get(item, "name")
    tool_call_id = _get(item, "tool_call_id")
    names, arguments = _tool_calls_of(item)
    return Message(
        role=role,
        content=_text_of(_get(item, "content")),
        name=name if isinstance(name, str) and name else None,
        tool_call_id=tool_call_id if isinstance(tool_call_id, str) and tool_call_id else None,
        tool_calls=names,
        tool_arguments=arguments,
        time=_time_of(item),
    )


def name_outputs(messages: Sequence[Message]) -> list[Message]:
    """``messages`` with each unnamed tool output named after the call it answers.

    A Responses API ``function_call_output`` carries only the ``call_id`` of its
    ``function_call``, which names the tool: without this, a summary says "ran tool" where the
    call was ``read_log``. An output whose call is not among ``messages`` stays unnamed."""
    calls = {
        m.tool_call_id: m.tool_calls[0]
        for m in messages
        if m.role == "assistant" and m.tool_call_id and len(m.tool_calls) == 1
    }
    if not calls:
        return list(messages)
    return [
        replace(m, name=calls[m.tool_call_id]) if m.role == "tool" and not m.name and m.tool_call_id in calls else m
        for m in messages
    ]


def to_messages(items: Iterable[MessageLike]) -> list[Message]:
    """Normalize a sequence of messages; a bare string or dict is refused as a likely mistake.
    Tool outputs are named after their calls (:func:`name_outputs`)."""
    if isinstance(items, (str, bytes, Mapping)):
        raise InvalidInputError("expected a list of messages, got a single " + type(items).__name__)
    return name_outputs([to_message(item) for item in items])


def stored(message: Message, now: float) -> StoredMessage:
    """The stored form of a message (its ``seq`` is given by the backend)."""
    return StoredMessage(
        role=message.role,
        content=message.content,
        name=message.name,
        tool_call_id=message.tool_call_id,
        tool_calls=message.tool_calls,
        tool_arguments=message.tool_arguments,
        created_at=now,
    )


def stored_messages(messages: Sequence[Message], now: float) -> list[StoredMessage]:
    """The stored forms of ``messages``, each checked to be Unicode text first (nothing is
    written when one is not: :mod:`local_ai_memory._shared.unicode`)."""
    for index, message in enumerate(messages):
        check_texts_in(message.to_dict(), f"message {index}")
    return [stored(message, now) for message in messages]


def from_stored(record: StoredMessage) -> Message:
    """The normal form of a stored message."""
    return Message(
        record.role, record.content, record.name, record.tool_call_id, record.tool_calls, record.tool_arguments
    )


def stored_items(items: Sequence[Item], now: float) -> list[StoredMessage]:
    """The records of framework items: each one's normal form plus its JSON text in ``raw``."""
    if isinstance(items, (str, bytes, Mapping)):
        raise InvalidInputError("expected a list of items, got a single " + type(items).__name__)
    raws = []
    for index, item in enumerate(items):
        check_texts_in(item, f"item {index}")  # kept exactly, so refused whole (see _shared.unicode)
        try:
            raws.append(json.dumps(item))
        except (TypeError, ValueError) as error:
            raise InvalidInputError(f"an item must be JSON-able to be kept exactly: {error}") from error
    messages = name_outputs([to_message(item) for item in items])
    return [stored(message, now).model_copy(update={"raw": raw}) for message, raw in zip(messages, raws, strict=True)]


def item_of(record: StoredMessage) -> Item:
    """The item a record was appended as: the framework's own (``raw``) or the normal form's dict."""
    return json.loads(record.raw) if record.raw is not None else from_stored(record).to_dict()


def _count(limit: int) -> int:
    """``limit`` checked: a non-negative integer (0: no items)."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise InvalidInputError(f"limit must be a non-negative integer or None, got {limit!r}")
    return limit


def _keep(config: MemoryConfig, keep_last: int | None) -> int:
    keep = config.working_memory_compact_keep_last if keep_last is None else keep_last
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 0:
        raise InvalidInputError(f"keep_last must be a non-negative integer, got {keep!r}")
    return keep


class SessionMessageStore:
    """The append-only message log of one ``(user_id, session_id)`` scope."""

    def __init__(
        self,
        backend: RuntimeBackend,
        config: MemoryConfig | None = None,
        *,
        user_id: str | None = None,
        session_id: str | None = None,
    ) -> None:
        self.config = config if config is not None else MemoryConfig()
        self.scope_info = Scope.of(user_id, session_id)
        self.scope = self.scope_info.key if self.scope_info.scoped else None
        self.user_id = user_id
        self.session_id = session_id
        self.backend: RuntimeBackend = backend

    @classmethod
    def for_manager(cls, manager: MemoryManager) -> SessionMessageStore:
        """The store of the scope a ``MemoryManager`` is bound to, on the same backend."""
        return cls(manager.backend, manager.config, user_id=manager.user_id, session_id=manager.session_id)

    def __repr__(self) -> str:
        return f"SessionMessageStore(user_id={self.user_id!r}, session_id={self.session_id!r})"

    def records(self) -> list[StoredMessage]:
        """The stored messages with their sequence numbers and times, oldest first."""
        return self.backend.get_messages(self.scope_info)

    def messages(self) -> list[Message]:
        """All messages of the session, oldest first."""
        return [from_stored(record) for record in self.records()]

    def __len__(self) -> int:
        return len(self.records())

    def append(self, messages: Iterable[MessageLike]) -> int:
        """Append ``messages`` (dicts or framework messages) in one write; return how many."""
        normalized = to_messages(messages)
        if not normalized:
            return 0
        return len(self.backend.append_messages(self.scope_info, stored_messages(normalized, time.time())))

    def compact(self, keep_last: int | None = None) -> int:
        """Keep only the last ``keep_last`` messages (default: the config's); return how many were dropped."""
        return self.backend.compact_messages(self.scope_info, _keep(self.config, keep_last))

    def clear(self) -> bool:
        """Delete the session's messages; return whether there were any."""
        return self.backend.clear_messages(self.scope_info)

    def append_items(self, items: Sequence[Item]) -> int:
        """Append framework items (JSON-able dicts) in one write, each kept exactly; return how many.

        :meth:`items` gives them back equal to what was given (and ``json.dumps`` of each,
        byte for byte), while :meth:`messages` and the compressor read their normal form.
        """
        records = stored_items(items, time.time())
        return len(self.backend.append_messages(self.scope_info, records)) if records else 0

    def items(self, limit: int | None = None) -> list[Item]:
        """The session's items, oldest first: the last ``limit`` (``None``: all; ``0``: none).

        An entry appended by :meth:`append` (not as an item) comes back as its normal form's dict.
        """
        if limit is None:
            return [item_of(record) for record in self.records()]
        return [item_of(record) for record in self.backend.get_last_messages(self.scope_info, _count(limit))]

    def pop_item(self) -> Item | None:
        """Remove the newest entry and return it as :meth:`items` would; ``None`` when the log is empty.

        Atomic: two callers never get the same entry. The next entry appended takes its place.
        """
        record = self.backend.pop_message(self.scope_info)
        return None if record is None else item_of(record)

    async def aappend_items(self, items: Sequence[Item]) -> int:
        """Async twin of :meth:`append_items`."""
        records = stored_items(items, time.time())
        return len(await self.backend.aappend_messages(self.scope_info, records)) if records else 0

    async def aitems(self, limit: int | None = None) -> list[Item]:
        """Async twin of :meth:`items`."""
        if limit is None:
            return [item_of(record) for record in await self.arecords()]
        return [item_of(record) for record in await self.backend.aget_last_messages(self.scope_info, _count(limit))]

    async def apop_item(self) -> Item | None:
        """Async twin of :meth:`pop_item`."""
        record = await self.backend.apop_message(self.scope_info)
        return None if record is None else item_of(record)

    async def arecords(self) -> list[StoredMessage]:
        """Async twin of :meth:`records`."""
        return await self.backend.aget_messages(self.scope_info)

    async def amessages(self) -> list[Message]:
        """Async twin of :meth:`messages`."""
        return [from_stored(record) for record in await self.arecords()]

    async def aappend(self, messages: Iterable[MessageLike]) -> int:
        """Async twin of :meth:`append`."""
        normalized = to_messages(messages)
        if not normalized:
            return 0
        return len(await self.backend.aappend_messages(self.scope_info, stored_messages(normalized, time.time())))

    async def acompact(self, keep_last: int | None = None) -> int:
        """Async twin of :meth:`compact`."""
        return await self.backend.acompact_messages(self.scope_info, _keep(self.config, keep_last))

    async def aclear(self) -> bool:
        """Async twin of :meth:`clear`."""
        return await self.backend.aclear_messages(self.scope_info)
