"""Stage 1 BM25 ranking: an incremental inverted index with numpy.

Scoring (what ``tests/test_ranking.py`` checks against an independent computation): for each
weighted query term ``(t, w)`` present in a document,
``w * idf(t) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))`` with ``k1 = 1.2``,
``b = 0.75`` and Lucene's ``idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5))``, which is always
positive: every returned score is above zero, however few documents a user has. Lead terms
(:data:`local_ai_memory._shared.text.LEAD`) are scored with ``b = 0``, and only length terms
(:func:`local_ai_memory._shared.text.is_length_term`) count for ``dl``. Scores compare documents within one
query; they are not probabilities and not comparable across queries.

Why not a library ranker: they rebuild from scratch on every change. Here each corpus (one
user's files in one category) is a :class:`BM25Index`:

* a compacted **base segment** in term-major CSR arrays (term id -> document slots and term
  frequencies), scored with vectorized numpy per query term;
* a small **delta** of documents added or changed since the last compaction, kept in a
  Python posting dict (term -> slots and term frequencies, scored one array operation per
  term). Changing one file marks its old slot dead and adds a new slot: O(size of that
  file), no rebuild. When delta plus dead slots pass ``max(1024, 10% of docs)`` the
  index compacts itself (a vectorized rebuild, about a second at 100k full-text documents).

Document frequencies, ``N`` and total length are kept incrementally, so the statistics always
equal those of a fresh build over exactly the live documents. Several corpora (categories)
are ranked together by summing their statistics, as one corpus over the union.

A query adds, word by word, what the word's terms score into one dense array over the slots.
A word that comes back (most do: people ask about the same things) is added as one kept
array over the union of its terms' postings, or over every slot when it is in most documents;
the top n are then selected from the dense array without listing every hit (:func:`best_slots`).

Documents that share no term with the query are not returned. Ties are broken by file name,
so results are deterministic.
"""

from __future__ import annotations

import heapq
import io
import math
import struct
import zipfile
import zlib
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from local_ai_memory._shared.text import EXACT, LEAD, is_length_term

__all__ = [
    "BM25Index",
    "CountedDoc",
    "Vocabulary",
    "array_bounds",
    "count_terms",
    "idf",
    "pack_texts",
    "rank",
    "read_snapshot",
    "snapshot_bytes",
    "unpack_texts",
]

_NAMESPACES = (LEAD, EXACT)
_NPY_HEADER_MAX = 65_536  # numpy writes headers of a few hundred bytes; read no further for one
K1 = 1.2
B = 0.75
CONTRIBUTIONS_KEPT = 32 << 20
"""Bytes of word contributions an index keeps for the next queries (see :meth:`BM25Index._keep`)."""
_SEEN_WORDS = 2048  # per index: about 0.4 MB at most
# What Python objects cost beside the arrays, for :meth:`BM25Index.held_bytes` (measured with
# tracemalloc on CPython 3.11; estimates for a memory budget, not accounting):
_DOC_BYTES = 160  # a document's name and its places in the slot dict and key list
_DELTA_POSTING_BYTES = 70  # a posting of the delta, in its term's two Python lists
_UNPOSTED_BYTES = 650  # beside its arrays' data: a delta document's array headers, its pending entry and growth
_WORD_BYTES = 100  # a term kept as a str in a dict and a list
_MIN_COMPACT = 1024
_COMPACT_RATIO = 0.1

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
TermArray = npt.NDArray[np.int32]
CountArray = npt.NDArray[np.float32]
CountedDoc = tuple[TermArray, CountArray, int]


def count_terms(vocab: Vocabulary, tokens: Sequence[str]) -> CountedDoc:
    """``(term ids sorted, their counts, length)`` of one document's terms; the length counts
    only length terms (see :func:`local_ai_memory._shared.text.is_length_term`)."""
    counts = Counter(tokens)
    terms = np.array(vocab.ids_for(counts), dtype=np.int32)
    tfs = np.array(list(counts.values()), dtype=np.float32)
    order = np.argsort(terms)
    length = sum(n for term, n in counts.items() if is_length_term(term))
    return terms[order], tfs[order], length


