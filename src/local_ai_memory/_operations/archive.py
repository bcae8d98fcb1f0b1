"""Export a user's (or one session's) memory to one portable archive, and import it elsewhere.

The archive is a ZIP file (format ``local-ai-memory-archive``, ``format_version`` 1) that any
unzip tool opens; every member is plain JSON, JSON Lines, Markdown or the note's own bytes::

    manifest.json                                   format, version, user, session, contents
    sessions/{session}/state.json                   L0 state (JSON object)
    sessions/{session}/working_memory.md            L1 text
    sessions/{session}/plans.json                   L2 plans and checkpoints {plan_id: payload}
    sessions/{session}/steps/{plan_id}.jsonl        L2 step logs, one JSON object per line
    sessions/{session}/messages.jsonl               the session log, oldest first
    sessions/{session}/tool_results/{id}.json       L3 stored tool outputs
    notes/{category}/{file name}                    knowledge notes, byte for byte

``{session}`` is the percent-encoded session id (as in the file layout). JSON is written with
sorted keys and members in a fixed order with fixed timestamps, so exporting, importing and
exporting again gives the same bytes. What is not carried: sequence numbers of messages (the
order is kept and numbering restarts), save times of tool outputs, and the derived data (index,
rankers, vectors), which the importing side rebuilds.

Import checks every member name and value before writing anything, and refuses to overwrite a
session or note that already holds data unless asked to replace it.
"""

from __future__ import annotations

import io
import json
import os
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from local_ai_memory._contracts.knowledge import KnowledgeBackend, is_note_name
from local_ai_memory._contracts.runtime import RuntimeBackend, Scope
from local_ai_memory._shared import fs as _fs
from local_ai_memory._shared.errors import InvalidInputError, UnsupportedFormatError
from local_ai_memory._shared.naming import encode_name, owner_of, validate_id, validate_name
from local_ai_memory._shared.records import StoredMessage
from local_ai_memory._shared.unicode import check_texts_in

__all__ = ["ARCHIVE_VERSION", "ArchiveManifest", "ImportReport", "export_archive", "import_archive"]

ARCHIVE_VERSION = 1
_EPOCH = (1980, 1, 1, 0, 0, 0)  # ZIP's earliest time: fixed, so equal contents give equal bytes
_STEP_VERSION_KEY = "format_version"  # a storage detail of step lines, not part of the step


