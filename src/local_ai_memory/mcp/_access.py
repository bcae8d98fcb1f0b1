"""Who is calling and what they may do: the one place the server decides access.

On stdio (and on an unauthenticated loopback HTTP server) the caller is the local user the
server was started for (``--user``), with the scopes the server was started with. Over HTTP
with auth the caller is the verified token's subject with the token's scopes. Either way a
caller acts on its own user; only ``memory:admin`` may name another one.
"""

from __future__ import annotations

from dataclasses import dataclass

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.mcpserver.exceptions import ToolError

from local_ai_memory import InvalidInputError
from local_ai_memory.integration import validate_name

__all__ = ["ADMIN", "READ", "SCOPES", "WRITE", "Caller", "Identity"]

READ = "memory:read"
WRITE = "memory:write"
ADMIN = "memory:admin"
SCOPES = (READ, WRITE, ADMIN)
"""Every scope the server knows, weakest first. ``memory:admin`` implies the other two."""


@dataclass(frozen=True)
class Caller:
    """The user a call acts on, and the scopes it holds (admin expanded to read and write)."""

    user: str
    scopes: frozenset[str]


@dataclass(frozen=True)
class Identity:
    """The server's fallback identity when a request carries no verified token.

    ``user`` is ``None`` on an authenticated HTTP server: a request without a token never
    reaches a tool there (the SDK answers 401), so there is nobody to fall back to.
    """

    user: str | None
    scopes: frozenset[str]

    def caller(self, named: str | None, needed: str, error: type[Exception] = ToolError) -> Caller:
        """The caller of the current request, checked for ``needed`` and for naming ``named``.

        ``error`` (:class:`ToolError` by default, which the model sees as the tool's error) when the
        scope is missing, a non-admin names another user, or the user id is not a valid one.
        """
        token = get_access_token()
        if token is not None:
            user: str | None = token.subject or token.client_id
            held = set(token.scopes)
        else:
            user, held = self.user, set(self.scopes)
        if ADMIN in held:
            held |= {READ, WRITE}
        if needed not in held:
            raise error(f"forbidden: this call needs the scope {needed}")
        if named is not None and named != user:
            if ADMIN not in held:
                raise error("forbidden: only memory:admin may name another user")
            user = named
        if not user:
            raise error("forbidden: no user; start the server with --user")
        try:
            validate_name(user, "user")
        except InvalidInputError as exc:
            raise error(str(exc)) from exc
        return Caller(user, frozenset(held))
