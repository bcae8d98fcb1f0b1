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

from local_ai_memory.mcp._access import ADMIN, READ, SCOPES, WRITE
from local_ai_memory.mcp._auth import ApiKeyVerifier, JwksVerifier, hash_api_key, new_api_key
from local_ai_memory.mcp._serve import http_app, is_loopback, serve_http, serve_stdio, verifier_from
from local_ai_memory.mcp._server import MAX_CHARS, create_server

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
