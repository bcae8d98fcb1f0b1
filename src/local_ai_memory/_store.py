"""``MemoryStore``: Markdown knowledge files, the cached index and Stage 1 search.

Files live in ``{root}/memory_data/{category}/{enc(user_id)}_{name}.md`` (see :mod:`._guard`
for the naming rule that keeps ``bob`` out of ``bob_admin``'s files). The store keeps the
index (``memory_index.json`` v3) and one BM25 ranker per ``(user, category)`` in memory:

* the index file is read once, when first needed, and written after each batch of changes
  (one write per refresh, populate or single-entry update), never per query. While a
  :class:`~._index_service.MemoryIndexService` runs, writes are coalesced further (at most
  one per second). A crash between a file change and the index write loses nothing: the next
  staleness check compares ``stat()`` results with the index and re-indexes what differs.
* a query checks staleness with ``stat()`` only (create, modify and delete), unless a running
  index service watches the folder, in which case it does no directory scan at all.
* a changed file updates its ranker in place (see :mod:`._ranking`); nothing is rebuilt.

Stage 1 ranks each file's text plus its file-name words and keywords (``ranking_field="both"``,
see :func:`._index.ranking_text`); ``benchmarks/bench_knowledge.py --quality`` has the
measurement behind that default (metadata alone finds far fewer right files). The tokenized
form of each ranker is cached in ``memory_data/.bm25/`` (checked per file against the index's
``mtime_ns``, size and metadata), so a new process does not re-read unchanged files.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import stat as stat_module
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from . import _fs
from ._config import MemoryConfig
from ._errors import InvalidInputError, PathEscapeError, RecordNotFoundError, StorageError, UnsupportedFormatError
from ._events import Event, log_event
from ._guard import DirectoryGuard, owner_of, user_file_prefix, validate_id, validate_name
from ._index import (
    IndexEntry,
    IndexFile,
    RankingField,
    extract_metadata,
    keyword_prompt,
    metadata_text,
    parse_index,
    parse_keywords,
    ranking_text,
    ranking_tokens,
    serialize_index,
    tokenize,
)
from ._protocols import LLM, Embedder
from ._ranking import (
    BM25Index,
    CountedDoc,
    Vocabulary,
    count_terms,
    pack_texts,
    rank,
    read_snapshot,
    snapshot_bytes,
    unpack_texts,
)

if TYPE_CHECKING:
    from ._embeddings import EmbeddingCache

__all__ = ["Candidate", "MemoryStore", "StaleEntry"]

DATA_DIR = "memory_data"
INDEX_NAME = "memory_index.json"
SNAPSHOT_DIR = ".bm25"
SNAPSHOT_VERSION = 1
DEFAULT_RANKING_FIELD: RankingField = "both"
_Key = tuple[str, str]  # (category, filename)
RACY_WINDOW_NS = 3_000_000_000  # mtimes this close to indexing are not trusted alone (2 s FAT ticks and clock skew)
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class Candidate:
    """One Stage 1 result: an index entry with its score (higher is better)."""

    filename: str
    category: str
    title: str
    description: str
    keywords: tuple[str, ...]
    score: float


@dataclass(frozen=True)
class StaleEntry:
    """A file whose index entry is missing, outdated, or points at a deleted file."""

    category: str
    filename: str
    reason: Literal["new", "modified", "deleted"]


@dataclass
class _Scanned:
    category: str
    filename: str
    entry: IndexEntry
    content: str
    excerpt: str = field(default="")
    tokens: list[str] | None = None
    counted: CountedDoc | None = None


def _signature(st: os.stat_result) -> tuple[int, int]:
    return st.st_mtime_ns, st.st_size


def _entry_signature(entry: IndexEntry) -> tuple[int, int] | float:
    if entry.mtime_ns is not None and entry.size is not None:
        return entry.mtime_ns, entry.size
    return entry.last_modified


def _is_knowledge_name(name: str) -> bool:
    return name.endswith(".md") and not name.startswith(".") and owner_of(name) is not None


class MemoryStore:
    """Knowledge files, their index and Stage 1 search, confined to ``guard``'s root.

    >>> import tempfile
    >>> store = MemoryStore(DirectoryGuard(tempfile.mkdtemp()), categories=["knowledge"])
    >>> _ = store.write_file("knowledge/alice_python.md", "# Python\\n\\nLists, dicts and loops.")
    >>> store.bm25_search("python loops", user_id="alice")
    ['alice_python.md']
    >>> store.bm25_search("python loops", user_id="bob")
    []
    """

    def __init__(
        self,
        guard: DirectoryGuard,
        config: MemoryConfig | None = None,
        *,
        categories: Iterable[str] | None = None,
        embedder: Embedder | None = None,
        ranking_field: RankingField = DEFAULT_RANKING_FIELD,
        auto_refresh: bool = True,
    ) -> None:
        self.guard = guard
        self.config = config if config is not None else MemoryConfig()
        cats = tuple(categories) if categories is not None else self.config.categories
        if not cats:
            raise InvalidInputError("at least one category is required")
        self.categories: tuple[str, ...] = tuple(validate_id(c, "category") for c in cats)
        if ranking_field not in ("metadata", "content", "both"):
            raise InvalidInputError(f"ranking_field must be metadata, content or both, got {ranking_field!r}")
        self.embedder = embedder
        self.ranking_field: RankingField = ranking_field
        self.auto_refresh = auto_refresh
        self.watched = False
        self.defer_writes = False
        self.data_dir = _fs.ensure_dir(guard.resolve(DATA_DIR))
        self.index_path = guard.resolve(DATA_DIR, INDEX_NAME)
        self._lock = threading.RLock()
        self._write_lock = threading.Lock()
        self._entries: dict[_Key, IndexEntry] | None = None
        self._owned: dict[tuple[str, str], set[str]] = {}
        self._rankers: dict[tuple[str, str], BM25Index] = {}
        self._skipped: dict[_Key, tuple[int, int]] = {}
        self._vocab = Vocabulary()
        self._saved: dict[tuple[str, str], int] = {}
        self._embeddings: EmbeddingCache | None = None
        self._dirty = False
        self._last_write = 0.0
        self.index_reads = 0
        self.index_writes = 0

    def __repr__(self) -> str:
        return f"MemoryStore({str(self.data_dir)!r}, categories={list(self.categories)!r})"

    # -- paths and files -------------------------------------------------------------------
    def _category(self, category: str) -> str:
        validate_id(category, "category")
        if category not in self.categories:
            raise InvalidInputError(f"unknown category {category!r}: configured are {list(self.categories)}")
        return category

    def _categories(self, categories: Iterable[str] | None) -> tuple[str, ...]:
        if categories is None:
            return self.categories
        if isinstance(categories, str):
            categories = [categories]
        return tuple(dict.fromkeys(self._category(c) for c in categories))

    def category_dir(self, category: str) -> Path:
        """The folder of ``category`` (created if missing)."""
        return _fs.ensure_dir(self.guard.resolve(DATA_DIR, self._category(category)))

    def _resolve(self, path: str | os.PathLike[str]) -> tuple[Path, str | None, str]:
        raw = Path(os.fspath(path))
        if raw.is_absolute():
            try:
                rel = raw.relative_to(self.data_dir)
            except ValueError:
                raise PathEscapeError(f"{raw} is outside the knowledge folder {self.data_dir}") from None
        else:
            rel = raw
        parts = rel.parts
        if not parts:
            raise PathEscapeError("empty path")
        full = self.guard.resolve(DATA_DIR, *parts)
        category = parts[0] if len(parts) == 2 and parts[0] in self.categories else None
        return full, category, parts[-1]

    def _scan(self, category: str, user_id: str | None) -> dict[str, os.stat_result]:
        """``{filename: stat}`` of the knowledge files in ``category`` (of ``user_id`` or everyone)."""
        folder = self.category_dir(category)
        prefix = user_file_prefix(user_id) if user_id is not None else None
        found: dict[str, os.stat_result] = {}
        with os.scandir(folder) as it:
            for item in it:
                name = item.name
                if prefix is not None:
                    # Encoded ids never contain "_", so this prefix alone proves the owner.
                    if not name.startswith(prefix) or not name.endswith(".md"):
                        continue
                elif not _is_knowledge_name(name):
                    continue
                try:
                    st = item.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if stat_module.S_ISREG(st.st_mode):
                    found[name] = st
        return found

    def list_user_files(self, user_id: str, category: str) -> list[Path]:
        """Paths of ``user_id``'s Markdown files in ``category``, sorted by name."""
        validate_name(user_id, "user_id")
        folder = self.category_dir(category)
        return [folder / name for name in sorted(self._scan(category, user_id))]

    def read_file(self, path: str | os.PathLike[str]) -> str:
        """Text of a file under ``memory_data/`` (relative like ``knowledge/alice_x.md`` or absolute)."""
        full, _, _ = self._resolve(path)
        data = _fs.read_optional(full)
        if data is None:
            raise RecordNotFoundError(f"no memory file {full}")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise UnsupportedFormatError(f"{full} is not UTF-8 text") from None

    def write_file(self, path: str | os.PathLike[str], content: str) -> Path:
        """Write ``content`` atomically; a knowledge file is indexed right away. Returns the path."""
        if not isinstance(content, str):
            raise InvalidInputError(f"content must be str, got {type(content).__name__}")
        full, category, name = self._resolve(path)
        if category is None:
            raise InvalidInputError(
                f"{os.fspath(path)!r}: write_file writes knowledge files, as '{{category}}/{{user prefix}}{{name}}.md' "
                f"with a category among {list(self.categories)}"
            )
        if not _is_knowledge_name(name):
            raise InvalidInputError(
                f"knowledge file name {name!r} must be '{{user prefix}}_{{name}}.md' (see user_file_prefix)"
            )
        _fs.atomic_write(full, content.encode("utf-8"), durable=self.config.fsync)
        with self._lock:
            self._ensure_loaded()
            self._refresh_one(category, name, content=content)
        self._persist()
        return full

    # -- index on disk -----------------------------------------------------------------------
    def index_exists(self) -> bool:
        """Whether ``memory_index.json`` exists on disk."""
        return self.index_path.is_file()

    def _load_from_disk(self) -> dict[_Key, IndexEntry] | None:
        data = _fs.read_optional(self.index_path)
        self.index_reads += 1
        if data is None:
            return None
        status, index, why = parse_index(data)
        if status == "corrupt":
            moved = _fs.quarantine(self.index_path)
            log_event(Event.MEMORY_CORRUPT, path=str(self.index_path), moved_to=str(moved), reason=why)
            return None
        if status == "outdated" or index is None:
            log_event(Event.INDEX_REBUILT, path=str(self.index_path), reason=why)
            return None
        return {
            (e.category, e.filename): e
            for e in index.files
            if _is_knowledge_name(e.filename) and e.category in self.categories
        }

    def _ensure_loaded(self, llm: LLM | None = None, progress: Progress | None = None) -> dict[_Key, IndexEntry]:
        with self._lock:
            if self._entries is not None:
                return self._entries
            loaded = self._load_from_disk()
            if loaded is not None:
                self._set_entries(loaded)
                return loaded
            self._set_entries({})
        self.populate_index_from_files(None, None, llm=llm, progress=progress)
        return self._current()

    def _current(self) -> dict[_Key, IndexEntry]:
        entries = self._entries
        if entries is None:
            raise RuntimeError("index not loaded")
        return entries

    def ensure_index(self, llm: LLM | None = None, progress: Progress | None = None) -> None:
        """Load the index, building it from the files when it is missing, outdated or broken."""
        self._ensure_loaded(llm, progress)

    def _set_entries(self, entries: dict[_Key, IndexEntry]) -> None:
        self._entries = entries
        self._owned = {}
        self._rankers = {}
        self._saved = {}
        for category, filename in entries:
            owner = owner_of(filename)
            if owner is not None:
                self._owned.setdefault((owner, category), set()).add(filename)

    def read_index(self) -> IndexFile:
        """The index (cached in memory after the first read; built if missing)."""
        entries = self._ensure_loaded()
        with self._lock:
            files = sorted(entries.values(), key=lambda e: (e.category, e.filename))
        return IndexFile.model_construct(index_version=3, last_updated=self._last_write, files=files)

    def write_index(self, index: IndexFile | Sequence[IndexEntry]) -> None:
        """Replace the whole index (in memory and, atomically, on disk)."""
        files = index.files if isinstance(index, IndexFile) else list(index)
        with self._lock:
            self._set_entries({(e.category, e.filename): e for e in files})
            self._dirty = True
        self.flush()

    def find_entry(self, filename: str, category: str | None = None) -> IndexEntry | None:
        """The index entry of ``filename`` (in ``category``, or the first configured category holding it)."""
        entries = self._ensure_loaded()
        cats = (self._category(category),) if category is not None else self.categories
        with self._lock:
            for cat in cats:
                found = entries.get((cat, filename))
                if found is not None:
                    return found
        return None

    def flush(self) -> bool:
        """Write the index now if it changed since the last write; return whether it wrote."""
        with self._write_lock:
            with self._lock:
                if not self._dirty or self._entries is None:
                    return False
                snapshot = list(self._entries.values())
                self._dirty = False
            now = time.time()
            try:
                _fs.atomic_write(self.index_path, serialize_index(snapshot, now), durable=self.config.fsync)
            except BaseException:
                with self._lock:
                    self._dirty = True
                raise
            self._last_write = now
            self.index_writes += 1
            return True

    def _persist(self) -> None:
        if not self.defer_writes:
            self.flush()

    @property
    def dirty(self) -> bool:
        """Whether the in-memory index has changes not yet written to disk."""
        return self._dirty

    # -- entry changes (hold self._lock) ----------------------------------------------------
    def _tokens(self, entry: IndexEntry, content: str | None, content_tokens: list[str] | None = None) -> list[str]:
        if content is None and self.ranking_field != "metadata":
            data = _fs.read_optional(self.data_dir / entry.category / entry.filename)
            try:
                content = data.decode("utf-8") if data is not None else None
            except UnicodeDecodeError:
                content = None
        return ranking_tokens(entry, content, self.ranking_field, content_tokens)

    def _put(self, entry: IndexEntry, content: str | None, content_tokens: list[str] | None = None) -> None:
        assert self._entries is not None
        key = (entry.category, entry.filename)
        owner = owner_of(entry.filename)
        if owner is None:
            return
        self._entries[key] = entry
        self._skipped.pop(key, None)
        self._owned.setdefault((owner, entry.category), set()).add(entry.filename)
        ranker = self._rankers.get((owner, entry.category))
        if ranker is not None:
            ranker.add(entry.filename, self._tokens(entry, content, content_tokens))
        self._dirty = True

    def _drop(self, category: str, filename: str) -> bool:
        assert self._entries is not None
        self._skipped.pop((category, filename), None)
        if self._entries.pop((category, filename), None) is None:
            return False
        owner = owner_of(filename)
        if owner is not None:
            self._owned.get((owner, category), set()).discard(filename)
            ranker = self._rankers.get((owner, category))
            if ranker is not None:
                ranker.remove(filename)
        self._dirty = True
        return True

    def _racy_changed(self, category: str, filename: str, entry: IndexEntry) -> bool:
        """Whether a file indexed within one timestamp tick of its last change may differ now.

        Like git's "racily clean" entries: an edit of the same size within the same mtime tick
        is invisible to ``stat()``, so such entries keep a content hash and the file is
        re-hashed on each check. Once the tick has safely passed and the hash still matches,
        any later edit must change the mtime: the hash is dropped and ``stat()`` suffices again.
        Call with ``self._lock`` held.
        """
        data = _fs.read_optional(self.data_dir / category / filename)
        if data is None or hashlib.sha256(data).hexdigest() != entry.content_hash:
            return True
        if time.time_ns() - (entry.mtime_ns or 0) > RACY_WINDOW_NS and self._entries is not None:
            self._entries[(category, filename)] = entry.model_copy(update={"content_hash": None})
            self._dirty = True
        return False

    def _scan_one(
        self, category: str, filename: str, st: os.stat_result, content: str | None = None
    ) -> _Scanned | None:
        path = self.data_dir / category / filename  # names come from a scan or were checked by the guard
        if content is None:
            data = _fs.read_optional(path)
            if data is None:
                return None
            try:
                content = data.decode("utf-8")
            except UnicodeDecodeError:
                self._skipped[(category, filename)] = _signature(st)
                log_event(Event.FILE_SKIPPED, path=str(path), reason="not UTF-8 text")
                return None
            if b"\x00" in data:
                self._skipped[(category, filename)] = _signature(st)
                log_event(Event.FILE_SKIPPED, path=str(path), reason="binary content")
                return None
        tokens = tokenize(content)
        title, description, keywords = extract_metadata(filename, category, content, content_tokens=tokens)
        entry = IndexEntry(
            filename=filename,
            title=title,
            description=description,
            keywords=keywords,
            category=category,
            last_modified=st.st_mtime,
            size=st.st_size,
            mtime_ns=st.st_mtime_ns,
            content_hash=(
                hashlib.sha256(content.encode("utf-8")).hexdigest()
                if time.time_ns() - st.st_mtime_ns <= RACY_WINDOW_NS
                else None
            ),
        )
        return _Scanned(category, filename, entry, content, excerpt=content[:1500], tokens=tokens)

    def _refresh_one(self, category: str, filename: str, content: str | None = None) -> bool:
        """Re-index one file from disk (or drop it if gone); return whether the index changed."""
        path = self.category_dir(category) / filename
        try:
            st = os.stat(path, follow_symlinks=False)
        except FileNotFoundError:
            return self._drop(category, filename)
        if not stat_module.S_ISREG(st.st_mode):
            return self._drop(category, filename)
        scanned = self._scan_one(category, filename, st, content)
        if scanned is None:
            return self._drop(category, filename)
        self._put(scanned.entry, scanned.content, scanned.tokens)
        return True

    def update_index_entry(
        self,
        filename: str,
        title: str,
        description: str,
        keywords: Sequence[str],
        category: str,
        last_modified: float | None = None,
    ) -> IndexEntry:
        """Set one entry's metadata (no full rebuild). ``last_modified`` defaults to the file's mtime."""
        category = self._category(category)
        if not _is_knowledge_name(filename):
            raise InvalidInputError(f"{filename!r} is not a knowledge file name ('{{user prefix}}_{{name}}.md')")
        path = self.guard.resolve(DATA_DIR, category, filename)
        try:
            st: os.stat_result | None = os.stat(path)
        except FileNotFoundError:
            st = None
        entry = IndexEntry(
            filename=filename,
            title=title,
            description=description,
            keywords=list(keywords),
            category=category,
            last_modified=last_modified if last_modified is not None else (st.st_mtime if st else time.time()),
            size=st.st_size if st is not None and last_modified is None else None,
            mtime_ns=st.st_mtime_ns if st is not None and last_modified is None else None,
        )
        self._ensure_loaded()
        with self._lock:
            self._put(entry, None)
        self._persist()
        return entry

    def remove_index_entry(self, filename: str, category: str) -> bool:
        """Drop one entry from the index; return whether it was there."""
        category = self._category(category)
        self._ensure_loaded()
        with self._lock:
            removed = self._drop(category, filename)
        if removed:
            self._persist()
        return removed

    # -- population and refresh ---------------------------------------------------------------
    def _users_scan(self, user_id: str | None, categories: tuple[str, ...]) -> list[tuple[str, str, os.stat_result]]:
        out = []
        for category in categories:
            for name, st in sorted(self._scan(category, user_id).items()):
                out.append((category, name, st))
        return out

    def _collect(
        self, user_id: str | None, categories: Iterable[str] | None, progress: Progress | None, precount: bool
    ) -> tuple[tuple[str, ...], list[_Scanned]]:
        """Read and extract every file; with ``precount`` keep only term counts (not the text) in memory."""
        if user_id is not None:
            validate_name(user_id, "user_id")
        cats = self._categories(categories)
        listing = self._users_scan(user_id, cats)
        scanned: list[_Scanned] = []
        total = len(listing)
        for done, (category, name, st) in enumerate(listing, 1):
            item = self._scan_one(category, name, st)
            if item is not None:
                if precount:
                    tokens = ranking_tokens(item.entry, item.content, self.ranking_field, item.tokens)
                    with self._lock:
                        item.counted = count_terms(self._vocab, tokens)
                    item.tokens, item.content, item.excerpt = None, "", ""
                scanned.append(item)
            if progress is not None and (done == total or done % 64 == 0):
                progress(done, total)
        if progress is not None and total == 0:
            progress(0, 0)
        return cats, scanned

    @staticmethod
    def _refined(item: _Scanned, answer: str) -> None:
        words = parse_keywords(answer)
        if len(words) >= 3:
            item.entry = item.entry.model_copy(update={"keywords": words})

    def _apply_population(self, user_id: str | None, cats: tuple[str, ...], scanned: list[_Scanned]) -> int:
        with self._lock:
            if self._entries is None:
                # Keep other users' and categories' entries from the file; a missing or broken
                # index starts empty (their files show up as stale "new" on their next refresh).
                self._set_entries(self._load_from_disk() or {})
            assert self._entries is not None
            keep = {(s.category, s.filename) for s in scanned}
            for key in list(self._entries):
                category, filename = key
                if category in cats and (user_id is None or owner_of(filename) == user_id) and key not in keep:
                    self._drop(category, filename)
            groups: dict[tuple[str, str], list[tuple[str, CountedDoc]]] = {}
            for item in scanned:
                owner = owner_of(item.filename)
                assert owner is not None
                self._entries[(item.category, item.filename)] = item.entry
                self._owned.setdefault((owner, item.category), set()).add(item.filename)
                counted = item.counted
                if counted is None:
                    tokens = ranking_tokens(item.entry, item.content, self.ranking_field, item.tokens)
                    counted = count_terms(self._vocab, tokens)
                groups.setdefault((owner, item.category), []).append((item.filename, counted))
            for (owner, category), names in list(self._owned.items()):
                if category in cats and (user_id is None or owner == user_id):
                    ranker = BM25Index(self._vocab, category)
                    ranker.build_counted(groups.get((owner, category), []))
                    self._rankers[(owner, category)] = ranker
                    self._save_ranker(owner, category)
                    if not names:
                        del self._owned[(owner, category)]
            self._dirty = True
        self.flush()
        log_event(Event.INDEX_REBUILT, path=str(self.index_path), files=len(scanned), user_id=user_id)
        return len(scanned)

    def populate_index_from_files(
        self,
        user_id: str | None = None,
        categories: Iterable[str] | None = None,
        llm: LLM | None = None,
        progress: Progress | None = None,
    ) -> int:
        """Index every file of ``user_id`` (``None``: all users) in ``categories`` from scratch.

        With ``llm`` each file gets 5-10 refined keywords (one call per file; a failed call keeps
        the heuristic keywords). ``progress(done, total)`` is called while files are read.
        Returns the number of files indexed.
        """
        cats, scanned = self._collect(user_id, categories, progress, llm is None)
        if llm is not None:
            for item in scanned:
                prompt = keyword_prompt(item.entry.title, item.entry.description, item.entry.keywords, item.excerpt)
                try:
                    self._refined(item, llm.complete(prompt))
                except Exception as exc:  # the heuristic keywords stay; population must finish
                    log_event(Event.FILE_SKIPPED, path=item.filename, reason=f"keyword LLM failed: {exc!r}")
        return self._apply_population(user_id, cats, scanned)

    async def apopulate_index_from_files(
        self,
        user_id: str | None = None,
        categories: Iterable[str] | None = None,
        llm: LLM | None = None,
        progress: Progress | None = None,
    ) -> int:
        """Async twin of :meth:`populate_index_from_files` (uses ``llm.acomplete``)."""
        cats, scanned = await asyncio.to_thread(self._collect, user_id, categories, progress, llm is None)
        if llm is not None:
            for item in scanned:
                prompt = keyword_prompt(item.entry.title, item.entry.description, item.entry.keywords, item.excerpt)
                try:
                    self._refined(item, await llm.acomplete(prompt))
                except Exception as exc:
                    log_event(Event.FILE_SKIPPED, path=item.filename, reason=f"keyword LLM failed: {exc!r}")
        return await asyncio.to_thread(self._apply_population, user_id, cats, scanned)

    def get_stale_entries(
        self, user_id: str | None = None, categories: Iterable[str] | None = None
    ) -> list[StaleEntry]:
        """Files created, modified or deleted since they were indexed (``stat()`` only, no reads)."""
        if user_id is not None:
            validate_name(user_id, "user_id")
        cats = self._categories(categories)
        entries = self._ensure_loaded()
        stale: list[StaleEntry] = []
        for category in cats:
            current = self._scan(category, user_id)
            with self._lock:
                if user_id is not None:
                    indexed = list(self._owned.get((user_id, category), ()))
                else:
                    indexed = [name for cat, name in entries if cat == category]
                for name, st in current.items():
                    entry = entries.get((category, name))
                    if entry is None:
                        if self._skipped.get((category, name)) != _signature(st):
                            stale.append(StaleEntry(category, name, "new"))
                        continue
                    known = _entry_signature(entry)
                    now = _signature(st) if isinstance(known, tuple) else st.st_mtime
                    if now != known or (entry.content_hash is not None and self._racy_changed(category, name, entry)):
                        stale.append(StaleEntry(category, name, "modified"))
                for name in indexed:
                    if name not in current:
                        stale.append(StaleEntry(category, name, "deleted"))
        return stale

    def refresh_stale_entries(self, user_id: str | None = None, categories: Iterable[str] | None = None) -> int:
        """Re-index what :meth:`get_stale_entries` finds, with heuristic keywords (never an LLM).

        Returns the number of entries added, updated or removed. The index is written once,
        also when an earlier write of it failed and nothing is stale now.
        """
        return self._refresh_stale(user_id, categories, during_query=False)

    def _refresh_stale(self, user_id: str | None, categories: Iterable[str] | None, *, during_query: bool) -> int:
        changed = 0
        stale = self.get_stale_entries(user_id, categories)
        if stale:
            with self._lock:
                for item in stale:
                    if self._refresh_one(item.category, item.filename):
                        changed += 1
        if changed or self._dirty:
            self._persist_or_defer(during_query)
        if changed:
            log_event(Event.INDEX_REFRESHED, files=changed, user_id=user_id)
        return changed

    def _persist_or_defer(self, during_query: bool) -> None:
        """Write the index; a query that cannot (disk full) still answers and a later write retries."""
        try:
            self._persist()
        except StorageError as exc:
            if not during_query:
                raise
            log_event(Event.INDEX_WRITE_DEFERRED, level=logging.WARNING, path=str(self.index_path), reason=str(exc))

    def refresh_paths(self, paths: Iterable[str | os.PathLike[str]]) -> int:
        """Re-index the given files (created, changed or deleted), ignoring non-knowledge paths.

        This is what the watcher calls; it reads only the files named. Returns the number of changes.
        """
        self._ensure_loaded()
        targets: set[_Key] = set()
        for raw in paths:
            path = Path(os.fspath(raw))
            try:
                rel = path.relative_to(self.data_dir)
            except ValueError:
                continue
            if len(rel.parts) != 2 or rel.parts[0] not in self.categories or not _is_knowledge_name(rel.parts[1]):
                continue
            targets.add((rel.parts[0], rel.parts[1]))
        changed = 0
        with self._lock:
            assert self._entries is not None
            for category, name in sorted(targets):
                try:
                    st = os.stat(self.data_dir / category / name, follow_symlinks=False)
                except FileNotFoundError:
                    changed += self._drop(category, name)
                    continue
                entry = self._entries.get((category, name))
                if entry is not None and _entry_signature(entry) == _signature(st):
                    continue
                if entry is None and self._skipped.get((category, name)) == _signature(st):
                    continue
                changed += self._refresh_one(category, name)
        if changed or self._dirty:
            self._persist()
        if changed:
            log_event(Event.INDEX_REFRESHED, files=changed, source="watcher")
        return changed

    # -- search --------------------------------------------------------------------------------
    # -- ranker snapshots (hold self._lock) ----------------------------------------------------
    @staticmethod
    def _doc_sig(entry: IndexEntry) -> tuple[int, int, int]:
        meta = zlib.crc32(metadata_text(entry).encode("utf-8", "surrogatepass"))
        return (entry.mtime_ns or 0, entry.size if entry.size is not None else -1, meta)

    def _snapshot_path(self, user_id: str, category: str) -> Path:
        return self.guard.resolve(DATA_DIR, SNAPSHOT_DIR, category, f"{user_file_prefix(user_id)}bm25.npz")

    def _save_ranker(self, user_id: str, category: str) -> None:
        ranker = self._rankers[(user_id, category)]
        entries = self._current()
        arrays, names = ranker.export()
        missing = (0, -1, 0)  # never matches: such a document is re-read on the next load
        sigs = [self._doc_sig(e) if (e := entries.get((category, name))) else missing for name in names]
        arrays["sigs"] = np.array(sigs, dtype=np.int64).reshape(-1, 3)
        arrays["version"] = np.array([SNAPSHOT_VERSION], dtype=np.int64)
        arrays["field"] = pack_texts([self.ranking_field])
        _fs.atomic_write(self._snapshot_path(user_id, category), snapshot_bytes(arrays), durable=self.config.fsync)
        self._saved[(user_id, category)] = ranker.version

    def save_rankers(self) -> int:
        """Write the tokenized form of every changed ranker to ``memory_data/.bm25/`` so the next
        process starts without re-reading every file; return how many were written."""
        written = 0
        with self._lock:
            for (user_id, category), ranker in list(self._rankers.items()):
                if self._saved.get((user_id, category)) != ranker.version:
                    self._save_ranker(user_id, category)
                    written += 1
        return written

    def _load_snapshot(self, ranker: BM25Index, user_id: str, category: str, names: set[str]) -> set[str]:
        path = self._snapshot_path(user_id, category)
        data = _fs.read_optional(path)
        if data is None:
            return set()
        entries = self._current()
        try:
            arrays = read_snapshot(data)
            if int(arrays["version"][0]) != SNAPSHOT_VERSION or unpack_texts(arrays["field"]) != [self.ranking_field]:
                return set()
            sigs = arrays["sigs"].tolist()

            def accept(name: str, row: int) -> bool:
                entry = entries.get((category, name))
                return entry is not None and name in names and tuple(sigs[row]) == self._doc_sig(entry)

            return ranker.load(arrays, accept)
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            log_event(Event.MEMORY_CORRUPT, level=logging.WARNING, path=str(path), reason=str(exc)[:200])
            return set()

    def _ranker(self, user_id: str, category: str) -> BM25Index:
        ranker = self._rankers.get((user_id, category))
        if ranker is None:
            entries = self._current()
            names = self._owned.get((user_id, category), set())
            ranker = BM25Index(self._vocab, category)
            try:
                loaded = self._load_snapshot(ranker, user_id, category, names)
            except Exception:
                ranker, loaded = BM25Index(self._vocab, category), set()
            missing = sorted(name for name in names if name not in loaded)
            if len(missing) > 64:
                ranker.build((name, self._tokens(entries[(category, name)], None)) for name in missing)
            else:
                for name in missing:
                    ranker.add(name, self._tokens(entries[(category, name)], None))
            self._rankers[(user_id, category)] = ranker
            if not loaded or len(missing) > max(64, len(names) // 100):
                try:
                    self._save_ranker(user_id, category)
                except StorageError as exc:  # only a cache: the query answers, save_rankers() retries
                    log_event(Event.INDEX_WRITE_DEFERRED, level=logging.WARNING, path="ranker cache", reason=str(exc))
            else:
                self._saved[(user_id, category)] = -1 if missing else ranker.version
        return ranker

    def _prepare(self, user_id: str, categories: Iterable[str] | None) -> tuple[str, ...]:
        validate_name(user_id, "user_id")
        cats = self._categories(categories)
        self._ensure_loaded()
        if self.auto_refresh and not self.watched:
            self._refresh_stale(user_id, cats, during_query=True)
        return cats

    def search(
        self, query: str, top_n: int = 5, *, user_id: str, categories: Iterable[str] | None = None
    ) -> list[Candidate]:
        """Stage 1 BM25 over ``user_id``'s entries only: scored candidates, best first."""
        if not isinstance(query, str):
            raise InvalidInputError(f"query must be str, got {type(query).__name__}")
        if not isinstance(top_n, int) or top_n < 0:
            raise InvalidInputError(f"top_n must be a non-negative integer, got {top_n!r}")
        cats = self._prepare(user_id, categories)
        tokens = tokenize(query)
        with self._lock:
            entries = self._current()
            rankers = [self._ranker(user_id, c) for c in cats]
            hits = rank(rankers, tokens, top_n)
            out = []
            for category, name, score in hits:
                entry = entries[(category, name)]
                out.append(
                    Candidate(name, category, entry.title, entry.description, tuple(entry.keywords), round(score, 6))
                )
        return out

    def bm25_search(
        self, query: str, top_n: int = 5, *, user_id: str, categories: Iterable[str] | None = None
    ) -> list[str]:
        """File names of ``user_id``'s best BM25 matches for ``query``, best first."""
        return [c.filename for c in self.search(query, top_n, user_id=user_id, categories=categories)]

    fast_filter = bm25_search

    def hybrid_candidates(
        self,
        query: str,
        top_n: int = 5,
        bm25_weight: float | None = None,
        *,
        user_id: str,
        categories: Iterable[str] | None = None,
    ) -> list[Candidate]:
        """Scored candidates of :meth:`hybrid_search` (score = fused RRF score; BM25 score on fallback)."""
        weight = self.config.hybrid_bm25_weight if bm25_weight is None else float(bm25_weight)
        if not 0.0 <= weight <= 1.0:
            raise InvalidInputError(f"bm25_weight must be between 0 and 1, got {bm25_weight!r}")
        pool = max(top_n, self.config.hybrid_top_n)
        lexical = self.search(query, pool, user_id=user_id, categories=categories)
        if self.embedder is None:
            log_event(Event.EMBEDDINGS_FALLBACK, reason="no embedder configured")
            return lexical[:top_n]
        try:
            vector = self._vector_ranked(query, pool, user_id, self._categories(categories))
            from ._fusion import reciprocal_rank_fusion

            fused = reciprocal_rank_fusion([c.filename for c in lexical], [c.filename for c in vector], weight)
        except Exception as exc:  # any embedder failure degrades to BM25 rather than failing the query
            log_event(Event.EMBEDDINGS_FALLBACK, reason=repr(exc))
            return lexical[:top_n]
        by_name = {c.filename: c for c in [*vector, *lexical]}
        out = []
        for name, score in fused[:top_n]:
            c = by_name[name]
            out.append(Candidate(c.filename, c.category, c.title, c.description, c.keywords, round(score, 6)))
        return out

    def hybrid_search(
        self,
        query: str,
        top_n: int = 5,
        bm25_weight: float | None = None,
        *,
        user_id: str,
        categories: Iterable[str] | None = None,
    ) -> list[str]:
        """BM25 fused with embedding similarity by weighted reciprocal rank fusion; BM25 alone
        when no embedder is configured or it fails (logged as ``EMBEDDINGS_FALLBACK``)."""
        return [
            c.filename
            for c in self.hybrid_candidates(query, top_n, bm25_weight, user_id=user_id, categories=categories)
        ]

    def _vector_ranked(self, query: str, pool: int, user_id: str, cats: tuple[str, ...]) -> list[Candidate]:
        """The user's entries by cosine similarity of their metadata text to the query (vectors cached)."""
        from ._embeddings import EmbeddingCache
        from ._fusion import cosine_top_n

        with self._lock:
            entries = self._current()
            chosen = [entries[(c, n)] for c in cats for n in sorted(self._owned.get((user_id, c), ()))]
            if self._embeddings is None:
                self._embeddings = EmbeddingCache(self.guard, self.embedder, self.config)
            cache = self._embeddings
        if not chosen:
            return []
        matrix = cache.vectors_for([(f"{e.category}/{e.filename}", ranking_text(e, None, "metadata")) for e in chosen])
        top = cosine_top_n(matrix, cache.embed_query(query), pool)
        return [
            Candidate(
                chosen[i].filename,
                chosen[i].category,
                chosen[i].title,
                chosen[i].description,
                tuple(chosen[i].keywords),
                score,
            )
            for i, score in top
        ]

    def stats(self) -> dict[str, Any]:
        """Counts for humans and the CLI: files per category and per user, index size on disk."""
        entries = self._ensure_loaded()
        with self._lock:
            per_category: dict[str, int] = dict.fromkeys(self.categories, 0)
            users: dict[str, int] = {}
            for category, name in entries:
                per_category[category] = per_category.get(category, 0) + 1
                owner = owner_of(name) or "?"
                users[owner] = users.get(owner, 0) + 1
            try:
                size = self.index_path.stat().st_size
            except FileNotFoundError:
                size = 0
            return {
                "data_dir": str(self.data_dir),
                "files": len(entries),
                "categories": per_category,
                "users": dict(sorted(users.items())),
                "index_bytes": size,
                "ranking_field": self.ranking_field,
                "rankers_loaded": len(self._rankers),
                "vocabulary": len(self._vocab),
            }

    # -- async twins -----------------------------------------------------------------------------
    async def aread_file(self, path: str | os.PathLike[str]) -> str:
        """Async twin of :meth:`read_file`."""
        return await asyncio.to_thread(self.read_file, path)

    async def awrite_file(self, path: str | os.PathLike[str], content: str) -> Path:
        """Async twin of :meth:`write_file`."""
        return await asyncio.to_thread(self.write_file, path, content)

    async def alist_user_files(self, user_id: str, category: str) -> list[Path]:
        """Async twin of :meth:`list_user_files`."""
        return await asyncio.to_thread(self.list_user_files, user_id, category)

    async def aindex_exists(self) -> bool:
        """Async twin of :meth:`index_exists`."""
        return await asyncio.to_thread(self.index_exists)

    async def aensure_index(self, llm: LLM | None = None, progress: Progress | None = None) -> None:
        """Async twin of :meth:`ensure_index` (a build here uses heuristic keywords only when ``llm`` is None)."""
        if llm is not None and not await asyncio.to_thread(lambda: self._entries is not None or self.index_exists()):
            await self.apopulate_index_from_files(None, None, llm=llm, progress=progress)
            return
        await asyncio.to_thread(self.ensure_index, None, progress)

    async def aread_index(self) -> IndexFile:
        """Async twin of :meth:`read_index`."""
        return await asyncio.to_thread(self.read_index)

    async def awrite_index(self, index: IndexFile | Sequence[IndexEntry]) -> None:
        """Async twin of :meth:`write_index`."""
        await asyncio.to_thread(self.write_index, index)

    async def afind_entry(self, filename: str, category: str | None = None) -> IndexEntry | None:
        """Async twin of :meth:`find_entry`."""
        return await asyncio.to_thread(self.find_entry, filename, category)

    async def aflush(self) -> bool:
        """Async twin of :meth:`flush`."""
        return await asyncio.to_thread(self.flush)

    async def aupdate_index_entry(
        self,
        filename: str,
        title: str,
        description: str,
        keywords: Sequence[str],
        category: str,
        last_modified: float | None = None,
    ) -> IndexEntry:
        """Async twin of :meth:`update_index_entry`."""
        return await asyncio.to_thread(
            self.update_index_entry, filename, title, description, keywords, category, last_modified
        )

    async def aremove_index_entry(self, filename: str, category: str) -> bool:
        """Async twin of :meth:`remove_index_entry`."""
        return await asyncio.to_thread(self.remove_index_entry, filename, category)

    async def aget_stale_entries(
        self, user_id: str | None = None, categories: Iterable[str] | None = None
    ) -> list[StaleEntry]:
        """Async twin of :meth:`get_stale_entries`."""
        return await asyncio.to_thread(self.get_stale_entries, user_id, categories)

    async def arefresh_stale_entries(self, user_id: str | None = None, categories: Iterable[str] | None = None) -> int:
        """Async twin of :meth:`refresh_stale_entries`."""
        return await asyncio.to_thread(self.refresh_stale_entries, user_id, categories)

    async def arefresh_paths(self, paths: Iterable[str | os.PathLike[str]]) -> int:
        """Async twin of :meth:`refresh_paths`."""
        return await asyncio.to_thread(self.refresh_paths, list(paths))

    async def asearch(
        self, query: str, top_n: int = 5, *, user_id: str, categories: Iterable[str] | None = None
    ) -> list[Candidate]:
        """Async twin of :meth:`search`."""
        return await asyncio.to_thread(lambda: self.search(query, top_n, user_id=user_id, categories=categories))

    async def abm25_search(
        self, query: str, top_n: int = 5, *, user_id: str, categories: Iterable[str] | None = None
    ) -> list[str]:
        """Async twin of :meth:`bm25_search`."""
        return await asyncio.to_thread(lambda: self.bm25_search(query, top_n, user_id=user_id, categories=categories))

    afast_filter = abm25_search

    async def ahybrid_candidates(
        self,
        query: str,
        top_n: int = 5,
        bm25_weight: float | None = None,
        *,
        user_id: str,
        categories: Iterable[str] | None = None,
    ) -> list[Candidate]:
        """Async twin of :meth:`hybrid_candidates`."""
        return await asyncio.to_thread(
            lambda: self.hybrid_candidates(query, top_n, bm25_weight, user_id=user_id, categories=categories)
        )

    async def ahybrid_search(
        self,
        query: str,
        top_n: int = 5,
        bm25_weight: float | None = None,
        *,
        user_id: str,
        categories: Iterable[str] | None = None,
    ) -> list[str]:
        """Async twin of :meth:`hybrid_search`."""
        return await asyncio.to_thread(
            lambda: self.hybrid_search(query, top_n, bm25_weight, user_id=user_id, categories=categories)
        )

    async def astats(self) -> dict[str, Any]:
        """Async twin of :meth:`stats`."""
        return await asyncio.to_thread(self.stats)
