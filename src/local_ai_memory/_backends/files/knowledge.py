"""``FileKnowledgeBackend``: knowledge notes as Markdown files, the layout of 0.1.0 unchanged.

Under ``{root}/memory_data/``::

    {category}/{user prefix}{name}.md    one note per file (edit them with any editor)
    .index/{prefix}index.json            each user's index (v4) and its .journal, blobs
    .bm25/{category}/{prefix}bm25.npz    ranker snapshots, blobs
    .embeddings/                         the embedding cache (see :mod:`.vectors`)

Every write goes through :mod:`local_ai_memory._shared.fs` (atomic replace, optional fsync) and every path through
the :class:`~local_ai_memory._shared.naming.DirectoryGuard`, so symlinks out of the root are refused. A note's version
is its ``st_mtime_ns``; symlinks and other non-regular files are not notes.

Files change behind the library's back, so the change feed is only complete while a watcher
feeds it: :meth:`FileKnowledgeBackend.start_feed` opens it, :meth:`record_paths` is what the
watcher (:class:`~local_ai_memory._knowledge.service.MemoryIndexService`) calls with each batch of changed paths,
and :meth:`stop_feed` closes it. Otherwise :meth:`changes` answers ``None`` and searches
compare a ``stat()`` listing with the index.

While a native watcher runs it also reports the erasure markers (``.erasing/``): it calls
:meth:`follow_markers` once registered, and from then on :meth:`blob_known_absent` answers
from the markers it has seen (each event re-checks the marker it names), so a search spends no
``stat`` on them. Writes of markers through this backend update that set at once.
"""

from __future__ import annotations

import bisect
import contextlib
import hashlib
import os
import stat as stat_module
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from itertools import repeat
from pathlib import Path
from typing import TYPE_CHECKING

from local_ai_memory._contracts.knowledge import (
    DATA_DIR,
    ERASING_DIR,
    KnowledgeBackend,
    NoteChanges,
    NoteInfo,
    NoteKey,
    NoteVersions,
    VectorCache,
    is_note_name,
)
from local_ai_memory._shared import fs as _fs
from local_ai_memory._shared.config import MemoryConfig
from local_ai_memory._shared.errors import InvalidInputError, PathEscapeError
from local_ai_memory._shared.naming import DirectoryGuard, check_component, owner_of, validate_id

if TYPE_CHECKING:
    from local_ai_memory._shared.models import Embedder

__all__ = ["FileKnowledgeBackend"]

UPDATE_LOCKS = ".locks"
"""Folder under ``memory_data/`` of the lock files :meth:`FileKnowledgeBackend.update_note` takes."""
_STAT_AT = os.stat in os.supports_dir_fd
"""Whether notes can be listed and ``stat``-ed relative to their folder's descriptor (POSIX)."""
_LOG_LIMIT = 100_000  # more pending changes than this: the feed asks for one full comparison


def _info(category: str, name: str, st: os.stat_result) -> NoteInfo:
    return NoteInfo(category, name, st.st_size, st.st_mtime_ns, st.st_mtime)


def _lstat(names: list[bytes], fd: int | None, folder: bytes) -> list[os.stat_result]:
    """``lstat`` of each of ``names`` in ``folder``, relative to its descriptor ``fd`` when open."""
    stat = os.stat
    if fd is not None:
        return [stat(name, dir_fd=fd, follow_symlinks=False) for name in names]
    return [stat(os.path.join(folder, name), follow_symlinks=False) for name in names]


def _stat_each(names: list[bytes], fd: int | None, folder: bytes) -> tuple[list[bytes], list[os.stat_result]]:
    """The regular files among ``names`` in ``folder`` and their ``lstat`` (:func:`_lstat`); a
    name deleted meanwhile is left out."""
    try:
        stats = _lstat(names, fd, folder)
    except FileNotFoundError:
        found: list[tuple[bytes, os.stat_result]] = []
        for name in names:
            try:
                found.append((name, _lstat([name], fd, folder)[0]))
            except FileNotFoundError:
                continue
        names, stats = [name for name, _ in found], [st for _, st in found]
    if not all(map(stat_module.S_ISREG, [st.st_mode for st in stats])):
        regular = [(name, st) for name, st in zip(names, stats, strict=True) if stat_module.S_ISREG(st.st_mode)]
        names, stats = [name for name, _ in regular], [st for _, st in regular]
    return names, stats


