"""A step log's read mark on files names a long last line by its ends (issue 41: hashing a
megabytes-long checkpoint line was a fifth of a new process's first ``get_state``), still
checks the whole-line marks older snapshots hold, and still notices a log written anew."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from local_ai_memory._contracts.runtime import Scope
from local_ai_memory._shared.naming import DirectoryGuard
from local_ai_memory.backends import FileRuntimeBackend

SCOPE = Scope.of("alice", "s1")
LONG = "x" * 100_000


@pytest.fixture
def backend(tmp_path: Path) -> FileRuntimeBackend:
    return FileRuntimeBackend(DirectoryGuard(tmp_path), durable=False)


def _log(tmp_path: Path) -> Path:
    (path,) = tmp_path.rglob("p1.jsonl")
    return path


def test_a_long_last_line_is_marked_by_its_ends_and_read_on_from(backend: FileRuntimeBackend) -> None:
    backend.append_plan_steps(SCOPE, "p1", [{"n": 1}, {"n": 2, "big": LONG}])
    first = backend.read_plan_steps(SCOPE, "p1")
    assert [step["n"] for step in first.steps] == [1, 2]
    assert first.cursor.rsplit(":", 1)[1].startswith("w")  # not a hash of the 100 KB line
    backend.append_plan_steps(SCOPE, "p1", [{"n": 3}])
    later = backend.read_plan_steps(SCOPE, "p1", first.cursor)
    assert not later.restarted
    assert [step["n"] for step in later.steps] == [3]


def test_a_whole_line_mark_of_an_older_snapshot_still_continues(backend: FileRuntimeBackend, tmp_path: Path) -> None:
    backend.append_plan_steps(SCOPE, "p1", [{"n": 1}, {"n": 2, "big": LONG}])
    cursor = backend.read_plan_steps(SCOPE, "p1").cursor
    dev, ino, start, end, _ = cursor.split(":")
    line = _log(tmp_path).read_bytes()[int(start) : int(end)]
    older = f"{dev}:{ino}:{start}:{end}:{hashlib.blake2b(line, digest_size=16).hexdigest()}"
    backend.append_plan_steps(SCOPE, "p1", [{"n": 3}])
    later = backend.read_plan_steps(SCOPE, "p1", older)
    assert not later.restarted
    assert [step["n"] for step in later.steps] == [3]


@pytest.mark.parametrize("where", ["head", "tail"])
def test_a_long_line_changed_in_place_reads_the_log_again(
    backend: FileRuntimeBackend, tmp_path: Path, where: str
) -> None:
    """Same file, same offsets, another line there (a log written anew on a reused inode): the
    ends the mark hashed differ, so the whole log is read again."""
    backend.append_plan_steps(SCOPE, "p1", [{"n": 1}, {"n": 2, "big": LONG}])
    cursor = backend.read_plan_steps(SCOPE, "p1").cursor
    path = _log(tmp_path)
    data = bytearray(path.read_bytes())
    old, new = (b'"n":2', b'"n":7') if where == "head" else (b"xxxx", b"yyyy")
    at = data.index(old) if where == "head" else data.rindex(old)
    data[at : at + len(old)] = new
    with path.open("r+b") as handle:  # in place: the file's identity stays
        handle.write(bytes(data))
    again = backend.read_plan_steps(SCOPE, "p1", cursor)
    assert again.restarted
    assert len(again.steps) == 2
