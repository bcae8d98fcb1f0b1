"""``PostgresRuntimeBackend``: levels L0-L3 and the session log in PostgreSQL, shared by many hosts.

Each operation is one transaction (see :mod:`._pg_pool`), written once as a generator of
statements and driven by the sync pool or the native async pool. The scope row
(``scopes``, keyed ``(user_id, session_id)``) is the scope's lock: every write upserts it
first, so read-modify-write cycles (state, plans, working-memory compare-and-swap) and message
numbering serialize per scope across processes and hosts, and a host killed mid-transaction
leaves nothing behind (PostgreSQL rolls the transaction back).

Tool outputs are split into chunks of :data:`CHUNK_CHARS` characters, so a page reads only the
chunks it covers; the text goes in as UTF-8 ``bytea`` and comes back exactly, NUL included.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from pydantic import ValidationError

from local_ai_memory._backends.postgres.pool import Database, Op, Stmt
from local_ai_memory._backends.postgres.storage import PgStorage, database_of, pack, settings_of, unpack
from local_ai_memory._contracts.runtime import (
    Erasure,
    PlansChange,
    PlanSteps,
    RuntimeBackend,
    Scope,
    ScopeInfo,
    StateChange,
    StepsChange,
    join_step,
    split_step,
)
from local_ai_memory._shared.config import MemoryConfig
from local_ai_memory._shared.errors import InvalidInputError, LockTimeoutError, RecordNotFoundError, StorageError
from local_ai_memory._shared.records import (
    StoredMessage,
    ToolIndexEntry,
    ToolResultPage,
    ToolResultPayload,
    page_between,
    page_of,
)

__all__ = ["CHUNK_CHARS", "PostgresRuntimeBackend"]

CHUNK_CHARS = 64 * 1024
"""Characters of a tool output per stored chunk (at most 256 KB of UTF-8): a page reads one or two."""

_VISIBLE = "NOT EXISTS (SELECT 1 FROM {s}.erasures e WHERE e.user_id = %s AND e.session_id IN ('', %s))"
_TOUCH = (
    "INSERT INTO {s}.scopes AS c (user_id, session_id) VALUES (%s, %s) ON CONFLICT (user_id, session_id)"
    " DO UPDATE SET modified = extract(epoch FROM clock_timestamp())"
)
_LOCK_CLASS = 0x4C41494E  # advisory locks of scope maintenance (one below is the schema's)


def _ids(scope: Scope) -> tuple[str, str]:
    """The scope's key columns; the unscoped memory is ``('', '')`` (ids are never empty)."""
    return scope.user_id or "", scope.session_id or ""


def _pack_step(step: dict[str, Any]) -> bytes:
    """A step's row body: its JSON, or for a step with ``bytes`` values (:func:`split_step`) the
    JSON header, a NUL byte (JSON text never holds one: it escapes control characters) and the
    values raw."""
    header, values = split_step(step)
    return pack(header) if values is None else pack(header) + b"\x00" + values


def _unpack_step(raw: bytes | memoryview) -> dict[str, Any]:
    """The step :func:`_pack_step` stored (a body without a NUL byte is plain JSON, as every body
    written before steps could hold bytes)."""
    data = bytes(raw)
    cut = data.find(b"\x00")
    if cut < 0:
        found: dict[str, Any] = unpack(data)
        return found
    return join_step(unpack(data[:cut]), memoryview(data)[cut + 1 :])


def _not_found(scope: Scope, result_id: str) -> RecordNotFoundError:
    return RecordNotFoundError(f"no tool result {result_id!r} in {scope.describe()} (it may have been pruned)")


def _split_output(payload: Any) -> tuple[dict[str, Any], str] | None:
    """``(payload without content, content)`` of a tool output that pages by its ``content``."""
    if not isinstance(payload, dict) or not isinstance(payload.get("content"), str):
        return None
    meta = {key: value for key, value in payload.items() if key != "content"}
    try:
        ToolResultPayload.model_validate({**meta, "content": ""})
    except ValidationError:
        return None
    return meta, payload["content"]


def _chunks(text: str) -> list[bytes]:
    return [text[i : i + CHUNK_CHARS].encode("utf-8", "surrogatepass") for i in range(0, len(text), CHUNK_CHARS)]


def _text(rows: Sequence[Sequence[Any]]) -> str:
    return "".join(bytes(row[-1]).decode("utf-8", "surrogatepass") for row in rows)


