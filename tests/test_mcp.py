"""The MCP server through the SDK's own in-process client, in the current protocol (2026-07-28,
no MCP session) and the legacy one (initialize handshake), over files and over PostgreSQL."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

pytest.importorskip("mcp")

from mcp import Client, MCPError
from mcp.types import TextResourceContents

from local_ai_memory import ConfigError, Memory, MemoryConfig, note_hash
from local_ai_memory.integration import parse_reference
from local_ai_memory.mcp import MAX_CHARS, ApiKeyVerifier, create_server, hash_api_key, is_loopback, new_api_key

sys.path.insert(0, str(Path(__file__).parent))  # the helpers the MCP test files share
from mcp_support import call, error_of

READ_TOOLS = {"search", "recall", "read_note", "list_notes", "read_session", "list_sessions", "load_tool_result"}
WRITE_TOOLS = {"write_note", "edit_note", "delete_note", "patch_session"}


@pytest.fixture(params=["files", "postgres"])
def memory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Memory]:
    if request.param == "files":
        config = MemoryConfig(runtime_data_dir=tmp_path)
    else:
        url = request.getfixturevalue("postgres_url")
        schema = request.getfixturevalue("postgres_schema")
        config = MemoryConfig(runtime_data_dir=tmp_path, database_url=url, database_schema=schema)
    with Memory(config) as opened:
        yield opened


@pytest.fixture(params=["2026-07-28", "legacy"])
def mode(request: pytest.FixtureRequest) -> str:
    """The protocol: current (no MCP session) or legacy (initialize handshake)."""
    return str(request.param)


async def test_the_tool_list_is_small_annotated_and_typed(mode: str, memory: Memory) -> None:
    async with Client(create_server(memory, user="alice"), mode=mode) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert set(tools) == READ_TOOLS | WRITE_TOOLS
        for name, tool in tools.items():
            assert tool.annotations is not None
            assert tool.annotations.read_only_hint is (name in READ_TOOLS)
            assert tool.output_schema is not None
            assert tool.output_schema["type"] == "object"
            assert tool.description
        assert tools["delete_note"].annotations is not None
        assert tools["delete_note"].annotations.destructive_hint
        assert tools["search"].annotations is not None
        assert not tools["search"].annotations.destructive_hint
        size = len(json.dumps([tool.model_dump(mode="json", exclude_none=True) for tool in tools.values()]))
        assert size < 8000  # characters; the benchmark counts tokens (bench_mcp.py)


async def test_read_only_mode_exposes_only_the_read_tools(memory: Memory) -> None:
    memory.knowledge.write_note("alice", "deploy", "# Deploy\nblue green")
    async with Client(create_server(memory, user="alice", read_only=True)) as client:
        assert {tool.name for tool in (await client.list_tools()).tools} == READ_TOOLS
        assert "Unknown tool" in await error_of(client, "write_note", id="knowledge/x.md", text="y")
        assert (await call(client, "read_note", id="knowledge/deploy.md"))["text"] == "# Deploy\nblue green"


async def test_notes_write_search_read_edit_delete(mode: str, memory: Memory) -> None:
    async with Client(create_server(memory, user="alice"), mode=mode) as client:
        written = await call(client, "write_note", id="knowledge/deploy", text="# Deploy\n\nUse the blue-green script.")
        assert written == {"id": "knowledge/deploy.md", "hash": note_hash("# Deploy\n\nUse the blue-green script.")}
        assert memory.knowledge.read_note("alice", "deploy") == "# Deploy\n\nUse the blue-green script."  # verbatim

        hits = (await call(client, "search", query="blue-green script"))["hits"]
        assert hits[0]["id"] == "knowledge/deploy.md"
        assert hits[0]["title"] == "Deploy"

        read = await call(client, "read_note", id="knowledge/deploy.md")
        assert read["text"].endswith("script.")
        assert read["next_offset"] is None
        assert read["hash"] == written["hash"]

        edited = await call(client, "edit_note", id="knowledge/deploy.md", old="blue-green", new="canary")
        assert memory.knowledge.read_note("alice", "deploy") == "# Deploy\n\nUse the canary script."
        assert edited["hash"] == note_hash("# Deploy\n\nUse the canary script.")
        absent = await error_of(client, "edit_note", id="knowledge/deploy.md", old="zzz", new="y")
        assert "does not occur" in absent
        await call(client, "write_note", id="knowledge/twice.md", text="a b a")
        assert "occurs 2 times" in await error_of(client, "edit_note", id="knowledge/twice.md", old="a", new="c")
        assert memory.knowledge.read_note("alice", "twice") == "a b a"

        # a stale hash is refused with the current one, so the model can re-read and retry
        message = await error_of(
            client, "edit_note", id="knowledge/deploy.md", old="canary", new="x", expected_hash=written["hash"]
        )
        assert "conflict" in message
        assert edited["hash"] in message
        assert memory.knowledge.read_note("alice", "deploy").endswith("canary script.")
        message = await error_of(client, "write_note", id="knowledge/deploy.md", text="new", expected_hash="")
        assert edited["hash"] in message  # "" means create only
        again = await call(client, "write_note", id="knowledge/deploy.md", text="v2", expected_hash=edited["hash"])
        assert again["hash"] == note_hash("v2")

        stale = await error_of(client, "delete_note", id="knowledge/deploy.md", expected_hash=edited["hash"])
        assert again["hash"] in stale  # a conditional delete of a changed note is refused, with the hash
        assert memory.knowledge.read_note("alice", "deploy") == "v2"
        deleted = await call(client, "delete_note", id="knowledge/deploy.md", expected_hash=again["hash"])
        assert deleted == {"id": "knowledge/deploy.md", "deleted": True}
        await call(client, "write_note", id="knowledge/deploy.md", text="v3")
        assert (await call(client, "delete_note", id="knowledge/deploy.md")) == {
            "id": "knowledge/deploy.md",
            "deleted": True,
        }
        assert (await call(client, "delete_note", id="knowledge/deploy.md"))["deleted"] is False
        assert "no memory file" in await error_of(client, "read_note", id="knowledge/deploy.md")


async def test_answers_are_capped_and_say_where_the_next_page_starts(mode: str, memory: Memory) -> None:
    async with Client(create_server(memory, user="alice"), mode=mode) as client:
        long_text = "".join(f"line {n:05d}\n" for n in range(3000))  # 33,000 characters
        memory.knowledge.write_note("alice", "big", long_text)
        pages: list[str] = []
        offset: int | None = 0
        while offset is not None:
            page = await call(client, "read_note", id="knowledge/big.md", offset=offset, limit=100_000)
            assert len(page["text"]) <= MAX_CHARS
            assert page["total_chars"] == len(long_text)
            pages.append(page["text"])
            offset = page["next_offset"]
        assert "".join(pages) == long_text
        assert len(pages) == 5

        for n in range(7):
            memory.knowledge.write_note("alice", f"n{n}", f"note {n}")
        seen: list[str] = []
        cursor: int | None = 0
        while cursor is not None:
            listed = await call(client, "list_notes", cursor=cursor, limit=3)
            seen += listed["ids"]
            cursor = listed["next_cursor"]
        assert sorted(seen) == sorted(["knowledge/big.md", *(f"knowledge/n{n}.md" for n in range(7))])

        recalled = await call(client, "recall", query="line 00042", max_tokens=300)
        assert recalled["tokens"] <= 300
        assert recalled["ids"] == ["knowledge/big.md"]


async def test_hostile_ids_and_users_are_refused(mode: str, memory: Memory) -> None:
    async with Client(create_server(memory, user="alice"), mode=mode) as client:
        for bad in ("../../etc/passwd", "knowledge/../x.md", "/etc/passwd", "knowledge/a\x00b.md", "nosuchcat/x.md"):
            await error_of(client, "write_note", id=bad, text="x")
            await error_of(client, "read_note", id=bad)
        assert "memory:admin" in await error_of(client, "read_note", id="knowledge/x.md", user="bob")
        assert "memory:admin" in await error_of(client, "read_session", session="s1", user="bob")
        assert memory.knowledge.notes("alice") == []


async def test_a_session_is_named_in_every_call(mode: str, memory: Memory) -> None:
    async with Client(create_server(memory, user="alice"), mode=mode) as client:
        out = await call(client, "patch_session", session="s1", state={"task": "ship", "opts": {"a": 1}})
        assert out["state"] == {"task": "ship", "opts": {"a": 1}}
        out = await call(client, "patch_session", session="s1", state={"opts": {"b": 2}, "task": None})
        assert out["state"] == {"opts": {"a": 1, "b": 2}}  # JSON Merge Patch: null deletes, objects merge
        assert memory.session("alice", "s1").get_state() == {"opts": {"a": 1, "b": 2}}
        assert "no session 's2'" in await error_of(client, "read_session", session="s2")  # another session, untouched

        first = await call(client, "patch_session", session="s1", working_memory="## Facts\n- one")
        seen = first["working_memory_hash"]
        memory.session("alice", "s1").update_working_memory("## Facts\n- changed elsewhere")
        message = await error_of(client, "patch_session", session="s1", working_memory="mine", expected_hash=seen)
        assert "conflict" in message
        assert note_hash("## Facts\n- changed elsewhere") in message
        fresh = (await call(client, "read_session", session="s1"))["working_memory_hash"]
        done = await call(client, "patch_session", session="s1", working_memory="mine", expected_hash=fresh)
        assert done["working_memory"] == "mine"


async def test_load_tool_result_pages_a_stored_output(mode: str, memory: Memory) -> None:
    async with Client(create_server(memory, user="alice"), mode=mode) as client:
        output = "".join(f"row {n}\n" for n in range(4000))
        reference = parse_reference(memory.session("alice", "s1").externalize("grep", output))
        assert reference is not None
        result_id = reference.result_id
        assert result_id in (await call(client, "read_session", session="s1"))["tool_results"]
        parts: list[str] = []
        offset: int | None = 0
        while offset is not None:
            page = await call(client, "load_tool_result", session="s1", result_id=result_id, offset=offset)
            assert page["tool"] == "grep"
            assert len(page["content"]) <= MAX_CHARS
            parts.append(page["content"])
            offset = page["next_offset"]
        assert "".join(parts) == output
        # scope-checked: another session (or user) does not find it
        await error_of(client, "load_tool_result", session="s2", result_id=result_id)


async def test_resources_are_the_callers_own(mode: str, memory: Memory) -> None:
    async with Client(create_server(memory, user="alice"), mode=mode) as client:
        memory.knowledge.write_note("alice", "deploy", "# Deploy")
        memory.knowledge.write_note("bob", "secret", "# Bob's")
        session = memory.session("alice", "s1")
        session.update_state({"task": "ship"})
        session.update_working_memory("## WM")
        reference = parse_reference(session.externalize("grep", "x" * 20_000))
        assert reference is not None

        templates = {t.uri_template for t in (await client.list_resource_templates()).resource_templates}
        assert "memory://notes/{category}/{name}" in templates
        assert "memory://sessions/{session}/tool-results/{result_id}" in templates

        async def text(uri: str) -> str:
            contents = (await client.read_resource(uri)).contents
            assert len(contents) == 1
            assert isinstance(contents[0], TextResourceContents)
            return contents[0].text

        assert await text("memory://notes/knowledge/deploy.md") == "# Deploy"
        assert json.loads(await text("memory://sessions/s1/state")) == {"task": "ship"}
        assert await text("memory://sessions/s1/working-memory") == "## WM"
        assert json.loads(await text("memory://sessions/s1/checkpoints")) == []
        assert (await text(f"memory://sessions/s1/tool-results/{reference.result_id}")).count("x") >= 1000
        with pytest.raises(Exception, match="no memory file"):
            await client.read_resource("memory://notes/knowledge/secret.md")  # bob's, not alice's


async def test_a_note_write_reaches_resource_listeners(tmp_path: Path) -> None:
    with Memory.open(tmp_path) as memory:
        async with Client(create_server(memory, user="alice"), mode="2026-07-28") as client:
            uri = "memory://notes/knowledge/deploy.md"
            async with client.listen(resource_subscriptions=[uri]) as events:
                await call(client, "write_note", id="knowledge/deploy.md", text="# Deploy")
                with anyio.fail_after(10):
                    event = await events.__anext__()
            assert getattr(event, "uri", None) == uri


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")  # legacy on purpose
async def test_legacy_clients_are_told_there_is_no_resources_subscribe(tmp_path: Path) -> None:
    """``resources/subscribe`` (protocols before 2026-07-28) would need the SDK's private low-level
    server: it is not served, and an older client learns it from the capabilities, not by silence."""
    with Memory.open(tmp_path) as memory:
        async with Client(create_server(memory, user="alice"), mode="legacy") as client:
            resources = client.server_capabilities.resources
            assert resources is not None
            assert not resources.subscribe
            with pytest.raises(MCPError, match=r"[Mm]ethod not found"):
                await client.subscribe_resource("memory://notes/knowledge/deploy.md")
            await call(client, "write_note", id="knowledge/deploy.md", text="# Deploy")  # still served


async def test_the_api_key_file_holds_hashes_and_is_reread(tmp_path: Path) -> None:
    keys = tmp_path / "keys.json"
    alice_key, bob_key = new_api_key(), new_api_key()
    entry = {"hash": hash_api_key(alice_key), "subject": "alice", "scopes": ["memory:read"]}
    keys.write_text(json.dumps({"keys": [entry]}), encoding="utf-8")
    verifier = ApiKeyVerifier(keys)
    found = await verifier.verify_token(alice_key)
    assert found is not None
    assert (found.subject, found.scopes) == ("alice", ["memory:read"])
    assert await verifier.verify_token(bob_key) is None
    assert alice_key not in keys.read_text(encoding="utf-8")

    bob = {"hash": hash_api_key(bob_key), "subject": "bob", "scopes": ["memory:admin"]}
    keys.write_text(json.dumps({"keys": [bob]}), encoding="utf-8")  # alice revoked, bob added
    os.utime(keys, ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))
    assert await verifier.verify_token(alice_key) is None
    found = await verifier.verify_token(bob_key)
    assert found is not None
    assert found.subject == "bob"

    keys.write_text("{not json", encoding="utf-8")  # a broken edit keeps the last good keys
    os.utime(keys, ns=(time.time_ns() + 2 * 10**9, time.time_ns() + 2 * 10**9))
    assert await verifier.verify_token(bob_key) is not None
    for bad in (
        "{not json",
        '{"keys": [{"hash": "md5:x", "subject": "a", "scopes": []}]}',
        '{"keys": [{"hash": "' + hash_api_key("k") + '", "subject": "a", "scopes": ["root"]}]}',
    ):
        keys.write_text(bad, encoding="utf-8")
        with pytest.raises(ConfigError):
            ApiKeyVerifier(keys)


def test_loopback_addresses() -> None:
    assert all(is_loopback(host) for host in ("127.0.0.1", "127.8.0.1", "::1", "[::1]", "localhost"))
    assert not any(is_loopback(host) for host in ("0.0.0.0", "::", "192.168.1.2", "example.org", ""))


async def test_recall_finds_what_a_finished_session_said(mode: str, memory: Memory) -> None:
    fact = "My passport expires on 14 March 2029, renew it in the autumn before."
    memory.session("alice", "s1").finish_run([{"role": "user", "content": fact}])
    for n in range(2, 5):
        memory.session("alice", f"s{n}").finish_run([{"role": "user", "content": f"Groceries for week {n}."}])
    memory.session("bob", "s1").finish_run([{"role": "user", "content": "My passport expires in 2031."}])
    async with Client(create_server(memory, user="alice"), mode=mode) as client:
        recalled = await call(client, "recall", query="when does my passport expire?", max_tokens=200)
        log = await call(client, "read_note", id=recalled["ids"][0])  # an id recall gives reads back
    assert fact in recalled["text"]
    assert recalled["ids"][0] == "conversations/s1.md"
    assert fact in log["text"]
    assert "2031" not in recalled["text"]
    assert 0 < recalled["tokens"] <= 200
