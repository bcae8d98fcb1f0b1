"""The saver's direct decoding of stored messages equals LangGraph's serializer, object for object."""

from __future__ import annotations

import random
import uuid
from typing import Any

import pytest
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_local_ai_memory._message_decode import list_loader, loader
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer


def _same(found: Any, expected: Any) -> None:
    """Equal as LangGraph's reader would give it: same types, fields, fields set and extras, all the way down."""
    assert type(found) is type(expected)
    if isinstance(expected, BaseMessage):
        assert found.__dict__ == expected.__dict__
        assert found.model_fields_set == expected.model_fields_set
        assert found.__pydantic_extra__ == expected.__pydantic_extra__
        assert found.__pydantic_private__ == expected.__pydantic_private__
        for key, value in expected.__dict__.items():
            _same(found.__dict__[key], value)
    elif isinstance(expected, dict):
        assert found.keys() == expected.keys()
        for key, value in expected.items():
            _same(found[key], value)
    elif isinstance(expected, (list, tuple)):
        assert len(found) == len(expected)
        for a, b in zip(found, expected, strict=True):
            _same(a, b)
    else:
        assert found == expected


def _random_message(rng: random.Random) -> BaseMessage:
    text = rng.choice(["", "plain words", "ünïcode ✓", "x" * rng.randint(1, 3000)])
    content: Any = rng.choice(
        [text, [text, {"type": "text", "text": text}], [{"type": "image", "url": "https://e.x/i.png", "n": 3}], []]
    )
    extra = rng.choice([{}, {"k": [1, 2.5, None]}, {"nested": {"a": b"bytes"}}])
    meta = rng.choice([{}, {"model_name": "m", "finish_reason": "stop"}, {"logprobs": None, "n": 1}])
    name = rng.choice([None, "bot"])
    mid = rng.choice([None, str(uuid.UUID(int=rng.getrandbits(128)))])
    kind = rng.randrange(6)
    if kind == 0:
        calls = [
            {"name": f"tool{i}", "args": {"q": text[:20], "deep": {"x": [i]}}, "id": rng.choice([None, f"c{i}"])}
            for i in range(rng.randint(0, 3))
        ]
        usage = rng.choice(
            [
                None,
                {"input_tokens": 3, "output_tokens": 4, "total_tokens": 7},
                {
                    "input_tokens": 3,
                    "output_tokens": 4,
                    "total_tokens": 7,
                    "input_token_details": {"cache_read": 1},
                    "output_token_details": {"reasoning": 2},
                },
            ]
        )
        return AIMessage(
            content=content,
            additional_kwargs=extra,
            response_metadata=meta,
            name=name,
            id=mid,
            tool_calls=calls,
            usage_metadata=usage,
        )
    if kind == 1:
        return ToolMessage(
            content=content,
            tool_call_id=f"call-{rng.randint(0, 9)}",
            artifact=rng.choice([None, {"rows": [1, 2]}, [HumanMessage("inside")]]),
            status=rng.choice(["success", "error"]),
            name=name,
            id=mid,
        )
    if kind == 2:
        return HumanMessage(content=content, additional_kwargs=extra, name=name, id=mid)
    if kind == 3:
        return SystemMessage(content=content, response_metadata=meta, id=mid)
    if kind == 4:
        return ChatMessage(content=text, role="critic", id=mid)
    return AIMessageChunk(content=text, id=mid, tool_call_chunks=[{"name": "t", "args": "{", "id": "c", "index": 0}])


