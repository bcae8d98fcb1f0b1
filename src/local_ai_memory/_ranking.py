"""Stage 1 BM25 ranking: an incremental inverted index with numpy.

Scoring (what ``tests/test_ranking.py`` checks against an independent computation): for each
weighted query term ``(t, w)`` present in a document,
``w * idf(t) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))`` with ``k1 = 1.2``,
``b = 0.75`` and Lucene's ``idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5))``, which is always
positive: every returned score is above zero, however few documents a user has. Lead terms
(:data:`._analysis.LEAD`) are scored with ``b = 0``, and only length terms
(:func:`._analysis.is_length_term`) count for ``dl``. Scores compare documents within one
query; they are not probabilities and not comparable across queries.

Why not a library ranker: they rebuild from scratch on every change. Here each corpus (one
user's files in one category) is a :class:`BM25Index`:

* a compacted **base segment** in term-major CSR arrays (term id -> document slots and term
  frequencies), scored with vectorized numpy per query term;
* a small **delta** of documents added or changed since the last compaction, kept in a
  Python posting dict. Changing one file marks its old slot dead and adds a new slot: O(size
  of that file), no rebuild. When delta plus dead slots pass ``max(1024, 10% of docs)`` the
  index compacts itself (a vectorized rebuild, about a second at 100k full-text documents).

Document frequencies, ``N`` and total length are kept incrementally, so the statistics always
equal those of a fresh build over exactly the live documents. Several corpora (categories)
are ranked together by summing their statistics, as one corpus over the union.

Documents that share no term with the query are not returned. Ties are broken by file name,
so results are deterministic.
"""

from __future__ import annotations

import heapq
import io
import math
import zipfile
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ._analysis import LEAD, is_length_term

__all__ = [
    "BM25Index",
    "CountedDoc",
    "Vocabulary",
    "count_terms",
    "idf",
    "pack_texts",
    "rank",
    "read_snapshot",
    "snapshot_bytes",
    "unpack_texts",
]

K1 = 1.2
B = 0.75
_MIN_COMPACT = 1024
_COMPACT_RATIO = 0.1

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
TermArray = npt.NDArray[np.int32]
CountArray = npt.NDArray[np.float32]
CountedDoc = tuple[TermArray, CountArray, int]


def count_terms(vocab: Vocabulary, tokens: Sequence[str]) -> CountedDoc:
    """``(term ids sorted, their counts, length)`` of one document's terms; the length counts
    only length terms (see :func:`._analysis.is_length_term`)."""
    counts = Counter(tokens)
    terms = np.array(vocab.ids_for(counts), dtype=np.int32)
    tfs = np.array(list(counts.values()), dtype=np.float32)
    order = np.argsort(terms)
    length = sum(n for term, n in counts.items() if is_length_term(term))
    return terms[order], tfs[order], length


class Vocabulary:
    """Maps terms to dense integer ids; shared by the indexes of one store so they can be combined."""

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}
        self._words: list[str] = []

    def __len__(self) -> int:
        return len(self._ids)

    def add(self, term: str) -> int:
        """Id of ``term``, assigning a new one if needed."""
        return self.ids_for([term])[0]

    def ids_for(self, terms: Iterable[str]) -> list[int]:
        """Ids of ``terms``, assigning new ones as needed."""
        ids = self._ids
        words = self._words
        out: list[int] = []
        for term in terms:
            found = ids.get(term)
            if found is None:
                found = ids[term] = len(words)
                words.append(term)
            out.append(found)
        return out

    def words(self, ids: Iterable[int]) -> list[str]:
        """The terms of ``ids``."""
        words = self._words
        return [words[i] for i in ids]

    def get(self, term: str) -> int | None:
        """Id of ``term`` or ``None`` if no document ever contained it."""
        return self._ids.get(term)


def _grow(array: npt.NDArray[np.generic], size: int) -> npt.NDArray[np.generic]:
    if size <= len(array):
        return array
    bigger = np.zeros(max(size, 2 * len(array), 16), dtype=array.dtype)
    bigger[: len(array)] = array
    return bigger


