"""``KnowledgeBackendTests``: the conformance suite of a :class:`~local_ai_memory.backends.KnowledgeBackend`.

Subclass it in a test module and give it a ``backend`` fixture returning a fresh, empty
backend; plain pytest then runs every test below against it, once through the sync methods
and once through their async twins (no pytest-asyncio setting needed)::

    class TestMyBackend(KnowledgeBackendTests):
        capabilities = frozenset({"change_feed", "durable", "cross_process"})

        @pytest.fixture
        def backend(self, tmp_path):
            return MyBackend(tmp_path / "store.db")

        @pytest.fixture
        def opener(self, tmp_path):
            return functools.partial(MyBackend, tmp_path / "store.db")

Optional capabilities (:data:`CAPABILITIES`) are claimed in ``capabilities``; the tests of an
unclaimed one skip, saying so:

* ``"change_feed"``: :meth:`~KnowledgeBackend.owner_changes` never answers ``None`` (after
  :meth:`KnowledgeBackendTests.open_feed`) and keeps every promise of ``NoteChanges`` for each
  owner (what the engines follow; the default derives it from :meth:`~KnowledgeBackend.changes`).
* ``"durable"``: what was written survives closing the backend and opening the store again
  with ``opener``, erasure markers included (checked in a new process), and a writer process
  killed (SIGKILL) at random points of its writes loses no write that had returned.
* ``"cross_process"``: several processes opening the same store with ``opener``
  write concurrently and lose nothing; the change feed of each sees the others' writes.
* ``"atomic_appends"``: :meth:`~KnowledgeBackend.write_note_with`,
  :meth:`~KnowledgeBackend.update_note_with` and :meth:`~KnowledgeBackend.delete_note_with`
  store (or delete) the note and its blob append together or not at all (a database's one
  transaction): an append that fails leaves the note as it was.

``opener`` returns a callable that opens the store the ``backend`` fixture opened; it
is pickled into child processes, so it must be a module-level callable or a
:func:`functools.partial` of one, with picklable arguments.

The tests call the contract directly (byte-exact notes, listings per user and of note names
only, the change feed, blobs, the vector cache) and through the engines (a
:class:`~local_ai_memory.Memory` over the backend): after a scripted series of writes and
deletes, BM25 results and scores must equal those of the reference backend and of the plain
BM25 written out in :func:`reference_bm25`, and hybrid rankings those of the reference backend.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from local_ai_memory import ConflictError, Memory, MemoryConfig, ModelError, PathEscapeError, note_hash
from local_ai_memory._shared.text import EXACT, LEAD
from local_ai_memory.backends import (
    BlobAppend,
    InMemoryKnowledgeBackend,
    InMemoryRuntimeBackend,
    KnowledgeBackend,
    NoteInfo,
    NoteKey,
    erasure_marker,
    is_note_name,
    user_file_prefix,
)
from local_ai_memory.testing._calls import Mode
from local_ai_memory.testing._clock import assert_wall_clock
from local_ai_memory.testing._kill import KILLS, check_knowledge, kill_rounds
from local_ai_memory.testing._kn_process import Barrier, Job, Twin, finish, start

__all__ = ["CAPABILITIES", "KnowledgeBackendTests", "reference_bm25"]

CAPABILITIES = frozenset({"change_feed", "durable", "cross_process", "atomic_appends"})
"""The optional capabilities a suite subclass may claim (see the module docstring)."""

CATEGORIES = ("knowledge", "work")
NOTE_TEXTS = {
    "empty": b"",
    "emoji": "# Parrots \U0001f99c\n\nCaf\u00e9 notes, \u65e5\u672c\u8a9e and a \U0001f600.\n".encode(),
    "crlf": b"# Windows\r\n\r\nline one\r\nline two\r\n",
    "no newline": b"just text",
    "nul": b"a\x00b\xff\xfe",
    "large": ("word " * 200_000).encode(),
}
# Ids whose encoding holds the characters SQL LIKE, globbing and file names treat specially.
USERS = ("bob", "bob_admin", "bo", "b%b", "b.b", "b_", "_b")
# Names a category may hold that are not notes: an unprefixed listing shows none of them.
NOT_NOTES = ("README.md", "_x.md", ".alice_hidden.md", "alice_draft.txt", "alice_.md.tmp", "notes")
WORDS = ("apple", "banana", "cherry", "delta", "echo", "fox", "golf", "hotel", "india", "juliet", "kilo", "lima")

# ---- the BM25 the engines promise -----------------------------------------------------------


def reference_bm25(docs: dict[str, list[str]], query: Sequence[str | tuple[str, float]]) -> dict[str, float]:
    """The BM25 the engines promise, written out plainly: the score of each document sharing a
    term with ``query`` (a term, or ``(term, weight)``).

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


# ---- embedders for the vector cache tests -------------------------------------------------
class WordEmbedder:
    """A deterministic embedder: one dimension per word of :data:`WORDS`, deliberately not of
    unit length (``scale`` times the counts, plus a small constant), counting its calls."""

    def __init__(self, model_name: str = "kit-words-v1", scale: float = 3.0, flip: bool = False) -> None:
        self.model_name = model_name
        self.scale = scale
        self.flip = flip
        self.texts: list[str] = []

    def _vector(self, text: str) -> list[float]:
        vector = [self.scale * text.lower().count(word) + 0.25 for word in WORDS]
        return vector[::-1] if self.flip else vector

    def embed(self, texts: list[str]) -> list[list[float]]:
        self.texts.extend(texts)
        return [self._vector(text) for text in texts]

    async def aembed(self, texts: list[str]) -> list[list[float]]:
        return self.embed(texts)

    def unit(self, text: str) -> list[float]:
        """The unit vector this embedder's answer for ``text`` must come back as."""
        vector = np.asarray(self._vector(text), dtype=np.float64)
        return [float(x) for x in vector / np.linalg.norm(vector)]


class _NaNEmbedder(WordEmbedder):
    def embed(self, texts: list[str]) -> list[list[float]]:
        return [[math.nan] * len(WORDS) for _ in texts]


def _no_factory() -> KnowledgeBackend:
    pytest.fail("this suite claims 'durable' or 'cross_process' but defines no opener fixture")


def _rows(matrix: Any) -> list[list[float]]:
    return [[float(x) for x in row] for row in np.asarray(matrix, dtype=np.float64)]


