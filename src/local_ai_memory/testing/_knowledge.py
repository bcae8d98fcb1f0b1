"""``KnowledgeBackendTests``: the conformance suite of a :class:`KnowledgeBackend`.

Subclass it in a test module and give it a ``backend`` fixture returning a fresh, empty
backend; pytest then runs every test below against it::

    class TestMyBackend(KnowledgeBackendTests):
        @pytest.fixture
        def backend(self, tmp_path):
            return MyBackend(...)

The tests call the contract directly (byte-exact notes, listings per user, the change feed,
blobs) and through a :class:`~local_ai_memory._knowledge.store.MemoryStore` built over the backend:
after a scripted series of writes and deletes, search results and scores must equal those of
a store freshly built over the final notes and of the plain BM25 written out below.
A backend whose change feed only runs while something feeds it (files and their watcher)
overrides :meth:`KnowledgeBackendTests.open_feed`. Needs pytest; nothing else.
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pytest

from local_ai_memory._contracts.knowledge import KnowledgeBackend
from local_ai_memory._knowledge.index_file import ranking_tokens
from local_ai_memory._knowledge.store import MemoryStore
from local_ai_memory._shared.config import MemoryConfig
from local_ai_memory._shared.naming import user_file_prefix
from local_ai_memory._shared.text import EXACT, LEAD, Analyzer
from local_ai_memory.backends import InMemoryKnowledgeBackend

__all__ = ["KnowledgeBackendTests", "reference_bm25"]

CATEGORIES = ("knowledge", "work")
NOTE_TEXTS = {
    "empty": b"",
    "emoji": "# Parrots \U0001f99c\n\nCaf\u00e9 notes, \u65e5\u672c\u8a9e and a \U0001f600.\n".encode(),
    "crlf": b"# Windows\r\n\r\nline one\r\nline two\r\n",
    "no newline": b"just text",
    "large": ("word " * 200_000).encode(),
}
# Ids whose encoding holds the characters SQL LIKE, globbing and file names treat specially.
USERS = ("bob", "bob_admin", "bo", "b%b", "b.b", "b_", "_b")


def reference_bm25(docs: dict[str, list[str]], query: Sequence[str | tuple[str, float]]) -> dict[str, float]:
    """The BM25 that :mod:`local_ai_memory._knowledge.bm25` promises, written out plainly: the score of
    each document sharing a term with ``query`` (a term, or ``(term, weight)``).

    ``k1 = 1.2``, ``b = 0.75``, ``idf = ln(1 + (N - df + 0.5) / (df + 0.5))``; lead terms are
    scored with ``b = 0``; exact and lead terms do not count for a document's length."""
    k1, b = 1.2, 0.75
    if not docs:
        return {}
    lengths = {key: sum(1 for t in tokens if not t.startswith((LEAD, EXACT))) for key, tokens in docs.items()}
    avgdl = sum(lengths.values()) / len(docs) or 1.0
    df: Counter[str] = Counter()
    for tokens in docs.values():
        df.update(set(tokens))
    weighted = [(item, 1.0) if isinstance(item, str) else item for item in query]
    scores: dict[str, float] = {}
    for key, tokens in docs.items():
        counts = Counter(tokens)
        if not any(term in counts for term, _ in weighted):
            continue
        total = 0.0
        for term, weight in weighted:
            if term not in counts:
                continue
            idf = math.log(1 + (len(docs) - df[term] + 0.5) / (df[term] + 0.5))
            norm = k1 if term.startswith(LEAD) else k1 * (1 - b + b * lengths[key] / avgdl)
            total += weight * idf * counts[term] * (k1 + 1) / (counts[term] + norm)
        scores[key] = total
    return scores


def _note(user: str, title: str) -> str:
    return f"{user_file_prefix(user)}{title}.md"


