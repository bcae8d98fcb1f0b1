"""An MCP server over :class:`~local_ai_memory.Memory` (needs ``pip install 'local-ai-memory[mcp]'``).

::

    from local_ai_memory import Memory
    from local_ai_memory.mcp import create_server

    server = create_server(Memory.open("~/.local-ai"), user="alice")
    server.run()                       # stdio; or `local-ai-memory mcp --user alice`

Over HTTP (:func:`serve_http`, :func:`http_app`) it is an OAuth 2.1 resource server:
:class:`ApiKeyVerifier` (a file of hashed API keys, see :func:`hash_api_key`) or
:class:`JwksVerifier` (JWTs checked against a JWKS URL) maps a bearer token to a subject and
the scopes ``memory:read``, ``memory:write`` and ``memory:admin``; without a verifier it
serves loopback only. Importing ``local_ai_memory`` never imports this package or ``mcp``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what the checkers see; at run time each name is imported on first use
    from local_ai_memory.mcp._access import ADMIN, READ, SCOPES, WRITE
    from local_ai_memory.mcp._auth import ApiKeyVerifier, JwksVerifier, hash_api_key, new_api_key
    from local_ai_memory.mcp._serve import http_app, is_loopback, serve_http, serve_stdio, verifier_from
    from local_ai_memory.mcp._server import MAX_CHARS, create_server

_WHERE = {
    "ADMIN": "_access",
    "READ": "_access",
    "SCOPES": "_access",
    "WRITE": "_access",
    "ApiKeyVerifier": "_auth",
    "JwksVerifier": "_auth",
    "hash_api_key": "_auth",
    "new_api_key": "_auth",
    "http_app": "_serve",
    "is_loopback": "_serve",
    "serve_http": "_serve",
    "serve_stdio": "_serve",
    "verifier_from": "_serve",
    "MAX_CHARS": "_server",
    "create_server": "_server",
}
"""Which module holds each public name. They load on first use: ``import local_ai_memory.mcp``
imports no SDK, and the stdio server never imports uvicorn or the JWT library."""

__all__ = [
    "ADMIN",
    "MAX_CHARS",
    "READ",
    "SCOPES",
    "WRITE",
    "ApiKeyVerifier",
    "JwksVerifier",
    "create_server",
    "hash_api_key",
    "http_app",
    "is_loopback",
    "new_api_key",
    "serve_http",
    "serve_stdio",
    "verifier_from",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])