class _SortedTerms:
    """A snapshot's terms as stored (one NUL-separated UTF-8 buffer) with their sorted order:
    a term's id is found by binary search over the encoded bytes, comparing about 16 of them,
    instead of building a dict of every term (tens of thousands of strings: 15-20 ms of a fresh
    process's first query at 10k notes). UTF-8 bytes sort as their code points do, so the
    order the snapshot wrote (Python's ``str`` order) is the order of the bytes compared.

    Two 4-byte arrays per term (the sorted order and where each term starts): a host keeps one
    of these per user it serves, so 8-byte copies in sorted order cost megabytes per hundred
    users. Read through memoryviews, whose items are plain ints (a numpy scalar per probe made
    a search 30% slower)."""

    def __init__(self, packed: bytes | memoryview, order: npt.NDArray[Any]) -> None:
        self.packed = packed  # a view into the snapshot's bytes, which the ranker keeps anyway
        self.size = len(order)
        ends = np.flatnonzero(np.frombuffer(packed, dtype=np.uint8) == 0)
        # term i is packed[starts[i] : starts[i + 1] - 1]; the last one ends at len(packed)
        starts = np.empty(self.size + 1, dtype=np.int64)
        starts[0], starts[1:-1], starts[-1] = 0, ends + 1, len(packed) + 1
        wide = starts[-1] > np.iinfo(np.int32).max
        self._starts = _ints(starts) if wide else _ints(starts.astype(np.int32))
        self._ids = _ints(np.ascontiguousarray(order, dtype=np.int32))
        self._found: dict[str, int | None] = {}  # the last answers, up to _SEEN_WORDS of them
        self._hashes: npt.NDArray[np.int64] | None = None  # see find_many
        self._hash_ids: TermArray = np.zeros(0, dtype=np.int32)

    def __len__(self) -> int:
        return self.size

    def held_bytes(self) -> int:
        """About what these terms hold in memory (see :meth:`BM25Index.held_bytes`)."""
        own = len(self.packed) if isinstance(self.packed, bytes) else 0  # a view: the ranker counts it
        return own + (8 if self._hashes is None else 20) * self.size

    def find(self, term: str) -> int | None:
        found = self._found.get(term, -1)  # one lookup: another thread may clear the dict
        if found != -1:
            return found
        if len(self._found) >= _SEEN_WORDS:
            self._found.clear()
        self._found[term] = found = self._search(term)
        return found

    def _search(self, term: str) -> int | None:
        key = term.encode("utf-8", "surrogatepass")
        packed, starts, ids = self.packed, self._starts, self._ids
        low, high = 0, self.size
        while low < high:
            middle = (low + high) // 2
            at = ids[middle]
            if bytes(packed[starts[at] : starts[at + 1] - 1]) < key:
                low = middle + 1
            else:
                high = middle
        if low < self.size:
            at = ids[low]
            if packed[starts[at] : starts[at + 1] - 1] == key:
                return int(at)
        return None

    def all(self) -> list[str]:
        return bytes(self.packed).decode("utf-8", "surrogatepass").split("\x00")

    def _term(self, at: int) -> bytes | memoryview:
        return self.packed[self._starts[at] : self._starts[at + 1] - 1]

    def find_many(self, terms: Sequence[str]) -> list[int | None]:
        """The ids of ``terms`` (``None``: not a stored term), as a write needs them for a
        document's few hundred terms: by the terms' hashes, searched in one array operation
        among the stored terms' sorted hashes (made at the first call: 12 bytes a term, where
        a dict of every term costs about 100), each hit checked against the stored bytes."""
        if self._hashes is None:
            hashes = np.fromiter(map(hash, self.all()), dtype=np.int64, count=self.size)
            order = np.argsort(hashes, kind="stable")
            self._hashes, self._hash_ids = hashes[order], order.astype(np.int32)
        wanted = np.fromiter(map(hash, terms), dtype=np.int64, count=len(terms))
        at = np.minimum(np.searchsorted(self._hashes, wanted), self.size - 1)
        hit = (self._hashes[at] == wanted).tolist()
        out: list[int | None] = []
        for term, found, candidate in zip(terms, hit, self._hash_ids[at].tolist(), strict=True):
            if not found:  # no stored term has this hash
                out.append(None)
            elif self._term(candidate) == term.encode("utf-8", "surrogatepass"):
                out.append(candidate)
            else:  # two terms share a hash: ask the bytes
                out.append(self._search(term))
        return out


def _footprint(arrays: Iterable[npt.NDArray[Any]]) -> int:
    """The bytes ``arrays`` keep alive: each one's own, or once the whole buffer that views share
    (a snapshot's bytes, seen through the memoryview each array of :func:`read_snapshot` is over)."""
    sizes: dict[int, int] = {}
    for array in arrays:
        root = array
        while isinstance(root.base, np.ndarray):
            root = root.base
        base: object = root.base  # numpy's stubs say ndarray or None; a buffer's view is a memoryview
        shared = base.obj if isinstance(base, memoryview) else None
        if isinstance(shared, bytes):
            sizes[id(shared)] = len(shared)
        else:
            sizes[id(root)] = root.nbytes
    return sum(sizes.values())


def _nuls(packed: bytes | memoryview) -> int:
    """How many NUL bytes ``packed`` holds (the separators of :func:`pack_texts`)."""
    return int(np.count_nonzero(np.frombuffer(packed, dtype=np.uint8) == 0))


def _ints(array: npt.NDArray[np.int32 | np.int64]) -> memoryview:
    """A contiguous integer array as a memoryview of plain ints (numpy's own buffer format,
    ``=i``, is one that memoryviews cannot index)."""
    return memoryview(array.data).cast("B").cast("q" if array.dtype.itemsize == 8 else "i")


