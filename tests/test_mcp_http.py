"""The HTTP server as a real process on 127.0.0.1 (no other address, no network): OAuth
resource-server answers without a token, API keys with scopes, users kept apart, admins not,
JWTs checked against a JWKS served here, and no unauthenticated server off loopback."""

from __future__ import annotations

import base64
import http.server
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pytest

pytest.importorskip("mcp")

import httpx2
import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from local_ai_memory import Memory
from local_ai_memory.integration import parse_reference
from local_ai_memory.mcp import hash_api_key

sys.path.insert(0, str(Path(__file__).parent))  # the helpers the MCP test files share
from mcp_support import call, error_of

pytestmark = [pytest.mark.enable_socket, pytest.mark.allow_hosts(["127.0.0.1"])]

SOURCE = str(Path(__file__).resolve().parent.parent / "src")
KEYS = {
    "alice": ("alice", ["memory:read", "memory:write"]),
    "alice-ro": ("alice", ["memory:read"]),
    "bob": ("bob", ["memory:read", "memory:write"]),
    "root": ("root", ["memory:admin"]),
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Running:
    url: str
    process: subprocess.Popen[bytes]
    result_id: str  # bob's stored tool output in his session s1


def start_server(root: Path, *options: str) -> tuple[str, subprocess.Popen[bytes]]:
    """``local-ai-memory mcp --http`` on a free loopback port, once it answers."""
    port = free_port()
    path = os.pathsep.join([SOURCE, *(p for p in sys.path if p)])
    log = tempfile.TemporaryFile()  # noqa: SIM115 - closed by stop()
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from local_ai_memory.cli import main; main()",
            "mcp",
            "--http",
            "--port",
            str(port),
            "-d",
            str(root),
            "--create",  # some tests start on an empty folder
            *options,
        ],
        env={**os.environ, "PYTHONPATH": path},
        stdout=subprocess.DEVNULL,
        stderr=log,  # a file, not a pipe: a pipe nobody reads fills up and stalls the server's logging
    )
    _LOGS[process.pid] = log
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"server exited: {_log_of(process)}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return base, process
        except OSError:
            time.sleep(0.05)
    process.kill()
    raise AssertionError("server did not start")


_LOGS: dict[int, IO[bytes]] = {}
"""Each running server's stderr file, by process id."""


def _log_of(process: subprocess.Popen[bytes]) -> str:
    """What the server wrote to stderr so far."""
    log = _LOGS[process.pid]
    log.seek(0)
    return log.read().decode(errors="replace")


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    _LOGS.pop(process.pid).close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    root = tmp_path_factory.mktemp("http")
    with Memory.open(root) as memory:  # bob's data, which alice must never see
        memory.knowledge.write_note("bob", "secret", "# Bob's plan\n\nzebra launch codes")
        session = memory.session("bob", "s1")
        session.update_state({"bob_task": "zebra"})
        reference = parse_reference(session.externalize("grep", "zebra output\n" * 2000))
        assert reference is not None
    keys = root / "keys.json"
    entries = [{"hash": hash_api_key(key), "subject": sub, "scopes": scopes} for key, (sub, scopes) in KEYS.items()]
    keys.write_text(json.dumps({"keys": entries}), encoding="utf-8")
    base, process = start_server(root, "--keys-file", str(keys))
    try:
        yield Running(base, process, reference.result_id)
    finally:
        stop(process)


@asynccontextmanager
async def connect(url: str, token: str) -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    async with http, Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client:
        yield client


