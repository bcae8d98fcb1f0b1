"""The index journal: a write stores its note's entry, not the whole index (issue 26).

Covers: one write appends one journal line and writes no snapshot; a new process reads the
snapshot plus the journal (deletes and edits included) without re-reading notes; compaction
past the bound, keeping another writer's lines; a torn or foreign journal is skipped and the
listing comparison finds what it missed; a 0.2 (v3) folder opens as it is and its first write
migrates it; SIGKILL at random points of writes on files and on PostgreSQL leaves the index
consistent with the notes after the next query.
"""

from __future__ import annotations

import gc
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from local_ai_memory import close_shared_stores
from local_ai_memory._knowledge import index as index_module
from local_ai_memory._knowledge.index import INDEX_NAME, JOURNAL_NAME, index_names, journal_bound
from local_ai_memory._knowledge.index_file import parse_index, serialize_index, stored_entries
from local_ai_memory._knowledge.store import MemoryStore
from local_ai_memory._shared.config import MemoryConfig
from local_ai_memory._shared.naming import DirectoryGuard
from local_ai_memory.backends import FileKnowledgeBackend, InMemoryKnowledgeBackend

CONFIG = MemoryConfig(fsync=False)
SRC = str(Path(__file__).resolve().parents[1] / "src")


def _store(root: Path) -> MemoryStore:
    return MemoryStore(FileKnowledgeBackend(DirectoryGuard(root), CONFIG), CONFIG, categories=["knowledge"])


def _fresh(root: Path) -> MemoryStore:
    """A store as a new process would open it (no per-folder state shared with earlier stores)."""
    close_shared_stores()
    return _store(root)


ALICE_INDEX, ALICE_JOURNAL = index_names("alice")
"""The blobs of alice's index (most tests here write her notes only)."""
CRASH_INDEX, CRASH_JOURNAL = index_names("crash")
"""The blobs of the index of the crash tests' user."""


def _stored(root: Path) -> list[Any]:
    """Every entry of every owner's stored index under ``root``'s data folder."""
    found: list[Any] = []
    for snapshot in sorted((root / "memory_data" / ".index").glob("*_index.json")):
        journal = snapshot.with_suffix(".journal")
        found.extend(stored_entries(snapshot.read_bytes(), journal.read_bytes() if journal.exists() else None))
    return found


def _note(n: int) -> str:
    return f"# Note {n}\n\nThe word tok{n}x marks this note, among ordinary words about tea and gardens.\n"