class ArchiveManifest(BaseModel):
    """``manifest.json``: what the archive holds."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["local-ai-memory-archive"] = "local-ai-memory-archive"
    format_version: int = ARCHIVE_VERSION
    user_id: str
    session_id: str | None = None
    sessions: list[str] = []
    notes: list[str] = []


@dataclass(frozen=True)
class ImportReport:
    """What an import wrote."""

    user_id: str
    sessions: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    tool_results: int = 0
    messages: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _json(value: Any, *, lines: bool = False) -> bytes:
    if lines:
        text = "".join(json.dumps(item, ensure_ascii=False, sort_keys=True) + "\n" for item in value)
    else:
        text = json.dumps(value, ensure_ascii=False, sort_keys=True, indent=2) + "\n"
    return text.encode("utf-8", "surrogatepass")


def _load(data: bytes, member: str, *, lines: bool = False) -> Any:
    try:
        text = data.decode("utf-8", "surrogatepass")
        if lines:
            return [json.loads(line) for line in text.splitlines() if line.strip()]
        return json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidInputError(f"archive member {member} is not valid JSON: {exc}") from None


def _session_members(runtime: RuntimeBackend, scope: Scope) -> Iterator[tuple[str, bytes]]:
    assert scope.session_id is not None
    base = f"sessions/{encode_name(scope.session_id)}"
    yield f"{base}/state.json", _json(runtime.get_state(scope))
    yield f"{base}/working_memory.md", runtime.get_working_memory(scope).encode("utf-8", "surrogatepass")
    plans = runtime.get_plans(scope)
    yield f"{base}/plans.json", _json(plans)
    for plan_id in sorted(plans):
        steps = [
            {k: v for k, v in step.items() if k != _STEP_VERSION_KEY} for step in runtime.get_plan_steps(scope, plan_id)
        ]
        if steps:
            yield f"{base}/steps/{plan_id}.jsonl", _json(steps, lines=True)
    messages = [m.model_dump(mode="json", exclude={"seq", "format_version"}) for m in runtime.get_messages(scope)]
    yield f"{base}/messages.jsonl", _json(messages, lines=True)
    for result_id in sorted(runtime.list_tool_results(scope)):
        yield f"{base}/tool_results/{result_id}.json", _json(runtime.load_tool_result(scope, result_id))


def export_archive(
    path: str | os.PathLike[str],
    runtime: RuntimeBackend,
    knowledge: KnowledgeBackend | None,
    user_id: str,
    session_id: str | None = None,
) -> ArchiveManifest:
    """Write ``user_id``'s memory (every session and every note), or one session of it, to ``path``."""
    validate_name(user_id, "user_id")
    if session_id is not None:
        scopes = [Scope.of(user_id, session_id)]
    else:
        scopes = sorted(
            (info.scope for info in runtime.list_scopes() if info.scope.user_id == user_id),
            key=lambda scope: scope.session_id or "",
        )
    notes: list[tuple[str, bytes]] = []
    if session_id is None and knowledge is not None:
        prefix = encode_name(user_id) + "_"
        for category in knowledge.list_categories():
            for name in sorted(knowledge.list_notes(category, prefix)):
                data = knowledge.read_note(category, name)
                if data is not None:
                    notes.append((f"{category}/{name}", data))
    manifest = ArchiveManifest(
        user_id=user_id,
        session_id=session_id,
        sessions=[scope.session_id for scope in scopes if scope.session_id is not None],
        notes=[name for name, _ in notes],
    )
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:

        def put(name: str, data: bytes) -> None:
            info = zipfile.ZipInfo(name, date_time=_EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o600 << 16
            archive.writestr(info, data)

        put("manifest.json", _json(manifest.model_dump(mode="json")))
        for scope in scopes:
            for name, data in _session_members(runtime, scope):
                put(name, data)
        for name, data in notes:
            put(f"notes/{name}", data)
    _fs.atomic_write(Path(path), buffer.getvalue())
    return manifest


@dataclass
class _Session:
    state: dict[str, Any] = field(default_factory=dict)
    working: str = ""
    plans: dict[str, Any] = field(default_factory=dict)
    steps: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    messages: list[StoredMessage] = field(default_factory=list)
    results: dict[str, Any] = field(default_factory=dict)


def _read_session_member(session: _Session, rest: list[str], data: bytes, member: str) -> None:
    if rest == ["state.json"]:
        session.state = _load(data, member)
    elif rest == ["working_memory.md"]:
        session.working = data.decode("utf-8", "surrogatepass")
    elif rest == ["plans.json"]:
        session.plans = _load(data, member)
    elif rest == ["messages.jsonl"]:
        try:
            session.messages = [StoredMessage.model_validate(item) for item in _load(data, member, lines=True)]
        except ValidationError as exc:
            raise InvalidInputError(f"{member}: {exc.errors()[0]['msg']}") from None
    elif len(rest) == 2 and rest[0] == "steps" and rest[1].endswith(".jsonl"):
        session.steps[validate_id(rest[1][: -len(".jsonl")], "plan id")] = _load(data, member, lines=True)
    elif len(rest) == 2 and rest[0] == "tool_results" and rest[1].endswith(".json"):
        session.results[validate_id(rest[1][: -len(".json")], "tool result id")] = _load(data, member)
    else:
        raise InvalidInputError(f"unexpected archive member {member}")


def _read(path: str | os.PathLike[str]) -> tuple[ArchiveManifest, dict[str, _Session], dict[tuple[str, str], bytes]]:
    """Parse and check a whole archive; raise :class:`InvalidInputError` on anything unexpected."""
    try:
        archive = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as exc:
        raise InvalidInputError(f"{os.fspath(path)} is not a local-ai-memory archive: {exc}") from None
    with archive:
        members = {info.filename: info for info in archive.infolist() if not info.is_dir()}
        if "manifest.json" not in members:
            raise InvalidInputError(f"{os.fspath(path)} has no manifest.json: not a local-ai-memory archive")
        raw = _load(archive.read("manifest.json"), "manifest.json")
        if (
            isinstance(raw, dict)
            and isinstance(raw.get("format_version"), int)
            and raw["format_version"] > ARCHIVE_VERSION
        ):
            raise UnsupportedFormatError(
                f"archive format_version {raw['format_version']} is newer than this library reads ({ARCHIVE_VERSION})"
            )
        try:
            manifest = ArchiveManifest.model_validate(raw)
        except ValidationError as exc:
            raise InvalidInputError(f"manifest.json is not valid: {exc.errors()[0]['msg']}") from None
        user_id = validate_name(manifest.user_id, "user_id")
        sessions = {validate_name(s, "session_id"): _Session() for s in manifest.sessions}
        by_folder = {encode_name(s): s for s in sessions}
        notes: dict[tuple[str, str], bytes] = {}
        for member in sorted(members):
            if member == "manifest.json":
                continue
            data = archive.read(member)
            parts = member.split("/")
            if parts[0] == "notes" and len(parts) == 3:
                category, name = validate_id(parts[1], "category"), parts[2]
                if not is_note_name(name) or owner_of(name) != user_id:
                    raise InvalidInputError(f"archive member {member} is not a note of user {user_id!r}")
                notes[(category, name)] = data
                continue
            if parts[0] != "sessions" or len(parts) < 3 or parts[1] not in by_folder:
                raise InvalidInputError(f"unexpected archive member {member}")
            _read_session_member(sessions[by_folder[parts[1]]], parts[2:], data, member)
        for session_id, session in sessions.items():
            if not isinstance(session.state, dict) or not isinstance(session.plans, dict):
                raise InvalidInputError(f"session {session_id!r}: state and plans must be JSON objects")
            kept: dict[str, object] = {"state": session.state, "working memory": session.working}
            kept |= {"plans": session.plans, "steps": session.steps, "tool results": session.results}
            kept["messages"] = [message.model_dump() for message in session.messages]
            check_texts_in(kept, f"session {session_id!r} of the archive")  # refused before anything is written
        if sorted(f"{c}/{n}" for c, n in notes) != sorted(manifest.notes):
            raise InvalidInputError("the notes in the archive do not match its manifest")
    return manifest, sessions, notes


def _constant(value: dict[str, Any]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A change that replaces whatever is stored by ``value``."""
    return lambda _: value


def import_archive(
    path: str | os.PathLike[str], runtime: RuntimeBackend, knowledge: KnowledgeBackend | None, *, replace: bool = False
) -> ImportReport:
    """Write an archive made by :func:`export_archive` into this memory; return what was written.

    Refuses (before writing anything) when a session of the archive already holds data or a
    note already exists, unless ``replace`` is true, and when a tool output id is used by
    another session of this memory.
    """
    manifest, sessions, notes = _read(path)
    user_id = manifest.user_id
    if notes and knowledge is None:
        raise InvalidInputError("this memory has no knowledge store to import notes into")
    held = {info.scope.key for info in runtime.list_scopes()}
    taken: list[str] = []  # everything that exists, named as the user names it
    for session_id, session in sessions.items():
        scope = Scope.of(user_id, session_id)
        if scope.key in held and not replace:
            taken.append(f"session {session_id}")
        for result_id in session.results:
            if runtime.tool_result_exists(result_id) and scope.key not in held:  # held: listed, or replaced
                raise InvalidInputError(f"tool output id {result_id!r} is already used in this memory")
    if knowledge is not None and not replace:
        prefix = encode_name(user_id) + "_"
        taken += [
            f"note {category}/{name.removeprefix(prefix).removesuffix('.md')}"
            for category, name in notes
            if knowledge.note_info(category, name) is not None
        ]
    if taken:
        raise InvalidInputError(
            f"{user_id!r} already has {len(taken)} of these: {', '.join(taken)}; "
            "pass replace=True (on the command line: --replace) to overwrite them"
        )
    messages = 0
    results = 0
    for session_id, session in sessions.items():
        scope = Scope.of(user_id, session_id)
        if replace:
            runtime.delete_scope(scope)
        runtime.update_state(scope, _constant(session.state))
        runtime.swap_working_memory(scope, None, session.working)
        runtime.update_plans(scope, _constant(session.plans))
        for plan_id, steps in session.steps.items():
            runtime.append_plan_steps(scope, plan_id, steps)
        if session.messages:
            runtime.append_messages(scope, session.messages)
            messages += len(session.messages)
        for result_id, payload in session.results.items():
            runtime.save_tool_result(scope, result_id, payload)
            results += 1
    for (category, name), data in notes.items():
        assert knowledge is not None
        knowledge.write_note(category, name, data)  # exact bytes; searches index it on their next look
    return ImportReport(
        user_id, sorted(sessions), sorted(f"{c}/{n}" for c, n in notes), tool_results=results, messages=messages
    )