class PostgresRuntimeBackend(PgStorage, RuntimeBackend):
    """Runtime memory in a PostgreSQL schema; any number of processes and hosts may share it.

    ``url`` is a libpq connection string (``postgresql://user@host:5432/db``); the schema is
    created or upgraded by :meth:`setup` or by the first operation.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        schema: str = "local_ai_memory",
        pool_min_size: int = 1,
        pool_max_size: int = 10,
        pool_timeout: float = 30.0,
        connect_timeout: float = 10.0,
        prepare_threshold: int | None = 5,
        lock_timeout: float = 30.0,
        database: Database | None = None,
    ) -> None:
        settings = (schema, pool_min_size, pool_max_size, pool_timeout, connect_timeout, prepare_threshold)
        super().__init__(database_of("PostgresRuntimeBackend", database, url, settings))
        self.lock_timeout = lock_timeout
        self._held = threading.local()

    @classmethod
    def from_config(cls, config: MemoryConfig) -> PostgresRuntimeBackend:
        """The backend of ``config.database_url`` and the ``database_*`` settings."""
        return cls(database=Database(settings_of(config)), lock_timeout=config.lock_timeout)

    def __repr__(self) -> str:
        return f"PostgresRuntimeBackend({self.db.where}, schema {self.db.settings.schema})"

    # -- L0 state -----------------------------------------------------------------------

    def _get_column(self, column: str, scope: Scope) -> Op[Any]:
        u, s = _ids(scope)
        row = yield Stmt(
            self.db.q(f"SELECT {column} FROM {{s}}.scopes WHERE user_id = %s AND session_id = %s AND {_VISIBLE}"),
            (u, s, u, s),
            "one",
        )
        return None if row is None else row[0]

    def _get_state(self, scope: Scope) -> Op[dict[str, Any]]:
        raw = yield from self._get_column("state", scope)
        return {} if raw is None else dict(unpack(raw))

    def _update_state(self, scope: Scope, change: StateChange) -> Op[dict[str, Any]]:
        row = yield Stmt(self.db.q(_TOUCH + " RETURNING c.state"), _ids(scope), "one")
        new = change({} if row[0] is None else unpack(row[0]))
        yield Stmt(
            self.db.q("UPDATE {s}.scopes SET state = %s WHERE user_id = %s AND session_id = %s"),
            (pack(new), *_ids(scope)),
        )
        return new

    def get_state(self, scope: Scope) -> dict[str, Any]:
        return self.run("get_state", self._get_state(scope))

    async def aget_state(self, scope: Scope) -> dict[str, Any]:
        return await self.arun("get_state", self._get_state(scope))

    def update_state(self, scope: Scope, change: StateChange) -> dict[str, Any]:
        return self.run("update_state", self._update_state(scope, change))

    async def aupdate_state(self, scope: Scope, change: StateChange) -> dict[str, Any]:
        return await self.arun("update_state", self._update_state(scope, change))

    # -- L1 working memory --------------------------------------------------------------

    def _get_working(self, scope: Scope) -> Op[str]:
        raw = yield from self._get_column("working", scope)
        return "" if raw is None else bytes(raw).decode("utf-8", "surrogatepass")

    def _swap_working(self, scope: Scope, expected: str | None, text: str) -> Op[str | None]:
        row = yield Stmt(self.db.q(_TOUCH + " RETURNING c.working"), _ids(scope), "one")
        current = "" if row[0] is None else bytes(row[0]).decode("utf-8", "surrogatepass")
        if expected is not None and current != expected:
            return current
        yield Stmt(
            self.db.q("UPDATE {s}.scopes SET working = %s WHERE user_id = %s AND session_id = %s"),
            (text.encode("utf-8", "surrogatepass"), *_ids(scope)),
        )
        return None

    def get_working_memory(self, scope: Scope) -> str:
        return self.run("get_working_memory", self._get_working(scope))

    async def aget_working_memory(self, scope: Scope) -> str:
        return await self.arun("get_working_memory", self._get_working(scope))

    def swap_working_memory(self, scope: Scope, expected: str | None, text: str) -> str | None:
        return self.run("swap_working_memory", self._swap_working(scope, expected, text))

    async def aswap_working_memory(self, scope: Scope, expected: str | None, text: str) -> str | None:
        return await self.arun("swap_working_memory", self._swap_working(scope, expected, text))

    # -- L2 plans and step logs ---------------------------------------------------------

    def _get_plans(self, scope: Scope) -> Op[dict[str, Any]]:
        raw = yield from self._get_column("plans", scope)
        return {} if raw is None else dict(unpack(raw))

    def _update_plans(self, scope: Scope, change: PlansChange) -> Op[dict[str, Any]]:
        row = yield Stmt(self.db.q(_TOUCH + " RETURNING c.plans"), _ids(scope), "one")
        current: dict[str, Any] = {} if row[0] is None else unpack(row[0])
        new = change(dict(current))
        if new is None:
            return current
        yield Stmt(
            self.db.q("UPDATE {s}.scopes SET plans = %s WHERE user_id = %s AND session_id = %s"),
            (pack(new), *_ids(scope)),
        )
        gone = sorted(set(current) - set(new))
        if gone:
            yield Stmt(
                self.db.q("DELETE FROM {s}.plan_steps WHERE user_id = %s AND session_id = %s AND plan_id = ANY(%s)"),
                (*_ids(scope), gone),
            )
        return new

    def _append_steps(self, scope: Scope, plan_id: str, steps: Sequence[dict[str, Any]]) -> Op[bool]:
        """Under the scope row's lock (``_TOUCH``), so step ids grow in commit order per scope."""
        empty = (
            "SELECT NOT EXISTS (SELECT 1 FROM {s}.plan_steps WHERE user_id = %s AND session_id = %s AND plan_id = %s)"
        )
        if not steps:
            row = yield Stmt(self.db.q(empty), (*_ids(scope), plan_id), "one")
            return bool(row[0])
        yield Stmt(self.db.q(_TOUCH), _ids(scope))
        row = yield Stmt(
            self.db.q(
                "WITH before AS (" + empty + " AS was_empty), added AS ("
                "INSERT INTO {s}.plan_steps (user_id, session_id, plan_id, body)"
                " SELECT %s, %s, %s, body FROM unnest(%s::bytea[]) WITH ORDINALITY AS t(body, n) ORDER BY n"
                " RETURNING 1) SELECT was_empty FROM before"
            ),
            (*_ids(scope), plan_id, *_ids(scope), plan_id, [_pack_step(step) for step in steps]),
            "one",
        )
        return bool(row[0])

    def _get_steps(self, scope: Scope, plan_id: str) -> Op[list[dict[str, Any]]]:
        u, s = _ids(scope)
        rows = yield Stmt(
            self.db.q(
                "SELECT body FROM {s}.plan_steps WHERE user_id = %s AND session_id = %s AND plan_id = %s"
                f" AND {_VISIBLE} ORDER BY id"
            ),
            (u, s, plan_id, u, s),
            "all",
        )
        return [_unpack_step(row[0]) for row in rows]

    def _read_steps(self, scope: Scope, plan_id: str, cursor: str | None) -> Op[PlanSteps]:
        """From the last step read on (``id >= cursor``): step ids are never reused and a log is only
        ever deleted whole, so while that step is still there nothing before it changed. When it
        is not in this log (the log begun anew, or a cursor of another log or store), the whole
        log is read again: the steps after a foreign id are not this log's news."""
        u, s = _ids(scope)
        head, _, number = (cursor or "").partition(":")
        after = int(number) if head == "pg" and number.isdigit() else 0
        query = self.db.q(
            "SELECT id, body FROM {s}.plan_steps WHERE user_id = %s AND session_id = %s AND plan_id = %s"
            f" AND id >= %s AND {_VISIBLE} ORDER BY id"
        )
        rows = yield Stmt(query, (u, s, plan_id, after, u, s), "all")
        continued = bool(rows) and after > 0 and rows[0][0] == after
        if after > 0 and not continued:
            rows = yield Stmt(query, (u, s, plan_id, 0, u, s), "all")
        found = rows[1:] if continued else rows
        last = rows[-1][0] if rows else 0
        return PlanSteps([_unpack_step(row[1]) for row in found], f"pg:{last}", not continued)

    def _clear_steps(self, scope: Scope, plan_id: str) -> Op[None]:
        yield Stmt(
            self.db.q("DELETE FROM {s}.plan_steps WHERE user_id = %s AND session_id = %s AND plan_id = %s"),
            (*_ids(scope), plan_id),
        )

    def _rewrite_steps(self, scope: Scope, plan_id: str, change: StepsChange) -> Op[list[dict[str, Any]]]:
        """In one transaction under the scope row's lock (appends take it too): the old rows go and
        the new ones get new ids, so a reader's cursor (a row id now gone) reads the log anew."""
        yield Stmt(self.db.q(_TOUCH), _ids(scope))
        current = yield from self._get_steps(scope, plan_id)
        new = change([dict(step) for step in current])
        if new is None:
            return current
        yield from self._clear_steps(scope, plan_id)
        if new:
            yield Stmt(
                self.db.q(
                    "INSERT INTO {s}.plan_steps (user_id, session_id, plan_id, body)"
                    " SELECT %s, %s, %s, body FROM unnest(%s::bytea[]) WITH ORDINALITY AS t(body, n) ORDER BY n"
                ),
                (*_ids(scope), plan_id, [_pack_step(step) for step in new]),
            )
        return new

    def _step_bytes(self, scope: Scope) -> Op[dict[str, int]]:
        u, s = _ids(scope)
        rows = yield Stmt(
            self.db.q(
                "SELECT plan_id, sum(octet_length(body)) FROM {s}.plan_steps"
                f" WHERE user_id = %s AND session_id = %s AND {_VISIBLE} GROUP BY plan_id"
            ),
            (u, s, u, s),
            "all",
        )
        return {plan_id: int(size) for plan_id, size in rows}

    def plan_step_bytes(self, scope: Scope) -> dict[str, int]:
        return self.run("plan_step_bytes", self._step_bytes(scope))

    async def aplan_step_bytes(self, scope: Scope) -> dict[str, int]:
        return await self.arun("plan_step_bytes", self._step_bytes(scope))

    def rewrite_plan_steps(self, scope: Scope, plan_id: str, change: StepsChange) -> list[dict[str, Any]]:
        return self.run("rewrite_plan_steps", self._rewrite_steps(scope, plan_id, change))

    async def arewrite_plan_steps(self, scope: Scope, plan_id: str, change: StepsChange) -> list[dict[str, Any]]:
        return await self.arun("rewrite_plan_steps", self._rewrite_steps(scope, plan_id, change))

    def get_plans(self, scope: Scope) -> dict[str, Any]:
        return self.run("get_plans", self._get_plans(scope), read=True)

    async def aget_plans(self, scope: Scope) -> dict[str, Any]:
        return await self.arun("get_plans", self._get_plans(scope), read=True)

    def update_plans(self, scope: Scope, change: PlansChange) -> dict[str, Any]:
        return self.run("update_plans", self._update_plans(scope, change))

    async def aupdate_plans(self, scope: Scope, change: PlansChange) -> dict[str, Any]:
        return await self.arun("update_plans", self._update_plans(scope, change))

    def append_plan_steps(self, scope: Scope, plan_id: str, steps: Sequence[dict[str, Any]]) -> bool:
        return self.run("append_plan_steps", self._append_steps(scope, plan_id, steps))

    async def aappend_plan_steps(self, scope: Scope, plan_id: str, steps: Sequence[dict[str, Any]]) -> bool:
        return await self.arun("append_plan_steps", self._append_steps(scope, plan_id, steps))

    def read_plan_steps(self, scope: Scope, plan_id: str, cursor: str | None = None) -> PlanSteps:
        return self.run("read_plan_steps", self._read_steps(scope, plan_id, cursor), read=True)

    async def aread_plan_steps(self, scope: Scope, plan_id: str, cursor: str | None = None) -> PlanSteps:
        return await self.arun("read_plan_steps", self._read_steps(scope, plan_id, cursor), read=True)

    def get_plan_steps(self, scope: Scope, plan_id: str) -> list[dict[str, Any]]:
        return self.run("get_plan_steps", self._get_steps(scope, plan_id), read=True)

    async def aget_plan_steps(self, scope: Scope, plan_id: str) -> list[dict[str, Any]]:
        return await self.arun("get_plan_steps", self._get_steps(scope, plan_id), read=True)

    def clear_plan_steps(self, scope: Scope, plan_id: str) -> None:
        self.run("clear_plan_steps", self._clear_steps(scope, plan_id))

    async def aclear_plan_steps(self, scope: Scope, plan_id: str) -> None:
        await self.arun("clear_plan_steps", self._clear_steps(scope, plan_id))

    # -- L3 tool results ----------------------------------------------------------------

    def _exists(self, result_id: str) -> Op[bool]:
        row = yield Stmt(self.db.q("SELECT 1 FROM {s}.tool_results WHERE result_id = %s"), (result_id,), "one")
        return row is not None

    def _save_result(self, scope: Scope, result_id: str, payload: Any) -> Op[int]:
        split = _split_output(payload)
        chunks = _chunks(split[1]) if split is not None else []
        meta = pack(split[0] if split is not None else payload)
        total = len(split[1]) if split is not None else 0
        size = len(meta) + sum(len(chunk) for chunk in chunks)
        u, s = _ids(scope)
        yield Stmt(self.db.q(_TOUCH), (u, s))
        row = yield Stmt(
            self.db.q(
                "INSERT INTO {s}.tool_results AS r (user_id, session_id, result_id, meta, paged, total_chars,"
                " chunk_chars, size, saved_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, extract(epoch FROM"
                " clock_timestamp())) ON CONFLICT (result_id) DO UPDATE SET meta = EXCLUDED.meta,"
                " paged = EXCLUDED.paged, total_chars = EXCLUDED.total_chars, chunk_chars = EXCLUDED.chunk_chars,"
                " size = EXCLUDED.size, saved_at = EXCLUDED.saved_at"
                " WHERE r.user_id = EXCLUDED.user_id AND r.session_id = EXCLUDED.session_id RETURNING 1"
            ),
            (u, s, result_id, meta, split is not None, total, CHUNK_CHARS, size),
            "one",
        )
        if row is None:
            raise InvalidInputError(f"tool result id {result_id!r} is taken by another scope")
        yield Stmt(
            self.db.q("DELETE FROM {s}.tool_result_chunks WHERE user_id = %s AND session_id = %s AND result_id = %s"),
            (u, s, result_id),
        )
        if chunks:
            yield Stmt(
                self.db.q(
                    "INSERT INTO {s}.tool_result_chunks (user_id, session_id, result_id, idx, data)"
                    " VALUES (%s, %s, %s, %s, %s)"
                ),
                many=[(u, s, result_id, index, chunk) for index, chunk in enumerate(chunks)],
            )
        return size

    def _result_head(self, scope: Scope, result_id: str) -> Op[tuple[bool, int, int, Any]]:
        u, s = _ids(scope)
        row = yield Stmt(
            self.db.q(
                "SELECT paged, total_chars, chunk_chars, meta FROM {s}.tool_results"
                f" WHERE user_id = %s AND session_id = %s AND result_id = %s AND {_VISIBLE}"
            ),
            (u, s, result_id, u, s),
            "one",
        )
        if row is None:
            raise _not_found(scope, result_id)
        return bool(row[0]), int(row[1]), int(row[2]), unpack(row[3])

    def _chunk_rows(self, scope: Scope, result_id: str, first: int, last: int) -> Stmt:
        return Stmt(
            self.db.q(
                "SELECT idx, data FROM {s}.tool_result_chunks WHERE user_id = %s AND session_id = %s"
                " AND result_id = %s AND idx BETWEEN %s AND %s ORDER BY idx"
            ),
            (*_ids(scope), result_id, first, last),
            "all",
        )

    def _load_result(self, scope: Scope, result_id: str) -> Op[Any]:
        paged, _, _, meta = yield from self._result_head(scope, result_id)
        if not paged:
            return meta
        rows = yield self._chunk_rows(scope, result_id, 0, 2**31 - 1)
        return {**meta, "content": _text(rows)}

    def _read_page(self, scope: Scope, result_id: str, offset: int, limit: int) -> Op[ToolResultPage]:
        paged, total, chunk, meta = yield from self._result_head(scope, result_id)
        if not paged:
            return page_of(result_id, meta, offset, limit)
        start = min(max(offset, 0), total)
        end = min(start + max(limit, 0), total)
        piece = ""
        if end > start:
            first, last = start // chunk, (end - 1) // chunk
            rows = yield self._chunk_rows(scope, result_id, first, last)
            piece = _text(rows)[start - first * chunk : end - first * chunk]
        tool = ToolResultPayload.model_validate({**meta, "content": ""}).tool
        return page_between(result_id, tool, piece, start, end, total)

    def _list_results(self, scope: Scope) -> Op[dict[str, ToolIndexEntry]]:
        u, s = _ids(scope)
        rows = yield Stmt(
            self.db.q(
                "SELECT result_id, size, saved_at FROM {s}.tool_results"
                f" WHERE user_id = %s AND session_id = %s AND {_VISIBLE} ORDER BY result_id"
            ),
            (u, s, u, s),
            "all",
        )
        return {row[0]: ToolIndexEntry(size=row[1], saved_at=row[2]) for row in rows}

    def _count_results(self, scope: Scope) -> Op[int]:
        u, s = _ids(scope)
        row = yield Stmt(
            self.db.q(f"SELECT count(*) FROM {{s}}.tool_results WHERE user_id = %s AND session_id = %s AND {_VISIBLE}"),
            (u, s, u, s),
            "one",
        )
        return int(row[0])

    def _delete_results(self, scope: Scope, result_ids: Sequence[str]) -> Op[list[str]]:
        rows = yield Stmt(
            self.db.q(
                "DELETE FROM {s}.tool_results WHERE user_id = %s AND session_id = %s AND result_id = ANY(%s)"
                " RETURNING result_id"
            ),
            (*_ids(scope), list(dict.fromkeys(result_ids))),
            "all",
        )
        deleted = {row[0] for row in rows}
        return [result_id for result_id in dict.fromkeys(result_ids) if result_id in deleted]

    def tool_result_exists(self, result_id: str) -> bool:
        return self.run("tool_result_exists", self._exists(result_id))

    async def atool_result_exists(self, result_id: str) -> bool:
        return await self.arun("tool_result_exists", self._exists(result_id))

    def save_tool_result(self, scope: Scope, result_id: str, payload: Any) -> int:
        return self.run("save_tool_result", self._save_result(scope, result_id, payload))

    async def asave_tool_result(self, scope: Scope, result_id: str, payload: Any) -> int:
        return await self.arun("save_tool_result", self._save_result(scope, result_id, payload))

    def load_tool_result(self, scope: Scope, result_id: str) -> Any:
        return self.run("load_tool_result", self._load_result(scope, result_id))

    async def aload_tool_result(self, scope: Scope, result_id: str) -> Any:
        return await self.arun("load_tool_result", self._load_result(scope, result_id))

    def read_tool_result_page(self, scope: Scope, result_id: str, offset: int, limit: int) -> ToolResultPage:
        return self.run("read_tool_result_page", self._read_page(scope, result_id, offset, limit))

    async def aread_tool_result_page(self, scope: Scope, result_id: str, offset: int, limit: int) -> ToolResultPage:
        return await self.arun("read_tool_result_page", self._read_page(scope, result_id, offset, limit))

    def list_tool_results(self, scope: Scope) -> dict[str, ToolIndexEntry]:
        return self.run("list_tool_results", self._list_results(scope))

    async def alist_tool_results(self, scope: Scope) -> dict[str, ToolIndexEntry]:
        return await self.arun("list_tool_results", self._list_results(scope))

    def count_tool_results(self, scope: Scope) -> int:
        return self.run("count_tool_results", self._count_results(scope))

    async def acount_tool_results(self, scope: Scope) -> int:
        return await self.arun("count_tool_results", self._count_results(scope))

    def delete_tool_results(self, scope: Scope, result_ids: Sequence[str]) -> list[str]:
        return self.run("delete_tool_results", self._delete_results(scope, result_ids))

    async def adelete_tool_results(self, scope: Scope, result_ids: Sequence[str]) -> list[str]:
        return await self.arun("delete_tool_results", self._delete_results(scope, result_ids))

    # -- session messages ---------------------------------------------------------------

    def _append_messages(self, scope: Scope, messages: Sequence[StoredMessage]) -> Op[list[int]]:
        if not messages:
            return []
        u, s = _ids(scope)
        row = yield Stmt(
            self.db.q(
                "INSERT INTO {s}.scopes AS c (user_id, session_id, next_seq) VALUES (%s, %s, %s)"
                " ON CONFLICT (user_id, session_id) DO UPDATE SET next_seq = c.next_seq + EXCLUDED.next_seq,"
                " modified = extract(epoch FROM clock_timestamp()) RETURNING c.next_seq"
            ),
            (u, s, len(messages)),
            "one",
        )
        first = int(row[0]) - len(messages)
        bodies = [pack(message.model_dump(mode="json", exclude={"seq"})) for message in messages]
        yield Stmt(
            self.db.q(
                "INSERT INTO {s}.messages (user_id, session_id, seq, body)"
                " SELECT %s, %s, %s + n - 1, body FROM unnest(%s::bytea[]) WITH ORDINALITY AS t(body, n)"
            ),
            (u, s, first, bodies),
        )
        return list(range(first, first + len(messages)))

    def _get_messages(self, scope: Scope) -> Op[list[StoredMessage]]:
        u, s = _ids(scope)
        rows = yield Stmt(
            self.db.q(
                "SELECT seq, body FROM {s}.messages"
                f" WHERE user_id = %s AND session_id = %s AND {_VISIBLE} ORDER BY seq"
            ),
            (u, s, u, s),
            "all",
        )
        return [StoredMessage.model_validate({**unpack(row[1]), "seq": row[0]}) for row in rows]

    def _compact_messages(self, scope: Scope, keep_last: int) -> Op[int]:
        u, s = _ids(scope)
        yield Stmt(self.db.q(_TOUCH), (u, s))
        count = yield Stmt(
            self.db.q(
                "DELETE FROM {s}.messages WHERE user_id = %s AND session_id = %s AND seq < coalesce((SELECT min(seq)"
                " FROM (SELECT seq FROM {s}.messages WHERE user_id = %s AND session_id = %s ORDER BY seq DESC"
                " LIMIT %s) AS kept), 9223372036854775807)"
            ),
            (u, s, u, s, max(keep_last, 0)),
            "rowcount",
        )
        return int(count)

    def _clear_messages(self, scope: Scope) -> Op[bool]:
        u, s = _ids(scope)
        row = yield Stmt(
            self.db.q("SELECT next_seq FROM {s}.scopes WHERE user_id = %s AND session_id = %s FOR UPDATE"),
            (u, s),
            "one",
        )
        if row is None:
            return False
        yield Stmt(self.db.q("UPDATE {s}.scopes SET next_seq = 0 WHERE user_id = %s AND session_id = %s"), (u, s))
        count = yield Stmt(
            self.db.q("DELETE FROM {s}.messages WHERE user_id = %s AND session_id = %s"), (u, s), "rowcount"
        )
        return bool(count) or int(row[0]) > 0

    def _pop_message(self, scope: Scope) -> Op[StoredMessage | None]:
        u, s = _ids(scope)
        row = yield Stmt(  # the scope row's lock orders this pop with appends (they number through it)
            self.db.q("SELECT next_seq FROM {s}.scopes WHERE user_id = %s AND session_id = %s FOR UPDATE"),
            (u, s),
            "one",
        )
        if row is None:
            return None
        found = yield Stmt(
            self.db.q(
                "DELETE FROM {s}.messages WHERE user_id = %s AND session_id = %s AND seq = (SELECT max(seq)"
                f" FROM {{s}}.messages WHERE user_id = %s AND session_id = %s) AND {_VISIBLE} RETURNING seq, body"
            ),
            (u, s, u, s, u, s),
            "one",
        )
        if found is None:
            return None
        yield Stmt(
            self.db.q("UPDATE {s}.scopes SET next_seq = %s WHERE user_id = %s AND session_id = %s"), (found[0], u, s)
        )
        return StoredMessage.model_validate({**unpack(found[1]), "seq": found[0]})

    def append_messages(self, scope: Scope, messages: Sequence[StoredMessage]) -> list[int]:
        return self.run("append_messages", self._append_messages(scope, messages))

    async def aappend_messages(self, scope: Scope, messages: Sequence[StoredMessage]) -> list[int]:
        return await self.arun("append_messages", self._append_messages(scope, messages))

    def get_messages(self, scope: Scope) -> list[StoredMessage]:
        return self.run("get_messages", self._get_messages(scope))

    async def aget_messages(self, scope: Scope) -> list[StoredMessage]:
        return await self.arun("get_messages", self._get_messages(scope))

    def compact_messages(self, scope: Scope, keep_last: int) -> int:
        return self.run("compact_messages", self._compact_messages(scope, keep_last))

    async def acompact_messages(self, scope: Scope, keep_last: int) -> int:
        return await self.arun("compact_messages", self._compact_messages(scope, keep_last))

    def clear_messages(self, scope: Scope) -> bool:
        return self.run("clear_messages", self._clear_messages(scope))

    async def aclear_messages(self, scope: Scope) -> bool:
        return await self.arun("clear_messages", self._clear_messages(scope))

    def pop_message(self, scope: Scope) -> StoredMessage | None:
        return self.run("pop_message", self._pop_message(scope))

    async def apop_message(self, scope: Scope) -> StoredMessage | None:
        return await self.arun("pop_message", self._pop_message(scope))

    # -- the scope as a whole ---------------------------------------------------------

    @contextlib.contextmanager
    def locked(self, scope: Scope) -> Iterator[None]:
        """The scope's maintenance lock: a PostgreSQL advisory lock, so it holds across hosts.

        Re-entrant within a thread; held on a connection of its own (not a pooled one), waited
        for at most ``lock_timeout`` seconds.
        """
        held: dict[str, int] = self._held.__dict__.setdefault("depth", {})
        if held.get(scope.key):
            held[scope.key] += 1
            try:
                yield
            finally:
                held[scope.key] -= 1
            return
        if not self.db.ready:
            self.setup()
        conn = self.db.connect()
        try:
            conn.autocommit = True
            try:
                timeout = f"{round(self.lock_timeout * 1000)}ms"
                conn.execute(self.db.q("SELECT set_config('lock_timeout', %s, false)"), (timeout,))
                conn.execute(self.db.q("SELECT pg_advisory_lock(%s, hashtext(%s))"), (_LOCK_CLASS, scope.key))
            except Exception as exc:
                import psycopg

                if isinstance(exc, psycopg.errors.LockNotAvailable):
                    raise LockTimeoutError(
                        f"{scope.describe()} stayed locked by another process for {self.lock_timeout:g} s"
                    ) from None
                if isinstance(exc, psycopg.Error):
                    raise StorageError(f"locking {scope.describe()} failed on PostgreSQL: {exc}") from exc
                raise
            held[scope.key] = 1
            try:
                yield
            finally:
                held.pop(scope.key, None)
        finally:
            conn.close()  # ends the session, which releases its advisory locks

    def _list_scopes(self, include_erased: bool) -> Op[list[ScopeInfo]]:
        hidden = (
            ""
            if include_erased
            else " WHERE NOT EXISTS (SELECT 1 FROM {s}.erasures e"
            "   WHERE e.user_id = c.user_id AND e.session_id IN ('', c.session_id))"
        )
        rows = yield Stmt(
            self.db.q(
                "SELECT c.user_id, c.session_id, c.modified, c.state, c.plans, coalesce(octet_length(c.working), 0),"
                " (SELECT count(*) FROM {s}.tool_results r"
                "   WHERE r.user_id = c.user_id AND r.session_id = c.session_id),"
                " (SELECT coalesce(sum(size), 0) FROM {s}.tool_results r"
                "   WHERE r.user_id = c.user_id AND r.session_id = c.session_id),"
                " (SELECT count(*) FROM {s}.messages m WHERE m.user_id = c.user_id AND m.session_id = c.session_id),"
                " (SELECT coalesce(sum(octet_length(body)), 0) FROM {s}.messages m"
                "   WHERE m.user_id = c.user_id AND m.session_id = c.session_id)"
                " + (SELECT coalesce(sum(octet_length(body)), 0) FROM {s}.plan_steps p"
                "   WHERE p.user_id = c.user_id AND p.session_id = c.session_id)"
                " FROM {s}.scopes c" + hidden + " ORDER BY c.user_id, c.session_id"
            ),
            fetch="all",
        )
        infos = []
        for user, session, modified, state, plans, working, results, result_bytes, messages, message_bytes in rows:
            empty = not (
                (state is not None and unpack(state))
                or working
                or (plans is not None and unpack(plans))
                or results
                or messages
            )
            if empty and not include_erased:  # an emptied row still names its ids: erasing finds it
                continue
            scope = Scope() if user == "" else Scope.of(user, session)
            infos.append(ScopeInfo(scope, int(result_bytes) + int(working) + int(message_bytes), float(modified)))
        return sorted(infos, key=lambda info: info.scope.key)

    def list_scopes(self, *, include_erased: bool = False) -> list[ScopeInfo]:
        return self.run("list_scopes", self._list_scopes(include_erased))

    async def alist_scopes(self, *, include_erased: bool = False) -> list[ScopeInfo]:
        return await self.arun("list_scopes", self._list_scopes(include_erased))

    # -- lifecycle ----------------------------------------------------------------------

    def _delete_scope(self, scope: Scope) -> Op[int]:
        u, s = _ids(scope)
        row = yield Stmt(
            self.db.q(
                "SELECT coalesce(octet_length(state), 0) + coalesce(octet_length(working), 0)"
                " + coalesce(octet_length(plans), 0) FROM {s}.scopes WHERE user_id = %s AND session_id = %s FOR UPDATE"
            ),
            (u, s),
            "one",
        )
        if row is None:
            return 0
        removed = int(row[0])
        for table, column in (("tool_results", "size"), ("messages", "octet_length(body)")):
            found = yield Stmt(
                self.db.q(
                    f"WITH gone AS (DELETE FROM {{s}}.{table} WHERE user_id = %s AND session_id = %s"
                    f" RETURNING {column} AS n) SELECT coalesce(sum(n), 0) FROM gone"
                ),
                (u, s),
                "one",
            )
            removed += int(found[0])
        found = yield Stmt(
            self.db.q(
                "WITH gone AS (DELETE FROM {s}.plan_steps WHERE user_id = %s AND session_id = %s"
                " RETURNING octet_length(body) AS n) SELECT coalesce(sum(n), 0) FROM gone"
            ),
            (u, s),
            "one",
        )
        removed += int(found[0])
        yield Stmt(self.db.q("DELETE FROM {s}.scopes WHERE user_id = %s AND session_id = %s"), (u, s))
        return removed

    def delete_scope(self, scope: Scope) -> int:
        return self.run("delete_scope", self._delete_scope(scope))

    async def adelete_scope(self, scope: Scope) -> int:
        return await self.arun("delete_scope", self._delete_scope(scope))

    def _begin_erasure(self, erasure: Erasure) -> Op[None]:
        yield Stmt(
            self.db.q("INSERT INTO {s}.erasures (user_id, session_id) VALUES (%s, %s) ON CONFLICT DO NOTHING"),
            (erasure.user_id, erasure.session_id or ""),
        )

    def _end_erasure(self, erasure: Erasure) -> Op[None]:
        yield Stmt(
            self.db.q("DELETE FROM {s}.erasures WHERE user_id = %s AND session_id = %s"),
            (erasure.user_id, erasure.session_id or ""),
        )

    def _pending(self) -> Op[list[Erasure]]:
        rows = yield Stmt(self.db.q("SELECT user_id, session_id FROM {s}.erasures ORDER BY id"), fetch="all")
        return [Erasure(user, session or None) for user, session in rows]

    def begin_erasure(self, erasure: Erasure) -> None:
        self.run("begin_erasure", self._begin_erasure(erasure))

    def end_erasure(self, erasure: Erasure) -> None:
        self.run("end_erasure", self._end_erasure(erasure))

    def pending_erasures(self) -> list[Erasure]:
        return self.run("pending_erasures", self._pending())
