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

**Snapshots** make a read in a fresh process cost what the newest checkpoints hold, not what the
thread ever held. Beside each namespace's log the saver keeps one more step log of a single
record, a :class:`Snapshot`: ``{"t": "snapshot", "format": 2, "cursor", "entries"}``, where
``entries`` are log records (the shapes above) holding up to :data:`WINDOW` newest checkpoints
(within :data:`WINDOW_SHARE`) of
the log up to ``cursor`` (a position the backend handed out, see
:meth:`~local_ai_memory.backends.RuntimeBackend.read_plan_steps`), their pending writes and the
values they read, the oldest one's lists whole (:func:`window`; a list blob there may carry
:data:`LOG_WHOLE`, so a step from a value read there counts the log's chain, and the chain bound
above holds for threads read from snapshots too; readers that predate it ignore it). A reader folds the snapshot,
then the log from ``cursor`` on: a fold that knows every checkpoint from its ``floor`` up
(:attr:`Namespace.floor`), exact for the newest checkpoint and the history above the floor. The
snapshot is a cache of the log, never the only copy: when the backend answers that the log was
replaced since ``cursor`` (retention, deletion), or the snapshot is missing, torn, of a newer
format or cannot answer a question, the reader reads the log whole, as before snapshots.

**The snapshot's binary form** (:data:`SNAPSHOT_FORMAT` 3, written from this version on): the
snapshot step holds its entries with every stored value replaced by its length in bytes
(``"entries"``) and the values themselves, raw and one after the other in the order of the entries,
as one ``bytes`` value (``"values"``; a runtime step may carry bytes, see
:class:`~local_ai_memory.backends.RuntimeBackend`). A fresh read then parses a small JSON header
and slices the values out, instead of parsing megabytes of JSON and base64-decoding every item.
A stored value (the second element of a ``[type, value]`` pair) is thus base64 text in the log and
in snapshots of format 2, and raw ``bytes`` in a fold of a format-3 snapshot: every rule here takes
both (:func:`unpack`, :func:`stored_size`). The log's own records keep their JSON form (format 2):
they are appended one by one and read by older versions too. A format-2 snapshot still reads as
before; older versions skip a format-3 one (newer format) and read the log whole.
"""

from __future__ import annotations

import base64
import binascii
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
    "LOG_WHOLE",
    "PLAN_KIND",
    "SNAPSHOT_FORMAT",
    "SNAPSHOT_KIND",
    "ListTip",
    "Namespace",
    "Snapshot",
    "ThreadFigures",
    "compact",
    "count_items",
    "encode_channel",
    "entry_size",
    "fold_log",
    "pack",
    "resolve",
    "retention_rule",
    "stored_size",
    "thread_figures",
    "unpack",
    "window",
]

PLAN_KIND = "langgraph-checkpoints"
"""The plan record marking a step log as a LangGraph namespace's checkpoints."""

SNAPSHOT_KIND = "langgraph-snapshot"
"""The plan record marking a step log as the :class:`Snapshot` of a LangGraph namespace's log."""

FORMAT = 2
"""The newest log record format this module writes and reads (1: values whole only)."""
SNAPSHOT_FORMAT = 3
"""The snapshot step's format this module writes (2: entries as JSON, values base64; 3: the binary
form of the module docstring); it reads both."""
MIN_CHAIN = 64 * 1024
"""Tails of a list may add up to this many bytes before a whole list is written again, however small the list."""
WINDOW = 64
"""Checkpoints a snapshot keeps at most (the newest): ``get_state_history`` of that many reads no older log."""
WINDOW_SHARE = 0.25
WINDOW_MIN = 32 * 1024
"""A snapshot keeps fewer checkpoints when their own records (skeletons, pending writes) would take more
than ``WINDOW_SHARE`` of the newest checkpoint's values (and more than ``WINDOW_MIN`` bytes): so a
snapshot costs about what the thread holds now, in proportion to the log, never a fixed block that a
young thread's first snapshot would pay all at once (the log of a young thread is small enough to read
whole for an older checkpoint)."""
SNAPSHOT_MIN = 128 * 1024
SNAPSHOT_RATIO = 0.25
"""A new snapshot is written once the log grew by ``SNAPSHOT_RATIO`` of the last snapshot's size
(and at least ``SNAPSHOT_MIN`` bytes) since it: a fresh read then parses at most 1.25 snapshots'
worth, and snapshots cost at most four times the log's own bytes in writes (one kept at a time)."""