def _is_category(name: str) -> bool:
    try:
        validate_id(name, "category")
    except InvalidInputError:
        return False
    return True


def _marker_name(blob: str) -> str | None:
    """The marker's name if ``blob`` is an erasure marker (``.erasing/{name}``), else ``None``."""
    folder, _, name = blob.partition("/")
    return name if folder == ERASING_DIR and name and "/" not in name else None


class FileKnowledgeBackend(KnowledgeBackend):
    """Notes, blobs and the embedding cache under ``guard``'s ``memory_data/`` folder."""

    def __init__(self, guard: DirectoryGuard, config: MemoryConfig | None = None) -> None:
        self.guard = guard
        self.folder = guard
        self.config = config if config is not None else MemoryConfig()
        self.data_dir = _fs.ensure_dir(guard.resolve(DATA_DIR))
        self._folders: dict[str, Path] = {}
        self._feed_lock = threading.Lock()
        self._feeding = False
        self._cursor = 0
        self._quiet: NoteChanges | None = None  # the answer 'nothing new since cursor', reused
        self._opened_at = 0  # cursor when the feed was last (re)opened: older cursors must rescan
        self._log: list[tuple[int, NoteKey]] = []  # (cursor, key) in cursor order
        self._markers: set[str] | None = None  # erasure markers seen while a watcher reports them
        self._racy_window: int | None = None

    @property
    def racy_window_ns(self) -> int:
        """Measured once per backend, on first need (a few ms; see
        :func:`~local_ai_memory._shared.fs.measure_racy_window`)."""
        window = self._racy_window
        if window is None:
            window = self._racy_window = _fs.measure_racy_window(_fs.ensure_dir(self.data_dir / UPDATE_LOCKS))
        return window

    def __repr__(self) -> str:
        return f"FileKnowledgeBackend({str(self.data_dir)!r})"

    def path_of(self, category: str, name: str) -> Path:
        """The file of a note, refused (like :meth:`DirectoryGuard.resolve`) if it leads out of the root.

        The category folder is resolved through the guard once and re-checked whenever it is a
        symlink; a note that is a symlink is checked each time. This keeps the per-note cost at
        two ``lstat`` calls instead of a full ``realpath`` (a re-check of every query's reads).
        """
        path = self._folder(category) / check_component(name)
        if os.path.islink(path):
            self._check_link(path, name)
        return path

    def _check_link(self, path: Path, name: str) -> Path:
        """``path``, a note that is a symlink, if it leads to a note of the same user in a folder
        of this data folder; :class:`PathEscapeError` otherwise (out of the root, or to another
        user's note, which a link must not hand to this one)."""
        self.guard.check(path)
        real = Path(os.path.realpath(path))
        home = Path(os.path.realpath(self.data_dir))
        if real.parent.parent != home or real.parent.name.startswith(".") or owner_of(real.name) != owner_of(name):
            raise PathEscapeError(f"{path} links to {real}, which is not a note of the same user")
        return path

    def _folder(self, category: str) -> Path:
        """The category's folder, resolved through the guard once and again whenever it is a symlink."""
        folder = self._folders.get(category)
        if folder is None or os.path.islink(folder):
            folder = self.guard.resolve(DATA_DIR, category)
            self._folders[category] = folder
        return folder

    # -- notes ---------------------------------------------------------------------------------
    def read_note(self, category: str, name: str) -> bytes | None:
        return _fs.read_optional(self.path_of(category, name))

    def read_note_head(self, category: str, name: str, size: int) -> tuple[bytes, bool] | None:
        """As :meth:`path_of` checks, with the note's own ``lstat`` left to the open (Stage 3
        reads a few notes per query): a symlink is refused by ``O_NOFOLLOW``, then checked and
        read like any other."""
        if not _fs.NO_FOLLOW:
            return _fs.read_head(self.path_of(category, name), size)
        path = os.path.join(self._folder(category), check_component(name))
        try:
            return _fs.read_head(path, size, follow_links=False)
        except _fs.LinkNotFollowedError:
            return _fs.read_head(self._check_link(Path(path), name), size)

    def write_note(self, category: str, name: str, data: bytes) -> NoteInfo:
        path = self.path_of(category, name)
        _fs.atomic_write(path, data, durable=self.config.fsync)
        self._record({(category, name)})
        return _info(category, name, os.stat(path, follow_symlinks=False))

    def update_note(self, category: str, name: str, change: Callable[[bytes | None], bytes]) -> tuple[bytes, NoteInfo]:
        """Under the note's cross-process lock (:func:`_fs.locked`, a file lock every process on
        this folder takes): read, ``change``, write atomically."""
        path = self.path_of(category, name)
        with _fs.locked(self._update_lock_of(category, name)):
            data = bytes(change(_fs.read_optional(path)))
            _fs.atomic_write(path, data, durable=self.config.fsync)
            info = _info(category, name, os.stat(path, follow_symlinks=False))
        self._record({(category, name)})
        return data, info

    def delete_note_if(self, category: str, name: str, check: Callable[[bytes | None], None]) -> bool:
        """Under the same lock as :meth:`update_note`: read, ``check``, remove."""
        path = self.path_of(category, name)
        with _fs.locked(self._update_lock_of(category, name)):
            check(_fs.read_optional(path))
            removed = _fs.remove(path, durable=self.config.fsync)
        if removed:
            self._record({(category, name)})
        return removed

    def _update_lock_of(self, category: str, name: str) -> Path:
        """The lock of a note's updates: one of 256 stripes under ``memory_data/.locks/``, chosen by a
        hash of the note's key, so the folder never names a note (a forgotten user's stays gone)."""
        stripe = hashlib.sha256(f"{category}/{name}".encode()).hexdigest()[:2]
        return self.guard.resolve(DATA_DIR, UPDATE_LOCKS, f"note-{stripe}")

    def delete_note(self, category: str, name: str) -> bool:
        removed = _fs.remove(self.path_of(category, name), durable=self.config.fsync)
        if removed:
            self._record({(category, name)})
        return removed

    def note_info(self, category: str, name: str) -> NoteInfo | None:
        try:
            st = os.stat(self.path_of(category, name), follow_symlinks=False)
        except FileNotFoundError:
            return None
        return _info(category, name, st) if stat_module.S_ISREG(st.st_mode) else None

    def list_notes(self, category: str, user_prefix: str | None = None) -> dict[str, NoteInfo]:
        names, stats = self._listing(category, user_prefix)
        return {name: _info(category, name, st) for name, st in zip(names, stats, strict=True)}

    def list_versions(self, category: str, user_prefix: str | None = None) -> NoteVersions:
        """:meth:`list_notes` as columns, with no ``NoteInfo`` per note (a fresh process's first
        query at 10k notes spends most of its listing comparison here). A subclass that lists
        its own way (overrides :meth:`list_notes`) is listed through it."""
        if type(self).list_notes is not FileKnowledgeBackend.list_notes:
            return super().list_versions(category, user_prefix)
        names, stats = self._listing(category, user_prefix)
        return NoteVersions(
            category,
            names,
            [st.st_size for st in stats],
            [st.st_mtime_ns for st in stats],
            [st.st_mtime for st in stats],
        )

    def _listing(self, category: str, user_prefix: str | None) -> tuple[list[str], list[os.stat_result]]:
        """The notes of ``category`` (only those of the user whose file prefix is
        ``user_prefix``, when given) and their ``lstat``: the folder's names read at once as
        bytes, then one ``stat`` per note, relative to the folder where the platform allows, with
        no ``DirEntry`` per note. Only regular files count; a name deleted meanwhile is left out."""
        folder = os.fsencode(self.guard.resolve(DATA_DIR, category))
        try:
            fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY) if _STAT_AT else None
        except FileNotFoundError:  # a category nobody wrote to yet: empty, and reading creates nothing
            return [], []
        try:
            try:
                raw = os.listdir(folder)
            except FileNotFoundError:
                return [], []
            encoding, errors = sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()
            if user_prefix is not None:
                # Encoded ids never contain "_", so this prefix alone proves the owner.
                prefix = os.fsencode(user_prefix)
                if not (
                    all(map(bytes.startswith, raw, repeat(prefix))) and all(map(bytes.endswith, raw, repeat(b".md")))
                ):
                    raw = [name for name in raw if name.startswith(prefix) and name.endswith(b".md")]
            else:
                raw = [name for name in raw if is_note_name(name.decode(encoding, errors))]
            raw, stats = _stat_each(raw, fd, folder)
        finally:
            if fd is not None:
                os.close(fd)
        return [name.decode(encoding, errors) for name in raw], stats

    def recover(self) -> int:
        """Remove temporary files of writers that died, in ``memory_data/`` and every folder under it."""
        root = self.guard.resolve(DATA_DIR)
        if not root.is_dir():
            return 0
        folders = [root, *(path for path in root.rglob("*") if path.is_dir() and not path.is_symlink())]
        return sum(_fs.cleanup_temp_files(folder) for folder in folders)

    def list_categories(self) -> list[str]:
        try:
            entries = list(os.scandir(self.guard.resolve(DATA_DIR)))
        except FileNotFoundError:
            return []
        names = (e.name for e in entries if not e.name.startswith(".") and e.is_dir(follow_symlinks=False))
        return sorted(name for name in names if _is_category(name))

    # -- change feed ---------------------------------------------------------------------------
    def start_feed(self) -> None:
        """A watcher starts reporting every change through :meth:`record_paths` from now on."""
        with self._feed_lock:
            self._feeding = True
            self._cursor += 1
            self._opened_at = self._cursor
            self._log.clear()

    def stop_feed(self) -> None:
        """The watcher stopped: :meth:`changes` answers ``None`` again (and markers are asked for)."""
        with self._feed_lock:
            self._feeding = False
            self._markers = None
            self._log.clear()

    def follow_markers(self, active: bool = True) -> None:
        """A native watcher (registered now) reports every change under ``.erasing/`` from now
        on (``True``: list the markers once), or stopped reporting (``False``)."""
        with self._feed_lock:  # listed under the lock, so a marker written meanwhile is not lost
            self._markers = self._list_markers() if active and self._feeding else None

    def _list_markers(self) -> set[str]:
        try:
            entries = list(os.scandir(self.guard.resolve(DATA_DIR, ERASING_DIR)))
        except FileNotFoundError:
            return set()
        return {entry.name for entry in entries if not entry.name.startswith(".")}

    def _marker_changed(self, name: str) -> None:
        """Marker ``name`` was written or deleted: note whether it exists now (checked under the
        lock, so events and this process's own writes, in any order, end with the truth)."""
        with self._feed_lock:
            if self._markers is None:
                return
            if os.path.lexists(self.data_dir / ERASING_DIR / name):
                self._markers.add(name)
            else:
                self._markers.discard(name)

    def record_paths(self, paths: Iterable[str | os.PathLike[str]]) -> int:
        """Record file-system events (created, changed or deleted paths) in the change feed.

        Paths outside ``memory_data/{category}/`` and names that are not notes are ignored;
        a path directly under ``memory_data/`` that is not a file (a category folder moved or deleted)
        makes the next :meth:`changes` ask for a full comparison. Returns how many notes it named.
        """
        keys: set[NoteKey] = set()
        rescan = False
        for raw in paths:
            path = Path(os.fspath(raw))
            try:
                rel = path.relative_to(self.data_dir)
            except ValueError:
                continue
            if len(rel.parts) == 2 and rel.parts[0] == ERASING_DIR and not rel.parts[1].startswith("."):
                # Before the notes of this batch reach the feed: a search that sees a deletion sees its marker.
                self._marker_changed(rel.parts[1])
            elif len(rel.parts) == 1 and not rel.parts[0].startswith(".") and not path.is_file():
                rescan = True  # a folder (a whole category) appeared, moved or vanished
            elif len(rel.parts) == 2 and not rel.parts[0].startswith(".") and is_note_name(rel.parts[1]):
                keys.add((rel.parts[0], rel.parts[1]))
        if rescan:
            self.request_rescan()
        self._record(keys)
        return len(keys)

    def request_rescan(self) -> None:
        """Make the next :meth:`changes` answer incomplete, so the caller compares every listing
        (followed markers are listed again too: the batch that asked for this was not read)."""
        with self._feed_lock:
            if self._markers is not None:
                self._markers = self._list_markers()
            self._cursor += 1
            self._opened_at = self._cursor
            self._log.clear()

    def _record(self, keys: set[NoteKey]) -> None:
        if not keys:
            return
        with self._feed_lock:
            if not self._feeding:
                return
            self._cursor += 1
            self._log.extend((self._cursor, key) for key in keys)
            if len(self._log) > _LOG_LIMIT:
                self._opened_at = self._cursor
                self._log.clear()

    def changes(self, since: int | None) -> NoteChanges | None:
        with self._feed_lock:
            if not self._feeding:
                return None
            if since is None or since < self._opened_at or since > self._cursor:  # a cursor not of this feed
                return NoteChanges(self._cursor, frozenset(), complete=False)
            if since == self._cursor:  # the usual answer to a query: nothing new
                quiet = self._quiet
                if quiet is None or quiet.cursor != since:
                    quiet = self._quiet = NoteChanges(since, frozenset(), complete=True)
                return quiet
            start = bisect.bisect_right(self._log, since, key=lambda item: item[0])
            keys = frozenset(key for _, key in self._log[start:])
            return NoteChanges(self._cursor, keys, complete=True)

    # -- derived data --------------------------------------------------------------------------
    def _blob_path(self, name: str) -> Path:
        return self.guard.resolve(DATA_DIR, name)

    def read_blob(self, name: str) -> bytes | None:
        return _fs.read_optional(self._blob_path(name))

    def write_blob(self, name: str, data: bytes) -> None:
        _fs.atomic_write(self._blob_path(name), data, durable=self.config.fsync)
        marker = _marker_name(name)
        if marker is not None:
            self._marker_changed(marker)

    def append_blob(self, name: str, data: bytes) -> None:
        """One ``O_APPEND`` write under the blob's cross-process lock (fsync as configured)."""
        path = self._blob_path(name)
        with _fs.locked(path):
            _fs.append_bytes(path, data, durable=self.config.fsync)

    def rewrite_blobs(self, names: Sequence[str], change: Callable[[list[bytes | None]], list[bytes]]) -> None:
        """Under every named blob's cross-process lock (the one :meth:`append_blob` takes, taken
        in name order), read them, then replace each by an atomic write, in the order named."""
        paths = [self._blob_path(name) for name in names]
        with contextlib.ExitStack() as held:
            for path in sorted(set(paths)):
                held.enter_context(_fs.locked(path))
            new = change([_fs.read_optional(path) for path in paths])
            for path, data in zip(paths, new, strict=True):
                _fs.atomic_write(path, data, durable=self.config.fsync)

    def blob_known_absent(self, name: str) -> bool:
        marker = _marker_name(name)
        if marker is None:
            return False
        with self._feed_lock:
            return self._markers is not None and marker not in self._markers

    def blob_size(self, name: str) -> int | None:
        try:
            st = os.stat(self._blob_path(name))
        except FileNotFoundError:
            return None
        return st.st_size if stat_module.S_ISREG(st.st_mode) else None

    def delete_blob(self, name: str) -> bool:
        """Delete the blob and the file that carried its lock (its name may be a user's id)."""
        path = self._blob_path(name)
        removed = _fs.remove(path, durable=self.config.fsync)
        _fs.remove(_fs.lock_path(path), durable=False)
        marker = _marker_name(name)
        if marker is not None:
            self._marker_changed(marker)
        return removed

    def quarantine_blob(self, name: str) -> str | None:
        path = self._blob_path(name)
        if not path.exists():
            return None
        return str(_fs.quarantine(path))

    def vector_cache(self, embedder: Embedder) -> VectorCache:
        from local_ai_memory._backends.files.vectors import EmbeddingCache

        return EmbeddingCache(self.guard, embedder, self.config)