async def test_an_api_key_server_sends_no_client_to_an_authorization_server_it_is_not(server: Running) -> None:
    """API keys are static bearer tokens: the 401 is a plain Bearer challenge, and no metadata
    names an authorization server (the server itself had none, so OAuth discovery hit a 404)."""
    async with httpx2.AsyncClient(timeout=30) as http:
        answer = await http.post(f"{server.url}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        assert answer.status_code == 401
        challenge = answer.headers["www-authenticate"]
        assert challenge.startswith("Bearer")
        assert "resource_metadata=" not in challenge
        wrong = await http.post(
            f"{server.url}/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            headers={"Authorization": "Bearer not-a-key"},
        )
        assert wrong.status_code == 401
        assert (await http.get(f"{server.url}/.well-known/oauth-protected-resource/mcp")).status_code == 404


async def test_a_read_only_key_is_refused_a_write(server: Running) -> None:
    async with connect(server.url, "alice-ro") as client:
        message = await error_of(client, "write_note", id="knowledge/x.md", text="no")
        assert "memory:write" in message
        hits = (await call(client, "search", query="zebra"))["hits"]  # reading is allowed, its own notes only
        assert "knowledge/secret.md" not in [hit["id"] for hit in hits]


async def test_user_a_never_sees_user_b(server: Running) -> None:
    async with connect(server.url, "alice") as client:
        await call(client, "write_note", id="knowledge/mine.md", text="# Alice\n\nzebra too")
        assert [hit["id"] for hit in (await call(client, "search", query="zebra"))["hits"]] == ["knowledge/mine.md"]
        assert "no memory file" in await error_of(client, "read_note", id="knowledge/secret.md")
        assert "no session 's1'" in await error_of(client, "read_session", session="s1")  # bob's, not hers
        await error_of(client, "load_tool_result", session="s1", result_id=server.result_id)
        for tool, arguments in [
            ("read_note", {"id": "knowledge/secret.md"}),
            ("search", {"query": "zebra"}),
            ("read_session", {"session": "s1"}),
            ("load_tool_result", {"session": "s1", "result_id": server.result_id}),
            ("write_note", {"id": "knowledge/secret.md", "text": "overwritten"}),
        ]:
            assert "memory:admin" in await error_of(client, tool, user="bob", **arguments)
        with pytest.raises(Exception, match="no memory file"):
            await client.read_resource("memory://notes/knowledge/secret.md")
    async with connect(server.url, "bob") as client:
        assert (await call(client, "read_note", id="knowledge/secret.md"))["text"].endswith("zebra launch codes")
        assert [hit["id"] for hit in (await call(client, "search", query="zebra"))["hits"]] == ["knowledge/secret.md"]


async def test_an_admin_key_may_name_any_user(server: Running) -> None:
    async with connect(server.url, "root") as client:
        note = await call(client, "read_note", id="knowledge/secret.md", user="bob")
        assert note["text"].endswith("zebra launch codes")
        assert (await call(client, "read_session", session="s1", user="bob"))["state"] == {"bob_task": "zebra"}
        page = await call(client, "load_tool_result", session="s1", result_id=server.result_id, user="bob")
        assert page["content"].startswith("zebra output")
        assert (await call(client, "list_notes", user="root"))["ids"] == []  # its own user is its subject


def test_an_unauthenticated_server_binds_only_to_loopback(tmp_path: Path) -> None:
    path = os.pathsep.join([SOURCE, *(p for p in sys.path if p)])
    command = "from local_ai_memory.cli import main; main()"
    options = ["mcp", "--http", "--host", "0.0.0.0", "--user", "alice", "-d", str(tmp_path), "--create"]
    result = subprocess.run(
        [sys.executable, "-c", command, *options],
        env={**os.environ, "PYTHONPATH": path, "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "refusing to serve without authentication" in result.stderr


async def test_a_loopback_server_without_auth_serves_its_user(tmp_path: Path) -> None:
    url, process = start_server(tmp_path, "--user", "alice")
    try:
        async with (
            httpx2.AsyncClient(timeout=30) as http,
            Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client,
        ):
            await call(client, "write_note", id="knowledge/x.md", text="hello")
            assert "memory:admin" in await error_of(client, "read_note", id="knowledge/x.md", user="bob")
    finally:
        stop(process)
    with Memory.open(tmp_path) as memory:
        assert memory.knowledge.read_note("alice", "x") == "hello"


# -- JWT against a JWKS served from this test --------------------------------------------------


def _b64(number: int) -> str:
    data = number.to_bytes((number.bit_length() + 7) // 8, "big")
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@pytest.fixture(scope="module")
def jwks() -> Iterator[tuple[str, Any]]:
    """An RSA key made here and a local HTTP server answering its JWKS."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = key.public_key().public_numbers()
    body = json.dumps(
        {"keys": [{"kty": "RSA", "kid": "k1", "use": "sig", "alg": "RS256", "n": _b64(public.n), "e": _b64(public.e)}]}
    ).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/jwks.json", key
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def token(key: Any, sub: str, scope: str, **claims: Any) -> str:
    payload = {"sub": sub, "scope": scope, "exp": int(time.time()) + 600, "iss": "https://idp.test", **claims}
    return jwt.encode(payload, key, algorithm="RS256", headers={"kid": "k1"})


async def test_jwts_are_checked_against_the_jwks(tmp_path: Path, jwks: tuple[str, Any]) -> None:
    jwks_url, key = jwks
    url, process = start_server(tmp_path, "--jwks-url", jwks_url, "--issuer", "https://idp.test")
    try:
        async with httpx2.AsyncClient(timeout=30) as http:  # OAuth discovery leads to the real issuer
            answer = await http.post(f"{url}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
            assert answer.status_code == 401
            assert "resource_metadata=" in answer.headers["www-authenticate"]
            metadata = (await http.get(f"{url}/.well-known/oauth-protected-resource/mcp")).json()
        assert metadata["resource"] == f"{url}/mcp"
        assert metadata["authorization_servers"] == ["https://idp.test/"]
        async with connect(url, token(key, "carol", "memory:read memory:write")) as client:
            assert (await call(client, "write_note", id="knowledge/c.md", text="carol's"))["id"] == "knowledge/c.md"
        async with connect(url, token(key, "carol", "memory:read")) as client:
            assert "memory:write" in await error_of(client, "write_note", id="knowledge/c.md", text="no")
            assert (await call(client, "read_note", id="knowledge/c.md"))["text"] == "carol's"
        other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        async with httpx2.AsyncClient(timeout=30) as http:
            for bad in (
                token(other, "carol", "memory:admin"),  # signed by a key the JWKS does not hold
                token(key, "carol", "memory:read", exp=int(time.time()) - 10),  # expired
                token(key, "carol", "memory:read", iss="https://elsewhere.test"),  # another issuer
            ):
                answer = await http.post(
                    f"{url}/mcp",
                    json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                    headers={"Authorization": f"Bearer {bad}"},
                )
                assert answer.status_code == 401
    finally:
        stop(process)
    with Memory.open(tmp_path) as memory:
        assert memory.knowledge.read_note("carol", "c") == "carol's"