LOG_WHOLE = "w"
"""In a snapshot, the key of a list blob that says how many of the value's items the *log* stores as
its whole list (the rest are the log's chain of tails): a snapshot stores its oldest lists whole and
some of the log's whole lists as tails, and a step that extends a value read from a snapshot counts its
chain from this, as it would from the log. Absent: the snapshot's own whole list is the log's."""

Typed = tuple[str, bytes]
Packed = Sequence[Any]
"""A serialized value as stored: ``[type, base64 of the bytes]`` (log records, format-2 snapshots)
or ``[type, bytes]`` (read from a format-3 snapshot)."""


def pack(typed: Typed) -> list[str]:
    return [typed[0], base64.b64encode(typed[1]).decode("ascii")]


def _raw(data: Any) -> bytes:
    """A stored value's bytes, whichever form it is stored in."""
    return data if type(data) is bytes else binascii.a2b_base64(data)


def unpack(packed: Packed) -> Typed:
    return (packed[0], _raw(packed[1]))


def stored_size(data: Any) -> int:
    """The characters a stored value takes as base64 (its length as stored in the log): one unit
    for every size this module estimates, whether the value was read as text, as raw bytes, or is
    a length in a snapshot's binary header."""
    if type(data) is str:
        return len(data)
    count = data if type(data) is int else len(data)
    return (count + 2) // 3 * 4


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
    floor: str | None = None  # a fold from a snapshot knows every checkpoint from this id up; None: all

    def knows(self, checkpoint_id: str) -> bool:
        """Whether this fold can tell if ``checkpoint_id`` exists (a fold from a snapshot knows
        nothing of the checkpoints below its floor)."""
        return self.floor is None or checkpoint_id >= self.floor or checkpoint_id in self.checkpoints


def _blob_version(blob: Any) -> Any:
    return blob["v"] if isinstance(blob, dict) else blob[0]


def _blob_size(blob: Any) -> int:
    if isinstance(blob, dict):
        return sum(stored_size(item[1]) for item in blob["items"])
    return stored_size(blob[-1])


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
        _check_format(entry)  # every kind: a newer writer may have changed any record's shape
        kind = entry.get("t")
        if kind == "checkpoint":
            for channel, blob in entry["blobs"].items():
                _add_blob(folded, channel, blob)
            folded.checkpoints[entry["id"]] = (entry["checkpoint"], entry["metadata"], entry["parent"])
            if folded.latest is None or entry["id"] > folded.latest:
                folded.latest = entry["id"]
        elif kind == "blobs":
            for channel, blob in entry["blobs"]:
                _add_blob(folded, channel, blob)
        elif kind == "writes":
            stored = folded.writes.setdefault(entry["checkpoint_id"], {})
            for idx, channel, *packed in entry["writes"]:
                key = (entry["task_id"], idx)
                if idx >= 0 and key in stored:
                    continue
                stored[key] = (entry["task_id"], channel, packed, entry["task_path"])
                folded.size += stored_size(packed[-1])
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
    """A channel value as stored: ``packed`` (one serialized value), or ``items`` (a list, one
    packed item each, the first ``whole`` of them from the whole list its tails extend)."""

    packed: Packed | None = None
    items: list[Packed] | None = None
    whole: int = 0

    def tip(self, version: Any) -> ListTip:
        """The list as a step that extends it sees it (its items serialized; ``items`` must be set)."""
        typed = [unpack(item) for item in self.items or ()]
        whole = sum(len(data) for _, data in typed[: self.whole])
        return ListTip(version, typed, sum(len(data) for _, data in typed[self.whole :]), whole)


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
    marked = blob.get(LOG_WHOLE)
    while "base" in blob:
        tails.append(blob["items"])
        base = blobs.get((channel, version_key(blob["base"])))
        if not isinstance(base, dict) or len(tails) > len(blobs):
            raise StorageError(
                5, f"checkpoint value of channel {channel!r} at version {version!r} lost the version it extends"
            )
        blob = base
        if marked is None:
            marked = blob.get(LOG_WHOLE)
    items = list(blob["items"])
    whole = len(items)
    for tail in reversed(tails):
        items.extend(tail)
    if marked is not None and isinstance(marked, int) and not isinstance(marked, bool) and 0 <= marked <= len(items):
        whole = marked  # a snapshot's record of where the log's own whole list ends (see LOG_WHOLE)
    return Resolved(items=items, whole=whole)


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


