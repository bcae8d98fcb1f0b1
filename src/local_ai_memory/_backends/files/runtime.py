"""The file backend of the runtime memory: plain files under ``{root}/memory/``.

Layout (``{scope}`` is :attr:`Scope.key`, e.g. ``alice_s1``; the unscoped memory uses
``global``, which can never be a scope key because scope keys always contain ``_``)::

    state/{scope}.json              L0  {"format_version": 1, "updated_at": ..., "state": {...}}
    working/{scope}.md              L1  Markdown text
    plans/{scope}.json              L2  {"format_version": 1, "updated_at": ..., "plans": {plan_id: RECORD}}
    plans/{scope}/{plan_id}.jsonl   L2  step log of a checkpoint, one JSON object per step
    tool_results/{id}.json          L3  RECORD (ids are unique across the store)
    tool_index/{scope}/{id}.ref         empty marker: the scope owns result {id}
    sessions/{scope}.jsonl              the session's messages, one per line
    erasing/{u-user | s-scope}.json     a deletion in progress (see :class:`.runtime.Erasure`)

where ``RECORD`` is ``{"format_version": 1, "id": ..., "saved_at": ..., "payload": ...}``. This
is the 0.1.0 layout plus the step logs and the ``seq`` of each message line; 0.1.0 data opens
unchanged.

**Ownership of tool results.** A scope may load a result only if its marker exists, so an id
leaked to another user loads nothing (the same :class:`RecordNotFoundError` as a missing id).
The marker is written before the result, so a crash leaves at worst a marker without a result,
which listing removes after a minute.

**Migration.** The first time a scope is used, files left by the unscoped memory (0.1.0's
``global`` stem) move into the scope if it has none yet, under the locks of both files, so
exactly one scope adopts them, once.

**Deletion.** :meth:`FileRuntimeBackend.delete_scope` removes a scope's files one by one, each
under its lock. Callers that must never be seen half done (deleting a session, forgetting a
user) first write an erasure record; while it exists every read of a covered scope answers as
if the scope were empty, so readers see the data whole or gone, even after a crash half-way.
Checking costs a read one ``stat`` of ``erasing/`` while that folder is unchanged and empty.

**Safety.** Every write goes through :mod:`local_ai_memory._shared.fs` (temporary file, fsync,
rename, fsync of the folder when ``durable``); every read-modify-write holds the file's
thread and process lock. A file that does not parse is moved to ``{name}.corrupt.bak`` and
``MEMORY_CORRUPT`` is logged; a newer ``format_version`` raises
:class:`UnsupportedFormatError` and the file is never overwritten.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from local_ai_memory._backends.files.jsonl import append_lines, encode_lines, last_line, log_end, parse_lines
from local_ai_memory._backends.files.records import FileRecordFolder, read_checked
from local_ai_memory._contracts.runtime import (
    GLOBAL_STEM,
    Erasure,
    PlansChange,
    PlanSteps,
    RuntimeBackend,
    Scope,
    ScopeInfo,
    StateChange,
    StepsChange,
    erased,
)
from local_ai_memory._shared import fs as _fs
from local_ai_memory._shared.config import MemoryConfig
from local_ai_memory._shared.errors import InvalidInputError, RecordNotFoundError, UnsupportedFormatError
from local_ai_memory._shared.naming import DirectoryGuard
from local_ai_memory._shared.records import (
    FORMAT_VERSION,
    CorruptRecordError,
    ErasureRecord,
    PlanFile,
    RecordEnvelope,
    StateEnvelope,
    StoredMessage,
    ToolIndexEntry,
    ToolResultPage,
    ToolResultPayload,
    decode_model,
    encode_model,
    iter_json_bytes,
    payload_text,
    slice_page,
)

__all__ = ["FileRuntimeBackend"]

_DANGLING_AFTER = 60.0  # seconds before a marker without its result counts as left by a crash
_cleaned_roots: set[str] = set()
_cleaned_guard = threading.Lock()


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


_TAIL_START = 1 << 16
"""The first piece of a session log :meth:`FileRuntimeBackend.get_last_messages` reads (bytes)."""


def _numbered(records: list[dict[str, Any]]) -> list[StoredMessage]:
    """Session lines as messages; lines without ``seq`` (0.1.0) take the next number."""
    out: list[StoredMessage] = []
    expected = 0
    for record in records:
        try:
            message = StoredMessage.model_validate(record)
        except ValueError:
            continue
        if message.seq is None:
            message = message.model_copy(update={"seq": expected})
        expected = (message.seq or 0) + 1
        out.append(message)
    return out


class FileRuntimeBackend(RuntimeBackend):
    """Runtime memory in plain files under ``{guard.root}/memory/`` (see the module docstring).

    ``durable`` fsyncs files and folders on every write; ``timeout`` bounds lock waits.
    """

    def __init__(
        self, guard: DirectoryGuard, *, durable: bool = True, timeout: float = _fs.DEFAULT_LOCK_TIMEOUT
    ) -> None:
        self.guard = guard
        self.durable = durable
        self.timeout = timeout
        self._state = self._folder("state", ".json")
        self._working = self._folder("working", ".md")
        self._plans = self._folder("plans", ".json")
        self._results = self._folder("tool_results", ".json")
        self._index_locks = self._folder("tool_index", ".ref")
        self._sessions = self._folder("sessions", ".jsonl")
        self._erasing = self._folder("erasing", ".json")
        self._migrated: set[str] = {GLOBAL_STEM}
        self._migration_guard = threading.Lock()
        self._page_cache: tuple[str, tuple[int, float], ToolResultPayload] | None = None
        self._page_guard = threading.Lock()
        self._quiet_version: int | None = None  # mtime_ns of erasing/ when last listed empty (see _erasures)

    @classmethod
    def from_config(cls, config: MemoryConfig, guard: DirectoryGuard | None = None) -> FileRuntimeBackend:
        """The backend under ``guard`` (default: ``config.runtime_data_dir``), with the config's fsync and timeout."""
        root = guard if guard is not None else DirectoryGuard(config.runtime_data_dir)
        return cls(root, durable=config.fsync, timeout=config.lock_timeout)

    def __repr__(self) -> str:
        return f"FileRuntimeBackend({str(self.guard.root)!r})"

    def _folder(self, kind: str, suffix: str) -> FileRecordFolder:
        return FileRecordFolder(self.guard, f"memory/{kind}", suffix, durable=self.durable, timeout=self.timeout)

    def _markers(self, key: str) -> FileRecordFolder:
        return self._folder(f"tool_index/{key}", ".ref")

    def _steps(self, key: str) -> FileRecordFolder:
        return self._folder(f"plans/{key}", ".jsonl")

    # -- first use ----------------------------------------------------------------------

    def _ready(self, scope: Scope) -> str:
        """Clean up after crashed writers (once per root and process) and adopt 0.1.0 global files."""
        root = str(self.guard.root)
        with _cleaned_guard:
            first = root not in _cleaned_roots
            _cleaned_roots.add(root)
        if first:
            self.recover()
        key = scope.key
        if key not in self._migrated:
            with self._migration_guard:
                if key not in self._migrated:
                    self._migrate(key)
                    self._migrated.add(key)
        return key

    def _migrate(self, key: str) -> None:
        for folder in (self._state, self._working, self._plans):
            if folder.info(GLOBAL_STEM) is None:
                continue
            with folder.locked(GLOBAL_STEM), folder.locked(key):
                folder.rename_if_absent(GLOBAL_STEM, key)
        adopted = self._markers(GLOBAL_STEM)
        if not adopted.names():
            return
        mine = self._markers(key)
        with self._index_locks.locked(GLOBAL_STEM), self._index_locks.locked(key):
            for result_id in adopted.names():
                mine.write(result_id, b"")
                adopted.delete(result_id)

    def recover(self) -> int:
        folders = [self._state, self._working, self._plans, self._results, self._sessions, self._erasing]
        removed = sum(folder.cleanup() for folder in folders)
        for key in _subfolders(self.guard.resolve("memory", "tool_index")):
            removed += self._markers(key).cleanup()
        for key in _subfolders(self.guard.resolve("memory", "plans")):
            removed += self._steps(key).cleanup()
        return removed

    # -- L0 state -----------------------------------------------------------------------

    def _hidden(self, scope: Scope) -> bool:
        """Whether a pending erasure covers ``scope`` (usually one ``stat``, see :meth:`_erasures`)."""
        return scope.scoped and erased(self._erasures(), scope)

    def _erasures(self) -> list[Erasure]:
        """:meth:`pending_erasures`, with one ``stat`` of ``erasing/`` while it is known empty.

        Any process that begins an erasure renames a record into the folder, which moves the
        folder's mtime, so an unchanged mtime proves it still empty. File-system timestamps
        are coarse (a clock tick), though: a record written in the same tick as the listing
        could leave the mtime unchanged. So, as git does with its index, emptiness is trusted
        only for an mtime older than :data:`~local_ai_memory._shared.fs.RACY_WINDOW_NS` at the time
        of the listing; a folder changed more recently is listed on every read until it has
        been quiet that long.
        """
        version = self._erasing.version()
        if version is None:
            return []  # no erasure ever began here
        if version == self._quiet_version:
            return []
        listed_at = time.time_ns()
        names = self._erasing.names()
        if names:
            return self._read_erasures(names)
        if version < listed_at - _fs.RACY_WINDOW_NS:
            self._quiet_version = version
        return []

    def get_state(self, scope: Scope) -> dict[str, Any]:
        if self._hidden(scope):
            return {}
        envelope = read_checked(self._state, self._ready(scope), _decode_state)
        return envelope.state if envelope is not None else {}

    def update_state(self, scope: Scope, change: StateChange) -> dict[str, Any]:
        key = self._ready(scope)
        with self._state.locked(key):
            envelope = read_checked(self._state, key, _decode_state)
            state = change(envelope.state if envelope is not None else {})
            self._state.write(key, encode_model(StateEnvelope(state=state)))
        return state

    # -- L1 working memory --------------------------------------------------------------

    def get_working_memory(self, scope: Scope) -> str:
        if self._hidden(scope):
            return ""
        text = read_checked(self._working, self._ready(scope), _decode_text)
        return text if text is not None else ""

    def swap_working_memory(self, scope: Scope, expected: str | None, text: str) -> str | None:
        key = self._ready(scope)
        with self._working.locked(key):
            if expected is not None:
                current = read_checked(self._working, key, _decode_text) or ""
                if current != expected:
                    return current
            self._working.write(key, text.encode("utf-8"))
        return None

    # -- L2 plans -----------------------------------------------------------------------

    def get_plans(self, scope: Scope) -> dict[str, Any]:
        if self._hidden(scope):
            return {}
        plans = read_checked(self._plans, self._ready(scope), _decode_plans)
        return {} if plans is None else {plan_id: record.payload for plan_id, record in plans.plans.items()}

    def update_plans(self, scope: Scope, change: PlansChange) -> dict[str, Any]:
        key = self._ready(scope)
        with self._plans.locked(key):
            stored = read_checked(self._plans, key, _decode_plans) or PlanFile()
            current = {plan_id: record.payload for plan_id, record in stored.plans.items()}
            new = change(dict(current))
            if new is None:
                return current
            records = {
                plan_id: stored.plans[plan_id]
                if plan_id in current and current[plan_id] is payload
                else RecordEnvelope(id=plan_id, payload=payload)
                for plan_id, payload in new.items()
            }
            self._plans.write(key, encode_model(PlanFile(plans=records)))
            for gone in set(current) - set(new):
                self._steps(key).delete(gone)
        return new

    def append_plan_steps(self, scope: Scope, plan_id: str, steps: Sequence[dict[str, Any]]) -> bool:
        folder = self._steps(self._ready(scope))
        path = folder.path(plan_id)
        records = [{"format_version": FORMAT_VERSION, **step} for step in steps]
        with folder.locked(plan_id):
            empty, torn = log_end(path)
            append_lines(path, encode_lines(records), torn=torn, durable=self.durable)
        return empty

    def get_plan_steps(self, scope: Scope, plan_id: str) -> list[dict[str, Any]]:
        if self._hidden(scope):
            return []
        folder = self._steps(self._ready(scope))
        raw = folder.read(plan_id)
        return [] if raw is None else parse_lines(raw, folder.location(plan_id))

    def read_plan_steps(self, scope: Scope, plan_id: str, cursor: str | None = None) -> PlanSteps:
        """Reads the log from the last line handed out: the cursor names the file (device and
        inode), where that line lies and its hash, so a log deleted and written anew (even on a
        reused inode) is read whole again. A torn last line is left for a later read."""
        if self._hidden(scope):
            return PlanSteps([], "", True)
        folder = self._steps(self._ready(scope))
        path = folder.path(plan_id)
        mark = _LogMark.parse(cursor)
        found = _fs.read_from(path, mark.start if mark is not None else 0)
        if found is None:
            return PlanSteps([], "", True)
        identity, data = found
        if mark is not None and mark.continues(identity, data):
            base, data, restarted = mark.end, data[mark.end - mark.start :], False
        else:
            if mark is not None and mark.start:
                found = _fs.read_from(path, 0)
                if found is None:
                    return PlanSteps([], "", True)
                identity, data = found
            base, restarted = 0, True
        complete = data[: data.rfind(b"\n") + 1]
        steps = parse_lines(complete, folder.location(plan_id)) if complete else []
        if complete:
            start = complete.rfind(b"\n", 0, len(complete) - 1) + 1
            mark = _LogMark(identity, base + start, base + len(complete), _digest(complete, start))
        elif mark is None or restarted:
            mark = _LogMark(identity, 0, 0, _digest(b""))
        return PlanSteps(steps, mark.text(), restarted)

    def clear_plan_steps(self, scope: Scope, plan_id: str) -> None:
        folder = self._steps(self._ready(scope))
        with folder.locked(plan_id):
            folder.delete(plan_id)

    def plan_step_bytes(self, scope: Scope) -> dict[str, int]:
        if self._hidden(scope):
            return {}
        return {info.name: info.size for info in self._steps(scope.key).list_info()}

    def rewrite_plan_steps(self, scope: Scope, plan_id: str, change: StepsChange) -> list[dict[str, Any]]:
        """Under the log's lock (appends take it too): the new log is written to a temporary file
        and renamed over the old one, so a crash leaves one or the other whole, and a reader's
        cursor (which names the file's inode) makes it read the new log from its start."""
        if self._hidden(scope):
            return []
        folder = self._steps(self._ready(scope))
        with folder.locked(plan_id):
            raw = folder.read(plan_id)
            current = [] if raw is None else parse_lines(raw, folder.location(plan_id))
            new = change([dict(step) for step in current])
            if new is None:
                return current
            if new:
                folder.write(plan_id, encode_lines([{"format_version": FORMAT_VERSION, **step} for step in new]))
            else:
                folder.delete(plan_id)
            return new

    # -- L3 tool results ----------------------------------------------------------------

    def tool_result_exists(self, result_id: str) -> bool:
        return self._results.info(result_id) is not None

    def save_tool_result(self, scope: Scope, result_id: str, payload: Any) -> int:
        markers = self._markers(self._ready(scope))
        envelope = {"format_version": FORMAT_VERSION, "id": result_id, "saved_at": time.time(), "payload": payload}
        chunks = _Counted(iter_json_bytes(envelope))
        if markers.info(result_id) is None:
            if self._results.info(result_id) is not None:
                raise InvalidInputError(f"tool result id {result_id!r} is taken by another scope")
            markers.write(result_id, b"")
        self._results.write(result_id, chunks)
        return chunks.size

    def _owned(self, scope: Scope, result_id: str) -> None:
        if self._hidden(scope) or self._markers(self._ready(scope)).info(result_id) is None:
            raise RecordNotFoundError(f"no tool result {result_id!r} in {scope.describe()} (it may have been pruned)")

    def load_tool_result(self, scope: Scope, result_id: str) -> Any:
        self._owned(scope, result_id)
        record = read_checked(self._results, result_id, _decode_record)
        if record is None:
            raise RecordNotFoundError(f"no tool result {result_id!r} in {scope.describe()} (it may have been pruned)")
        return record.payload

    def read_tool_result_page(self, scope: Scope, result_id: str, offset: int, limit: int) -> ToolResultPage:
        """Pages of one output are usually read in a row: the parsed output is kept while its file is unchanged."""
        self._owned(scope, result_id)
        info = self._results.info(result_id)
        version = None if info is None else (info.size, info.modified)
        with self._page_guard:
            cached = self._page_cache
        if cached is not None and version is not None and cached[:2] == (result_id, version):
            payload = cached[2]
        else:
            payload = payload_text(result_id, self.load_tool_result(scope, result_id))
            if version is not None:
                with self._page_guard:
                    self._page_cache = (result_id, version, payload)
        return slice_page(result_id, payload.tool, payload.content, offset, limit)

    def list_tool_results(self, scope: Scope) -> dict[str, ToolIndexEntry]:
        if self._hidden(scope):
            return {}
        markers_folder = self._markers(self._ready(scope))
        markers = markers_folder.list_info()
        results = self._results.infos(marker.name for marker in markers)
        now = time.time()
        for marker in markers:
            if marker.name not in results and now - marker.modified > _DANGLING_AFTER:
                markers_folder.delete(marker.name)  # its writer died before writing the result
        return {name: ToolIndexEntry(size=info.size, saved_at=info.modified) for name, info in results.items()}

    def count_tool_results(self, scope: Scope) -> int:
        if self._hidden(scope):
            return 0
        return len(self._markers(self._ready(scope)).names())

    def delete_tool_results(self, scope: Scope, result_ids: Sequence[str]) -> list[str]:
        key = self._ready(scope)
        markers = self._markers(key)
        deleted: list[str] = []
        with self.locked(scope):
            for result_id in result_ids:
                if markers.info(result_id) is None:
                    continue  # not this scope's result
                self._results.delete(result_id)
                markers.delete(result_id)
                deleted.append(result_id)
        return deleted

    # -- session messages ---------------------------------------------------------------

    def append_messages(self, scope: Scope, messages: Sequence[StoredMessage]) -> list[int]:
        key = self._ready(scope)
        path = self._sessions.path(key)
        with self._sessions.locked(key):
            last, torn = last_line(path)
            if last is not None and isinstance(last.get("seq"), int):
                start = int(last["seq"]) + 1
            elif last is not None and isinstance(last.get("next_seq"), int):
                start = int(last["next_seq"])  # every message was compacted away
            elif last is not None:  # a 0.1.0 log: numbers are positions
                start = len(self.get_messages(scope))
            else:
                start = 0
            seqs = list(range(start, start + len(messages)))
            records = [
                message.model_copy(update={"seq": seq}).model_dump(mode="json")
                for seq, message in zip(seqs, messages, strict=True)
            ]
            append_lines(path, encode_lines(records), torn=torn, durable=self.durable)
        return seqs

    def get_messages(self, scope: Scope) -> list[StoredMessage]:
        if self._hidden(scope):
            return []
        key = self._ready(scope)
        raw = self._sessions.read(key)
        return [] if raw is None else _numbered(parse_lines(raw, self._sessions.location(key)))

    def get_last_messages(self, scope: Scope, limit: int) -> list[StoredMessage]:
        """The newest ``limit`` messages, read from the end of the log in growing pieces (64 KB,
        then four times more each time) until they are all in, or the whole file is."""
        if limit <= 0 or self._hidden(scope):
            return []
        key = self._ready(scope)
        path, size = self._sessions.path(key), _TAIL_START
        while True:
            data = _fs.read_tail(path, size)
            if data is None:
                return []
            whole = len(data) < size
            if not whole:  # the piece starts inside a line: drop that part line
                data = data[data.find(b"\n") + 1 :] if b"\n" in data else b""
            lines = data.split(b"\n")
            take = limit + 1  # the lines parsed: the piece's last ones (a piece holds many short lines)
            while True:
                records = parse_lines(b"\n".join(lines[-take:]), self._sessions.location(key))
                if any("seq" not in record and "next_seq" not in record for record in records):
                    return self.get_messages(scope)[-limit:]  # a 0.1.0 log numbers by position: read it all
                messages = _numbered(records)
                if len(messages) >= limit or take >= len(lines):
                    break
                take *= 4
            if whole or len(messages) >= limit:
                return messages[-limit:]
            size *= 4

    def compact_messages(self, scope: Scope, keep_last: int) -> int:
        key = self._ready(scope)
        with self._sessions.locked(key):
            raw = self._sessions.read(key)
            if raw is None:
                return 0
            messages = _numbered(parse_lines(raw, self._sessions.location(key)))
            kept = messages[max(0, len(messages) - keep_last) :] if keep_last else []
            lines = [message.model_dump(mode="json") for message in kept]
            if not kept and messages:  # remember the numbering, so later messages never reuse a number
                lines = [{"format_version": FORMAT_VERSION, "next_seq": (messages[-1].seq or 0) + 1}]
            self._sessions.write(key, encode_lines(lines))
            return len(messages) - len(kept)

    def clear_messages(self, scope: Scope) -> bool:
        key = self._ready(scope)
        with self._sessions.locked(key):
            return self._sessions.delete(key)

    def pop_message(self, scope: Scope) -> StoredMessage | None:
        if self._hidden(scope):
            return None
        key = self._ready(scope)
        with self._sessions.locked(key):
            raw = self._sessions.read(key)
            messages = [] if raw is None else _numbered(parse_lines(raw, self._sessions.location(key)))
            if not messages:
                return None
            popped, kept = messages[-1], messages[:-1]
            lines = [message.model_dump(mode="json") for message in kept]
            if not kept and popped.seq:  # older numbers were compacted away: keep the count going
                lines = [{"format_version": FORMAT_VERSION, "next_seq": popped.seq}]
            self._sessions.write(key, encode_lines(lines))
            return popped

    # -- the scope as a whole ---------------------------------------------------------

    @contextlib.contextmanager
    def locked(self, scope: Scope) -> Iterator[None]:
        with self._index_locks.locked(scope.key):
            yield

    def list_scopes(self, *, include_erased: bool = False) -> list[ScopeInfo]:
        found: dict[str, tuple[int, float]] = {}

        def add(key: str, size: int, modified: float) -> None:
            old_size, old_modified = found.get(key, (0, 0.0))
            found[key] = (old_size + size, max(old_modified, modified))

        for folder in (self._state, self._working, self._plans, self._sessions):
            for info in folder.list_info():
                add(info.name, info.size, info.modified)
        for key in _subfolders(self.guard.resolve("memory", "plans")):
            if key in found:  # step logs count in a scope's size, but do not make a scope listed
                for info in self._steps(key).list_info():
                    add(key, info.size, info.modified)
        index_root = self.guard.resolve("memory", "tool_index")
        for entry in _subfolders(index_root):
            results = self._results.infos(marker.name for marker in self._markers(entry).list_info())
            for info in results.values():
                add(entry, info.size, info.modified)
        if include_erased:  # also what an erasure cut short by a crash left: empty folders, lock files
            leftovers = _subfolders(index_root) + _subfolders(self.guard.resolve("memory", "plans"))
            for folder in (self._state, self._working, self._plans, self._sessions, self._index_locks):
                leftovers += folder.locked_names()
            for key in leftovers:
                add(key, 0, 0.0)
        scopes = [(Scope.from_key(key), size, modified) for key, (size, modified) in sorted(found.items())]
        erasures = [] if include_erased else self.pending_erasures()
        return [
            ScopeInfo(scope, size, modified)
            for scope, size, modified in scopes
            if scope is not None and not erased(erasures, scope)
        ]

    # -- lifecycle ------------------------------------------------------------------------

    def delete_scope(self, scope: Scope) -> int:
        key = scope.key  # not _ready(): deleting must not adopt the unscoped memory's files first
        removed = 0
        with self.locked(scope):
            markers = self._markers(key)
            for result_id in markers.names():
                removed += self._results.purge(result_id)
                markers.purge(result_id)
            for result_id in markers.locked_names():  # a purge cut short: its result went first
                markers.purge(result_id)
            steps = self._steps(key)
            for plan_id in {*steps.names(), *steps.locked_names()}:
                removed += steps.purge(plan_id)
            for folder in (self._plans, self._sessions, self._working, self._state):
                removed += folder.purge(key)
            steps.remove_folder()
        _fs.purge(self._index_locks.path(key), durable=self.durable)  # the scope lock itself, once released
        markers.remove_folder()
        return removed

    def begin_erasure(self, erasure: Erasure) -> None:
        record = ErasureRecord(user_id=erasure.user_id, session_id=erasure.session_id)
        self._erasing.write(erasure.key, encode_model(record))

    def end_erasure(self, erasure: Erasure) -> None:
        self._erasing.delete(erasure.key)

    def pending_erasures(self) -> list[Erasure]:
        return self._read_erasures(self._erasing.names())

    def _read_erasures(self, names: list[str]) -> list[Erasure]:
        found: list[tuple[float, Erasure]] = []
        for name in names:
            raw = self._erasing.read(name)
            try:
                record = decode_model(raw, ErasureRecord) if raw is not None else None
            except CorruptRecordError:
                record = None  # a torn record cannot exist (atomic writes); an edited one is ignored
            if record is not None:
                found.append((record.started_at, Erasure(record.user_id, record.session_id)))
        return [erasure for _, erasure in sorted(found, key=lambda pair: pair[0])]


