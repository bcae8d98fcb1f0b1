"""Edge cases of the pieces the agent tests go through only on their main path."""

from __future__ import annotations

import json
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_local_ai_memory import ToolResultMiddleware
from langchain_local_ai_memory._callbacks import text_of
from langchain_local_ai_memory._middleware import _with_memory, reference_of
from langchain_local_ai_memory._scope import lookup, resolve_scope
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from local_ai_memory import InvalidInputError, Memory


def _request(name: str = "reader") -> ToolCallRequest:
    return ToolCallRequest(tool_call={"name": name, "args": {}, "id": "c1"}, tool=None, state={}, runtime=None)


def _run(middleware: ToolResultMiddleware, result: Any, name: str = "reader") -> Any:
    return middleware.wrap_tool_call(_request(name), lambda request: result)


def test_text_blocks_are_externalized_other_blocks_and_commands_are_not(memory: Memory) -> None:
    middleware = ToolResultMiddleware("alice", "s1", memory=memory)
    blocks = ToolMessage(content=[{"type": "text", "text": "a" * 7000}], tool_call_id="c1", name="reader")
    shrunk = _run(middleware, blocks)
    assert json.loads(shrunk.content)["size"] == 7000
    assert shrunk.tool_call_id == "c1"
    image = ToolMessage(
        content=[{"type": "image", "base64": "A" * 9000, "mime_type": "image/png"}], tool_call_id="c1", name="reader"
    )
    assert _run(middleware, image) is image
    command = Command(update={"messages": []})
    assert _run(middleware, command) is command
    page = ToolMessage(content="p" * 9000, tool_call_id="c1", name="load_tool_result")
    assert _run(middleware, page, "load_tool_result") is page
    limit = ToolMessage(content="é" * 3072, tool_call_id="c1", name="reader")  # exactly 6,144 bytes
    assert _run(middleware, limit) is limit
    over = ToolMessage(content="é" * 3072 + "!", tool_call_id="c1", name="reader")
    assert reference_of(_run(middleware, over)) is not None


async def test_async_wrap_and_inline_tools_option(memory: Memory) -> None:
    middleware = ToolResultMiddleware("alice", "s1", memory=memory, inline_tools=["reader"], register_tool=False)
    assert list(middleware.tools) == []
    big = ToolMessage(content="z" * 9000, tool_call_id="c1", name="reader")

    async def handler(request: ToolCallRequest) -> ToolMessage:
        return big

    assert await middleware.awrap_tool_call(_request(), handler) is big


def test_reference_of_only_accepts_the_exact_shape() -> None:
    good = ToolMessage(content=json.dumps({"result_id": "ab12", "summary": "s", "size": 3}), tool_call_id="c")
    assert reference_of(good) == "ab12"
    extra = ToolMessage(content=json.dumps({"result_id": "ab12", "summary": "s", "size": 3, "x": 1}), tool_call_id="c")
    assert reference_of(extra) is None
    assert reference_of(ToolMessage(content='{"result_id": broken', tool_call_id="c")) is None
    assert reference_of(AIMessage(content=good.content)) is None


def test_system_message_merge_keeps_blocks() -> None:
    merged = _with_memory(SystemMessage(content=[{"type": "text", "text": "rules"}]), "MEMORY")
    assert merged.content == [{"type": "text", "text": "rules"}, {"type": "text", "text": "MEMORY"}]
    assert _with_memory(None, "MEMORY").content == "MEMORY"
    assert _with_memory(SystemMessage(content=""), "MEMORY").content == "MEMORY"


def test_text_of_chain_values() -> None:
    assert text_of({"input": "hi"}) == "hi"
    assert text_of({"messages": [HumanMessage("a"), AIMessage("b")]}) == "b"
    assert text_of(["x", "y"]) == "x\ny"
    assert text_of(None) == ""
    assert text_of({"unrelated": 1}) == ""


def test_scope_lookup_order_and_hostile_ids() -> None:
    class Context:
        user_id = "from-context"

    class Runtime:
        context = Context()

    configurable = {"configurable": {"user_id": "from-config", "session_id": "s"}}
    assert lookup("user_id", Runtime(), configurable) == "from-context"
    assert resolve_scope(None, None, None, configurable) == ("from-config", "s")
    assert resolve_scope("bound", "b", Runtime(), configurable) == ("bound", "b")
    with pytest.raises(InvalidInputError):
        resolve_scope("../etc", "s")
    with pytest.raises(InvalidInputError, match="no session_id"):
        resolve_scope("alice", None)