def _needed(
    folded: Namespace, kept: Iterable[str], seed: dict[tuple[str, str], Any] | None = None
) -> tuple[dict[tuple[str, str], Any], bool]:
    """The blobs the ``kept`` checkpoints read, with every base their tails extend (a walk stops at
    a blob of ``seed``, which comes first in the answer), and whether the fold held them all."""
    needed: dict[tuple[str, str], Any] = dict(seed or {})
    whole = True
    for checkpoint_id in kept:
        skeleton = folded.checkpoints[checkpoint_id][0]
        for channel, version in skeleton.get("channel_versions", {}).items():
            key = (channel, version_key(version))
            while key not in needed:
                blob = folded.blobs.get(key)
                if blob is None:
                    whole = False
                    break
                needed[key] = blob
                if not (isinstance(blob, dict) and "base" in blob):
                    break
                key = (channel, version_key(blob["base"]))
    return needed, whole


def _ahead(folded: Namespace, kept: Sequence[str]) -> list[str]:
    """Checkpoints that have pending writes in the log but no record yet, newer than the newest
    checkpoint or than the oldest kept one: LangGraph may store a step's writes before the step's
    checkpoint (both in the background), so these are writes of a checkpoint about to be written,
    and a rewrite that dropped them would lose them."""
    return sorted(
        cid
        for cid in folded.writes
        if cid not in folded.checkpoints
        and ((folded.latest is None or cid > folded.latest) or (bool(kept) and cid >= kept[0]))
    )


def _emit(folded: Namespace, kept: Sequence[str], needed: dict[tuple[str, str], Any]) -> list[dict[str, Any]]:
    """Log records holding the ``kept`` checkpoints (oldest first), their pending writes, the
    writes of checkpoints not written yet (:func:`_ahead`), and the ``needed`` values in one
    leading ``blobs`` record."""
    out: list[dict[str, Any]] = []
    if needed:
        out.append(
            {"t": "blobs", "format": FORMAT, "blobs": [[channel, blob] for (channel, _), blob in needed.items()]}
        )
    for checkpoint_id in [*kept, *_ahead(folded, kept)]:
        if checkpoint_id in folded.checkpoints:
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


def compact(entries: Sequence[dict[str, Any]], keep: Callable[[str, Packed], bool]) -> list[dict[str, Any]] | None:
    """The log rewritten to hold only the checkpoints ``keep(id, packed metadata)`` accepts, their
    pending writes, and the values (and bases of values) they read; ``None`` if nothing goes.

    Pure, so a backend may call it again on a retry. Values stay as stored, tails included, so
    the kept checkpoints read back exactly as before.
    """
    folded = fold_log(entries)
    kept = sorted(cid for cid, (_, metadata, _) in folded.checkpoints.items() if keep(cid, metadata))
    if len(kept) == len(folded.checkpoints) and set(folded.writes) <= {*kept, *_ahead(folded, kept)}:
        return None
    return _emit(folded, kept, _needed(folded, kept)[0])


def _whole_items(blobs: dict[tuple[str, str], Any], channel: str, version: Any) -> list[Any] | None:
    """The stored (packed) items of list ``channel`` at ``version``, its tails folded onto their
    whole list; ``None`` when a base is not in ``blobs``."""
    tails: list[Any] = []
    blob = blobs.get((channel, version_key(version)))
    while isinstance(blob, dict) and "base" in blob and len(tails) <= len(blobs):
        tails.append(blob["items"])
        blob = blobs.get((channel, version_key(blob["base"])))
    if not isinstance(blob, dict) or "base" in blob:
        return None
    items = list(blob["items"])
    for tail in reversed(tails):
        items.extend(tail)
    return items


def window(folded: Namespace, count: int | None = None) -> list[dict[str, Any]] | None:
    """The records of a :class:`Snapshot` of ``folded``: its ``count`` newest checkpoints (by default
    up to :data:`WINDOW`, fewer where their records would outweigh their share of the values, see
    :data:`WINDOW_SHARE`), their pending writes and the values they read, the oldest checkpoint's
    lists stored whole so that no value reaches further back than the window.

    ``None`` when the fold is one from an older snapshot that lacks a value a kept checkpoint
    reads (a fork reached below its floor): such a snapshot could not answer, so none is written.
    """
    known = sorted(cid for cid in folded.checkpoints if folded.floor is None or cid >= folded.floor)
    kept = known[-(WINDOW if count is None else count) :]
    if not kept:
        return None
    if count is None:
        kept = _within_budget(folded, kept)
    whole: dict[tuple[str, str], Any] = {}
    for channel, version in folded.checkpoints[kept[0]][0].get("channel_versions", {}).items():
        key = (channel, version_key(version))
        blob = folded.blobs.get(key)
        if isinstance(blob, dict) and "base" in blob:
            items = _whole_items(folded.blobs, channel, version)
            if items is None:
                return None
            whole[key] = {"v": blob["v"], "items": items}
            found = resolve(folded.blobs, channel, version)
            if found is not None and found.whole < len(items):
                whole[key][LOG_WHOLE] = found.whole  # the log's chain goes on counting from its own whole list
    needed, complete = _needed(folded, kept, whole)
    if not complete and folded.floor is not None:
        return None
    # One form for every value (raw bytes), so that _as_tails finds a list read from a snapshot
    # and the same list written again in the log equal, whichever form each was read in.
    return _emit(folded, kept, _as_tails({key: _map_blob(blob, _raw) for key, blob in needed.items()}))


