"""What the MCP server costs a model's context and an agent's clock, beside its peers.

Prints, in one run:

* the token size (cl100k, the project's offline :class:`~local_ai_memory.TokenCounter`) of the
  whole tool list a client receives (``tools/list``: names, descriptions, input and output
  schemas, annotations), ours (default and ``--read-only``) beside the reference
  ``@modelcontextprotocol/server-memory`` and ``basic-memory`` when they are installed in a
  scratch place (``npm install --prefix /tmp/peers @modelcontextprotocol/server-memory``;
  ``python -m venv /tmp/peer-venv && /tmp/peer-venv/bin/pip install basic-memory``), else
  "not installed";
* spawn to the first ``search`` answered (over stdio, the official SDK client starting a real
  process, as Claude Desktop or Cursor would: spawn, ``initialize``, ``tools/list``, one
  ``search``), of ``local-ai-memory mcp`` beside a plain SDK server with one ``search`` tool
  (written here: the floor on this SDK), runs interleaved, median of ``--starts``, as a ratio;
* the per-call latency (p50, p95) of ``search`` and ``load_tool_result`` over stdio, on a data
  folder of ``--notes`` notes (the sample corpus of the standard library, cut into that many),
  beside the SDK's one-tool server answering a ping over the same kind of pipe (the floor),
  and the CPU per search call of the server and of the client beside the SDK's one-tool server
  answering a ping (CPU, unlike wall time, does not grow with the machine's load).

Targets: tool list under 2,000 tokens, search p50 under 5 ms at 2,000 notes (issue 22); spawn to
the first search answered within 1.3x of the plain SDK server (issue 42).

Run: ``.venv/bin/python benchmarks/bench_mcp.py [--notes 2000] [--calls 200] [--starts 7]``
(``--only-start`` prints the start figures alone).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

from local_ai_memory import Memory, TokenCounter
from local_ai_memory.integration import note_filename, parse_reference
from local_ai_memory.mcp import create_server
from local_ai_memory.samples import build_corpus

SOURCE = str(Path(__file__).resolve().parent.parent / "src")
MINIMAL_SERVER = """
from mcp.server.mcpserver import MCPServer
server = MCPServer("minimal")
@server.tool()
def ping() -> str:
    return "pong"
server.run()
"""
"""The floor of any server on this SDK: Python, the SDK's import and a stdio handshake."""
PLAIN_SEARCH_SERVER = """
from mcp.server.mcpserver import MCPServer
server = MCPServer("plain")
@server.tool()
def search(query: str, k: int = 5) -> list[str]:
    \"\"\"Search the notes.\"\"\"
    return [query][:k]
server.run()
"""
"""A plain SDK server with one ``search`` tool: what "spawn to the first search answered" costs
on this SDK with no memory behind it."""
PEERS_NPM = Path(os.environ.get("PEERS_NPM", "/tmp/peers"))
PEERS_VENV = Path(os.environ.get("PEERS_VENV", "/tmp/peer-venv"))


def tool_list_tokens(tools: list[Any], counter: TokenCounter) -> int:
    """Tokens of the tool list as the client receives it (the wire JSON of every tool)."""
    wire = [tool.model_dump(mode="json", by_alias=True, exclude_none=True) for tool in tools]
    return counter.count(json.dumps(wire, ensure_ascii=False))


def ours(user: str, root: Path, *extra: str) -> StdioServerParameters:
    """``local-ai-memory mcp`` over ``root`` as ``user``, started by this interpreter with our sources."""
    path = os.pathsep.join([SOURCE, *(p for p in sys.path if p)])
    return StdioServerParameters(
        command=sys.executable,
        args=[
            *("-c", "from local_ai_memory.cli import main; main()"),
            *("mcp", "-d", str(root), "--create", "--user", user, *extra),
        ],
        env={"PYTHONPATH": path},
    )


def peers(scratch: Path) -> dict[str, StdioServerParameters | None]:
    """The peer servers found in their scratch places, ``None`` where absent."""
    npm_bin = PEERS_NPM / "node_modules" / ".bin" / "mcp-server-memory"
    basic = PEERS_VENV / "bin" / "basic-memory"
    return {
        "@modelcontextprotocol/server-memory": StdioServerParameters(
            command=str(npm_bin), env={"MEMORY_FILE_PATH": str(scratch / "graph.jsonl")}
        )
        if npm_bin.exists()
        else None,
        "basic-memory": StdioServerParameters(
            command=str(basic), args=["mcp"], env={"HOME": str(scratch), "BASIC_MEMORY_HOME": str(scratch / "bm")}
        )
        if basic.exists()
        else None,
    }


async def listed_tools(params: StdioServerParameters) -> list[Any]:
    async with Client(params, mode="legacy", read_timeout_seconds=120) as client:
        return list((await client.list_tools()).tools)


