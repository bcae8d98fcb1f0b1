"""The two token verifiers of the HTTP server: hashed API keys from a file, and JWTs against a JWKS.

Both answer the SDK's :class:`~mcp.server.auth.provider.TokenVerifier` question (who is this
bearer token, with which scopes?) and nothing else; :mod:`._access` then applies the scopes.

The key file is JSON, and holds only hashes, so reading it gives no key away::

    {"keys": [{"hash": "sha256:…", "subject": "alice", "scopes": ["memory:read", "memory:write"]}]}

``local-ai-memory mcp-key`` (or :func:`hash_api_key`) makes the hash of a new key.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import threading
from pathlib import Path
from typing import Any

import anyio
from mcp.server.auth.provider import AccessToken

from local_ai_memory import ConfigError

from ._access import SCOPES

__all__ = ["ApiKeyVerifier", "JwksVerifier", "hash_api_key", "new_api_key"]


def hash_api_key(key: str) -> str:
    """``sha256:<hex>`` of an API key: what the key file stores instead of the key."""
    return "sha256:" + hashlib.sha256(key.encode("utf-8")).hexdigest()


def new_api_key() -> str:
    """A new random API key (256 bits, URL-safe)."""
    return "lam_" + secrets.token_urlsafe(32)


def _checked_scopes(scopes: object, where: str) -> list[str]:
    if not isinstance(scopes, list) or not all(isinstance(s, str) for s in scopes):
        raise ConfigError(f"{where}: scopes must be a list of strings")
    unknown = sorted(set(scopes) - set(SCOPES))
    if unknown:
        raise ConfigError(f"{where}: unknown scope(s) {unknown}; known: {list(SCOPES)}")
    return list(scopes)


class ApiKeyVerifier:
    """Bearer tokens that are API keys listed (hashed) in a JSON key file.

    The file is read again when it changes (a key added or revoked takes effect without a
    restart). A malformed file is a :class:`~local_ai_memory.ConfigError` at start; a later
    malformed version keeps the last good one.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path).expanduser()
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._keys: dict[str, tuple[str, list[str]]] = {}
        self._reload(strict=True)

    def _load(self) -> dict[str, tuple[str, list[str]]]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ConfigError(f"API key file {self.path}: {exc}") from exc
        entries = data.get("keys") if isinstance(data, dict) else None
        if not isinstance(entries, list):
            raise ConfigError(f'API key file {self.path}: expected {{"keys": [...]}}')
        keys: dict[str, tuple[str, list[str]]] = {}
        for number, entry in enumerate(entries):
            where = f"API key file {self.path}, key {number}"
            if not isinstance(entry, dict):
                raise ConfigError(f"{where}: expected an object")
            digest, subject = entry.get("hash"), entry.get("subject")
            if not isinstance(digest, str) or not digest.startswith("sha256:") or len(digest) != 71:
                raise ConfigError(f"{where}: 'hash' must be sha256:<64 hex digits> (see hash_api_key)")
            if not isinstance(subject, str) or not subject:
                raise ConfigError(f"{where}: 'subject' must be a user id")
            keys[digest] = (subject, _checked_scopes(entry.get("scopes"), where))
        return keys

    def _reload(self, *, strict: bool = False) -> None:
        try:
            st = self.path.stat()
            stamp = (st.st_mtime_ns, st.st_size)
        except OSError as exc:
            if strict:
                raise ConfigError(f"API key file {self.path}: {exc}") from exc
            return
        with self._lock:
            if stamp == self._stamp:
                return
            try:
                self._keys = self._load()
            except ConfigError:
                if strict:
                    raise
                return
            self._stamp = stamp

    async def verify_token(self, token: str) -> AccessToken | None:
        """The subject and scopes of the key ``token``, or ``None`` for an unknown key."""
        self._reload()
        digest = hash_api_key(token)
        with self._lock:
            found = next((v for k, v in self._keys.items() if hmac.compare_digest(k, digest)), None)
        if found is None:
            return None
        subject, scopes = found
        return AccessToken(token=token, client_id=subject, scopes=scopes, subject=subject)


class JwksVerifier:
    """Bearer tokens that are JWTs signed by a key of a JWKS URL (an identity provider's).

    The subject is the ``sub`` claim; the scopes are the ``scope`` claim (space-separated, RFC
    9068) or ``scp`` (a list), restricted to the ``memory:*`` scopes. ``issuer`` and
    ``audience``, when given, must match the token's ``iss`` and ``aud``.
    """

    def __init__(
        self,
        jwks_url: str,
        *,
        issuer: str | None = None,
        audience: str | None = None,
        algorithms: tuple[str, ...] = ("RS256", "ES256", "PS256", "EdDSA"),
    ) -> None:
        import jwt

        self._jwt = jwt
        self.client = jwt.PyJWKClient(jwks_url, cache_keys=True, lifespan=300, timeout=10)
        self.issuer = issuer
        self.audience = audience
        self.algorithms = list(algorithms)

    def _claims(self, token: str) -> dict[str, Any] | None:
        jwt = self._jwt
        try:
            key = self.client.get_signing_key_from_jwt(token)
            claims: dict[str, Any] = jwt.decode(
                token,
                key.key,
                algorithms=self.algorithms,
                issuer=self.issuer,
                audience=self.audience,
                options={"require": ["sub", "exp"], "verify_aud": self.audience is not None},
            )
        except (jwt.PyJWTError, ValueError):
            return None
        return claims

    async def verify_token(self, token: str) -> AccessToken | None:
        """The subject and scopes of a valid JWT, or ``None`` (bad signature, expired, wrong issuer...)."""
        claims = await anyio.to_thread.run_sync(self._claims, token)
        if claims is None or not isinstance(claims.get("sub"), str):
            return None
        raw = claims.get("scope", claims.get("scp", []))
        scopes = raw.split() if isinstance(raw, str) else [s for s in raw if isinstance(s, str)]
        exp = claims.get("exp")
        return AccessToken(
            token=token,
            client_id=str(claims.get("client_id") or claims.get("azp") or claims["sub"]),
            scopes=[s for s in scopes if s in SCOPES],
            expires_at=int(exp) if isinstance(exp, (int, float)) else None,
            subject=claims["sub"],
            claims={"iss": claims["iss"]} if "iss" in claims else None,
        )