class KnowledgeBackendTests:
    """The conformance suite; subclasses provide the ``backend`` fixture (a fresh backend)."""

    def open_feed(self, backend: KnowledgeBackend) -> None:
        """Start the backend's change feed if something must feed it (default: nothing to do)."""

    def store(self, backend: KnowledgeBackend, root: Path) -> MemoryStore:
        """A store over ``backend`` (``root`` is only the guard's root; the backend keeps the data)."""
        return MemoryStore(backend, MemoryConfig(fsync=False), categories=CATEGORIES)

    # -- notes -----------------------------------------------------------------------------
    @pytest.mark.parametrize("label", list(NOTE_TEXTS))
    def test_note_round_trip_is_byte_exact(self, backend: KnowledgeBackend, label: str) -> None:
        data = NOTE_TEXTS[label]
        info = backend.write_note("knowledge", _note("alice", "n"), data)
        assert backend.read_note("knowledge", _note("alice", "n")) == data
        assert info.size == len(data)
        assert backend.note_info("knowledge", _note("alice", "n")) == info
        replaced = data[::-1] + b"!"
        backend.write_note("knowledge", _note("alice", "n"), replaced)
        assert backend.read_note("knowledge", _note("alice", "n")) == replaced

    def test_missing_notes_and_blobs_are_none(self, backend: KnowledgeBackend) -> None:
        assert backend.read_note("knowledge", _note("alice", "missing")) is None
        assert backend.note_info("knowledge", _note("alice", "missing")) is None
        assert backend.list_notes("knowledge") == {}
        assert backend.read_blob("memory_index.json") is None
        assert backend.blob_size("memory_index.json") is None
        assert backend.quarantine_blob("memory_index.json") is None

    def test_delete_is_idempotent(self, backend: KnowledgeBackend) -> None:
        name = _note("alice", "gone")
        backend.write_note("knowledge", name, b"x")
        assert backend.delete_note("knowledge", name) is True
        assert backend.delete_note("knowledge", name) is False
        assert backend.read_note("knowledge", name) is None
        assert name not in backend.list_notes("knowledge")

    def test_categories_are_separate(self, backend: KnowledgeBackend) -> None:
        backend.write_note("knowledge", _note("alice", "a"), b"k")
        backend.write_note("work", _note("alice", "a"), b"w")
        assert backend.read_note("knowledge", _note("alice", "a")) == b"k"
        assert backend.read_note("work", _note("alice", "a")) == b"w"
        backend.delete_note("work", _note("alice", "a"))
        assert backend.read_note("knowledge", _note("alice", "a")) == b"k"

    def test_listing_per_user_is_exact(self, backend: KnowledgeBackend) -> None:
        for user in USERS:
            for title in ("one", "two"):
                backend.write_note("knowledge", _note(user, title), user.encode())
        everyone = backend.list_notes("knowledge")
        assert set(everyone) == {_note(u, t) for u in USERS for t in ("one", "two")}
        for user in USERS:
            mine = backend.list_notes("knowledge", user_file_prefix(user))
            assert set(mine) == {_note(user, "one"), _note(user, "two")}, user
            assert all(info.size == len(user.encode()) and info.category == "knowledge" for info in mine.values())
        assert backend.list_notes("work", user_file_prefix("bob")) == {}

    def test_versions_tell_writes_apart(self, backend: KnowledgeBackend) -> None:
        name = _note("alice", "v")
        first = backend.write_note("knowledge", name, b"aaaa")
        second = backend.write_note("knowledge", name, b"bbbb")
        assert second.size == first.size == 4
        if backend.exact_versions:
            assert second.version > first.version
        else:  # timestamps may tie within one tick; never go backwards
            assert second.version >= first.version

    def test_concurrent_writers_lose_no_note(self, backend: KnowledgeBackend) -> None:
        def write(user: str) -> None:
            for i in range(20):
                backend.write_note("knowledge", _note(user, f"n{i}"), f"{user} {i}".encode())

        threads = [threading.Thread(target=write, args=(u,)) for u in ("u1", "u2", "u3", "u4")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(backend.list_notes("knowledge")) == 80
        assert backend.read_note("knowledge", _note("u3", "n7")) == b"u3 7"

    async def test_async_twins_match(self, backend: KnowledgeBackend) -> None:
        name = _note("alice", "async")
        info = await backend.awrite_note("knowledge", name, b"\xf0\x9f\x98\x80\r\n")
        assert await backend.aread_note("knowledge", name) == b"\xf0\x9f\x98\x80\r\n"
        assert await backend.anote_info("knowledge", name) == info
        assert set(await backend.alist_notes("knowledge", "alice_")) == {name}
        await backend.awrite_blob("x/y.bin", b"\x00\x01")
        assert await backend.aread_blob("x/y.bin") == b"\x00\x01"
        assert await backend.adelete_note("knowledge", name) is True
        assert list(await asyncio.gather(backend.aread_note("knowledge", name), backend.ablob_size("x/y.bin"))) == [
            None,
            2,
        ]

    # -- change feed -------------------------------------------------------------------------
    def test_change_feed_sees_inserts_modifications_and_deletes(self, backend: KnowledgeBackend) -> None:
        self.open_feed(backend)
        start = backend.changes(None)
        if start is None:
            pytest.skip("this backend keeps no change feed: the engines compare listings")
        assert not start.complete  # nothing to compare with yet: the caller lists everything once
        a, b = ("knowledge", _note("alice", "a")), ("work", _note("bob", "b"))
        backend.write_note(*a, b"one")
        inserted = backend.changes(start.cursor)
        assert inserted is not None
        assert inserted.complete
        assert inserted.keys == {a}
        backend.write_note(*a, b"two")
        backend.write_note(*b, b"three")
        modified = backend.changes(inserted.cursor)
        assert modified is not None
        assert modified.keys == {a, b}
        assert backend.delete_note(*a)
        deleted = backend.changes(modified.cursor)
        assert deleted is not None
        assert deleted.keys == {a}
        quiet = backend.changes(deleted.cursor)
        assert quiet is not None
        assert quiet.keys == frozenset()
        assert quiet.cursor == deleted.cursor
        assert backend.changes(start.cursor) is not None
        assert backend.changes(start.cursor).keys >= {a, b}  # type: ignore[union-attr]

    # -- blobs -------------------------------------------------------------------------------
    def test_categories_are_listed_and_blobs_deleted(self, backend: KnowledgeBackend) -> None:
        assert backend.list_categories() == []
        backend.write_note("notes", "alice_a.md", b"a")
        backend.write_note("knowledge", "alice_b.md", b"b")
        assert backend.list_categories() == ["knowledge", "notes"]
        backend.write_blob(".bm25/knowledge/alice_bm25.npz", b"snapshot")
        assert backend.delete_blob(".bm25/knowledge/alice_bm25.npz") is True
        assert backend.read_blob(".bm25/knowledge/alice_bm25.npz") is None
        assert backend.delete_blob(".bm25/knowledge/alice_bm25.npz") is False

    def test_blobs_round_trip_and_quarantine(self, backend: KnowledgeBackend) -> None:
        data = bytes(range(256)) * 10
        backend.write_blob(".bm25/knowledge/alice_bm25.npz", data)
        assert backend.read_blob(".bm25/knowledge/alice_bm25.npz") == data
        assert backend.blob_size(".bm25/knowledge/alice_bm25.npz") == len(data)
        backend.write_blob("memory_index.json", b"{broken")
        assert backend.quarantine_blob("memory_index.json") is not None
        assert backend.read_blob("memory_index.json") is None

    # -- through MemoryStore ------------------------------------------------------------------
    def test_store_round_trips_text_exactly(self, backend: KnowledgeBackend, tmp_path: Path) -> None:
        store = self.store(backend, tmp_path)
        for label, data in NOTE_TEXTS.items():
            path = f"knowledge/{_note('alice', label.replace(' ', '-'))}"
            store.write_file(path, data.decode("utf-8"))
            assert store.read_file(path) == data.decode("utf-8")
        with pytest.raises(Exception, match="no memory file"):
            store.read_file(f"knowledge/{_note('alice', 'missing')}")

    def test_store_search_isolates_users(self, backend: KnowledgeBackend, tmp_path: Path) -> None:
        store = self.store(backend, tmp_path)
        for user in USERS:
            store.write_file(f"knowledge/{_note(user, 'secret')}", f"# Secret\n\nvault code of {user}")
        for user in USERS:
            assert store.bm25_search("vault code", user_id=user) == [_note(user, "secret")]
            assert [p.name for p in store.list_user_files(user, "knowledge")] == [_note(user, "secret")]

    def test_note_written_elsewhere_is_found_by_the_next_query(self, backend: KnowledgeBackend, tmp_path: Path) -> None:
        self.open_feed(backend)
        reader, writer = self.store(backend, tmp_path), self.store(backend, tmp_path)
        reader.write_file(f"knowledge/{_note('alice', 'a')}", "# A\n\napples")
        assert reader.bm25_search("apples", user_id="alice") == [_note("alice", "a")]
        writer.write_file(f"knowledge/{_note('alice', 'b')}", "# B\n\nbananas")
        assert reader.bm25_search("bananas", user_id="alice") == [_note("alice", "b")]
        backend.write_note("knowledge", _note("alice", "a"), b"# A\n\ncherries")
        assert reader.bm25_search("cherries", user_id="alice") == [_note("alice", "a")]
        assert reader.bm25_search("apples", user_id="alice") == []
        backend.delete_note("knowledge", _note("alice", "b"))
        assert reader.bm25_search("bananas", user_id="alice") == []

    def test_scores_after_inserts_and_deletes_equal_a_fresh_build(
        self, backend: KnowledgeBackend, tmp_path: Path
    ) -> None:
        self.open_feed(backend)
        store = self.store(backend, tmp_path)
        words = [
            "apple",
            "banana",
            "cherry",
            "delta",
            "echo",
            "fox",
            "golf",
            "hotel",
            "india",
            "juliet",
            "kilo",
            "lima",
        ]
        final: dict[tuple[str, str], str] = {}
        for step in range(60):  # a scripted mix of writes, rewrites and deletes, queries in between
            user = ("bob", "bob_admin")[step % 2]
            category = CATEGORIES[step % 3 % 2]
            key = (category, _note(user, f"n{step % 17}"))
            if step % 7 == 6 and key in final:
                backend.delete_note(*key)
                del final[key]
            else:
                text = f"# Note {step}\n\n" + " ".join(words[(step * k) % len(words)] for k in range(1, step % 9 + 3))
                if step % 3 == 0:
                    backend.write_note(*key, text.encode())  # behind the store's back
                else:
                    store.write_file(f"{key[0]}/{key[1]}", text)
                final[key] = text
            if step % 5 == 0:
                store.search("apple cherry", 50, user_id=user)
        fresh_backend = InMemoryKnowledgeBackend()
        for (category, name), text in final.items():
            fresh_backend.write_note(category, name, text.encode())
        fresh = self.store(fresh_backend, tmp_path / "fresh")
        for user in ("bob", "bob_admin"):
            for query in ("apple cherry", "golf", "note juliet kilo", "zebra"):
                got = store.search(query, 50, user_id=user)
                assert got == fresh.search(query, 50, user_id=user)
                docs = {}
                for (category, name), text in final.items():
                    if name.startswith(user_file_prefix(user)):
                        entry = fresh.find_entry(name, category)
                        assert entry is not None
                        docs[f"{category}/{name}"] = ranking_tokens(entry, text, "both")
                expected = reference_bm25(docs, Analyzer().query_terms(query))
                assert {f"{c.category}/{c.filename}": c.score for c in got} == pytest.approx(expected, abs=1e-5)
        assert len(store.search("apple cherry", 50, user_id="bob")) > 3  # the comparison above compared something
        reopened = self.store(backend, tmp_path)
        assert reopened.search("apple cherry", 50, user_id="bob") == store.search("apple cherry", 50, user_id="bob")

    async def test_async_search_matches_sync(self, backend: KnowledgeBackend, tmp_path: Path) -> None:
        store = self.store(backend, tmp_path)
        await store.awrite_file(f"work/{_note('alice', 'a')}", "# A\n\nasync apples")
        assert await store.asearch("apples", user_id="alice") == store.search("apples", user_id="alice")
        assert await store.abm25_search("apples", user_id="alice") == [_note("alice", "a")]