class Vocabulary:
    """Maps terms to dense integer ids; shared by the indexes of one store so they can be combined.

    A fresh vocabulary can take a ranker snapshot's terms as they are stored
    (:meth:`adopt_sorted`) and keep them so: terms are looked up by binary search (a query's
    few) or by hash (a written document's hundreds), and terms first seen after that get the
    next ids in a small dict of their own. No dict of every term is built: a host holds one
    vocabulary per user it serves, and writes reach most of them."""

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}  # every term, or (with _sorted) the terms added since
        self._words: list[str] = []  # likewise, in id order
        self._sorted: _SortedTerms | None = None

    def __len__(self) -> int:
        return len(self._words) + (len(self._sorted) if self._sorted is not None else 0)

    def held_bytes(self) -> int:
        """About what the vocabulary holds in memory (see :meth:`BM25Index.held_bytes`)."""
        stored = self._sorted
        return _WORD_BYTES * len(self._words) + (stored.held_bytes() if stored is not None else 0)

    def add(self, term: str) -> int:
        """Id of ``term``, assigning a new one if needed."""
        return self.ids_for([term])[0]

    def ids_for(self, terms: Iterable[str]) -> list[int]:
        """Ids of ``terms``, assigning new ones as needed."""
        terms = list(terms)
        stored = self._sorted
        found = stored.find_many(terms) if stored is not None and terms else [None] * len(terms)
        ids, words = self._ids, self._words
        base = len(stored) if stored is not None else 0
        out: list[int] = []
        for term, stored_id in zip(terms, found, strict=True):
            got = stored_id if stored_id is not None else ids.get(term)
            if got is None:
                got = ids[term] = base + len(words)
                words.append(term)
            out.append(got)
        return out

    def adopt(self, terms: list[str]) -> bool:
        """Take ``terms`` as this empty vocabulary's, numbered in their order; ``False`` (and
        nothing taken) when the vocabulary is not empty or the terms are not distinct."""
        if len(self):
            return False
        fresh = dict(zip(terms, range(len(terms)), strict=True))
        if len(fresh) != len(terms):
            return False
        self._ids = fresh
        self._words = list(terms)
        return True

    def adopt_sorted(self, packed: bytes | memoryview, order: npt.NDArray[Any]) -> bool:
        """Take a snapshot's terms as this empty vocabulary's, numbered in their stored order,
        without decoding them: ``packed`` as :func:`pack_texts` wrote them, ``order`` their ids
        sorted by term (distinct terms, as a vocabulary writes them). ``False`` (nothing taken)
        when the vocabulary is not empty or ``order`` is not a permutation of the terms."""
        if len(self) or not packed:
            return False
        n = _nuls(packed) + 1
        order = np.asarray(order)
        if order.shape != (n,) or order.dtype.kind not in "iu":
            return False
        seen = np.zeros(n, dtype=np.bool_)
        if bool(((order < 0) | (order >= n)).any()):
            return False
        seen[order] = True
        if not bool(seen.all()):
            return False
        self._sorted = _SortedTerms(packed, order)
        return True

    def words(self, ids: Iterable[int]) -> list[str]:
        """The terms of ``ids``."""
        stored = self._sorted
        if stored is None:
            words = self._words
            return [words[i] for i in ids]
        every = [*stored.all(), *self._words]  # a snapshot's export: every term, once
        return [every[i] for i in ids]

    def get(self, term: str) -> int | None:
        """Id of ``term`` or ``None`` if no document ever contained it."""
        stored = self._sorted
        if stored is not None and "\x00" not in term:
            found = stored.find(term)
            if found is not None:
                return found
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
    df: npt.NDArray[np.int32 | np.int64]


QueryTerm = tuple[int, float, bool]  # term id, weight x idf, scored without length normalization
Word = tuple[QueryTerm, ...]  # the terms of one query word (its stem and namespaced variants)
Contribution = tuple[TermArray | None, FloatArray]  # slots and their scores, or None and every slot's score


