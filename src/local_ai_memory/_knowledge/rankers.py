"""``RankerCache``: one BM25 ranker per ``(user, category)``, built lazily and kept current.

A ranker is built the first time a user searches a category, from its snapshot blob
(``.bm25/{category}/{user prefix}bm25.npz``) where each document's signature (version, size
and a checksum of its metadata) still matches the index, re-reading only the other notes. The
rows are compared in one array operation, with the metadata checksums the index snapshot
keeps (:meth:`.index.KnowledgeIndex.meta_checksum`), so a new process computes none for the
notes its index snapshot holds.
A changed note updates its ranker in place (see :mod:`.bm25`). Snapshots are a cache:
failing to write one never fails a query. Callers hold the store's lock.

Snapshot format (version 3): an uncompressed ``.npz`` (no pickles; each member checked by its
CRC-32 when read) holding the ranker's compacted base segment as :meth:`.bm25.BM25Index.export`
gives it (``keys``, ``words``, ``doc_len``, ``doc_ptr``/``doc_terms``, ``post_ptr``/``post_slots``/
``post_tfs``), each document's signature (``sigs``) and ``meta``, a :class:`SnapshotMeta` as JSON:
format version, ranking field and the :class:`~local_ai_memory._shared.text.Analyzer` signature (tokenizer
version, stemming language, term weights). Snapshots written since also hold ``order``, the
term ids sorted by term: a fresh vocabulary then looks a query's terms up by binary search in
the stored ``words`` instead of building a dict of every term (readers without it ignore it;
a snapshot without it, or with one that is not a permutation, loads through the dict).
A fresh process's first query reads the snapshot in a thread while it compares its user's
listing (:meth:`RankerCache.read_ahead`). Loading it sorts nothing (about 0.5 s at 100k
notes, where version 2 kept per-document term lists and spent 7 s rebuilding the postings).
A snapshot of another version, field or analysis is ignored and rebuilt, never misread; a
damaged one is reported (``MEMORY_CORRUPT``) and rebuilt.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, ValidationError

from local_ai_memory._contracts.knowledge import KnowledgeBackend
from local_ai_memory._knowledge.bm25 import (
    BM25Index,
    Bounds,
    CountedDoc,
    Vocabulary,
    array_bounds,
    pack_texts,
    read_snapshot,
    snapshot_bytes,
    unpack_texts,
)
from local_ai_memory._knowledge.index import KnowledgeIndex, journal_bound
from local_ai_memory._knowledge.index_file import NO_MTIME, IndexEntry, RankingField, metadata_checksum
from local_ai_memory._shared.collector import collector_paused
from local_ai_memory._shared.errors import StorageError
from local_ai_memory._shared.events import Event, log_event
from local_ai_memory._shared.naming import user_file_prefix
from local_ai_memory._shared.text import Analyzer

__all__ = ["SNAPSHOT_DIR", "SNAPSHOT_VERSION", "RankerCache", "SnapshotMeta", "doc_signature"]

SNAPSHOT_DIR = ".bm25"
SNAPSHOT_VERSION = 3
TokensOf = Callable[[list[IndexEntry]], list[list[str]]]
"""The ranking tokens of several entries (reading their notes in one batch where needed)."""
READ_BATCH = 256
"""Notes whose tokens are asked for at once when a ranker is built (one query on a database)."""


def _tokens_in_batches(
    category: str, names: list[str], entries: Mapping[tuple[str, str], IndexEntry], tokens_of: TokensOf
) -> Iterator[tuple[str, list[str]]]:
    for start in range(0, len(names), READ_BATCH):
        batch = names[start : start + READ_BATCH]
        yield from zip(batch, tokens_of([entries[(category, name)] for name in batch]), strict=True)


class SnapshotMeta(BaseModel):
    """What a ranker snapshot was made with (its ``meta`` member, as JSON)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    format_version: int
    ranking_field: str
    analyzer: str
    documents: int


def doc_signature(entry: IndexEntry, meta: int | None = None) -> tuple[int, int, int]:
    """What a snapshot row must match to be reused: version, size and a checksum of the
    metadata (``meta``: already known, see :meth:`.index.KnowledgeIndex.meta_checksum`)."""
    crc = metadata_checksum(entry) if meta is None else meta
    return (entry.mtime_ns or 0, entry.size if entry.size is not None else -1, crc)


