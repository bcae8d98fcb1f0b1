"""Running the server: stdio, or streamable HTTP (stateless, JSON responses) with or without auth.

An HTTP server without a token verifier trusts every caller as the ``--user`` it was started
for, so it binds only to a loopback address: anything else is refused before a socket opens.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from mcp.server.auth.provider import TokenVerifier
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from pydantic import AnyHttpUrl

from local_ai_memory import ConfigError, Memory
from local_ai_memory.integration import collector_paused

from ._auth import ApiKeyVerifier, JwksVerifier
from ._server import create_server

__all__ = ["http_app", "is_loopback", "serve_http", "serve_stdio", "verifier_from"]


def is_loopback(host: str) -> bool:
    """Whether ``host`` names only this machine (``localhost``, ``127.0.0.0/8``, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def verifier_from(
    *,
    keys_file: str | None = None,
    jwks_url: str | None = None,
    issuer: str | None = None,
    audience: str | None = None,
) -> TokenVerifier | None:
    """The token verifier the options name (an API-key file or a JWKS URL, not both), or ``None``."""
    if keys_file and jwks_url:
        raise ConfigError("give an API key file or a JWKS URL, not both")
    if keys_file:
        return ApiKeyVerifier(keys_file)
    if jwks_url:
        return JwksVerifier(jwks_url, issuer=issuer, audience=audience)
    return None


def _http_server(
    memory: Memory,
    *,
    host: str,
    port: int,
    user: str | None,
    read_only: bool,
    verifier: TokenVerifier | None,
    public_url: str | None,
    issuer: str | None,
) -> MCPServer[Any]:
    if verifier is None:
        if not is_loopback(host):
            raise ConfigError(
                f"refusing to serve without authentication on {host}: bind to 127.0.0.1, "
                "or give --keys-file or --jwks-url"
            )
        return create_server(memory, user=user, read_only=read_only)
    base = (public_url or f"http://{host}:{port}").rstrip("/")
    # API keys are static bearer tokens with no authorization server: the server then advertises
    # none (a plain `Bearer` challenge, no protected-resource metadata), rather than naming
    # itself as one and answering its metadata with a 404. JWTs name their issuer.
    advertised = not isinstance(verifier, ApiKeyVerifier)
    auth = AuthSettings(
        issuer_url=AnyHttpUrl(issuer or base),
        resource_server_url=AnyHttpUrl(f"{base}/mcp") if advertised else None,
        validate_token_resource=False,  # API keys carry no audience; JwksVerifier checks `aud` itself
    )
    return create_server(memory, read_only=read_only, token_verifier=verifier, auth=auth)


def http_app(
    memory: Memory,
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    user: str | None = None,
    read_only: bool = False,
    verifier: TokenVerifier | None = None,
    public_url: str | None = None,
    issuer: str | None = None,
) -> Any:
    """The Starlette app of the HTTP server (``/mcp``; with a JWT verifier, also the protected-resource
    metadata under ``/.well-known/oauth-protected-resource``, naming the issuer; API keys are
    plain bearer tokens, with no OAuth discovery). What :func:`serve_http` runs."""
    server = _http_server(
        memory,
        host=host,
        port=port,
        user=user,
        read_only=read_only,
        verifier=verifier,
        public_url=public_url,
        issuer=issuer,
    )
    return server.streamable_http_app(json_response=True, stateless_http=True, host=host)


def serve_http(memory: Memory, *, host: str = "127.0.0.1", port: int = 8765, **options: Any) -> None:
    """Serve ``memory`` over streamable HTTP until interrupted (see :func:`http_app` for the options)."""
    import uvicorn

    app = http_app(memory, host=host, port=port, **options)
    uvicorn.run(app, host=host, port=port, log_level="warning")


def serve_stdio(memory: Memory, *, user: str, read_only: bool = False) -> None:
    """Serve ``memory`` as ``user`` over stdin/stdout until the client closes them: the SDK's own
    stdio transport, with each tool call run in place (one client: no worker thread to hand off to)."""
    with collector_paused():  # the tools' models and schemas live as long as the server: no collection walks them
        server = create_server(memory, user=user, read_only=read_only, offload=False)
    server.run("stdio")