class BM25Index:
    """One BM25 corpus (documents keyed by name) that can be changed one document at a time."""

    def __init__(self, vocab: Vocabulary, label: str = "") -> None:
        self.vocab = vocab
        self.label = label
        self.version = 0
        self._slot: dict[str, int] = {}
        self._keys: list[str | None] = []
        self._doc_len: FloatArray = np.zeros(0, dtype=np.float64)
        self._alive: npt.NDArray[np.bool_] = np.zeros(0, dtype=np.bool_)
        self._df: TermArray = np.zeros(0, dtype=np.int32)  # 4 bytes a term: one per term a host holds
        self.n_docs = 0
        self.total_len = 0
        # The base segment (slots below _base_end): term-major postings and doc-major terms.
        self._base_ptr: IntArray = np.zeros(1, dtype=np.int64)
        self._base_slots: TermArray = np.zeros(0, dtype=np.int32)
        self._base_tfs: npt.NDArray[np.float32 | np.uint16] = np.zeros(0, dtype=np.float32)
        self._doc_ptr: IntArray = np.zeros(1, dtype=np.int64)
        self._doc_terms: TermArray = np.zeros(0, dtype=np.int32)
        self._base_end = 0
        # The delta (slots from _base_end on): each live document's counted terms, and postings.
        self._pending: dict[int, tuple[TermArray, CountArray]] = {}
        self._delta: dict[int, tuple[list[int], list[float]]] = {}  # term -> (slots, term frequencies)
        self._unposted: list[int] = []  # delta slots not in _delta yet (see _postings)
        self._stats_cache: tuple[int, int, _Stats] | None = None
        self._norm_cache: tuple[int, float, FloatArray] | None = None
        self._dead_cache: tuple[tuple[int, int], IntArray] | None = None
        # What each recent query word adds to the base's scores, for the (version, avgdl) it was computed at.
        self._kept: OrderedDict[Word, Contribution] = OrderedDict()
        self._kept_at: tuple[int, float] | None = None
        self._kept_bytes = 0
        self._seen: OrderedDict[tuple[int, ...], None] = OrderedDict()  # term ids of the words queried once

    def __len__(self) -> int:
        return self.n_docs

    def held_bytes(self) -> int:
        """About what this index holds in memory, its vocabulary aside: its arrays (views into
        a loaded snapshot count the whole snapshot, which they keep), its documents' names, the delta's
        postings and the contributions kept for the next queries. What a host's budget of
        users (``memory.owner_cache_mb``) is counted in."""
        arrays = (self._doc_len, self._alive, self._df, self._base_ptr, self._base_slots, self._base_tfs)
        held = _footprint((*arrays, self._doc_ptr, self._doc_terms))
        delta = sum(len(slots) for slots, _ in self._delta.values())
        unposted = sum(
            _UNPOSTED_BYTES + doc[0].nbytes + doc[1].nbytes for doc in map(self._pending.get, self._unposted) if doc
        )
        return held + _DOC_BYTES * len(self._keys) + _DELTA_POSTING_BYTES * delta + unposted + self._kept_bytes

    def __contains__(self, key: object) -> bool:
        return key in self._slot

    def keys(self) -> list[str]:
        """Names of the live documents."""
        return list(self._slot)

    # -- changes -------------------------------------------------------------------------
    def _insert(self, key: str, doc: CountedDoc) -> None:
        if key in self._slot:
            self._delete(key)
        terms, tfs, length = doc
        slot = len(self._keys)
        self._keys.append(key)
        self._pending[slot] = (terms, tfs)
        self._unposted.append(slot)
        self._doc_len = _grow(self._doc_len, slot + 1)  # type: ignore[assignment]
        self._alive = _grow(self._alive, slot + 1)  # type: ignore[assignment]
        self._doc_len[slot] = length
        self._alive[slot] = True
        self._slot[key] = slot
        self._df = _grow(self._df, len(self.vocab))  # type: ignore[assignment]
        self._df[terms] += 1
        self.n_docs += 1
        self.total_len += length

    def _postings(self) -> dict[int, tuple[list[int], list[float]]]:
        """The delta's postings, ``term -> (slots, term frequencies)``, with the documents added
        since the last query put in first: a process that only writes (a loader, a writer host)
        never builds them, and a query builds them once for every write before it. A slot
        replaced or removed meanwhile is left out (a dead slot scores nothing anyway)."""
        delta = self._delta
        for slot in self._unposted:
            doc = self._pending.get(slot)
            if doc is None:
                continue
            for term, tf in zip(doc[0].tolist(), doc[1].tolist(), strict=True):
                found = delta.get(term)
                if found is None:
                    delta[term] = ([slot], [tf])
                else:
                    found[0].append(slot)
                    found[1].append(tf)
        self._unposted = []
        return delta

    def _delete(self, key: str) -> bool:
        slot = self._slot.pop(key, None)
        if slot is None:
            return False
        if slot < self._base_end:
            terms = self._doc_terms[self._doc_ptr[slot] : self._doc_ptr[slot + 1]]
        else:
            terms = self._pending.pop(slot)[0]
        self._df[terms] -= 1
        self.n_docs -= 1
        self.total_len -= int(self._doc_len[slot])
        self._alive[slot] = False
        self._keys[slot] = None
        return True

    def add(self, key: str, tokens: Sequence[str]) -> None:
        """Add document ``key`` (replacing a previous version of it)."""
        self._insert(key, count_terms(self.vocab, tokens))
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
            self._insert(key, doc)
        self.compact()

    def _pending_work(self) -> int:
        """Dead slots plus delta documents: what a compaction would fold into the base."""
        return (len(self._keys) - self.n_docs) + (len(self._keys) - self._base_end)

    def _changed(self) -> None:
        self.version += 1
        if self._pending_work() > max(_MIN_COMPACT, _COMPACT_RATIO * self.n_docs):
            self.compact()

    def compact(self) -> None:
        """Rebuild the base segment from the live documents and clear the delta.

        The live part of the base keeps its (term, slot) order, so only the delta's postings
        are sorted and merged in: no sort over the whole corpus unless it is all delta (a build).
        """
        cap = len(self._keys)
        base_end = self._base_end
        alive = self._alive[:cap]
        renumber = np.cumsum(alive, dtype=np.int64) - 1  # old slot -> new slot (for live slots)
        vocab_size = len(self.vocab)
        # The base's live part, already in order.
        base_alive = alive[:base_end]
        doc_sizes = np.diff(self._doc_ptr)
        doc_terms = self._doc_terms[np.repeat(base_alive, doc_sizes)]
        doc_sizes = doc_sizes[base_alive]
        keep = base_alive[self._base_slots]
        slots = renumber[self._base_slots[keep]].astype(np.int32)
        tfs = self._base_tfs[keep].astype(np.float32, copy=False)
        ptr = np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(keep, dtype=np.int64)])[self._base_ptr]
        if len(ptr) < vocab_size + 1:
            ptr = np.concatenate([ptr, np.full(vocab_size + 1 - len(ptr), ptr[-1], dtype=np.int64)])
        # The delta's live documents, in slot order, merged in after the base's postings of each term.
        delta_slots = sorted(self._pending)
        if delta_slots:
            d_terms = np.concatenate([self._pending[s][0] for s in delta_slots])
            d_tfs = np.concatenate([self._pending[s][1] for s in delta_slots])
            d_sizes = np.fromiter((len(self._pending[s][0]) for s in delta_slots), np.int64, len(delta_slots))
            d_slots = np.repeat(renumber[np.array(delta_slots, dtype=np.int64)], d_sizes).astype(np.int32)
            ptr, slots, tfs = _merge_postings(ptr, slots, tfs, (d_terms, d_slots, d_tfs))
            del d_slots, d_tfs
            doc_terms = np.concatenate([doc_terms, d_terms])
            doc_sizes = np.concatenate([doc_sizes, d_sizes])
        live = np.flatnonzero(alive)
        keys = [key for key in self._keys if key is not None]
        n = len(keys)
        self._keys = list(keys)
        self._slot = {key: slot for slot, key in enumerate(keys)}
        self._doc_len = self._doc_len[live].copy() if n else np.zeros(0, dtype=np.float64)
        self._alive = np.ones(n, dtype=np.bool_)
        self._base_ptr = ptr
        self._base_slots = slots
        self._base_tfs = tfs.astype(np.float32, copy=False)
        self._doc_ptr = np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(doc_sizes, dtype=np.int64)])
        self._doc_terms = doc_terms.astype(np.int32, copy=False)
        self._base_end = n
        self._pending = {}
        self._delta = {}
        self._unposted = []
        self.version += 1

    # -- snapshots -----------------------------------------------------------------------
    def export(self) -> tuple[dict[str, npt.NDArray[Any]], list[str]]:
        """The live documents as arrays (for :func:`snapshot_bytes`), and their names in row order.

        The arrays are the compacted base segment itself (term ids renumbered to the terms in
        use): a :meth:`load` installs them without sorting anything. A pending delta is
        compacted first.
        """
        if self._pending_work():
            self.compact()
        counts = np.diff(self._base_ptr)
        used = np.flatnonzero(counts)
        remap = np.zeros(len(counts), dtype=np.int32)
        remap[used] = np.arange(len(used), dtype=np.int32)
        tfs = self._base_tfs
        names = [key for key in self._keys if key is not None]
        words = self.vocab.words(used.tolist())
        return {
            "keys": pack_texts(names),
            "words": pack_texts(words),
            "order": np.array(sorted(range(len(words)), key=words.__getitem__), dtype=np.int32),
            "doc_len": self._doc_len[: len(names)].astype(np.int64),
            "doc_ptr": self._doc_ptr,
            "doc_terms": remap[self._doc_terms],
            "post_ptr": np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(counts[used], dtype=np.int64)]),
            "post_slots": self._base_slots,
            "post_tfs": tfs.astype(np.uint16) if not len(tfs) or tfs.max() <= 0xFFFF else tfs,
        }, names

    def load(
        self,
        data: Mapping[str, npt.NDArray[Any]],
        keep: Callable[[list[str]], npt.NDArray[np.bool_]],
        bounds: Bounds | None = None,
    ) -> set[str]:
        """Install an :meth:`export` into this empty index as its base segment, then drop the
        documents whose row is false in ``keep(keys)`` (one flag per row, in row order); return
        the names kept. Terms map onto this index's vocabulary by text. Arrays that do not fit
        together raise ``ValueError``.

        The large arrays stay views into ``data`` where their type allows (no copy of the
        postings; nothing writes into a base segment: changes go to the delta, and a
        compaction builds new arrays). ``bounds``: :func:`array_bounds` of ``data``, when a
        reading thread took them already."""
        if self._keys:
            raise ValueError("a snapshot loads into an empty index only")
        keys = unpack_texts(data["keys"])
        packed_words = np.ascontiguousarray(data["words"], dtype=np.uint8).data.cast("B")  # not copied
        n, n_words = len(keys), _nuls(packed_words) + 1 if len(packed_words) else 0
        doc_ptr = _index_array(data["doc_ptr"], n + 1)
        post_ptr = _index_array(data["post_ptr"], n_words + 1)
        doc_terms = np.asarray(data["doc_terms"])
        post_slots = np.asarray(data["post_slots"])
        post_tfs = np.asarray(data["post_tfs"])
        if post_tfs.dtype not in (np.uint16, np.float32):  # what export writes; anything else is converted
            post_tfs = post_tfs.astype(np.float32)
        doc_len = np.asarray(data["doc_len"], dtype=np.float64)
        total = len(doc_terms)
        slot_of = dict(zip(keys, range(n), strict=True))
        if (
            len(slot_of) != n
            or doc_len.shape != (n,)
            or doc_ptr[-1] != total
            or post_ptr[-1] != total
            or post_slots.shape != (total,)
            or post_tfs.shape != (total,)
            or doc_terms.shape != (total,)
            or doc_terms.dtype.kind not in "iu"
            or post_slots.dtype.kind not in "iu"
            or (total and not _within(array_bounds(data) if bounds is None else bounds, n_words, n))
        ):
            raise ValueError("snapshot arrays do not match")
        counts = np.diff(post_ptr)
        global_ids, same_ids = self._term_ids(packed_words, n_words, data.get("order"))
        if not same_ids and n_words > 1 and not bool(np.all(np.diff(global_ids) > 0)):
            # Another vocabulary numbers the terms in another order: move each term's block.
            order = np.argsort(global_ids)
            sizes = counts[order]
            starts = post_ptr[:-1][order] - np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(sizes)[:-1]])
            moved = np.repeat(starts, sizes) + np.arange(total, dtype=np.int64)
            post_slots, post_tfs = post_slots[moved], post_tfs[moved]
        vocab_size = len(self.vocab)
        df = np.zeros(vocab_size, dtype=np.int32)
        df[global_ids] = counts
        self._keys = list(keys)
        self._slot = slot_of
        self._doc_len = doc_len.copy()
        self._alive = np.ones(n, dtype=np.bool_)
        self._df = df
        self.n_docs = n
        self.total_len = int(doc_len.sum())
        # the stored pointers when they are this vocabulary's (a fresh one: no second copy)
        self._base_ptr = (
            post_ptr
            if same_ids and vocab_size == n_words
            else np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(df, dtype=np.int64)])
        )
        self._base_slots = post_slots.astype(np.int32, copy=False)
        self._base_tfs = post_tfs  # kept as stored (uint16 as a rule: no 4-byte copy of every posting)
        self._doc_ptr = doc_ptr
        self._doc_terms = doc_terms.astype(np.int32, copy=False) if same_ids else global_ids[doc_terms]
        self._base_end = n
        self.version += 1
        kept = np.asarray(keep(keys), dtype=np.bool_)
        if kept.shape != (n,):
            raise ValueError("a keep mask must have one flag per snapshot row")
        dropped = [keys[row] for row in np.flatnonzero(~kept).tolist()]
        for key in dropped:
            self._delete(key)
        if len(dropped) > max(_MIN_COMPACT, _COMPACT_RATIO * n):
            self.compact()
        return set(self._slot)

    def _term_ids(
        self, packed_words: memoryview, n_words: int, order: npt.NDArray[Any] | None
    ) -> tuple[TermArray, bool]:
        """The vocabulary's ids of a snapshot's terms, and whether they are its own numbering
        (each term's row number). Raises ``ValueError`` when the terms are not distinct."""
        if not len(self.vocab) and n_words:
            # A fresh vocabulary (a new process's first ranker) takes the snapshot's numbering:
            # as stored, when the snapshot keeps its terms' sorted order (see Vocabulary).
            if order is not None and self.vocab.adopt_sorted(packed_words, order):
                return np.arange(n_words, dtype=np.int32), True
            if self.vocab.adopt(bytes(packed_words).decode("utf-8", "surrogatepass").split("\x00")):
                return np.arange(n_words, dtype=np.int32), True
        words = bytes(packed_words).decode("utf-8", "surrogatepass").split("\x00") if n_words else []
        if len(set(words)) != n_words:
            raise ValueError("snapshot arrays do not match")
        global_ids = np.array(self.vocab.ids_for(words), dtype=np.int32)
        # The snapshot's own numbering only when every term got its row number: a vocabulary
        # that already held other terms can give ids that start at 0 and end at n_words - 1
        # with others between (another user's snapshot loaded first).
        return global_ids, bool(np.array_equal(global_ids, np.arange(n_words, dtype=np.int32)))

    # -- scoring -------------------------------------------------------------------------
    def _df_view(self, size: int) -> TermArray:
        if len(self._df) >= size:
            return self._df[:size]
        out = np.zeros(size, dtype=np.int32)
        out[: len(self._df)] = self._df
        return out

    def stats(self) -> _Stats:
        """BM25 statistics of this corpus alone (cached until it changes)."""
        size = len(self.vocab)
        cached = self._stats_cache
        if cached is not None and cached[0] == self.version and cached[1] == size:
            return cached[2]
        # one corpus: its own document frequencies, not a copy (a copy per user a host holds)
        stats = _Stats(
            n_docs=self.n_docs, avgdl=self.total_len / self.n_docs if self.n_docs else 0.0, df=self._df_view(size)
        )
        self._stats_cache = (self.version, size, stats)
        return stats

    def _scores(self, query: Sequence[Word], avgdl: float) -> FloatArray:
        """Every slot's score for ``query``: 0 where a document has no query term or is dead."""
        cap = len(self._keys)
        scores = np.zeros(cap, dtype=np.float64)  # every contribution is positive: > 0 means a hit
        if cap == 0 or not query:
            return scores
        cached = self._norm_cache
        if cached is not None and cached[0] == self.version and cached[1] == avgdl and len(cached[2]) == cap:
            norm = cached[2]
        else:
            norm = K1 * (1.0 - B + B * self._doc_len[:cap] / avgdl)
            self._norm_cache = (self.version, avgdl, norm)
        if self._kept_at != (self.version, avgdl):  # a changed index: its words start over (seen, then kept)
            self._kept.clear()
            self._seen.clear()
            self._kept_at, self._kept_bytes = (self.version, avgdl), 0
        for word in query:
            self._add_word(scores, word, norm)
        scores[self._dead_slots(cap)] = 0.0
        return scores

    def _add_word(self, scores: FloatArray, word: Word, norm: FloatArray) -> None:
        """Add what ``word``'s terms score, in the base segment and in the delta.

        A word met before (since the index last changed) is added as one kept contribution
        (:meth:`_keep`, the delta's postings included); a word met for the first time adds its
        terms one by one and is only remembered as seen, so words that never come back, and
        queries between frequent changes, cost no more than that."""
        kept = self._kept.get(word)
        terms = tuple(term for term, _, _ in word)
        if kept is not None:
            self._kept.move_to_end(word)
        elif terms in self._seen:
            kept = self._keep(word, norm)
        else:
            self._seen[terms] = None
            if len(self._seen) > _SEEN_WORDS:
                self._seen.popitem(last=False)
            for start, end, idf, flat, _ in self._spans(word):
                np.add.at(scores, self._base_slots[start:end], self._weights(start, end, norm, flat, idf))
            self._add_delta(scores, word, norm)
            return
        slots, values = kept
        if slots is None:
            scores += values
        elif len(slots):
            np.add.at(scores, slots, values)

    def _add_delta(self, scores: FloatArray, word: Word, norm: FloatArray) -> None:
        """Add what ``word``'s terms score in the delta: one array operation per term over its
        postings (a slot appears once per term; replaced and removed slots are zeroed with the
        dead ones)."""
        for term, idf, flat in word:
            part = self._delta_part(term, idf, flat, norm)
            if part is not None:
                scores[part[0]] += part[1]

    def _delta_part(self, term: int, idf: float, flat: bool, norm: FloatArray) -> tuple[IntArray, FloatArray] | None:
        """The delta's slots of ``term`` and what it scores in each (``None``: not in the delta)."""
        found = self._postings().get(term)
        if found is None:
            return None
        slots = np.array(found[0], dtype=np.int64)
        return slots, _term_scores(np.array(found[1], dtype=np.float64), K1 if flat else norm[slots], idf)

    def _keep(self, word: Word, norm: FloatArray) -> Contribution:
        """What ``word``'s terms add to the scores, base segment and delta, as one array over the
        union of their postings (a word's stem, exact form and lead mostly hit the same
        documents: about half their postings), or over every slot when most are hit. Kept
        (:data:`CONTRIBUTIONS_KEPT` bytes at most, least recently used out) until the index or
        its average length changes: a writer's delta (up to a tenth of the documents, see
        :meth:`_changed`) then costs a repeated word no more than the base does."""
        spans = self._spans(word)
        delta = [(term, part) for term, idf, flat in word if (part := self._delta_part(term, idf, flat, norm))]
        parts: list[tuple[TermArray | IntArray, FloatArray]] = [
            (self._base_slots[a:b], self._weights(a, b, norm, f, i)) for a, b, i, f, _ in spans
        ]
        parts += [part for _, part in delta]
        found: Contribution
        if len({span[4] for span in spans} | {term for term, _ in delta}) <= 1:
            # One term has postings (or none): its base slots, then its delta slots, side by side.
            if not parts:  # the word's terms are another corpus's
                parts = [(np.zeros(0, np.int32), np.zeros(0))]
            joined = np.concatenate([p[0] for p in parts]).astype(np.int32, copy=False)
            found = (joined, np.concatenate([p[1] for p in parts]))
        else:
            dense = np.zeros(len(norm), dtype=np.float64)
            for at, values in parts:
                np.add.at(dense, at, values)
            hit = np.flatnonzero(dense > 0.0).astype(np.int32)
            found = (None, dense) if 3 * len(hit) > 2 * len(dense) else (hit, dense[hit])
        size = found[1].nbytes + (0 if found[0] is None else found[0].nbytes)
        if size <= CONTRIBUTIONS_KEPT // 4:
            self._kept[word] = found
            self._kept_bytes += size
            while self._kept_bytes > CONTRIBUTIONS_KEPT:
                slots, values = self._kept.popitem(last=False)[1]
                self._kept_bytes -= values.nbytes + (0 if slots is None else slots.nbytes)
        return found

    def _spans(self, word: Word) -> list[tuple[int, int, float, bool, int]]:
        """``(start, end, weight x idf, flat, term)`` of the base postings of ``word``'s terms."""
        n_base_terms, ptr = len(self._base_ptr) - 1, self._base_ptr
        return [
            (int(ptr[term]), int(ptr[term + 1]), idf, flat, term)
            for term, idf, flat in word
            if term < n_base_terms and ptr[term + 1] > ptr[term]
        ]

    def _weights(self, start: int, end: int, norm: FloatArray, flat: bool, idf: float) -> FloatArray:
        """What a term of weight x idf ``idf`` scores in each of the base postings ``start:end``."""
        tf = self._base_tfs[start:end].astype(np.float64)
        return _term_scores(tf, K1 if flat else norm[self._base_slots[start:end]], idf)

    def _dead_slots(self, cap: int) -> IntArray:
        """Slots of removed or replaced documents whose postings are still in the base."""
        cached = self._dead_cache
        if cached is None or cached[0] != (self.version, cap):
            cached = ((self.version, cap), np.flatnonzero(~self._alive[:cap]))
            self._dead_cache = cached
        return cached[1]

    def key_of(self, slot: int) -> str:
        """Name of the document in ``slot``."""
        return self._keys[slot] or ""


