"""``local-ai-memory mcp``: serve the memory to any MCP client; ``mcp-key``: make an API key.

Examples::

    local-ai-memory mcp --user alice -d ~/.local-ai                 # stdio, for Claude Desktop / Cursor
    local-ai-memory mcp --user alice -d ~/new-memory --create       # the first time, in a new folder
    local-ai-memory mcp --http --user alice                         # loopback HTTP, no auth
    local-ai-memory mcp --http --host 0.0.0.0 --keys-file keys.json --public-url https://mem.example.org
    local-ai-memory mcp-key --subject alice --scope memory:read --scope memory:write
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Annotated

import typer

from local_ai_memory._cli.common import (
    ConfigFile,
    CreateFlag,
    DataDir,
    app,
    config_of,
    errors,
    fail,
    print_json,
    require_memory,
)
from local_ai_memory._shared.collector import collector_paused

__all__ = ["register"]

USER_ENV = "LOCAL_AI_MEMORY_USER"
"""The environment variable that names the user on stdio when ``--user`` is not given."""
INSTALL_HINT = "the MCP server needs the mcp package: pip install 'local-ai-memory[mcp]'"


def _require_mcp() -> None:
    """Fail with the install hint unless the SDK is installed (found, not imported: a wrong
    option or a missing user is refused without paying for the SDK's import)."""
    if importlib.util.find_spec("mcp") is None:
        fail(INSTALL_HINT)


def mcp(
    data_dir: DataDir = None,
    config: ConfigFile = None,
    user: Annotated[
        str | None, typer.Option("--user", "-u", help=f"Who the memory belongs to (default ${USER_ENV}).")
    ] = None,
    http: Annotated[bool, typer.Option("--http", is_flag=True, help="Serve streamable HTTP instead of stdio.")] = False,
    host: Annotated[str, typer.Option("--host", help="HTTP address (without auth: loopback only).")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="HTTP port.")] = 8765,
    read_only: Annotated[bool, typer.Option("--read-only", is_flag=True, help="Expose only the read tools.")] = False,
    keys_file: Annotated[
        Path | None, typer.Option("--keys-file", help="JSON file of hashed API keys (see mcp-key).")
    ] = None,
    jwks_url: Annotated[str | None, typer.Option("--jwks-url", help="Accept JWTs signed by these keys.")] = None,
    issuer: Annotated[str | None, typer.Option("--issuer", help="Required JWT issuer (and advertised one).")] = None,
    audience: Annotated[str | None, typer.Option("--audience", help="Required JWT audience.")] = None,
    public_url: Annotated[
        str | None, typer.Option("--public-url", help="The server's public base URL (for the OAuth metadata).")
    ] = None,
    create: CreateFlag = False,
) -> None:
    """Serve this memory over the Model Context Protocol (stdio by default; a new memory needs --create)."""
    _require_mcp()
    user = user or os.environ.get(USER_ENV) or None
    with errors():
        if not http:
            if keys_file or jwks_url:
                fail("--keys-file and --jwks-url protect the HTTP server: add --http")
            if not user:
                fail(f"name the user: --user NAME or ${USER_ENV}")
        settings = config_of(data_dir, config)
        require_memory(settings, create)  # a mistyped --data-dir must not serve (and fill) a new memory
        with collector_paused():  # the engines and the SDK: ~0.5 s of imports whose objects live as long as the process
            from local_ai_memory import Memory
            from local_ai_memory.mcp import serve_http, serve_stdio, verifier_from
        if not http:
            assert user is not None  # refused above
            with Memory(settings) as memory:
                serve_stdio(memory, user=user, read_only=read_only)
            return
        verifier = verifier_from(
            keys_file=str(keys_file) if keys_file else None, jwks_url=jwks_url, issuer=issuer, audience=audience
        )
        with Memory(settings) as memory:
            serve_http(
                memory,
                host=host,
                port=port,
                user=user,
                read_only=read_only,
                verifier=verifier,
                public_url=public_url,
                issuer=issuer,
            )


def mcp_key(
    subject: Annotated[str, typer.Option("--subject", help="The user id the key acts as.")],
    scope: Annotated[
        list[str] | None, typer.Option("--scope", help="memory:read, memory:write or memory:admin (repeatable).")
    ] = None,
) -> None:
    """Print a new API key (once: store it) and the key-file entry that holds its hash."""
    _require_mcp()
    from local_ai_memory.mcp import hash_api_key, new_api_key

    key = new_api_key()
    print_json(
        {"key": key, "entry": {"hash": hash_api_key(key), "subject": subject, "scopes": scope or ["memory:read"]}}
    )


def register() -> None:
    """Add these commands to the ``local-ai-memory`` app."""
    app.command(name="mcp")(mcp)
    app.command(name="mcp-key")(mcp_key)
