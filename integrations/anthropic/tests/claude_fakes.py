"""Helpers of the Anthropic integration tests: a refused command, and the Messages API answered in-process."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx2 as httpx  # the HTTP package this anthropic release is built on
import pytest
from anthropic.lib.tools import ToolError

Use = Callable[..., str]


def refused(use: Use, command: str, **fields: Any) -> str:
    """The error text of a command the tool must refuse."""
    with pytest.raises(ToolError) as caught:
        use(command, **fields)
    return str(caught.value)


class ScriptedMessages:
    """The Messages API answered in-process (``httpx.MockTransport``: no socket, no network).

    ``turns`` are the assistant's content blocks, one list per request; the requests the
    client sent are kept in :attr:`requests` (their JSON bodies), so a test reads the tool
    results the SDK's tool runner sent back.
    """

    def __init__(self, turns: list[list[dict[str, Any]]]) -> None:
        self.turns = list(turns)
        self.requests: list[dict[str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(json.loads(request.content))
        content = self.turns.pop(0)
        stop = "tool_use" if any(block["type"] == "tool_use" for block in content) else "end_turn"
        body = {
            "id": f"msg_{len(self.requests)}",
            "type": "message",
            "role": "assistant",
            "model": "claude-scripted",
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {"input_tokens": 1, "output_tokens": 1},
        }
        return httpx.Response(200, json=body)

    def tool_results(self, request: int) -> list[dict[str, Any]]:
        """The ``tool_result`` blocks of request number ``request`` (0-based)."""
        last = self.requests[request]["messages"][-1]
        return [block for block in last["content"] if block.get("type") == "tool_result"]


def memory_use(call_id: str, **command: Any) -> dict[str, Any]:
    """A ``tool_use`` block of the ``memory`` tool."""
    return {"type": "tool_use", "id": call_id, "name": "memory", "input": command}