@dataclass
class _Stats:
    n_docs: int
    avgdl: float
    df: IntArray


QueryTerm = tuple[int, float, bool]  # term id, weight x idf, scored without length normalization


class BM25Index:
    """One BM25 corpus (documents keyed by name) that can be changed one document at a time."""

    def __init__(self, vocab: Vocabulary, label: str = "") -> None:
        self.vocab = vocab
        self.label = label
        self.version = 0
        self._slot: dict[str, int] = {}
        self._keys: list[str | None] = []
        self._terms: list[TermArray | None] = []
        self._tfs: list[CountArray | None] = []
        self._doc_len: FloatArray = np.zeros(0, dtype=np.float64)
        self._alive: npt.NDArray[np.bool_] = np.zeros(0, dtype=np.bool_)
        self._df: IntArray = np.zeros(0, dtype=np.int64)
        self.n_docs = 0
        self.total_len = 0
        self._base_ptr: IntArray = np.zeros(1, dtype=np.int64)
        self._base_slots: TermArray = np.zeros(0, dtype=np.int32)
        self._base_tfs: CountArray = np.zeros(0, dtype=np.float32)
        self._base_end = 0
        self._delta: dict[int, list[int]] = {}
        self._stats_cache: tuple[int, int, _Stats] | None = None
        self._norm_cache: tuple[int, float, FloatArray] | None = None

    def __len__(self) -> int:
        return self.n_docs

    def __contains__(self, key: object) -> bool:
        return key in self._slot

    def keys(self) -> list[str]:
        """Names of the live documents."""
        return list(self._slot)

    # -- changes -------------------------------------------------------------------------
    def _insert(self, key: str, doc: CountedDoc, *, postings: bool) -> None:
        if key in self._slot:
            self._delete(key)
        terms, tfs, length = doc
        slot = len(self._keys)
        self._keys.append(key)
        self._terms.append(terms)
        self._tfs.append(tfs)
        self._doc_len = _grow(self._doc_len, slot + 1)  # type: ignore[assignment]
        self._alive = _grow(self._alive, slot + 1)  # type: ignore[assignment]
        self._doc_len[slot] = length
        self._alive[slot] = True
        self._slot[key] = slot
        self._df = _grow(self._df, len(self.vocab))  # type: ignore[assignment]
        self._df[terms] += 1
        self.n_docs += 1
        self.total_len += length
        if postings:
            for term in terms.tolist():
                self._delta.setdefault(term, []).append(slot)

    def _delete(self, key: str) -> bool:
        slot = self._slot.pop(key, None)
        if slot is None:
            return False
        terms = self._terms[slot]
        assert terms is not None
        self._df[terms] -= 1
        self.n_docs -= 1
        self.total_len -= int(self._doc_len[slot])
        self._alive[slot] = False
        self._keys[slot] = None
        self._terms[slot] = None
        self._tfs[slot] = None
        return True

    def add(self, key: str, tokens: Sequence[str]) -> None:
        """Add document ``key`` (replacing a previous version of it)."""
        self._insert(key, count_terms(self.vocab, tokens), postings=True)
        self._changed()

    def remove(self, key: str) -> bool:
        """Remove document ``key``; return whether it was there."""
        found = self._delete(key)
        if found:
            self._changed()
        return found

    def build(self, docs: Iterable[tuple[str, Sequence[str]]]) -> None:
        """Add many documents at once (one compaction at the end)."""
        self.build_counted((key, count_terms(self.vocab, tokens)) for key, tokens in docs)

    def build_counted(self, docs: Iterable[tuple[str, CountedDoc]]) -> None:
        """:meth:`build` for documents already passed through :func:`count_terms`."""
        for key, doc in docs:
            self._insert(key, doc, postings=False)
        self.compact()

    def _changed(self) -> None:
        self.version += 1
        dead = len(self._keys) - self.n_docs
        pending = dead + (len(self._keys) - self._base_end)
        if pending > max(_MIN_COMPACT, _COMPACT_RATIO * self.n_docs):
            self.compact()

    def compact(self) -> None:
        """Rebuild the base segment from the live documents and clear the delta."""
        live = [slot for slot, key in enumerate(self._keys) if key is not None]
        keys = [self._keys[s] for s in live]
        terms = [self._terms[s] for s in live]
        tfs = [self._tfs[s] for s in live]
        n = len(live)
        self._keys = keys
        self._terms = terms
        self._tfs = tfs
        self._doc_len = self._doc_len[live].copy() if n else np.zeros(0, dtype=np.float64)
        self._alive = np.ones(n, dtype=np.bool_)
        self._slot = {key: slot for slot, key in enumerate(keys) if key is not None}
        vocab_size = len(self.vocab)
        if n:
            lengths = np.fromiter((len(t) for t in terms if t is not None), dtype=np.int64, count=n)
            all_terms = np.concatenate([t for t in terms if t is not None])
            order = np.argsort(all_terms, kind="stable")
            counts = np.bincount(all_terms, minlength=vocab_size)
            del all_terms
            self._base_slots = np.repeat(np.arange(n, dtype=np.int32), lengths)[order]
            self._base_tfs = np.concatenate([t for t in tfs if t is not None])[order]
            del order
        else:
            self._base_slots = np.zeros(0, dtype=np.int32)
            self._base_tfs = np.zeros(0, dtype=np.float32)
            counts = np.zeros(vocab_size, dtype=np.int64)
        self._base_ptr = np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(counts)])
        self._base_end = n
        self._delta = {}
        self.version += 1

    # -- snapshots -----------------------------------------------------------------------
    def export(self) -> tuple[dict[str, npt.NDArray[Any]], list[str]]:
        """The live documents as arrays (for :func:`snapshot_bytes`), and their names in row order."""
        live = list(self._slot.items())
        terms = [self._terms[slot] for _, slot in live]
        tfs = [self._tfs[slot] for _, slot in live]
        lengths = np.array([len(t) for t in terms if t is not None], dtype=np.int64)
        ptr = np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(lengths)])
        if live:
            all_terms = np.concatenate([t for t in terms if t is not None])
            all_tfs = np.concatenate([t for t in tfs if t is not None])
        else:
            all_terms = np.zeros(0, dtype=np.int32)
            all_tfs = np.zeros(0, dtype=np.float32)
        used = np.flatnonzero(np.bincount(all_terms, minlength=len(self.vocab)))
        remap = np.zeros(len(self.vocab), dtype=np.int64)
        remap[used] = np.arange(len(used))
        names = [key for key, _ in live]
        return {
            "keys": pack_texts(names),
            "doc_len": self._doc_len[[slot for _, slot in live]].astype(np.int64),
            "ptr": ptr,
            "terms": remap[all_terms].astype(np.int32),
            "tfs": all_tfs.astype(np.uint32),
            "words": pack_texts(self.vocab.words(used.tolist())),
        }, names

    def load(self, data: Mapping[str, npt.NDArray[Any]], accept: Callable[[str, int], bool]) -> set[str]:
        """Add the documents of an :meth:`export` for which ``accept(key, row)`` is true (one
        compaction); return their names. Terms map onto this index's vocabulary by text."""
        keys = unpack_texts(data["keys"])
        words = unpack_texts(data["words"])
        ptr = np.asarray(data["ptr"], dtype=np.int64)
        if len(ptr) != len(keys) + 1:
            raise ValueError("snapshot arrays do not match")
        global_ids = np.array(self.vocab.ids_for(words), dtype=np.int32)
        terms = global_ids[np.asarray(data["terms"], dtype=np.int64)]
        tfs = np.asarray(data["tfs"], dtype=np.float32)
        doc_len = np.asarray(data["doc_len"], dtype=np.float64)
        taken: set[str] = set()
        self._df = _grow(self._df, len(self.vocab))  # type: ignore[assignment]
        for row, key in enumerate(keys):
            if key in self._slot or not accept(key, row):
                continue
            start, end = int(ptr[row]), int(ptr[row + 1])
            doc_terms = terms[start:end]
            slot = len(self._keys)
            self._keys.append(key)
            self._terms.append(doc_terms)
            self._tfs.append(tfs[start:end])
            self._slot[key] = slot
            self.n_docs += 1
            self.total_len += int(doc_len[row])
            taken.add(key)
        size = len(self._keys)
        self._doc_len = _grow(self._doc_len, size)  # type: ignore[assignment]
        self._alive = _grow(self._alive, size)  # type: ignore[assignment]
        rows = {key: row for row, key in enumerate(keys)}
        for key in taken:
            slot = self._slot[key]
            self._doc_len[slot] = doc_len[rows[key]]
            self._alive[slot] = True
            loaded = self._terms[slot]
            assert loaded is not None
            self._df[loaded] += 1
        self.compact()
        return taken

    # -- scoring -------------------------------------------------------------------------
    def _df_view(self, size: int) -> IntArray:
        if len(self._df) >= size:
            return self._df[:size]
        out = np.zeros(size, dtype=np.int64)
        out[: len(self._df)] = self._df
        return out

    def stats(self) -> _Stats:
        """BM25 statistics of this corpus alone (cached until it changes)."""
        size = len(self.vocab)
        cached = self._stats_cache
        if cached is not None and cached[0] == self.version and cached[1] == size:
            return cached[2]
        stats = _combine([self])
        self._stats_cache = (self.version, size, stats)
        return stats

    def _accumulate(self, query: Sequence[QueryTerm], avgdl: float) -> tuple[IntArray, FloatArray]:
        """Slots of the live documents sharing a term with the query, and their scores."""
        cap = len(self._keys)
        if cap == 0 or not query:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
        scores = np.zeros(cap, dtype=np.float64)
        touched = np.zeros(cap, dtype=np.bool_)
        cached = self._norm_cache
        if cached is not None and cached[0] == self.version and cached[1] == avgdl and len(cached[2]) == cap:
            norm = cached[2]
        else:
            norm = K1 * (1.0 - B + B * self._doc_len[:cap] / avgdl)
            self._norm_cache = (self.version, avgdl, norm)
        n_base_terms = len(self._base_ptr) - 1
        for term, idf, flat in query:
            if term < n_base_terms:
                start, end = self._base_ptr[term], self._base_ptr[term + 1]
                if end > start:
                    slots = self._base_slots[start:end]
                    tf = self._base_tfs[start:end].astype(np.float64)
                    scores[slots] += idf * (tf * (K1 + 1.0) / (tf + (K1 if flat else norm[slots])))
                    touched[slots] = True
            for slot in self._delta.get(term, ()):
                terms = self._terms[slot]
                tfs = self._tfs[slot]
                if terms is None or tfs is None:
                    continue
                where = int(np.searchsorted(terms, term))
                tf_one = float(tfs[where])
                scores[slot] += idf * (tf_one * (K1 + 1.0) / (tf_one + (K1 if flat else norm[slot])))
                touched[slot] = True
        hits = np.flatnonzero(touched & self._alive[:cap])
        return hits, scores[hits]

    def key_of(self, slot: int) -> str:
        """Name of the document in ``slot``."""
        return self._keys[slot] or ""