class KnowledgeBackendTests:
    """The conformance suite; subclasses provide the ``backend`` fixture (a fresh backend) and,
    for the capabilities they claim, ``opener``."""

    capabilities: ClassVar[frozenset[str]] = frozenset()
    """The optional capabilities this backend claims (a subset of :data:`CAPABILITIES`)."""

    # -- hooks and fixtures --------------------------------------------------------------------
    @pytest.fixture(params=["sync", "async"])
    def twin(self, request: pytest.FixtureRequest) -> Twin:
        """Every test runs twice: through the sync methods and through their async twins."""
        return Twin(request.param)

    @pytest.fixture
    def opener(self) -> Callable[[], KnowledgeBackend]:
        """Opens the store of ``backend`` again; subclasses claiming ``durable`` or ``cross_process`` override it."""
        return _no_factory

    def require(self, capability: str) -> None:
        """Skip the calling test unless this backend claims ``capability``."""
        unknown = self.capabilities - CAPABILITIES
        assert not unknown, f"unknown capabilities {sorted(unknown)}; known: {sorted(CAPABILITIES)}"
        if capability not in self.capabilities:
            pytest.skip(f"{type(self).__name__} does not claim the {capability!r} capability")

    def open_feed(self, backend: KnowledgeBackend) -> None:
        """Start the backend's change feed if something must feed it (default: nothing to do)."""

    def memory(self, backend: KnowledgeBackend, *, embedder: WordEmbedder | None = None) -> Memory:
        """A :class:`Memory` whose notes live in ``backend`` (hybrid search when given an embedder)."""
        config = MemoryConfig(
            fsync=False, categories=CATEGORIES, auto_watch=False, search_mode="hybrid" if embedder else "bm25"
        )
        return Memory(config, runtime=InMemoryRuntimeBackend(), knowledge=backend, embedder=embedder)

    def store(self, backend: KnowledgeBackend, root: Path | None = None) -> Any:
        """The engine (a ``MemoryStore``) of a fresh :meth:`memory` over ``backend``; ``root`` is unused."""
        return self.memory(backend).knowledge.store

    # -- notes ---------------------------------------------------------------------------------
    @pytest.mark.parametrize("label", list(NOTE_TEXTS))
    def test_note_round_trip_is_byte_exact(self, backend: KnowledgeBackend, twin: Twin, label: str) -> None:
        data, name = NOTE_TEXTS[label], _note("alice", "n")
        info = twin(backend, "write_note", "knowledge", name, data)
        assert twin(backend, "read_note", "knowledge", name) == data
        assert info.size == len(data)  # bytes, not characters
        assert (info.category, info.name) == ("knowledge", name)
        assert twin(backend, "note_info", "knowledge", name) == info
        assert twin(backend, "list_notes", "knowledge")[name] == info
        assert twin(backend, "read_note_head", "knowledge", name, 4) == (data[:4], len(data) <= 4)
        missing = _note("alice", "missing")
        heads = twin(backend, "read_note_heads", "knowledge", [name, missing], 4)
        assert heads == {name: (data[:4], len(data) <= 4)}  # a missing note is left out
        assert twin(backend, "read_note_heads", "knowledge", [name], len(data)) == {name: (data, True)}
        replaced = data[::-1] + b"!"
        twin(backend, "write_note", "knowledge", name, replaced)
        assert twin(backend, "read_note", "knowledge", name) == replaced
        assert twin(backend, "note_info", "knowledge", name).size == len(replaced)

    def test_missing_notes_and_blobs_are_none(self, backend: KnowledgeBackend, twin: Twin) -> None:
        missing = _note("alice", "missing")
        assert twin(backend, "read_note", "knowledge", missing) is None
        assert twin(backend, "read_note_head", "knowledge", missing, 10) is None
        assert twin(backend, "note_info", "knowledge", missing) is None
        assert twin(backend, "list_notes", "knowledge") == {}
        assert twin(backend, "list_notes", "knowledge", "alice_") == {}
        assert twin(backend, "read_blob", "memory_index.json") is None
        assert twin(backend, "blob_size", "memory_index.json") is None
        assert twin(backend, "quarantine_blob", "memory_index.json") is None

    def test_delete_is_idempotent(self, backend: KnowledgeBackend, twin: Twin) -> None:
        name = _note("alice", "gone")
        twin(backend, "write_note", "knowledge", name, b"x")
        assert twin(backend, "delete_note", "knowledge", name) is True, "delete_note of a stored note returns True"
        for missing in (name, _note("alice", "never")):  # deleted already, never written
            try:
                answer = twin(backend, "delete_note", "knowledge", missing)
            except Exception as exc:
                raise AssertionError(
                    f"delete_note of a missing note raised {type(exc).__name__}: deleting a missing note is not an "
                    "error, it returns False (deletes are idempotent)"
                ) from None
            assert answer is False, f"delete_note of a missing note returned {answer!r}, the contract wants False"
        assert twin(backend, "read_note", "knowledge", name) is None
        assert name not in twin(backend, "list_notes", "knowledge")

    def test_categories_are_separate(self, backend: KnowledgeBackend, twin: Twin) -> None:
        name = _note("alice", "a")
        twin(backend, "write_note", "knowledge", name, b"k")
        twin(backend, "write_note", "work", name, b"w")
        assert twin(backend, "read_note", "knowledge", name) == b"k"
        assert twin(backend, "read_note", "work", name) == b"w"
        twin(backend, "delete_note", "work", name)
        assert twin(backend, "read_note", "knowledge", name) == b"k"
        assert set(twin(backend, "list_notes", "knowledge")) == {name}
        assert twin(backend, "list_notes", "work") == {}

    def test_listing_per_user_is_exact(self, backend: KnowledgeBackend, twin: Twin) -> None:
        for user in USERS:
            for title in ("one", "two"):
                twin(backend, "write_note", "knowledge", _note(user, title), user.encode())
        everyone = twin(backend, "list_notes", "knowledge")
        assert set(everyone) == {_note(u, t) for u in USERS for t in ("one", "two")}
        for user in USERS:
            mine = twin(backend, "list_notes", "knowledge", user_file_prefix(user))
            assert set(mine) == {_note(user, "one"), _note(user, "two")}, user
            assert all(info.size == len(user.encode()) and info.category == "knowledge" for info in mine.values())
        assert twin(backend, "list_notes", "work", user_file_prefix("bob")) == {}

    def test_list_versions_is_list_notes_in_columns(self, backend: KnowledgeBackend, twin: Twin) -> None:
        for user in USERS:
            for title in ("one", "two"):
                twin(backend, "write_note", "knowledge", _note(user, title), f"{user} {title}".encode())
        for name in NOT_NOTES:
            twin(backend, "write_note", "knowledge", name, b"not a note")
        for prefix in (None, *(user_file_prefix(user) for user in USERS), "nobody_"):
            for category in ("knowledge", "work"):
                listed = twin(backend, "list_versions", category, prefix)
                assert listed.category == category
                assert len(listed.names) == len(listed.sizes) == len(listed.versions) == len(listed.modified)
                columns = {listed.names[i]: listed.info(i) for i in range(len(listed.names))}
                assert columns == twin(backend, "list_notes", category, prefix), (category, prefix)

    def test_unprefixed_listing_holds_only_note_names(self, backend: KnowledgeBackend, twin: Twin) -> None:
        for name in NOT_NOTES:
            assert not is_note_name(name), name
            twin(backend, "write_note", "knowledge", name, b"not a note")
            assert twin(backend, "read_note", "knowledge", name) == b"not a note"  # stored all the same
        twin(backend, "write_note", "knowledge", _note("alice", "real"), b"# Real")
        assert set(twin(backend, "list_notes", "knowledge")) == {_note("alice", "real")}
        assert set(twin(backend, "list_notes", "knowledge", "alice_")) == {_note("alice", "real")}

    def test_versions_tell_writes_apart(self, backend: KnowledgeBackend, twin: Twin) -> None:
        name = _note("alice", "v")
        first = twin(backend, "write_note", "knowledge", name, b"aaaa")
        second = twin(backend, "write_note", "knowledge", name, b"bbbb")
        assert second.size == first.size == 4
        if backend.exact_versions:
            assert second.version > first.version
        else:  # timestamps may tie within one tick; never go backwards
            assert second.version >= first.version
        assert twin(backend, "note_info", "knowledge", name) == second

    def test_note_times_are_wall_clock_seconds_since_the_epoch(self, backend: KnowledgeBackend, twin: Twin) -> None:
        """``NoteInfo.modified`` is ``time.time()`` of the write, wherever it is reported: user
        listings and ``show`` compare it with this host's ``time.time()``."""
        name, category = _note("alice", "when"), "knowledge"
        before = time.time()
        written = twin(backend, "write_note", category, name, b"# When")
        _, updated = twin(backend, "update_note", category, name, lambda old: (old or b"") + b"!")
        after = time.time()
        listed = twin(backend, "list_versions", category, user_file_prefix("alice"))
        for what, info in (
            ("write_note(...).modified", written),
            ("update_note(...)[1].modified", updated),
            ("note_info(...).modified", twin(backend, "note_info", category, name)),
            ("list_notes(...)[name].modified", twin(backend, "list_notes", category)[name]),
            ("list_versions(...).modified[i]", listed.info(listed.names.index(name))),
        ):
            assert_wall_clock(info.modified, before, after, what)

    def test_concurrent_writers_lose_no_note(self, backend: KnowledgeBackend, twin: Twin) -> None:
        start = threading.Barrier(4)

        def write(user: str) -> None:
            start.wait()
            for i in range(20):
                twin(backend, "write_note", "knowledge", _note(user, f"n{i}"), f"{user} {i}".encode())

        threads = [threading.Thread(target=write, args=(u,)) for u in ("u1", "u2", "u3", "u4")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(twin(backend, "list_notes", "knowledge")) == 80
        assert twin(backend, "read_note", "knowledge", _note("u3", "n7")) == b"u3 7"

    # -- blob rewrites (how the index journal is folded into a snapshot) ----------------------------
    def test_rewrite_blobs_reads_all_then_writes_each_or_nothing(self, backend: KnowledgeBackend) -> None:
        backend.write_blob(".kit/a", b"one")
        seen: list[list[bytes | None]] = []

        def change(current: list[bytes | None]) -> list[bytes]:
            seen.append(current)
            return [b"A", b"B"]

        backend.rewrite_blobs([".kit/a", ".kit/b"], change)
        assert seen == [[b"one", None]], "rewrite_blobs gives change the blobs' contents, None for a missing one"
        assert (backend.read_blob(".kit/a"), backend.read_blob(".kit/b")) == (b"A", b"B")

        def refuse(current: list[bytes | None]) -> list[bytes]:
            raise ValueError("refused")

        with pytest.raises(ValueError, match="refused"):
            backend.rewrite_blobs([".kit/a", ".kit/b"], refuse)
        assert (backend.read_blob(".kit/a"), backend.read_blob(".kit/b")) == (b"A", b"B"), (
            "a change that raises must write nothing"
        )

    def test_rewrite_blobs_loses_no_append_made_meanwhile(self, backend: KnowledgeBackend) -> None:
        # Rewrites keep what they read and add one byte; appends run in other threads at the
        # same time. An append that lands between a rewrite's read and its write is lost unless
        # the rewrite holds off appends of that blob (the contract's rule).
        name = ".kit/journal"
        backend.write_blob(name, b"")
        appends, rewrites = 4 * 60, 60
        start = threading.Barrier(5)

        def append(_: int) -> None:
            start.wait()
            for _ in range(appends // 4):
                backend.append_blob(name, b"a")

        threads = [threading.Thread(target=append, args=(t,)) for t in range(4)]
        for thread in threads:
            thread.start()
        start.wait()

        def keep_and_mark(current: list[bytes | None]) -> list[bytes]:
            time.sleep(0.002)  # a window between the read and the write for the appends to hit
            return [(current[0] or b"") + b"r"]

        for _ in range(rewrites):
            backend.rewrite_blobs([name], keep_and_mark)
        for thread in threads:
            thread.join()
        data = backend.read_blob(name) or b""
        assert (data.count(b"a"), data.count(b"r")) == (appends, rewrites), (
            "rewrite_blobs must hold off append_blob of the same blob: an append made meanwhile was lost"
        )

    # -- change feed ---------------------------------------------------------------------------
    def test_change_feed_sees_inserts_modifications_and_deletes(self, backend: KnowledgeBackend, twin: Twin) -> None:
        self.require("change_feed")
        self.open_feed(backend)
        alice, bob = user_file_prefix("alice"), user_file_prefix("bob")
        start = twin(backend, "owner_changes", alice, None)
        assert start is not None, "a backend claiming 'change_feed' never answers None"
        assert not start.complete  # nothing to compare with yet: the caller lists everything once
        bob_start = twin(backend, "owner_changes", bob, None)
        a, b = ("knowledge", _note("alice", "a")), ("work", _note("bob", "b"))
        twin(backend, "write_note", *a, b"one")
        inserted = twin(backend, "owner_changes", alice, start.cursor)
        assert inserted.complete
        assert inserted.keys == {a}
        twin(backend, "write_note", *a, b"two")
        twin(backend, "write_note", *b, b"three")
        modified = twin(backend, "owner_changes", alice, inserted.cursor)
        assert modified.complete
        assert modified.keys == {a}, "an owner's feed names that owner's notes only"
        bobs = twin(backend, "owner_changes", bob, bob_start.cursor)
        assert bobs.complete
        assert bobs.keys == {b}
        assert twin(backend, "delete_note", *a)
        deleted = twin(backend, "owner_changes", alice, modified.cursor)
        assert deleted.complete
        assert deleted.keys == {a}, "a delete must reach the change feed"
        assert not twin(backend, "delete_note", *a)  # nothing deleted: the feed may stay quiet
        quiet = twin(backend, "owner_changes", alice, deleted.cursor)
        assert quiet.complete
        assert quiet.keys <= {a}
        again = twin(backend, "owner_changes", alice, quiet.cursor)
        assert (again.keys, again.cursor) == (frozenset(), quiet.cursor)
        everything = twin(backend, "owner_changes", alice, start.cursor)
        assert everything.complete
        assert everything.keys >= {a}

    def test_change_feed_refuses_a_cursor_it_never_handed_out(self, backend: KnowledgeBackend, twin: Twin) -> None:
        self.require("change_feed")
        self.open_feed(backend)
        alice = user_file_prefix("alice")
        twin(backend, "write_note", "knowledge", _note("alice", "a"), b"one")
        start = twin(backend, "owner_changes", alice, None)
        twin(backend, "write_note", "knowledge", _note("alice", "b"), b"two")
        current = twin(backend, "owner_changes", alice, start.cursor)
        assert current.complete
        beyond = twin(backend, "owner_changes", alice, current.cursor + (1 << 40))
        assert beyond is not None, "a backend claiming 'change_feed' never answers None"
        assert not beyond.complete, (
            "owner_changes answered a cursor larger than any it handed out (a restored database's, another "
            "store's) as complete: the contract wants complete=False, so the caller compares its listing"
        )
        whole = twin(backend, "changes", None)
        if whole is not None:  # a backend with a feed of every owner keeps the same rule there
            past = twin(backend, "changes", whole.cursor + (1 << 40))
            assert past is None or not past.complete, (
                "changes() answered a cursor larger than any it handed out as complete: the contract wants "
                "complete=False (or None)"
            )

    def test_following_an_owner_gives_the_feed_cursor_and_their_listing(
        self, backend: KnowledgeBackend, twin: Twin
    ) -> None:
        """``follow_owner``: the owner's listing of each category asked, in order, as
        ``list_versions`` gives it, and a cursor from which ``owner_changes`` reports every later
        change (``None`` exactly when ``owner_changes`` keeps no feed)."""
        self.open_feed(backend)
        alice = user_file_prefix("alice")
        for user in ("alice", "bob_admin", "bob"):
            for category in CATEGORIES:
                twin(backend, "write_note", category, _note(user, f"in {category}"), f"{user} {category}".encode())
        twin(backend, "write_note", "knowledge", _note("alice", "second"), b"two")
        twin(backend, "write_note", "knowledge", "alice_draft.txt", b"not a note")
        asked = ["work", "knowledge", "empty"]
        start = twin(backend, "follow_owner", alice, asked)
        if start is None:
            assert twin(backend, "owner_changes", alice, None) is None, (
                "follow_owner answered None while owner_changes keeps a feed: None means no feed"
            )
            assert "change_feed" not in self.capabilities, "a backend claiming 'change_feed' never answers None"
            return
        assert [listed.category for listed in start.listings] == asked, "one listing per category, in the order asked"
        for listed in start.listings:
            columns = {listed.names[i]: listed.info(i) for i in range(len(listed.names))}
            assert len(columns) == len(listed.names) == len(listed.sizes) == len(listed.versions)
            assert columns == twin(backend, "list_notes", listed.category, alice), (
                f"follow_owner's listing of {listed.category!r} must be list_notes of the owner's prefix"
            )
        later = ("work", _note("alice", "later"))
        twin(backend, "write_note", *later, b"later")
        twin(backend, "write_note", "knowledge", _note("bob", "later"), b"not alice's")
        changes = twin(backend, "owner_changes", alice, start.cursor)
        assert changes is not None, "a feed that follow_owner started answers owner_changes"
        assert changes.complete, "the cursor of follow_owner is one owner_changes knows"
        assert later in changes.keys, "a change after follow_owner must be reported from its cursor on"
        nobody = twin(backend, "follow_owner", user_file_prefix("nobody"), asked)
        assert [(listed.category, listed.names) for listed in nobody.listings] == [(c, []) for c in asked]
        twin(backend, "write_note", "knowledge", _note("nobody", "first"), b"first")
        first = twin(backend, "owner_changes", user_file_prefix("nobody"), nobody.cursor)
        assert first.complete, "the cursor of an owner without notes yet is one owner_changes knows"
        assert ("knowledge", _note("nobody", "first")) in first.keys, (
            "the cursor of an owner without notes yet must report their first note"
        )

    def test_change_feed_misses_nothing_while_threads_write(self, backend: KnowledgeBackend, twin: Twin) -> None:
        self.require("change_feed")
        self.open_feed(backend)
        prefixes = [user_file_prefix(f"w{t}") for t in range(4)]
        cursors = {prefix: twin(backend, "owner_changes", prefix, None).cursor for prefix in prefixes}
        written: set[NoteKey] = {("knowledge", _note(f"w{t}", f"n{i}")) for t in range(4) for i in range(25)}
        done = threading.Event()

        def write(t: int) -> None:
            for i in range(25):
                backend.write_note("knowledge", _note(f"w{t}", f"n{i}"), b"x")

        threads = [threading.Thread(target=write, args=(t,)) for t in range(4)]
        for thread in threads:
            thread.start()

        def wait_for_writers() -> None:
            for thread in threads:
                thread.join()
            done.set()

        waiter = threading.Thread(target=wait_for_writers)
        waiter.start()
        seen: set[NoteKey] = set()
        while True:  # a reader following the feeds while others write sees every write, at last
            finished = done.is_set()
            for prefix in prefixes:
                changes = twin(backend, "owner_changes", prefix, cursors[prefix])
                assert changes.complete
                seen |= changes.keys
                cursors[prefix] = changes.cursor
            if finished:
                break
        waiter.join()
        assert written - seen == set()

    # -- blobs -------------------------------------------------------------------------------
    def test_categories_are_listed_and_blobs_deleted(self, backend: KnowledgeBackend, twin: Twin) -> None:
        assert twin(backend, "list_categories") == []
        twin(backend, "write_note", "notes", "alice_a.md", b"a")
        twin(backend, "write_note", "knowledge", "alice_b.md", b"b")
        assert twin(backend, "list_categories") == ["knowledge", "notes"]
        twin(backend, "write_blob", ".bm25/knowledge/alice_bm25.npz", b"snapshot")
        assert twin(backend, "delete_blob", ".bm25/knowledge/alice_bm25.npz") is True
        assert twin(backend, "read_blob", ".bm25/knowledge/alice_bm25.npz") is None
        assert twin(backend, "delete_blob", ".bm25/knowledge/alice_bm25.npz") is False

    def test_blobs_round_trip_and_quarantine(self, backend: KnowledgeBackend, twin: Twin) -> None:
        data = bytes(range(256)) * 10
        twin(backend, "write_blob", ".bm25/knowledge/alice_bm25.npz", data)
        assert twin(backend, "read_blob", ".bm25/knowledge/alice_bm25.npz") == data
        assert twin(backend, "blob_size", ".bm25/knowledge/alice_bm25.npz") == len(data)
        twin(backend, "write_blob", "memory_index.json", b"{broken")
        assert twin(backend, "quarantine_blob", "memory_index.json") is not None
        assert twin(backend, "read_blob", "memory_index.json") is None
        marker = erasure_marker("bob_admin")
        twin(backend, "write_blob", marker, b"")
        assert twin(backend, "blob_size", marker) == 0
        assert not backend.blob_known_absent(marker)
        assert twin(backend, "blob_size", erasure_marker("bob")) is None

    def test_read_blobs_gives_those_that_exist(self, backend: KnowledgeBackend, twin: Twin) -> None:
        """``read_blobs``: ``{name: bytes}`` of each stored blob asked for (an empty one as
        ``b""``, a name asked twice once), the missing ones left out."""
        stored = {
            ".index/alice_index.json": bytes(range(256)) * 40,
            ".index/alice_index.journal": b"",
            erasure_marker("bob_admin"): b"",
        }
        for name, data in stored.items():
            twin(backend, "write_blob", name, data)
        asked = [*stored, erasure_marker("bob"), ".index/alice_index.json", ".bm25/knowledge/alice_bm25.npz"]
        assert twin(backend, "read_blobs", asked) == stored, "read_blobs must give every stored blob, exactly"
        assert twin(backend, "read_blobs", [erasure_marker("bob")]) == {}, "a missing blob is left out"
        assert twin(backend, "read_blobs", []) == {}

    def test_close_is_harmless_twice(self, backend: KnowledgeBackend, twin: Twin) -> None:
        twin(backend, "write_note", "knowledge", _note("alice", "a"), b"a")
        twin(backend, "close")
        backend.close()  # twice is harmless

    # -- the vector cache ------------------------------------------------------------------------
    def test_vectors_are_unit_rows_of_the_texts(self, backend: KnowledgeBackend, twin: Twin) -> None:
        embedder = WordEmbedder()
        cache = backend.vector_cache(embedder)
        items = [("knowledge/alice_a.md", "apple apple cherry"), ("knowledge/alice_b.md", "golf")]
        for matrix in (twin(cache, "vectors_for", items), twin(cache, "vectors_for", items)):  # new, then kept
            rows = _rows(matrix)
            assert len(rows) == 2
            for row, (_, text) in zip(rows, items, strict=True):
                assert np.linalg.norm(row) == pytest.approx(1.0, abs=1e-5)
                assert row == pytest.approx(embedder.unit(text), abs=1e-5)
        query = _rows([twin(cache, "embed_query", "cherry golf")])[0]
        assert query == pytest.approx(embedder.unit("cherry golf"), abs=1e-5)

    def test_vectors_come_in_the_order_asked(self, backend: KnowledgeBackend, twin: Twin) -> None:
        embedder = WordEmbedder()
        cache = backend.vector_cache(embedder)
        texts = [" ".join(WORDS[i : i + 2]) for i in range(0, len(WORDS), 2)]  # six distinct texts
        twin(cache, "vectors_for", [(f"k/{t}", t) for t in texts[::2]])  # some kept, some not
        asked = [texts[5], texts[0], texts[3], texts[0], texts[2], texts[1], texts[4]]
        rows = _rows(twin(cache, "vectors_for", [(f"k/{i}", t) for i, t in enumerate(asked)]))
        assert len(rows) == len(asked)
        for row, text in zip(rows, asked, strict=True):
            assert row == pytest.approx(embedder.unit(text), abs=1e-5), text
        assert sorted(embedder.texts) == sorted(texts), "each text is embedded once"

    def test_vectors_are_kept_per_model_identity(self, backend: KnowledgeBackend, twin: Twin) -> None:
        first, second = WordEmbedder("kit-model-a"), WordEmbedder("kit-model-b", flip=True)
        items = [("knowledge/alice_a.md", "apple banana banana")]
        a = _rows(twin(backend.vector_cache(first), "vectors_for", items))
        b = _rows(twin(backend.vector_cache(second), "vectors_for", items))
        assert a[0] == pytest.approx(first.unit(items[0][1]), abs=1e-5)
        assert b[0] == pytest.approx(second.unit(items[0][1]), abs=1e-5), "another model's vector was returned"
        assert second.texts == [items[0][1]]
        again = _rows(twin(backend.vector_cache(WordEmbedder("kit-model-a")), "vectors_for", items))
        assert again[0] == pytest.approx(a[0], abs=1e-5)

    def test_discard_removes_vectors(self, backend: KnowledgeBackend, twin: Twin) -> None:
        embedder = WordEmbedder()
        cache = backend.vector_cache(embedder)
        items = [("knowledge/alice_a.md", "kilo lima"), ("knowledge/alice_b.md", "india")]
        twin(cache, "vectors_for", items)
        assert cache.discard(items[:1]) == 1
        assert cache.discard(items[:1]) == 0
        embedder.texts.clear()
        rows = _rows(twin(cache, "vectors_for", items))
        assert embedder.texts == ["kilo lima"], "a discarded vector must be embedded again, the other kept"
        assert rows[0] == pytest.approx(embedder.unit("kilo lima"), abs=1e-5)

    def test_an_edited_text_gets_its_new_vector(
        self, backend: KnowledgeBackend, opener: Callable[[], KnowledgeBackend], twin: Twin
    ) -> None:
        """Vectors are kept by text, not by key: when the text under a key changes (a note was
        edited), :meth:`~VectorCache.vectors_for` answers the new text's vector, and :meth:`~VectorCache.kept`
        has it under :meth:`~VectorCache.digest_of` the new text; the same through a reopened
        store (``durable``). The engines ask again after every edit, with the same key."""
        key, other = "knowledge/alice_a.md#0", "knowledge/alice_b.md#0"

        def check(store: KnowledgeBackend, old: str, new: str) -> None:
            embedder = WordEmbedder("kit-edits")
            cache = store.vector_cache(embedder)
            twin(cache, "vectors_for", [(key, old)])
            rows = _rows(twin(cache, "vectors_for", [(key, new), (other, old)]))
            assert rows[0] == pytest.approx(embedder.unit(new), abs=1e-5), (
                "vectors_for answered the vector of the key's old text after the text changed: vectors are "
                "kept by text (digest_of), and a key's text may change with every edit of its note"
            )
            assert rows[1] == pytest.approx(embedder.unit(old), abs=1e-5)
            kept = cache.kept([cache.digest_of(new), cache.digest_of(old)])
            assert kept is not None, "kept() lost a vector vectors_for had just kept"
            assert _rows(kept) == [
                pytest.approx(embedder.unit(new), abs=1e-5),
                pytest.approx(embedder.unit(old), abs=1e-5),
            ], "kept(digests) must answer each digest's own vector, in the order asked"

        check(backend, "apple apple cherry", "golf hotel")
        if "durable" in self.capabilities:
            twin(backend, "close")
            reopened = opener()
            try:
                check(reopened, "golf hotel", "kilo lima india")
            finally:
                reopened.close()

    def test_kept_vectors_are_found_by_digest_in_the_order_asked(self, backend: KnowledgeBackend, twin: Twin) -> None:
        """What a hybrid query trusts without the texts: :meth:`~VectorCache.digest_of` names a text
        the same way in every cache of the model (and two texts apart), :meth:`~VectorCache.kept`
        answers one row per digest in the order asked (duplicates included) or ``None`` when one is
        not kept, and :meth:`~VectorCache.discard_kept` deletes them and says how many it had."""
        embedder = WordEmbedder("kit-kept")
        cache = backend.vector_cache(embedder)
        texts = ["apple banana", "cherry delta", "echo fox", "golf hotel", "india juliet"]
        twin(cache, "vectors_for", [(f"knowledge/alice_k{i}.md#0", text) for i, text in enumerate(texts)])
        digests = [cache.digest_of(text) for text in texts]
        assert len(set(digests)) == len(texts), "digest_of gave two different texts one digest"
        other = backend.vector_cache(WordEmbedder("kit-kept"))
        assert [other.digest_of(text) for text in texts] == digests, "digest_of differs between caches of one model"
        order = [4, 0, 3, 0, 1, 2]
        kept = cache.kept([digests[i] for i in order])
        assert kept is not None, "kept() does not find vectors kept under digest_of of their texts"
        assert _rows(kept) == [pytest.approx(embedder.unit(texts[i]), abs=1e-5) for i in order], (
            "kept(digests) must answer row i for digests[i], in the order asked (duplicates included)"
        )
        assert cache.kept([digests[0], cache.digest_of("not kept")]) is None, "kept() answered for a digest never kept"
        assert cache.discard_kept([digests[1], digests[1]]) == 1, "discard_kept must say how many it had"
        assert cache.kept([digests[1]]) is None, "discard_kept left the vector kept"
        assert cache.discard_kept([digests[1]]) == 0

    def test_no_items_ask_no_embedder(self, backend: KnowledgeBackend, twin: Twin) -> None:
        """``vectors_for([])`` and ``kept([])`` answer an empty matrix (no rows; its width is not
        specified) without calling the embedder; ``discard([])`` and ``discard_kept([])`` answer 0."""
        embedder = WordEmbedder("kit-empty")
        cache = backend.vector_cache(embedder)
        empty = np.asarray(twin(cache, "vectors_for", []))
        assert empty.ndim == 2, f"vectors_for([]) must answer a matrix with no rows, got shape {empty.shape}"
        assert empty.shape[0] == 0, f"vectors_for([]) must answer no rows, got shape {empty.shape}"
        assert embedder.texts == [], "vectors_for([]) called the embedder"
        kept = cache.kept([])
        assert kept is not None, "kept([]) must answer an empty matrix: nothing asked is missing"
        assert np.asarray(kept).shape[0] == 0, "kept([]) must answer no rows"
        assert (cache.discard([]), cache.discard_kept([])) == (0, 0)

    def test_a_name_that_would_leave_the_store_is_refused_or_kept_opaque(
        self, backend: KnowledgeBackend, twin: Twin
    ) -> None:
        """A category, note or blob name with ``..``, a separator or an absolute path is refused
        with :class:`~local_ai_memory.PathEscapeError` before anything is written (a store of
        paths), or kept as an opaque key and read back under that exact name (a database):
        never another error, and never a write outside the store."""
        for category, name, blob in (
            ("knowledge", "../alice_x.md", "../../escaped"),
            ("..", "alice_x.md", "/etc/escaped"),
            ("knowledge", "a/alice_x.md", ".bm25/../../escaped"),
        ):
            for what, write, read in (
                (
                    f"write_note({category!r}, {name!r})",
                    ("write_note", category, name, b"x"),
                    ("read_note", category, name),
                ),
                (f"write_blob({blob!r})", ("write_blob", blob, b"x"), ("read_blob", blob)),
            ):
                try:
                    twin(backend, *write)
                except PathEscapeError:
                    continue
                except Exception as exc:
                    raise AssertionError(
                        f"{what} raised {type(exc).__name__}: a name that would leave the store is refused with "
                        "PathEscapeError, or (a store without paths) kept as an opaque key"
                    ) from None
                assert twin(backend, *read) == b"x", f"{what} was accepted but does not read back under that name"

    def test_a_bad_embedder_answer_is_refused(self, backend: KnowledgeBackend, twin: Twin) -> None:
        cache = backend.vector_cache(_NaNEmbedder("kit-nan"))
        with pytest.raises(ModelError):
            twin(cache, "vectors_for", [("k", "apple")])
        healthy = backend.vector_cache(WordEmbedder("kit-nan"))  # nothing of the bad answer was kept
        assert np.all(np.isfinite(_rows(twin(healthy, "vectors_for", [("k", "apple")]))))

    # -- through the engines ---------------------------------------------------------------------
    def test_store_round_trips_text_exactly(self, backend: KnowledgeBackend, twin: Twin) -> None:
        store = self.store(backend)
        for label, data in NOTE_TEXTS.items():
            if b"\xff" in data:
                continue  # the engine writes text
            path = f"knowledge/{_note('alice', label.replace(' ', '-'))}"
            twin(store, "write_file", path, data.decode("utf-8"))
            assert twin(store, "read_file", path) == data.decode("utf-8")
        with pytest.raises(Exception, match="no memory file"):
            twin(store, "read_file", f"knowledge/{_note('alice', 'missing')}")

    def test_store_search_isolates_users(self, backend: KnowledgeBackend, twin: Twin) -> None:
        store = self.store(backend)
        for user in USERS:
            twin(store, "write_file", f"knowledge/{_note(user, 'secret')}", f"# Secret\n\nvault code of {user}")
        for user in USERS:
            assert twin(store, "bm25_search", "vault code", user_id=user) == [_note(user, "secret")]
            assert [p.name for p in twin(store, "list_user_files", user, "knowledge")] == [_note(user, "secret")]

    def test_note_written_elsewhere_is_found_by_the_next_query(self, backend: KnowledgeBackend, twin: Twin) -> None:
        self.open_feed(backend)
        reader, writer = self.store(backend), self.store(backend)
        twin(reader, "write_file", f"knowledge/{_note('alice', 'a')}", "# A\n\napples")
        assert twin(reader, "bm25_search", "apples", user_id="alice") == [_note("alice", "a")]
        twin(writer, "write_file", f"knowledge/{_note('alice', 'b')}", "# B\n\nbananas")
        assert twin(reader, "bm25_search", "bananas", user_id="alice") == [_note("alice", "b")]
        twin(backend, "write_note", "knowledge", _note("alice", "a"), b"# A\n\ncherries")
        assert twin(reader, "bm25_search", "cherries", user_id="alice") == [_note("alice", "a")]
        assert twin(reader, "bm25_search", "apples", user_id="alice") == []
        twin(backend, "delete_note", "knowledge", _note("alice", "b"))
        assert twin(reader, "bm25_search", "bananas", user_id="alice") == []

    def _scripted(self, backend: KnowledgeBackend, twin: Twin, store: Any) -> dict[tuple[str, str], str]:
        """A scripted mix of writes (through the store and behind its back), rewrites and deletes
        by ``bob`` and ``bob_admin``, with queries in between; returns the final notes."""
        final: dict[tuple[str, str], str] = {}
        for step in range(60):
            user = ("bob", "bob_admin")[step % 2]
            category = CATEGORIES[step % 3 % 2]
            key = (category, _note(user, f"n{step % 17}"))
            if step % 7 == 6 and key in final:
                twin(backend, "delete_note", *key)
                del final[key]
            else:
                text = f"# Note {step}\n\n" + " ".join(WORDS[(step * k) % len(WORDS)] for k in range(1, step % 9 + 3))
                if step % 3 == 0:
                    twin(backend, "write_note", *key, text.encode())  # behind the store's back
                else:
                    twin(store, "write_file", f"{key[0]}/{key[1]}", text)
                final[key] = text
            if step % 5 == 0:
                twin(store, "search", "apple cherry", 50, user_id=user)
        return final

    def test_scores_after_inserts_and_deletes_equal_a_fresh_build(self, backend: KnowledgeBackend, twin: Twin) -> None:
        from local_ai_memory._knowledge.index_file import ranking_tokens
        from local_ai_memory._shared.text import Analyzer

        self.open_feed(backend)
        store = self.store(backend)
        final = self._scripted(backend, twin, store)
        reference = InMemoryKnowledgeBackend()
        for (category, name), text in final.items():
            reference.write_note(category, name, text.encode())
        fresh = self.store(reference)
        for user in ("bob", "bob_admin"):
            for query in ("apple cherry", "golf", "note juliet kilo", "zebra"):
                got = twin(store, "search", query, 50, user_id=user)
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
        reopened = self.store(backend)
        assert twin(reopened, "search", "apple cherry", 50, user_id="bob") == store.search(
            "apple cherry", 50, user_id="bob"
        )

    def test_hybrid_ranking_equals_the_reference_backend(self, backend: KnowledgeBackend, twin: Twin) -> None:
        self.open_feed(backend)
        reference = InMemoryKnowledgeBackend()
        stores = [self.memory(b, embedder=WordEmbedder("kit-hybrid")).knowledge.store for b in (backend, reference)]
        for store in stores:
            for i in range(24):
                for user in ("bob", "bob_admin"):
                    words = " ".join(WORDS[(i * k + len(user)) % len(WORDS)] for k in range(1, i % 5 + 2))
                    twin(store, "write_file", f"knowledge/{_note(user, f'n{i}')}", f"# Note {i}\n\n{words}")
            twin(store, "delete_file", f"knowledge/{_note('bob', 'n3')}")
        compared = 0
        for user in ("bob", "bob_admin"):
            for query in ("apple cherry", "golf hotel", "kilo", "note lima echo", "zebra"):
                got, expected = (twin(store, "hybrid_candidates", query, 12, user_id=user) for store in stores)
                assert [c.filename for c in got] == [c.filename for c in expected], (user, query)
                assert [c.score for c in got] == pytest.approx([c.score for c in expected], abs=1e-6)
                compared += len(got)
        assert compared > 40

    # -- durability (capability "durable") ------------------------------------------------------
    def test_everything_survives_a_reopen(
        self, backend: KnowledgeBackend, opener: Callable[[], KnowledgeBackend], twin: Twin
    ) -> None:
        self.require("durable")
        self.open_feed(backend)
        for label, data in NOTE_TEXTS.items():
            twin(backend, "write_note", "knowledge", _note("alice", label.replace(" ", "-")), data)
        twin(backend, "write_note", "work", _note("bob", "w"), b"work")
        twin(backend, "delete_note", "knowledge", _note("alice", "empty"))
        twin(backend, "write_blob", "memory_index.json", b"{}")
        twin(backend, "write_blob", erasure_marker("carol"), b"")
        before = {c: twin(backend, "list_notes", c) for c in CATEGORIES}
        twin(backend, "close")
        reopened = opener()
        try:
            self.open_feed(reopened)
            assert {c: twin(reopened, "list_notes", c) for c in CATEGORIES} == before
            for label, data in NOTE_TEXTS.items():
                expected = None if label == "empty" else data
                assert twin(reopened, "read_note", "knowledge", _note("alice", label.replace(" ", "-"))) == expected
            assert twin(reopened, "read_blob", "memory_index.json") == b"{}"
            assert twin(reopened, "blob_size", erasure_marker("carol")) == 0
            assert twin(reopened, "list_categories") == ["knowledge", "work"]
            if "change_feed" in self.capabilities:  # the reopened store's feed follows its writes
                start = twin(reopened, "owner_changes", user_file_prefix("alice"), None)
                twin(reopened, "write_note", "knowledge", _note("alice", "later"), b"later")
                assert twin(reopened, "owner_changes", user_file_prefix("alice"), start.cursor).keys == {
                    ("knowledge", _note("alice", "later"))
                }
        finally:
            reopened.close()

    def test_a_pending_erasure_survives_a_restart(
        self,
        backend: KnowledgeBackend,
        opener: Callable[[], KnowledgeBackend],
        twin: Twin,
        tmp_path: Path,
    ) -> None:
        self.require("durable")
        knowledge = self.memory(backend).knowledge
        for user in ("alice", "bob"):
            for i in range(3):
                knowledge.write_note(user, f"n{i}", f"# Vault {i}\n\nvault code {i} of {user}")
        assert len(knowledge.search("vault", "alice")) == 3
        # A forgetting of alice wrote its marker, then the process died before deleting anything.
        twin(backend, "write_blob", erasure_marker("alice"), b"")
        twin(backend, "close")
        job = Job("search", opener, twin.mode, extra={"query": "vault", "users": ["alice", "bob"]})
        answers = finish(start(job, tmp_path / "jobs"))  # a new process: nothing survives but the store
        assert answers["alice"] == ([], []), "after a restart, the search of a user being forgotten found notes"
        assert len(answers["bob"][0]) == len(answers["bob"][1]) == 3

    def test_confirmed_writes_survive_a_killed_writer(
        self, backend: KnowledgeBackend, opener: Callable[[], KnowledgeBackend], twin: Twin, tmp_path: Path
    ) -> None:
        """A writer process killed (SIGKILL) at random points of its writes loses none it had
        confirmed (notes, blob appends, update_note), and its crash damages nothing stored before."""
        self.require("durable")
        mode: Mode = "async" if twin.mode == "async" else "sync"
        assert kill_rounds(opener, "knowledge", mode, tmp_path / "kills", check_knowledge) >= KILLS

    def test_update_note_is_an_atomic_read_modify_write(self, backend: KnowledgeBackend, twin: Twin) -> None:
        name = _note("alice", "counter")
        seen: list[bytes | None] = []

        def first(current: bytes | None) -> bytes:
            seen.append(current)
            return b"1"

        data, info = twin(backend, "update_note", "knowledge", name, first)
        assert (data, seen) == (b"1", [None])
        assert info == twin(backend, "note_info", "knowledge", name)

        def refuse(current: bytes | None) -> bytes:
            raise ConflictError("refused", None)

        with pytest.raises(ConflictError):
            twin(backend, "update_note", "knowledge", name, refuse)
        assert twin(backend, "read_note", "knowledge", name) == b"1"  # a refused change writes nothing

        def bump(current: bytes | None) -> bytes:
            return str(int(current or b"0") + 1).encode()

        threads = [
            threading.Thread(target=lambda: [backend.update_note("knowledge", name, bump) for _ in range(25)])
            for _ in range(4)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert twin(backend, "read_note", "knowledge", name) == b"101"  # no increment lost
        assert set(twin(backend, "list_notes", "knowledge")) == {name}

    def test_delete_note_if_checks_what_it_deletes(self, backend: KnowledgeBackend, twin: Twin) -> None:
        name = _note("alice", "gone")
        twin(backend, "write_note", "knowledge", name, b"v1")
        seen: list[bytes | None] = []

        def refuse(current: bytes | None) -> None:
            seen.append(current)
            raise ConflictError("refused", None)

        with pytest.raises(ConflictError):
            twin(backend, "delete_note_if", "knowledge", name, refuse)
        assert seen == [b"v1"]
        assert twin(backend, "read_note", "knowledge", name) == b"v1"  # a refused delete deletes nothing
        assert twin(backend, "delete_note_if", "knowledge", name, seen.append) is True
        assert twin(backend, "read_note", "knowledge", name) is None
        assert twin(backend, "delete_note_if", "knowledge", name, seen.append) is False
        assert seen[-1] is None

    def test_a_note_write_appends_its_line_with_it(self, backend: KnowledgeBackend, twin: Twin) -> None:
        name, journal = _note("alice", "journaled"), "memory_index.journal"
        seen: list[tuple[bytes, NoteInfo]] = []

        def line(data: bytes, info: NoteInfo) -> bytes:
            seen.append((data, info))
            return f"{info.version} {len(data)}\n".encode()

        info = twin(backend, "write_note_with", "knowledge", name, b"v1", BlobAppend(journal, line))
        assert seen == [(b"v1", info)]  # the line is made from the version the write got
        assert info == twin(backend, "note_info", "knowledge", name)
        assert twin(backend, "read_note", "knowledge", name) == b"v1"
        first = f"{info.version} 2\n".encode()
        assert twin(backend, "read_blob", journal) == first

        data, updated = twin(
            backend, "update_note_with", "knowledge", name, lambda old: (old or b"") + b"+", BlobAppend(journal, line)
        )
        assert (data, seen[-1]) == (b"v1+", (b"v1+", updated))
        assert updated == twin(backend, "note_info", "knowledge", name)
        assert twin(backend, "read_blob", journal) == first + f"{updated.version} 3\n".encode()

        def refuse(current: bytes | None) -> bytes:
            raise ConflictError("refused", None)

        with pytest.raises(ConflictError):
            twin(backend, "update_note_with", "knowledge", name, refuse, BlobAppend(journal, line))
        assert twin(backend, "read_note", "knowledge", name) == b"v1+"  # a refused change writes nothing
        assert len(seen) == 2  # and appends nothing

    def test_a_note_delete_appends_its_line_with_it(self, backend: KnowledgeBackend, twin: Twin) -> None:
        name, journal = _note("alice", "deleted"), "memory_index.journal"

        def line(text: str) -> Callable[[], bytes]:
            return text.encode

        twin(backend, "write_note", "knowledge", name, b"v1")
        assert twin(backend, "delete_note_with", "knowledge", name, journal, line("gone\n")) is True
        assert twin(backend, "read_note", "knowledge", name) is None
        assert twin(backend, "note_info", "knowledge", name) is None
        assert twin(backend, "read_blob", journal) == b"gone\n"
        assert twin(backend, "delete_note_with", "knowledge", name, journal, line("absent\n")) is False
        assert twin(backend, "read_blob", journal) == b"gone\n"  # no note, no line

        twin(backend, "write_note", "knowledge", name, b"v2")
        seen: list[bytes | None] = []

        def refuse(current: bytes | None) -> None:
            seen.append(current)
            raise ConflictError("refused", None)

        with pytest.raises(ConflictError):
            twin(backend, "delete_note_with", "knowledge", name, journal, line("refused\n"), refuse)
        assert seen == [b"v2"]
        assert twin(backend, "read_note", "knowledge", name) == b"v2"  # a refused delete deletes nothing
        assert twin(backend, "read_blob", journal) == b"gone\n"  # and appends nothing
        assert twin(backend, "delete_note_with", "knowledge", name, journal, line("checked\n"), seen.append) is True
        assert seen[-1] == b"v2"  # the check saw the bytes it deleted
        assert twin(backend, "read_note", "knowledge", name) is None
        assert twin(backend, "read_blob", journal) == b"gone\nchecked\n"

    def test_a_failed_append_leaves_the_note_unwritten(self, backend: KnowledgeBackend, twin: Twin) -> None:
        self.require("atomic_appends")
        name, journal = _note("alice", "atomic"), "memory_index.journal"
        twin(backend, "write_note", "knowledge", name, b"old")
        before = twin(backend, "note_info", "knowledge", name)

        def broken(data: bytes, info: NoteInfo) -> bytes:
            raise ConflictError("the line could not be made", None)

        with pytest.raises(ConflictError):
            twin(backend, "write_note_with", "knowledge", name, b"new", BlobAppend(journal, broken))
        with pytest.raises(ConflictError):
            twin(backend, "update_note_with", "knowledge", name, lambda old: b"newer", BlobAppend(journal, broken))
        assert twin(backend, "read_note", "knowledge", name) == b"old"
        assert twin(backend, "note_info", "knowledge", name) == before
        assert twin(backend, "read_blob", journal) is None

        def broken_delete() -> bytes:
            raise ConflictError("the line could not be made", None)

        with pytest.raises(ConflictError):
            twin(backend, "delete_note_with", "knowledge", name, journal, broken_delete)
        assert twin(backend, "read_note", "knowledge", name) == b"old"  # a delete whose line failed deletes nothing
        assert twin(backend, "note_info", "knowledge", name) == before
        assert twin(backend, "read_blob", journal) is None

    # -- several processes (capability "cross_process") ---------------------------------------
    def test_processes_updating_one_note_lose_no_update(
        self,
        backend: KnowledgeBackend,
        opener: Callable[[], KnowledgeBackend],
        twin: Twin,
        tmp_path: Path,
    ) -> None:
        self.require("cross_process")
        note, parties, count = _note("shared", "counter"), 3, 15
        barrier = Barrier(tmp_path / "barrier", parties)
        barrier.folder.mkdir()
        children = [
            start(
                Job("increments", opener, twin.mode, count=count, barrier=barrier, party=n, extra={"note": note}),
                tmp_path,
            )
            for n in range(parties)
        ]
        barrier.release()
        assert [finish(child) for child in children] == [count] * parties
        found = twin(backend, "read_note", "knowledge", note)
        assert found == str(parties * count).encode(), (
            f"update_note lost updates across processes: {parties} processes made {parties * count} increments, "
            f"the note says {found!r}; a backend shared by processes must override update_note (and "
            "delete_note_if) with a lock every process shares: the contract's default holds one process only"
        )

    @pytest.mark.parametrize("engine", [False, True], ids=["contract", "engine"])
    def test_processes_racing_a_compare_and_swap_have_one_winner(
        self,
        backend: KnowledgeBackend,
        opener: Callable[[], KnowledgeBackend],
        twin: Twin,
        tmp_path: Path,
        engine: bool,
    ) -> None:
        self.require("cross_process")
        note, parties = _note("alice", "race"), 4
        twin(backend, "write_note", "knowledge", note, b"the original")
        expected = note_hash(b"the original")
        barrier = Barrier(tmp_path / "barrier", parties)
        barrier.folder.mkdir()
        extra = {"note": note, "expected": expected, "engine": engine}
        children = [
            start(Job("compare_and_swap", opener, twin.mode, "alice", 0, barrier, n, extra=extra), tmp_path)
            for n in range(parties)
        ]
        barrier.release()
        outcomes = [finish(child) for child in children]
        winners = [n for n, (outcome, _) in enumerate(outcomes) if outcome == "won"]
        assert len(winners) == 1, outcomes
        stored = twin(backend, "read_note", "knowledge", note)
        assert stored == f"written by {winners[0]}".encode()
        for outcome, told in outcomes:  # each loser was told the winner's hash, so it can re-read and retry
            assert told == note_hash(stored), (outcome, told)

    def test_processes_writing_notes_lose_nothing(
        self,
        backend: KnowledgeBackend,
        opener: Callable[[], KnowledgeBackend],
        twin: Twin,
        tmp_path: Path,
    ) -> None:
        self.require("cross_process")
        self.open_feed(backend)
        users, count, hot = ("p0", "p1", "p2"), 40, _note("shared", "hot")
        following = "change_feed" in self.capabilities
        prefixes = [user_file_prefix(owner) for owner in (*users, "shared")]
        cursors = {p: backend.owner_changes(p, None) for p in prefixes} if following else {}
        barrier = Barrier(tmp_path / "barrier", len(users))
        barrier.folder.mkdir()
        children = [
            start(Job("write_notes", opener, twin.mode, user, count, barrier, n, extra={"hot": hot}), tmp_path)
            for n, user in enumerate(users)
        ]
        barrier.release()
        seen: set[NoteKey] = set()
        positions = {p: feed.cursor for p, feed in cursors.items() if feed is not None}
        while following:  # follow the feeds while the others write: they must miss nothing
            finished = all(child.poll() is not None for child in children)
            for prefix in prefixes:
                changes = twin(backend, "owner_changes", prefix, positions[prefix])
                assert changes is not None
                assert changes.complete
                seen |= changes.keys
                positions[prefix] = changes.cursor
            if finished:
                break
            time.sleep(0.002)
        versions = [v for child in children for _, v in finish(child)]
        listed = twin(backend, "list_notes", "knowledge")
        expected = {_note(u, f"n{i}") for u in users for i in range(count)} | {hot}
        assert set(listed) == expected
        for user in users:
            assert (
                twin(backend, "read_note", "knowledge", _note(user, f"n{count - 1}")) == f"{user} {count - 1}".encode()
            )
        assert twin(backend, "read_note", "knowledge", hot) in {f"{u} turn {count - 1}".encode() for u in users}
        if backend.exact_versions:  # every write of the shared note got its own version
            assert len(set(versions)) == len(versions), "two processes' writes got the same version"
            assert listed[hot].version == max(versions)
        if following:
            assert {("knowledge", name) for name in expected} - seen == set()

    def test_processes_writing_through_the_engine_lose_nothing(
        self,
        backend: KnowledgeBackend,
        opener: Callable[[], KnowledgeBackend],
        twin: Twin,
        tmp_path: Path,
    ) -> None:
        self.require("cross_process")
        users, count = ("alice", "bob", "alice_admin"), 12
        barrier = Barrier(tmp_path / "barrier", len(users))
        barrier.folder.mkdir()
        children = [
            start(
                Job("store_writes", opener, twin.mode, user, count, barrier, n, extra={"word": f"w{n}x"}),
                tmp_path,
            )
            for n, user in enumerate(users)
        ]
        barrier.release()
        assert [finish(child) for child in children] == [count] * len(users)
        knowledge = self.memory(backend).knowledge
        for n, user in enumerate(users):
            assert len(knowledge.notes(user)) == count
            for i in range(count):
                found = [c.filename for c in twin(knowledge, "search", f"w{n}x{i}", user)]
                assert found[:1] == [_note(user, f"n{i}")], (user, i, found)
