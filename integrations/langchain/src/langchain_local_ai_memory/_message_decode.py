"""Decoding stored checkpoint values faster than LangGraph's serializer, with the same result.

LangGraph's ``JsonPlusSerializer`` stores a pydantic object (every chat message) as a msgpack
extension holding ``(module, class name, model_dump(), method)``, and rebuilds it by calling the
class with those fields: a full pydantic validation per message, plus langchain-core's
validators. A fresh ``get_state`` of a 1,000-step agent thread rebuilds 2,000 messages that way,
most of its time. The fields were dumped from an object that was valid, so for the common message
classes that validation gives back what it was given; :func:`loader` then builds the object from
the stored fields directly (what ``model_construct`` builds: no validation), about twice as fast
(1,971 messages: 16 ms of CPU against 34 ms).

"Gives back what it was given" is checked field by field, never assumed: a message takes the
direct path only when every field is of a shape the class's validation keeps as is (the checks in
:class:`_Kind`, written against langchain-core's validators: e.g. an ``AIMessage`` whose
``tool_calls`` are empty while ``additional_kwargs`` hold raw tool calls is re-parsed by
validation, so it goes the serializer's way). Anything else (another class, a field of another
shape, a serializer that is not LangGraph's own, a custom extension hook) is decoded by the
serializer itself. A class whose validators or fields differ from the ones these checks were
written for (another langchain-core) is left to the serializer entirely. The tests compare both
paths object for object (type, fields, fields set, extras) over many messages, tricky ones included.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import ormsgpack
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.jsonplus import EXT_PYDANTIC_V2, JsonPlusSerializer

__all__ = ["list_loader", "loader"]

Loads = Callable[[tuple[str, bytes]], Any]
LoadsList = Callable[[Sequence[tuple[str, bytes]]], list[Any]]

_COMMON = ("content", "additional_kwargs", "response_metadata", "type", "name", "id")
_USAGE = {"input_tokens", "output_tokens", "total_tokens"}
_USAGE_DETAILS = {
    "input_token_details": {"audio", "cache_creation", "cache_read"},
    "output_token_details": {"audio", "reasoning"},
}
_TOOL_CALL = {"name", "args", "id", "type"}


def _str_or_none(value: Any) -> bool:
    return value is None or type(value) is str


def _common(fields: dict[str, Any], kind: str) -> bool:
    """The fields every message has, in shapes validation keeps as they are."""
    content = fields["content"]
    return (
        fields["type"] == kind
        and (type(content) is str or (type(content) is list and all(type(x) in (str, dict) for x in content)))
        and type(fields["additional_kwargs"]) is dict
        and type(fields["response_metadata"]) is dict
        and _str_or_none(fields["name"])
        and _str_or_none(fields["id"])
    )


def _tool_call(call: Any) -> bool:
    return (
        type(call) is dict
        and call.keys() == _TOOL_CALL
        and call["type"] == "tool_call"
        and type(call["name"]) is str
        and _str_or_none(call["id"])
        and type(call["args"]) is dict
        and all(type(key) is str for key in call["args"])
    )


def _usage(usage: Any) -> bool:
    if usage is None:
        return True
    if type(usage) is not dict or not _USAGE <= usage.keys() <= _USAGE | _USAGE_DETAILS.keys():
        return False
    if not all(type(usage[key]) is int for key in _USAGE):
        return False
    for key, allowed in _USAGE_DETAILS.items():
        details = usage.get(key, {})
        if (
            type(details) is not dict
            or not details.keys() <= allowed
            or any(type(v) is not int for v in details.values())
        ):
            return False
    return True


def _ai(fields: dict[str, Any]) -> bool:
    # AIMessage's "before" validator re-parses raw tool calls from additional_kwargs when the message has
    # none, and rebuilds each tool call (dropping other keys); validation of the typed dicts drops unknown
    # keys: only messages on which all of that changes nothing take the direct path.
    tool_calls = fields["tool_calls"]
    return (
        _common(fields, "ai")
        and type(tool_calls) is list
        and all(_tool_call(call) for call in tool_calls)
        and fields["invalid_tool_calls"] == []
        and (bool(tool_calls) or "tool_calls" not in fields["additional_kwargs"])
        and _usage(fields["usage_metadata"])
    )


def _tool(fields: dict[str, Any]) -> bool:
    # ToolMessage's "before" validator turns other content into text and numeric call ids into strings.
    return _common(fields, "tool") and type(fields["tool_call_id"]) is str and fields["status"] in ("success", "error")


@dataclass(frozen=True)
class _Kind:
    """A message class the direct path may build, the fields it must find, and the check that its
    validation would keep them as they are."""

    cls: Any
    fields: frozenset[str]
    plain: Callable[[dict[str, Any]], bool]


def _kinds() -> dict[tuple[str, str], _Kind]:
    """The classes whose validators are the ones the checks above were written for (langchain-core 1.x)."""
    expected: list[tuple[Any, tuple[str, ...], tuple[str, ...], Callable[[dict[str, Any]], bool]]] = [
        (
            AIMessage,
            (*_COMMON, "tool_calls", "invalid_tool_calls", "usage_metadata"),
            ("_backwards_compat_tool_calls",),
            _ai,
        ),
        (ToolMessage, (*_COMMON, "tool_call_id", "artifact", "status"), ("coerce_args",), _tool),
        (HumanMessage, _COMMON, (), lambda fields: _common(fields, "human")),
        (SystemMessage, _COMMON, (), lambda fields: _common(fields, "system")),
    ]
    kinds = {}
    for cls, fields, validators, plain in expected:
        decorators = cls.__pydantic_decorators__
        if (
            set(cls.model_fields) == set(fields)
            and set(decorators.model_validators) == set(validators)
            and not decorators.field_validators
            and not decorators.validators
            and not decorators.root_validators
            and not cls.__private_attributes__
            and cls.__pydantic_post_init__ is None
        ):
            kinds[(cls.__module__, cls.__name__)] = _Kind(cls, frozenset(fields), plain)
    return kinds


_set = object.__setattr__


def _construct(cls: Any, fields: dict[str, Any]) -> Any:
    """What ``cls.model_construct(**fields)`` builds when ``fields`` are exactly the model's fields (no
    defaults to fill, no extras, no private attributes), without its per-field Python loop."""
    built = cls.__new__(cls)
    _set(built, "__dict__", fields)
    _set(built, "__pydantic_fields_set__", set(fields))
    _set(built, "__pydantic_extra__", {})
    _set(built, "__pydantic_private__", None)
    return built


def _constructs_alike(kind: _Kind) -> bool:
    """Whether :func:`_construct` builds what pydantic's ``model_construct`` does for ``kind`` (checked
    once per class at import, so another pydantic that keeps more state falls back to ``model_construct``)."""
    fields = dict.fromkeys(kind.fields)
    sample = kind.cls.model_construct(**fields)
    ours = _construct(kind.cls, dict(fields))
    slots = ("__dict__", "__pydantic_fields_set__", "__pydantic_extra__", "__pydantic_private__")
    return all(getattr(ours, slot) == getattr(sample, slot) for slot in slots) and (
        getattr(sample, "__dict__", {}).keys() == fields.keys()
    )


_KINDS = _kinds()
_DIRECT = {key for key, kind in _KINDS.items() if _constructs_alike(kind)}
_LOADERS: weakref.WeakKeyDictionary[JsonPlusSerializer, Loads] = weakref.WeakKeyDictionary()


def _allowed(serde: JsonPlusSerializer) -> dict[tuple[str, str], _Kind]:
    """The kinds ``serde`` rebuilds as objects (in strict mode, only those on LangGraph's lists)."""
    allowed = getattr(serde, "_allowed_msgpack_modules", None)
    if allowed is True:
        return _KINDS
    try:
        from langgraph.checkpoint.serde._msgpack import SAFE_MSGPACK_TYPES
    except ImportError:  # another langgraph: leave every message to the serializer
        return {}
    listed = {*SAFE_MSGPACK_TYPES, *(allowed or ())}
    return {key: kind for key, kind in _KINDS.items() if key in listed}


def _fast(serde: JsonPlusSerializer) -> Loads:
    fallback: Callable[[int, bytes], Any] = serde._unpack_ext_hook
    kinds = _allowed(serde)

    def hook(code: int, data: bytes) -> Any:
        if code == EXT_PYDANTIC_V2:
            try:
                found = ormsgpack.unpackb(data, ext_hook=hook, option=ormsgpack.OPT_NON_STR_KEYS)
            except Exception:
                found = None
            if type(found) is list and len(found) == 4:
                key = (found[0], found[1])
                kind = kinds.get(key)
                fields = found[2]
                if kind is not None and type(fields) is dict and fields.keys() == kind.fields and kind.plain(fields):
                    if key in _DIRECT:
                        return _construct(kind.cls, fields)
                    return kind.cls.model_construct(**fields)
        return fallback(code, data)

    def loads(typed: tuple[str, bytes]) -> Any:
        if typed[0] != "msgpack":
            return serde.loads_typed(typed)
        return ormsgpack.unpackb(typed[1], ext_hook=hook, option=ormsgpack.OPT_NON_STR_KEYS)

    return loads


def _loaders(serde: SerializerProtocol) -> Loads | None:
    if type(serde) is not JsonPlusSerializer or getattr(serde, "_custom_unpack_ext_hook", True):
        return None
    if not callable(getattr(serde, "_unpack_ext_hook", None)):
        return None
    found = _LOADERS.get(serde)
    if found is None:
        found = _LOADERS[serde] = _fast(serde)
    return found


def loader(serde: SerializerProtocol) -> Loads:
    """``serde.loads_typed``, or an equal and faster one when ``serde`` is LangGraph's own
    ``JsonPlusSerializer`` with its own extension hook (see the module docstring)."""
    found = _loaders(serde)
    return serde.loads_typed if found is None else found


def list_loader(serde: SerializerProtocol) -> LoadsList:
    """Decodes the serialized items of a list, each as :func:`loader` would (the one place a
    list is decoded; one msgpack call for the whole list measured no faster)."""
    load = loader(serde)
    return lambda items: [load(item) for item in items]