def snapshot_name(user_id: str, category: str) -> str:
    """Blob name of ``user_id``'s ranker snapshot in ``category``."""
    return f"{SNAPSHOT_DIR}/{category}/{user_file_prefix(user_id)}bm25.npz"


class _ReadAhead:
    """A snapshot read (and CRC-checked) by a thread of its own, which also takes its
    :func:`~.bm25.array_bounds`; :meth:`result` waits for it."""

    def __init__(self, read: Callable[[], dict[str, npt.NDArray[Any]] | None]) -> None:
        self._read = read
        self._arrays: dict[str, npt.NDArray[Any]] | None = None
        self.bounds: Bounds | None = None
        """The arrays' bounds, once read (``None``: the load takes them itself)."""
        self._error: BaseException | None = None
        self._done = threading.Event()
        threading.Thread(target=self._run, name="local-ai-memory-ranker-read", daemon=True).start()

    def _run(self) -> None:
        try:
            self._arrays = arrays = self._read()
            if arrays is not None:
                try:
                    self.bounds = array_bounds(arrays)
                except (ValueError, TypeError):  # the load checks the arrays itself, and says why
                    self.bounds = None
        except BaseException as exc:  # handed to the reader: raised where the read would have raised
            self._error = exc
        finally:
            self._done.set()

    def result(self) -> dict[str, npt.NDArray[Any]] | None:
        """The arrays read (``None``: no snapshot), or what the read raised."""
        self._done.wait()
        if self._error is not None:
            raise self._error
        return self._arrays


class _Fetched:
    """A snapshot blob read already, with other blobs in one read (see
    :meth:`RankerCache.wanted`): checked and parsed when :meth:`RankerCache.get` takes it."""

    bounds: Bounds | None = None

    def __init__(self, data: bytes | None) -> None:
        self._data = data

    def result(self) -> dict[str, npt.NDArray[Any]] | None:
        """The arrays (``None``: there was no snapshot); raises as :func:`~.bm25.read_snapshot` does."""
        return read_snapshot(self._data) if self._data is not None else None


