"""The handshake answers shipped in the package (``local_ai_memory/mcp/handshake.json``): they
are what the SDK answers now, and the loose keys they are found by are given only to requests
the SDK answers the same way whatever client sent them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("mcp")

from mcp.server.mcpserver import MCPServer
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

from local_ai_memory import Memory
from local_ai_memory.mcp import create_server
from local_ai_memory.mcp._handshake import (
    LIST_METHODS,
    MODERN_METHODS,
    SHIPPED,
    envelope,
    exchange,
    generate,
    hello,
    load_shipped,
    loose_key,
    shipped_stamp,
)

REGENERATE = "stale: run `python -m local_ai_memory.mcp._handshake` (after ruff format) and commit handshake.json"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MCPServer[Any]]:
    with Memory.open(tmp_path_factory.mktemp("handshake")) as memory:
        yield create_server(memory, user="alice", offload=False)


@pytest.fixture(scope="module")
def answers() -> dict[str, Any]:
    """What the installed SDK answers the default server (what handshake.json holds where it applies)."""
    return generate(False)


@pytest.mark.parametrize("read_only", [False, True])
def test_the_shipped_answers_are_what_the_sdk_answers_now(read_only: bool) -> None:
    """The answers were generated from the package's modules as they are now; where they were
    generated with the installed SDK, pydantic and Python too, they are exactly its answers.
    Elsewhere they are never used (the stamp differs), which the suite must not fail on: a
    user's Python or pydantic may well be newer than the ones the file was made with."""
    stamp = shipped_stamp({"read_only": read_only})
    shipped = json.loads(SHIPPED.read_text(encoding="utf-8"))
    digest, options = stamp.split(":")[0], stamp.split(":", 3)[3]
    assert any(key.startswith(digest + ":") and key.endswith(":" + options) for key in shipped), REGENERATE
    if stamp not in shipped:
        assert load_shipped({"read_only": read_only}) == {}
        pytest.skip("handshake.json was generated with another SDK, pydantic or Python; it is not used here")
    assert load_shipped({"read_only": read_only}) == generate(read_only), REGENERATE


CLIENTS: list[dict[str, Any]] = [
    {},
    {"clientInfo": {"name": "claude-ai", "version": "0.1.0"}},
    {"clientInfo": {"name": "cursor", "version": "1.2", "title": "Cursor", "websiteUrl": "https://x.example"}},
    {"capabilities": {"roots": {"listChanged": True}}},
    {"capabilities": {"roots": {}, "sampling": {}, "elicitation": {}}},
    {"capabilities": {"sampling": {"tools": {}}, "elicitation": {"form": {}, "url": {}}, "experimental": {"x": {}}}},
    {"capabilities": {"roots": {"listChanged": False}, "experimental": {}}},
]


@pytest.mark.parametrize("version", HANDSHAKE_PROTOCOL_VERSIONS)
@pytest.mark.parametrize("client", range(len(CLIENTS)))
def test_a_plain_initialize_gets_the_shipped_answer_from_the_sdk(
    server: MCPServer[Any], answers: dict[str, Any], version: str, client: int
) -> None:
    request = hello(version, **CLIENTS[client])
    key = loose_key("initialize", request["params"], None)
    assert key is not None
    shipped = answers
    lists = [{"jsonrpc": "2.0", "id": n, "method": method, "params": {}} for n, method in enumerate(LIST_METHODS, 1)]
    replies = exchange(server, [request, {"jsonrpc": "2.0", "method": "notifications/initialized"}, *lists])
    assert replies[0]["result"] == shipped[key]
    negotiated = replies[0]["result"]["protocolVersion"]
    for n, method in enumerate(LIST_METHODS, 1):  # `params: {}` is answered as no params
        list_key = loose_key(method, {}, negotiated)
        assert list_key is not None
        assert replies[n]["result"] == shipped[list_key]


