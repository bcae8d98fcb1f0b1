"""The file backend's vector cache: embedding vectors for hybrid search, kept on disk by content hash.

:class:`EmbeddingCache` turns ``(key, text)`` pairs into a matrix of unit-length vectors.
A text is sent to the embedder only when no vector for its SHA-256 (taken together with the
model name) is cached, so a file is embedded again only after its content changed, and two
files with the same text share one call. ``key`` is the caller's name for the item (for
example ``"knowledge/alice_notes.md"``); it lets the cache forget the vectors of files that
changed or were deleted.

On-disk layout under ``{runtime_data_dir}/memory_data/.embeddings/``::

    manifest.json          {"version": 1, "model": "...", "dimension": 384, "shards": ["shard-....npz"]}
    shard-<id>.npz         keys (str), hashes (str), vectors (float32, n x dimension)

Shards are immutable and written atomically through :mod:`local_ai_memory._shared.fs`; each batch of new vectors
becomes one shard and the manifest (read-modified-written under its cross-process lock)
lists the live ones. When there are more than ``MAX_SHARDS`` shards, or more dead rows
(replaced or forgotten keys) than live ones, they are merged into one. This keeps a 100k-file
cache to a handful of files that load in one read each, instead of 100k small files.

An embedder may declare ``model_name`` and ``dimension`` attributes (the class name is used
otherwise). A manifest written for another model name or dimension is treated as empty and
replaced, with its shards, on the next write; a newer manifest version raises
:class:`UnsupportedFormatError`. Damaged files are moved aside (``.corrupt.bak``) and their
vectors recomputed.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import os
import secrets
import threading
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from local_ai_memory._shared import fs as _fs
from local_ai_memory._shared.config import MemoryConfig
from local_ai_memory._shared.errors import InvalidInputError, ModelError, UnsupportedFormatError
from local_ai_memory._shared.events import Event, log_event
from local_ai_memory._shared.models import Embedder
from local_ai_memory._shared.naming import DirectoryGuard
from local_ai_memory._shared.vectors import aquery_vector, model_id_of, query_vector, text_hash, unit_vectors

__all__ = ["EMBEDDINGS_DIR", "MANIFEST_VERSION", "EmbeddingCache", "EmbeddingManifest"]

EMBEDDINGS_DIR = ".embeddings"
MANIFEST_NAME = "manifest.json"
MANIFEST_VERSION = 1
MAX_SHARDS = 16
BATCH_SIZE = 64
COMMIT_EVERY = 1024

Progress = Callable[[int, int], None]
Matrix = npt.NDArray[np.float32]


class EmbeddingManifest(BaseModel):
    """``manifest.json``: which model wrote the cache and which shard files are live."""

    model_config = ConfigDict(extra="ignore")

    version: int = MANIFEST_VERSION
    model: str
    dimension: int = Field(ge=1)
    shards: list[str] = Field(default_factory=list)


def _shard_bytes(keys: Sequence[str], hashes: Sequence[str], vectors: Matrix) -> bytes:
    buffer = io.BytesIO()
    np.savez(
        buffer,
        keys=np.array(list(keys), dtype=np.str_),
        hashes=np.array(list(hashes), dtype=np.str_),
        vectors=np.ascontiguousarray(vectors, dtype=np.float32),
    )
    return buffer.getvalue()


def _read_shard(data: bytes, dimension: int) -> tuple[list[str], list[str], Matrix]:
    with np.load(io.BytesIO(data), allow_pickle=False) as archive:
        keys = [str(k) for k in archive["keys"].tolist()]
        hashes = [str(h) for h in archive["hashes"].tolist()]
        vectors = np.asarray(archive["vectors"], dtype=np.float32)
    if vectors.ndim != 2 or vectors.shape != (len(keys), dimension) or len(hashes) != len(keys):
        raise ValueError(f"shard shape {vectors.shape} does not match {len(keys)} keys of dimension {dimension}")
    return keys, hashes, vectors


@dataclass
class _Plan:
    """What one ``vectors_for`` call needs: each item's hash, and the texts still to embed."""

    keys: list[str]
    hashes: list[str]
    missing: dict[str, str]  # hash -> text, in first-seen order
    owner: dict[str, str]  # hash -> the first key asking for it (stored with the vector)