def _term_scores(tf: FloatArray, norm: FloatArray | float, idf: float) -> FloatArray:
    """BM25's ``idf * tf * (k1 + 1) / (tf + norm)`` per posting, computed in ``tf`` itself (a
    first-seen word's terms run it over thousands of postings per query: one array, not four)."""
    denominator = tf + norm
    tf *= idf * (K1 + 1.0)
    tf /= denominator
    return tf


def _merge_postings(
    ptr: IntArray, slots: TermArray, tfs: CountArray, delta: tuple[TermArray, TermArray, CountArray]
) -> tuple[IntArray, TermArray, CountArray]:
    """Term-major postings ``(ptr, slots, tfs)`` with the delta's ``(terms, slots, tfs)`` (in slot
    order, all slots above the base's) merged in after the base's postings of each term."""
    d_terms, d_slots, d_tfs = delta
    order = np.argsort(d_terms, kind="stable")
    d_sorted = d_terms[order]
    if len(slots):
        at = ptr[d_sorted.astype(np.int64) + 1]
        slots = np.insert(slots, at, d_slots[order])
        tfs = np.insert(tfs, at, d_tfs[order])
        del at
    else:  # a build: nothing to merge into
        slots, tfs = d_slots[order], d_tfs[order]
    del order
    added = np.bincount(d_sorted, minlength=len(ptr) - 1)
    return ptr + np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(added, dtype=np.int64)]), slots, tfs


