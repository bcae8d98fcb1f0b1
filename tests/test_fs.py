"""The write seam: atomicity, fault injection at every step, locks, cleanup."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from local_ai_memory import LockTimeoutError, StorageError
from local_ai_memory._shared import fs as _fs


class FailAt(_fs.Syscalls):
    """Raises ``error`` at the ``k``-th primitive call (1-based) and records every call."""

    def __init__(self, k: int, error: int = errno.ENOSPC) -> None:
        self.k, self.error, self.calls = k, error, []

    def before(self, operation: str) -> None:
        self.calls.append(operation)
        if len(self.calls) == self.k:
            raise OSError(self.error, os.strerror(self.error))


def _leftovers(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if _fs.is_temp_file(p.name)]


def test_atomic_write_replaces_content_owner_only(tmp_path: Path) -> None:
    target = tmp_path / "deep" / "state.json"
    _fs.atomic_write(target, b"one")
    _fs.atomic_write(target, [b"t", b"wo"])
    assert target.read_bytes() == b"two"
    assert (target.stat().st_mode & 0o777) == 0o600
    assert (target.parent.stat().st_mode & 0o777) == 0o700
    assert _leftovers(target.parent) == []


@pytest.mark.parametrize("error", [errno.ENOSPC, errno.EIO, errno.EACCES])
def test_a_fault_at_every_step_keeps_old_or_new_content(tmp_path: Path, error: int) -> None:
    target = tmp_path / "state.json"
    probe = FailAt(k=0)
    _fs.atomic_write(target, b"old")
    with _fs.use_syscalls(probe):
        _fs.atomic_write(target, b"new" * 1000)
    steps = len(probe.calls)
    assert probe.calls == ["open_new", "write", "fsync", "close", "replace", "fsync_dir"]
    for k in range(1, steps + 1):
        _fs.atomic_write(target, b"old")
        with _fs.use_syscalls(FailAt(k, error)), pytest.raises(StorageError) as info:
            _fs.atomic_write(target, b"new" * 1000)
        assert info.value.errno == error
        assert info.value.filename == str(target)
        after_replace = probe.calls[k - 1] == "fsync_dir"
        assert target.read_bytes() == (b"new" * 1000 if after_replace else b"old")
        assert _leftovers(tmp_path) == []


def test_faults_while_creating_folders_are_storage_errors(tmp_path: Path) -> None:
    with _fs.use_syscalls(FailAt(2)), pytest.raises(StorageError, match="create folder"):
        _fs.atomic_write(tmp_path / "a" / "b" / "c.json", b"x")
    assert not (tmp_path / "a" / "b").exists()


def test_update_bytes_does_not_write_when_change_raises(tmp_path: Path) -> None:
    target = tmp_path / "counter"
    assert _fs.update_bytes(target, lambda old: b"1" if old is None else old + b"1") == b"1"

    def boom(old: bytes | None) -> bytes:
        raise ValueError("refuse")

    with pytest.raises(ValueError, match="refuse"):
        _fs.update_bytes(target, boom)
    assert target.read_bytes() == b"1"


def test_threads_never_lose_updates(tmp_path: Path) -> None:
    target = tmp_path / "n"

    def bump() -> None:
        for _ in range(50):
            _fs.update_bytes(target, lambda old: str(int(old or b"0") + 1).encode(), durable=False)

    threads = [threading.Thread(target=bump) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert target.read_bytes() == b"200"


def test_lock_timeout_when_another_process_holds_it(tmp_path: Path) -> None:
    target = tmp_path / "busy.json"
    with subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from local_ai_memory._shared import fs as _fs\n"
            f"with _fs.locked(Path({str(target)!r})):\n    print('held', flush=True); time.sleep(30)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    ) as holder:
        try:
            assert holder.stdout is not None
            assert holder.stdout.readline().strip() == "held"
            with pytest.raises(LockTimeoutError, match="another process held"), _fs.locked(target, timeout=0.2):
                pass
        finally:
            holder.kill()
    with _fs.locked(target, timeout=5):  # released by the kernel when the holder died
        pass


def test_append_and_its_fault(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    _fs.append_bytes(log, b"a\n")
    _fs.append_bytes(log, b"b\n", durable=False)
    assert log.read_bytes() == b"a\nb\n"
    with _fs.use_syscalls(FailAt(2, errno.EIO)), pytest.raises(StorageError, match="append"):
        _fs.append_bytes(log, b"c\n")
    assert log.read_bytes() == b"a\nb\n"


def test_quarantine_numbers_repeated_backups(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    for expected in ["state.json.corrupt.bak", "state.json.corrupt.bak.1"]:
        target.write_bytes(b"{broken")
        assert _fs.quarantine(target).name == expected
    assert not target.exists()


def test_remove_and_read_optional(tmp_path: Path) -> None:
    target = tmp_path / "x"
    assert _fs.read_optional(target) is None
    assert _fs.remove(target) is False
    target.write_bytes(b"1")
    assert _fs.read_optional(target) == b"1"
    assert _fs.remove(target, durable=True) is True
    assert not target.exists()


def test_cleanup_removes_only_orphans(tmp_path: Path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    orphan = tmp_path / f".state.json.{dead_pid}-0123456789ab.tmp"
    mine = tmp_path / f".state.json.{os.getpid()}-0123456789ab.tmp"
    live = tmp_path / f".state.json.{os.getppid()}-0123456789ab.tmp"
    unrelated = tmp_path / "notes.tmp"
    for path in (orphan, mine, live, unrelated):
        path.write_bytes(b"partial")
    assert _fs.cleanup_temp_files(tmp_path) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, unrelated.name])
    assert _fs.cleanup_temp_files(tmp_path / "missing") == 0


def test_a_failing_chunk_source_leaves_no_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "big.json"
    _fs.atomic_write(target, b"old")

    def chunks() -> Iterator[bytes]:
        yield b"partial"
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _fs.atomic_write(target, chunks())
    assert target.read_bytes() == b"old"
    assert _leftovers(tmp_path) == []
