"""The dense side of hybrid search: note passages embedded at index time, read at query time.

Indexing (``write_note``, ``index``/``build_index``, the watcher's re-index, any writer of a
shared PostgreSQL store) cuts a changed note into passages (:mod:`.passages`), has the vector
cache embed those it does not keep yet (:meth:`VectorCache.vectors_for`: vectors live in the
backend's cache, files or PostgreSQL) and records, per note, which vectors are its passages
in a **passage map** per user and category, ``filename -> [signature, digests]``, where the
signature is the index entry's ``(mtime_ns, size, last_modified)``. It is stored as a blob
(``.passages/{category}/{user prefix}{model and cut rule}.json``) and a journal beside it
(``....journal.jsonl``): a write appends one JSON line with the rows of the notes it changed,
and a reader lays the lines over the blob in order. When the journal passes
:data:`JOURNAL_BYTES` it is folded into the blob and dropped. A folder written before the
journal existed (blob only) reads as it is; a version without the journal reading a folder
written with it misses the journal's rows, so those notes count as changed and are recorded
again from the cached vectors (nothing is embedded).

Deleting a note appends a line naming it (``"dropped"``) and its digests (``"released"``); a
write that re-cuts a note releases the digests of the passages it no longer has. The rows leave
the map at once; the released vectors leave the cache when the journal is folded
(:meth:`DenseIndex._compact`), unless a row still names them (the cache is shared by content),
or when the user is forgotten. A cache whose deletes are cheap (``discards_cheaply``: PostgreSQL
deletes rows, process memory drops entries) loses them at once; the file cache rewrites its
shards to delete, so it waits for the fold. A delete costs one journal line, not a rewrite of the map or the
cache.

A query reads the map and the vectors by digest (:meth:`VectorCache.kept`); it embeds no note.
The one exception: a note whose index entry no longer matches its map row (it changed since
it was indexed, by a writer that did not embed: a plain editor with no watcher running, or a
memory without an embedder) and whose new passages nobody embedded yet. The query then reads
that note, embeds its passages, records them in the map (so it happens once) and answers; the
cost is that note's passages, logged as ``EMBEDDINGS_FALLBACK`` with ``reason="note changed since
indexing"``.

A note's dense score mixes its best passage's cosine (weight :data:`BEST_SHARE`) with its
whole-note vector's (the unit mean of its passages): see :meth:`DenseMatrix.note_scores` for
the measurement.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from local_ai_memory._contracts.knowledge import KnowledgeBackend, VectorCache
from local_ai_memory._knowledge.index_file import IndexEntry, lead_text
from local_ai_memory._knowledge.passages import MAX_PASSAGES, PieceCounter, passages_of
from local_ai_memory._shared.errors import ModelError
from local_ai_memory._shared.events import Event, log_event
from local_ai_memory._shared.naming import owner_of, user_file_prefix
from local_ai_memory._shared.vectors import model_id_of

__all__ = ["BEST_SHARE", "MAP_DIR", "DenseIndex", "DenseMatrix", "signature_of"]

MAP_DIR = ".passages"
MAP_VERSION = 4
"""Bumped when the passage rule changes (2: 200-word passages across sections; 3: also at most
:data:`.passages.PASSAGE_PIECES` word pieces when the embedder counts them; 4: up to 256 body
passages instead of 16, see :data:`.passages.MAX_PASSAGES`): older maps are
ignored, so their notes are cut again instead of keeping passages cut by the old rule (the
passages they share with the old cut keep their cached vectors: only new text is embedded)."""
BEST_SHARE = 0.7
"""Share of a note's best passage in its dense score; the whole-note vector has the rest."""
SHORTLIST = 512
"""Notes whose passages a query compares one by one, chosen by their whole-note vectors, when a
user has more (see :meth:`DenseMatrix.pool_scores`)."""
JOURNAL_BYTES = 256 * 1024
"""Size past which a map's journal is folded into its blob (about 850 notes' rows): a write
appends its rows, and the whole map (about 4 MB at 10k notes) is rewritten once per that many."""
EMBED_BATCH = 128
"""Passages sent to the vector cache per call while indexing: each call's vectors are stored,
its notes recorded in the maps and progress reported, so an interrupted run (Ctrl-C) keeps
all but the call it was in, and the next run continues from there."""
QUIET_NOTES = 4
"""Notes a query may embed (changed behind the index) before it says so at WARNING level."""
RULE_BLOB = f"{MAP_DIR}/rule.json"
"""The passage rule the maps were last written under, and the names of every rule's maps."""