REFUSED: list[tuple[dict[str, Any], bool]] = [  # (params replaced, whether the SDK refuses it)
    ({"clientInfo": {"name": "no version"}}, True),
    ({"clientInfo": {"name": "x", "version": 3}}, True),
    ({"capabilities": {"roots": {"listChanged": "sometimes"}}}, True),
    ({"capabilities": {"sampling": "yes"}}, True),
    ({"capabilities": []}, True),
    ({"protocolVersion": 20251125}, True),
    ({"capabilities": {"tasks": {"requests": {}}}}, False),  # valid, but not judged here
    ({"clientInfo": {"name": "x", "version": "1", "icons": []}}, False),
    ({"_meta": {"progressToken": 1}}, False),
]


@pytest.mark.parametrize("case", range(len(REFUSED)))
def test_a_request_the_loose_key_does_not_judge_waits_for_the_sdk(server: MCPServer[Any], case: int) -> None:
    params, refused = REFUSED[case]
    request = hello("2025-11-25", **params)
    assert loose_key("initialize", request["params"], None) is None
    reply = exchange(server, [request])[0]
    assert ("error" in reply) is refused, reply


ENVELOPES: list[dict[str, Any]] = [
    {},
    {"clientInfo": None},
    {"clientInfo": {"name": "cursor", "version": "1.2", "title": "Cursor"}},
    {"clientCapabilities": {"roots": {"listChanged": True}, "sampling": {"tools": {}}, "elicitation": {"form": {}}}},
]


@pytest.mark.parametrize("version", MODERN_PROTOCOL_VERSIONS)
@pytest.mark.parametrize("client", range(len(ENVELOPES)))
def test_a_plain_2026_request_gets_the_shipped_answer_from_the_sdk(
    server: MCPServer[Any], answers: dict[str, Any], version: str, client: int
) -> None:
    shipped = answers
    params = envelope(version, **ENVELOPES[client])
    asked = [{"jsonrpc": "2.0", "id": n, "method": method, "params": params} for n, method in enumerate(MODERN_METHODS)]
    replies = exchange(server, asked)
    for n, method in enumerate(MODERN_METHODS):
        key = loose_key(method, params, None)
        assert key is not None
        assert replies[n]["result"] == shipped[key]


MODERN_REFUSED: list[tuple[dict[str, Any], bool]] = [  # (envelope parts replaced, whether the SDK refuses it)
    ({"clientCapabilities": None}, True),
    ({"clientInfo": {"name": "no version"}}, True),
    ({"clientCapabilities": {"sampling": "yes"}}, True),
    ({"clientCapabilities": {"extensions": {}}}, False),  # valid, but not judged here
]


@pytest.mark.parametrize("case", range(len(MODERN_REFUSED)))
def test_a_2026_request_the_loose_key_does_not_judge_waits_for_the_sdk(server: MCPServer[Any], case: int) -> None:
    parts, refused = MODERN_REFUSED[case]
    params = envelope(MODERN_PROTOCOL_VERSIONS[-1], **parts)
    assert loose_key("tools/list", params, None) is None
    reply = exchange(server, [{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": params}])[1]
    assert ("error" in reply) is refused, reply
    assert loose_key("tools/list", {**params, "cursor": "x"}, None) is None
    assert loose_key("tools/call", envelope(MODERN_PROTOCOL_VERSIONS[-1]), None) is None


def test_lists_and_repeats_get_loose_keys_only_in_a_negotiated_connection() -> None:
    assert loose_key("tools/list", None, None) is None  # before initialize the SDK refuses a list
    assert loose_key("tools/list", {"cursor": "x"}, "2025-11-25") is None
    assert loose_key("tools/list", {"_meta": {"progressToken": 1}}, "2025-11-25") is None
    assert loose_key("tools/call", None, "2025-11-25") is None
    assert loose_key("initialize", hello("2025-11-25")["params"], "2025-11-25") is None  # a second initialize
    assert loose_key("tools/list", {}, "2025-11-25") == loose_key("tools/list", None, "2025-11-25")


def test_the_stamp_names_the_options_and_the_installed_versions() -> None:
    assert shipped_stamp({"read_only": True}) != shipped_stamp({"read_only": False})
    stamp = shipped_stamp({})
    for name in ("mcp", "mcp_types", "pydantic", "pydantic_core"):
        assert f"{name}=" in stamp
        assert f"{name}=?" not in stamp  # found from its dist-info folder