def _index_array(array: npt.NDArray[Any], length: int) -> IntArray:
    """``array`` as offsets into another array: ``length`` integers from 0, never decreasing."""
    out = np.asarray(array)
    if out.shape != (length,) or out.dtype.kind not in "iu":
        raise ValueError("snapshot offsets have the wrong shape or type")
    out = out.astype(np.int64, copy=False)
    if out[0] != 0 or bool(np.any(np.diff(out) < 0)):
        raise ValueError("snapshot offsets are not in order")
    return out


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


Bounds = dict[str, tuple[int, int]]
"""The smallest and largest value of a snapshot's arrays, by name (see :func:`array_bounds`)."""


def array_bounds(data: Mapping[str, npt.NDArray[Any]]) -> Bounds:
    """The smallest and largest value of a snapshot's ``doc_terms`` and ``post_slots`` (integer
    and not empty), which :meth:`BM25Index.load` checks against its terms and documents. Two
    passes over millions of values that release the GIL: the thread that read the snapshot
    takes them (see :class:`~.rankers.RankerCache`), not the query."""
    out: Bounds = {}
    for name in ("doc_terms", "post_slots"):
        array = data.get(name)
        if array is not None and array.size and array.dtype.kind in "iu":
            out[name] = (int(array.min()), int(array.max()))
    return out


