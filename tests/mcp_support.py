"""Helpers the MCP test files share (``test_mcp*.py`` import it by name after putting this
folder on ``sys.path``): the structured answer of a tool call that must succeed, and the error
text of one that must fail."""

from __future__ import annotations

from typing import Any

from mcp import Client


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    """The structured answer of a tool call that must succeed."""
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert isinstance(result.structured_content, dict)
    return dict(result.structured_content)


def error_text(result: Any) -> str:
    """The text of a failed tool call's answer (a ``CallToolResult`` that must be an error)."""
    assert result.is_error, result.content
    block = result.content[0]
    assert block.type == "text"
    return str(block.text)


async def error_of(client: Client, tool: str, **arguments: Any) -> str:
    """The error text of a tool call that must fail."""
    return error_text(await client.call_tool(tool, arguments))
