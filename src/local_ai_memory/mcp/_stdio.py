"""The stdio transport, with the handshake answered while the MCP SDK is still loading.

Importing the SDK costs about 1.2 s of CPU (its pydantic protocol models), longer than a client
should wait for a server's tool list. So :func:`run_stdio` reads the wire in a thread of its
own while the main thread loads the SDK, opens the memory and builds the server. The answers to the
requests that never change for one server (``initialize``, ``server/discover``, ``tools/list``,
the resource-template and prompt lists) were recorded from the SDK on an earlier start; when
such a request arrives with the same parameters, it is answered from that record at once.

Every message still goes to the SDK's own server, in order, so its session state (a legacy
``initialize``) is the same as without this front. The SDK's answer to a request answered early
is not sent twice: it is compared with the recorded one, and a difference (a changed server the
record's key did not catch) replaces the record, so the next start is right again. Nothing else
is touched: tool calls, resources and notifications are the SDK's alone, and a tool call that
arrives while the SDK is still loading simply waits for it.

The record is a small JSON file in the user's cache folder (``$XDG_CACHE_HOME`` or
``~/.cache``, under ``local-ai-memory/``; ``$LOCAL_AI_MEMORY_CACHE_DIR`` overrides it). It holds
no user data (tool schemas, instructions, client names) and does not depend on the data folder,
so it is found before the configuration is read. Its name carries a digest of the server's
options and the file stamps of this package and the SDK, so editing or upgrading either starts
a new record; inside, answers are keyed by the request's method and parameters.

On a start with no record (the first one, or the first after an upgrade), the answers shipped
in the package (:mod:`._handshake`) serve instead, when they were generated for this very code
and these versions of the SDK and pydantic, and only for a plain legacy handshake the SDK is
sure to answer alike for every client; the SDK's answers then make the record as before.

The front follows the connection as the SDK does (the first request fixes the protocol era; a
list is answered early only after ``initialize``, keyed by the negotiated version, which shapes
the SDK's result), so what it sends early is what the SDK would send at that point.

This module imports neither the SDK nor the memory at import time: it is what the command line
loads on its way to answering.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import sys
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    import asyncio

    from local_ai_memory import Memory

__all__ = ["ANSWERED_EARLY", "CACHE_ENV", "Front", "record_path", "run_stdio"]

CACHE_ENV = "LOCAL_AI_MEMORY_CACHE_DIR"
"""The environment variable naming the folder of the handshake records (tests, read-only homes)."""

ANSWERED_EARLY = frozenset({"initialize", "server/discover", "tools/list", "resources/templates/list", "prompts/list"})
"""Requests whose answer depends only on the server and the request's parameters."""


def _stamp(paths: list[Path]) -> str:
    """A short digest of the files' sizes and modification times (missing files count too)."""
    parts = []
    for path in paths:
        try:
            info = path.stat()
            parts.append(f"{path}:{info.st_size}:{info.st_mtime_ns}")
        except OSError:
            parts.append(f"{path}:-")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def server_stamp(options: dict[str, Any]) -> str:
    """What the recorded answers are valid for: the server's options, this package's modules,
    the installed files of the SDK and of pydantic (which shapes its schemas), all found without
    importing them, and Python's version."""
    files = sorted(Path(__file__).parent.glob("*.py"))
    for package in ("mcp", "mcp_types", "pydantic", "pydantic_core"):
        spec = importlib.util.find_spec(package)
        if spec is not None and spec.origin:
            files.append(Path(spec.origin))
    python = f"py{sys.version_info.major}.{sys.version_info.minor}"
    return _stamp(files) + ":" + python + ":" + json.dumps(options, sort_keys=True)


def record_path(stamp: str) -> Path:
    """The record of the server ``stamp`` (see :func:`server_stamp`) in the user's cache folder."""
    folder = os.environ.get(CACHE_ENV)
    if not folder:
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        folder = str(Path(base) / "local-ai-memory")
    digest = hashlib.sha256(stamp.encode()).hexdigest()[:16]
    return Path(folder) / f"mcp-answers-{digest}.json"


