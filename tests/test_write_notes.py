"""``knowledge.write_notes``: many notes of one user in one go, on files, in memory and on PostgreSQL.

Every note is searchable from a fresh process and held by the stored index; a bad name or text
anywhere in the batch refuses all of it before anything is written; the index is written once
per batch; two processes loading two users at once lose nothing.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from local_ai_memory import InvalidInputError, Memory, MemoryConfig, PathEscapeError
from local_ai_memory._knowledge.index import KnowledgeIndex
from local_ai_memory.backends import InMemoryKnowledgeBackend, InMemoryRuntimeBackend, KnowledgeBackend

SRC = str(Path(__file__).resolve().parents[1] / "src")


def _text(user: str, n: int) -> str:
    return f"# Note {n} of {user}\n\nversion tok{user}{n}x words about loading\n"


@pytest.fixture(params=["files", "memory", "postgres"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """How to open the same store again: keyword arguments of :class:`MemoryConfig` (and, in
    memory, the one backend object, since process memory cannot be reopened elsewhere)."""
    if request.param == "files":
        yield {"kind": "files", "config": {"runtime_data_dir": str(tmp_path / "data"), "fsync": False}}
    elif request.param == "memory":
        yield {"kind": "memory", "backend": InMemoryKnowledgeBackend()}
    else:
        url = request.getfixturevalue("postgres_url")
        schema = request.getfixturevalue("postgres_schema")
        config = {"database_url": url, "database_schema": schema, "runtime_data_dir": str(tmp_path / "rt")}
        yield {"kind": "postgres", "config": config}


def _open(where: dict[str, Any]) -> Memory:
    if where["kind"] == "memory":
        return Memory(MemoryConfig(), runtime=InMemoryRuntimeBackend(), knowledge=where["backend"])
    return Memory(MemoryConfig(**where["config"]))


def check_users(memory: Memory, users: list[str], count: int) -> dict[str, list[str]]:
    """The notes ``n0``..``n{count-1}`` of each user that the stored index (as a new host loads
    it, before any query) lacks, and those a search of their token does not find."""
    out: dict[str, list[str]] = {"unindexed": [], "unfound": []}
    backend = memory.knowledge.store.backend
    for user in users:
        stored = KnowledgeIndex(backend, ("knowledge",), threading.RLock(), user).load_stored()
        entries = stored[0] if stored is not None else {}
        for n in range(count):
            name = f"{user}_n{n}.md"
            if ("knowledge", name) not in entries:
                out["unindexed"].append(name)
            if [h.filename for h in memory.knowledge.search(f"tok{user}{n}x", user, k=3)] != [name]:
                out["unfound"].append(name)
    return out


FRESH = textwrap.dedent(
    """
    import json, sys
    sys.path.insert(0, sys.argv[4])
    from test_write_notes import check_users
    from local_ai_memory import Memory, MemoryConfig
    config, users, count = json.loads(sys.argv[1]), sys.argv[2].split(","), int(sys.argv[3])
    with Memory(MemoryConfig(**config)) as memory:
        print(json.dumps(check_users(memory, users, count)))
    """
)


def _fresh_check(where: dict[str, Any], users: list[str], count: int) -> dict[str, list[str]]:
    """:func:`check_users` in a new process (in memory: a new ``Memory`` on the same backend)."""
    import json

    if where["kind"] == "memory":
        return check_users(_open(where), users, count)
    env = {**os.environ, "PYTHONPATH": SRC}
    here = str(Path(__file__).resolve().parent)
    done = subprocess.run(
        [sys.executable, "-c", FRESH, json.dumps(where["config"]), ",".join(users), str(count), here],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout))


class _Counting:
    """Counts the calls a backend gets (a real backend: every call goes through to it)."""

    def __init__(self, backend: KnowledgeBackend) -> None:
        self.calls: list[str] = []
        for method in ("write_note", "write_note_with", "write_notes", "append_blob", "rewrite_blobs", "write_blob"):
            real = getattr(backend, method)
            setattr(backend, method, self._spy(method, real))

    def _spy(self, method: str, real: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(method)
            return real(*args, **kwargs)

        return call


def test_every_note_of_a_batch_is_indexed_and_found_from_a_fresh_process(where: dict[str, Any]) -> None:
    memory = _open(where)
    try:
        memory.knowledge.write_note("alice", "n0", _text("alice", 0))  # the index exists: a batch extends it
        names = memory.knowledge.write_notes("alice", {f"n{n}": _text("alice", n) for n in range(1, 60)})
        assert names == [f"alice_n{n}.md" for n in range(1, 60)]
        assert [h.filename for h in memory.knowledge.search("tokalice37x", "alice")] == ["alice_n37.md"]
        assert memory.knowledge.read_note("alice", "n12") == _text("alice", 12)
    finally:
        memory.close()
    assert _fresh_check(where, ["alice"], 60) == {"unindexed": [], "unfound": []}


def test_a_batch_writes_its_notes_at_once_and_the_index_once(where: dict[str, Any]) -> None:
    memory = _open(where)
    try:
        backend = memory.knowledge.store.backend
        for n in range(3):
            memory.knowledge.write_note("alice", f"n{n}", _text("alice", n))
        spy = _Counting(backend)
        memory.knowledge.write_notes("alice", {f"n{n}": _text("alice", n) for n in range(3, 50)})
        index_writes = [call for call in spy.calls if call in ("append_blob", "rewrite_blobs")]
        assert spy.calls.count("write_notes") == 1, spy.calls
        assert "write_note_with" not in spy.calls
        assert len(index_writes) == 1, spy.calls  # one journal append (or one snapshot) for 47 notes
        if where["kind"] == "postgres":
            assert "write_note" not in spy.calls  # one transaction, not one per note
    finally:
        memory.close()


@pytest.mark.parametrize(
    "bad", [{"../escape": "text"}, {"": "text"}, {"fine2": "lone \ud800 surrogate"}, {"fine2": b"bytes"}]
)
def test_one_bad_note_refuses_the_whole_batch_before_anything_is_written(
    where: dict[str, Any], bad: dict[str, Any]
) -> None:
    memory = _open(where)
    try:
        batch = {"fine0": _text("alice", 0), "fine1": _text("alice", 1), **bad, "fine3": _text("alice", 3)}
        with pytest.raises((InvalidInputError, PathEscapeError)):  # what write_note raises for each
            memory.knowledge.write_notes("alice", batch)
        assert memory.knowledge.notes("alice") == []
        assert memory.knowledge.store.backend.list_notes("knowledge") == {}
    finally:
        memory.close()


def test_a_name_given_twice_refuses_the_batch(where: dict[str, Any]) -> None:
    memory = _open(where)
    try:
        with pytest.raises(InvalidInputError, match="twice"):
            memory.knowledge.write_notes("alice", {"tea": "a", "tea.md": "b"})  # one file name
        with pytest.raises(InvalidInputError, match="category among"):
            memory.knowledge.write_notes("alice", {"tea": "a"}, category="nowhere")
        assert memory.knowledge.notes("alice") == []
    finally:
        memory.close()


def test_the_async_twin_writes_the_same_batch(where: dict[str, Any]) -> None:
    memory = _open(where)
    try:
        names = asyncio.run(memory.knowledge.awrite_notes("bob", {f"n{n}": _text("bob", n) for n in range(10)}))
        assert names == [f"bob_n{n}.md" for n in range(10)]
        assert [h.filename for h in memory.knowledge.search("tokbob7x", "bob")] == ["bob_n7.md"]
    finally:
        memory.close()


LOADER = textwrap.dedent(
    """
    import json, sys
    from local_ai_memory import Memory, MemoryConfig
    from local_ai_memory._knowledge import index as index_module
    index_module.JOURNAL_MIN = 16  # batches both append and compact
    config, user = json.loads(sys.argv[1]), sys.argv[2]
    memory = Memory(MemoryConfig(**config))
    for batch in range(8):
        numbers = range(batch * 25, batch * 25 + 25)
        notes = {f"n{n}": f"# Note {n} of {user}\\n\\nversion tok{user}{n}x words\\n" for n in numbers}
        memory.knowledge.write_notes(user, notes)
    memory.close()
    """
)


@pytest.mark.parametrize("kind", ["files", "postgres"])
def test_two_processes_loading_two_users_at_once_lose_nothing(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    import json

    if kind == "files":
        config: dict[str, Any] = {"runtime_data_dir": str(tmp_path / "data"), "fsync": False}
    else:
        config = {
            "database_url": request.getfixturevalue("postgres_url"),
            "database_schema": request.getfixturevalue("postgres_schema"),
            "runtime_data_dir": str(tmp_path / "rt"),
        }
    env = {**os.environ, "PYTHONPATH": SRC, "LOCAL_AI_MEMORY_AUTO_WATCH": "false"}
    loaders = [
        subprocess.Popen(
            [sys.executable, "-c", LOADER, json.dumps(config), user],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for user in ("alice", "bob")
    ]
    outputs = [loader.communicate(timeout=300) for loader in loaders]
    assert all(loader.returncode == 0 for loader in loaders), [err[-2000:] for _, err in outputs]
    assert _fresh_check({"kind": kind, "config": config}, ["alice", "bob"], 200) == {"unindexed": [], "unfound": []}


def test_import_notes_loads_each_category_in_batches(tmp_path: Path) -> None:
    source = Memory.open(tmp_path / "source")
    for user in ("alice", "bob"):
        source.knowledge.write_notes(user, {f"n{n}": _text(user, n) for n in range(30)})
    source.export_notes(tmp_path / "folder")
    backend = InMemoryKnowledgeBackend()
    spy = _Counting(backend)
    target = Memory(MemoryConfig(), runtime=InMemoryRuntimeBackend(), knowledge=backend)
    assert target.import_notes(tmp_path / "folder") == 60
    assert spy.calls.count("write_notes") == 1  # the category's 60 notes in one call (in memory: a loop inside)
    assert [h.filename for h in target.knowledge.search("tokbob29x", "bob")] == ["bob_n29.md"]