def _as_tails(blobs: dict[tuple[str, str], Any]) -> dict[tuple[str, str], Any]:
    """``blobs`` with each whole list that extends a shorter list of the same channel among them
    stored as a tail of the longest such list: the log writes a list whole again every so often (to
    keep its own chains short), and a window holding two of those would otherwise keep the
    conversation twice. Every base is strictly shorter than what it extends, so no chain loops, and
    each list reads back item for item as before."""
    resolved: dict[tuple[str, str], list[Any]] = {}
    for key, blob in blobs.items():
        if isinstance(blob, dict):
            items = _whole_items(blobs, key[0], blob["v"])
            if items is not None:
                resolved[key] = items
    out = dict(blobs)
    for key, blob in blobs.items():
        items = resolved.get(key)
        if items is None or "base" in blob:
            continue
        bases = [
            (len(other), other_key)
            for other_key, other in resolved.items()
            if other_key[0] == key[0] and len(other) < len(items) and items[: len(other)] == other
        ]
        if bases:
            length, base_key = max(bases)
            logged = blob.get(LOG_WHOLE, len(items))  # whole in the log: no chain there
            out[key] = {"v": blob["v"], "base": blobs[base_key]["v"], "items": items[length:], LOG_WHOLE: logged}
    return out


def _values_size(folded: Namespace, checkpoint_id: str) -> int:
    """Characters of the stored values checkpoint ``checkpoint_id`` reads (list tails with their bases)."""
    total = 0
    for channel, version in folded.checkpoints[checkpoint_id][0].get("channel_versions", {}).items():
        blob = folded.blobs.get((channel, version_key(version)))
        for _ in range(len(folded.blobs) + 1):
            if blob is None:
                break
            total += _blob_size(blob)
            if not (isinstance(blob, dict) and "base" in blob):
                break
            blob = folded.blobs.get((channel, version_key(blob["base"])))
    return total


def _within_budget(folded: Namespace, kept: list[str]) -> list[str]:
    """The newest of ``kept`` whose own records fit the budget of :data:`WINDOW_SHARE` (at least one)."""
    budget = max(WINDOW_MIN, WINDOW_SHARE * _values_size(folded, kept[-1]))
    spent = 0
    for index in range(len(kept) - 1, -1, -1):
        skeleton, metadata, _ = folded.checkpoints[kept[index]]
        writes = folded.writes.get(kept[index], {}).values()
        spent += len(json.dumps(skeleton)) + stored_size(metadata[-1])
        spent += sum(stored_size(packed[-1]) for _, _, packed, _ in writes)
        if spent > budget and index < len(kept) - 1:
            return kept[index + 1 :]
    return kept