class Front:
    """The wire side of :func:`run_stdio`: early answers, and the filter on the SDK's answers.

    ``write`` sends one JSON-RPC line to the client; ``record`` is the JSON file of answers
    (``None``: answer nothing early); ``shipped`` gives the package's answers for this server on
    this installation (see :mod:`._handshake`), asked for on the first request the record does
    not answer. Kept apart from the threads so it can be tested alone.

    It follows the connection as the SDK does, so an early answer is one the SDK would give at
    that point: the first request decides the protocol era (``initialize`` or a request without
    the 2026-07-28 envelope: the handshake era); in that era a list is answered early only after
    ``initialize`` has been answered, keyed by the negotiated version (the SDK shapes a result
    for it); in the 2026-07-28 era only enveloped requests are (the envelope names the version).
    """

    def __init__(
        self,
        write: Callable[[str], None],
        record: Path | None,
        stamp: str,
        shipped: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        self._write = write
        self._record = record
        self._stamp = stamp
        self._lock = threading.Lock()
        self._answers: dict[str, Any] = self._load()
        self._shipped_source = shipped
        self._shipped: dict[str, Any] | None = None
        self._waiting: dict[str, tuple[str, Any, str]] = {}  # JSON of a request id -> (key, early answer, method)
        self._era: str | None = None  # "handshake" or "modern", decided by the first request
        self._version: str | None = None  # handshake era: the protocol version initialize negotiated

    def _load(self) -> dict[str, Any]:
        if self._record is None:
            return {}
        try:
            data = json.loads(self._record.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict) or data.get("stamp") != self._stamp or not isinstance(data.get("answers"), dict):
            return {}
        return cast(dict[str, Any], data["answers"])

    def _save(self) -> None:
        """Write the record atomically (a temporary file renamed over it); failures are ignored:
        the record only saves time."""
        if self._record is None:
            return
        from local_ai_memory.integration import atomic_write  # loaded by then (after the handshake)

        data = json.dumps({"stamp": self._stamp, "answers": self._answers}, ensure_ascii=False).encode("utf-8")
        with contextlib.suppress(OSError):  # StorageError is an OSError
            atomic_write(self._record, data, durable=False)

    def send(self, line: str) -> None:
        """Send ``line`` to the client (one line of JSON, newline added)."""
        with self._lock:
            self._write(line if line.endswith("\n") else line + "\n")

    def _shipped_answer(self, method: str, params: Any) -> Any:
        if self._shipped_source is None:
            return None
        from ._handshake import loose_key

        key = loose_key(method, params, self._version)
        if key is None:
            return None
        if self._shipped is None:
            self._shipped = self._shipped_source()
        return self._shipped.get(key)

    def from_client(self, line: str) -> None:
        """See a client's message before the SDK does; answer it now if its answer is recorded."""
        if self._era is not None and not any(f'"{method}"' in line for method in ANSWERED_EARLY):
            return  # the cheap test first: once the era is known, a tool call's line is never parsed here
        try:
            message = json.loads(line)
        except ValueError:
            return
        if not isinstance(message, dict) or not isinstance(message.get("method"), str) or "id" not in message:
            return  # a notification or a response: no answer, and it decides no era
        method, params = message["method"], message.get("params")
        modern = method != "initialize" and _enveloped(params)
        with self._lock:
            if self._era is None:
                self._era = "modern" if modern else "handshake"
            if method not in ANSWERED_EARLY or not _plain_request(message):
                return
            if method == "initialize":  # once per connection: a second one is the SDK's to judge
                allowed = self._era == "handshake" and self._version is None
            elif self._era == "handshake":
                allowed = self._version is not None and not _enveloped(params)
            else:
                allowed = modern
            key = json.dumps([self._version, method, params], sort_keys=True, ensure_ascii=False)
            result = self._answers.get(key) if allowed else None
            if allowed and result is None:
                result = self._shipped_answer(method, params)
            if method == "initialize" and isinstance(result, dict):
                self._version = result.get("protocolVersion")
            self._waiting[json.dumps(message["id"])] = (key, result, method)
        if result is not None:
            answer = {"jsonrpc": "2.0", "id": message["id"], "result": result}
            self.send(json.dumps(answer, ensure_ascii=False, separators=(",", ":")))

    def from_server(self, line: str) -> None:
        """Pass the SDK's ``line`` on to the client, unless it answers a request answered early;
        record the answers of the requests that are answered early next time."""
        if self._waiting and '"id"' in line:
            try:
                message = json.loads(line)
            except ValueError:
                message = None
            if isinstance(message, dict) and "method" not in message and "id" in message:
                with self._lock:
                    found = self._waiting.pop(json.dumps(message["id"]), None)
                if found is not None:
                    key, early, method = found
                    result = message.get("result")
                    if method == "initialize" and isinstance(result, dict) and early is None:
                        with self._lock:
                            self._version = result.get("protocolVersion")
                    self._learn(key, result)
                    if early is not None:
                        if result != early:  # a record its key did not tell apart: say so where it shows
                            print(
                                f"local-ai-memory mcp: the early answer to {method} differed from the SDK's; "
                                "the record is corrected for the next start",
                                file=sys.stderr,
                            )
                        return
        self.send(line)

    def _learn(self, key: str, result: Any) -> None:
        with self._lock:
            if result is None:  # an error: nothing to answer early with
                changed = self._answers.pop(key, None) is not None
            else:
                changed = self._answers.get(key) != result
                self._answers[key] = result
            if changed:
                self._save()


def _enveloped(params: Any) -> bool:
    """Whether ``params`` carry the 2026-07-28 per-request envelope (its protocol-version key)."""
    meta = params.get("_meta") if isinstance(params, dict) else None
    return isinstance(meta, dict) and "io.modelcontextprotocol/protocolVersion" in meta


def _plain_request(message: dict[str, Any]) -> bool:
    """A well-formed JSON-RPC request with nothing extra (anything odd waits for the SDK)."""
    request_id = message.get("id")
    return (
        message.get("jsonrpc") == "2.0"
        and set(message) <= {"jsonrpc", "id", "method", "params"}
        and (isinstance(request_id, str) or (isinstance(request_id, int) and not isinstance(request_id, bool)))
    )


class _Lines:
    """The SDK's stdin: the lines the reader thread hands over with :meth:`put`, ended by ``None``.

    Lines that arrive before the SDK's event loop runs wait in a list; after, each one is
    handed to the loop directly (one wake-up, no worker thread in between).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._early: list[str | None] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: asyncio.Queue[str | None] | None = None

    def put(self, line: str | None) -> None:
        """Hand over ``line`` (``None``: the client closed its end); called by the reader thread."""
        with self._lock:
            loop, lines = self._loop, self._queue
            if loop is None or lines is None:
                self._early.append(line)
                return
        with contextlib.suppress(RuntimeError):  # the loop has ended: nobody reads any more
            loop.call_soon_threadsafe(lines.put_nowait, line)

    def __aiter__(self) -> AsyncIterator[str]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[str]:
        import asyncio

        lines: asyncio.Queue[str | None] = asyncio.Queue()
        with self._lock:
            for line in self._early:
                lines.put_nowait(line)
            self._early.clear()
            self._loop, self._queue = asyncio.get_running_loop(), lines
        while (line := await lines.get()) is not None:
            yield line


class _Out:
    """The SDK's stdout: each line goes through :meth:`Front.from_server`."""

    def __init__(self, front: Front) -> None:
        self._front = front
        self._buffer = ""

    async def write(self, text: str) -> None:
        self._buffer += text
        while "\n" in self._buffer:
            line, _, self._buffer = self._buffer.partition("\n")
            self._front.from_server(line)

    async def flush(self) -> None:
        return None


def run_stdio(
    open_memory: Callable[[], AbstractContextManager[Memory]],
    *,
    user: str,
    read_only: bool = False,
    early_answers: bool = True,
    stdin: IO[bytes] | None = None,
    stdout: IO[bytes] | None = None,
) -> None:
    """Serve the memory ``open_memory`` opens as ``user`` over stdin/stdout until the client
    closes stdin; meanwhile answer the handshake from the record of earlier starts (see the
    module's text; ``early_answers=False`` keeps no record and answers nothing early).

    While serving, file descriptors 0 and 1 point at the null device and at stderr, so a stray
    ``print`` or a child process cannot corrupt the wire (as the SDK's own stdio transport does).
    """
    wire_in = stdin if stdin is not None else os.fdopen(os.dup(0), "rb")  # buffered: readline is one read
    wire_out = stdout if stdout is not None else os.fdopen(os.dup(1), "wb")
    if stdin is None:
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
    if stdout is None:
        sys.stdout.flush()
        os.dup2(2, 1)
    try:
        _run_front(open_memory, wire_in, wire_out, user=user, read_only=read_only, early_answers=early_answers)
    finally:  # give the process its standard streams back (a library caller may go on using them)
        if stdout is None:
            sys.stdout.flush()
            os.dup2(wire_out.fileno(), 1)
        if stdin is None:
            os.dup2(wire_in.fileno(), 0)


def _run_front(
    open_memory: Callable[[], AbstractContextManager[Memory]],
    wire_in: IO[bytes],
    wire_out: IO[bytes],
    *,
    user: str,
    read_only: bool,
    early_answers: bool,
) -> None:
    """The reader thread (early answers, then hand-over) beside the server in this thread."""

    def write(line: str) -> None:
        wire_out.write(line.encode("utf-8"))
        wire_out.flush()

    options = {"read_only": read_only}
    stamp = server_stamp(options)

    def shipped() -> dict[str, Any]:
        from ._handshake import load_shipped

        return load_shipped(options)

    front = Front(write, record_path(stamp) if early_answers else None, stamp, shipped if early_answers else None)
    lines = _Lines()

    def read() -> None:
        """Hand the client's lines to the SDK (answering what it can first) until end of input."""
        try:
            for raw in iter(wire_in.readline, b""):
                line = raw.decode("utf-8", errors="replace")
                front.from_client(line)
                lines.put(line)
        except (OSError, ValueError):  # stdin closed under us
            pass
        finally:
            lines.put(None)

    # A daemon: if the server fails, the process must not wait for a client that never writes.
    threading.Thread(target=read, name="mcp-stdin", daemon=True).start()
    _serve(open_memory, front, lines, user=user, read_only=read_only)


def _serve(
    open_memory: Callable[[], AbstractContextManager[Memory]],
    front: Front,
    lines: _Lines,
    *,
    user: str,
    read_only: bool,
) -> None:
    """Load the SDK, open the memory, and run the server on the front's lines until they end."""
    import anyio
    from mcp.server.stdio import stdio_server

    from ._server import create_server

    with open_memory() as memory:
        server = create_server(memory, user=user, read_only=read_only, offload=False)
        lowlevel = server._lowlevel_server  # what MCPServer.run_stdio_async runs (the SDK's own client reads it too)

        async def main() -> None:
            streams = stdio_server(cast(Any, lines), cast(Any, _Out(front)))
            async with streams as (read_stream, write_stream):
                await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())

        anyio.run(main)
