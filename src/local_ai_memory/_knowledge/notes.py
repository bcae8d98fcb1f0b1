"""``KnowledgeNotes``: knowledge notes and their index, kept current over a knowledge backend.

The base of :class:`~.store.MemoryStore` (which adds search). It wires the parts, each in its
own module and each seeing storage only through the
:class:`~local_ai_memory._contracts.knowledge.KnowledgeBackend` contract:

* :class:`~.index.KnowledgeIndex`: one user's entries in memory and their index blobs
  (``.index/{user}_index.json`` and its journal), read when that user is first asked for and
  written after each batch of changes, never per query. A process holds the users it serves
  within ``owner_cache_mb`` (:class:`~.roots.RootParts`).
  While a :class:`~.service.MemoryIndexService` runs, writes are coalesced further.
* :class:`~.indexer.NoteIndexer`: notes into entries, and what changed since (the
  backend's change feed, else a listing comparison: ``stat()`` only on files). A crash between
  a note change and the index write loses nothing: the next check finds the difference.
* :class:`~.rankers.RankerCache`: one BM25 ranker per ``(user, category)``, updated in
  place and snapshotted under ``.bm25/`` so a new process does not re-read unchanged notes.

Before each query :meth:`KnowledgeNotes._prepare` brings the asking user's index up to date:
it applies that user's change feed when the backend keeps one, else (unless a watcher runs)
compares the user's listing with the index. A store over a folder (its backend's ``folder`` is set) shares
these parts with every other store of that folder in the process (:mod:`.roots`), and its first query
starts the folder's automatic watcher (config ``auto_watch``), after which queries compare no
listings at all.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from local_ai_memory._contracts.knowledge import (
    DATA_DIR,
    KnowledgeBackend,
    NoteInfo,
    VectorCache,
    erasure_marker,
    is_note_name,
)
from local_ai_memory._knowledge.conversations import CONVERSATIONS
from local_ai_memory._knowledge.index import (
    INDEX_NAME,
    JOURNAL_NAME,
    MANIFEST,
    MANIFEST_NAME,
    KnowledgeIndex,
    index_names,
)
from local_ai_memory._knowledge.index_file import (
    INDEX_VERSION,
    IndexEntry,
    IndexFile,
    RankingField,
    SkippedNote,
    journal_line,
    keyword_prompt,
    parse_keywords,
)
from local_ai_memory._knowledge.indexer import NoteIndexer, NoteLine, Scanned, StaleEntry, decode_head
from local_ai_memory._knowledge.rankers import RankerCache
from local_ai_memory._knowledge.roots import OwnerParts, RootKey, RootParts, shared_parts
from local_ai_memory._knowledge.search import embedding_text
from local_ai_memory._knowledge.service import watch_automatically
from local_ai_memory._shared import fs as _fs
from local_ai_memory._shared.collector import collector_paused
from local_ai_memory._shared.config import MemoryConfig
from local_ai_memory._shared.errors import (
    ConfigError,
    InvalidInputError,
    PathEscapeError,
    RecordNotFoundError,
    StorageError,
    UnsupportedFormatError,
)
from local_ai_memory._shared.events import Event, log_event
from local_ai_memory._shared.models import LLM, Embedder
from local_ai_memory._shared.naming import (
    DirectoryGuard,
    check_component,
    owner_of,
    user_file_prefix,
    validate_id,
    validate_name,
)
from local_ai_memory._shared.text import Analyzer
from local_ai_memory._shared.twins import thread_twin
from local_ai_memory._shared.unicode import check_text

__all__ = ["KnowledgeNotes"]

DEFAULT_RANKING_FIELD: RankingField = "both"
Progress = Callable[[int, int], None]


SETTLE_WAIT_S = 0.05
""":meth:`KnowledgeNotes.settle` waits at most this long for a timestamp tick to pass."""
CATCH_UP_WAIT_NOTES = 50_000
"""From this many notes of the asking user, the query that starts the automatic watcher waits
for the watcher's first comparison of the listings instead of comparing them alongside it.
Waiting costs at least the watcher's registration (its first answer, about 0.1 s) plus its
comparison of every user's listing; below this the query's own comparison of its user's
listing is cheaper (about 70 ms of ``stat`` at 10k notes), and it is done before the watcher
compares, so the two rarely run at once."""
WATCH_START_DELAY_S = 0.05
"""How long after the query that starts it the automatic watcher starts (see
:meth:`KnowledgeNotes._start_watching_soon`)."""
CATCH_UP_WAIT_S = 30.0
"""How long it waits at most; then (or if the watcher failed) it compares by itself."""


_PASSAGE_METHODS = ("digest_of", "kept", "discard_kept")


def _progress_from(progress: Progress, offset: int, total: int, done: int, _owner_total: int) -> None:
    """One owner's ``progress(done, of)`` as a step of a run over every owner's notes."""
    progress(offset + done, total)


@dataclass(frozen=True)
class ForgottenNotes:
    """What :meth:`KnowledgeNotes.forget_user` deleted: notes (``category/name``), their bytes,
    ranker snapshots and cached vectors."""

    notes: list[str]
    size: int
    snapshots: int
    vectors: int


class KnowledgeNotes:
    """Knowledge notes and their index, stored by ``backend`` (chosen by the composition root).

    See :class:`~.store.MemoryStore` for the whole surface; this part reads, writes and
    indexes notes and keeps the index current.
    """

    def __init__(
        self,
        backend: KnowledgeBackend,
        config: MemoryConfig | None = None,
        *,
        categories: Iterable[str] | None = None,
        embedder: Embedder | None = None,
        ranking_field: RankingField = DEFAULT_RANKING_FIELD,
        auto_refresh: bool = True,
    ) -> None:
        if not isinstance(backend, KnowledgeBackend):
            raise InvalidInputError(
                f"a knowledge store needs a KnowledgeBackend, got {type(backend).__name__}; "
                "use Memory.open(root).knowledge for the notes under a folder"
            )
        self.config = config if config is not None else MemoryConfig()
        guard = backend.folder
        self.guard = guard
        cats = tuple(categories) if categories is not None else self.config.categories
        if not cats:
            raise InvalidInputError("at least one category is required")
        self.searched: tuple[str, ...] = tuple(validate_id(c, "category") for c in cats)
        """The categories a search covers when it names none: the configured ones."""
        logs = (CONVERSATIONS,) if categories is None and self.config.remember_conversations else ()
        self.categories: tuple[str, ...] = tuple(dict.fromkeys((*self.searched, *logs)))
        """Every category the store indexes: :attr:`searched`, and the conversation logs
        (:mod:`.conversations`) when ``memory.remember_conversations`` is on; a recall covers all."""
        if ranking_field not in ("metadata", "content", "both"):
            raise InvalidInputError(f"ranking_field must be metadata, content or both, got {ranking_field!r}")
        self.embedder = embedder
        self.ranking_field: RankingField = ranking_field
        self.auto_refresh = auto_refresh
        self.shared = guard is not None
        """True when the notes are files in a folder: this store then shares its index and
        rankers with the other stores of that folder in this process (see :mod:`.roots`)."""
        if guard is not None:
            self._parts = shared_parts(self._root_key(guard), lambda: self._build_parts(backend))
        else:
            self._parts = self._build_parts(backend)
        self.backend: KnowledgeBackend = self._parts.backend
        # Where the notes would be on disk; without a folder only a name (paths are then relative).
        self.data_dir = guard.resolve(DATA_DIR) if guard is not None else Path(DATA_DIR)
        self.index_path = self.data_dir / INDEX_NAME
        self._lock = self._parts.lock
        self._manifest_written = False
        self._vectors: tuple[Embedder, VectorCache] | None = None

    def _vector_cache(self, embedder: Embedder) -> VectorCache:
        """The backend's cache of ``embedder``'s vectors, asked for once per embedder (under the
        store's lock). A cache that lacks the passage half of the contract (written for 0.2) is
        refused here: without it hybrid search would quietly fall back to BM25 on every query."""
        if self._vectors is None or self._vectors[0] is not embedder:
            cache = self.backend.vector_cache(embedder)
            missing = [name for name in _PASSAGE_METHODS if not callable(getattr(cache, name, None))]
            if missing:
                raise ConfigError(
                    f"the vector cache {type(cache).__qualname__} of {type(self.backend).__qualname__} lacks "
                    f"{', '.join(missing)}: hybrid search keeps passage vectors by digest since 0.3; implement "
                    "them (see local_ai_memory.backends.VectorCache) or search with search_mode='bm25'"
                )
            self._vectors = (embedder, cache)
        return self._vectors[1]

    @property
    def _owner_budget(self) -> int:
        """``memory.owner_cache_mb`` in bytes."""
        return int(self.config.owner_cache_mb * (1 << 20))

    def _root_key(self, guard: DirectoryGuard) -> RootKey:
        config = self.config
        return (
            str(guard.resolve(DATA_DIR)),
            self.categories,
            self.ranking_field,
            config.fsync,
            config.stemmer_language,
            self._owner_budget,
        )

    def _build_parts(self, backend: KnowledgeBackend) -> RootParts:
        lock = threading.RLock()
        analyzer = Analyzer(self.config.stemmer_language)
        categories, field, encoding = self.categories, self.ranking_field, self.config.token_encoding

        def make_owner(owner: str) -> OwnerParts:
            index = KnowledgeIndex(backend, categories, lock, owner)
            rankers = RankerCache(backend, index, field, analyzer)
            return OwnerParts(index, rankers, NoteIndexer(backend, index, rankers, field, lock, encoding))

        return RootParts(backend, lock, make_owner, self._owner_budget)

    def _owner(self, user_id: str) -> OwnerParts:
        """``user_id``'s index, rankers and indexer, loaded: from the owner's stored index, else
        built from their notes (read through a listing of their prefix only). Nothing of any
        other owner is read."""
        with self._lock:
            parts = self._parts.owner(user_id)
            if parts.index.entries is not None:
                return parts
            with collector_paused():
                loaded = parts.index.load_stored()
            if loaded is not None:
                self._replace(parts, *loaded, stored=True)
                return parts
            self._replace(parts, {})
        self._populate(parts, self.categories, None, None)
        return parts

    def _owner_of_note(self, name: str) -> OwnerParts | None:
        """The loaded parts of the owner of note ``name`` (``None``: not a note name)."""
        owner = owner_of(name)
        return self._owner(owner) if owner is not None else None

    def _owners(self, user_id: str | None) -> list[str]:
        """``[user_id]``, or (``None``) every owner with notes in a configured category, sorted:
        what a whole-folder operation (a build, a stale check, stats) goes through one by one."""
        if user_id is not None:
            return [validate_name(user_id, "user_id")]
        found = set(self._note_counts(None, self.categories))
        with self._lock:
            found.update(parts.index.owner for parts in self._parts.held())
        return sorted(found)

    def _note_counts(self, user_id: str | None, categories: tuple[str, ...]) -> Counter[str]:
        """Notes per owner in ``categories`` (``user_id``: that user's only), from one listing
        of each category."""
        prefix = user_file_prefix(user_id) if user_id is not None else None
        counts: Counter[str] = Counter()
        for category in categories:
            counts.update(owner for owner in map(owner_of, self.backend.list_notes(category, prefix)) if owner)
        return counts

    def _taken(self, owner: str) -> OwnerParts:
        """``owner``'s parts, made or held (not loaded), now the most recent: what a build fills."""
        with self._lock:
            return self._parts.owner(owner)

    @property
    def watched(self) -> bool:
        """True while a watcher keeps the index current: queries then compare no listings."""
        return self._parts.watched

    @watched.setter
    def watched(self, value: bool) -> None:
        self._parts.watched = value

    @property
    def defer_writes(self) -> bool:
        """True while index writes are coalesced (a watcher flushes them); see :meth:`follow_watcher`."""
        return self._parts.defer_writes

    @defer_writes.setter
    def defer_writes(self, value: bool) -> None:
        self._parts.defer_writes = value

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.backend!r}, categories={list(self.categories)!r})"

    @property
    def index_reads(self) -> int:
        """How many times the index blob was read (once per process when all goes well)."""
        with self._lock:
            return sum(parts.index.reads for parts in self._parts.held())

    @property
    def index_writes(self) -> int:
        """How many times the index blob was written."""
        with self._lock:
            return sum(parts.index.writes for parts in self._parts.held())

    # -- names -----------------------------------------------------------------------------------
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

    def _query_categories(self, categories: Iterable[str] | None) -> tuple[str, ...]:
        """What a query covers: ``categories``, or (``None``) the configured ones (:attr:`searched`):
        the conversation logs only when asked for by name."""
        return self._categories(categories if categories is not None else self.searched)

    def category_dir(self, category: str) -> Path:
        """The folder of ``category`` (created if missing)."""
        category = self._category(category)
        if self.guard is None:
            raise ConfigError("this knowledge store has no data folder (its backend keeps the notes)")
        return _fs.ensure_dir(self.guard.resolve(DATA_DIR, category))

    def _check_parts(self, *parts: str) -> None:
        """Refuse names that could leave the notes' place (and, with a folder, links out of the root)."""
        if self.guard is not None:
            self.guard.resolve(DATA_DIR, *parts)
        else:
            for part in parts:
                check_component(part)

    def _note_key(self, path: str | os.PathLike[str]) -> tuple[str | None, str]:
        """``(category, name)`` of a path under ``memory_data/`` (category ``None``: not a note path)."""
        raw = Path(os.fspath(path))
        if raw.is_absolute():
            try:
                rel = raw.relative_to(self.data_dir)
            except ValueError:
                raise PathEscapeError(f"{raw} is outside the knowledge folder") from None
        else:
            rel = raw
        parts = rel.parts
        if not parts:
            raise PathEscapeError("empty path")
        self._check_parts(*parts)  # refuses escapes, hostile names and links out of the root
        category = parts[0] if len(parts) == 2 and parts[0] in self.categories else None
        return category, parts[-1]

    # -- notes -----------------------------------------------------------------------------------
    def list_user_files(self, user_id: str, category: str) -> list[Path]:
        """Paths of ``user_id``'s Markdown files in ``category``, sorted by name."""
        validate_name(user_id, "user_id")
        category = self._category(category)
        names = self.backend.list_notes(category, user_file_prefix(user_id))
        return [self.data_dir / category / name for name in sorted(names)]

    def read_file(self, path: str | os.PathLike[str]) -> str:
        """Text of a note (``knowledge/alice_x.md``, or its absolute path under ``memory_data/``)."""
        category, name = self._note_key(path)
        data = self.backend.read_note(category, name) if category is not None else None
        if data is None:
            raise RecordNotFoundError(f"no memory file {os.fspath(path)}")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise UnsupportedFormatError(f"{os.fspath(path)} is not UTF-8 text") from None

    def read_head(self, path: str | os.PathLike[str], max_bytes: int) -> tuple[str, bool]:
        """The text of a note's first ``max_bytes`` bytes (a character cut in two is left out)
        and whether that is the whole note: what retrieval reads of a note it may cut anyway."""
        category, name = self._note_key(path)
        if category is None:
            raise RecordNotFoundError(f"no memory file {os.fspath(path)}")
        return self._head(category, name, max_bytes, os.fspath(path))

    def read_note_head(self, category: str, filename: str, max_bytes: int) -> tuple[str, bool]:
        """:meth:`read_head` of the note ``filename`` in ``category`` (what Stage 3 reads: the
        names come from the index, so only the cheap name checks are made, no path resolution).

        A small note read whole is kept with its index entry (:class:`.texts.NoteTexts`)
        and answered from memory while the index holds that same entry."""
        key = (self._category(category), check_component(filename))
        owner = owner_of(filename)
        held = self._parts.owners.get(owner) if owner is not None else None
        entries = held.index.entries if held is not None else None
        entry = entries.get(key) if entries is not None else None
        if entry is not None and entry.size is not None and entry.size <= max_bytes:
            kept = self._parts.note_texts.get(key, entry)
            if kept is not None:
                return kept, True
        text, complete = self._head(*key, max_bytes, f"{category}/{filename}")
        if complete and entry is not None:
            self._parts.note_texts.put(key, entry, text)
        return text, complete

    def _head(self, category: str, name: str, max_bytes: int, shown: str) -> tuple[str, bool]:
        head = self.backend.read_note_head(category, name, max(0, max_bytes))
        if head is None:
            raise RecordNotFoundError(f"no memory file {shown}")
        try:
            return decode_head(*head), head[1]
        except UnicodeDecodeError:
            raise UnsupportedFormatError(f"{shown} is not UTF-8 text") from None

    def _checked_note(self, path: str | os.PathLike[str], content: str) -> tuple[str, str, bytes]:
        """``(category, name, bytes)`` of a note to write at ``path``, or :class:`InvalidInputError`
        (what :meth:`write_file` and :meth:`write_files` check, before anything is written)."""
        if not isinstance(content, str):
            raise InvalidInputError(f"content must be str, got {type(content).__name__}")
        category, name = self._note_key(path)
        if category is None:
            raise InvalidInputError(
                f"{os.fspath(path)!r}: write_file writes knowledge files, as '{{category}}/{{user prefix}}{{name}}.md' "
                f"with a category among {list(self.categories)}"
            )
        if not is_note_name(name):
            raise InvalidInputError(
                f"knowledge file name {name!r} must be '{{user prefix}}_{{name}}.md' (see user_file_prefix)"
            )
        check_text(content, "note text")
        return category, name, content.encode("utf-8")

    def write_file(self, path: str | os.PathLike[str], content: str) -> Path:
        """Write ``content`` atomically; a knowledge file is indexed right away. Returns the path."""
        category, name, data = self._checked_note(path, content)
        parts = self._owner_of_note(name)
        assert parts is not None  # a note name has an owner
        slot = self._line_slot(parts)
        if slot is None:
            info = self.backend.write_note(category, name, data)
            self._indexed(category, name, content, info)
        else:
            with self._lock:
                line = NoteLine(parts.indexer, category, name, content)
            info = self.backend.write_note_with(category, name, data, line.append())
            self._indexed(category, name, content, info, (line, slot))
        return self.data_dir / category / name

    def write_files(self, notes: Iterable[tuple[str | os.PathLike[str], str]]) -> list[Path]:
        """Write many notes (``(path, content)`` pairs, paths as :meth:`write_file` takes them)
        in one go and index them; return their paths, in the order given.

        Every note is checked first (one bad path or text refuses the whole batch, and nothing
        is written); then each category's notes go to the backend at once
        (:meth:`~KnowledgeBackend.write_notes`: one transaction on a database, an atomic write
        per note on files), and each owner's index is written once for all of them (journal
        lines in one append, or one snapshot), not once per note."""
        checked = [(*self._checked_note(path, content), content) for path, content in notes]
        keys = [(category, name) for category, name, _, _ in checked]
        twice = sorted(f"{c}/{n}" for (c, n), count in Counter(keys).items() if count > 1)
        if twice:
            raise InvalidInputError(f"a batch names a note twice: {', '.join(twice)}")
        owners: dict[str, OwnerParts] = {}
        for _, name, _, _ in checked:  # loaded (or built) before the write, as write_file does
            owner = owner_of(name)
            if owner is not None and owner not in owners:
                parts = self._owner_of_note(name)
                assert parts is not None
                owners[owner] = parts
        infos: dict[tuple[str, str], NoteInfo] = {}
        for category in dict.fromkeys(category for category, _ in keys):
            batch = {name: data for c, name, data, _ in checked if c == category}
            written = self.backend.write_notes(category, batch)
            infos.update(((category, name), info) for name, info in written.items())
        with self._lock:
            for category, name, _, content in checked:
                parts = self._owner_of_note(name)
                assert parts is not None
                parts.indexer.refresh_one(category, name, content=content, info=infos[(category, name)])
        for parts in owners.values():
            self._persist(parts)
        return [self.data_dir / category / name for category, name in keys]

    def _line_slot(self, parts: OwnerParts) -> tuple[str, int] | None:
        """Where a write may store its note's journal line with the note (in the same
        transaction on a database): see :meth:`.index.KnowledgeIndex.line_slot`. ``None``
        while writes are coalesced, the index is not loaded yet or a snapshot is due: the write
        then indexes after its note (a first write loads the index, or builds it with its note)."""
        if self.defer_writes:
            return None
        return parts.index.line_slot()

    def _indexed(
        self,
        category: str,
        name: str,
        content: str,
        info: NoteInfo | None = None,
        stored: tuple[NoteLine, tuple[str, int]] | None = None,
    ) -> None:
        """Index the note just written (its journal line, or a snapshot when one is due).

        ``info`` is what the write itself returned: the entry then names the version of these
        bytes (no second look, which cost a round trip on a database and could meet another
        writer's version; a later change shows up as a newer version in the feed or listing).
        ``stored``: the write stored the note's journal line with it (:class:`.indexer.NoteLine`
        and the :meth:`_line_slot` it took): the entry goes in memory and the line is not
        appended again, unless a snapshot came between."""
        with self._lock:
            parts = self._owner_of_note(name)
            assert parts is not None
            scanned = stored[0].scanned if stored is not None else None
            if stored is None or scanned is None:
                parts.indexer.refresh_one(category, name, content=content, info=info)
            else:
                parts.indexer.put(scanned.entry, scanned.content, scanned.tokens)
                parts.index.stored_with_note(stored[0].key, scanned.entry, stored[1])
        self._persist(parts)

    def update_file(self, path: str | os.PathLike[str], change: Callable[[str | None], str]) -> str:
        """Read-modify-write a knowledge note atomically across processes (the backend's
        :meth:`~KnowledgeBackend.update_note`): ``change(current text or None)`` gives the new
        text, raising (a :class:`~local_ai_memory.ConflictError`, say) writes nothing. Indexed
        at once like :meth:`write_file`; returns the text written."""

        def on_bytes(current: bytes | None) -> bytes:
            try:
                text = change(None if current is None else current.decode("utf-8"))
            except UnicodeDecodeError:
                raise UnsupportedFormatError(f"{os.fspath(path)} is not UTF-8 text") from None
            if not isinstance(text, str):
                raise InvalidInputError(f"content must be str, got {type(text).__name__}")
            check_text(text, "note text")
            return text.encode("utf-8")

        category, name = self._note_key(path)
        if category is None or not is_note_name(name):
            raise InvalidInputError(
                f"{os.fspath(path)!r} is not a note '{{category}}/{{user prefix}}{{name}}.md' "
                f"of {list(self.categories)}"
            )
        parts = self._owner_of_note(name)
        assert parts is not None
        slot = self._line_slot(parts)
        if slot is None:
            data, info = self.backend.update_note(category, name, on_bytes)
            content = data.decode("utf-8")
            self._indexed(category, name, content, info)
            return content
        line = NoteLine(parts.indexer, category, name)
        data, info = self.backend.update_note_with(category, name, on_bytes, line.append())
        content = data.decode("utf-8")
        self._indexed(category, name, content, info, (line, slot))
        return content

    def delete_file(self, path: str | os.PathLike[str]) -> bool:
        """Delete a note with its index entry (its ranker forgets it too); return whether it existed."""
        category, name = self._note_key(path)
        if category is None:
            raise InvalidInputError(f"{os.fspath(path)!r} is not a note of the categories {list(self.categories)}")
        return self._deleted(category, name, None)

    def delete_file_if(self, path: str | os.PathLike[str], check: Callable[[bytes | None], None]) -> bool:
        """:meth:`delete_file` unless ``check(current bytes or None)`` raises, atomically across
        processes (the backend's :meth:`~KnowledgeBackend.delete_note_if`)."""
        category, name = self._note_key(path)
        if category is None:
            raise InvalidInputError(f"{os.fspath(path)!r} is not a note of the categories {list(self.categories)}")
        return self._deleted(category, name, check)

    def _deleted(self, category: str, name: str, check: Callable[[bytes | None], None] | None) -> bool:
        """Delete a note (unless ``check`` refuses) and drop its entry. Its journal line goes
        with the delete (:meth:`~KnowledgeBackend.delete_note_with`: one transaction on a
        database) when :meth:`_line_slot` allows; otherwise the index is written after it."""
        parts = self._owner_of_note(name)
        slot = self._line_slot(parts) if parts is not None else None
        if parts is None or slot is None:
            if check is None:
                existed = self.backend.delete_note(category, name)
            else:
                existed = self.backend.delete_note_if(category, name, check)
            self._unindexed(category, name)
            return existed
        key = (category, name)
        existed = self.backend.delete_note_with(
            category, name, parts.index.journal_name, lambda: journal_line(key, None, None), check
        )
        self._unindexed(category, name, slot if existed else None)
        return existed

    def _unindexed(self, category: str, name: str, slot: tuple[str, int] | None = None) -> None:
        """Drop the entry of the note just deleted (its ranker forgets it too). ``slot``: the
        delete stored the note's journal line (the :meth:`_line_slot` it took), so the next
        flush does not append it again, unless a snapshot came between."""
        with self._lock:
            parts = self._owner_of_note(name)
            if parts is None:
                return
            dropped = parts.indexer.drop(category, name)
            if slot is not None:
                parts.index.stored_with_note((category, name), None, slot)
        if dropped:
            self._persist(parts)

    def forget_user(self, user_id: str) -> ForgottenNotes:
        """Delete every note of ``user_id`` in every category, with its index entries, rankers,
        ranker snapshots and (when an embedder is configured) cached vectors.

        The store's lock is held throughout, so no search of this process sees the user half
        deleted; :class:`~local_ai_memory.Memory` adds an erasure record for other processes.
        """
        prefix = user_file_prefix(user_id)
        notes: list[str] = []
        size = 0
        snapshots = 0
        with self._lock:
            parts = self._owner(user_id)
            entries = parts.index.current()
            embedded: list[tuple[str, str]] = []  # what hybrid search embedded for these notes
            for category in sorted({*self.backend.list_categories(), *self.categories}):
                for name, info in sorted(self.backend.list_notes(category, prefix).items()):
                    entry = entries.get((category, name))
                    if entry is not None:
                        embedded.append((f"{category}/{name}", embedding_text(entry)))
                    if self.backend.delete_note(category, name):
                        notes.append(f"{category}/{name}")
                        size += info.size
                    parts.indexer.drop(category, name)
                    self._parts.note_texts.discard((category, name))
                snapshots += parts.rankers.forget(user_id, category)
            for kept in [key for key in self._parts.hybrid_corpora if key[0] == user_id]:
                del self._parts.hybrid_corpora[kept]
            vectors = 0
            if self.embedder is not None:
                vectors = self._vector_cache(self.embedder).discard(embedded)
        # The owner's stored index goes whole, at once. Outside the store's lock, as every index
        # write is: the index takes its write lock and then this one, and a watcher's flush
        # holding the write lock waited for us while we waited for it (a deadlock seen in
        # test_auto_watch).
        parts.index.erase()
        self.backend.forget_feed(prefix)
        return ForgottenNotes(notes, size, snapshots, vectors)

    # -- index -----------------------------------------------------------------------------------
    def index_path_of(self, user_id: str) -> Path:
        """Where ``user_id``'s index snapshot is (``memory_data/.index/alice_index.json``; a
        name only, without a folder); its journal is beside it with ``.journal``."""
        return self.data_dir / index_names(validate_name(user_id, "user_id"))[0]

    def index_exists(self) -> bool:
        """Whether an index is stored: some owner's, or the one of every owner that 0.2 and 0.3 wrote."""
        if self.backend.blob_size(MANIFEST_NAME) is not None or self.backend.blob_size(INDEX_NAME) is not None:
            return True
        with self._lock:
            return any(parts.index.journal is not None for parts in self._parts.held())

    def _replace(
        self,
        parts: OwnerParts,
        entries: Mapping[Any, IndexEntry],
        skipped: dict[Any, SkippedNote] | None = None,
        *,
        stored: bool = False,
    ) -> None:
        parts.index.replace(entries, skipped, stored=stored)
        parts.rankers.clear()
        parts.indexer.cursor = None  # entries from elsewhere: the next look compares the owner's listing once

    def ensure_index(self, llm: LLM | None = None, progress: Progress | None = None) -> None:
        """Build the index from the notes when none is stored (owners' indexes are otherwise
        loaded one by one, when each is first asked for)."""
        if not self.index_exists():
            self.populate_index_from_files(None, None, llm=llm, progress=progress)

    def migrate_index(self) -> int:
        """Move a store that 0.2 or 0.3 wrote (one index of every owner) to an index per owner
        now, instead of owner by owner at each one's first write: each owner's rows are stored as
        their own index, then the shared one is deleted. Returns how many owners were moved."""
        if self.backend.blob_size(INDEX_NAME) is None:
            return 0
        owners = self._owners(None)
        for owner in owners:
            parts = self._owner(owner)
            parts.index.compact()
            self._snapshot_rankers(parts)
            self._parts.release_evicted()
        for name in (INDEX_NAME, JOURNAL_NAME):
            self.backend.delete_blob(name)
        self._write_manifest()
        return len(owners)

    def index_loaded(self) -> bool:
        """Whether some owner's index is in memory already."""
        with self._lock:
            return any(parts.index.loaded for parts in self._parts.held())

    def _entries(self, user_id: str | None) -> list[IndexEntry]:
        """The entries of ``user_id`` (``None``: every owner's, loading each in turn), sorted."""
        found: list[IndexEntry] = []
        for owner in self._owners(user_id):
            parts = self._owner(owner)
            with self._lock:
                found.extend(parts.index.current().values())
        self._parts.release_evicted()
        return sorted(found, key=lambda e: (e.category, e.filename))

    def read_index(self, user_id: str | None = None) -> IndexFile:
        """The index entries of ``user_id`` (``None``: every owner's), as one :class:`IndexFile`."""
        files = self._entries(user_id)
        with self._lock:
            last = max((parts.index.last_write for parts in self._parts.held()), default=0.0)
        return IndexFile.model_construct(index_version=INDEX_VERSION, last_updated=last, files=files)

    def write_index(self, index: IndexFile | Sequence[IndexEntry]) -> None:
        """Replace the index entries of every owner named in ``index`` by the ones given
        (in memory and, atomically per owner, in storage)."""
        files = index.files if isinstance(index, IndexFile) else list(index)
        by_owner: dict[str, dict[tuple[str, str], IndexEntry]] = {}
        for entry in files:
            owner = owner_of(entry.filename)
            if owner is not None:
                by_owner.setdefault(owner, {})[(entry.category, entry.filename)] = entry
        for owner, entries in sorted(by_owner.items()):
            with self._lock:
                parts = self._parts.owner(owner)
                self._replace(parts, entries)
                parts.index.mark_replaced()
            self._flush(parts, compact=True)
        self._parts.release_evicted()

    def find_entry(self, filename: str, category: str | None = None) -> IndexEntry | None:
        """The index entry of ``filename`` (in ``category``, or the first configured category holding it)."""
        cats = (self._category(category),) if category is not None else self.categories
        parts = self._owner_of_note(filename)
        if parts is None:
            return None
        with self._lock:
            entries = parts.index.current()
            for cat in cats:
                found = entries.get((cat, filename))
                if found is not None:
                    return found
        return None

    def skipped_notes(self, user_id: str | None = None, categories: Iterable[str] | None = None) -> list[SkippedNote]:
        """Notes that could not be indexed (not UTF-8, binary) and why, sorted; each is read
        again only when its size or version changes (the list is kept in the index)."""
        cats = self._categories(categories)
        found: list[SkippedNote] = []
        for owner in self._owners(user_id):
            parts = self._owner(owner)
            with self._lock:
                found.extend(n for n in parts.index.skipped.values() if n.category in cats)
        return sorted(found, key=lambda n: (n.category, n.filename))

    def flush(self) -> bool:
        """Store the index changes of every owner held now (journal lines, or a snapshot when a
        journal is full); return whether anything was written. A snapshot write also snapshots
        the rankers of the notes changed since the last one, so a new process neither replays a
        long journal nor re-reads the notes this one already ranked."""
        with self._lock:
            held = self._parts.held()
        wrote = False
        for parts in held:
            wrote = self._flush(parts, compact=True) or wrote
        self._parts.release_evicted()
        return wrote

    def compact_owner(self, user_id: str) -> None:
        """Write ``user_id``'s index as a fresh snapshot now, and the rankers it changed: what an
        erasure of one of their notes does, so no journal line keeps the erased note's name."""
        parts = self._owner(user_id)
        parts.index.compact()
        self._snapshot_rankers(parts)

    def _flush(self, parts: OwnerParts, *, compact: bool) -> bool:
        index = parts.index
        snapshots = index.writes
        if compact and index.compaction_due():
            with self._lock:
                parts.indexer.settle_racy(sorted(index.racy))
        wrote = index.flush(compact=compact)
        if index.writes != snapshots:
            self._snapshot_rankers(parts)
            if not self._manifest_written:
                self._write_manifest()
        return wrote

    def _write_manifest(self) -> None:
        """Say once that this store keeps an index per owner (what :meth:`index_exists` reads)."""
        if self.backend.blob_size(MANIFEST_NAME) is None:
            self.backend.write_blob(MANIFEST_NAME, MANIFEST)
        self._manifest_written = True

    def settle(self) -> int:
        """Settle the entries this process indexed within a timestamp tick of their note's write
        (they carry a content hash that every later check would re-read and hash): wait for the
        tick to pass if that takes at most :data:`SETTLE_WAIT_S` (a millisecond or so on Linux
        files), re-read each once, and journal them without the hash. What
        :meth:`~local_ai_memory.Memory.close` does, so the next process's first query re-reads
        none of them. It also snapshots the rankers this process holds that changed since their
        last snapshot (the notes written since the last index snapshot), so that query loads
        them instead of reading those notes again. Best effort: a failure leaves the hashes,
        which stay correct, and the older ranker snapshots, which are only a cache; returns how
        many notes had changed since and were re-indexed."""
        with self._lock:
            held = [parts for parts in self._parts.held() if parts.index.loaded]
        changed = 0
        try:
            for parts in held:
                index = parts.index
                if index.racy:
                    with self._lock:
                        wait = parts.indexer.racy_pending()
                    if 0 < wait <= SETTLE_WAIT_S * 1e9:
                        time.sleep(wait / 1e9)
                    with self._lock:
                        changed += parts.indexer.settle_racy(sorted(index.racy))
                    self._flush(parts, compact=False)
            self.save_rankers()
            self._parts.release_evicted()
        except StorageError as exc:
            log_event(Event.INDEX_WRITE_DEFERRED, level=logging.WARNING, path=str(self.index_path), reason=str(exc))
        return changed

    def _snapshot_rankers(self, parts: OwnerParts) -> None:
        """Bring the owner's rankers of the notes changed since the last index snapshot up to
        date (a ranker this process never loaded is loaded from its snapshot plus the notes it
        lacks: about one journal's worth) and write their snapshots. Only a cache: a failure is logged."""
        with self._lock:
            touched = parts.index.take_touched()
            if not touched:
                return
            try:
                for owner, category in sorted(touched):
                    if category in self.categories:
                        parts.rankers.get(owner, category, parts.indexer.stored_tokens)
                parts.rankers.save_changed()
            except StorageError as exc:
                log_event(Event.INDEX_WRITE_DEFERRED, level=logging.WARNING, path="ranker cache", reason=str(exc))

    def _persist(self, parts: OwnerParts) -> None:
        if not self.defer_writes:
            self._flush(parts, compact=True)
        self._parts.release_evicted()

    def _persist_or_defer(self, parts: OwnerParts, during_query: bool) -> None:
        """Write the owner's index; a query that cannot (disk full) still answers and a later
        write retries. A query appends journal lines only: the snapshot waits for the next write."""
        try:
            if not self.defer_writes:
                self._flush(parts, compact=not during_query)
        except StorageError as exc:
            if not during_query:
                raise
            log_event(Event.INDEX_WRITE_DEFERRED, level=logging.WARNING, path=str(self.index_path), reason=str(exc))

    @property
    def dirty(self) -> bool:
        """Whether some owner's index in memory has changes not yet written to storage."""
        with self._lock:
            return any(parts.index.dirty for parts in (*self._parts.held(), *self._parts.evicted.values()))

    def update_index_entry(
        self,
        filename: str,
        title: str,
        description: str,
        keywords: Sequence[str],
        category: str,
        last_modified: float | None = None,
    ) -> IndexEntry:
        """Set one entry's metadata (no full rebuild). ``last_modified`` defaults to the note's write time."""
        category = self._category(category)
        if not is_note_name(filename):
            raise InvalidInputError(f"{filename!r} is not a knowledge file name ('{{user prefix}}_{{name}}.md')")
        self._check_parts(category, filename)
        info = self.backend.note_info(category, filename)
        exact = info is not None and last_modified is None
        entry = IndexEntry(
            filename=filename,
            title=title,
            description=description,
            keywords=list(keywords),
            category=category,
            last_modified=last_modified if last_modified is not None else (info.modified if info else time.time()),
            size=info.size if exact and info is not None else None,
            mtime_ns=info.version if exact and info is not None else None,
        )
        parts = self._owner_of_note(filename)
        assert parts is not None
        with self._lock:
            parts.indexer.put(entry, None)
        self._persist(parts)
        return entry

    def remove_index_entry(self, filename: str, category: str) -> bool:
        """Drop one entry from the index; return whether it was there."""
        category = self._category(category)
        parts = self._owner_of_note(filename)
        if parts is None:
            return False
        with self._lock:
            removed = parts.indexer.drop(category, filename)
        if removed:
            self._persist(parts)
        return removed

    # -- population and refresh ------------------------------------------------------------------
    @staticmethod
    def _refined(item: Scanned, answer: str) -> None:
        words = parse_keywords(answer)
        if len(words) >= 3:
            item.entry = item.entry.model_copy(update={"keywords": words})

    @staticmethod
    def _keyword_prompts(scanned: list[Scanned]) -> Iterable[tuple[Scanned, str]]:
        for item in scanned:
            yield item, keyword_prompt(item.entry.title, item.entry.description, item.entry.keywords, item.excerpt)

    def _population_plan(
        self, user_id: str | None, categories: Iterable[str] | None, progress: Progress | None
    ) -> tuple[tuple[str, ...], list[tuple[str, Progress | None]]]:
        """The categories and the owners to build, each with a progress callback that counts
        every owner's notes as one run (``progress(done, total)`` over all of them). The owners'
        parts are taken one at a time as they are built, so a build of every user keeps only
        ``owner_cache_mb`` of them in memory."""
        cats = self._categories(categories)
        owners = self._owners(user_id)
        if progress is None:
            return cats, [(owner, None) for owner in owners]
        counts = self._note_counts(user_id, cats)
        total, offset = sum(counts.values()), 0
        plan: list[tuple[str, Progress | None]] = []
        for owner in owners:
            plan.append((owner, functools.partial(_progress_from, progress, offset, total)))
            offset += counts[owner]
        if not owners:
            progress(0, 0)
        return cats, plan

    def _populate(self, parts: OwnerParts, cats: tuple[str, ...], progress: Progress | None, llm: LLM | None) -> int:
        """Build one owner's index from their notes (``llm``: refined keywords, one call a note)."""
        scanned = parts.indexer.collect(cats, precount=llm is None, progress=progress)
        if llm is not None:
            for item, prompt in self._keyword_prompts(scanned):
                try:
                    self._refined(item, llm.complete(prompt))
                except Exception as exc:  # the heuristic keywords stay; population must finish
                    log_event(Event.FILE_SKIPPED, path=item.filename, reason=f"keyword LLM failed: {exc!r}")
        return self._apply_population(parts, cats, scanned)

    def _apply_population(self, parts: OwnerParts, cats: tuple[str, ...], scanned: list[Scanned]) -> int:
        parts.indexer.apply_population(cats, scanned)
        self._flush(parts, compact=True)
        log_event(Event.INDEX_REBUILT, path=str(self.index_path), files=len(scanned), user_id=parts.index.owner)
        return len(scanned)

    def populate_index_from_files(
        self,
        user_id: str | None = None,
        categories: Iterable[str] | None = None,
        llm: LLM | None = None,
        progress: Progress | None = None,
    ) -> int:
        """Index every file of ``user_id`` (``None``: all users) in ``categories`` from scratch,
        owner by owner.

        With ``llm`` each file gets 5-10 refined keywords (one call per file; a failed call keeps
        the heuristic keywords). ``progress(done, total)`` is called while files are read.
        Returns the number of files indexed.
        """
        cats, plan = self._population_plan(user_id, categories, progress)
        count = 0
        for owner, owner_progress in plan:
            count += self._populate(self._taken(owner), cats, owner_progress, llm)
            self._parts.release_evicted()
        return count

    async def apopulate_index_from_files(
        self,
        user_id: str | None = None,
        categories: Iterable[str] | None = None,
        llm: LLM | None = None,
        progress: Progress | None = None,
    ) -> int:
        """Async twin of :meth:`populate_index_from_files` (uses ``llm.acomplete``)."""
        cats, plan = await asyncio.to_thread(self._population_plan, user_id, categories, progress)
        count = 0
        for owner, owner_progress in plan:
            parts = await asyncio.to_thread(self._taken, owner)
            scanned = await asyncio.to_thread(
                parts.indexer.collect, cats, precount=llm is None, progress=owner_progress
            )
            if llm is not None:
                for item, prompt in self._keyword_prompts(scanned):
                    try:
                        self._refined(item, await llm.acomplete(prompt))
                    except Exception as exc:
                        log_event(Event.FILE_SKIPPED, path=item.filename, reason=f"keyword LLM failed: {exc!r}")
            count += await asyncio.to_thread(self._apply_population, parts, cats, scanned)
            await asyncio.to_thread(self._parts.release_evicted)
        return count

    def get_stale_entries(
        self, user_id: str | None = None, categories: Iterable[str] | None = None
    ) -> list[StaleEntry]:
        """Files created, modified or deleted since they were indexed (``stat()`` only, no reads)."""
        cats = self._categories(categories)
        stale: list[StaleEntry] = []
        for owner in self._owners(user_id):
            stale.extend(self._owner(owner).indexer.stale(cats))
        return sorted(stale, key=lambda item: (item.category, item.filename))

    def refresh_stale_entries(self, user_id: str | None = None, categories: Iterable[str] | None = None) -> int:
        """Re-index what :meth:`get_stale_entries` finds, with heuristic keywords (never an LLM).

        Returns the number of entries added, updated or removed. The index is written once,
        also when an earlier write of it failed and nothing is stale now.
        """
        cats = self._categories(categories)
        changed = sum(
            self._refresh_stale(self._owner(owner), cats, during_query=False) for owner in self._owners(user_id)
        )
        self._parts.release_evicted()
        return changed

    def _refresh_stale(self, parts: OwnerParts, cats: tuple[str, ...], *, during_query: bool) -> int:
        changed = parts.indexer.refresh_stale(cats)
        self._after_refresh(parts, changed, during_query, user_id=parts.index.owner)
        return changed

    def _after_refresh(self, parts: OwnerParts, changed: int, during_query: bool, **fields: Any) -> None:
        if changed or parts.index.dirty:
            self._persist_or_defer(parts, during_query)
        if changed:
            log_event(Event.INDEX_REFRESHED, files=changed, **fields)

    def apply_changes(self) -> int:
        """Apply the change feed of every owner held now (what a query does first for its
        owner); return how many entries changed. Owners not held catch up when next asked for.

        With a backend that keeps no feed (plain files, no watcher) this does nothing and returns 0.
        """
        with self._lock:
            held = [parts for parts in self._parts.held() if parts.index.loaded]
        total = 0
        for parts in held:
            changed = parts.indexer.follow_feed(self.categories) or 0
            self._after_refresh(parts, changed, True, source="feed")
            total += changed
        return total

    def _note_keys(self, paths: Iterable[str | os.PathLike[str]]) -> set[tuple[str, str]]:
        """``(category, name)`` of the paths that are notes of a configured category."""
        targets: set[tuple[str, str]] = set()
        for raw in paths:
            try:
                rel = Path(os.fspath(raw)).relative_to(self.data_dir)
            except ValueError:
                continue
            if len(rel.parts) == 2 and rel.parts[0] in self.categories and is_note_name(rel.parts[1]):
                targets.add((rel.parts[0], rel.parts[1]))
        return targets

    def hold_owners_of(self, paths: Iterable[str | os.PathLike[str]]) -> int:
        """Load the owners of the notes named by ``paths`` that this process does not hold (an
        owner loaded compares their listing once, which takes the change in); return how many."""
        owners = {owner for _, name in self._note_keys(paths) if (owner := owner_of(name)) is not None}
        with self._lock:
            missing = sorted(o for o in owners if o not in self._parts.owners or not self._parts.owners[o].index.loaded)
        for owner in missing:
            self._owner(owner)
        self._parts.release_evicted()
        return len(missing)

    def refresh_paths(self, paths: Iterable[str | os.PathLike[str]]) -> int:
        """Re-index the given files (created, changed or deleted), ignoring non-knowledge paths
        and owners this process does not hold (they compare their listing when next loaded).

        It reads only the files named. Returns the number of changes.
        """
        targets = self._note_keys(paths)
        changed = 0
        touched: list[OwnerParts] = []
        with self._lock:
            for category, name in sorted(targets):
                owner = owner_of(name)
                parts = self._parts.owners.get(owner) if owner is not None else None
                if parts is None or not parts.index.loaded:
                    continue
                changed += parts.indexer.refresh_if_changed(category, name)
                touched.append(parts)
        for parts in dict.fromkeys(touched):
            if parts.index.dirty:
                self._persist(parts)
        if changed:
            log_event(Event.INDEX_REFRESHED, files=changed, source="watcher")
        return changed

    def follow_watcher(self, active: bool, *, coalesce: bool = True) -> None:
        """A watcher starts (``True``) or stops keeping the index current.

        While it runs, queries compare no listings and, with ``coalesce``, index writes are
        coalesced (the watcher calls :meth:`flush`); stopping writes nothing by itself.
        """
        self._parts.watched = active
        self._parts.defer_writes = active and coalesce

    def _start_watching(self, epoch: int | None = None) -> None:
        """Start the folder's automatic watcher (see :func:`.service.watch_automatically`)."""
        watch_automatically(
            self._parts,
            lambda: type(self)(
                self._parts.backend,
                self.config.replace(auto_watch=False),
                categories=self.categories,
                ranking_field=self.ranking_field,
            ),
            epoch,
        )

    def _start_watching_soon(self) -> None:
        """Start the folder's automatic watcher :data:`WATCH_START_DELAY_S` from now, from a
        thread of its own: after the query that asks for it has answered.

        Registering the native watcher walks the folder (every note: about 0.1 s at 10k notes
        here) inside ``watchfiles``, which holds the GIL meanwhile: started within the query,
        the query's last steps waited for that walk. Until the watcher runs, queries compare
        listings, as they did before it started; a folder closed meanwhile starts none (see
        :func:`.service.watch_automatically`)."""
        parts = self._parts
        parts.auto_pending = True
        epoch = parts.epoch

        def start() -> None:
            try:
                self._start_watching(epoch)
            except Exception as exc:  # queries keep comparing listings
                parts.auto_failed = True
                log_event(
                    Event.INDEX_WATCH_ERROR, level=logging.WARNING, error=repr(exc), fallback="listing comparison"
                )
            finally:
                parts.auto_pending = False

        timer = threading.Timer(WATCH_START_DELAY_S, start)
        timer.name = "local-ai-memory-auto-watch-start"
        timer.daemon = True
        timer.start()

    def stop_watching(self) -> None:
        """Stop the automatic watcher of this store's folder, if one runs (queries then compare
        listings again until the next query starts it anew, unless ``auto_watch`` is off)."""
        parts = self._parts
        with parts.start_lock:  # a start scheduled before this (a query's timer) is dropped
            parts.epoch += 1
            watcher, parts.auto = parts.auto, None
        if watcher is not None:
            watcher.stop()

    def save_rankers(self) -> int:
        """Write the tokenized form of every changed ranker to storage (``.bm25/``) so the next
        process starts without re-reading every file; return how many were written."""
        with self._lock:
            return sum(parts.rankers.save_changed() for parts in self._parts.held())

    def refresh_held(self) -> int:
        """Compare the listing of every owner held now with their index and re-index what
        changed (a watcher's catch-up: owners not held compare theirs when next loaded)."""
        with self._lock:
            held = [parts for parts in self._parts.held() if parts.index.loaded]
        return sum(self._refresh_stale(parts, self.categories, during_query=False) for parts in held)

    def _prepare(self, user_id: str, categories: Iterable[str] | None) -> tuple[tuple[str, ...], OwnerParts]:
        """Bring ``user_id``'s index up to date for a query; return the categories asked and the
        owner's parts (loaded, the most recently used)."""
        validate_name(user_id, "user_id")
        cats = self._query_categories(categories)
        root = self._parts
        with self._lock:
            parts = root.owner(user_id)
            if not parts.index.loaded and self.backend.folder is not None and not root.watched:
                # A fresh owner over files: the user's ranker snapshots are read while the index
                # loads (GIL-free reads and CRC checks beside its parsing), not while the
                # listing's stat calls run, which hand the GIL back and forth once per note.
                for category in cats:
                    parts.rankers.read_ahead(user_id, category)
        parts = self._owner(user_id)
        idle = not root.watched and root.auto is None and not root.auto_failed and not root.auto_pending
        start = idle and self.auto_refresh and self.shared and self.config.auto_watch
        if start and sum(len(parts.index.names_of(user_id, c)) for c in cats) >= CATCH_UP_WAIT_NOTES:
            start = False
            self._start_watching()
            watcher = root.auto
            if watcher is not None:
                # The new watcher compares the listings of the owners held once as it starts.
                # For a user with this many notes, comparing theirs here as well would do that
                # work twice, at the same time. Waiting for it costs its registration (about
                # 0.1 s) instead; then this query is a watched one.
                watcher.wait_caught_up(CATCH_UP_WAIT_S)
        if self.auto_refresh:
            changed = parts.indexer.follow_feed(self.categories)
            if changed:
                self._after_refresh(parts, changed, True, source="feed")
            elif changed is None and not self.watched:
                # The user's ranker snapshots are read while the listing is compared (a fresh
                # process: see RankerCache.read_ahead); the query ranks with them next.
                with self._lock:
                    for category in cats:
                        parts.rankers.read_ahead(user_id, category)
                self._refresh_stale(parts, cats, during_query=True)
        if start:
            # Started after this query compared its user's listing, not before: the watcher's
            # own first comparison then does not run at the same time as this one. The user's
            # rankers (what the query reads next) are loaded first for the same reason.
            with self._lock:
                for category in cats:
                    parts.rankers.get(user_id, category, parts.indexer.stored_tokens)
            self._start_watching_soon()
        # After the refresh: an index that shows any of a forgetting's deletions was refreshed
        # after its marker was written, so the marker is seen here (by the feed or this read).
        # The snapshots of the rankers the query needs and has not got come in the same read
        # (a fresh owner's on a database: one round trip for both).
        marker = erasure_marker(user_id)
        with self._lock:
            wanted = parts.rankers.wanted(user_id, cats)
        check = not self.backend.blob_known_absent(marker)
        names = [marker, *wanted] if check else list(wanted)
        found = self.backend.read_blobs(names) if names else {}
        with self._lock:
            for name, category in wanted.items():
                parts.rankers.fetched(user_id, category, found.get(name))
        if check and marker in found:
            self.forget_user(user_id)  # being forgotten elsewhere: finish our part, never answer half way
        root.release_evicted()
        return cats, parts

    # -- async twins -----------------------------------------------------------------------------
    aread_file = thread_twin(read_file)
    aread_head = thread_twin(read_head)
    awrite_file = thread_twin(write_file)
    awrite_files = thread_twin(write_files)
    adelete_file = thread_twin(delete_file)
    alist_user_files = thread_twin(list_user_files)
    aindex_exists = thread_twin(index_exists)
    aread_index = thread_twin(read_index)
    awrite_index = thread_twin(write_index)
    afind_entry = thread_twin(find_entry)
    askipped_notes = thread_twin(skipped_notes)
    aflush = thread_twin(flush)
    aupdate_index_entry = thread_twin(update_index_entry)
    aremove_index_entry = thread_twin(remove_index_entry)
    aget_stale_entries = thread_twin(get_stale_entries)
    arefresh_stale_entries = thread_twin(refresh_stale_entries)
    aapply_changes = thread_twin(apply_changes)

    async def aensure_index(self, llm: LLM | None = None, progress: Progress | None = None) -> None:
        """Async twin of :meth:`ensure_index` (a build here uses ``llm.acomplete`` when ``llm`` is given)."""
        if llm is not None and not await asyncio.to_thread(lambda: self.index_loaded() or self.index_exists()):
            await self.apopulate_index_from_files(None, None, llm=llm, progress=progress)
            return
        await asyncio.to_thread(self.ensure_index, None, progress)

    async def arefresh_paths(self, paths: Iterable[str | os.PathLike[str]]) -> int:
        """Async twin of :meth:`refresh_paths`."""
        return await asyncio.to_thread(self.refresh_paths, list(paths))