def test_a_write_appends_its_entry_and_writes_no_snapshot(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.write_file("knowledge/alice_n0.md", _note(0))  # a user's first write writes their snapshot
    snapshots, journal = store.index_writes, tmp_path / "memory_data" / ALICE_JOURNAL
    size = journal.stat().st_size
    for n in range(1, 40):
        store.write_file(f"knowledge/alice_n{n}.md", _note(n))
    assert store.index_writes == snapshots  # 39 more writes, 39 more lines, no snapshot
    assert len(journal.read_bytes().split(b"\n")) == 40  # the header and one line per later write
    assert journal.stat().st_size > size
    assert {e.filename for e in _stored(tmp_path)} == {f"alice_n{n}.md" for n in range(40)}


def test_a_new_process_reads_snapshot_and_journal_with_edits_and_deletes(tmp_path: Path) -> None:
    store = _store(tmp_path)
    for n in range(30):
        store.write_file(f"knowledge/alice_n{n}.md", _note(n))
    store.write_file("knowledge/alice_n3.md", _note(1003))  # an edit
    store.delete_file("knowledge/alice_n4.md")
    assert store.bm25_search("tok5x", user_id="alice") == ["alice_n5.md"]  # a ranker, snapshotted below
    fresh = _fresh(tmp_path)
    reads = []
    original = fresh.backend.read_note_head
    fresh.backend.read_note_head = lambda *a: reads.append(a) or original(*a)  # type: ignore[method-assign]
    assert fresh.bm25_search("tok1003x", user_id="alice") == ["alice_n3.md"]
    # The first query reads each note at most once: the notes written within the timestamp
    # tick are checked by content (until the tick is over), and the ranker comes from its snapshot.
    assert len(reads) <= 30
    assert fresh.bm25_search("tok3x", user_id="alice") == []
    assert fresh.bm25_search("tok4x", user_id="alice") == []
    assert fresh.bm25_search("tok29x", user_id="alice") == ["alice_n29.md"]
    assert fresh.index_reads == 1
    assert fresh.find_entry("alice_n4.md") is None


def test_closing_a_folder_before_its_watcher_starts_snapshots_its_changed_rankers(tmp_path: Path) -> None:
    # The automatic watcher starts a moment after a query, and its stop snapshotted the
    # rankers; a folder closed before that (here: never watched) left them unsaved, so the next
    # process re-read every note ranked since the last snapshot (a CI failure of the test above).
    config = CONFIG.replace(auto_watch=False)
    store = MemoryStore(FileKnowledgeBackend(DirectoryGuard(tmp_path), config), config, categories=["knowledge"])
    for n in range(10):
        store.write_file(f"knowledge/alice_n{n}.md", _note(n))
    assert store.bm25_search("tok5x", user_id="alice") == ["alice_n5.md"]  # built and snapshotted
    for n in range(10, 20):  # ranked in memory, after that snapshot
        store.write_file(f"knowledge/alice_n{n}.md", _note(n))
    assert store.bm25_search("tok15x", user_id="alice") == ["alice_n15.md"]
    close_shared_stores()
    fresh = MemoryStore(FileKnowledgeBackend(DirectoryGuard(tmp_path), config), config, categories=["knowledge"])
    batches: list[list[str]] = []
    original = fresh.backend.read_note_heads
    fresh.backend.read_note_heads = lambda c, names, size: batches.append(list(names)) or original(c, names, size)  # type: ignore[method-assign]
    assert fresh.bm25_search("tok17x", user_id="alice") == ["alice_n17.md"]
    assert batches == []  # the ranker came whole from its snapshot: no note read to rebuild it


def test_the_journal_is_folded_into_a_snapshot_past_its_bound(tmp_path: Path) -> None:
    store = _store(tmp_path)
    bound = journal_bound(0)
    for n in range(bound + 10):
        store.write_file(f"knowledge/alice_n{n}.md", _note(n))
    assert store.index_writes == 2  # the first write, then one compaction
    journal = (tmp_path / "memory_data" / ALICE_JOURNAL).read_bytes()
    assert len(journal.split(b"\n")) < 20
    snapshot = json.loads((tmp_path / "memory_data" / ALICE_INDEX).read_bytes())
    assert snapshot["index_version"] == 4
    assert json.loads(journal.split(b"\n")[0])["journal"] == snapshot["journal"]
    assert len(_stored(tmp_path)) == bound + 10
    # The compaction snapshotted the writer's ranker: a new process re-reads only the notes since.
    assert (tmp_path / "memory_data" / ".bm25" / "knowledge" / "alice_bm25.npz").exists()


def test_compaction_keeps_lines_another_writer_appended() -> None:
    backend = InMemoryKnowledgeBackend()
    first = MemoryStore(backend, CONFIG, categories=["knowledge"])
    first.write_file("knowledge/alice_a.md", _note(1))
    second = MemoryStore(backend, CONFIG, categories=["knowledge"])  # another process: its own index
    second.ensure_index()
    assert second.bm25_search("tok1x", user_id="alice") == ["alice_a.md"]  # alice's index loaded there
    first.write_file("knowledge/alice_b.md", _note(2))  # a line second does not have in memory
    for n in range(journal_bound(0) + 5):  # second compacts alice's journal
        second.write_file(f"knowledge/alice_n{n}.md", _note(100 + n))
    assert second.index_writes >= 1
    names = {e.filename for e in MemoryStore(backend, CONFIG, categories=["knowledge"]).read_index().files}
    assert {"alice_a.md", "alice_b.md"} <= names
    snapshot = parse_index(backend.read_blob(ALICE_INDEX) or b"")[1]
    assert snapshot is not None
    assert "alice_b.md" in {e.filename for e in snapshot.files}


def _alternate(first: MemoryStore, second: MemoryStore, count: int) -> None:
    """Two writers, each with its own index in memory, write ``count`` notes each, in turns."""
    for n in range(count):
        first.write_file(f"knowledge/alice_n{n}.md", _note(n))
        second.write_file(f"knowledge/bob_n{n}.md", _note(10_000 + n))


def test_two_writers_in_turns_keep_every_entry_in_the_stored_index() -> None:
    # 0.3 lost 257 of these 600: a compaction wrote its own view plus a journal whose header it
    # knew, dropping the entries the other writer had folded into a snapshot of its own.
    backend = InMemoryKnowledgeBackend()
    first = MemoryStore(backend, CONFIG, categories=["knowledge"])
    second = MemoryStore(backend, CONFIG, categories=["knowledge"])
    _alternate(first, second, 300)
    assert first.index_writes >= 1  # both folded the journal into a snapshot
    assert second.index_writes >= 1
    stored = MemoryStore(backend, CONFIG, categories=["knowledge"]).read_index().files
    assert len(stored) == 600


def test_two_postgres_hosts_in_turns_keep_every_entry_in_the_stored_index(
    tmp_path: Path, postgres_url: str, postgres_schema: str
) -> None:
    from local_ai_memory import Memory

    def host(name: str) -> Memory:
        return Memory(
            MemoryConfig(
                database_url=postgres_url,
                database_schema=postgres_schema,
                runtime_data_dir=tmp_path / name,
                fsync=False,
            )
        )

    first, second = host("a"), host("b")
    try:
        _alternate(first.knowledge.store, second.knowledge.store, 300)
        fresh = host("c")
        try:
            assert len(fresh.knowledge.store.read_index().files) == 600
        finally:
            fresh.close()
    finally:
        first.close()
        second.close()


_WRITER = """
import sys
from local_ai_memory._knowledge.store import MemoryStore
from local_ai_memory._shared.config import MemoryConfig
from local_ai_memory._shared.naming import DirectoryGuard
from local_ai_memory.backends import FileKnowledgeBackend

config = MemoryConfig(fsync=False, auto_watch=False)
root, user = sys.argv[1], sys.argv[2]
store = MemoryStore(FileKnowledgeBackend(DirectoryGuard(root), config), config, categories=["knowledge"])
for n in range(300):
    store.write_file(f"knowledge/{user}_n{n}.md", "# Note %d\\n\\ntok%dx words" % (n, n))
print(store.index_writes)
"""


def test_two_writer_processes_on_one_folder_keep_every_entry_in_the_stored_index(tmp_path: Path) -> None:
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(tmp_path), user],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for user in ("alice", "bob")
    ]
    outputs = [writer.communicate(timeout=240) for writer in writers]
    assert all(writer.returncode == 0 for writer in writers), [err[-2000:] for _, err in outputs]
    snapshots = [int(out) for out, _ in outputs]
    assert min(snapshots) >= 1  # both folded the journal into a snapshot at least once
    assert len(_stored(tmp_path)) == 600