class RankerCache:
    """The rankers of the users who searched, their shared vocabulary and their snapshots."""

    def __init__(
        self,
        backend: KnowledgeBackend,
        index: KnowledgeIndex,
        ranking_field: RankingField,
        analyzer: Analyzer | None = None,
    ) -> None:
        self.backend = backend
        self.index = index
        self.ranking_field = ranking_field
        self.analyzer = analyzer if analyzer is not None else Analyzer()
        self.vocab = Vocabulary()
        self._rankers: dict[tuple[str, str], BM25Index] = {}
        self._saved: dict[tuple[str, str], int] = {}
        self._ahead: dict[tuple[str, str], _ReadAhead | _Fetched] = {}

    def __len__(self) -> int:
        return len(self._rankers)

    def held_bytes(self) -> int:
        """About what the rankers and their vocabulary hold in memory."""
        return self.vocab.held_bytes() + sum(ranker.held_bytes() for ranker in self._rankers.values())

    def clear(self) -> None:
        """Forget every ranker (the index was replaced). A snapshot being read ahead is kept:
        :meth:`get` checks each of its rows against the entries of its moment anyway."""
        self._rankers = {}
        self._saved = {}

    def add(self, owner: str, entry: IndexEntry, tokens: Callable[[], list[str]]) -> None:
        """Put a changed document into its ranker, if that ranker is loaded."""
        ranker = self._rankers.get((owner, entry.category))
        if ranker is not None:
            ranker.add(entry.filename, tokens())

    def remove(self, owner: str, category: str, filename: str) -> None:
        """Take a document out of its ranker, if that ranker is loaded."""
        ranker = self._rankers.get((owner, category))
        if ranker is not None:
            ranker.remove(filename)

    def rebuild(self, owner: str, category: str, docs: list[tuple[str, CountedDoc]]) -> None:
        """Replace a ranker by one built from counted documents, and snapshot it."""
        ranker = BM25Index(self.vocab, category)
        ranker.build_counted(docs)
        self._rankers[(owner, category)] = ranker
        self._ahead.pop((owner, category), None)
        self.save(owner, category)

    def save(self, user_id: str, category: str) -> None:
        """Write the snapshot blob of one ranker."""
        ranker = self._rankers[(user_id, category)]
        arrays, names = ranker.export()
        # (0, -1, 0) never matches: such a document is re-read on the next load
        arrays["sigs"] = self._signatures(category, names, (0, -1, 0))
        meta = SnapshotMeta(
            format_version=SNAPSHOT_VERSION,
            ranking_field=self.ranking_field,
            analyzer=self.analyzer.signature,
            documents=len(names),
        )
        arrays["meta"] = pack_texts([meta.model_dump_json()])
        self.backend.write_blob(snapshot_name(user_id, category), snapshot_bytes(arrays))
        self._saved[(user_id, category)] = ranker.version

    def _signatures(self, category: str, names: list[str], missing: tuple[int, int, int]) -> npt.NDArray[np.int64]:
        """:func:`doc_signature` of each named note's entry (``missing`` where it has none), one
        row each: entries still as the index snapshot stored them give theirs from its columns,
        undecoded (10k rows in a fresh process's first query, or its first ranker snapshot);
        the rest are computed."""
        entries = self.index.current()
        rows = np.array(entries.row_numbers(zip(itertools.repeat(category), names)), dtype=np.int64)
        out = np.tile(np.array(missing, dtype=np.int64), (len(names), 1))
        stored = rows >= 0
        if bool(stored.any()):
            found = entries.stored_rows()[rows[stored]]
            found[found[:, 0] == NO_MTIME, 0] = 0  # an absent version counts 0 (doc_signature)
            out[stored] = found
        checksum = self.index.meta_checksum
        for i in np.flatnonzero(~stored).tolist():
            e = entries.get((category, names[i]))
            if e is not None:
                out[i] = doc_signature(e, checksum(e))
        return out

    def save_changed(self, at_least: int = 1) -> int:
        """Snapshot every ranker changed since its last snapshot, by ``at_least`` changes when
        it has a stored snapshot (a ranker with none is always written); return how many were
        written."""
        written = 0
        for (user_id, category), ranker in list(self._rankers.items()):
            saved = self._saved.get((user_id, category), -1)  # the version the stored snapshot has
            if saved < 0 or ranker.version - saved >= at_least:
                self.save(user_id, category)
                written += 1
        return written

    def _meta(self, arrays: dict[str, npt.NDArray[Any]]) -> SnapshotMeta | None:
        """The snapshot's :class:`SnapshotMeta` if it was made by this version with these
        settings; ``None`` for an older format or other settings (rebuilt, not read)."""
        if "meta" not in arrays:
            return None  # version 2 and older kept their version elsewhere: never read them
        texts = unpack_texts(arrays["meta"])
        if len(texts) != 1:
            raise ValueError("snapshot meta is not one text")
        try:
            meta = SnapshotMeta.model_validate_json(texts[0])
        except ValidationError as exc:
            raise ValueError(f"snapshot meta: {exc.error_count()} error(s)") from None
        if (
            meta.format_version != SNAPSHOT_VERSION
            or meta.ranking_field != self.ranking_field
            or meta.analyzer != self.analyzer.signature
        ):
            return None
        return meta

    def _snapshot_arrays(self, name: str) -> dict[str, npt.NDArray[Any]] | None:
        """The arrays of snapshot blob ``name``, each checked by its CRC-32 (``None``: no such
        blob); raises as :func:`~.bm25.read_snapshot` and the backend's read do."""
        data = self.backend.read_blob(name)
        return read_snapshot(data) if data is not None else None

    def read_ahead(self, user_id: str, category: str) -> None:
        """Start reading the snapshot of ``user_id``'s ranker in ``category`` in a thread of its
        own, unless that ranker is loaded or being read: :meth:`get` then takes what it read.

        A fresh process's first query starts it before it compares its user's listing with the
        index: the read and the CRC checks (about 30 ms at 10k notes) run while the listing's
        ``stat`` calls run, both outside the GIL. What was read is only ever a snapshot, taken a
        little earlier: :meth:`get` checks each of its rows against the entries of that moment."""
        key = (user_id, category)
        if key in self._rankers or key in self._ahead:
            return
        self._ahead[key] = _ReadAhead(lambda: self._snapshot_arrays(snapshot_name(user_id, category)))

    def wanted(self, user_id: str, categories: Iterable[str]) -> dict[str, str]:
        """``{snapshot blob name: category}`` of ``user_id``'s rankers in ``categories`` that are
        neither loaded nor being read: what a query reads with its other blobs and hands to
        :meth:`fetched` (one round trip on a database instead of one per ranker)."""
        return {
            snapshot_name(user_id, category): category
            for category in categories
            if (user_id, category) not in self._rankers and (user_id, category) not in self._ahead
        }

    def fetched(self, user_id: str, category: str, data: bytes | None) -> None:
        """The snapshot blob of ``user_id``'s ranker in ``category`` as just read (``None``: there
        is none), for :meth:`get` to load, unless that ranker was loaded or read meanwhile."""
        key = (user_id, category)
        if key not in self._rankers and key not in self._ahead:
            self._ahead[key] = _Fetched(data)

    def _load_snapshot(self, ranker: BM25Index, user_id: str, category: str, names: set[str]) -> set[str]:
        name = snapshot_name(user_id, category)
        ahead = self._ahead.pop((user_id, category), None)
        try:
            arrays = ahead.result() if ahead is not None else self._snapshot_arrays(name)
            if arrays is None:
                return set()
            meta = self._meta(arrays)
            if meta is None:
                return set()
            sigs = arrays["sigs"]
            if sigs.shape != (meta.documents, 3) or sigs.dtype.kind not in "iu":
                raise ValueError("snapshot signatures do not match its documents")

            def keep(keys: list[str]) -> npt.NDArray[np.bool_]:
                # One signature per row, compared in one array operation (a missing or foreign
                # note gets one that matches no row: versions and sizes are never negative).
                # Entries still as the index snapshot stored them give theirs from its columns,
                # undecoded (10k rows in a fresh process's first query); the rest are computed.
                if len(keys) != len(sigs):
                    raise ValueError("snapshot signatures do not match its documents")
                wanted = self._signatures(category, keys, (-1, -2, -1))
                if not names.issuperset(keys):  # rows of notes this user does not own: never kept
                    wanted[np.array([key not in names for key in keys], dtype=np.bool_)] = (-1, -2, -1)
                return np.asarray(np.all(sigs == wanted, axis=1), dtype=np.bool_)

            return ranker.load(arrays, keep, ahead.bounds if ahead is not None else None)
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            log_event(Event.MEMORY_CORRUPT, level=logging.WARNING, path=name, reason=str(exc)[:200])
            return set()

    def get(self, user_id: str, category: str, tokens_of: TokensOf) -> BM25Index:
        """The ranker of ``user_id`` in ``category``, built (from its snapshot where valid) if needed."""
        ranker = self._rankers.get((user_id, category))
        if ranker is not None:
            return ranker
        entries = self.index.current()
        names = self.index.names_of(user_id, category)
        ranker = BM25Index(self.vocab, category)
        try:
            with collector_paused():
                loaded = self._load_snapshot(ranker, user_id, category, names)
        except Exception:
            ranker, loaded = BM25Index(self.vocab, category), set()
        missing = sorted(names.difference(loaded))
        docs = _tokens_in_batches(category, missing, entries, tokens_of)
        if len(missing) > max(64, journal_bound(len(names))):  # fewer go to the delta: no compaction now
            ranker.build(docs)
        else:
            for name, tokens in docs:
                ranker.add(name, tokens)
        self._rankers[(user_id, category)] = ranker
        if not names:  # nothing to cache: a search for a user without notes here writes nothing
            self._saved[(user_id, category)] = ranker.version
        elif not loaded or len(missing) > max(64, len(names) // 100, journal_bound(len(names))):
            # (Up to one journal's worth of notes newer than the snapshot is normal: a writer
            # snapshots its rankers when it folds its journal; a query does not wait for that.)
            try:
                self.save(user_id, category)
            except StorageError as exc:  # only a cache: the query answers, save_rankers() retries
                log_event(Event.INDEX_WRITE_DEFERRED, level=logging.WARNING, path="ranker cache", reason=str(exc))
        else:
            self._saved[(user_id, category)] = ranker.version - len(missing)  # the snapshot lacks those
        return ranker

    def forget(self, user_id: str, category: str) -> bool:
        """Drop ``user_id``'s ranker in ``category`` and delete its snapshot; return whether a snapshot existed."""
        self._rankers.pop((user_id, category), None)
        self._saved.pop((user_id, category), None)
        self._ahead.pop((user_id, category), None)
        return self.backend.delete_blob(snapshot_name(user_id, category))
