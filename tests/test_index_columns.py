"""The index snapshot's columns and a fresh process's first query (issue 26).

Covers: a new process reads the snapshot's columns and decodes only the entries it reads;
columns that do not describe the bytes (a rewrite, a wrong CRC, garbage, another version) are
ignored and the snapshot is parsed whole, with the same entries and rankings; a compaction
copies the undecoded rows as stored; a snapshot without columns opens and its first write
adds them; a ranker snapshot's terms are looked up in their stored sorted order without a dict
of every term (and snapshots without that order, or with a broken one, still load); the ranker
snapshot read ahead while the listing is compared; the automatic watcher starts after the
first query, once, and not at all for a folder closed meanwhile.
"""

from __future__ import annotations

import json
import os
import threading
import time
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from local_ai_memory import close_shared_stores
from local_ai_memory._knowledge import bm25, index_file
from local_ai_memory._knowledge import index as index_module
from local_ai_memory._knowledge.bm25 import BM25Index, Vocabulary, pack_texts, read_snapshot, snapshot_bytes
from local_ai_memory._knowledge.index import EntryMap, index_names
from local_ai_memory._knowledge.index_file import IndexColumns, parse_columns, parse_index, stored_entries
from local_ai_memory._knowledge.store import MemoryStore
from local_ai_memory._shared.config import MemoryConfig
from local_ai_memory._shared.naming import DirectoryGuard, user_file_prefix
from local_ai_memory.backends import FileKnowledgeBackend, is_note_name, owner_of
from tests.conftest import EventLog

CONFIG = MemoryConfig(fsync=False)
QUERIES = ["tea gardens", "tok7x", "ordinary words", "note 12", "handset", "melons"]


def _store(root: Path, **settings: Any) -> MemoryStore:
    config = MemoryConfig(fsync=False, **settings)
    return MemoryStore(FileKnowledgeBackend(DirectoryGuard(root), config), config, categories=["knowledge"])


def _fresh(root: Path, **settings: Any) -> MemoryStore:
    """A store as a new process would open it (no per-folder state shared with earlier stores)."""
    close_shared_stores()
    return _store(root, **settings)


def _note(n: int) -> str:
    return f"# Note {n}\n\nThe word tok{n}x marks this note, among ordinary words about tea and gardens.\n"


def _ranked(store: MemoryStore) -> list[list[tuple[str, float]]]:
    return [[(c.filename, c.score) for c in store.search(q, 10, user_id="alice")] for q in QUERIES]


def _folder(root: Path, notes: int = 40) -> list[list[tuple[str, float]]]:
    """A folder of ``notes`` notes with a compacted index and ranker snapshot; its rankings."""
    store = _store(root)
    for n in range(notes):
        store.write_file(f"knowledge/alice_n{n}.md", _note(n))
    store.bm25_search("tea", user_id="alice")
    store.settle()  # the notes' timestamp tick is over: no content hashes in the snapshot
    store._owner("alice").index.compact()
    store.save_rankers()
    return _ranked(store)


def _index_path(root: Path, user: str = "alice") -> Path:
    return root / "memory_data" / index_names(user)[0]


def _entries(root: Path) -> list[dict[str, Any]]:
    journal = root / "memory_data" / index_names("alice")[1]
    found = stored_entries(_index_path(root).read_bytes(), journal.read_bytes() if journal.exists() else None)
    return [e.model_dump() for e in found]


