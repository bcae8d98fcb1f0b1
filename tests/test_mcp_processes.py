"""The MCP server as real processes: a stdio session through ``local-ai-memory mcp``, and two
server processes on one data folder (or one PostgreSQL database) racing edits of one note."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")

from mcp import Client, StdioServerParameters
from mcp.types import TextResourceContents

from local_ai_memory import Memory, MemoryConfig, note_hash

sys.path.insert(0, str(Path(__file__).parent))  # the helpers the MCP test files share
from mcp_support import call, error_text

SOURCE = str(Path(__file__).resolve().parent.parent / "src")


def server_params(root: Path, user: str, *extra: str, env: dict[str, str] | None = None) -> StdioServerParameters:
    """``local-ai-memory mcp`` over ``root`` as ``user``, started by this interpreter with our sources."""
    path = os.pathsep.join([SOURCE, *(p for p in sys.path if p)])
    return StdioServerParameters(
        command=sys.executable,
        args=["-c", "from local_ai_memory.cli import main; main()", "mcp", "-d", str(root), "--create", *extra],
        env={
            "PYTHONPATH": path,
            "LOCAL_AI_MEMORY_USER": user,
            "HOME": str(root / "home"),  # whatever the server might write outside its data folder lands here
            **(env or {}),
        },
    )


@asynccontextmanager
async def stdio_client(params: StdioServerParameters, mode: str = "auto") -> AsyncIterator[Client]:
    async with Client(params, mode=mode, read_timeout_seconds=60) as client:
        yield client


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_stdio_session_through_the_command(tmp_path: Path, mode: str) -> None:
    """The SDK's own client against the command: the handshake (``initialize``, or the
    2026-07-28 discovery), the lists, tool calls and a resource, as Claude Desktop or Cursor would."""
    async with stdio_client(server_params(tmp_path, "alice"), mode) as client:
        assert client.server_info is not None
        assert client.server_info.name == "local-ai-memory"
        assert "memory" in (client.instructions or "")
        capabilities = client.server_capabilities
        assert capabilities.tools is not None
        assert capabilities.resources is not None
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert "write_note" in tools
        assert tools["search"].output_schema is not None  # typed results
        templates = {t.uri_template for t in (await client.list_resource_templates()).resource_templates}
        assert "memory://notes/{category}/{name}" in templates
        written = await call(client, "write_note", id="deploy", text="# Deploy\n\nblue-green via the script")
        assert written["id"] == "knowledge/deploy.md"
        hits = (await call(client, "search", query="blue-green script"))["hits"]
        assert [hit["id"] for hit in hits] == ["knowledge/deploy.md"]
        await call(client, "patch_session", session="s1", state={"task": "ship"})
        note = (await client.read_resource("memory://notes/knowledge/deploy.md")).contents[0]
        assert isinstance(note, TextResourceContents)
        assert note.text.startswith("# Deploy")
        failed = await client.call_tool("read_note", {"id": "knowledge/missing.md"})
        assert "missing" in error_text(failed)  # the library's error, shown to the model
    with Memory.open(tmp_path) as memory:  # what the server wrote is the user's, on disk
        assert memory.knowledge.read_note("alice", "deploy").startswith("# Deploy")
        assert memory.session("alice", "s1").get_state() == {"task": "ship"}
    assert not (tmp_path / "home").exists()  # nothing outside the data folder (no cache of answers)


async def test_the_read_only_command_lists_only_read_tools(tmp_path: Path) -> None:
    async with stdio_client(server_params(tmp_path, "alice", "--read-only")) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
    assert "search" in names
    assert not names & {"write_note", "edit_note", "delete_note", "patch_session"}


def test_the_server_modules_import_no_runtime_engine_a_tool_call_does_not_need() -> None:
    """The stdio server's modules (SDK included) leave the runtime's compressor and checkpoint log
    unimported: they are about 60 ms of a start, and the MCP server needed only two naming
    helpers from ``local_ai_memory.integration``, which now loads each name on first use."""
    probe = (
        "import sys, json\n"
        "import local_ai_memory.mcp._serve\n"
        "from local_ai_memory.integration import collector_paused, note_filename, validate_name\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('local_ai_memory._runtime.'))))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SOURCE, *(p for p in sys.path if p)])}
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    loaded = set(json.loads(done.stdout.strip().splitlines()[-1]))
    assert not loaded & {"local_ai_memory._runtime.compressor", "local_ai_memory._runtime.checkpoint_log"}, loaded
    from local_ai_memory import integration  # every name still resolves, modules included

    assert all(getattr(integration, name) is not None for name in integration.__all__)
    assert integration.checkpoint_log.__name__ == "local_ai_memory._runtime.checkpoint_log"


async def append_lines(client: Client, tag: str, count: int) -> int:
    """Append ``count`` lines to the shared note, each by read + conditional write, retrying on
    conflict (what a model does when told the note changed); return how many conflicts it met."""
    conflicts = 0
    for n in range(count):
        while True:
            read = await call(client, "read_note", id="knowledge/shared.md")
            text = read["text"] + f"{tag} {n}\n"
            result = await client.call_tool(
                "write_note", {"id": "knowledge/shared.md", "text": text, "expected_hash": read["hash"]}
            )
            if not result.is_error:
                break
            message = result.content[0].text if result.content[0].type == "text" else ""
            assert "conflict" in message
            assert "current_hash=sha256:" in message  # the loser is told why, with the hash to retry from
            conflicts += 1
    return conflicts


def backend_of(root: Path, backend: str, request: pytest.FixtureRequest) -> tuple[dict[str, str], MemoryConfig]:
    """The server environment and the test's own configuration for one data folder (``files``)
    or one PostgreSQL schema (``postgres``, from the suite's embedded server)."""
    if backend == "files":
        return {}, MemoryConfig(runtime_data_dir=root)
    url = request.getfixturevalue("postgres_url")
    schema = request.getfixturevalue("postgres_schema")
    env = {"LOCAL_AI_MEMORY_DATABASE_URL": url, "LOCAL_AI_MEMORY_DATABASE_SCHEMA": schema}
    return env, MemoryConfig(runtime_data_dir=root, database_url=url, database_schema=schema)


@pytest.mark.parametrize("backend", ["files", "postgres"])
async def test_two_server_processes_racing_edits_lose_no_write(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    env, config = backend_of(tmp_path, backend, request)
    with Memory(config) as memory:
        memory.knowledge.write_note("alice", "shared", "# Shared\n")
    count = 12
    conflicts: list[int] = []
    async with (
        stdio_client(server_params(tmp_path, "alice", env=env)) as first,
        stdio_client(server_params(tmp_path, "alice", env=env)) as second,
    ):

        async def run(client: Client, tag: str) -> None:
            conflicts.append(await append_lines(client, tag, count))

        async with anyio.create_task_group() as group:
            group.start_soon(run, first, "a")
            group.start_soon(run, second, "b")

        # one stale hash, two writers: exactly one wins, the other is told the winner's hash
        base = await call(first, "read_note", id="knowledge/shared.md")
        outcomes: list[Any] = []

        async def race(client: Client, text: str) -> None:
            outcomes.append(
                await client.call_tool(
                    "write_note", {"id": "knowledge/shared.md", "text": text, "expected_hash": base["hash"]}
                )
            )

        async with anyio.create_task_group() as group:
            group.start_soon(race, first, base["text"] + "A\n")
            group.start_soon(race, second, base["text"] + "B\n")
    assert sorted(result.is_error for result in outcomes) == [False, True]
    with Memory(config) as memory:
        final = memory.knowledge.read_note("alice", "shared")
    lines = final.splitlines()
    for tag in "ab":
        assert [line for line in lines if line.startswith(f"{tag} ")] == [f"{tag} {n}" for n in range(count)]
    loser = next(result for result in outcomes if result.is_error)
    assert note_hash(final) in loser.content[0].text


SHARED = "knowledge/shared.md"


async def insert_lines(client: Client, tag: str, count: int) -> None:
    """Insert ``count`` lines before the note's ``END`` line, each by read + conditional
    ``edit_note``, re-reading on conflict (as a model told the note changed would)."""
    for n in range(count):
        while True:
            read = await call(client, "read_note", id=SHARED)
            result = await client.call_tool(
                "edit_note", {"id": SHARED, "old": "END\n", "new": f"{tag} {n}\nEND\n", "expected_hash": read["hash"]}
            )
            if not result.is_error:
                break
            assert "conflict" in error_text(result)


@pytest.mark.parametrize("backend", ["files", "postgres"])
async def test_two_server_processes_racing_conditional_edits_and_deletes(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    env, config = backend_of(tmp_path, backend, request)
    with Memory(config) as memory:
        memory.knowledge.write_note("alice", "shared", "# Shared\nEND\n")
    count = 10
    async with (
        stdio_client(server_params(tmp_path, "alice", env=env)) as first,
        stdio_client(server_params(tmp_path, "alice", env=env)) as second,
    ):
        async with anyio.create_task_group() as group:  # interleaved conditional edits: none lost
            group.start_soon(insert_lines, first, "a", count)
            group.start_soon(insert_lines, second, "b", count)
        lines = (await call(first, "read_note", id=SHARED))["text"].splitlines()
        for tag in "ab":
            assert [line for line in lines if line.startswith(f"{tag} ")] == [f"{tag} {n}" for n in range(count)]
        assert lines[-1] == "END"

        # One stale hash, two processes, each pair of operations: exactly one wins, and the
        # loser's error names the hash the note has now (or that there is no note any more).
        pairs = [("edit", "edit"), ("edit", "delete"), ("delete", "edit"), ("delete", "delete")] * 2
        for round_, (one, two) in enumerate(pairs):
            await call(first, "write_note", id=SHARED, text=f"# Shared\nround {round_}\n")
            base = await call(second, "read_note", id=SHARED)
            outcomes: dict[str, Any] = {}

            async def act(client: Client, tool: str, arguments: dict[str, Any], tag: str, into: dict[str, Any]) -> None:
                into[tag] = await client.call_tool(tool, arguments)

            async with anyio.create_task_group() as group:
                for client, kind, tag in ((first, one, "first"), (second, two, "second")):
                    arguments: dict[str, Any] = {"id": SHARED, "expected_hash": base["hash"]}
                    if kind == "edit":
                        arguments |= {"old": f"round {round_}", "new": f"round {round_} by {tag}"}
                    group.start_soon(act, client, f"{kind}_note", arguments, tag, outcomes)
            winners = [tag for tag, result in outcomes.items() if not result.is_error]
            assert len(winners) == 1, (one, two, {tag: r.content for tag, r in outcomes.items()})
            (winner,) = winners
            loser = outcomes["second" if winner == "first" else "first"]
            message = error_text(loser)
            assert "conflict" in message
            kind = one if winner == "first" else two
            with Memory(config) as memory:
                if kind == "delete":
                    assert memory.knowledge.note_info("alice", "shared") is None
                    assert "current_hash=none" in message
                else:
                    text = memory.knowledge.read_note("alice", "shared")
                    assert text == f"# Shared\nround {round_} by {winner}\n"  # the winner's edit, alone
                    assert f"current_hash={note_hash(text)}" in message
