"""The handshake answers shipped with the package, for a first start that has no record yet.

A stdio server answers the handshake from a record of an earlier start while the SDK loads (see
:mod:`._stdio`). On the very first start, or the first after an upgrade, there is no record,
and the client waits for the SDK's import (about 1.2 s of CPU). This module holds the answers
for the server as this package defines it, generated from the SDK itself
(``python -m local_ai_memory.mcp._handshake`` writes ``handshake.json`` beside it), so that
start answers at once too.

They are valid only for the exact code that produced them: the file's key (:func:`shipped_stamp`)
is a digest of the contents of this package's modules, the installed versions of ``mcp``,
``mcp-types``, ``pydantic`` and ``pydantic-core``, Python's minor version and the server's
options. Any other installation finds no entry and waits for the SDK as before. A test compares
the file with what the SDK answers now and fails when it is stale, so it cannot go stale silently.

The shipped answers are keyed more loosely than a start's own record (which keys on the exact
request, client name included): an ``initialize`` by the protocol version it asks for, a list
by the method and the negotiated version, a 2026-07-28 request (``server/discover``, the lists)
by the method and the version its envelope names. That holds only for requests the SDK is certain to
accept and answer the same way whatever the client: :func:`loose_key` recognizes a plain
request of that kind and returns ``None`` for anything else (extra fields, ``_meta``, a
capability it does not know), which then waits for the SDK. It imports neither the SDK nor the
memory.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any, cast

__all__ = [
    "LIST_METHODS",
    "MODERN_METHODS",
    "SHIPPED",
    "envelope",
    "exchange",
    "generate",
    "hello",
    "load_shipped",
    "loose_key",
    "shipped_stamp",
]

SHIPPED = Path(__file__).with_name("handshake.json")
"""The generated file of answers (``{stamp: {loose key: result}}``)."""

LIST_METHODS = ("tools/list", "resources/templates/list", "prompts/list")
"""The list requests of the legacy handshake whose answer depends only on the server."""

_DISTRIBUTIONS = ("mcp", "mcp_types", "pydantic", "pydantic_core")
"""Whose installed version the answers depend on (import name; the dist-info name matches)."""

MODERN_METHODS = ("server/discover", *LIST_METHODS)
"""The requests of the 2026-07-28 protocol whose answer depends only on the server (and the
version the request's envelope names)."""

_VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
_INFO_KEY = "io.modelcontextprotocol/clientInfo"
_CAPABILITIES_KEY = "io.modelcontextprotocol/clientCapabilities"
_CLIENT_INFO = frozenset({"name", "version", "title", "description", "websiteUrl"})
_DICT_OF_DICTS = frozenset({"sampling", "elicitation", "experimental"})


def _version_of(package: str) -> str:
    """The installed version of ``package``, read from the name of its ``*.dist-info`` folder
    beside it (``importlib.metadata`` costs a quarter of a second to import); ``"?"`` if not found."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.origin:
        return "?"
    found = sorted(Path(spec.origin).parent.parent.glob(f"{package}-*.dist-info"))
    return found[0].name[len(package) + 1 : -len(".dist-info")] if len(found) == 1 else "?"


def shipped_stamp(options: dict[str, Any]) -> str:
    """What the shipped answers for a server with ``options`` are valid for (see the module's text)."""
    digest = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    versions = ",".join(f"{name}={_version_of(name)}" for name in _DISTRIBUTIONS)
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    return f"{digest.hexdigest()[:16]}:{versions}:py{python}:{json.dumps(options, sort_keys=True)}"


def load_shipped(options: dict[str, Any]) -> dict[str, Any]:
    """The shipped answers for a server with ``options`` on this installation, ``{}`` if none."""
    try:
        data = json.loads(SHIPPED.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    answers = data.get(shipped_stamp(options)) if isinstance(data, dict) else None
    return answers if isinstance(answers, dict) else {}


def _plain_client_info(info: Any) -> bool:
    return (
        isinstance(info, dict)
        and set(info) <= _CLIENT_INFO
        and isinstance(info.get("name"), str)
        and isinstance(info.get("version"), str)
        and all(isinstance(value, str) for value in info.values())
    )


def _plain_capabilities(capabilities: Any) -> bool:
    """Whether ``capabilities`` is one every handshake version's schema accepts: only ``roots``
    (with a boolean ``listChanged``), and ``sampling``, ``elicitation`` and ``experimental`` as
    objects of objects. Anything else (``tasks``, unknown keys) is not judged here."""
    if not isinstance(capabilities, dict):
        return False
    for name, value in capabilities.items():
        if name == "roots":
            if not (isinstance(value, dict) and set(value) <= {"listChanged"}):
                return False
            if not all(isinstance(flag, bool) for flag in value.values()):
                return False
        elif name in _DICT_OF_DICTS:
            if not (isinstance(value, dict) and all(isinstance(sub, dict) for sub in value.values())):
                return False
        else:
            return False
    return True


def _modern_key(method: str, params: Any) -> str | None:
    """The key of a plain 2026-07-28 request: nothing but the envelope, whose version, client
    and capabilities are of the plain kinds; its answer depends on the version alone."""
    if method not in MODERN_METHODS or not isinstance(params, dict) or set(params) != {"_meta"}:
        return None
    meta = params["_meta"]
    if not isinstance(meta, dict) or not {_VERSION_KEY, _CAPABILITIES_KEY} <= set(meta):
        return None
    if not set(meta) <= {_VERSION_KEY, _INFO_KEY, _CAPABILITIES_KEY} or not isinstance(meta[_VERSION_KEY], str):
        return None
    if _INFO_KEY in meta and not _plain_client_info(meta[_INFO_KEY]):
        return None
    if not _plain_capabilities(meta[_CAPABILITIES_KEY]):
        return None
    return json.dumps(["modern", method, meta[_VERSION_KEY]])


def loose_key(method: str, params: Any, version: str | None) -> str | None:
    """The shipped record's key of a request, or ``None`` when it is not a plain one whose
    answer the SDK gives every client alike. A legacy request is judged with ``version``, the
    protocol version its connection negotiated (``None`` before ``initialize``); a 2026-07-28
    request carries its version in its envelope."""
    meta = params.get("_meta") if isinstance(params, dict) else None
    if isinstance(meta, dict) and _VERSION_KEY in meta:
        return _modern_key(method, params)
    if method == "initialize":
        if version is not None or not isinstance(params, dict):
            return None
        if set(params) != {"protocolVersion", "capabilities", "clientInfo"}:
            return None
        requested = params["protocolVersion"]
        if not isinstance(requested, str) or not _plain_client_info(params["clientInfo"]):
            return None
        if not _plain_capabilities(params["capabilities"]):
            return None
        return json.dumps(["initialize", requested])
    if method in LIST_METHODS and version is not None and params in (None, {}):
        return json.dumps([method, version])
    return None


def exchange(server: Any, messages: list[dict[str, Any]]) -> dict[Any, dict[str, Any]]:
    """Send ``messages`` (JSON-RPC requests and notifications, in order) to the SDK server
    ``server`` (an ``MCPServer``) over one stdio connection in this process; its replies by
    request id. What :func:`generate` asks, and how the tests ask the SDK about other requests."""
    import anyio
    from mcp.server.stdio import stdio_server

    lowlevel = server._lowlevel_server  # what MCPServer.run_stdio_async runs
    expected = sum(1 for message in messages if "id" in message)
    replies: dict[Any, dict[str, Any]] = {}

    async def run() -> None:
        answered = anyio.Event()

        class Out:
            async def write(self, text: str) -> None:
                for line in text.splitlines():
                    if line.strip():
                        reply = json.loads(line)
                        replies[reply.get("id")] = reply
                if len(replies) >= expected:
                    answered.set()

            async def flush(self) -> None:
                return None

        class In:
            def __aiter__(self) -> Any:
                return self._lines()

            async def _lines(self) -> Any:
                for message in messages:
                    yield json.dumps(message) + "\n"
                await answered.wait()

        async with stdio_server(cast(Any, In()), cast(Any, Out())) as (read_stream, write_stream):
            await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())

    anyio.run(run)
    return replies


def envelope(version: str, **meta: Any) -> dict[str, Any]:
    """The params of a 2026-07-28 request for ``version``; ``meta`` replaces parts of the envelope
    (by their short names ``clientInfo`` and ``clientCapabilities``; ``None`` drops one)."""
    parts = {"clientInfo": {"name": "generate", "version": "0"}, "clientCapabilities": {}, **meta}
    keys = {"clientInfo": _INFO_KEY, "clientCapabilities": _CAPABILITIES_KEY}
    found = {keys.get(name, name): value for name, value in parts.items() if value is not None}
    return {"_meta": {_VERSION_KEY: version, **found}}


def hello(version: str, **params: Any) -> dict[str, Any]:
    """An ``initialize`` request (id 0) for protocol ``version``; ``params`` replace its parts."""
    base = {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "generate", "version": "0"}}
    return {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {**base, **params}}


def generate(read_only: bool) -> dict[str, Any]:
    """Ask the SDK, in this process, every question the shipped record answers for the server
    ``read_only`` selects, one connection per handshake protocol version; ``{loose key: result}``."""
    import tempfile

    from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

    from local_ai_memory import Memory

    from ._server import create_server

    answers: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as scratch, Memory.open(Path(scratch)) as memory:
        server = create_server(memory, user="generate", read_only=read_only, offload=False)
        for version in HANDSHAKE_PROTOCOL_VERSIONS:
            lists = [{"jsonrpc": "2.0", "id": n, "method": method} for n, method in enumerate(LIST_METHODS, start=1)]
            initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            replies = exchange(server, [hello(version), initialized, *lists])
            negotiated = replies[0]["result"]["protocolVersion"]
            answers[json.dumps(["initialize", version])] = replies[0]["result"]
            for n, method in enumerate(LIST_METHODS, start=1):
                if "result" in replies[n]:
                    answers[json.dumps([method, negotiated])] = replies[n]["result"]
        for version in MODERN_PROTOCOL_VERSIONS:
            asked = [
                {"jsonrpc": "2.0", "id": n, "method": method, "params": envelope(version)}
                for n, method in enumerate(MODERN_METHODS)
            ]
            replies = exchange(server, asked)
            for n, method in enumerate(MODERN_METHODS):
                if "result" in replies[n]:
                    answers[json.dumps(["modern", method, version])] = replies[n]["result"]
    return answers


def main() -> None:
    """Write ``handshake.json`` for the default and the read-only server on this installation."""
    records = {shipped_stamp({"read_only": flag}): generate(flag) for flag in (False, True)}
    SHIPPED.write_text(
        json.dumps(records, sort_keys=True, ensure_ascii=False, separators=(",", ":")) + "\n", encoding="utf-8"
    )
    print(f"wrote {SHIPPED} ({len(records)} servers)")


if __name__ == "__main__":
    main()
