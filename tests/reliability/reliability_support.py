"""Shared helpers of the reliability suite: fault injection, counters, tree snapshots, a fork server.

Imported by absolute name (``conftest.py`` puts this folder on ``sys.path``) so every test
module and the terminal-summary hook share one :data:`COUNTS`.
"""

from __future__ import annotations

import errno
import hashlib
import os
import select
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

from local_ai_memory._shared import fs as _fs

COUNTS: Counter[str] = Counter()
"""kills, sigterms, faults, concurrent_ops, hostile_inputs, orphans_removed, losses, ... (printed at the end)."""

LOSSES: list[str] = []
"""Human-readable description of every loss a test observed (a test fails when it adds one)."""

ERRORS = (errno.ENOSPC, errno.EIO, errno.EACCES)


class FailAt(_fs.Syscalls):
    """Raise ``error`` at the ``k``-th primitive (1-based); ``sticky`` keeps failing from then on.

    ``k = 0`` never fails: a probe that records the calls an operation makes.
    """

    def __init__(self, k: int = 0, error: int = errno.ENOSPC, *, sticky: bool = False) -> None:
        self.k, self.error, self.sticky = k, error, sticky
        self.calls: list[str] = []
        self.fired = 0

    def before(self, operation: str) -> None:
        self.calls.append(operation)
        n = len(self.calls)
        if self.k and (n == self.k or (self.sticky and n > self.k)):
            self.fired += 1
            raise OSError(self.error, os.strerror(self.error))


def temp_files(root: Path) -> list[Path]:
    """Every temporary file of :func:`_fs.atomic_write` anywhere under ``root``."""
    return [Path(d) / f for d, _, files in os.walk(root) for f in files if _fs.is_temp_file(f)]


def cleanup_everywhere(root: Path) -> int:
    """Recovery as a restarted process does it: remove dead writers' temp files in every folder."""
    removed = 0
    for folder, _, _ in os.walk(root):
        removed += _fs.cleanup_temp_files(Path(folder))
    return removed


def snapshot(root: Path) -> dict[str, tuple[str, str]]:
    """``{relative path: (kind, digest or link target)}`` of a whole tree, symlinks not followed."""
    out: dict[str, tuple[str, str]] = {}
    if not root.exists():
        return out
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder) / name
            rel = str(path.relative_to(root))
            if path.is_symlink():
                out[rel] = ("link", os.readlink(path))
            elif path.is_dir():
                out[rel] = ("dir", "")
            else:
                out[rel] = ("file", hashlib.sha256(path.read_bytes()).hexdigest())
    return out


def everything_inside(root: Path) -> list[str]:
    """Paths under ``root`` that resolve outside it (planted symlinks excluded by the caller)."""
    real_root = root.resolve()
    bad = []
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder) / name
            if not path.is_symlink() and not path.resolve().is_relative_to(real_root):
                bad.append(str(path))
    return bad


def modes(root: Path) -> list[tuple[str, str]]:
    """``(path, octal mode)`` of every file not ``0o600`` and every folder not ``0o700`` under ``root``."""
    wrong = []
    for folder, dirs, files in os.walk(root):
        for name in dirs:
            path = Path(folder) / name
            if not path.is_symlink() and path.stat().st_mode & 0o777 != 0o700:
                wrong.append((str(path), oct(path.stat().st_mode & 0o777)))
        for name in files:
            path = Path(folder) / name
            if not path.is_symlink() and path.stat().st_mode & 0o777 != 0o600:
                wrong.append((str(path), oct(path.stat().st_mode & 0o777)))
    return wrong


ZYGOTE = textwrap.dedent(
    """
    import os, sys
    sys.path.insert(0, sys.argv[1])
    import crash_workloads  # imports the library once; children are forked from here
    import gc

    gc.collect()
    gc.freeze()  # a child's first collection must not walk (and so copy) the parent's objects

    print("ready", flush=True)
    for line in sys.stdin:
        cmd, *args = line.split()
        if cmd == "run":
            pid = os.fork()
            if pid == 0:
                code = 0
                try:
                    crash_workloads.run(args[0], args[1], int(args[2]))
                except BaseException:
                    code = 3
                finally:
                    os._exit(code)
            print(pid, flush=True)
        elif cmd == "reap":
            _, status = os.waitpid(int(args[0]), 0)
            print(status, flush=True)
    """
)


class ForkServer:
    """A process that has imported the library and forks one writer per request.

    Forking from a warm process costs milliseconds, so hundreds of SIGKILLs fit in seconds;
    the writers are real processes, killed by a real ``SIGKILL``.
    """

    def __init__(self) -> None:
        here = str(Path(__file__).parent)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", ZYGOTE, here],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        assert self._line(60) == "ready"

    def _line(self, timeout: float) -> str:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            raise TimeoutError("fork server did not answer")
        return self.proc.stdout.readline().strip()

    def _send(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()

    def start(self, workload: str, root: Path, seed: int) -> int:
        self._send(f"run {workload} {root} {seed}")
        return int(self._line(30))

    def reap(self, pid: int) -> int:
        self._send(f"reap {pid}")
        return int(self._line(30))

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def read_acks(path: Path) -> list[str]:
    """Complete lines of an ack log (a torn last line is ignored)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    return [line for line in data.decode().split("\n")[:-1] if line]
