"""The single seam through which the library changes the disk.

Every write, rename, delete and directory creation the engines perform goes through the
functions here, and those call the primitives of one :class:`Syscalls` object. Tests swap that
object (see :func:`use_syscalls`) to make the k-th operation fail and check that no write path
can lose or tear stored data.

What this module guarantees:

* :func:`atomic_write` writes a temporary file in the target's folder, fsyncs it, renames it
  over the target and fsyncs the folder. A reader sees the old content or the new one, never a
  mix, even if the process is killed half way.
* :func:`locked` holds an in-process lock and a cross-process lock (``filelock`` on a hidden
  sidecar ``.{name}.lock``) for one target, so read-modify-write cycles from threads, tasks
  and other processes never lose an update.
* :func:`cleanup_temp_files` removes temporary files left by writers that crashed.

Files are created owner-only (``0o600``) and folders ``0o700``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import filelock

from local_ai_memory._shared.errors import LockTimeoutError, StorageError
from local_ai_memory._shared.events import Event, log_event

__all__ = [
    "NO_FOLLOW",
    "RACY_WINDOW_NS",
    "LinkNotFollowedError",
    "Syscalls",
    "append_bytes",
    "atomic_write",
    "cleanup_temp_files",
    "ensure_dir",
    "is_temp_file",
    "lock_path",
    "locked",
    "quarantine",
    "read_from",
    "read_head",
    "read_optional",
    "read_tail",
    "remove",
    "rename_if_absent",
    "update_bytes",
    "use_syscalls",
]

FILE_MODE = 0o600
DIR_MODE = 0o700
DEFAULT_LOCK_TIMEOUT = 30.0
RACY_WINDOW_NS = 3_000_000_000
"""An mtime this recent may share its clock tick with a change that did not move it (FAT
stores 2 s ticks; clocks skew): a file or folder changed more recently is not judged by its
mtime alone."""
_TEMP_RE = re.compile(r"^\..+\.(?P<pid>\d+)-[0-9a-f]{12}\.tmp$")
_CHUNK = 1 << 20


class Syscalls:
    """The primitive operations that change the disk.

    Every primitive first calls :meth:`before` with its name; a test subclass overrides that
    one method to record the sequence or to raise ``OSError`` at the k-th operation.
    """

    def before(self, operation: str) -> None:
        """Hook called before each primitive (``"mkdir"``, ``"open_new"``, ``"write"``, ...)."""

    def mkdir(self, path: str) -> None:
        self.before("mkdir")
        os.mkdir(path, DIR_MODE)

    def open_new(self, path: str) -> int:
        self.before("open_new")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
        return os.open(path, flags | getattr(os, "O_NOFOLLOW", 0), FILE_MODE)

    def open_append(self, path: str) -> int:
        self.before("open_append")
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)
        return os.open(path, flags | getattr(os, "O_NOFOLLOW", 0), FILE_MODE)

    def write(self, fd: int, data: memoryview) -> int:
        self.before("write")
        return os.write(fd, data)

    def fsync(self, fd: int) -> None:
        self.before("fsync")
        os.fsync(fd)

    def close(self, fd: int) -> None:
        self.before("close")
        os.close(fd)

    def replace(self, src: str, dst: str) -> None:
        self.before("replace")
        os.replace(src, dst)

    def fsync_dir(self, path: str) -> None:
        self.before("fsync_dir")
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def unlink(self, path: str) -> None:
        self.before("unlink")
        os.unlink(path)

    def rmdir(self, path: str) -> None:
        self.before("rmdir")
        os.rmdir(path)


_syscalls = Syscalls()
_in_flight: set[str] = set()
_in_flight_guard = threading.Lock()


@contextlib.contextmanager
def use_syscalls(syscalls: Syscalls) -> Iterator[Syscalls]:
    """Route every disk change through ``syscalls`` inside the ``with`` block (for tests)."""
    global _syscalls
    previous, _syscalls = _syscalls, syscalls
    try:
        yield syscalls
    finally:
        _syscalls = previous


def _storage_error(action: str, path: Path | str, exc: OSError) -> StorageError:
    err = StorageError(exc.errno or errno.EIO, f"could not {action} {path}: {exc.strerror or exc}")
    err.filename = str(path)
    return err


def ensure_dir(path: Path) -> Path:
    """Create ``path`` and its missing parents (mode ``0o700``); return it."""
    missing: list[Path] = []
    current = path
    while not current.is_dir():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for folder in reversed(missing):
        try:
            _syscalls.mkdir(str(folder))
        except FileExistsError:
            if not folder.is_dir():
                raise _storage_error(
                    "create folder", folder, FileExistsError(errno.EEXIST, "a file is in the way")
                ) from None
        except OSError as exc:
            raise _storage_error("create folder", folder, exc) from exc
    return path


def _write_all(fd: int, chunks: Iterable[bytes]) -> None:
    for chunk in chunks:
        view = memoryview(chunk)
        while view:
            written = _syscalls.write(fd, view[:_CHUNK])
            view = view[written:]


def atomic_write(path: Path, data: bytes | Iterable[bytes], *, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` (bytes, or an iterable of byte chunks) atomically.

    With ``durable=False`` the fsyncs are skipped: still atomic against crashes of the
    process, but not against power loss. Raises :class:`StorageError` with the target intact.
    """
    folder = ensure_dir(path.parent)
    temp = folder / f".{path.name}.{os.getpid()}-{secrets.token_hex(6)}.tmp"
    with _in_flight_guard:
        _in_flight.add(str(temp))
    fd: int | None = None
    try:
        fd = _syscalls.open_new(str(temp))
        _write_all(fd, [data] if isinstance(data, bytes) else data)
        if durable:
            _syscalls.fsync(fd)
        _syscalls.close(fd)
        fd = None
        _syscalls.replace(str(temp), str(path))
        if durable:
            _syscalls.fsync_dir(str(folder))
    except BaseException as exc:
        # Whatever stopped the write (an I/O error, a bad chunk, a signal), leave no temp file.
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
        with contextlib.suppress(OSError):
            _syscalls.unlink(str(temp))
        if isinstance(exc, OSError):
            raise _storage_error("write", path, exc) from exc
        raise
    finally:
        with _in_flight_guard:
            _in_flight.discard(str(temp))


