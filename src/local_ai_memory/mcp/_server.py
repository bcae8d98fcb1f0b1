"""The MCP server: a small set of tools and resources over one :class:`~local_ai_memory.Memory`.

An adapter only: every rule (note naming, the unique-replacement edit, the expected-hash
check, JSON Merge Patch of L0, scope-checked tool-output paging) lives in the core and is
called from here. What this module adds is the protocol surface: tool names, short
descriptions and annotations, typed results, size caps with next-page offsets, and the access
check of :mod:`._access` before every call.

Notes are addressed by an id ``"{category}/{name}"`` (``knowledge/deploy.md``) relative to the
caller's own user; a session is named explicitly in every runtime tool (protocol 2026-07-28
has no MCP session to hang it on).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import anyio
from mcp.server.auth.provider import TokenVerifier
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

from local_ai_memory import ConflictError, InvalidInputError, Memory, RecordNotFoundError, __version__, note_hash
from local_ai_memory.integration import caller_message, note_filename

from ._access import READ, WRITE, Identity

__all__ = ["MAX_CHARS", "create_server"]

MAX_CHARS = 8000
"""The most characters of content one answer carries (about 2,000 tokens); the rest is paged."""
MAX_LIST = 200
"""The most ids one :func:`list_notes` page holds."""

T = TypeVar("T")

Id = Annotated[str, Field(description="category/name, e.g. knowledge/deploy.md")]
User = Annotated[str | None, Field(description="act for this user instead of yourself (memory:admin only)")]
Session = Annotated[str, Field(description="your name for a conversation or task; list_sessions lists them")]
Expected = Annotated[str | None, Field(description="hash from your last read; '' = must not exist")]


class Hit(BaseModel):
    id: str
    title: str
    score: float


class SearchOut(BaseModel):
    hits: list[Hit]


class RecallOut(BaseModel):
    text: str
    ids: list[str]
    tokens: int


class NoteOut(BaseModel):
    id: str
    hash: str
    text: str
    total_chars: int
    next_offset: int | None


class NotesOut(BaseModel):
    ids: list[str]
    next_cursor: int | None


class WriteOut(BaseModel):
    id: str
    hash: str


class DeleteOut(BaseModel):
    id: str
    deleted: bool


class SessionOut(BaseModel):
    state: dict[str, Any]
    working_memory: str
    working_memory_hash: str
    checkpoints: list[dict[str, Any]]
    tool_results: list[str]
    truncated: bool


class SessionsOut(BaseModel):
    sessions: list[str]


class PageOut(BaseModel):
    result_id: str
    tool: str
    content: str
    total_chars: int
    next_offset: int | None


READ_ONLY = ToolAnnotations(read_only_hint=True)
WRITES = ToolAnnotations(read_only_hint=False, destructive_hint=False)
OVERWRITES = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True)
DELETES = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True)


def _lean(schema: Any) -> Any:
    """A JSON schema without what costs a model's context and tells it nothing: pydantic's
    ``title`` keywords, ``default: null`` and the ``anyOf [X, null]`` of optional arguments
    (written as a list of types). Property *names* (``title`` of a hit) are kept."""
    if isinstance(schema, list):
        return [_lean(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    options = schema.get("anyOf")
    if isinstance(options, list) and len(options) == 2 and {"type": "null"} in options:
        kept = next(option for option in options if option != {"type": "null"})
        if isinstance(kept.get("type"), str):  # {"type": ["integer", "null"]}: the same, shorter
            kept = {**kept, "type": [kept["type"], "null"]}
            schema = {**{k: v for k, v in schema.items() if k != "anyOf"}, **kept}
    lean: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title" or (key == "default" and value is None) or (key == "additionalProperties" and value is True):
            continue
        if key in ("properties", "$defs"):
            lean[key] = {name: _lean(sub) for name, sub in value.items()}
        else:
            lean[key] = _lean(value) if key in ("items", "anyOf", "additionalProperties") else value
    return lean


def _inlined(schema: Any) -> Any:
    """``schema`` with each ``{"$ref": "#/$defs/X"}`` replaced by ``X`` itself and ``$defs``
    dropped: shorter for a model when each definition is used once (a hit, a page), and a
    client validating results against it resolves no references (measured with ``jsonschema``:
    0.28 ms per search result with the reference, 0.16 ms inlined). A schema whose definitions
    refer to each other (none here) is returned as it is."""
    if not isinstance(schema, dict) or "$defs" not in schema:
        return schema
    definitions = schema["$defs"]

    def expand(node: Any, depth: int) -> Any:
        if depth > 20:
            raise RecursionError
        if isinstance(node, list):
            return [expand(item, depth) for item in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/") and len(node) == 1:
            return expand(definitions[ref.removeprefix("#/$defs/")], depth + 1)
        return {key: expand(value, depth) for key, value in node.items()}

    try:
        return expand({key: value for key, value in schema.items() if key != "$defs"}, 0)
    except (RecursionError, KeyError):
        return schema


def _id_of(category: str, filename: str) -> str:
    """The id of the note stored as ``filename`` (``alice_deploy.md``) in ``category``: the file
    name without its user prefix (an encoded user id never holds ``_``, so the first one ends it)."""
    return f"{category}/{filename.partition('_')[2]}"


def _capped(limit: int) -> int:
    return max(1, min(limit, MAX_CHARS))


async def _run(fn: Callable[[], T], error: type[Exception], *, user: str, memory: Memory, offload: bool = True) -> T:
    """Run the blocking call ``fn`` for ``user``, turning any error into ``error`` (a tool's or a
    resource's error, which the client is shown), worded by the core's :func:`caller_message`:
    in the caller's ids, without a host path (the full text goes to the log).

    ``offload`` runs it in a worker thread, so an HTTP server keeps answering other requests
    meanwhile; a stdio server (one client) runs it in place, which saves the thread handoff
    (measured: a search's p50 through the SDK's client went from 4.7 to 1.3 ms, the search
    itself being 0.4 ms). A :class:`ConflictError` names the current hash so the model can
    re-read and retry.
    """
    try:
        return await anyio.to_thread.run_sync(fn) if offload else fn()
    except (ToolError, ResourceError):
        raise
    except Exception as exc:
        text = caller_message(exc, user, memory.config.runtime_data_dir)
        if isinstance(exc, ConflictError):
            text = f"conflict: {text} (current_hash={exc.current_hash or 'none: no note'})"
        raise error(text) from exc


def _json_capped(value: Any, budget: int) -> tuple[Any, bool]:
    """``value`` if its JSON fits ``budget`` characters, else a note that it was cut (and True)."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    if len(text) <= budget:
        return value, False
    return {"_truncated": f"{len(text)} characters; read the resource for all of it"}, True


class _Tools:
    """The tool and resource bodies, bound to one memory and one fallback identity."""

    def __init__(self, memory: Memory, identity: Identity, offload: bool) -> None:
        self.memory = memory
        self.identity = identity
        self.knowledge = memory.knowledge
        self.offload = offload

    async def _call(self, fn: Callable[[], T], user: str, error: type[Exception] = ToolError) -> T:
        return await _run(fn, error, user=user, memory=self.memory, offload=self.offload)

    def _split(self, note_id: str) -> tuple[str | None, str]:
        """``(category, name)`` of a note id; a bare name is in the default category, and a
        category must be one of the store's (said in the error, so the model can correct it):
        the configured ones and the conversation logs, whose ids ``recall`` and ``list_notes`` give."""
        category, sep, name = note_id.rpartition("/")
        categories = self.knowledge.store.categories
        if sep and category not in categories:
            problem = InvalidInputError(
                f"unknown category {category!r} in {note_id!r}: ids are category/name, "
                f"category one of {', '.join(categories)}"
            )
            raise ToolError(caller_message(problem, None, self.memory.config.runtime_data_dir))
        return (category if sep else None), name

    async def _notify(self, ctx: Context[Any, Any] | None, note_id: str) -> None:
        """Tell ``subscriptions/listen`` streams (protocol 2026-07-28) that the note ``note_id`` changed.

        Older clients' ``resources/subscribe`` is not served: the SDK's ``MCPServer`` offers no
        public way to register it (only its private low-level server), and those clients are told
        so by the capabilities they receive (``resources.subscribe`` false).
        """
        if ctx is not None:
            with contextlib.suppress(ValueError):  # outside a request: nobody is listening
                await ctx.notify_resource_updated(f"memory://notes/{note_id}")

    # -- knowledge ---------------------------------------------------------------------------
    async def search(self, query: str, k: int = 5, user: User = None) -> SearchOut:
        """Keyword/hybrid search of your notes; best first."""
        who = self.identity.caller(user, READ).user
        found = await self._call(lambda: self.knowledge.search(query, who, k=max(1, min(k, 50))), who)
        return SearchOut(hits=[Hit(id=_id_of(c.category, c.filename), title=c.title, score=c.score) for c in found])

    async def recall(self, query: str, max_tokens: int = 1000, user: User = None) -> RecallOut:
        """What you said in earlier conversations or saved in notes that answers a question: the
        best passages, each labelled with where and when, within max_tokens."""
        who = self.identity.caller(user, READ).user
        budget = max(100, min(max_tokens, MAX_CHARS // 2))
        result = await self._call(lambda: self.memory.recall(query, who, max_tokens=budget), who)
        ids = list(dict.fromkeys(_id_of(p.category, p.filename) for p in result.passages))
        return RecallOut(text=result.answer, ids=ids, tokens=result.tokens)

    async def read_note(self, id: Id, offset: int = 0, limit: int = MAX_CHARS, user: User = None) -> NoteOut:
        """Read a note (paged by characters); gives the hash to pass to writes."""
        who = self.identity.caller(user, READ).user
        category, name = self._split(id)
        text = await self._call(lambda: self.knowledge.read_note(who, name, category=category), who)
        start = max(0, offset)
        end = start + _capped(limit)
        return NoteOut(
            id=id,
            hash=note_hash(text),
            text=text[start:end],
            total_chars=len(text),
            next_offset=end if end < len(text) else None,
        )

    async def list_notes(self, cursor: int = 0, limit: int = 100, user: User = None) -> NotesOut:
        """Ids of your notes, a page at a time."""
        who = self.identity.caller(user, READ).user
        notes = await self._call(lambda: self.knowledge.notes(who), who)
        start = max(0, cursor)
        end = start + max(1, min(limit, MAX_LIST))
        ids = [_id_of(n.category, note_filename(who, n.name)) for n in notes[start:end]]
        return NotesOut(ids=ids, next_cursor=end if end < len(notes) else None)

    async def write_note(
        self, id: Id, text: str, expected_hash: Expected = None, user: User = None, ctx: Context[Any, Any] | None = None
    ) -> WriteOut:
        """Store a note verbatim (create or replace)."""
        who = self.identity.caller(user, WRITE).user
        category, name = self._split(id)
        filename = await self._call(
            lambda: self.knowledge.write_note(who, name, text, category=category, expected_hash=expected_hash), who
        )
        id = _id_of(category or self.knowledge.store.categories[0], filename)
        await self._notify(ctx, id)
        return WriteOut(id=id, hash=note_hash(text))

    async def edit_note(
        self,
        id: Id,
        old: str,
        new: str,
        expected_hash: Expected = None,
        user: User = None,
        ctx: Context[Any, Any] | None = None,
    ) -> WriteOut:
        """Replace the one exact occurrence of old by new."""
        who = self.identity.caller(user, WRITE).user
        category, name = self._split(id)
        digest = await self._call(
            lambda: self.knowledge.edit_note(who, name, old, new, category=category, expected_hash=expected_hash), who
        )
        await self._notify(ctx, id)
        return WriteOut(id=id, hash=digest)

    async def delete_note(
        self, id: Id, expected_hash: Expected = None, user: User = None, ctx: Context[Any, Any] | None = None
    ) -> DeleteOut:
        """Delete a note."""
        who = self.identity.caller(user, WRITE).user
        category, name = self._split(id)
        deleted = await self._call(
            lambda: self.knowledge.delete_note(who, name, category=category, expected_hash=expected_hash), who
        )
        await self._notify(ctx, id)
        return DeleteOut(id=id, deleted=deleted)

    # -- runtime -----------------------------------------------------------------------------
    def _session_out(self, user: str, session: str) -> SessionOut:
        scope = self.memory.session(user, session)
        budget = MAX_CHARS
        state, cut_state = _json_capped(scope.get_state(), budget // 2)
        working = scope.get_working_memory()
        shown = working[: budget // 4]
        checkpoints = [
            {"plan_id": c.plan_id, "status": c.status, "step": c.step, "task": c.task[:200]}
            for c in scope.checkpoints()[:20]
        ]
        results = sorted(scope.list_tool_results())[:50]
        return SessionOut(
            state=state,
            working_memory=shown,
            working_memory_hash=note_hash(working),
            checkpoints=checkpoints,
            tool_results=results,
            truncated=cut_state or len(shown) < len(working),
        )

    async def read_session(self, session: Session, user: User = None) -> SessionOut:
        """A session's state (L0), working memory (L1), checkpoints and stored tool outputs."""
        who = self.identity.caller(user, READ).user

        def read() -> SessionOut:
            if not self.memory.holds(who, session):
                raise RecordNotFoundError(
                    f"no session {session!r}: nothing was stored under that name (list_sessions lists yours; "
                    "patch_session starts one)"
                )
            return self._session_out(who, session)

        return await self._call(read, who)

    async def list_sessions(self, user: User = None) -> SessionsOut:
        """Names of your sessions that hold something (state, working memory, tool outputs)."""
        who = self.identity.caller(user, READ).user
        found = await self._call(self.memory.sessions, who)
        return SessionsOut(sessions=sorted(info.scope.session_id or "" for info in found if info.user_id == who))

    async def patch_session(
        self,
        session: Session,
        state: Annotated[dict[str, Any] | None, Field(description="JSON Merge Patch; null deletes a key")] = None,
        working_memory: str | None = None,
        expected_hash: Annotated[str | None, Field(description="working_memory_hash from read_session")] = None,
        user: User = None,
    ) -> SessionOut:
        """Merge-patch the state and/or replace the working memory (compare-and-swap)."""
        who = self.identity.caller(user, WRITE).user

        def patch() -> SessionOut:
            scope = self.memory.session(who, session)
            if working_memory is not None:
                current = scope.get_working_memory()
                if expected_hash is not None and note_hash(current) != expected_hash:
                    raise ConflictError("the working memory changed since it was read", note_hash(current))
                found = scope.swap_working_memory(current if expected_hash is not None else None, working_memory)
                if found is not None:
                    raise ConflictError("the working memory changed since it was read", note_hash(found))
            if state is not None:
                scope.update_state(state)
            return self._session_out(who, session)

        return await self._call(patch, who)

    async def load_tool_result(
        self, session: Session, result_id: str, offset: int = 0, limit: int = MAX_CHARS, user: User = None
    ) -> PageOut:
        """A page of a stored tool output."""
        who = self.identity.caller(user, READ).user
        page = await self._call(
            lambda: self.memory.session(who, session).load_page(result_id, max(0, offset), _capped(limit)), who
        )
        return PageOut(
            result_id=page.result_id,
            tool=page.tool,
            content=page.content,
            total_chars=page.total_chars,
            next_offset=page.next_offset,
        )


def create_server(
    memory: Memory,
    *,
    user: str | None = None,
    read_only: bool = False,
    token_verifier: TokenVerifier | None = None,
    auth: AuthSettings | None = None,
    name: str = "local-ai-memory",
    offload: bool = True,
) -> MCPServer[Any]:
    """An :class:`mcp.server.mcpserver.MCPServer` serving ``memory``.

    ``user`` is who a request without a token acts as (stdio, loopback HTTP without auth);
    ``read_only`` registers only the read tools and drops ``memory:write`` from that identity.
    ``token_verifier`` with ``auth`` makes an HTTP server an OAuth resource server (see
    :mod:`local_ai_memory.mcp`'s verifiers); a token then names the user and its scopes.
    ``offload=False`` runs each call in the event loop instead of a worker thread: faster for
    stdio's single client, wrong for an HTTP server that serves many at once.
    """
    scopes = frozenset({READ} if read_only else {READ, WRITE})
    identity = Identity(user, scopes)
    tools = _Tools(memory, identity, offload)
    readers: tuple[Callable[..., Any], ...] = (
        tools.search,
        tools.recall,
        tools.read_note,
        tools.list_notes,
        tools.read_session,
        tools.list_sessions,
        tools.load_tool_result,
    )
    writers: tuple[tuple[Callable[..., Any], ToolAnnotations], ...] = (
        (tools.write_note, OVERWRITES),
        (tools.edit_note, WRITES),
        (tools.delete_note, DELETES),
        (tools.patch_session, WRITES),
    )
    listed = [Tool.from_function(fn, annotations=READ_ONLY) for fn in readers]
    if not read_only:
        listed += [Tool.from_function(fn, annotations=annotations) for fn, annotations in writers]
    for tool in listed:  # what the client lists; arguments are still validated by the full models
        tool.parameters = _lean(_inlined(tool.parameters))
        tool.fn_metadata.output_schema = _lean(_inlined(tool.fn_metadata.output_schema))
    if token_verifier is None:  # one local user, who holds no memory:admin: `user` could only fail
        for tool in listed:
            tool.parameters["properties"].pop("user", None)
    server: MCPServer[Any] = MCPServer(
        name,
        version=__version__,
        instructions=(
            "Long-term memory: notes (search, recall, read, write, edit) and per-session runtime "
            "memory (state, working memory, stored tool outputs) per session you name; list_sessions "
            "lists them. Pass read hashes to writes."
        ),
        token_verifier=token_verifier,
        auth=auth,
        tools=listed,
    )
    _add_resources(server, tools)
    return server


def _add_resources(server: MCPServer[Any], tools: _Tools) -> None:
    """Notes, a session's parts and stored tool outputs as resources of the caller's own user."""

    @server.resource("memory://notes/{category}/{name}", mime_type="text/markdown")
    async def note(category: str, name: str) -> str:
        who = tools.identity.caller(None, READ, ResourceError).user
        return await tools._call(lambda: tools.knowledge.read_note(who, name, category=category), who, ResourceError)

    @server.resource("memory://sessions/{session}/state", mime_type="application/json")
    async def state(session: str) -> str:
        who = tools.identity.caller(None, READ, ResourceError).user
        return json.dumps(
            await tools._call(lambda: tools.memory.session(who, session).get_state(), who, ResourceError),
            ensure_ascii=False,
        )

    @server.resource("memory://sessions/{session}/working-memory", mime_type="text/markdown")
    async def working_memory(session: str) -> str:
        who = tools.identity.caller(None, READ, ResourceError).user
        return await tools._call(lambda: tools.memory.session(who, session).get_working_memory(), who, ResourceError)

    @server.resource("memory://sessions/{session}/checkpoints", mime_type="application/json")
    async def checkpoints(session: str) -> str:
        who = tools.identity.caller(None, READ, ResourceError).user
        found = await tools._call(lambda: tools.memory.session(who, session).checkpoints(), who, ResourceError)
        return json.dumps([c.model_dump(mode="json") for c in found], ensure_ascii=False)

    @server.resource("memory://sessions/{session}/tool-results/{result_id}", mime_type="text/plain")
    async def tool_result(session: str, result_id: str) -> str:
        who = tools.identity.caller(None, READ, ResourceError).user
        return await tools._call(
            lambda: tools.memory.session(who, session).read_tool_result(result_id, 0, MAX_CHARS), who, ResourceError
        )

    del note, state, working_memory, checkpoints, tool_result