Signature = tuple[int | None, int | None, float]
Vector = npt.NDArray[np.float32]
ReadNote = Callable[[str, str], str | None]
Progress = Callable[[int, int], None]


def signature_of(entry: IndexEntry) -> Signature:
    """What a map row must match to be the passages of ``entry``'s current text."""
    return (entry.mtime_ns, entry.size, float(entry.last_modified))


@dataclass(frozen=True)
class DenseMatrix:
    """One user's passage vectors for a query: rows grouped by note, ``starts[i]`` the first
    row of ``entries[i]`` (every note has at least its lead)."""

    entries: Sequence[IndexEntry]
    matrix: Vector
    starts: npt.NDArray[np.int64]
    rows: dict[str, int] = field(default_factory=dict)
    """``"category/filename"`` -> index in ``entries`` (built once, not per query)."""

    means: Vector = field(default_factory=lambda: np.zeros((0, 0), dtype=np.float32))
    """Each note's passages averaged and scaled to unit length (its whole-note vector)."""

    def __post_init__(self) -> None:
        if not self.rows:
            self.rows.update({f"{e.category}/{e.filename}": row for row, e in enumerate(self.entries)})
        if self.entries and self.means.shape[0] != len(self.entries):
            counts = np.diff(np.append(self.starts, self.matrix.shape[0])).astype(np.float32)
            sums = np.add.reduceat(self.matrix, self.starts, axis=0) / counts[:, None]
            norms = np.linalg.norm(sums, axis=1, keepdims=True)
            norms[norms == 0] = 1.0
            object.__setattr__(self, "means", (sums / norms).astype(np.float32))

    def note_scores(self, query: Vector) -> Vector:
        """Each note's dense score for the unit ``query``: ``BEST_SHARE`` x its best passage's
        cosine + the rest x its whole-note (mean passage) vector's cosine.

        Measured with passages of up to 16 x 200 words (``benchmarks/bench_natural_questions.py``,
        dev questions, 400 man pages; dense side alone, R@5 / MRR@10): best passage .839 / .728,
        0.7 best + 0.3 whole note .869 / .730, 0.5 / 0.5 .865 / .733; with the fusion of
        :func:`.fusion.confident_weight` the known-item ``stdlib`` set of ``bench_quality.py``
        .936 / .809 (0.7) against .929 / .801 (0.5), ``readmes`` .859 / .785 against .862 / .790.
        The best passage finds the one section that answers; the whole-note vector keeps a note
        that is about the subject ahead of one that mentions it once."""
        if not self.entries:
            return np.zeros(0, dtype=np.float32)
        best = np.maximum.reduceat(self.matrix @ query, self.starts)
        scores: Vector = (BEST_SHARE * best + (1.0 - BEST_SHARE) * (self.means @ query)).astype(np.float32)
        return scores

    def pool_scores(self, query: Vector, pool: int, rows: Iterable[int] = ()) -> dict[int, float]:
        """The :meth:`note_scores` of the ``pool`` best notes and of ``rows`` (the notes BM25
        found), by row, without scoring every passage.

        Up to :data:`SHORTLIST` notes (or ``16 x pool``, when larger) this is :meth:`note_scores`
        itself. Above, a first pass scores each note by its whole-note vector only (one row per
        note instead of about four), and the best passages are compared only within the
        shortlist of the notes that pass scores highest, and in ``rows``. A note whose best
        passage would put it in the pool while its whole-note vector ranks it below the
        shortlist is missed; at 10k notes this reads 15 MB per query instead of 70
        (``benchmarks/bench_hybrid_latency.py`` gives both, and the quality check is in the
        CHANGELOG)."""
        wanted = sorted({int(r) for r in rows if 0 <= int(r) < len(self.entries)})
        width = max(SHORTLIST, 16 * pool)
        if len(self.entries) <= width:
            scores = self.note_scores(query)
            chosen = {*_best(scores, pool), *wanted}
            return {row: float(scores[row]) for row in chosen}
        whole = self.means @ query
        picked = _sorted_set(np.argpartition(-whole, width - 1)[:width], wanted)
        ends = np.append(self.starts[1:], self.matrix.shape[0])
        counts = ends[picked] - self.starts[picked]
        heads = np.cumsum(counts) - counts  # where each picked note starts among the gathered rows
        lines = np.repeat(self.starts[picked] - heads, counts) + np.arange(int(counts.sum()))
        best = np.maximum.reduceat(self.matrix[lines] @ query, heads)
        exact = (BEST_SHARE * best + (1.0 - BEST_SHARE) * whole[picked]).astype(np.float32)
        pooled = _sorted_set(picked[_best(exact, pool)], wanted)
        found = exact[np.searchsorted(picked, pooled)]  # ``picked`` is sorted and holds them all
        return dict(zip(pooled.tolist(), found.tolist(), strict=True))