@pytest.mark.parametrize("damage", ["torn tail", "foreign header", "garbage line"])
def test_a_damaged_journal_loses_nothing(tmp_path: Path, damage: str) -> None:
    store = _store(tmp_path)
    for n in range(12):
        store.write_file(f"knowledge/alice_n{n}.md", _note(n))
    journal = tmp_path / "memory_data" / ALICE_JOURNAL
    data = journal.read_bytes()
    if damage == "torn tail":
        journal.write_bytes(data[:-25])
    elif damage == "foreign header":
        journal.write_bytes(b'{"journal":"someone-else","index_version":4}\n' + data.split(b"\n", 1)[1])
    else:
        lines = data.split(b"\n")
        journal.write_bytes(b"\n".join([*lines[:3], b'{"k": [1', *lines[3:]]))
    fresh = _fresh(tmp_path)
    for n in range(12):
        assert fresh.bm25_search(f"tok{n}x", user_id="alice") == [f"alice_n{n}.md"]
    fresh.write_file("knowledge/alice_more.md", _note(99))
    assert {e.filename for e in _fresh(tmp_path).read_index().files} >= {f"alice_n{n}.md" for n in range(12)}


def _shared_index_folder(root: Path, count: int, version: int) -> list[Any]:
    """A folder of alice's and bob's ``count`` notes each as 0.2 (``version`` 3, no journal id)
    or 0.3 (4) left it: one ``memory_index.json`` of every owner, no index per owner. Its entries."""
    store = _store(root)
    for n in range(count):
        store.write_file(f"knowledge/alice_n{n}.md", _note(n))
        store.write_file(f"knowledge/bob_n{n}.md", _note(1000 + n))
    entries = store.read_index().files
    close_shared_stores()
    data = root / "memory_data"
    for blob in (data / ".index").iterdir():
        blob.unlink()
    body = json.loads(serialize_index(list(entries), time.time()))
    body["index_version"] = version
    if version == 3:
        body.pop("journal", None)
    for entry in body["files"]:  # settled long ago (a hash left would be cleared, and written, by the query)
        entry.pop("content_hash", None)
    (data / INDEX_NAME).write_text(json.dumps(body))
    return list(entries)


def test_a_0_2_folder_opens_as_it_is_and_its_first_write_migrates_it(tmp_path: Path, events: Any) -> None:
    _shared_index_folder(tmp_path, 20, version=3)
    data = tmp_path / "memory_data"
    old = _fresh(tmp_path)
    events.records.clear()
    assert old.bm25_search("tok7x", user_id="alice") == ["alice_n7.md"]
    assert "INDEX_REBUILT" not in events.names()  # alice's rows read as they are, not rebuilt from the notes
    assert not (data / ALICE_INDEX).exists()  # a query writes nothing
    old.write_file("knowledge/alice_new.md", _note(500))
    migrated = json.loads((data / ALICE_INDEX).read_bytes())
    assert migrated["index_version"] == 4
    assert isinstance(migrated["journal"], str)
    assert {e["filename"] for e in migrated["files"]} == {f"alice_n{n}.md" for n in range(20)} | {"alice_new.md"}
    assert json.loads((data / INDEX_NAME).read_bytes())["index_version"] == 3  # bob's rows still read from there
    assert not (data / JOURNAL_NAME).exists()
    assert _fresh(tmp_path).bm25_search("tok500x", user_id="alice") == ["alice_new.md"]
    assert _fresh(tmp_path).bm25_search("tok1007x", user_id="bob") == ["bob_n7.md"]