def _within(bounds: Bounds, words: int, documents: int) -> bool:
    """Whether every term id is below ``words`` and every posting's document below ``documents``."""
    terms, slots = bounds.get("doc_terms"), bounds.get("post_slots")
    return (
        terms is not None
        and slots is not None
        and terms[0] >= 0
        and terms[1] < words
        and slots[0] >= 0
        and slots[1] < documents
    )


def read_snapshot(data: bytes) -> dict[str, npt.NDArray[Any]]:
    """The arrays of a :func:`snapshot_bytes` file; raises ``ValueError`` if it is damaged.

    The arrays are read-only views into ``data`` (no copy: a snapshot of 100k notes is a few
    hundred MB), each member checked against its CRC-32 first. Pickled (object) arrays are
    refused.
    """
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            members = archive.infolist()
            if any(m.compress_type != zipfile.ZIP_STORED for m in members):
                raise ValueError("damaged snapshot: compressed members")
            return {m.filename.removesuffix(".npy"): _stored_array(data, m) for m in members}
    except (OSError, EOFError, KeyError, struct.error, zipfile.BadZipFile) as exc:
        raise ValueError(f"damaged snapshot: {exc}") from exc


_LOCAL_HEADER = struct.Struct("<4s22xHH")  # signature ... file name length, extra field length