def _rows_of(raw: object) -> dict[str, tuple[Signature, list[str]]]:
    """The ``filename -> (signature, digests)`` rows of one stored map or journal line (none
    when it was written for another passage rule)."""
    if not isinstance(raw, dict) or raw.get("version") != MAP_VERSION:
        return {}
    return {
        str(filename): ((sig[0], sig[1], float(sig[2])), [str(d) for d in digests])
        for filename, (sig, digests) in raw["notes"].items()
    }


def _dropped_of(raw: object) -> list[str]:
    """The names of the notes one journal line says were deleted (none for another rule)."""
    if not isinstance(raw, dict) or raw.get("version") != MAP_VERSION:
        return []
    return [str(name) for name in raw.get("dropped", ())]


def _sorted_set(rows: npt.NDArray[np.int64], more: Sequence[int]) -> npt.NDArray[np.int64]:
    """``rows`` and ``more`` sorted, each once (``np.union1d`` would import ``numpy.ma``, about
    0.1 s of a command-line search)."""
    merged = np.sort(np.concatenate([rows.astype(np.int64), np.asarray(more, dtype=np.int64)]))
    if merged.shape[0] < 2:
        return merged
    unique: npt.NDArray[np.int64] = merged[np.concatenate([[True], merged[1:] != merged[:-1]])]
    return unique


def _log_query_embedding(notes: int) -> None:
    """Say that a query embeds notes: once in a while one changed behind the index (INFO); many
    at once mean nobody indexed them in hybrid mode, which the user should hear (WARNING)."""
    level = logging.WARNING if notes > QUIET_NOTES else logging.INFO
    log_event(Event.EMBEDDINGS_FALLBACK, level=level, reason="note changed since indexing", notes=notes)


def _slug(rule: str) -> str:
    """The part of a map's name that says which model and cut rule recorded it."""
    return hashlib.sha256(rule.encode("utf-8")).hexdigest()[:16]


def _best(scores: Vector, n: int) -> npt.NDArray[np.int64]:
    """Positions of the ``n`` highest ``scores`` (all of them when there are fewer), ties by position."""
    if n >= scores.shape[0]:
        return np.arange(scores.shape[0])
    cut = np.partition(-scores, n - 1)[n - 1]
    return np.flatnonzero(-scores <= cut)