async def first_search(params: StdioServerParameters, mode: str = "legacy") -> tuple[float, float]:
    """Seconds from spawning the server to its answer to the first ``search`` call, the way a
    client gets there (``initialize``, ``tools/list``, then the call; closing is not counted),
    and the CPU seconds of the server process over its whole life (counted once it has exited;
    unlike wall time, it hardly grows with the machine's load). ``mode``: the client's protocol
    (``legacy``: the initialize handshake; ``auto``: 2026-07-28)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    begin = time.perf_counter()
    async with Client(params, mode=mode, read_timeout_seconds=120) as client:
        tools = (await client.list_tools()).tools
        assert any(tool.name == "search" for tool in tools), [tool.name for tool in tools]
        result = await client.call_tool("search", {"query": "deploy script"})
        assert not result.is_error, result.content
        answered = time.perf_counter() - begin
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return answered, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


async def start_figures(starts: int) -> None:
    """Print spawn -> first search answered, ours beside the plain SDK server, interleaved runs."""
    print("== spawn -> first `search` answered over stdio (SDK client, real process) ==")
    plain = StdioServerParameters(command=sys.executable, args=["-c", PLAIN_SEARCH_SERVER])
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        with Memory.open(root) as memory:  # a user's folder: a few notes, indexed
            for n in range(20):
                memory.knowledge.write_note("bench", f"note-{n}", f"# Note {n}\n\ndeploy script step {n}\n")
        await first_search(plain)  # warm the file cache and write the bytecode (both import the SDK)
        await first_search(ours("bench", root))
        figures: dict[str, list[tuple[float, float]]] = {"ours": [], "plain": [], "ours 2026": [], "plain 2026": []}
        for _ in range(starts):  # interleaved: a change in the machine's load falls on both alike
            figures["ours"].append(await first_search(ours("bench", root)))
            figures["plain"].append(await first_search(plain))
            figures["ours 2026"].append(await first_search(ours("bench", root), "auto"))
            figures["plain 2026"].append(await first_search(plain, "auto"))
    wall = {name: statistics.median(wall for wall, _ in values) for name, values in figures.items()}
    cpu = {name: statistics.median(cpu for _, cpu in values) for name, values in figures.items()}
    for mode, suffix in (("legacy initialize", ""), ("2026-07-28", " 2026")):
        mine, floor = wall["ours" + suffix], wall["plain" + suffix]
        print(
            f"{mode:18s} local-ai-memory mcp {mine:5.2f} s   plain SDK server, one tool {floor:5.2f} s   "
            f"ratio {mine / floor:.2f}x (target <= 1.3x)"
        )
        mine, floor = cpu["ours" + suffix], cpu["plain" + suffix]
        print(f"{'':18s} CPU of the process {mine:5.2f} s   {floor:5.2f} s   ratio {mine / floor:.2f}x")
    print(f"(median of {starts} interleaved runs; load average now {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")


def fill(root: Path, count: int) -> list[str]:
    """``count`` notes of user ``bench`` from the sample corpus, written as plain files (as a user
    would drop them in) and indexed once; return queries that find them."""
    corpus = build_corpus()
    folder = root / "memory_data" / "knowledge"
    folder.mkdir(parents=True)
    for n in range(count):
        note = corpus.notes[n % len(corpus.notes)]
        text = f"# {note.module} part {n}\n\n{note.text}"
        (folder / note_filename("bench", f"{note.stem}-{n}")).write_text(text, encoding="utf-8")
    with Memory.open(root) as memory:
        memory.knowledge.build_index("bench")
    return [query.text for query in corpus.queries] or [note.module for note in corpus.notes]


async def timed_calls(client: Client, tool: str, arguments: list[dict[str, Any]]) -> list[float]:
    times: list[float] = []
    for args in arguments:
        start = time.perf_counter()
        result = await client.call_tool(tool, args)
        times.append((time.perf_counter() - start) * 1000)
        assert not result.is_error, result.content
    return times


async def cpu_per_call(
    params: StdioServerParameters, tool: str, arguments: list[dict[str, Any]]
) -> tuple[float, float]:
    """Milliseconds of CPU per call of ``tool``: the server process's (its CPU over a session of
    ``len(arguments)`` calls minus over one of a single warm-up call; children's CPU counts once
    they exit) and this client's."""

    async def session(calls: list[dict[str, Any]]) -> tuple[float, float]:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        own = time.process_time()
        async with Client(params, read_timeout_seconds=120) as client:
            await client.call_tool(tool, arguments[0])
            await anyio.sleep(1)  # both sessions alike: a store's watcher finishes its start-up scan
            begin = time.process_time()
            for args in calls:
                await client.call_tool(tool, args)
            own = time.process_time() - begin
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, own

    base, _ = await session([])
    total, own = await session(arguments)
    return max(0.0, total - base) / len(arguments) * 1000, own / len(arguments) * 1000