def _tricky() -> list[Any]:
    """Values at the edges of the direct path: messages whose stored fields validation changes, and others."""
    raw_calls = [{"id": "c1", "function": {"name": "f", "arguments": '{"a": 1}'}, "type": "function"}]
    odd_call = AIMessage("", tool_calls=[{"name": "f", "args": {}, "id": "c"}])
    odd_call.tool_calls[0]["extras"] = {"cache": True}  # type: ignore[typeddict-unknown-key]
    emptied = AIMessage("", additional_kwargs={"tool_calls": raw_calls})
    emptied.tool_calls = []  # raw calls left behind: validation parses them again
    wide_usage = AIMessage("u", usage_metadata={"input_tokens": 1, "output_tokens": 1, "total_tokens": 2})
    wide_usage.usage_metadata["surprise"] = 5  # type: ignore[index,typeddict-unknown-key]
    bool_usage = AIMessage("u", usage_metadata={"input_tokens": True, "output_tokens": 1, "total_tokens": 2})
    odd_status = ToolMessage("t", tool_call_id="c")
    odd_status.status = "maybe"  # type: ignore[assignment]
    extra_field = HumanMessage("e", custom_field={"k": 1})
    invalid = AIMessage("", invalid_tool_calls=[{"name": "f", "args": "{oops", "id": "c", "error": "bad"}])
    return [  # the first six are stored in shapes validation changes, so they must be validated
        emptied,
        odd_call,
        wide_usage,
        odd_status,
        extra_field,
        invalid,
        AIMessage("", additional_kwargs={"tool_calls": raw_calls}),  # parsed when made: plain once stored
        bool_usage,
        RemoveMessage(id="gone"),
        {"messages": [HumanMessage("in a dict")], "n": 3},
        [AIMessage("a", id="1"), ToolMessage("t", tool_call_id="c", artifact=AIMessage("deep"))],
        "a string",
        None,
        b"raw bytes",
        12,
    ]


@pytest.mark.parametrize("strict", [False, True], ids=["default", "strict allowlist"])
def test_direct_decoding_equals_the_serializers(strict: bool) -> None:
    serde = JsonPlusSerializer(allowed_msgpack_modules=None) if strict else JsonPlusSerializer()
    loads = loader(serde)
    assert loads is not serde.loads_typed
    rng = random.Random(23)
    values = [_random_message(rng) for _ in range(600)] + _tricky()
    for value in values:
        stored = serde.dumps_typed(value)
        _same(loads(stored), serde.loads_typed(stored))
    whole = serde.dumps_typed(values[:200])  # a list decoded in one call, as LangGraph stores a channel
    _same(loads(whole), serde.loads_typed(whole))
    items = [serde.dumps_typed(value) for value in values]
    for count in (0, 1, 15, 16, 17, 600, len(values)):  # empty, single and long lists
        plain = [item for item in items if item[0] == "msgpack"][:count]
        _same(list_loader(serde)(plain), [serde.loads_typed(item) for item in plain])
    _same(list_loader(serde)(items), [serde.loads_typed(item) for item in items])  # null and bytes among them


def test_plain_messages_skip_validation_and_tricky_ones_do_not(monkeypatch: pytest.MonkeyPatch) -> None:
    serde = JsonPlusSerializer()
    plain = [
        AIMessage("", tool_calls=[{"name": "f", "args": {"a": 1}, "id": "c"}], id="a1"),
        ToolMessage("out", tool_call_id="c", id="t1"),
        HumanMessage("hi", id="h1"),
        SystemMessage("be brief"),
    ]
    stored = [serde.dumps_typed(message) for message in plain]
    tricky = [serde.dumps_typed(message) for message in _tricky()[:6]]
    validated: list[str] = []
    for cls in (AIMessage, ToolMessage, HumanMessage, SystemMessage):
        original = cls.__init__

        def counting(self: Any, *args: Any, _original: Any = original, **kwargs: Any) -> None:
            validated.append(type(self).__name__)
            _original(self, *args, **kwargs)

        monkeypatch.setattr(cls, "__init__", counting)
    loads = loader(serde)
    assert [loads(item) for item in stored] == plain
    assert validated == []
    for item in tricky:
        loads(item)
    assert len(validated) == len(tricky)  # each went through the class's own validation


def test_other_serializers_decode_their_own_way() -> None:
    class Mine(JsonPlusSerializer):
        pass

    mine = Mine()
    assert loader(mine) == mine.loads_typed
    assert list_loader(mine)([mine.dumps_typed(HumanMessage("x", id="1"))]) == [HumanMessage("x", id="1")]
    hooked = JsonPlusSerializer(__unpack_ext_hook__=lambda code, data: ("ext", code))
    assert loader(hooked) == hooked.loads_typed
