"""The on-disk records of LangGraph checkpoint logs (``LocalMemorySaver``), and the pure rules over them.

It lives in the core so that one set of rules serves the saver (writing, reading) and the
memory's own retention and data commands (:meth:`Memory.apply_retention`, ``show``), which
prune and count a thread's checkpoints without LangGraph installed.

A namespace's log is a sequence of JSON records (one ``put`` or ``put_writes`` each):

* ``{"t": "checkpoint", "format": 2, "id", "parent", "checkpoint": skeleton, "metadata": packed,
  "blobs": {channel: blob}}``: a checkpoint and the channel values whose version it changed;
* ``{"t": "writes", "checkpoint_id", "task_id", "task_path", "writes": [[idx, channel, type, b64]]}``;
* ``{"t": "blobs", "format": 2, "blobs": [[channel, blob], ...]}``: values kept for checkpoints
  written without them (what retention leaves when it drops the checkpoint that wrote a value).

A ``blob`` is one version of one channel's value, in one of three typed shapes:

* ``[version, type, b64]``: the value whole, serialized by the saver's ``serde`` (format 1,
  still written for anything that is not a list);
* ``{"v": version, "items": [[type, b64], ...]}``: a list, whole, one serialized item each;
* ``{"v": version, "base": base_version, "items": [...]}``: a list that extends the value of
  ``base_version`` of the same channel by these items (the *tail*): what a step that appends a
  message stores, instead of the whole conversation again.

A list value is rebuilt by folding: follow ``base`` back to a whole list, then append the tails.
A whole list is written again once the tails since the last one outweigh it (and at least
:data:`MIN_CHAIN` bytes), so the chain a read folds is never longer than the value itself and
the whole values kept sum to at most about twice the last one: the log grows linearly with the
steps, and a read in a fresh process parses the log once and decodes each item once.

Every record is one line, appended in one write: a write killed part-way leaves a torn last line
that readers skip, so the log reads as it was before the write. A delta's base is always an
earlier line of the same log (the saver writes a delta only against a version it wrote or read
there), and retention keeps every base a kept checkpoint needs (:func:`compact`).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from local_ai_memory._shared.errors import StorageError, UnsupportedFormatError


class SerializerProtocol(Protocol):
    """The part of LangGraph's serializer protocol the log uses (typed dumps)."""

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]: ...


__all__ = [
    "FORMAT",
    "PLAN_KIND",
    "ListTip",
    "Namespace",
    "ThreadFigures",
    "compact",
    "count_items",
    "encode_channel",
    "fold_log",
    "pack",
    "resolve",
    "retention_rule",
    "thread_figures",
    "unpack",
]

PLAN_KIND = "langgraph-checkpoints"
"""The plan record marking a step log as a LangGraph namespace's checkpoints."""

FORMAT = 2
"""The newest record format this module writes and reads (1: values whole only)."""
MIN_CHAIN = 64 * 1024
"""Tails of a list may add up to this many bytes before a whole list is written again, however small the list."""

Typed = tuple[str, bytes]
Packed = Sequence[str]
"""A serialized value as stored: ``[type, base64 of the bytes]``."""


def pack(typed: Typed) -> list[str]:
    return [typed[0], base64.b64encode(typed[1]).decode("ascii")]


def unpack(packed: Sequence[str]) -> Typed:
    return (packed[0], base64.b64decode(packed[1]))


def version_key(version: object) -> str:
    """A channel version as a dict key (versions are strings, ints or floats)."""
    return json.dumps(version)


@dataclass
class Namespace:
    """One checkpoint namespace of a thread, folded from its log.

    Values stay as stored (base64) until a checkpoint that needs them is read.
    """

    checkpoints: dict[str, tuple[dict[str, Any], Packed, str | None]] = field(default_factory=dict)
    blobs: dict[tuple[str, str], Any] = field(default_factory=dict)  # (channel, version key) -> blob
    writes: dict[str, dict[tuple[str, int], tuple[str, str, Packed, str]]] = field(default_factory=dict)
    latest: str | None = None  # the newest checkpoint id (ids sort by time)
    size: int = 0  # characters of stored values held (what keeping this fold costs)


def _blob_version(blob: Any) -> Any:
    return blob["v"] if isinstance(blob, dict) else blob[0]


def _blob_size(blob: Any) -> int:
    if isinstance(blob, dict):
        return sum(len(item[1]) for item in blob["items"])
    return len(blob[-1])


def _check_format(entry: dict[str, Any]) -> None:
    found = entry.get("format", 1)
    if not isinstance(found, int) or found > FORMAT:
        raise UnsupportedFormatError(
            f"a checkpoint record of format {found!r} was written by a newer langchain-local-ai-memory"
            f" (this one reads up to {FORMAT}); upgrade it to read this thread"
        )


def _add_blob(folded: Namespace, channel: str, blob: Any) -> None:
    folded.blobs[(channel, version_key(_blob_version(blob)))] = blob
    folded.size += _blob_size(blob)