def p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notes", type=int, default=2000)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--starts", type=int, default=7)
    parser.add_argument("--only-start", action="store_true", help="print the start figures alone")
    args = parser.parse_args()
    if args.only_start:
        await start_figures(args.starts)
        return
    counter = TokenCounter()

    print("== tool list size (cl100k tokens of tools/list) ==")
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        with Memory.open(root / "ours") as memory:
            async with Client(create_server(memory, user="bench")) as client:
                default = list((await client.list_tools()).tools)
            async with Client(create_server(memory, user="bench", read_only=True)) as client:
                read_only = list((await client.list_tools()).tools)
        ours_tokens = tool_list_tokens(default, counter)
        print(f"{'local-ai-memory (default)':40s} {len(default):3d} tools {ours_tokens:7,d} tokens")
        read_only_tokens = tool_list_tokens(read_only, counter)
        print(f"{'local-ai-memory (--read-only)':40s} {len(read_only):3d} tools {read_only_tokens:7,d} tokens")
        for name, params in peers(root).items():
            if params is None:
                print(f"{name:40s} not installed")
                continue
            try:
                tools = await listed_tools(params)
            except Exception as exc:  # a peer that fails to start here is reported, not fatal
                print(f"{name:40s} failed to start: {type(exc).__name__}: {exc}")
                continue
            tokens = tool_list_tokens(tools, counter)
            print(f"{name:40s} {len(tools):3d} tools {tokens:7,d} tokens  ({tokens / ours_tokens:.1f}x ours)")

    print()
    await start_figures(args.starts)

    print(f"\n== per-call latency over stdio, {args.notes:,d} notes ==")
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        begin = time.perf_counter()
        queries = fill(root, args.notes)
        print(f"(wrote and indexed {args.notes:,d} notes in {time.perf_counter() - begin:.1f} s)")
        with Memory.open(root) as memory:
            reference = parse_reference(memory.session("bench", "s1").externalize("grep", "row\n" * 200_000))
            assert reference is not None
        async with Client(ours("bench", root), read_timeout_seconds=120) as client:
            await client.call_tool("search", {"query": "warm up"})
            searches = [{"query": queries[n % len(queries)]} for n in range(args.calls)]
            search_ms = await timed_calls(client, "search", searches)
            pages = [
                {"session": "s1", "result_id": reference.result_id, "offset": (n * 8000) % 790_000}
                for n in range(args.calls)
            ]
            page_ms = await timed_calls(client, "load_tool_result", pages)
        floor_server = StdioServerParameters(command=sys.executable, args=["-c", MINIMAL_SERVER])
        async with Client(floor_server, read_timeout_seconds=120) as client:  # the same pipe, the SDK's least work
            await client.call_tool("ping", {})
            ping_ms = await timed_calls(client, "ping", [{}] * args.calls)
        print(
            f"search            p50 {p(search_ms, 0.5):6.2f} ms  p95 {p(search_ms, 0.95):6.2f} ms (target p50 < 5 ms)"
        )
        print(f"load_tool_result  p50 {p(page_ms, 0.5):6.2f} ms  p95 {p(page_ms, 0.95):6.2f} ms")
        print(
            f"the SDK's one-tool server, ping: p50 {p(ping_ms, 0.5):6.2f} ms  p95 {p(ping_ms, 0.95):6.2f} ms "
            f"(search / ping p50: {p(search_ms, 0.5) / p(ping_ms, 0.5):.2f}x)"
        )
        with Memory.open(root) as memory:  # the same calls without the pipe: what the server itself costs
            direct: list[float] = []
            for args_ in searches:
                begin = time.perf_counter()
                memory.knowledge.search(args_["query"], "bench")
                direct.append((time.perf_counter() - begin) * 1000)
            async with Client(create_server(memory, user="bench", offload=False)) as client:
                inproc_ms = await timed_calls(client, "search", searches)
        print(f"search, in process through the SDK's client: p50 {p(inproc_ms, 0.5):6.2f} ms")
        # CPU per call does not grow with the machine's load as wall time does: the server's
        # (its process's CPU after N calls minus after none) and this client's, beside the SDK's
        # one-tool server answering a ping the same way
        many = [searches[n % len(searches)] for n in range(max(1000, args.calls))]  # the start's CPU varies
        ours_cpu = await cpu_per_call(ours("bench", root), "search", many)
        floor_cpu = await cpu_per_call(floor_server, "ping", [{}] * len(many))
        print(
            f"CPU per call, server + client: ours search {ours_cpu[0]:.2f} + {ours_cpu[1]:.2f} ms, "
            f"the SDK's one-tool server's ping {floor_cpu[0]:.2f} + {floor_cpu[1]:.2f} ms "
            f"(ours / floor: {sum(ours_cpu) / sum(floor_cpu):.2f}x)"
        )
        print(f"search, the library call alone:               p50 {p(direct, 0.5):6.2f} ms")
        print(f"(load average now {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")


if __name__ == "__main__":
    asyncio.run(main())