class DenseIndex:
    """Passage maps of one store and one embedder, and the matrices queries read."""

    def __init__(
        self, backend: KnowledgeBackend, cache: VectorCache, embedder: object, max_passages: int = MAX_PASSAGES
    ) -> None:
        self.backend = backend
        self.cache = cache
        counter = getattr(embedder, "count_pieces", None)
        self.pieces: PieceCounter | None = counter if callable(counter) else None
        """The embedder's word-piece count (passages are cut to what the model reads), if it has one."""
        self.max_passages = max_passages
        self.rule = {
            "model": model_id_of(embedder),
            "cut": "pieces" if self.pieces is not None else "words",
            "max_passages": max_passages,
            "version": MAP_VERSION,
        }
        """What decides a note's passages and their vectors: the model, how passages are cut (by
        the model's word pieces or by words) and how many a note has at most. Stored in
        :data:`RULE_BLOB`, so a change is seen and said (:meth:`check_rule`)."""
        self.slug = _slug(json.dumps(self.rule, sort_keys=True))
        """Names this store's maps: one per rule. A map recorded under another rule is not read
        as this one's (its notes are cut again; passages both cuts share keep their vectors), and
        forgetting a user drops the maps of every rule :data:`RULE_BLOB` lists."""
        self._checked = False
        self._lock = threading.RLock()
        self._maps: dict[tuple[str, str], dict[str, tuple[Signature, list[str]]]] = {}
        self._refs: dict[str, int] = {}
        """How many rows of the maps in ``_maps`` name each digest (a row naming it twice counts
        twice): what :meth:`_discard_unnamed` asks, kept as rows come and go so a delete costs
        the deleted note's passages, not a walk over every loaded map. Every change to
        ``_maps`` goes through :meth:`_hold`, :meth:`_put_row`, :meth:`_pop_row` or
        :meth:`_let_go`."""
        self._matrices: dict[tuple[str, tuple[str, ...]], tuple[object, DenseMatrix]] = {}

    # -- the maps --------------------------------------------------------------------------
    def blob_name(self, category: str, user_id: str, slug: str = "") -> str:
        return f"{MAP_DIR}/{category}/{user_file_prefix(user_id)}{slug or self.slug}.json"

    def _map(self, category: str, user_id: str, fresh: bool = False) -> dict[str, tuple[Signature, list[str]]]:
        key = (category, user_id)
        if fresh or key not in self._maps:
            return self._hold(key, self._read(category, user_id))
        return self._maps[key]

    def _count(self, digests: Iterable[str], step: int) -> None:
        """Move the reference count of each of ``digests`` by ``step`` (a count at 0 is removed)."""
        refs = self._refs
        for digest in digests:
            left = refs.get(digest, 0) + step
            if left > 0:
                refs[digest] = left
            else:
                refs.pop(digest, None)

    def _hold(
        self, key: tuple[str, str], rows: dict[str, tuple[Signature, list[str]]]
    ) -> dict[str, tuple[Signature, list[str]]]:
        """Make ``rows`` the map this process holds for ``key`` (the one it replaces stops counting)."""
        self._let_go(key)
        self._maps[key] = rows
        for _, digests in rows.values():
            self._count(digests, 1)
        return rows

    def _let_go(self, key: tuple[str, str]) -> None:
        """Stop holding the map of ``key`` (its rows stop counting)."""
        old = self._maps.pop(key, None)
        for _, digests in (old or {}).values():
            self._count(digests, -1)

    def _put_row(
        self, rows: dict[str, tuple[Signature, list[str]]], filename: str, row: tuple[Signature, list[str]]
    ) -> None:
        """Set ``filename``'s row in a held map, the counts following."""
        previous = rows.get(filename)
        if previous is not None:
            self._count(previous[1], -1)
        rows[filename] = row
        self._count(row[1], 1)

    def _pop_row(
        self, rows: dict[str, tuple[Signature, list[str]]], filename: str
    ) -> tuple[Signature, list[str]] | None:
        """Remove ``filename``'s row from a held map, the counts following; its row, if it had one."""
        row = rows.pop(filename, None)
        if row is not None:
            self._count(row[1], -1)
        return row

    def journal_name(self, category: str, user_id: str, slug: str = "") -> str:
        return f"{MAP_DIR}/{category}/{user_file_prefix(user_id)}{slug or self.slug}.journal.jsonl"

    def _read(self, category: str, user_id: str) -> dict[str, tuple[Signature, list[str]]]:
        """The map as stored: the blob, then the journal's rows over it, in the order appended."""
        return self._read_with_released(category, user_id)[0]

    def _read_with_released(
        self, category: str, user_id: str, slug: str = ""
    ) -> tuple[dict[str, tuple[Signature, list[str]]], set[str]]:
        """The stored map (see :meth:`_read`) and the digests its journal released: those of
        notes deleted or re-cut since the blob was written, which compaction may drop."""
        name = self.blob_name(category, user_id, slug)
        rows: dict[str, tuple[Signature, list[str]]] = {}
        released: set[str] = set()
        data = self.backend.read_blob(name)
        if data is not None:
            try:
                rows = _rows_of(json.loads(data))
            except (ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:  # only a cache: rebuilt
                log_event(Event.MEMORY_CORRUPT, level=logging.WARNING, path=name, reason=str(exc)[:200])
        journal = self.backend.read_blob(self.journal_name(category, user_id, slug))
        for line in (journal or b"").splitlines():
            if not line.strip():
                continue
            try:
                raw = json.loads(line)
                rows.update(_rows_of(raw))
                for gone in _dropped_of(raw):
                    rows.pop(gone, None)
                released.update(str(d) for d in raw.get("released", ()))
            except (ValueError, KeyError, TypeError, IndexError, AttributeError):
                continue  # a partial last append (a writer killed mid-line): its notes count as stale
        return rows, released

    def _save(
        self,
        category: str,
        user_id: str,
        changed: Iterable[str],
        dropped: Iterable[str] = (),
        released: Iterable[str] = (),
    ) -> None:
        """Append the ``changed`` rows to the journal (a note write costs its own row, about 300
        bytes), with the names of ``dropped`` (deleted) notes and the digests their rows or the
        changed rows' previous passages ``released``; once the journal passes
        :data:`JOURNAL_BYTES`, fold it into the blob (:meth:`_compact`)."""
        rows = self._maps.get((category, user_id), {})
        line: dict[str, object] = {
            "version": MAP_VERSION,
            "notes": {n: [list(rows[n][0]), rows[n][1]] for n in sorted(changed)},
        }
        gone = sorted(dropped)
        if gone:
            line["dropped"] = gone
        freed = sorted(set(released))
        if freed:
            line["released"] = freed
        journal = self.journal_name(category, user_id)
        self.backend.append_blob(journal, json.dumps(line).encode("utf-8") + b"\n")
        if (self.backend.blob_size(journal) or 0) > JOURNAL_BYTES:
            self._compact(category, user_id)
        elif freed and getattr(self.cache, "discards_cheaply", False):
            self._discard_unnamed(freed)  # a row delete (PostgreSQL, memory): no need to wait for the fold

    def _discard_unnamed(self, released: Iterable[str]) -> None:
        """Drop from the cache the ``released`` digests no row of a map this process holds names
        (their reference counts: the cost is the released digests, not the loaded maps)."""
        unused = sorted(d for d in set(released) if d not in self._refs)
        if unused:
            self.cache.discard_kept(unused)

    def _compact(self, category: str, user_id: str) -> None:
        """Rewrite the blob with every live row (what is stored now, other writers' rows
        included), drop from the vector cache the digests the journal released that no row of
        a map this process holds still names (a deleted note's vectors do not outlive it), and
        drop the journal.

        The vectors go first: a crash before the blob is rewritten leaves the journal, and the
        next compaction drops them again (nothing live is named by them). A row another process
        appends between reading and dropping the journal is lost; its note then counts as stale
        and the next index or query records it again from cached vectors. The cache is shared
        by content: a passage text that another user's note, in a map this process has not
        read, holds too loses its vector as well, and is embedded again when next needed (as
        with :meth:`forget_user`)."""
        rows, released = self._read_with_released(category, user_id)
        self._hold((category, user_id), rows)
        self._discard_unnamed(released)
        payload = {"version": MAP_VERSION, "notes": {n: [list(sig), d] for n, (sig, d) in sorted(rows.items())}}
        self.backend.write_blob(self.blob_name(category, user_id), json.dumps(payload).encode("utf-8"))
        self.backend.delete_blob(self.journal_name(category, user_id))

    def compact(self, category: str, user_id: str) -> None:
        """Fold ``user_id``'s map of ``category`` now (see :meth:`_compact`): what a write does
        once the journal passes :data:`JOURNAL_BYTES`, for callers that want deleted notes'
        vectors gone at once."""
        with self._lock:
            self._compact(category, user_id)

    def drop(self, category: str, filename: str) -> bool:
        """Forget the map row of a deleted note: one journal line now; its vectors leave the
        cache at the map's next compaction unless another row names them. Returns whether the
        note had a row (nothing is written otherwise)."""
        owner = owner_of(filename) or ""
        with self._lock:
            rows = self._map(category, owner)
            row = self._pop_row(rows, filename)
            if row is None:
                return False
            self._save(category, owner, (), dropped=[filename], released=row[1])
            for key in [k for k in self._matrices if k[0] == owner]:
                del self._matrices[key]
        return True

    def digests_of_user(self, user_id: str, categories: Iterable[str]) -> list[str]:
        """Every passage digest recorded for ``user_id`` (what forgetting the user deletes),
        with those of deleted or re-cut notes that no compaction dropped yet, in the maps of both
        cut rules (see :attr:`slug`)."""
        out: list[str] = []
        with self._lock:
            for category in categories:
                rows, released = self._read_with_released(category, user_id)
                self._hold((category, user_id), rows)
                out.extend(d for _, digests in rows.values() for d in digests)
                out.extend(sorted(released))
                for slug in self._other_slugs():
                    other, freed = self._read_with_released(category, user_id, slug)
                    out.extend(d for _, digests in other.values() for d in digests)
                    out.extend(sorted(freed))
        return out

    def forget_user(self, user_id: str, categories: Iterable[str]) -> None:
        """Drop ``user_id``'s maps (blobs, of both cut rules, and memory)."""
        with self._lock:
            for category in categories:
                self._let_go((category, user_id))
                for slug in (self.slug, *self._other_slugs()):
                    self.backend.delete_blob(self.blob_name(category, user_id, slug))
                    self.backend.delete_blob(self.journal_name(category, user_id, slug))
            for key in [k for k in self._matrices if k[0] == user_id]:
                del self._matrices[key]

    # -- indexing --------------------------------------------------------------------------
    def stale(self, entries: Iterable[IndexEntry]) -> list[IndexEntry]:
        """The ``entries`` whose map row is missing or does not match (re-reading a map blob
        once: another process may have embedded them)."""
        out: list[IndexEntry] = []
        with self._lock:
            reread: set[tuple[str, str]] = set()
            for entry in entries:
                owner = owner_of(entry.filename) or ""
                row = self._map(entry.category, owner).get(entry.filename)
                if row is None or row[0] != signature_of(entry):
                    if (entry.category, owner) not in reread:
                        reread.add((entry.category, owner))
                        row = self._map(entry.category, owner, fresh=True).get(entry.filename)
                    if row is None or row[0] != signature_of(entry):
                        out.append(entry)
        return out

    def _plan(
        self, notes: Sequence[tuple[IndexEntry, str]]
    ) -> tuple[list[tuple[IndexEntry, list[str]]], list[tuple[str, str]]]:
        """Each note's passages, and the ``(key, text)`` items the cache is asked for."""
        planned: list[tuple[IndexEntry, list[str]]] = []
        items: list[tuple[str, str]] = []
        for entry, text in notes:
            passages = passages_of(lead_text(entry), entry.title, text, self.pieces, self.max_passages)
            planned.append((entry, passages))
            key = f"{entry.category}/{entry.filename}"
            items.extend((f"{key}#{i}", passage) for i, passage in enumerate(passages))
        return planned, items

    def _record(self, planned: Sequence[tuple[IndexEntry, list[str]]]) -> None:
        """Write the map rows of notes whose passages the cache now keeps."""
        touched: dict[tuple[str, str], list[str]] = {}
        released: dict[tuple[str, str], set[str]] = {}
        with self._lock:
            for entry, passages in planned:
                owner = owner_of(entry.filename) or ""
                rows = self._map(entry.category, owner)
                row = (signature_of(entry), [self.cache.digest_of(p) for p in passages])
                previous = rows.get(entry.filename)
                if previous == row:
                    continue  # recorded already (the write and then the watcher's refresh): nothing to append
                self._put_row(rows, entry.filename, row)
                touched.setdefault((entry.category, owner), []).append(entry.filename)
                if previous is not None:  # passages the note no longer has: free at the next compaction
                    released.setdefault((entry.category, owner), set()).update(set(previous[1]) - set(row[1]))
            for (category, owner), names in sorted(touched.items()):
                self._save(category, owner, names, released=released.get((category, owner), ()))

    def _chunks(
        self, planned: Sequence[tuple[IndexEntry, list[str]]], items: Sequence[tuple[str, str]]
    ) -> list[tuple[list[tuple[IndexEntry, list[str]]], list[tuple[str, str]]]]:
        """``planned`` notes in runs of about :data:`EMBED_BATCH` passages, with their items."""
        out: list[tuple[list[tuple[IndexEntry, list[str]]], list[tuple[str, str]]]] = []
        notes: list[tuple[IndexEntry, list[str]]] = []
        start = end = 0
        for note in planned:
            notes.append(note)
            end += len(note[1])
            if end - start >= EMBED_BATCH:
                out.append((notes, list(items[start:end])))
                notes, start = [], end
        if notes:
            out.append((notes, list(items[start:end])))
        return out

    def embed(self, notes: Sequence[tuple[IndexEntry, str]], progress: Progress | None = None) -> int:
        """Embed the passages of ``(entry, text)`` notes (what the cache keeps costs nothing)
        and record them in the maps, about :data:`EMBED_BATCH` passages at a time (an
        interruption keeps what was done); return how many passages the notes have.
        ``progress(done, total)`` counts passages."""
        self.check_rule()
        planned, items = self._plan(notes)
        done = 0
        for chunk, chunk_items in self._chunks(planned, items):
            self.cache.vectors_for(chunk_items)
            self._record(chunk)
            done += len(chunk_items)
            if progress is not None:
                progress(done, len(items))
        return len(items)

    async def aembed(self, notes: Sequence[tuple[IndexEntry, str]], progress: Progress | None = None) -> int:
        """Async twin of :meth:`embed` (the embedder's ``aembed``; map blobs in a thread)."""
        await asyncio.to_thread(self.check_rule)
        planned, items = self._plan(notes)
        done = 0
        for chunk, chunk_items in self._chunks(planned, items):
            await self.cache.avectors_for(chunk_items)
            await asyncio.to_thread(self._record, chunk)
            done += len(chunk_items)
            if progress is not None:
                progress(done, len(items))
        return len(items)

    # -- the rule --------------------------------------------------------------------------
    def _stored_rule(self) -> dict[str, object]:
        data = self.backend.read_blob(RULE_BLOB)
        try:
            raw = json.loads(data) if data else {}
        except ValueError:
            raw = {}
        return raw if isinstance(raw, dict) else {}

    def _listed_slugs(self) -> list[str]:
        listed = self._stored_rule().get("slugs")
        return [str(slug) for slug in listed] if isinstance(listed, list) else []

    def _other_slugs(self) -> list[str]:
        """The map names of every other rule this store's maps may have been written under: those
        :data:`RULE_BLOB` lists and the two of the versions before it was kept."""
        model = str(self.rule["model"])
        legacy = [_slug(model), _slug(f"{model}\x00words")]
        return [slug for slug in dict.fromkeys([*self._listed_slugs(), *legacy]) if slug != self.slug]

    def check_rule(self) -> dict[str, object] | None:
        """Compare the rule the maps were last written under with this index's (once per
        instance); on a change, log ``EMBEDDINGS_REBUILD`` at WARNING level (every note's
        passages are cut and recorded again, once; the passages both rules share keep their
        vectors, the others are embedded) and record the new rule. Returns the previous rule
        when it changed, else ``None``."""
        with self._lock:
            if self._checked:
                return None
            self._checked = True
            stored = self._stored_rule()
            previous = stored.get("rule")
            slugs = self._listed_slugs()
            if previous == self.rule and slugs[-1:] == [self.slug]:
                return None
            others = [slug for slug in slugs if slug != self.slug]
            payload = {"rule": self.rule, "slugs": [*others[-15:], self.slug]}
            self.backend.write_blob(RULE_BLOB, json.dumps(payload, sort_keys=True).encode("utf-8"))
            if not isinstance(previous, dict) or previous == self.rule:
                return None
            changed = ", ".join(
                f"{k} {previous.get(k)!r} -> {v!r}" for k, v in self.rule.items() if previous.get(k) != v
            )
            log_event(Event.EMBEDDINGS_REBUILD, level=logging.WARNING, reason=f"passage rule changed: {changed}")
            return previous

    # -- queries ---------------------------------------------------------------------------
    def _kept_matrix(self, user_id: str, cats: tuple[str, ...], generation: object) -> DenseMatrix | None:
        with self._lock:
            kept = self._matrices.get((user_id, cats))
            return kept[1] if kept is not None and kept[0] == generation else None

    def _keep(self, user_id: str, cats: tuple[str, ...], generation: object, dense: DenseMatrix) -> DenseMatrix:
        with self._lock:
            self._matrices[(user_id, cats)] = (generation, dense)
            while len(self._matrices) > 64:
                self._matrices.pop(next(iter(self._matrices)))
        return dense

    def matrix(
        self,
        user_id: str,
        cats: tuple[str, ...],
        entries: Sequence[IndexEntry],
        generation: object,
        read: ReadNote,
        progress: Progress | None = None,
    ) -> DenseMatrix:
        """The passage vectors of ``entries`` (one user's notes), kept until ``generation``
        (the index's) changes. Embeds only notes changed since indexing that nobody embedded
        (see the module docstring), reporting to ``progress(done, total)`` (passages)."""
        kept = self._kept_matrix(user_id, cats, generation)
        if kept is not None:
            return kept
        self.check_rule()
        stale = self.stale(entries)
        if stale:
            _log_query_embedding(len(stale))
            self.embed([(e, read(e.category, e.filename) or "") for e in stale], progress)
        dense = self._assemble(entries)
        if dense is None:  # vectors gone from the cache (another model took it over): embed again
            self.embed([(e, read(e.category, e.filename) or "") for e in entries])
            dense = self._assemble(entries)
        if dense is None:
            raise ModelError("passage vectors vanished from the cache while assembling")
        return self._keep(user_id, cats, generation, dense)

    async def amatrix(
        self,
        user_id: str,
        cats: tuple[str, ...],
        entries: Sequence[IndexEntry],
        generation: object,
        read: ReadNote,
        progress: Progress | None = None,
    ) -> DenseMatrix:
        """Async twin of :meth:`matrix`: stale notes go through the embedder's ``aembed``."""
        kept = self._kept_matrix(user_id, cats, generation)
        if kept is not None:
            return kept
        await asyncio.to_thread(self.check_rule)
        stale = await asyncio.to_thread(self.stale, entries)
        if stale:
            _log_query_embedding(len(stale))
            texts = await asyncio.to_thread(lambda: [read(e.category, e.filename) or "" for e in stale])
            await self.aembed(list(zip(stale, texts, strict=True)), progress)
        dense = await asyncio.to_thread(self._assemble, entries)
        if dense is None:
            texts = await asyncio.to_thread(lambda: [read(e.category, e.filename) or "" for e in entries])
            await self.aembed(list(zip(entries, texts, strict=True)))
            dense = await asyncio.to_thread(self._assemble, entries)
        if dense is None:
            raise ModelError("passage vectors vanished from the cache while assembling")
        return self._keep(user_id, cats, generation, dense)

    def _assemble(self, entries: Sequence[IndexEntry]) -> DenseMatrix | None:
        digests: list[str] = []
        starts: list[int] = []
        with self._lock:
            for entry in entries:
                row = self._map(entry.category, owner_of(entry.filename) or "").get(entry.filename)
                if row is None:
                    return None
                starts.append(len(digests))
                digests.extend(row[1])
        matrix = self.cache.kept(digests)
        if matrix is None:
            return None
        return DenseMatrix(entries, np.ascontiguousarray(matrix, dtype=np.float32), np.array(starts, dtype=np.int64))