def test_a_new_process_decodes_only_the_entries_it_reads(tmp_path: Path) -> None:
    before = _folder(tmp_path)
    data = _index_path(tmp_path).read_bytes()
    columns = parse_columns(data)
    assert columns is not None
    assert len(columns.mtime) == 40
    assert parse_index(data)[0] == "ok"  # still an index every reader parses whole (cols is ignored there)
    fresh = _fresh(tmp_path)
    assert fresh.bm25_search("tok7x", user_id="alice") == ["alice_n7.md"]
    entries = fresh._owner("alice").index.current()
    assert isinstance(entries, EntryMap)
    rows = entries._rows
    assert rows is not None
    assert len(rows._decoded) <= 2  # the hit (and nothing for the listing or the ranker rows)
    assert _ranked(fresh) == before
    # Every entry reads back as the whole parse gives it (a content hash the query found
    # settled is dropped: see NoteIndexer).
    whole = parse_index(data)[1].files  # type: ignore[union-attr]
    expected = {(e.category, e.filename): e.model_dump(exclude={"content_hash"}) for e in whole}
    assert {key: entries[key].model_dump(exclude={"content_hash"}) for key in entries} == expected
    assert len(rows._decoded) == 40  # read one by one past BULK_DECODE, or all at once: the same entries


@pytest.mark.parametrize("damage", ["rewritten", "crc", "garbage", "version", "short"])
def test_columns_that_do_not_describe_the_bytes_are_ignored(tmp_path: Path, damage: str) -> None:
    before = _folder(tmp_path)
    path = _index_path(tmp_path)
    data = path.read_bytes()
    expected = _entries(tmp_path)
    tail = data.rfind(b',"cols":')
    columns = json.loads(data[tail + len(b',"cols":') : -1])
    if damage == "rewritten":  # another tool rewrote the JSON: the columns' offsets are stale
        data = json.dumps(json.loads(data), indent=1).encode()
    elif damage == "crc":
        columns["crc"] ^= 1
        data = data[:tail] + b',"cols":' + json.dumps(columns).encode() + b"}"
    elif damage == "garbage":
        data = data[:tail] + b',"cols":{"v":1,"crc":"x"}}'
    elif damage == "version":
        columns["v"] += 1
        data = data[:tail] + b',"cols":' + json.dumps(columns).encode() + b"}"
    else:
        columns["mtime"] = columns["mtime"][:-1]
        data = data[:tail] + b',"cols":' + json.dumps(columns).encode() + b"}"
    path.write_bytes(data)
    assert parse_columns(data) is None
    assert parse_index(data)[0] == "ok"
    fresh = _fresh(tmp_path)
    assert _ranked(fresh) == before
    assert [e.model_dump() for e in fresh.read_index().files] == expected  # both sorted by name
    # The first write writes a snapshot with columns again.
    fresh.write_file("knowledge/alice_new.md", "# New\n\nmelons")
    assert parse_columns(path.read_bytes()) is not None
    again = _fresh(tmp_path)
    assert again.bm25_search("melons", user_id="alice") == ["alice_new.md"]


def test_a_compaction_copies_the_rows_it_never_decoded(tmp_path: Path) -> None:
    _folder(tmp_path)
    old = _index_path(tmp_path).read_bytes()
    old_columns = parse_columns(old)
    assert old_columns is not None
    fresh = _fresh(tmp_path)
    fresh.write_file("knowledge/alice_n3.md", _note(1003))  # an edit
    fresh.delete_file("knowledge/alice_n4.md")
    fresh.update_index_entry("alice_n5.md", "Handset", "set by hand", ["handset"], "knowledge")
    assert fresh.bm25_search("tea", user_id="alice")  # its ranker, from its snapshot
    fresh._owner("alice").index.compact()
    fresh.save_rankers()
    rows = fresh._owner("alice").index.current()._rows
    assert rows is not None
    assert len(rows._decoded) <= 12  # the snapshot and the ranker's rows came from the columns
    new = _index_path(tmp_path).read_bytes()
    columns = parse_columns(new)
    assert columns is not None
    names = columns.names.split("/")
    assert "alice_n4.md" not in names
    assert len(names) == 39

    def raw(data: bytes, cols: IndexColumns, name: str) -> bytes:
        row = cols.names.split("/").index(name)
        return data[cols.at[row] : cols.at[row + 1] - 1]

    for name in ("alice_n0.md", "alice_n17.md", "alice_n39.md"):
        assert raw(new, columns, name) == raw(old, old_columns, name)  # copied, not re-encoded
    assert raw(new, columns, "alice_n3.md") != raw(old, old_columns, "alice_n3.md")
    by_name = {e["filename"]: e for e in _entries(tmp_path)}
    assert by_name["alice_n5.md"]["title"] == "Handset"
    assert "tok1003x" in by_name["alice_n3.md"]["keywords"]
    # Each row's columns say what its entry says.
    for row, name in enumerate(names):
        entry = by_name[name]
        assert columns.mtime[row] == entry["mtime_ns"]
        assert columns.size[row] == entry["size"]
        assert columns.meta[row] == index_file.metadata_checksum(index_file.IndexEntry.model_validate(entry))
        assert (row in columns.racy) == (entry["content_hash"] is not None)
    again = _fresh(tmp_path)
    assert again.bm25_search("handset", user_id="alice") == ["alice_n5.md"]
    assert again.bm25_search("tok1003x", user_id="alice") == ["alice_n3.md"]
    assert again.bm25_search("tok4x", user_id="alice") == []