@dataclass(frozen=True)
class Snapshot:
    """The one record of a namespace's snapshot log (see the module docstring): the log's
    :func:`window` up to ``cursor``, so a reader folds ``entries`` and reads the log on from there."""

    cursor: str
    entries: list[dict[str, Any]]

    def to_step(self) -> dict[str, Any]:
        """The snapshot's step, in the binary form (:data:`SNAPSHOT_FORMAT`, see the module docstring)."""
        values: list[bytes] = []

        def put(data: Any) -> int:
            values.append(_raw(data))
            return len(values[-1])

        entries = [_map_entry(entry, put) for entry in self.entries]
        return {
            "t": "snapshot",
            "format": SNAPSHOT_FORMAT,
            "cursor": self.cursor,
            "entries": entries,
            "values": b"".join(values),
        }

    @classmethod
    def of_steps(cls, steps: Sequence[dict[str, Any]]) -> Snapshot | None:
        """The newest snapshot among a snapshot log's steps (either format); ``None`` when there is
        none, or it is of a newer format, not of this shape or its values do not add up (a reader
        then reads the log whole: a snapshot is a cache, so one it cannot use is never an error)."""
        for step in reversed(steps):
            if step.get("t") != "snapshot":
                continue
            found = step.get("format")
            cursor, entries = step.get("cursor"), step.get("entries")
            if not (isinstance(found, int) and isinstance(cursor, str) and isinstance(entries, list)):
                return None
            if found <= FORMAT:
                return cls(cursor, entries)
            if found == SNAPSHOT_FORMAT and type(step.get("values")) is bytes:
                return cls._of_binary(cursor, entries, step["values"])
            return None
        return None

    @classmethod
    def _of_binary(cls, cursor: str, entries: list[Any], values: bytes) -> Snapshot | None:
        """The snapshot of a format-3 step: each length in ``entries`` replaced by its slice of ``values``."""
        at = 0

        def take(length: Any) -> bytes:
            nonlocal at
            if type(length) is not int or length < 0 or at + length > len(values):
                raise ValueError("a snapshot's value lies beyond its values")
            at += length
            return values[at - length : at]

        try:
            decoded = [_map_entry(entry, take) for entry in entries]
        except (KeyError, IndexError, TypeError, ValueError, AttributeError):
            return None
        return cls(cursor, decoded) if at == len(values) else None

    def fold(self) -> Namespace | None:
        """The fold of ``entries``, knowing every checkpoint from its oldest one up; ``None`` when
        the entries do not fold (damaged, or of a newer format) or hold no checkpoint."""
        try:
            folded = fold_log(self.entries)
        except (UnsupportedFormatError, KeyError, IndexError, TypeError, ValueError, AttributeError):
            return None
        if not folded.checkpoints:
            return None
        folded.floor = min(folded.checkpoints)
        return folded

    def size(self, folded: Namespace) -> int:
        """:func:`entry_size` of this snapshot's step, from ``folded`` (its :meth:`fold`, nothing
        folded in since), whose ``size`` already counted the same values: a fresh read sizes its
        snapshot without a second walk over every stored item (a write of the same task and index
        twice in the window is counted once here, which no estimate needs)."""
        checkpoints = sum(1 for entry in self.entries if entry.get("t") == "checkpoint")
        return _ENTRY_SHARE * (1 + len(self.entries)) + _CHECKPOINT_SHARE * checkpoints + folded.size


def _map_blob(blob: Any, change: Callable[[Any], Any]) -> Any:
    """``blob`` with each stored value ``v`` (of its items, or its one value) replaced by ``change(v)``."""
    if isinstance(blob, dict):
        return {**blob, "items": [[item[0], change(item[1])] for item in blob["items"]]}
    return [*blob[:-1], change(blob[-1])]


def _map_entry(entry: dict[str, Any], change: Callable[[Any], Any]) -> dict[str, Any]:
    """``entry`` (a log record) with each stored value replaced by ``change(value)``, in one fixed
    order (the order a format-3 snapshot lays its values out in); the entry itself is not changed."""
    kind = entry.get("t")
    if kind == "checkpoint":
        metadata = entry["metadata"]
        blobs = {channel: _map_blob(blob, change) for channel, blob in entry["blobs"].items()}
        return {**entry, "metadata": [*metadata[:-1], change(metadata[-1])], "blobs": blobs}
    if kind == "blobs":
        return {**entry, "blobs": [[channel, _map_blob(blob, change)] for channel, blob in entry["blobs"]]}
    if kind == "writes":
        return {**entry, "writes": [[*write[:-1], change(write[-1])] for write in entry["writes"]]}
    return entry


_ENTRY_SHARE = 256
"""Bytes :func:`entry_size` counts for any entry beyond its stored values (keys, ids, framing)."""
_CHECKPOINT_SHARE = 768
"""Bytes it counts beyond that for a checkpoint entry (its metadata and channel versions)."""


def entry_size(entry: dict[str, Any]) -> int:
    """About how many bytes ``entry`` takes in a log: its stored values and a fixed share for the
    rest (what the saver counts to decide when a new snapshot is due; no exact figure is needed)."""
    kind = entry.get("t")
    size = _ENTRY_SHARE
    try:
        if kind == "checkpoint":
            size += _CHECKPOINT_SHARE + sum(_blob_size(blob) for blob in entry["blobs"].values())
        elif kind == "blobs":
            size += sum(_blob_size(blob) for _, blob in entry["blobs"])
        elif kind == "writes":
            size += sum(stored_size(write[-1]) for write in entry["writes"])
        elif kind == "snapshot":
            size += sum(entry_size(inner) for inner in entry["entries"])
    except (KeyError, IndexError, TypeError, AttributeError):
        pass
    return size


def _msgpack_length(typed: Packed) -> int | None:
    """The item count of a list stored whole in format 1, read from its msgpack array header."""
    if typed[0] != "msgpack":
        return None
    head = typed[1][:6] if type(typed[1]) is bytes else base64.b64decode(typed[1][:8])
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
