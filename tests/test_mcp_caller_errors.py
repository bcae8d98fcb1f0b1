"""A hostile caller over MCP, stdio and HTTP (real server processes): no error answer names a
host path (the data folder, a link's target) or a file name with a user prefix, and the tools
say what a model needs (described parameters, sessions it can list, a version)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from mcp import Client

from local_ai_memory import Memory, MemoryConfig, __version__
from local_ai_memory.integration import parse_reference
from local_ai_memory.mcp import hash_api_key

sys.path.insert(0, str(Path(__file__).parent))  # the helpers the MCP test files share
from mcp_support import call, error_of
from test_mcp_http import connect, start_server, stop
from test_mcp_processes import server_params, stdio_client

pytestmark = [pytest.mark.enable_socket, pytest.mark.allow_hosts(["127.0.0.1"])]

CATEGORIES = "knowledge,projects"


def hostile_folder(base: Path) -> tuple[Path, Path, str]:
    """A data folder where alice has a note and a session, bob a note and a stored tool output,
    and alice's folder holds links: one to bob's note, one out of the root, and a category
    folder linked out. Returns the root, the outside folder and bob's result id."""
    root, outside = base / "data", base / "outside"
    outside.mkdir()
    (outside / "alice_o.md").write_text("outside", encoding="utf-8")
    config = MemoryConfig(runtime_data_dir=root, categories=CATEGORIES.split(","))
    with Memory(config) as memory:
        memory.knowledge.write_note("alice", "mine", "# Mine\n\nalpha")
        memory.knowledge.write_note("bob", "secret", "# Bob\n\nzebra")
        memory.session("alice", "s1").update_state({"task": "x"})
        reference = parse_reference(memory.session("bob", "b1").externalize("grep", "zebra\n" * 3000))
        assert reference is not None
    notes = root / "memory_data"
    (notes / "knowledge" / "alice_link.md").symlink_to(notes / "knowledge" / "bob_secret.md")
    (notes / "knowledge" / "alice_out.md").symlink_to(outside / "alice_o.md")
    (notes / "projects").symlink_to(outside, target_is_directory=True)
    return root, outside, reference.result_id


def hostile_calls(root: Path, result_id: str) -> list[tuple[str, dict[str, Any]]]:
    """Tool calls a hostile or confused model makes: escapes, host paths, other users' names,
    links, hostile characters, each through every tool that takes an id, a session or a result."""
    ids = [
        "/etc/passwd",
        "../x",
        "knowledge/../../x",
        "knowledge/alice_mine.md",
        "knowledge/bob_secret.md",
        "knowledge/link.md",
        "knowledge/out.md",
        "projects/o.md",
        "nocat/x",
        "a\x00b",
        "",
        "knowledge/",
        "knowledge/x\u202e.md",
        "C:\\x",
        "\\\\srv\\share",
        "knowledge/" + "a" * 300,
        str(root / "memory_data" / "knowledge" / "bob_secret.md"),
        str(root / "memory_data" / "knowledge") + "/mine.md",
    ]
    sessions = ["../x", "b1", "nope", "a/b", "\x00", "s" * 300, str(root)]
    calls: list[tuple[str, dict[str, Any]]] = []
    for note in ids:
        calls += [
            ("read_note", {"id": note}),
            ("write_note", {"id": note, "text": "pwned", "expected_hash": "sha256:0"}),
            ("edit_note", {"id": note, "old": "alpha", "new": "beta"}),
            ("delete_note", {"id": note, "expected_hash": "sha256:0"}),
        ]
    for session in sessions:
        calls += [
            ("read_session", {"session": session}),
            ("patch_session", {"session": session, "working_memory": "x", "expected_hash": "sha256:0"}),
            ("load_tool_result", {"session": session, "result_id": result_id}),
        ]
    for result in ["../../x", result_id, "r" * 200, str(root)]:
        calls.append(("load_tool_result", {"session": "s1", "result_id": result}))
    calls.append(("write_note", {"id": "knowledge/mine.md", "text": "x", "expected_hash": "sha256:0"}))
    return calls


def leaks(answer: str, arguments: dict[str, Any], hidden: list[str]) -> list[str]:
    """What ``answer`` discloses that the caller did not send: a host path or a user's file prefix."""
    sent = json.dumps(arguments, ensure_ascii=False) + "".join(str(value) for value in arguments.values())
    found = [path for path in hidden if path in answer]
    found += [prefix for prefix in ("alice_", "bob_") if prefix in answer and prefix not in sent]
    return found


def hidden_paths(root: Path, outside: Path) -> list[str]:
    return sorted({str(root), os.path.realpath(root), str(outside), os.path.realpath(outside)})