_WINDOW = 4096
"""Bytes hashed at each end of a long line a log mark names (see :func:`_digest`)."""
_WINDOWED = "w"


def _digest(data: bytes, start: int = 0, end: int | None = None, *, whole: bool = False) -> str:
    """What a log mark keeps of the last line it read (``data[start:end]``): a hash of the line,
    or of a long line's first and last :data:`_WINDOW` bytes (prefixed ``w``). A line of a
    checkpoint log begins with its checkpoint's unique id, so its ends tell it from any other
    line at the same place; hashing a whole snapshot-sized line (megabytes: a checkpoint that
    stores every value) was a fifth of a new process's first read. ``whole``: the whole-line
    form older marks hold (still checked as such; an older reader, finding a windowed one,
    reads the log from its start, as for any mark that does not match)."""
    end = len(data) if end is None else end
    view = memoryview(data)
    if whole or end - start <= 2 * _WINDOW:
        return hashlib.blake2b(view[start:end], digest_size=16).hexdigest()
    ends = hashlib.blake2b(view[start : start + _WINDOW], digest_size=16)
    ends.update(view[end - _WINDOW : end])
    return _WINDOWED + ends.hexdigest()


@dataclass(frozen=True)
class _LogMark:
    """Where a read of a step log stopped: the file, and the last line read (bytes ``start:end``)."""

    identity: tuple[int, int]
    start: int
    end: int
    digest: str

    @classmethod
    def parse(cls, cursor: str | None) -> _LogMark | None:
        parts = (cursor or "").split(":")
        if len(parts) != 5 or not all(part.isdigit() for part in parts[:4]):
            return None
        dev, ino, start, end = (int(part) for part in parts[:4])
        return cls((dev, ino), start, end, parts[4]) if start <= end else None

    def text(self) -> str:
        return f"{self.identity[0]}:{self.identity[1]}:{self.start}:{self.end}:{self.digest}"

    def continues(self, identity: tuple[int, int], data: bytes) -> bool:
        """Whether ``data`` (read from :attr:`start`) still begins with the line this mark read."""
        size = self.end - self.start
        if identity != self.identity or len(data) < size:
            return False
        return _digest(data, 0, size, whole=not self.digest.startswith(_WINDOWED)) == self.digest


def _subfolders(folder: Path) -> list[str]:
    """Names of the scope folders inside ``folder`` (anything else found there is ignored)."""
    try:
        paths = list(folder.iterdir())
    except FileNotFoundError:
        return []
    names = (path.name for path in paths if path.is_dir() and not path.is_symlink())
    return sorted(name for name in names if Scope.from_key(name) is not None)