def test_a_snapshot_without_columns_opens_and_its_first_write_adds_them(tmp_path: Path) -> None:
    before = _folder(tmp_path)
    path = _index_path(tmp_path)
    body = json.loads(path.read_bytes())
    del body["cols"]  # what 0.3 and the code before columns wrote
    path.write_bytes(json.dumps(body, separators=(",", ":")).encode())
    fresh = _fresh(tmp_path)
    assert _ranked(fresh) == before
    assert parse_columns(path.read_bytes()) is None  # a query does not rewrite it
    fresh.write_file("knowledge/alice_n40.md", _note(40))  # the first write migrates
    assert parse_columns(path.read_bytes()) is not None
    again = _fresh(tmp_path)
    assert again.bm25_search("tok40x", user_id="alice") == ["alice_n40.md"]


def test_a_note_changed_on_disk_since_the_snapshot_is_seen_by_the_first_query(tmp_path: Path) -> None:
    _folder(tmp_path)
    time.sleep(0.01)
    (tmp_path / "memory_data" / "knowledge" / "alice_n7.md").write_text("# Seven\n\nmelons now")
    (tmp_path / "memory_data" / "knowledge" / "alice_n8.md").unlink()
    (tmp_path / "memory_data" / "knowledge" / "alice_n99.md").write_text("# New\n\nhandset")
    fresh = _fresh(tmp_path)
    assert fresh.bm25_search("melons", user_id="alice") == ["alice_n7.md"]
    assert fresh.bm25_search("tok7x", user_id="alice") == []
    assert fresh.bm25_search("tok8x", user_id="alice") == []
    assert fresh.bm25_search("handset", user_id="alice") == ["alice_n99.md"]


# -- the ranker snapshot's terms -----------------------------------------------------------------
def _snapshot_path(root: Path) -> Path:
    return root / "memory_data" / ".bm25" / "knowledge" / "alice_bm25.npz"


def test_a_fresh_vocabulary_looks_terms_up_in_their_stored_order(tmp_path: Path) -> None:
    before = _folder(tmp_path)
    arrays = read_snapshot(_snapshot_path(tmp_path).read_bytes())
    assert "order" in arrays
    ranker = BM25Index(Vocabulary())
    assert ranker.load(arrays, lambda keys: np.ones(len(keys), dtype=np.bool_)) == {f"alice_n{n}.md" for n in range(40)}
    vocab = ranker.vocab
    assert vocab._sorted is not None  # no dict of every term
    words = bytes(arrays["words"]).decode().split("\x00")
    assert [vocab.get(word) for word in words] == list(range(len(words)))
    assert vocab.get("no-such-term") is None
    assert vocab.get("") is None
    assert vocab.get("a\x00b") is None
    assert vocab._sorted is not None
    ranker.add("alice_extra.md", ["brand", "new", words[0]])  # new terms get ids of their own
    assert vocab._sorted is not None  # still no dict of every term: a host keeps one per user
    assert vocab.get(words[0]) == 0
    assert vocab.get("brand") == len(words)
    fresh = _fresh(tmp_path)
    assert _ranked(fresh) == before