def pack_texts(texts: list[str]) -> npt.NDArray[np.uint8]:
    """Texts without NUL characters as one byte array (compact, no pickles, any length)."""
    return np.frombuffer("\x00".join(texts).encode("utf-8", "surrogatepass"), dtype=np.uint8)


def unpack_texts(array: npt.NDArray[Any]) -> list[str]:
    """Invert :func:`pack_texts`."""
    text = np.asarray(array, dtype=np.uint8).tobytes().decode("utf-8", "surrogatepass")
    return text.split("\x00") if text else []


def snapshot_bytes(arrays: Mapping[str, npt.NDArray[Any]]) -> bytes:
    """An ``.npz`` file holding ``arrays`` (no pickles)."""
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)  # type: ignore[arg-type]
    return buffer.getvalue()


def read_snapshot(data: bytes) -> dict[str, npt.NDArray[Any]]:
    """The arrays of a :func:`snapshot_bytes` file; raises ``ValueError`` if it is damaged."""
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as archive:
            return {name: np.asarray(archive[name]) for name in archive.files}
    except (OSError, EOFError, KeyError, zipfile.BadZipFile) as exc:
        raise ValueError(f"damaged snapshot: {exc}") from exc


def _combine(indexes: Sequence[BM25Index]) -> _Stats:
    size = len(indexes[0].vocab) if indexes else 0
    n_docs = sum(ix.n_docs for ix in indexes)
    total = sum(ix.total_len for ix in indexes)
    df = np.zeros(size, dtype=np.int64)
    for ix in indexes:
        df += ix._df_view(size)
    return _Stats(n_docs=n_docs, avgdl=(total / n_docs) if n_docs else 0.0, df=df)