class EmbeddingCache:
    """Content-addressed vectors of one embedder, kept on disk and in one in-memory matrix."""

    def __init__(self, guard: DirectoryGuard, embedder: Embedder | None, config: MemoryConfig | None = None) -> None:
        self.guard = guard
        self.embedder = embedder
        self.config = config or MemoryConfig()
        self.model = model_id_of(embedder) if embedder is not None else ""
        declared = getattr(embedder, "dimension", None)
        self.declared_dimension = declared if isinstance(declared, int) and not isinstance(declared, bool) else None
        self.folder = guard.resolve("memory_data", EMBEDDINGS_DIR)
        self._lock = threading.RLock()
        self._dimension: int | None = None
        self._rows: dict[str, int] = {}  # hash -> row in _matrix
        self._key_hash: dict[str, str] = {}  # key -> hash of its latest text
        self._chunks: list[Matrix] = []
        self._matrix: Matrix = np.zeros((0, 0), dtype=np.float32)
        self._loaded_shards: set[str] = set()
        self._manifest_bytes: bytes | None = None
        self._dead_rows = 0
        # key -> (len(text), hash(text), sha256): repeated calls with unchanged texts skip SHA-256.
        self._memo: dict[str, tuple[int, int, str]] = {}
        self._generation = 0
        self._last: tuple[int, list[str], Matrix] | None = None
        # the last items list asked for (kept, so identity means unchanged) and its matrix
        self._last_items: tuple[Sequence[tuple[str, str]], int, Matrix] | None = None

    def __repr__(self) -> str:
        return f"EmbeddingCache({self.model!r}, {len(self._rows)} vectors)"

    # -- public API --------------------------------------------------------------------
    @property
    def dimension(self) -> int | None:
        """Vector dimension once known (from the manifest or the first embedding)."""
        return self._dimension

    def __len__(self) -> int:
        with self._lock:
            self._sync_from_disk()
            return len(self._rows)

    def vectors_for(self, items: Sequence[tuple[str, str]], progress: Progress | None = None) -> Matrix:
        """Unit vectors for ``items`` (``(key, text)`` pairs), one row each, in order.

        Texts already cached are not embedded again. Raises :class:`ModelError` if the embedder
        fails or answers badly; what was cached before stays intact. The array is read-only:
        calling again with unchanged texts returns the same array without copying or hashing
        them again, so a search may call this on every query. Passing the very same list object
        again (not mutated in between) skips even looking at the texts.
        """
        with self._lock:
            self._sync_from_disk()
            last = self._last_items
            if last is not None and last[0] is items and last[1] == self._generation:
                return last[2]  # the very same list as last time, nothing changed since: no text is looked at
        for _ in range(3):
            plan = self._plan(items)
            pending = list(plan.missing.items())
            for done, group in self._groups(pending):
                vectors = [self._check(texts, self._embed_sync(texts)) for texts in self._batches(group)]
                self._commit(plan, group, vectors)
                if progress is not None:
                    progress(done, len(pending))
            matrix = self._assemble(plan)
            if matrix is not None:
                with self._lock:
                    self._last_items = (items, self._generation, matrix)
                return matrix
        raise ModelError("the embedding cache kept changing under this call (another process switching models?)")

    async def avectors_for(self, items: Sequence[tuple[str, str]], progress: Progress | None = None) -> Matrix:
        """Async twin of :meth:`vectors_for`: disk work in a thread, the embedder's ``aembed``."""
        for _ in range(3):
            plan = await asyncio.to_thread(self._plan, items)
            pending = list(plan.missing.items())
            for done, group in self._groups(pending):
                vectors = [await self._aembed_batch(texts) for texts in self._batches(group)]
                await asyncio.to_thread(self._commit, plan, group, vectors)
                if progress is not None:
                    progress(done, len(pending))
            matrix = await asyncio.to_thread(self._assemble, plan)
            if matrix is not None:
                return matrix
        raise ModelError("the embedding cache kept changing under this call (another process switching models?)")

    @staticmethod
    def _groups(pending: list[tuple[str, str]]) -> Iterable[tuple[int, list[tuple[str, str]]]]:
        """``(done_after, group)``: the missing texts in groups committed to disk one at a time."""
        for start in range(0, len(pending), COMMIT_EVERY):
            group = pending[start : start + COMMIT_EVERY]
            yield start + len(group), group

    @staticmethod
    def _batches(group: list[tuple[str, str]]) -> list[list[str]]:
        return [[text for _, text in group[i : i + BATCH_SIZE]] for i in range(0, len(group), BATCH_SIZE)]

    def embed_query(self, text: str) -> npt.NDArray[np.float32]:
        """Unit vector of a query (not cached: queries rarely repeat and are cheap to embed), by
        the embedder's own ``embed_query`` when it has one (:func:`query_vector`)."""
        embedder = self._require_embedder()
        try:
            return query_vector(embedder, text)
        except ModelError:
            raise
        except Exception as exc:
            raise ModelError(f"embedder {self.model} failed: {type(exc).__name__}: {exc}") from exc

    async def aembed_query(self, text: str) -> npt.NDArray[np.float32]:
        """Async twin of :meth:`embed_query`."""
        embedder = self._require_embedder()
        try:
            return await aquery_vector(embedder, text)
        except ModelError:
            raise
        except Exception as exc:
            raise ModelError(f"embedder {self.model} failed: {type(exc).__name__}: {exc}") from exc

    def forget(self, keys: Iterable[str]) -> int:
        """Drop the vectors of ``keys`` (deleted files) from memory now and from disk at the next merge."""
        with self._lock:
            self._sync_from_disk()
            dropped = 0
            for key in keys:
                if self._key_hash.pop(key, None) is not None:
                    dropped += 1
            self._dead_rows += dropped
            return dropped

    def discard(self, items: Sequence[tuple[str, str]]) -> int:
        """Delete the vectors of ``(key, text)`` items from memory and disk now (a forgotten user's notes)."""
        with self._lock:
            dropped = self.forget(key for key, _ in items)
            if dropped:
                self._merge()
            return dropped

    def digest_of(self, text: str) -> str:
        """The cache's name of ``text``'s vector (SHA-256 of the model name and the text)."""
        return text_hash(self.model, text)

    def kept(self, digests: Sequence[str]) -> Matrix | None:
        """The cached rows of ``digests`` in order, or ``None`` if one is not cached (never embeds)."""
        with self._lock:
            self._sync_from_disk()
            rows = self._rows
            if any(d not in rows for d in digests):
                return None
            if not digests:
                return np.zeros((0, self._dimension or 0), dtype=np.float32)
            picked = np.fromiter((rows[d] for d in digests), dtype=np.int64, count=len(digests))
            result: Matrix = self._full_matrix()[picked]
            return result

    def discard_kept(self, digests: Sequence[str]) -> int:
        """Delete the vectors of ``digests`` from memory and disk now (a forgotten user's passages)."""
        wanted = set(digests)
        with self._lock:
            self._sync_from_disk()
            found = len(wanted & set(self._rows))
            dropped = self.forget([k for k, h in self._key_hash.items() if h in wanted])
            if dropped:
                self._merge()
            return found

    def prune(self, live_keys: Collection[str]) -> int:
        """Forget every key not in ``live_keys`` and merge the shards; return how many were dropped."""
        live = set(live_keys)
        with self._lock:
            self._sync_from_disk()
            dropped = self.forget([k for k in self._key_hash if k not in live])
            self._merge()
            return dropped

    # -- embedding -----------------------------------------------------------------------
    def _require_embedder(self) -> Embedder:
        if self.embedder is None:
            raise ModelError("no embedder is configured for hybrid search")
        return self.embedder

    def _embed_sync(self, texts: list[str]) -> list[list[float]]:
        embedder = self._require_embedder()
        try:
            return embedder.embed(texts)
        except ModelError:
            raise
        except Exception as exc:
            raise ModelError(f"embedder {self.model} failed: {type(exc).__name__}: {exc}") from exc

    async def _aembed_batch(self, texts: list[str]) -> Matrix:
        embedder = self._require_embedder()
        try:
            raw = await embedder.aembed(texts)
        except ModelError:
            raise
        except Exception as exc:
            raise ModelError(f"embedder {self.model} failed: {type(exc).__name__}: {exc}") from exc
        return self._check(texts, raw)

    def _check(self, texts: Sequence[str], raw: object) -> Matrix:
        """Validate an embedder's answer and return it as unit-length float32 rows."""
        return unit_vectors(texts, raw, f"embedder {self.model}")

    # -- in-memory state -------------------------------------------------------------------
    def _reset(self, dimension: int | None) -> None:
        with self._lock:
            self._generation += 1
            self._last = None
            self._dimension = dimension
            self._rows = {}
            self._key_hash = {}
            self._chunks = []
            self._matrix = np.zeros((0, dimension or 0), dtype=np.float32)
            self._loaded_shards = set()
            self._dead_rows = 0

    def _absorb(self, keys: Sequence[str], hashes: Sequence[str], vectors: Matrix) -> None:
        self._generation += 1
        base = self._row_count()
        self._chunks.append(vectors)
        for offset, (key, digest) in enumerate(zip(keys, hashes, strict=True)):
            if digest not in self._rows:
                self._rows[digest] = base + offset
            else:
                self._dead_rows += 1
            previous = self._key_hash.get(key)
            if previous is not None and previous != digest:
                self._dead_rows += 1
            self._key_hash[key] = digest

    def _row_count(self) -> int:
        return int(self._matrix.shape[0]) + sum(int(c.shape[0]) for c in self._chunks)

    def _full_matrix(self) -> Matrix:
        if self._chunks:
            parts = [self._matrix] if self._matrix.shape[0] else []
            self._matrix = np.concatenate([*parts, *self._chunks]).astype(np.float32, copy=False)
            self._chunks = []
        return self._matrix

    def _plan(self, items: Sequence[tuple[str, str]]) -> _Plan:
        keys: list[str] = []
        hashes: list[str] = []
        missing: dict[str, str] = {}
        owner: dict[str, str] = {}
        memo = self._memo
        with self._lock:
            self._sync_from_disk()
            rows = self._rows
            for item in items:
                if not (
                    isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str) and isinstance(item[1], str)
                ):
                    raise InvalidInputError("items must be (key, text) pairs of strings")
                key, text = item
                seen = memo.get(key)
                if seen is not None and seen[0] == len(text) and seen[1] == hash(text):
                    digest = seen[2]
                else:
                    digest = text_hash(self.model, text)
                    memo[key] = (len(text), hash(text), digest)
                keys.append(key)
                hashes.append(digest)
                if digest in rows:
                    self._link(key, digest)
                elif digest not in missing:
                    missing[digest] = text
                    owner[digest] = key
            if missing and self.embedder is None:
                raise ModelError("no embedder is configured for hybrid search")
        return _Plan(keys, hashes, missing, owner)

    def _link(self, key: str, digest: str) -> None:
        """Remember that ``key`` now has the text ``digest`` (its old vector becomes garbage)."""
        previous = self._key_hash.get(key)
        if previous != digest:
            if previous is not None:
                self._dead_rows += 1
            self._key_hash[key] = digest

    def _assemble(self, plan: _Plan) -> Matrix | None:
        """The rows of ``plan``; ``None`` if some vanished (the cache was reset meanwhile)."""
        with self._lock:
            matrix = self._full_matrix()
            if not plan.hashes:
                return np.zeros((0, self._dimension or 0), dtype=np.float32)
            last = self._last
            if last is not None and last[0] == self._generation and last[1] == plan.hashes:
                return last[2]
            if any(h not in self._rows for h in plan.hashes):
                return None
            if plan.missing:  # keys whose text was embedded during this call
                for key, digest in zip(plan.keys, plan.hashes, strict=True):
                    self._link(key, digest)
            rows = np.fromiter((self._rows[h] for h in plan.hashes), dtype=np.int64, count=len(plan.hashes))
            result = matrix[rows]
            result.flags.writeable = False  # shared with the next identical call
            self._last = (self._generation, plan.hashes, result)
            return result

    # -- disk ------------------------------------------------------------------------------
    @property
    def _manifest_path(self) -> Path:
        return self.folder / MANIFEST_NAME

    def _parse_manifest(self, data: bytes | None) -> EmbeddingManifest | None:
        """The manifest (of any model); ``None`` if missing or damaged (then moved aside)."""
        if data is None:
            return None
        try:
            manifest = EmbeddingManifest.model_validate_json(data)
        except ValidationError as exc:
            log_event(Event.MEMORY_CORRUPT, level=logging.WARNING, path=str(self._manifest_path), error=str(exc)[:200])
            with contextlib.suppress(OSError):
                _fs.quarantine(self._manifest_path)
            return None
        if manifest.version > MANIFEST_VERSION:
            raise UnsupportedFormatError(
                f"{self._manifest_path} has version {manifest.version}; this library reads up to {MANIFEST_VERSION}"
            )
        return manifest

    def _own(self, manifest: EmbeddingManifest | None) -> EmbeddingManifest | None:
        """``manifest`` if it was written for this cache's model (and declared dimension), else ``None``."""
        if manifest is None or manifest.model != self.model:
            return None
        if self.declared_dimension is not None and manifest.dimension != self.declared_dimension:
            return None
        return manifest

    def _sync_from_disk(self) -> None:
        """Load shards listed in the manifest that this process has not seen yet."""
        data = _fs.read_optional(self._manifest_path)
        if data == self._manifest_bytes and data is not None:
            return
        manifest = self._own(self._parse_manifest(data))
        self._manifest_bytes = data
        if manifest is None:
            if self._loaded_shards:
                self._reset(dimension=None)
            return
        if self._dimension is not None and manifest.dimension != self._dimension:
            self._reset(dimension=None)
        if not set(self._loaded_shards) <= set(manifest.shards):
            # Shards were merged by someone else: reload from scratch.
            self._reset(dimension=None)
        self._dimension = manifest.dimension
        for name in manifest.shards:
            if name in self._loaded_shards:
                continue
            loaded = self._load_shard(name, manifest.dimension)
            if loaded is None:
                self._manifest_bytes = None  # merged away meanwhile: read the manifest again next time
                continue
            self._absorb(*loaded)
            self._loaded_shards.add(name)

    def _load_shard(self, name: str, dimension: int) -> tuple[list[str], list[str], Matrix] | None:
        path = self.guard.resolve("memory_data", EMBEDDINGS_DIR, name)
        data = _fs.read_optional(path)
        if data is None:
            return None
        try:
            return _read_shard(data, dimension)
        except (ValueError, KeyError, OSError, EOFError) as exc:
            log_event(Event.MEMORY_CORRUPT, level=logging.WARNING, path=str(path), error=str(exc)[:200])
            with contextlib.suppress(OSError):
                _fs.quarantine(path)
            return None

    def _commit(self, plan: _Plan, group: Sequence[tuple[str, str]], vectors: Sequence[Matrix]) -> None:
        """Store a batch of new vectors: one new shard, listed in the manifest, and in memory."""
        if not group:
            return
        matrix = np.concatenate(list(vectors)).astype(np.float32, copy=False)
        hashes = [digest for digest, _ in group]
        keys = [plan.owner[digest] for digest in hashes]
        dimension = int(matrix.shape[1])
        name = f"shard-{os.getpid()}-{secrets.token_hex(8)}.npz"
        durable = self.config.fsync
        with self._lock, _fs.locked(self._manifest_path, timeout=self.config.lock_timeout):
            self._sync_from_disk()
            if self._dimension is not None and self._dimension != dimension:
                self._reset(dimension=None)
            current = self._parse_manifest(_fs.read_optional(self._manifest_path))
            if current is None or self._own(current) is None or current.dimension != dimension:
                # No cache yet, or one of another model: start a new one and drop the old vectors.
                stale = current.shards if current is not None else []
                current = EmbeddingManifest(model=self.model, dimension=dimension, shards=[])
                self._drop_files(stale)
                self._reset(dimension=dimension)
            _fs.atomic_write(self.folder / name, _shard_bytes(keys, hashes, matrix), durable=durable)
            current = current.model_copy(update={"shards": [*current.shards, name]})
            payload = current.model_dump_json(indent=1).encode("utf-8")
            try:
                _fs.atomic_write(self._manifest_path, payload, durable=durable)
            except BaseException:
                self._drop_files([name])  # listed nowhere: it would never be read
                raise
            self._drop_files(self._unlisted(current.shards))
            self._manifest_bytes = payload
            self._dimension = dimension
            self._absorb(keys, hashes, matrix)
            self._loaded_shards.add(name)
            if len(current.shards) > MAX_SHARDS or self._dead_rows > max(1024, len(self._key_hash)):
                self._merge()

    def _merge(self) -> None:
        """Rewrite every live vector into one shard and drop the others (under the manifest lock)."""
        with self._lock, _fs.locked(self._manifest_path, timeout=self.config.lock_timeout):
            self._sync_from_disk()
            current = self._own(self._parse_manifest(_fs.read_optional(self._manifest_path)))
            if current is None:
                return
            matrix = self._full_matrix()
            live = sorted(self._key_hash.items())
            keys = [k for k, _ in live]
            hashes = [h for _, h in live]
            rows = np.fromiter((self._rows[h] for h in hashes), dtype=np.int64, count=len(hashes))
            vectors = matrix[rows] if len(rows) else np.zeros((0, current.dimension), dtype=np.float32)
            name = f"shard-{os.getpid()}-{secrets.token_hex(8)}.npz"
            durable = self.config.fsync
            _fs.atomic_write(self.folder / name, _shard_bytes(keys, hashes, vectors), durable=durable)
            merged = current.model_copy(update={"shards": [name]})
            payload = merged.model_dump_json(indent=1).encode("utf-8")
            _fs.atomic_write(self._manifest_path, payload, durable=durable)
            self._drop_files(current.shards)
            self._reset(dimension=current.dimension)
            self._manifest_bytes = payload
            self._absorb(keys, hashes, vectors.astype(np.float32, copy=False))
            self._dead_rows = 0
            self._loaded_shards = {name}

    def _unlisted(self, listed: Iterable[str]) -> list[str]:
        """Shard files the manifest does not list: left by a writer killed between writing a shard
        and the manifest, or by a merge killed before dropping the old ones. Shards are only
        written under the manifest lock, so under that lock every unlisted one is garbage."""
        keep = set(listed)
        return [p.name for p in self.folder.glob("shard-*.npz") if p.name not in keep]

    def _drop_files(self, names: Iterable[str]) -> None:
        """Delete shard files no manifest lists any more (a failure only leaves garbage behind)."""
        for name in names:
            with contextlib.suppress(OSError):
                _fs.remove(self.guard.resolve("memory_data", EMBEDDINGS_DIR, name))