@given(
    st.lists(st.text(min_size=1, max_size=6).filter(lambda w: "\x00" not in w), min_size=1, max_size=40, unique=True)
)
def test_stored_order_lookups_find_every_term_whatever_its_script(words: list[str]) -> None:
    """The binary search compares UTF-8 bytes against an order the snapshot sorted as ``str``:
    accents, CJK, emoji and lone surrogates (kept by ``surrogatepass``) must sort alike."""
    words = [*words, "caf\u00e9", "\u4e2d\u6587", "\U0001f600", "\ud800x", "\uffff"]
    words = list(dict.fromkeys(words))
    order = np.array(sorted(range(len(words)), key=words.__getitem__), dtype=np.int64)
    vocab = Vocabulary()
    assert vocab.adopt_sorted(bytes(pack_texts(words)), order)
    assert [vocab.get(word) for word in words] == list(range(len(words)))
    absent = [word for word in ("", "caf", "cafe\u0301", "\U0001f601", "\ud801") if word not in words]
    for word in absent:
        assert vocab.get(word) is None
    assert vocab._sorted is not None  # looked up without building the dict
    # A written document's terms, looked up by hash (and by bytes when two terms share a hash:
    # here every term does), new ones numbered after the stored ones.
    for colliding in (False, True):
        fresh = Vocabulary()
        assert fresh.adopt_sorted(bytes(pack_texts(words)), order)
        with pytest.MonkeyPatch.context() as patch:
            if colliding:
                patch.setattr(bm25, "hash", lambda term: len(term) % 2, raising=False)
            assert fresh.ids_for([*words, *absent, *words]) == [*range(len(words) + len(absent)), *range(len(words))]
            assert fresh.ids_for(absent) == list(range(len(words), len(words) + len(absent)))
        assert [fresh.get(word) for word in [*words, *absent]] == list(range(len(words) + len(absent)))
        assert fresh.words(range(len(fresh))) == [*words, *absent]
        assert fresh._sorted is not None


@pytest.mark.parametrize("order", ["absent", "not a permutation", "wrong shape"])
def test_ranker_snapshots_without_a_usable_order_still_load(tmp_path: Path, order: str) -> None:
    before = _folder(tmp_path)
    path = _snapshot_path(tmp_path)
    arrays = dict(read_snapshot(path.read_bytes()))
    if order == "absent":  # a snapshot written before the order was kept
        del arrays["order"]
    elif order == "not a permutation":
        arrays["order"] = np.zeros_like(arrays["order"])
    else:
        arrays["order"] = arrays["order"][:-1]
    path.write_bytes(snapshot_bytes(arrays))
    read: list[str] = []
    fresh = _fresh(tmp_path)
    heads = fresh.backend.read_note_heads
    fresh.backend.read_note_heads = lambda c, names, size: read.extend(names) or heads(c, names, size)  # type: ignore[method-assign]
    assert _ranked(fresh) == before
    assert read == []  # the rows were used (terms through a dict instead)
    assert fresh._owner("alice").rankers.vocab._sorted is None