def fold_log(entries: Iterable[dict[str, Any]], into: Namespace | None = None) -> Namespace:
    """Replay a namespace's log: checkpoints, channel values by version and pending writes.

    With ``into``, ``entries`` continue a log already folded there (it is updated and returned).
    A write of a task at a non-negative index is kept from its first save (a retried task
    does not replace it); special writes (errors, interrupts: negative indexes) replace, as
    in LangGraph's own savers. A checkpoint saved again under the same id replaces it.
    """
    folded = Namespace() if into is None else into
    for entry in entries:
        kind = entry.get("t")
        if kind == "checkpoint":
            _check_format(entry)
            for channel, blob in entry["blobs"].items():
                _add_blob(folded, channel, blob)
            folded.checkpoints[entry["id"]] = (entry["checkpoint"], entry["metadata"], entry["parent"])
            if folded.latest is None or entry["id"] > folded.latest:
                folded.latest = entry["id"]
        elif kind == "blobs":
            _check_format(entry)
            for channel, blob in entry["blobs"]:
                _add_blob(folded, channel, blob)
        elif kind == "writes":
            stored = folded.writes.setdefault(entry["checkpoint_id"], {})
            for idx, channel, *packed in entry["writes"]:
                key = (entry["task_id"], idx)
                if idx >= 0 and key in stored:
                    continue
                stored[key] = (entry["task_id"], channel, packed, entry["task_path"])
                folded.size += len(packed[-1])
    return folded


@dataclass
class ListTip:
    """A list value the saver can write a tail against: channel version, serialized items, and
    the bytes of tails written since the last whole list (``chain``) and of that list (``whole``)."""

    version: Any
    items: list[Typed]
    chain: int
    whole: int


@dataclass(frozen=True)
class Resolved:
    """A channel value as stored: ``packed`` (one serialized value) or ``tip`` (a list, by item)."""

    packed: Packed | None = None
    tip: ListTip | None = None


def resolve(blobs: dict[tuple[str, str], Any], channel: str, version: Any) -> Resolved | None:
    """The value of ``channel`` at ``version``, its tails folded onto their whole list.

    ``None`` when the log holds no such version; a delta whose base is missing (the log was
    edited by hand, or cut by something other than this saver) raises :class:`StorageError`
    rather than answer a wrong value.
    """
    blob = blobs.get((channel, version_key(version)))
    if blob is None:
        return None
    if not isinstance(blob, dict):
        return Resolved(packed=blob[1:])
    tails: list[Any] = []
    while "base" in blob:
        tails.append(blob["items"])
        base = blobs.get((channel, version_key(blob["base"])))
        if not isinstance(base, dict) or len(tails) > len(blobs):
            raise StorageError(
                5, f"checkpoint value of channel {channel!r} at version {version!r} lost the version it extends"
            )
        blob = base
    items = [unpack(item) for item in blob["items"]]
    whole = sum(len(data) for _, data in items)
    for tail in reversed(tails):
        items.extend(unpack(item) for item in tail)
    chain = sum(len(data) for _, data in items) - whole
    return Resolved(tip=ListTip(version, items, chain, whole))


def encode_channel(
    value: Any, version: Any, base: ListTip | None, serde: SerializerProtocol
) -> tuple[Any, ListTip | None]:
    """The blob that stores ``value`` as ``version``, and what a later step can extend.

    A list is stored by item: only the new items when it extends ``base`` (the channel's value
    at the parent checkpoint, item for item, byte for byte), else whole. Anything else is
    stored whole in format 1 and gives no tip.
    """
    if type(value) is not list:
        return [version, *pack(serde.dumps_typed(value))], None
    items = [serde.dumps_typed(item) for item in value]
    if base is not None and len(items) >= len(base.items) and items[: len(base.items)] == base.items:
        tail = items[len(base.items) :]
        added = sum(len(data) for _, data in tail)
        if base.chain + added <= max(base.whole, MIN_CHAIN):
            blob = {"v": version, "base": base.version, "items": [pack(item) for item in tail]}
            return blob, ListTip(version, items, base.chain + added, base.whole)
    blob = {"v": version, "items": [pack(item) for item in items]}
    return blob, ListTip(version, items, 0, sum(len(data) for _, data in items))


def _needed(folded: Namespace, kept: Iterable[str]) -> dict[tuple[str, str], Any]:
    """The blobs the ``kept`` checkpoints read, with every base their tails extend."""
    needed: dict[tuple[str, str], Any] = {}
    for checkpoint_id in kept:
        skeleton = folded.checkpoints[checkpoint_id][0]
        for channel, version in skeleton.get("channel_versions", {}).items():
            key = (channel, version_key(version))
            while key in folded.blobs and key not in needed:
                blob = needed[key] = folded.blobs[key]
                if not (isinstance(blob, dict) and "base" in blob):
                    break
                key = (channel, version_key(blob["base"]))
    return needed


