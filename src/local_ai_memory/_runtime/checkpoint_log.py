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
from collections.abc import Callable, Iterable, Sequence
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
    "compact",
    "encode_channel",
    "fold_log",
    "pack",
    "resolve",
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