def idf(n_docs: int, df: float) -> float:
    """Lucene's BM25 IDF, ``ln(1 + (N - df + 0.5) / (df + 0.5))``: positive for any ``0 < df <= N``."""
    return math.log1p((n_docs - df + 0.5) / (df + 0.5))


def _stats_for(indexes: Sequence[BM25Index]) -> _Stats:
    return indexes[0].stats() if len(indexes) == 1 else _combine(indexes)


def kth_largest(scores: FloatArray, k: int) -> float:
    """The ``k``-th largest score (``1 <= k <= len(scores)``), exactly, without a selection
    over all of them: the ``k``-th largest of an evenly spaced sample is a lower bound, and
    only the scores at or above it are selected from (about 1 ms less per query at 100k hits)."""
    n = len(scores)
    step = n // 2048
    if step > 1:
        sample = scores[::step]
        if len(sample) >= k:
            bound = np.partition(sample, len(sample) - k)[len(sample) - k]
            scores = scores[scores >= bound]
            n = len(scores)
    return float(np.partition(scores, n - k)[n - k])


def rank(
    indexes: Sequence[BM25Index], query_terms: Sequence[str | tuple[str, float]], top_n: int
) -> list[tuple[str, str, float]]:
    """Rank the union of ``indexes`` for ``query_terms``; ``[(label, key, score)]`` best first.

    A query term is a term (weight 1) or ``(term, weight)``, as :meth:`._analysis.Analyzer.query_terms`
    gives them; a term given twice counts twice. Only documents that contain at least one query
    term are returned, ties ordered by label and key. Scores are positive.
    """
    indexes = [ix for ix in indexes if ix.n_docs]
    if not indexes or top_n <= 0:
        return []
    vocab = indexes[0].vocab
    stats = _stats_for(indexes)
    if not stats.n_docs:
        return []
    avgdl = stats.avgdl if stats.avgdl > 0 else 1.0
    query: list[QueryTerm] = []
    for item in query_terms:
        token, weight = (item, 1.0) if isinstance(item, str) else item
        term = vocab.get(token)
        if term is None or term >= len(stats.df) or stats.df[term] == 0 or weight <= 0:
            continue
        query.append((term, weight * idf(stats.n_docs, float(stats.df[term])), token.startswith(LEAD)))
    if not query:
        return []
    found: list[tuple[float, str, str]] = []
    for ix in indexes:
        slots, scores = ix._accumulate(query, avgdl)
        if not len(slots):
            continue
        if len(slots) > 4 * top_n:
            threshold = kth_largest(scores, top_n)
            chosen = np.flatnonzero(scores >= threshold).tolist()
        else:
            chosen = list(range(len(slots)))
        found.extend((float(scores[i]), ix.label, ix.key_of(int(slots[i]))) for i in chosen)
    best = heapq.nsmallest(top_n, found, key=lambda item: (-item[0], item[1], item[2]))
    return [(label, key, score) for score, label, key in best]