def append_bytes(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Append ``data`` to ``path`` (created if missing). Hold :func:`locked` around it.

    A crash can leave a partial last record, so readers of appended files must skip an
    unterminated or unparsable final line.
    """
    ensure_dir(path.parent)
    fd: int | None = None
    try:
        fd = _syscalls.open_append(str(path))
        _write_all(fd, [data])
        if durable:
            _syscalls.fsync(fd)
        _syscalls.close(fd)
        fd = None
    except OSError as exc:
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
        raise _storage_error("append to", path, exc) from exc


def read_optional(path: Path) -> bytes | None:
    """Return the bytes of ``path``, or ``None`` when it does not exist."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _storage_error("read", path, exc) from exc


NO_FOLLOW = getattr(os, "O_NOFOLLOW", 0)
"""``os.O_NOFOLLOW`` where the platform has it (POSIX), else 0."""


class LinkNotFollowedError(Exception):
    """:func:`read_head` with ``follow_links=False`` met a symbolic link (it was not opened)."""


def read_head(path: str | Path, size: int, *, follow_links: bool = True) -> tuple[bytes, bool] | None:
    """The first ``size`` bytes of ``path`` and whether that is all of it, or ``None`` when missing.

    Reads one byte more than asked to tell "exactly ``size`` bytes long" from "longer". Plain
    ``open``/``read``/``close`` calls: Stage 3 reads a few notes per query, and a buffered file
    object adds an ``fstat`` and an ``isatty`` check to each (half the time of a small read).
    With ``follow_links=False`` (where the platform has ``O_NOFOLLOW``: check :data:`NO_FOLLOW`)
    a symbolic link is not opened but raises :class:`LinkNotFollowedError`, so a caller that must
    check links first needs no ``lstat`` of its own for the files that are none.
    """
    try:
        fd = os.open(path, os.O_RDONLY if follow_links else os.O_RDONLY | NO_FOLLOW)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if not follow_links and exc.errno == errno.ELOOP:
            raise LinkNotFollowedError(os.fspath(path)) from None
        raise _storage_error("read", Path(path), exc) from exc
    try:
        data = b""
        while len(data) <= size:
            chunk = os.read(fd, size + 1 - len(data))
            if not chunk:
                break
            data += chunk
    except OSError as exc:
        raise _storage_error("read", Path(path), exc) from exc
    finally:
        os.close(fd)
    return (data, True) if len(data) <= size else (data[:size], False)


def read_tail(path: Path, size: int) -> bytes | None:
    """The last ``size`` bytes of ``path`` (all of it when shorter), or ``None`` when missing."""
    try:
        with path.open("rb") as handle:
            end = handle.seek(0, os.SEEK_END)
            handle.seek(max(0, end - size))
            return handle.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _storage_error("read", path, exc) from exc


def read_from(path: Path, offset: int) -> tuple[tuple[int, int], bytes] | None:
    """The file's identity ``(st_dev, st_ino)`` and its bytes from ``offset`` on, or ``None`` when missing.

    The identity tells a log that was deleted and written anew from the one read before.
    """
    try:
        with path.open("rb") as handle:
            st = os.fstat(handle.fileno())
            handle.seek(offset)
            return (st.st_dev, st.st_ino), handle.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _storage_error("read", path, exc) from exc


def _sync_folder_of(path: Path) -> None:
    """fsync the folder holding ``path`` so a rename or delete in it survives power loss."""
    try:
        _syscalls.fsync_dir(str(path.parent))
    except OSError as exc:
        raise _storage_error("sync folder of", path, exc) from exc


def remove(path: Path, *, durable: bool = False) -> bool:
    """Delete ``path`` if it exists; return whether it did."""
    try:
        _syscalls.unlink(str(path))
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise _storage_error("delete", path, exc) from exc
    if durable:
        _sync_folder_of(path)
    return True


def remove_empty_folder(path: Path) -> bool:
    """Delete the folder ``path`` if it exists and is empty; return whether it was removed."""
    try:
        _syscalls.rmdir(str(path))
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as exc:
        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
            return False
        raise _storage_error("delete folder", path, exc) from exc
    return True


def purge(path: Path, *, durable: bool = False) -> bool:
    """Delete ``path`` and its lock sidecar, so not even its name stays behind; return whether it existed.

    Call it holding :func:`locked` on ``path``. A process that waits for that lock at this very
    moment keeps the old sidecar's lock while a newcomer creates a new one, so purge only what
    is being erased for good.
    """
    existed = remove(path, durable=durable)
    remove(lock_path(path), durable=durable)
    return existed


def quarantine(path: Path, suffix: str = ".corrupt.bak") -> Path:
    """Move a damaged file aside as ``{name}{suffix}`` (numbered if taken); return the new path."""
    target = path.with_name(path.name + suffix)
    number = 1
    while target.exists():
        target = path.with_name(f"{path.name}{suffix}.{number}")
        number += 1
    try:
        _syscalls.replace(str(path), str(target))
    except OSError as exc:
        raise _storage_error("move aside", path, exc) from exc
    return target


def rename_if_absent(source: Path, target: Path, *, durable: bool = True) -> bool:
    """Rename ``source`` to ``target`` unless ``target`` exists; return whether it moved.

    Hold :func:`locked` on both paths around it: the existence check and the rename are only
    atomic together against writers that take those locks. Both paths must share a folder.
    """
    if target.exists() or not source.exists():
        return False
    try:
        _syscalls.replace(str(source), str(target))
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise _storage_error("rename", source, exc) from exc
    if durable:
        _sync_folder_of(target)
    return True


TICK_PROBE_NS = 50_000_000
"""How long :func:`measure_racy_window` watches a file's timestamp at most (50 ms): a clock
that does not tick twice within it is treated as coarse (the fixed window applies)."""


def measure_racy_window(folder: Path, budget_ns: int = TICK_PROBE_NS) -> int:
    """The racy window of the file system under ``folder``, measured: create scratch files
    until their mtimes have moved three times and take the largest step (the clock's tick),
    plus how far the file system's clock lagged ``time.time_ns()`` (a network share's skew),
    times two for a margin. A change made later than that after a note's mtime gets a later
    mtime, so an entry older than that needs no content hash.

    New files written once, not one file touched again and again: a kernel with fine-grained timestamps
    gives them only to a file whose times were read since its last change, and a note
    replaced by another process is a new file with a coarse time. Whatever cannot be measured
    (a read-only folder, a clock that ticks slower than the budget allows) gives
    :data:`~local_ai_memory._shared.fs.RACY_WINDOW_NS`, the fixed window for coarse clocks."""
    probe = folder / f".clock-probe-{os.getpid()}-{threading.get_ident()}"
    steps: list[int] = []
    lag = 0
    last: int | None = None
    deadline = time.monotonic_ns() + budget_ns
    try:
        while len(steps) < 3 and time.monotonic_ns() < deadline:
            fd = _syscalls.open_new(str(probe))
            try:
                _syscalls.write(fd, memoryview(b"."))  # as a note is written: created, then its bytes
                mtime = os.fstat(fd).st_mtime_ns
            finally:
                _syscalls.close(fd)
                _syscalls.unlink(str(probe))
            lag = max(lag, time.time_ns() - mtime)
            if last is not None and mtime != last:
                steps.append(abs(mtime - last))
            last = mtime
    except OSError:
        return RACY_WINDOW_NS
    if len(steps) < 3:
        return RACY_WINDOW_NS
    return min(RACY_WINDOW_NS, 2 * (max(steps[1:]) + max(0, lag)) + 1_000_000)


def lock_path(path: Path) -> Path:
    """The hidden sidecar file that carries ``path``'s cross-process lock."""
    return path.with_name(f".{path.name}.lock")


_thread_locks: dict[str, tuple[threading.RLock, filelock.FileLock]] = {}
_registry_guard = threading.Lock()


def _locks_for(path: Path) -> tuple[threading.RLock, filelock.FileLock]:
    key = str(lock_path(path))
    with _registry_guard:
        pair = _thread_locks.get(key)
        if pair is None:
            pair = (threading.RLock(), filelock.FileLock(key, mode=FILE_MODE, thread_local=False))
            _thread_locks[key] = pair
        return pair


@contextlib.contextmanager
def locked(path: Path, *, timeout: float = DEFAULT_LOCK_TIMEOUT) -> Iterator[None]:
    """Hold the in-process and the cross-process lock of ``path`` (re-entrant per thread)."""
    ensure_dir(path.parent)
    thread_lock, file_lock = _locks_for(path)
    if not thread_lock.acquire(timeout=timeout):
        raise LockTimeoutError(errno.ETIMEDOUT, f"timed out after {timeout}s waiting for the lock on {path}")
    try:
        try:
            file_lock.acquire(timeout=timeout)
        except filelock.Timeout:
            raise LockTimeoutError(
                errno.ETIMEDOUT, f"another process held the lock on {path} for over {timeout}s"
            ) from None
        except OSError as exc:
            raise _storage_error("lock", path, exc) from exc
        try:
            yield
        finally:
            file_lock.release()
    finally:
        thread_lock.release()


def update_bytes(
    path: Path,
    change: Callable[[bytes | None], bytes],
    *,
    durable: bool = True,
    timeout: float = DEFAULT_LOCK_TIMEOUT,
) -> bytes:
    """Read-modify-write ``path`` under its lock: ``change(old_or_None)`` gives the new bytes.

    If ``change`` raises, nothing is written and the exception propagates.
    """
    with locked(path, timeout=timeout):
        new = change(read_optional(path))
        atomic_write(path, new, durable=durable)
        return new


def is_temp_file(name: str) -> bool:
    """Whether ``name`` is a temporary file written by :func:`atomic_write`."""
    return _TEMP_RE.match(name) is not None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def cleanup_temp_files(folder: Path) -> int:
    """Delete temp files in ``folder`` whose writer is gone; return how many were removed.

    A temp file names its writer's pid. It is removed when that process no longer exists, or
    when it is this process and no write of ours is using it. Writers that are still running
    in other processes are left alone.
    """
    removed = 0
    try:
        entries = list(os.scandir(folder))
    except FileNotFoundError:
        return 0
    except OSError as exc:
        raise _storage_error("list", folder, exc) from exc
    for entry in entries:
        match = _TEMP_RE.match(entry.name)
        if match is None:
            continue
        pid = int(match["pid"])
        with _in_flight_guard:
            busy = entry.path in _in_flight
        if busy or (pid != os.getpid() and _pid_alive(pid)):
            continue
        if remove(Path(entry.path)):
            removed += 1
            log_event(Event.TEMP_FILE_REMOVED, path=entry.path, pid=pid)
    return removed