async def assert_no_leak(client: Client, root: Path, outside: Path, result_id: str) -> int:
    """Run every hostile call through ``client``; each must fail, and disclose nothing."""
    hidden = hidden_paths(root, outside)
    failed = 0
    for tool, arguments in hostile_calls(root, result_id):
        result = await client.call_tool(tool, arguments)
        text = " ".join(getattr(block, "text", "") for block in result.content)
        assert not leaks(text, arguments, hidden), (tool, arguments, text)
        failed += result.is_error
    for uri in ["memory://notes/knowledge/link.md", "memory://notes/knowledge/out.md", "memory://notes/projects/o.md"]:
        with pytest.raises(Exception) as raised:
            await client.read_resource(uri)
        assert not leaks(str(raised.value), {"uri": uri}, hidden), (uri, str(raised.value))
    return failed


@pytest.fixture
def folder(tmp_path: Path) -> tuple[Path, Path, str]:
    return hostile_folder(tmp_path)


async def test_a_hostile_caller_over_stdio_learns_no_host_path(folder: tuple[Path, Path, str]) -> None:
    root, outside, result_id = folder
    params = server_params(root, "alice", env={"LOCAL_AI_MEMORY_CATEGORIES": CATEGORIES})
    async with stdio_client(params) as client:
        assert await assert_no_leak(client, root, outside, result_id) > 50
        message = await error_of(client, "read_note", id="knowledge/nope.md")
        assert "knowledge/nope.md" in message  # the id the model sent, not the file name behind it
        assert "outside your notes" in await error_of(client, "read_note", id="knowledge/link.md")


@pytest.fixture
def http_server(folder: tuple[Path, Path, str]) -> Iterator[str]:
    root = folder[0]
    keys = root.parent / "keys.json"
    entries = [
        {"hash": hash_api_key("alice"), "subject": "alice", "scopes": ["memory:read", "memory:write"]},
        {"hash": hash_api_key("root"), "subject": "root", "scopes": ["memory:admin"]},
    ]
    keys.write_text(json.dumps({"keys": entries}), encoding="utf-8")
    os.environ["LOCAL_AI_MEMORY_CATEGORIES"] = CATEGORIES
    try:
        url, process = start_server(root, "--keys-file", str(keys))
    finally:
        del os.environ["LOCAL_AI_MEMORY_CATEGORIES"]
    try:
        yield url
    finally:
        stop(process)


async def test_a_hostile_caller_over_http_learns_no_host_path(folder: tuple[Path, Path, str], http_server: str) -> None:
    root, outside, result_id = folder
    async with connect(http_server, "alice") as client:
        assert await assert_no_leak(client, root, outside, result_id) > 50
        assert "/etc/x.md" not in await error_of(client, "read_note", id="/etc/x.md", user="bob")
    async with connect(http_server, "root") as client:  # an admin acting for alice: alice's ids, no more
        text = await error_of(client, "read_note", id="knowledge/nope.md", user="alice")
        assert "alice_" not in text
        assert "knowledge/nope.md" in text


async def test_tools_a_model_can_use_without_guessing(folder: tuple[Path, Path, str], http_server: str) -> None:
    root = folder[0]
    async with connect(http_server, "root") as client:  # auth: an admin may name a user, so `user` is offered
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        for tool in tools.values():
            properties = tool.input_schema["properties"]
            assert "act for this user" in properties["user"]["description"], tool.name
            assert "list_sessions" in properties.get("session", {"description": "list_sessions"})["description"]
            assert "user" in tool.input_schema["properties"], tool.name
        assert (await call(client, "list_sessions", user="alice"))["sessions"] == ["s1"]
        assert (await call(client, "list_sessions", user="bob"))["sessions"] == ["b1"]
    params = server_params(root, "alice", env={"LOCAL_AI_MEMORY_CATEGORIES": CATEGORIES})
    async with stdio_client(params) as client:
        assert client.server_info is not None
        assert client.server_info.version == __version__
        for tool in (await client.list_tools()).tools:  # one local user: no `user` to get wrong
            assert "user" not in tool.input_schema["properties"], tool.name
            session = tool.input_schema["properties"].get("session")
            assert session is None or "list_sessions" in session["description"]
        assert (await call(client, "list_sessions"))["sessions"] == ["s1"]
        assert (await call(client, "read_session", session="s1"))["state"] == {"task": "x"}
        message = await error_of(client, "read_session", session="s2")
        assert "no session 's2'" in message
        assert "list_sessions" in message
        await call(client, "patch_session", session="s2", state={"a": 1})  # writing starts a session
        assert (await call(client, "list_sessions"))["sessions"] == ["s1", "s2"]
