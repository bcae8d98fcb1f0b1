"""``MemoryManager``: the runtime memory of an agent (levels L0 to L3) in plain files.

Layout under ``{guard.root}/memory/`` (``{scope}`` is :func:`scope_name` of the user and
session, e.g. ``alice_s1``; the unscoped manager uses the stem ``global``, which can never be
a scope name because scope names always contain ``_``)::

    state/{scope}.json          L0  {"format_version": 1, "updated_at": ..., "state": {...}}
    working/{scope}.md          L1  Markdown text
    plans/{scope}.json          L2  {"format_version": 1, "updated_at": ..., "plans": {plan_id: RECORD}}
    tool_results/{id}.json      L3  RECORD (ids are global; any manager can load any id)
    tool_index/{scope}/{id}.ref     empty marker: the scope owns result {id} (for retention)

where ``RECORD`` is ``{"format_version": 1, "id": ..., "saved_at": ..., "payload": ...}``.

**Migration.** The first time a scoped manager is used, global files left by an unscoped
manager move into the scope: each of ``state``, ``working`` and ``plans`` is renamed to the
scope's file if the scope has none yet (under the locks of both files, so exactly one scope
adopts them, once), and the global tool-result markers move to the scope. Do not keep using
an unscoped manager next to scoped ones: its new files would be adopted by the next new scope.

**Tool-result ownership.** Retention works per scope, but result files are named by id only.
A scope owns a result when ``tool_index/{scope}/{id}.ref`` exists; its size and age come from
the result file's ``stat``. Markers are created (never rewritten), so saving a result costs no
read-modify-write of a shared index. The marker is written before the result, so a crash can
only leave a marker without a result, which listing removes after a minute, never a result
that no scope owns.

**Safety.** Every write is atomic (temporary file, fsync, rename, fsync of the folder when
``config.fsync``); every read-modify-write holds the record's thread and process lock. A file
that does not parse is moved to ``{name}.corrupt.bak``, ``MEMORY_CORRUPT`` is logged and the
level's default is returned; a file written by a newer ``format_version`` raises
:class:`UnsupportedFormatError` and is never overwritten.

Every method has an async twin with an ``a`` prefix that runs it in a worker thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator, Mapping
from typing import Any

from ._config import MemoryConfig
from ._envelopes import (
    FORMAT_VERSION,
    CorruptRecordError,
    PlanFile,
    RecordEnvelope,
    StateEnvelope,
    ToolIndexEntry,
    check_json_value,
    decode_model,
    encode_model,
    iter_json_bytes,
)
from ._errors import InvalidInputError, RecordNotFoundError, UnsupportedFormatError
from ._guard import DirectoryGuard, optional_scope, validate_id
from ._records import FileRecordFolder, RecordFolder, read_checked

__all__ = ["GLOBAL_STEM", "MemoryManager"]

GLOBAL_STEM = "global"
_DANGLING_AFTER = 60.0  # seconds before a marker without its result counts as left by a crash
_cleaned_roots: set[str] = set()


def _decode_state(raw: bytes) -> StateEnvelope:
    return decode_model(raw, StateEnvelope)


def _decode_plans(raw: bytes) -> PlanFile:
    plans = decode_model(raw, PlanFile)
    newest = max((record.format_version for record in plans.plans.values()), default=FORMAT_VERSION)
    if newest > FORMAT_VERSION:
        raise UnsupportedFormatError(
            f"holds a plan written by format_version {newest}; this library reads up to {FORMAT_VERSION}. "
            "Upgrade local-ai-memory to read it (the file was left untouched)."
        )
    return plans


def _decode_record(raw: bytes) -> RecordEnvelope:
    return decode_model(raw, RecordEnvelope)


def _decode_text(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptRecordError(f"not UTF-8 text: {exc}") from None


class _Counted:
    """Wraps a chunk iterator and counts the bytes that went through."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self.chunks = chunks
        self.size = 0

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self.chunks:
            self.size += len(chunk)
            yield chunk