def test_migrate_moves_every_owner_of_a_0_3_folder_and_deletes_the_shared_index(tmp_path: Path, events: Any) -> None:
    entries = _shared_index_folder(tmp_path, 15, version=4)
    data = tmp_path / "memory_data"
    events.records.clear()
    assert _fresh(tmp_path).migrate_index() == 2
    assert "INDEX_REBUILT" not in events.names()  # moved from the shared index, not rebuilt from the notes
    assert not (data / INDEX_NAME).exists()
    assert {e.filename for e in _stored(tmp_path)} == {e.filename for e in entries}
    assert _fresh(tmp_path).migrate_index() == 0  # nothing left to move
    fresh = _fresh(tmp_path)
    assert fresh.bm25_search("tok1007x", user_id="bob") == ["bob_n7.md"]
    assert fresh.bm25_search("tok7x", user_id="alice") == ["alice_n7.md"]


# -- crashes -----------------------------------------------------------------------------------
WRITER = textwrap.dedent(
    """
    import random, sys
    from pathlib import Path
    from local_ai_memory._knowledge import index as index_module
    from local_ai_memory._knowledge.store import MemoryStore
    from local_ai_memory._shared.config import MemoryConfig
    index_module.JOURNAL_MIN = 6  # compactions every few writes: kills land in them too
    kind, where, start = sys.argv[1], sys.argv[2], int(sys.argv[3])
    config = MemoryConfig(fsync=True)
    if kind == "files":
        from local_ai_memory._shared.naming import DirectoryGuard
        from local_ai_memory.backends import FileKnowledgeBackend
        backend = FileKnowledgeBackend(DirectoryGuard(Path(where)), config)
    else:
        from local_ai_memory.backends import PostgresKnowledgeBackend
        url, schema = where.split("|")
        backend = PostgresKnowledgeBackend(url, schema=schema)
    store = MemoryStore(backend, config, categories=["knowledge"])
    store.ensure_index()
    print("ready", flush=True)
    rng = random.Random(start)
    for n in range(start, start + 100000):
        slot = rng.randrange(12)
        if rng.random() < 0.15:
            store.delete_file(f"knowledge/crash_s{slot}.md")
        else:
            store.write_file(f"knowledge/crash_s{slot}.md", f"# Slot {slot}\\n\\nversion tok{n}x of slot {slot}\\n")
        if rng.random() < 0.1:
            store.bm25_search(f"tok{n}x", user_id="crash")
    """
)