# -- the read-ahead and the watcher's start ------------------------------------------------------
def test_the_first_query_reads_its_ranker_snapshot_ahead(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = _folder(tmp_path)
    fresh = _fresh(tmp_path)
    readers: list[str] = []
    original = fresh.backend.read_blob

    def read_blob(name: str) -> bytes | None:
        if name.endswith("bm25.npz"):
            readers.append(threading.current_thread().name)
        return original(name)

    fresh.backend.read_blob = read_blob  # type: ignore[method-assign]
    assert _ranked(fresh) == before
    assert readers == ["local-ai-memory-ranker-read"]
    assert fresh._owner("alice").rankers._ahead == {}


def test_a_damaged_snapshot_read_ahead_is_reported_and_rebuilt(tmp_path: Path, events: EventLog) -> None:
    before = _folder(tmp_path)
    path = _snapshot_path(tmp_path)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    fresh = _fresh(tmp_path)
    assert _ranked(fresh) == before
    assert any(name == "MEMORY_CORRUPT" and "bm25" in str(fields.get("path")) for name, fields in events.records)


def test_the_automatic_watcher_starts_once_after_the_first_query(tmp_path: Path) -> None:
    _folder(tmp_path)
    fresh = _fresh(tmp_path, auto_watch=True)
    assert fresh.bm25_search("tok7x", user_id="alice") == ["alice_n7.md"]
    assert fresh.bm25_search("tok8x", user_id="alice") == ["alice_n8.md"]  # while it starts: listings
    deadline = time.monotonic() + 10
    while not fresh.watched and time.monotonic() < deadline:
        time.sleep(0.01)
    assert fresh.watched
    assert len([t for t in threading.enumerate() if t.name == "local-ai-memory-auto-watch"]) == 1
    close_shared_stores()


def test_a_folder_closed_before_its_watcher_starts_gets_none(tmp_path: Path) -> None:
    _folder(tmp_path)
    fresh = _fresh(tmp_path, auto_watch=True)
    assert fresh.bm25_search("tok7x", user_id="alice") == ["alice_n7.md"]
    close_shared_stores()  # within the start delay
    time.sleep(0.3)
    assert [t for t in threading.enumerate() if t.name == "local-ai-memory-auto-watch"] == []
    assert not fresh._parts.auto_pending


def test_columns_survive_a_zip_of_the_snapshot_members(tmp_path: Path) -> None:
    """The ranker snapshot stays a plain .npz: every member, order included, is a stored .npy."""
    _folder(tmp_path)
    with zipfile.ZipFile(_snapshot_path(tmp_path)) as archive:
        assert all(m.compress_type == zipfile.ZIP_STORED for m in archive.infolist())
        assert "order.npy" in archive.namelist()


# -- the first query's listing comparison and owner map -------------------------------------------
def test_the_first_query_compares_columns_and_reads_no_unchanged_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fresh process lists the notes as columns (no ``list_notes``), reads none of the
    unchanged notes, and still sees a note edited in place (same size, the folder's mtime
    unchanged), a deleted one and a new one."""
    before = _folder(tmp_path)
    calls: list[str] = []
    for method in ("list_notes", "read_note", "read_note_head", "read_note_heads"):
        original = getattr(FileKnowledgeBackend, method)

        def spy(self: FileKnowledgeBackend, *args: Any, _name: str = method, _original: Any = original) -> Any:
            calls.append(_name)
            return _original(self, *args)

        monkeypatch.setattr(FileKnowledgeBackend, method, spy)
    fresh = _fresh(tmp_path)
    assert _ranked(fresh) == before
    assert calls == []
    folder = tmp_path / "memory_data" / "knowledge"
    stamp = (folder / "alice_n7.md").stat().st_mtime_ns
    with open(folder / "alice_n7.md", "r+b") as note:  # in place: same size, same inode, same folder mtime
        note.write(b"# Seven\n\nMelons" + b" " * (len(_note(7)) - 16))
    os.utime(folder / "alice_n7.md", ns=(stamp + 5_000_000_000, stamp + 5_000_000_000))
    assert (folder / "alice_n7.md").stat().st_size == len(_note(7))
    (folder / "alice_n8.md").unlink()
    (folder / "alice_n99.md").write_text("# New\n\nhandset")
    (folder / "alice_dir.md").mkdir()  # not a note: a folder, and a link, are never listed
    (folder / "alice_link.md").symlink_to(folder / "alice_n9.md")
    again = _fresh(tmp_path)
    assert again.bm25_search("melons", user_id="alice") == ["alice_n7.md"]
    assert again.bm25_search("tok7x", user_id="alice") == []
    assert again.bm25_search("tok8x", user_id="alice") == []
    assert again.bm25_search("handset", user_id="alice") == ["alice_n99.md"]
    assert sorted(again._owner("alice").index.names_of("alice", "knowledge")) == sorted(
        [f"alice_n{n}.md" for n in range(40) if n != 8] + ["alice_n99.md"]
    )
    listed = again.backend.list_versions("knowledge", "alice_")
    assert dict(zip(listed.names, map(listed.info, range(len(listed.names))), strict=True)) == again.backend.list_notes(
        "knowledge", "alice_"
    )


def test_each_owner_s_snapshot_holds_exactly_the_notes_the_rule_gives_them(tmp_path: Path) -> None:
    """Each owner's index holds exactly the notes the naming rule gives that owner (``bob`` never
    ``bob_admin``'s), after a snapshot and a journal that replaces, drops and adds rows, and a
    new process reads only the asking owner's index."""
    store = _store(tmp_path)
    users = ("alice", "bob", "bob_admin", "b%b")
    for user in users:
        for n in range(30):
            store.write_file(f"knowledge/{user_file_prefix(user)}n{n}.md", _note(n))
    store.bm25_search("tea", user_id="alice")
    store.settle()
    store._owner("bob").index.compact()
    store.write_file("knowledge/bob_n3.md", "# Three again\n\nmelons")  # journal: a replaced row
    store.delete_file("knowledge/bob_n4.md")  # journal: a dropped row
    store.write_file("knowledge/carol_n1.md", "# Carol\n\nhandset")  # a new owner
    close_shared_stores()
    fresh = _store(tmp_path)
    assert fresh.bm25_search("melons", user_id="bob") == ["bob_n3.md"]
    assert {parts.index.owner for parts in fresh._parts.held()} == {"bob"}  # nobody else's index read
    for user in (*users, "carol"):
        names = {name for (_, name) in fresh._owner(user).index.current()}
        assert names == {n for n in names if owner_of(n) == user}
        assert fresh._owner(user).index.owned == ({(user, "knowledge"): names} if names else {})
    assert "bob_n4.md" not in fresh._owner("bob").index.owned[("bob", "knowledge")]
    assert fresh._owner("bob_admin").index.owned[("bob_admin", "knowledge")] == {
        f"bob%5Fadmin_n{n}.md" for n in range(30)
    }
    assert fresh.bm25_search("handset", user_id="carol") == ["carol_n1.md"]


@pytest.mark.parametrize(
    "keys",
    [
        [("k", "alice_a.md"), ("k", "alice_b.txt"), ("k", "alice_c.md"), ("k", "bob_a.md"), ("w", "bob_b.md")],
        [("k", "bob_a.md"), ("k", "alice_a.md"), ("k", "alice_c.md"), ("k", "README.md"), ("k", "_x.md")],
        [("k", ".alice_a.md"), ("k", "alice_a.md"), ("k", "alice_b.md"), ("k", "alice`x.md"), ("k", "alicf_a.md")],
        [],
    ],
)
def test_owner_runs_agree_with_the_rule_per_name(keys: list[tuple[str, str]]) -> None:
    runs = index_module._owner_runs(keys)
    by_runs = {(position, owner) for start, end, owner in runs for position in range(start, end)}
    by_name = {(position, owner) for position, _, owner in index_module._owned_keys(keys)}
    per_key = {
        (position, owner)
        for position, (_, name) in enumerate(keys)
        if is_note_name(name) and (owner := owner_of(name)) is not None
    }
    assert by_runs == by_name == per_key
