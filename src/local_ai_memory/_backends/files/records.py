"""Named records in named folders: the file backend's building block.

:class:`FileRecordFolder` (one per kind of record: ``state``, ``working``, ``plans``,
``tool_results``, ``tool_index/{scope}``, ...) reads, writes, updates under a lock, lists,
deletes, renames or quarantines a record by name, through :mod:`local_ai_memory._shared.fs`.
:class:`~local_ai_memory._backends.files.runtime.FileRuntimeBackend` builds the runtime contract on it.

:func:`read_checked` adds the corruption rule shared by every level: a record that does not
decode is moved aside (``{name}.corrupt.bak`` for files), ``MEMORY_CORRUPT`` is logged, and the
caller gets ``None`` so it can return its safe default. It re-reads under the record's lock
before moving anything, so a record that another writer just replaced is never quarantined.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat as stat_module
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from local_ai_memory._shared import fs as _fs
from local_ai_memory._shared.errors import StorageError
from local_ai_memory._shared.events import Event, log_event
from local_ai_memory._shared.naming import DirectoryGuard, check_component
from local_ai_memory._shared.records import CorruptRecordError

__all__ = ["FileRecordFolder", "RecordInfo", "read_checked"]

T = TypeVar("T")


@dataclass(frozen=True)
class RecordInfo:
    """Size in bytes and last change time (seconds since the epoch) of one record."""

    name: str
    size: int
    modified: float


class FileRecordFolder:
    """Records as files ``{root}/{folder}/{name}{suffix}``, written only through :mod:`local_ai_memory._shared.fs`.

    Every path is resolved through the :class:`DirectoryGuard`, and names are checked as
    single file names, so no record can land outside its folder.
    """

    def __init__(
        self,
        guard: DirectoryGuard,
        folder: str,
        suffix: str,
        *,
        durable: bool = True,
        timeout: float = _fs.DEFAULT_LOCK_TIMEOUT,
    ) -> None:
        self.guard = guard
        self.folder = folder
        self.kind = folder.rsplit("/", 1)[-1]
        self.suffix = suffix
        self.durable = durable
        self.timeout = timeout

    def __repr__(self) -> str:
        return f"FileRecordFolder({self.folder!r}, {self.suffix!r})"

    def path(self, name: str) -> Path:
        """The file of record ``name`` (checked to stay inside the folder)."""
        return self.guard.resolve(self.folder, check_component(name + self.suffix, f"{self.kind} record name"))

    def location(self, name: str) -> str:
        return str(self.path(name))

    def read(self, name: str) -> bytes | None:
        return _fs.read_optional(self.path(name))

    def write(self, name: str, data: bytes | Iterable[bytes]) -> None:
        _fs.atomic_write(self.path(name), data, durable=self.durable)

    def update(self, name: str, change: Callable[[bytes | None], bytes | None]) -> bytes | None:
        path = self.path(name)
        with _fs.locked(path, timeout=self.timeout):
            new = change(_fs.read_optional(path))
            if new is not None:
                _fs.atomic_write(path, new, durable=self.durable)
            return new

    @contextlib.contextmanager
    def locked(self, name: str) -> Iterator[None]:
        with _fs.locked(self.path(name), timeout=self.timeout):
            yield

    def names(self) -> list[str]:
        folder = self.guard.resolve(self.folder)
        try:
            entries = list(os.scandir(folder))
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise StorageError(exc.errno or 5, f"could not list {folder}: {exc.strerror or exc}") from exc
        cut = len(self.suffix)
        return sorted(
            entry.name[:-cut]
            for entry in entries
            if entry.name.endswith(self.suffix) and not entry.name.startswith(".") and len(entry.name) > cut
        )

    def version(self) -> int | None:
        """The folder's ``st_mtime_ns`` (it changes when a record is added, replaced or removed,
        since every write renames into the folder), or ``None`` when the folder does not exist.

        One ``stat``: the path is joined, not resolved; a folder that is a symlink is resolved
        through the guard first, so a planted link can reveal nothing outside the root.
        """
        path = self.guard.root / self.folder
        try:
            st = os.lstat(path)
            if stat_module.S_ISLNK(st.st_mode):
                st = os.stat(self.guard.resolve(self.folder))
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StorageError(exc.errno or 5, f"could not stat {path}: {exc.strerror or exc}") from exc
        return st.st_mtime_ns

    def locked_names(self) -> list[str]:
        """Names whose lock file exists, whether or not the record does (what a purge cut short leaves)."""
        tail = self.suffix + ".lock"
        try:
            entries = list(os.scandir(self.guard.resolve(self.folder)))
        except FileNotFoundError:
            return []
        names = (entry.name for entry in entries)
        return sorted(
            name[1 : -len(tail)]
            for name in names
            if name.startswith(".") and name.endswith(tail) and len(name) > len(tail) + 1
        )

    def info(self, name: str) -> RecordInfo | None:
        try:
            stat = self.path(name).stat()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StorageError(exc.errno or 5, f"could not stat {name}: {exc.strerror or exc}") from exc
        return RecordInfo(name, stat.st_size, stat.st_mtime)

    def infos(self, names: Iterable[str]) -> dict[str, RecordInfo]:
        folder = self.guard.resolve(self.folder)
        found: dict[str, RecordInfo] = {}
        for name in names:
            file_name = check_component(name + self.suffix, f"{self.kind} record name")
            try:
                stat = os.lstat(folder / file_name)  # lstat: a planted symlink reveals nothing outside
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise StorageError(exc.errno or 5, f"could not stat {name}: {exc.strerror or exc}") from exc
            found[name] = RecordInfo(name, stat.st_size, stat.st_mtime)
        return found

    def list_info(self) -> list[RecordInfo]:
        return list(self.infos(self.names()).values())

    def delete(self, name: str) -> bool:
        return _fs.remove(self.path(name), durable=self.durable)

    def purge(self, name: str) -> int:
        """Delete a record and its lock file under its lock; return the bytes it held (0 if none)."""
        path = self.path(name)
        with _fs.locked(path, timeout=self.timeout):
            info = self.info(name)
            _fs.purge(path, durable=self.durable)
        return 0 if info is None else info.size

    def remove_folder(self) -> bool:
        """Delete this folder if it is empty (a scope's step logs or markers, once purged)."""
        return _fs.remove_empty_folder(self.guard.resolve(self.folder))

    def rename_if_absent(self, source: str, target: str) -> bool:
        return _fs.rename_if_absent(self.path(source), self.path(target), durable=self.durable)

    def quarantine(self, name: str) -> str:
        return str(_fs.quarantine(self.path(name)))

    def cleanup(self) -> int:
        """Remove temporary files of writers that died; return how many."""
        return _fs.cleanup_temp_files(self.guard.resolve(self.folder))


def read_checked(folder: FileRecordFolder, name: str, decode: Callable[[bytes], T]) -> T | None:
    """Read and decode record ``name``; ``None`` when missing or corrupt (then quarantined).

    ``decode`` raises :class:`CorruptRecordError` for damaged bytes; any other error (such as
    :class:`UnsupportedFormatError` for a newer format) propagates and the record stays as is.
    """
    raw = folder.read(name)
    if raw is None:
        return None
    try:
        return decode(raw)
    except CorruptRecordError as first:
        reason = str(first)
    with folder.locked(name):
        again = folder.read(name)
        if again is None:
            return None
        if again != raw:
            try:
                return decode(again)
            except CorruptRecordError as exc:
                reason = str(exc)
        backup = folder.quarantine(name)
    log_event(
        Event.MEMORY_CORRUPT,
        level=logging.WARNING,
        kind=folder.kind,
        record=name,
        backup=backup,
        reason=reason,
    )
    return None