def _crash_rounds(kind: str, where: str, check: Any, rounds: int) -> None:
    rng = random.Random(26)
    env = {**os.environ, "PYTHONPATH": SRC, "LOCAL_AI_MEMORY_AUTO_WATCH": "false"}
    for round_ in range(rounds):
        child = subprocess.Popen(
            [sys.executable, "-c", WRITER, kind, where, str(round_ * 100000)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready", child.stderr.read() if child.stderr else ""
        time.sleep(rng.uniform(0.02, 0.6))
        child.send_signal(signal.SIGKILL)
        _, errors = child.communicate()
        assert "Traceback" not in errors, errors  # killed in its loop, never failed by itself
        check()


def _check_consistent(store: MemoryStore, on_disk: dict[str, str]) -> None:
    """After one query: every note on disk is indexed at its current version and findable by its
    token, and nothing is indexed that is not on disk."""
    for name, text in sorted(on_disk.items()):
        token = text.split("version ", 1)[1].split()[0]
        assert store.bm25_search(token, user_id="crash") == [name], (name, token)
    indexed = {e.filename: e for e in store.read_index().files}
    assert set(indexed) == set(on_disk)


def test_kills_during_writes_leave_the_file_index_consistent(tmp_path: Path) -> None:
    def check() -> None:
        data = tmp_path / "memory_data"
        if (data / CRASH_INDEX).exists():
            assert parse_index((data / CRASH_INDEX).read_bytes())[0] == "ok"
            _stored(tmp_path)  # snapshot plus journal always load
        folder = data / "knowledge"
        on_disk = {p.name: p.read_text() for p in folder.glob("*.md")} if folder.exists() else {}
        _check_consistent(_fresh(tmp_path), on_disk)

    _crash_rounds("files", str(tmp_path), check, rounds=10)


def test_kills_during_writes_leave_the_postgres_index_consistent(postgres_url: str, postgres_schema: str) -> None:
    from local_ai_memory.backends import PostgresKnowledgeBackend

    def check() -> None:
        backend = PostgresKnowledgeBackend(postgres_url, schema=postgres_schema)
        try:
            snapshot = backend.read_blob(CRASH_INDEX)
            if snapshot is not None:
                assert parse_index(snapshot)[0] == "ok"
                stored_entries(snapshot, backend.read_blob(CRASH_JOURNAL))
            on_disk = {}
            for name in backend.list_notes("knowledge"):
                on_disk[name] = (backend.read_note("knowledge", name) or b"").decode()
            _check_consistent(MemoryStore(backend, CONFIG, categories=["knowledge"]), on_disk)
        finally:
            backend.close()

    _crash_rounds("postgres", f"{postgres_url}|{postgres_schema}", check, rounds=6)


KILLED_AT = textwrap.dedent(
    """
    import os, random, signal, sys
    from local_ai_memory._knowledge import index as index_module
    from local_ai_memory._knowledge.store import MemoryStore
    from local_ai_memory._shared.config import MemoryConfig
    from local_ai_memory.backends import PostgresKnowledgeBackend
    index_module.JOURNAL_MIN = 6  # compactions every few writes, between the journaled ones
    url, schema, op, point = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
    at, start = int(sys.argv[5]), int(sys.argv[6])
    backend = PostgresKnowledgeBackend(url, schema=schema)
    calls = {"with": 0}
    inside = []

    def die():
        os.kill(os.getpid(), signal.SIGKILL)

    def counted(real):
        def call(*args, **kwargs):
            calls["with"] += 1
            inside.append(calls["with"] == at)
            try:
                done = real(*args, **kwargs)
            finally:
                inside.pop()
            if inside == [] and calls["with"] == at and point == "after commit":
                die()
            return done
        return call

    def around(real):  # the note's own statement(s): the write, or the delete
        def statement(*args, **kwargs):
            if inside and inside[-1] and point == "before the note":
                die()
            done = yield from real(*args, **kwargs)
            if inside and inside[-1] and point == "between note and line":
                die()
            return done
        return statement

    real_append = backend._append_blob

    def append(*args, **kwargs):
        yield from real_append(*args, **kwargs)
        if inside and inside[-1] and point == "before commit":
            die()

    if op == "write":
        backend.write_note_with, backend._write = counted(backend.write_note_with), around(backend._write)
    else:
        backend.delete_note_with, backend._delete = counted(backend.delete_note_with), around(backend._delete)
    backend._append_blob = append
    store = MemoryStore(backend, MemoryConfig(), categories=["knowledge"])
    store.ensure_index()
    present = set(backend.list_notes("knowledge"))
    rng = random.Random(start)
    for n in range(start, start + 1000):
        slot = rng.randrange(12)
        name = f"crash_s{slot}.md"
        if name in present and rng.random() < (0.15 if op == "write" else 0.4):
            store.delete_file(f"knowledge/{name}")  # deletes of notes that exist: each has a line
            present.discard(name)
        else:
            store.write_file(f"knowledge/{name}", f"# Slot {slot}\\n\\nversion tok{n}x of slot {slot}\\n")
            present.add(name)
    print("not killed", calls, flush=True)
    """
)


@pytest.mark.parametrize("op", ["write", "delete"])
@pytest.mark.parametrize("point", ["before the note", "between note and line", "before commit", "after commit"])
def test_a_kill_inside_a_postgres_note_write_leaves_note_and_line_together(
    postgres_url: str, postgres_schema: str, point: str, op: str
) -> None:
    """SIGKILL at a point of a note write (or delete) that stores its journal line with the
    note: the stored index (snapshot and journal, read as a new process reads them, before any
    query compares listings) holds exactly the stored notes at their versions; the next query
    finds them all."""
    from local_ai_memory.backends import PostgresKnowledgeBackend

    rng = random.Random(f"{op} {point}")
    env = {**os.environ, "PYTHONPATH": SRC, "LOCAL_AI_MEMORY_AUTO_WATCH": "false"}
    for round_ in range(4):
        at = rng.randrange(1, 30 if op == "write" else 12)
        args = [postgres_url, postgres_schema, op, point, str(at), str(round_ * 1000)]
        done = subprocess.run(
            [sys.executable, "-c", KILLED_AT, *args], capture_output=True, text=True, env=env, timeout=120
        )
        assert done.returncode == -signal.SIGKILL, (done.stdout, done.stderr)
        backend = PostgresKnowledgeBackend(postgres_url, schema=postgres_schema)
        try:
            snapshot = backend.read_blob(CRASH_INDEX)
            assert snapshot is not None
            stored = stored_entries(snapshot, backend.read_blob(CRASH_JOURNAL))
            notes = backend.list_notes("knowledge")
            assert {e.filename: e.mtime_ns for e in stored} == {name: info.version for name, info in notes.items()}
            on_disk = {name: (backend.read_note("knowledge", name) or b"").decode() for name in notes}
            _check_consistent(MemoryStore(backend, CONFIG, categories=["knowledge"]), on_disk)
        finally:
            backend.close()


def test_a_write_stores_its_line_with_its_note() -> None:
    """Once the journal is open, a write hands its entry's line to the backend with the note
    (``write_note_with``): no separate append, no snapshot, and a new reader finds it."""
    backend = InMemoryKnowledgeBackend()
    store = MemoryStore(backend, CONFIG, categories=["knowledge"])
    store.write_file("knowledge/alice_n0.md", _note(0))  # the first write writes the snapshot
    calls: list[str] = []
    for method in ("write_note", "write_note_with", "update_note_with", "append_blob", "write_blob"):
        real = getattr(backend, method)
        setattr(backend, method, lambda *a, _real=real, _m=method: (calls.append(_m), _real(*a))[1])
    for n in range(1, 11):
        store.write_file(f"knowledge/alice_n{n}.md", _note(n))
    store.update_file("knowledge/alice_n3.md", lambda old: _note(1003))
    assert calls == ["write_note_with"] * 10 + ["update_note_with"]
    stored = {
        e.filename: e for e in stored_entries(backend.read_blob(ALICE_INDEX) or b"", backend.read_blob(ALICE_JOURNAL))
    }
    assert set(stored) == {f"alice_n{n}.md" for n in range(11)}
    info = backend.note_info("knowledge", "alice_n3.md")
    assert info is not None
    assert (stored["alice_n3.md"].mtime_ns, stored["alice_n3.md"].title) == (info.version, "Note 1003")
    fresh = MemoryStore(backend, CONFIG, categories=["knowledge"])
    assert fresh.bm25_search("tok1003x", user_id="alice") == ["alice_n3.md"]
    assert fresh.bm25_search("tok7x", user_id="alice") == ["alice_n7.md"]


def test_a_delete_stores_its_line_with_its_delete() -> None:
    """Deletes go the same way (``delete_note_with``, the conditional one too): no separate
    append, and a new reader's stored index no longer holds the deleted notes."""
    backend = InMemoryKnowledgeBackend()
    store = MemoryStore(backend, CONFIG, categories=["knowledge"])
    for n in range(6):
        store.write_file(f"knowledge/alice_n{n}.md", _note(n))
    calls: list[str] = []

    def spy(method: str) -> Any:
        real = getattr(backend, method)

        def call(*args: Any) -> Any:
            calls.append(method)
            return real(*args)

        return call

    for method in ("delete_note", "delete_note_if", "delete_note_with", "append_blob", "write_blob"):
        setattr(backend, method, spy(method))
    assert store.delete_file("knowledge/alice_n1.md") is True
    assert store.delete_file_if("knowledge/alice_n2.md", lambda current: None) is True
    assert store.delete_file("knowledge/alice_n1.md") is False  # gone: nothing to append
    assert calls == ["delete_note_with"] * 3
    assert not store.dirty
    stored = stored_entries(backend.read_blob(ALICE_INDEX) or b"", backend.read_blob(ALICE_JOURNAL))
    assert {e.filename for e in stored} == {f"alice_n{n}.md" for n in (0, 3, 4, 5)}
    fresh = MemoryStore(backend, CONFIG, categories=["knowledge"])
    assert fresh.bm25_search("tok1x", user_id="alice") == []
    assert fresh.bm25_search("tok3x", user_id="alice") == ["alice_n3.md"]


def test_journal_bound_grows_with_the_index() -> None:
    assert journal_bound(0) == index_module.JOURNAL_MIN
    assert journal_bound(100_000) == 100_000 // index_module.JOURNAL_RATIO


# -- a new process after many writes -----------------------------------------------------------
MANY_WRITER = textwrap.dedent(
    """
    import os, signal, sys
    from local_ai_memory import Memory, MemoryConfig
    settings, count, ending = eval(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    memory = Memory(MemoryConfig(**settings))
    for n in range(count):
        memory.knowledge.write_note("many", f"n{n}", f"# Note {n}\\n\\nThe word tok{n}x marks note {n} about tea.\\n")
    if ending == "kill":
        os.kill(os.getpid(), signal.SIGKILL)  # no close: nothing settled, no last snapshot
    memory.close()
    """
)
COUNTING_READER = textwrap.dedent(
    """
    import json, sys
    from local_ai_memory import Memory, MemoryConfig
    from local_ai_memory._contracts.knowledge import KnowledgeBackend
    settings, token = eval(sys.argv[1]), sys.argv[2]
    memory = Memory(MemoryConfig(**settings))
    backend = memory.knowledge.store.backend
    reads = []
    for method in ("read_note", "read_note_head"):
        real = getattr(backend, method)
        setattr(backend, method, lambda c, n, *a, _real=real: (reads.append(n), _real(c, n, *a))[1])
    real_many = backend.read_note_heads
    batches = []

    def read_many(category, names, size):
        reads.extend(names)
        batches.append(len(names))
        return real_many(category, names, size)

    backend.read_note_heads = read_many
    found = [hit.filename for hit in memory.knowledge.search(token, "many", k=3)]
    print(json.dumps({"reads": len(reads), "distinct": len(set(reads)), "batches": len(batches), "found": found}))
    memory.close()
    """
)


def _first_query_reads(settings: dict[str, Any], count: int, ending: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": SRC, "LOCAL_AI_MEMORY_AUTO_WATCH": "false"}
    subprocess.run([sys.executable, "-c", MANY_WRITER, repr(settings), str(count), ending], env=env, check=False)
    done = subprocess.run(
        [sys.executable, "-c", COUNTING_READER, repr(settings), f"tok{count - 1}x"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.parametrize("ending", ["close", "kill"])
def test_a_new_process_reads_few_notes_after_many_writes_on_files(tmp_path: Path, ending: str) -> None:
    """Counted through the backend, not timed: a closed writer leaves no entry to re-hash (it
    settled them) and snapshots the rankers it changed, so nothing is read; a killed one leaves
    at most its last journal's notes to re-read, never all of them."""
    count = 600
    result = _first_query_reads({"runtime_data_dir": str(tmp_path), "fsync": False}, count, ending)
    assert result["found"][:1] == [f"many_n{count - 1}.md"]
    limit = 0 if ending == "close" else 2 * journal_bound(count)
    assert result["distinct"] <= limit, result  # (files read a batch note by note: counted twice)
    if ending == "close":
        assert "content_hash" not in "".join(json.dumps(e.model_dump(exclude_none=True)) for e in _stored(tmp_path))


@pytest.mark.parametrize("ending", ["close", "kill"])
def test_a_new_process_reads_few_notes_after_many_writes_on_postgres(
    tmp_path: Path, postgres_url: str, postgres_schema: str, ending: str
) -> None:
    """On PostgreSQL a closed writer leaves nothing to read (its rankers are snapshotted); after
    a killed one the notes a new process re-reads come in one query per batch, and few."""
    count = 300
    settings = {"runtime_data_dir": str(tmp_path), "database_url": postgres_url, "database_schema": postgres_schema}
    result = _first_query_reads(settings, count, ending)
    assert result["found"][:1] == [f"many_n{count - 1}.md"]
    assert result["reads"] <= (0 if ending == "close" else 2 * journal_bound(count)), result
    assert result["batches"] <= 2, result  # one query per batch of notes, not one per note


def test_the_racy_window_is_measured_and_falls_back_to_the_fixed_one(tmp_path: Path) -> None:
    from local_ai_memory._shared.fs import RACY_WINDOW_NS, measure_racy_window

    window = measure_racy_window(tmp_path)
    assert 0 < window <= RACY_WINDOW_NS
    assert list(tmp_path.iterdir()) == []  # the scratch files are gone
    assert measure_racy_window(tmp_path / "missing") == RACY_WINDOW_NS  # cannot measure: the fixed window
    assert measure_racy_window(tmp_path, budget_ns=0) == RACY_WINDOW_NS  # no tick seen in time


def test_an_edit_in_the_same_tick_is_seen_with_the_measured_window(tmp_path: Path) -> None:
    """The measured window does not weaken the rule: an entry written by this process keeps
    its content hash, so an edit of the same size that keeps the mtime is still found.

    The case is an edit within the note's tick (a later one gets a later mtime): on a loaded
    machine the tick (about a millisecond) can pass before the edit, the write's snapshot then
    settles the entry, and the forged mtime stands for an edit that cannot happen. Such a try
    is made again on a fresh folder; the edit of the first that lands in the tick is found."""
    for attempt in range(50):
        root = tmp_path / f"try{attempt}"
        store = _store(root)
        store.write_file("knowledge/alice_a.md", "# A\n\napples")
        path = root / "memory_data" / "knowledge" / "alice_a.md"
        st = path.stat()
        path.write_text("# A\n\nmelons")
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        if ("knowledge", "alice_a.md") in store._owner("alice").index.racy:  # still hashed: within the tick
            break
    else:
        pytest.fail("no edit landed within its note's tick in 50 tries")
    assert store.bm25_search("melons", user_id="alice") == ["alice_a.md"]


def _ranked(store: MemoryStore, queries: list[str]) -> list[list[tuple[str, float]]]:
    return [[(c.filename, c.score) for c in store.search(q, 10, user_id="alice")] for q in queries]


def test_a_new_process_takes_the_metadata_checksums_from_the_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ranker snapshot's rows are compared with the metadata checksums the index snapshot
    keeps (``meta``), not with checksums recomputed for every note; an entry changed since
    (metadata set by hand) gets its own, so its row is not reused."""
    store = _store(tmp_path)
    for n in range(40):
        store.write_file(f"knowledge/alice_n{n}.md", _note(n))
    store.bm25_search("tea", user_id="alice")
    # Past the last notes' timestamp tick, settled: an entry still hashed (racy) would be
    # re-checked, and so changed and checksummed, by the fresh store's first query.
    time.sleep(store.backend.racy_window_ns / 1e9 + 0.01)
    store.settle()
    assert not store._owner("alice").index.racy
    store._owner("alice").index.compact()  # a snapshot with every entry's checksum, and the ranker's
    store.save_rankers()
    queries = ["tea gardens", "tok7x", "ordinary words", "handset"]
    before = _ranked(store, queries)
    computed: list[str] = []
    original = index_module.metadata_checksum

    def counted(entry: Any) -> int:
        computed.append(entry.filename)
        return original(entry)

    monkeypatch.setattr(index_module, "metadata_checksum", counted)
    read: list[str] = []
    heads = FileKnowledgeBackend.read_note_heads

    def counted_heads(self: FileKnowledgeBackend, category: str, names: list[str], size: int) -> Any:
        read.extend(names)
        return heads(self, category, names, size)

    monkeypatch.setattr(FileKnowledgeBackend, "read_note_heads", counted_heads)
    fresh = _fresh(tmp_path)
    assert _ranked(fresh, queries) == before
    assert computed == []
    assert read == []  # every row of the ranker snapshot was taken as it is
    fresh.update_index_entry("alice_n3.md", "Handset", "set by hand", ["handset"], "knowledge")
    fresh.flush()
    after = _ranked(fresh, queries)
    assert after[3][0][0] == "alice_n3.md"
    computed.clear()
    again = _fresh(tmp_path)
    assert _ranked(again, queries) == after
    assert set(computed) <= {"alice_n3.md"}


@pytest.mark.parametrize("damage", ["short", "wrong", "not numbers"])
def test_snapshot_checksums_that_do_not_fit_are_not_trusted(tmp_path: Path, damage: str) -> None:
    """Checksums of another length or type are ignored, and wrong ones only make the ranker
    snapshot's rows mismatch (their notes are read again): the rankings stay exact."""
    store = _store(tmp_path)
    for n in range(30):
        store.write_file(f"knowledge/alice_n{n}.md", _note(n))
    store.bm25_search("tea", user_id="alice")
    store._owner("alice").index.compact()
    store.save_rankers()
    queries = ["tea gardens", "tok7x", "note 12"]
    before = _ranked(store, queries)
    path = tmp_path / "memory_data" / ALICE_INDEX
    body = json.loads(path.read_bytes())
    assert len(body["meta"]) == len(body["files"])
    if damage == "short":
        body["meta"] = body["meta"][:-3]
    elif damage == "wrong":
        body["meta"] = [crc ^ 1 for crc in body["meta"]]
    else:
        body["meta"] = ["x"] * len(body["files"])
    path.write_bytes(json.dumps(body).encode())
    fresh = _fresh(tmp_path)
    assert _ranked(fresh, queries) == before
    assert len(fresh.list_user_files("alice", "knowledge")) == 30


# -- the collector pause of bulk loads -----------------------------------------------------------
def test_a_fresh_process_loads_without_full_collections_inside_the_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The index load, the listing and the ranker snapshot run with the collector paused (their
    objects would otherwise set off full collections, each a walk over the whole process)."""
    store = _store(tmp_path)
    for n in range(30):
        store.write_file(f"knowledge/alice_n{n}.md", _note(n))
    store.save_rankers()
    close_shared_stores()
    fresh = _fresh(tmp_path)
    seen: list[bool] = []
    original = index_module.KnowledgeIndex.load_stored

    def spy(self: index_module.KnowledgeIndex) -> Any:
        seen.append(gc.isenabled())
        return original(self)

    monkeypatch.setattr(index_module.KnowledgeIndex, "load_stored", spy)
    assert fresh.bm25_search("tok7x", user_id="alice") == ["alice_n7.md"]
    assert seen == [False]
    assert gc.isenabled()