def _stored_array(data: bytes, member: zipfile.ZipInfo) -> npt.NDArray[Any]:
    """The ``.npy`` array stored uncompressed as ``member`` of the zip ``data``, as a view."""
    signature, name_len, extra_len = _LOCAL_HEADER.unpack_from(data, member.header_offset)
    start = member.header_offset + _LOCAL_HEADER.size + name_len + extra_len
    end = start + member.file_size
    if signature != b"PK\x03\x04" or end > len(data):
        raise ValueError("damaged snapshot: bad member header")
    body = memoryview(data)[start:end]
    if zlib.crc32(body) != member.CRC:
        raise ValueError(f"damaged snapshot: {member.filename} fails its CRC-32")
    stream = io.BytesIO(body[:_NPY_HEADER_MAX])
    version = np.lib.format.read_magic(stream)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(stream)
    elif version == (2, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(stream)
    else:
        raise ValueError(f"damaged snapshot: .npy version {version}")
    if dtype.hasobject or fortran:
        raise ValueError("damaged snapshot: object or Fortran-ordered array")
    count = math.prod(shape)
    if stream.tell() + count * dtype.itemsize != len(body):
        raise ValueError(f"damaged snapshot: {member.filename} has the wrong size")
    return np.frombuffer(body, dtype=dtype, count=count, offset=stream.tell()).reshape(shape)


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


def best_slots(scores: FloatArray, k: int) -> IntArray:
    """Slots of the scores above zero that can be among the ``k`` largest (all tied at the
    ``k``-th are kept, for the caller's tie-break), without sorting or listing every hit: the
    ``k``-th largest of an evenly spaced sample is a lower bound, and only the scores at or
    above it are looked at (a full ``nonzero`` at 100k hits costs more than the whole rest).

    Only scores above zero are ever partitioned: ``np.partition`` over an array that is mostly
    zeros (a query whose words are in few notes) took 200 us at 2,000 slots, against 10 us for
    its hits alone."""
    if k <= 0 or not len(scores):
        return np.zeros(0, dtype=np.int64)
    bound = 0.0
    sample = scores[:: max(1, len(scores) // 2048)]
    sample = sample[sample > 0.0]
    if len(sample) >= k:
        bound = float(np.partition(sample, len(sample) - k)[len(sample) - k])
    found: IntArray = np.flatnonzero(scores >= bound) if bound > 0.0 else np.flatnonzero(scores > 0.0)
    if len(found) > k:
        values = scores[found]
        kth = np.partition(values, len(found) - k)[len(found) - k]
        found = found[values >= kth]
    return found


def rank(
    indexes: Sequence[BM25Index], query_terms: Sequence[str | tuple[str, float]], top_n: int
) -> list[tuple[str, str, float]]:
    """Rank the union of ``indexes`` for ``query_terms``; ``[(label, key, score)]`` best first.

    A query term is a term (weight 1) or ``(term, weight)``, as
    :meth:`~local_ai_memory._shared.text.Analyzer.query_terms`
    gives them; a term given twice counts twice. A term outside the lead and exact namespaces
    starts a new query word, which the terms after it up to the next such term belong to
    (what an index keeps between queries is per word). Only documents that contain at least one
    query term are returned, ties ordered by label and key. Scores are positive.
    """
    indexes = [ix for ix in indexes if ix.n_docs]
    if not indexes or top_n <= 0:
        return []
    vocab = indexes[0].vocab
    stats = _stats_for(indexes)
    if not stats.n_docs:
        return []
    avgdl = stats.avgdl if stats.avgdl > 0 else 1.0
    words: list[list[QueryTerm]] = []
    for item in query_terms:
        token, weight = (item, 1.0) if isinstance(item, str) else item
        if not words or not token.startswith(_NAMESPACES):
            words.append([])
        term = vocab.get(token)
        if term is None or term >= len(stats.df) or stats.df[term] == 0 or weight <= 0:
            continue
        words[-1].append((term, weight * idf(stats.n_docs, float(stats.df[term])), token.startswith(LEAD)))
    query = [tuple(word) for word in words if word]
    if not query:
        return []
    found: list[tuple[float, str, str]] = []
    for ix in indexes:
        scores = ix._scores(query, avgdl)
        chosen = best_slots(scores, top_n).tolist()
        found.extend((float(scores[slot]), ix.label, ix.key_of(slot)) for slot in chosen)
    best = heapq.nsmallest(top_n, found, key=lambda item: (-item[0], item[1], item[2]))
    return [(label, key, score) for score, label, key in best]