class MemoryManager:
    """File-backed L0-L3 runtime memory, unscoped or bound to one ``(user_id, session_id)``.

    >>> import tempfile
    >>> manager = MemoryManager(DirectoryGuard(tempfile.mkdtemp())).scoped("alice", "s1")
    >>> manager.update_state({"current_task": "refactor auth", "current_step": 1})
    {'current_task': 'refactor auth', 'current_step': 1}
    >>> manager.save_plan("auth", {"steps": ["read", "write"]})
    >>> manager.load_plan("auth")
    {'steps': ['read', 'write']}
    """

    def __init__(
        self,
        guard: DirectoryGuard,
        config: MemoryConfig | None = None,
        *,
        user_id: str | None = None,
        session_id: str | None = None,
    ) -> None:
        self.scope = optional_scope(user_id, session_id)
        self.guard = guard
        self.config = config if config is not None else MemoryConfig()
        self.user_id = user_id
        self.session_id = session_id
        self._stem = self.scope if self.scope is not None else GLOBAL_STEM
        self._migrated = self.scope is None
        self.state_records: RecordFolder = self._folder("state", ".json")
        self.working_records: RecordFolder = self._folder("working", ".md")
        self.plan_records: RecordFolder = self._folder("plans", ".json")
        self.result_records: RecordFolder = self._folder("tool_results", ".json")
        self.index_records: RecordFolder = self._folder(f"tool_index/{self._stem}", ".ref")
        self._index_locks: RecordFolder = self._folder("tool_index", ".ref")

    def _folder(self, kind: str, suffix: str) -> RecordFolder:
        """The storage of one kind of record (the place a database backend would plug in)."""
        return FileRecordFolder(
            self.guard, f"memory/{kind}", suffix, durable=self.config.fsync, timeout=self.config.lock_timeout
        )

    def __repr__(self) -> str:
        where = f"scope={self.scope!r}" if self.scope else "unscoped"
        return f"MemoryManager({str(self.guard.root)!r}, {where})"

    @property
    def stem(self) -> str:
        """The file stem of this manager's records: the scope name, or ``global``."""
        return self._stem

    def scoped(self, user_id: str, session_id: str) -> MemoryManager:
        """A manager bound to ``(user_id, session_id)``, sharing root and config.

        Raises :class:`InvalidInputError` for a hostile or malformed id, before touching disk.
        """
        return MemoryManager(self.guard, self.config, user_id=user_id, session_id=session_id)

    # -- first use ----------------------------------------------------------------------

    def _ready(self) -> None:
        root = str(self.guard.root)
        if root not in _cleaned_roots:
            _cleaned_roots.add(root)
            self.cleanup_temp_files()
        if not self._migrated:
            self._migrate()
            self._migrated = True

    def cleanup_temp_files(self) -> int:
        """Remove temporary files left by writers that crashed; return how many (done once per process)."""
        removed = 0
        for folder in self._folders():
            if isinstance(folder, FileRecordFolder):
                removed += folder.cleanup()
        return removed

    def _folders(self) -> tuple[RecordFolder, ...]:
        return (self.state_records, self.working_records, self.plan_records, self.result_records, self.index_records)

    def _migrate(self) -> None:
        for folder in (self.state_records, self.working_records, self.plan_records):
            if folder.info(GLOBAL_STEM) is None:
                continue
            with folder.locked(GLOBAL_STEM), folder.locked(self._stem):
                folder.rename_if_absent(GLOBAL_STEM, self._stem)
        adopted = self._folder(f"tool_index/{GLOBAL_STEM}", ".ref")
        names = adopted.names()
        if not names:
            return
        with self._index_locks.locked(GLOBAL_STEM), self._index_locks.locked(self._stem):
            for result_id in adopted.names():
                self.index_records.write(result_id, b"")
                adopted.delete(result_id)

    # -- L0 state -----------------------------------------------------------------------

    def get_state(self) -> dict[str, Any]:
        """The L0 state of this scope (``{}`` when none is stored or the file was corrupt)."""
        self._ready()
        envelope = read_checked(self.state_records, self._stem, _decode_state)
        return envelope.state if envelope is not None else {}

    def update_state(self, patch: Mapping[str, Any]) -> dict[str, Any]:
        """Merge ``patch`` into the L0 state (top-level keys replace) and return the new state.

        Atomic across threads, tasks and processes: concurrent updates are never lost.
        """
        if not isinstance(patch, Mapping):
            raise InvalidInputError(f"state patch must be a mapping, got {type(patch).__name__}")
        check_json_value(patch, "state patch")
        self._ready()
        records = self.state_records
        with records.locked(self._stem):
            envelope = read_checked(records, self._stem, _decode_state)
            state = envelope.state if envelope is not None else {}
            state.update(patch)
            records.write(self._stem, encode_model(StateEnvelope(state=state)))
        return state

    # -- L1 working memory --------------------------------------------------------------

    def get_working_memory(self) -> str:
        """The L1 working-memory Markdown of this scope (``""`` when none)."""
        self._ready()
        text = read_checked(self.working_records, self._stem, _decode_text)
        return text if text is not None else ""

    def update_working_memory(self, text: str) -> None:
        """Replace the L1 working memory with ``text`` (atomically)."""
        self.swap_working_memory(None, text)

    def swap_working_memory(self, expected: str | None, text: str) -> str | None:
        """Write ``text`` if L1 still equals ``expected`` (``None``: unconditionally).

        Returns ``None`` when written, else the L1 text found, so a caller that read L1, worked
        on it for a while (an LLM call) and lost a race can merge instead of overwriting.
        """
        if not isinstance(text, str):
            raise InvalidInputError(f"working memory must be a string, got {type(text).__name__}")
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidInputError(f"working memory is not valid Unicode text: {exc}") from None
        self._ready()
        with self.working_records.locked(self._stem):
            if expected is not None:
                current = self.get_working_memory()
                if current != expected:
                    return current
            self.working_records.write(self._stem, data)
        return None

    # -- L2 plans -----------------------------------------------------------------------

    def save_plan(self, plan_id: str, payload: Any) -> None:
        """Store ``payload`` (any JSON value) as plan ``plan_id`` of this scope, replacing it.

        All plans of a scope share ``plans/{scope}.json`` as a map of id to record.
        """
        validate_id(plan_id, "plan id")
        check_json_value(payload, "plan payload")
        self._ready()
        records = self.plan_records
        with records.locked(self._stem):
            plans = read_checked(records, self._stem, _decode_plans) or PlanFile()
            plans.plans[plan_id] = RecordEnvelope(id=plan_id, payload=payload)
            records.write(self._stem, encode_model(PlanFile(plans=plans.plans)))

    def load_plan(self, plan_id: str) -> Any:
        """The payload of plan ``plan_id``; :class:`RecordNotFoundError` if this scope has none."""
        validate_id(plan_id, "plan id")
        plans = self.list_plans()
        if plan_id not in plans:
            raise RecordNotFoundError(f"no plan {plan_id!r} in {self._describe()}")
        return plans[plan_id]

    def list_plans(self) -> dict[str, Any]:
        """Every plan of this scope: ``{plan_id: payload}``."""
        self._ready()
        plans = read_checked(self.plan_records, self._stem, _decode_plans)
        if plans is None:
            return {}
        return {plan_id: record.payload for plan_id, record in plans.plans.items()}

    def delete_plan(self, plan_id: str) -> bool:
        """Remove plan ``plan_id``; return whether it existed."""
        validate_id(plan_id, "plan id")
        self._ready()
        records = self.plan_records
        with records.locked(self._stem):
            plans = read_checked(records, self._stem, _decode_plans)
            if plans is None or plans.plans.pop(plan_id, None) is None:
                return False
            records.write(self._stem, encode_model(PlanFile(plans=plans.plans)))
            return True

    # -- L3 tool results ----------------------------------------------------------------

    def save_tool_result(self, result_id: str, payload: Any) -> int:
        """Store ``payload`` (any JSON value) as tool result ``result_id``; return the bytes written.

        The file is streamed, so a 100 MB string is never copied whole. The scope's marker
        for the result is written first; retention (:meth:`ToolResultStore.prune`) uses it.
        """
        validate_id(result_id, "tool result id")
        check_json_value(payload, "tool result payload")
        self._ready()
        envelope = {"format_version": FORMAT_VERSION, "id": result_id, "saved_at": time.time(), "payload": payload}
        chunks = _Counted(iter_json_bytes(envelope))
        if self.index_records.info(result_id) is None:
            self.index_records.write(result_id, b"")
        self.result_records.write(result_id, chunks)
        return chunks.size

    def load_tool_result(self, result_id: str) -> Any:
        """The payload of tool result ``result_id``; :class:`RecordNotFoundError` if missing."""
        validate_id(result_id, "tool result id")
        self._ready()
        record = read_checked(self.result_records, result_id, _decode_record)
        if record is None:
            raise RecordNotFoundError(f"no tool result {result_id!r} (it may have been pruned)")
        return record.payload

    def tool_result_info(self, result_id: str) -> tuple[int, float] | None:
        """``(size, modified)`` of a stored tool result, or ``None``; cheap (no read)."""
        validate_id(result_id, "tool result id")
        info = self.result_records.info(result_id)
        return None if info is None else (info.size, info.modified)

    def list_tool_results(self) -> dict[str, ToolIndexEntry]:
        """The tool results this scope owns: ``{result_id: ToolIndexEntry(size, saved_at)}``."""
        self._ready()
        markers = self.index_records.list_info()
        results = self.result_records.infos(marker.name for marker in markers)
        now = time.time()
        for marker in markers:
            if marker.name not in results and now - marker.modified > _DANGLING_AFTER:
                self.index_records.delete(marker.name)  # its writer died before writing the result
        return {name: ToolIndexEntry(size=info.size, saved_at=info.modified) for name, info in results.items()}

    def count_tool_results(self) -> int:
        """How many results this scope owns (one folder listing; no ``stat`` per result)."""
        self._ready()
        return len(self.index_records.names())

    def delete_tool_results(self, result_ids: list[str]) -> list[str]:
        """Delete these results of this scope (files first, then index entries); return those deleted."""
        for result_id in result_ids:
            validate_id(result_id, "tool result id")
        self._ready()
        deleted: list[str] = []
        with self.tool_index_locked():
            for result_id in result_ids:
                if self.index_records.info(result_id) is None:
                    continue  # not this scope's result
                self.result_records.delete(result_id)
                self.index_records.delete(result_id)
                deleted.append(result_id)
        return deleted

    @contextlib.contextmanager
    def tool_index_locked(self) -> Iterator[None]:
        """Hold the lock of this scope's tool-result markers (prunes and migrations wait)."""
        with self._index_locks.locked(self._stem):
            yield

    def _describe(self) -> str:
        if self.scope is None:
            return "the unscoped memory"
        return f"scope ({self.user_id!r}, {self.session_id!r})"

    # -- async twins --------------------------------------------------------------------

    def _repr_html_(self) -> str:
        from ._checkpoints import list_checkpoints
        from ._display import memory_html

        return memory_html(
            self.scope or GLOBAL_STEM,
            self.get_state(),
            self.get_working_memory(),
            list_checkpoints(self),
            self.count_tool_results(),
        )

    async def aget_state(self) -> dict[str, Any]:
        """Async twin of :meth:`get_state`."""
        return await asyncio.to_thread(self.get_state)

    async def aupdate_state(self, patch: Mapping[str, Any]) -> dict[str, Any]:
        """Async twin of :meth:`update_state`."""
        return await asyncio.to_thread(self.update_state, patch)

    async def aget_working_memory(self) -> str:
        """Async twin of :meth:`get_working_memory`."""
        return await asyncio.to_thread(self.get_working_memory)

    async def aupdate_working_memory(self, text: str) -> None:
        """Async twin of :meth:`update_working_memory`."""
        await asyncio.to_thread(self.update_working_memory, text)

    async def aswap_working_memory(self, expected: str | None, text: str) -> str | None:
        """Async twin of :meth:`swap_working_memory`."""
        return await asyncio.to_thread(self.swap_working_memory, expected, text)

    async def asave_plan(self, plan_id: str, payload: Any) -> None:
        """Async twin of :meth:`save_plan`."""
        await asyncio.to_thread(self.save_plan, plan_id, payload)

    async def aload_plan(self, plan_id: str) -> Any:
        """Async twin of :meth:`load_plan`."""
        return await asyncio.to_thread(self.load_plan, plan_id)

    async def alist_plans(self) -> dict[str, Any]:
        """Async twin of :meth:`list_plans`."""
        return await asyncio.to_thread(self.list_plans)

    async def adelete_plan(self, plan_id: str) -> bool:
        """Async twin of :meth:`delete_plan`."""
        return await asyncio.to_thread(self.delete_plan, plan_id)

    async def asave_tool_result(self, result_id: str, payload: Any) -> int:
        """Async twin of :meth:`save_tool_result`."""
        return await asyncio.to_thread(self.save_tool_result, result_id, payload)

    async def aload_tool_result(self, result_id: str) -> Any:
        """Async twin of :meth:`load_tool_result`."""
        return await asyncio.to_thread(self.load_tool_result, result_id)