def compact(entries: Sequence[dict[str, Any]], keep: Callable[[str, Packed], bool]) -> list[dict[str, Any]] | None:
    """The log rewritten to hold only the checkpoints ``keep(id, packed metadata)`` accepts, their
    pending writes, and the values (and bases of values) they read; ``None`` if nothing goes.

    Pure, so a backend may call it again on a retry. Values stay as stored, tails included, so
    the kept checkpoints read back exactly as before.
    """
    folded = fold_log(entries)
    kept = sorted(cid for cid, (_, metadata, _) in folded.checkpoints.items() if keep(cid, metadata))
    if len(kept) == len(folded.checkpoints) and set(folded.writes) <= set(kept):
        return None
    out: list[dict[str, Any]] = []
    needed = _needed(folded, kept)
    if needed:
        out.append(
            {"t": "blobs", "format": FORMAT, "blobs": [[channel, blob] for (channel, _), blob in needed.items()]}
        )
    for checkpoint_id in kept:
        skeleton, metadata, parent = folded.checkpoints[checkpoint_id]
        out.append(
            {
                "t": "checkpoint",
                "format": FORMAT,
                "id": checkpoint_id,
                "parent": parent,
                "checkpoint": skeleton,
                "metadata": list(metadata),
                "blobs": {},
            }
        )
        by_task: dict[tuple[str, str], list[list[Any]]] = {}
        for (task_id, idx), (_, channel, packed, task_path) in folded.writes.get(checkpoint_id, {}).items():
            by_task.setdefault((task_id, task_path), []).append([idx, channel, *packed])
        for (task_id, task_path), writes in by_task.items():
            out.append(
                {
                    "t": "writes",
                    "checkpoint_id": checkpoint_id,
                    "task_id": task_id,
                    "task_path": task_path,
                    "writes": writes,
                }
            )
    return out


def _msgpack_length(typed: Sequence[str]) -> int | None:
    """The item count of a list stored whole in format 1, read from its msgpack array header."""
    if typed[0] != "msgpack":
        return None
    head = base64.b64decode(typed[1][:8])
    if not head:
        return None
    if 0x90 <= head[0] <= 0x9F:
        return head[0] - 0x90
    if head[0] == 0xDC and len(head) >= 3:
        return int.from_bytes(head[1:3], "big")
    if head[0] == 0xDD and len(head) >= 5:
        return int.from_bytes(head[1:5], "big")
    return None


def count_items(blobs: dict[tuple[str, str], Any], channel: str, version: Any) -> int | None:
    """How many items the list ``channel`` holds at ``version``, without decoding one; ``None``
    when it is not a list (or one stored whole by another serializer)."""
    count = 0
    blob = blobs.get((channel, version_key(version)))
    for _ in range(len(blobs) + 1):
        if blob is None:
            return None
        if not isinstance(blob, dict):
            whole = _msgpack_length(blob[1:])
            return None if whole is None else count + whole
        count += len(blob["items"])
        if "base" not in blob:
            return count
        blob = blobs.get((channel, version_key(blob["base"])))
    return None


@dataclass(frozen=True)
class ThreadFigures:
    """What a LangGraph thread's logs hold: namespaces, checkpoints, the messages of its latest
    root checkpoint (``messages`` channel), and the bytes its logs take."""

    namespaces: int = 0
    checkpoints: int = 0
    messages: int = 0
    bytes: int = 0


def thread_figures(logs: Mapping[str, Sequence[dict[str, Any]]], sizes: Mapping[str, int]) -> ThreadFigures:
    """Figures of a thread from its logs (``{checkpoint_ns: steps}``) and their sizes by namespace."""
    checkpoints = messages = 0
    for checkpoint_ns, steps in logs.items():
        folded = fold_log(steps)
        checkpoints += len(folded.checkpoints)
        if checkpoint_ns == "" and folded.latest is not None:
            versions = folded.checkpoints[folded.latest][0].get("channel_versions", {})
            if "messages" in versions:
                messages = count_items(folded.blobs, "messages", versions["messages"]) or 0
    return ThreadFigures(len(logs), checkpoints, messages, sum(sizes.values()))


def retention_rule(
    now: float, max_age: float | None, keep_last: int | None
) -> Callable[[list[dict[str, Any]]], list[dict[str, Any]] | None]:
    """The change of one namespace's log that keeps the checkpoints younger than ``max_age``
    seconds (by their ``ts``) and among the ``keep_last`` newest; pure, for ``rewrite_plan_steps``."""
    from datetime import datetime

    def age_ok(ts: object) -> bool:
        if max_age is None:
            return True
        try:
            return isinstance(ts, str) and now - datetime.fromisoformat(ts).timestamp() <= max_age
        except ValueError:
            return True  # an unreadable time is no reason to delete

    def change(steps: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
        folded = fold_log(steps)
        newest = sorted(folded.checkpoints, reverse=True)
        kept = set(newest if keep_last is None else newest[:keep_last])
        kept = {cid for cid in kept if age_ok(folded.checkpoints[cid][0].get("ts"))}
        return compact(steps, lambda checkpoint_id, _: checkpoint_id in kept)

    return change
