"""The knowledge kit catches real bugs: each mutant below plants one bug in a backend that
otherwise passes (the in-memory reference backend, or the SQLite example for what needs a
restart), the kit runs against it in a fresh pytest process (plain pytest, no configuration:
``-x -q -p no:cacheprovider``), and it must fail, in a test that names the planted bug.
The unmutated bases must pass the same runs.

These were the bugs a backend written from the public contract alone once shipped with while
passing the suites: vectors not of unit length or in the wrong order, a vector cache shared
between models, ``discard`` doing nothing, unfiltered or leaking listings, a change feed
without deletes, a delete that is not idempotent, a blob rewrite that loses appends made
meanwhile, erasure markers kept in process memory, an empty blob read as a missing one, an
owner's first listing that lists every owner;
and one more that only real processes reveal: a change id taken outside the write lock.
"""

from __future__ import annotations

import functools
import os
import pickle
import re
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from local_ai_memory import Embedder
from local_ai_memory.backends import (
    ERASING_DIR,
    BlobAppend,
    InMemoryKnowledgeBackend,
    KnowledgeBackend,
    NoteChanges,
    NoteInfo,
    OwnerListing,
    VectorCache,
    model_id_of,
    text_digest,
    unit_vectors,
)
from local_ai_memory.testing import KnowledgeBackendTests

TESTS = Path(__file__).resolve().parent
EXAMPLES = TESTS.parent / "examples"
if str(EXAMPLES) not in sys.path:
    sys.path.insert(0, str(EXAMPLES))
sys.path.insert(0, str(TESTS))  # the helpers the test files share

from mutant_runs import RUNS, persisting, selected  # noqa: E402
from sqlite_backend.knowledge import SqliteKnowledgeBackend  # noqa: E402

Matrix = npt.NDArray[np.float32]


# ---- a vector cache with switchable bugs, for the in-memory mutants ----------------------------
class PlantedVectors:
    """A correct vector cache (vectors by model identity and digest, kept on the backend) unless
    ``bug`` names one of: ``not_unit``, ``order``, ``identity``, ``discard``, ``kept_order``."""

    def __init__(self, kept: dict[tuple[str, str], Matrix], keys: dict[str, str], embedder: Embedder, bug: str) -> None:
        self.vectors, self.keys, self.embedder, self.bug = kept, keys, embedder, bug
        self.model = "" if bug == "identity" else model_id_of(embedder)  # the bug: one model for all
        self.lock = threading.Lock()

    def _finish(self, items: Sequence[tuple[str, str]], texts: list[str], raw: Any) -> Matrix:
        digests = [text_digest(text) for _, text in items]
        with self.lock:
            was_kept = [(self.model, d) in self.vectors for d in digests]
            if texts:
                vectors = unit_vectors(texts, raw)
                if self.bug == "not_unit":
                    vectors = np.asarray(raw, dtype=np.float32)  # the embedder's answer, unscaled
                self.vectors.update(((self.model, text_digest(t)), v) for t, v in zip(texts, vectors, strict=True))
            self.keys.update((key, d) for (key, _), d in zip(items, digests, strict=True))
            rows = [self.vectors[(self.model, d)] for d in digests]
        if self.bug == "order":  # kept rows first, then the new ones: right only when all or none were kept
            rows = [r for r, k in zip(rows, was_kept, strict=True) if k] + [
                r for r, k in zip(rows, was_kept, strict=True) if not k
            ]
        return np.stack(rows) if rows else np.zeros((0, 0), np.float32)

    def _missing(self, items: Sequence[tuple[str, str]]) -> list[str]:
        with self.lock:
            missing = {text: None for _, text in items if (self.model, text_digest(text)) not in self.vectors}
        return list(missing)

    def vectors_for(self, items: Sequence[tuple[str, str]]) -> Matrix:
        texts = self._missing(items)
        return self._finish(items, texts, self.embedder.embed(texts) if texts else None)

    async def avectors_for(self, items: Sequence[tuple[str, str]]) -> Matrix:
        texts = self._missing(items)
        return self._finish(items, texts, await self.embedder.aembed(texts) if texts else None)

    def embed_query(self, text: str) -> Matrix:
        vector: Matrix = unit_vectors([text], self.embedder.embed([text]))[0]
        return vector

    async def aembed_query(self, text: str) -> Matrix:
        vector: Matrix = unit_vectors([text], await self.embedder.aembed([text]))[0]
        return vector

    def digest_of(self, text: str) -> str:
        return text_digest(text)

    def kept(self, digests: Sequence[str]) -> Matrix | None:
        with self.lock:
            if any((self.model, d) not in self.vectors for d in digests):
                return None
            asked = sorted(set(digests)) if self.bug == "kept_order" else digests  # the bug: in digest order
            rows = [self.vectors[(self.model, d)] for d in asked]
        return np.stack(rows) if rows else np.zeros((0, 0), np.float32)

    def discard_kept(self, digests: Sequence[str]) -> int:
        with self.lock:
            if self.bug == "discard":  # the bug: report the count, delete nothing
                return sum((self.model, d) in self.vectors for d in set(digests))
            return sum(self.vectors.pop((self.model, d), None) is not None for d in set(digests))

    def discard(self, items: Sequence[tuple[str, str]]) -> int:
        with self.lock:
            had = [key for key, _ in items if key in self.keys]
            if self.bug != "discard":  # the bug: report the count, delete nothing
                for key, text in items:
                    self.keys.pop(key, None)
                    self.vectors.pop((self.model, text_digest(text)), None)
            return len(had)


class NoteMemoVectors(PlantedVectors):
    """A correct cache behind a memo of each key's vector (per model), emptied when a key is
    discarded (a deleted note), not when its text changes: an edited note keeps its old vector."""

    def __init__(self, memo: dict[tuple[str, str], Matrix], *args: Any) -> None:
        super().__init__(*args)
        self.memo = memo

    def _missing_keys(self, items: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
        return [item for item in items if (self.model, item[0]) not in self.memo]

    def _from_memo(self, items: Sequence[tuple[str, str]], missing: list[tuple[str, str]], rows: Any) -> Matrix:
        if missing:
            self.memo.update(((self.model, key), row) for (key, _), row in zip(missing, rows, strict=True))
        return np.stack([self.memo[(self.model, key)] for key, _ in items]) if items else np.zeros((0, 0), np.float32)

    def vectors_for(self, items: Sequence[tuple[str, str]]) -> Matrix:
        missing = self._missing_keys(items)
        return self._from_memo(items, missing, super().vectors_for(missing) if missing else None)

    async def avectors_for(self, items: Sequence[tuple[str, str]]) -> Matrix:
        missing = self._missing_keys(items)
        return self._from_memo(items, missing, await super().avectors_for(missing) if missing else None)

    def discard(self, items: Sequence[tuple[str, str]]) -> int:
        for key, _ in items:
            self.memo.pop((self.model, key), None)
        return super().discard(items)


class VectorsBase(InMemoryKnowledgeBackend):
    """The reference backend with :class:`PlantedVectors` (correct while ``bug`` is empty)."""

    bug = ""

    def __init__(self) -> None:
        super().__init__()
        self._kept: dict[tuple[str, str], Matrix] = {}
        self._vector_keys: dict[str, str] = {}
        self._memo: dict[tuple[str, str], Matrix] = {}

    def vector_cache(self, embedder: Embedder) -> VectorCache:
        if self.bug == "memo":
            return NoteMemoVectors(self._memo, self._kept, self._vector_keys, embedder, "")
        return PlantedVectors(self._kept, self._vector_keys, embedder, self.bug)


class NotUnitVectors(VectorsBase):
    bug = "not_unit"


class VectorsInWrongOrder(VectorsBase):
    bug = "order"


class VectorsIgnoreModel(VectorsBase):
    bug = "identity"


class DiscardDoesNothing(VectorsBase):
    bug = "discard"


class VectorMemoByNote(VectorsBase):
    bug = "memo"


class KeptInDigestOrder(VectorsBase):
    bug = "kept_order"


# ---- listing, feed and delete mutants of the reference backend ------------------------------------
class ListingNotFiltered(InMemoryKnowledgeBackend):
    """An unprefixed listing returns every stored name, notes or not."""

    def list_notes(self, category: str, user_prefix: str | None = None) -> dict[str, NoteInfo]:
        if user_prefix is not None:
            return super().list_notes(category, user_prefix)
        with self._lock:
            return {name: info for (cat, name), (_, info) in self._notes.items() if cat == category}


class PrefixAsLikePattern(InMemoryKnowledgeBackend):
    """A prefix matched like an unescaped SQL ``LIKE 'prefix%'``: ``_`` and ``%`` are wildcards,
    so ``bob_`` also lists ``bob%5Fadmin_``'s notes."""

    def list_notes(self, category: str, user_prefix: str | None = None) -> dict[str, NoteInfo]:
        if user_prefix is None:
            return super().list_notes(category)
        pattern = re.compile("".join(".*" if c == "%" else "." if c == "_" else re.escape(c) for c in user_prefix))
        everything = super().list_notes(category)
        return {name: info for name, info in everything.items() if pattern.match(name)}


class FeedDropsDeletes(InMemoryKnowledgeBackend):
    """Deletes never reach the change feed."""

    def delete_note(self, category: str, name: str) -> bool:
        with self._lock:
            return self._notes.pop((category, name), None) is not None


class DeleteNotIdempotent(InMemoryKnowledgeBackend):
    """Deleting a missing note raises instead of answering False."""

    def delete_note(self, category: str, name: str) -> bool:
        if self.note_info(category, name) is None:
            raise KeyError(name)
        return super().delete_note(category, name)


class ModifiedInMilliseconds(InMemoryKnowledgeBackend):
    """Reports a note's modified time in milliseconds since the epoch."""

    def _put(self, category: str, name: str, data: bytes, append: BlobAppend | None = None) -> NoteInfo:
        info = super()._put(category, name, data, append)._replace(modified=time.time() * 1000)
        self._notes[(category, name)] = (data, info)
        return info


class FeedTrustsUnknownCursor(InMemoryKnowledgeBackend):
    """Answers a cursor larger than any it handed out with "complete, nothing new"."""

    def changes(self, since: int | None) -> NoteChanges | None:
        with self._lock:
            cursor = self._cursor
        if since is not None and since > cursor:
            return NoteChanges(cursor, frozenset(), complete=True)
        return super().changes(since)


class ReadBlobsDropsEmpty(InMemoryKnowledgeBackend):
    """``read_blobs`` takes an empty blob (an erasure marker) for a missing one."""

    def read_blobs(self, names: Sequence[str]) -> dict[str, bytes]:
        return {name: data for name, data in super().read_blobs(names).items() if data}


class FollowOwnerListsEveryone(InMemoryKnowledgeBackend):
    """``follow_owner`` lists every owner's notes of a category, not the asked owner's."""

    def follow_owner(self, user_prefix: str, categories: Sequence[str]) -> OwnerListing | None:
        start = super().follow_owner(user_prefix, categories)
        return None if start is None else start._replace(listings=[self.list_versions(c) for c in categories])


# ---- what needs a restart: the SQLite example ----------------------------------------------------
class RewriteBesideAppends(InMemoryKnowledgeBackend):
    """Folds blobs under a lock that appends do not take (the contract's default, for a process
    that shares its store with nobody): an append made between the read and the write is lost."""

    rewrite_blobs = KnowledgeBackend.rewrite_blobs


class ErasureMarkersInMemory(SqliteKnowledgeBackend):
    """Erasure markers (blobs under ``.erasing/``) kept in this object, not in the database."""

    def __init__(self, path: str | Path) -> None:
        super().__init__(path)
        self._markers: dict[str, bytes] = {}

    def write_blob(self, name: str, data: bytes) -> None:
        if name.startswith(f"{ERASING_DIR}/"):
            self._markers[name] = bytes(data)
        else:
            super().write_blob(name, data)

    def read_blob(self, name: str) -> bytes | None:
        return self._markers.get(name) if name.startswith(f"{ERASING_DIR}/") else super().read_blob(name)

    def blob_size(self, name: str) -> int | None:
        if name.startswith(f"{ERASING_DIR}/"):
            data = self._markers.get(name)
            return None if data is None else len(data)
        return super().blob_size(name)

    def delete_blob(self, name: str) -> bool:
        if name.startswith(f"{ERASING_DIR}/"):
            return self._markers.pop(name, None) is not None
        return super().delete_blob(name)


class CursorOutsideTheWriteLock(SqliteKnowledgeBackend):
    """Takes the next change id as ``max(id) + 1`` without SQLite's write lock (no ``BEGIN
    IMMEDIATE``): right in one process (the object's lock), wrong across processes, where two
    writers take the same id, so versions repeat and one change overwrites another in the feed."""

    def write_note(self, category: str, name: str, data: bytes) -> NoteInfo:
        data, modified = bytes(data), time.time()
        with self._lock:
            version = int(self._db.execute("SELECT coalesce(max(id), 0) + 1 FROM changes").fetchone()[0])
            self._db.execute(
                "INSERT OR REPLACE INTO changes (id, category, name) VALUES (?, ?, ?)", (version, category, name)
            )
            self._db.execute(
                "INSERT OR REPLACE INTO notes (category, name, data, size, version, modified)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (category, name, data, len(data), version, modified),
            )
        return NoteInfo(category, name, len(data), version, modified)


@persisting(
    InMemoryKnowledgeBackend,
    (
        "write_note",
        "write_note_with",
        "update_note",
        "update_note_with",
        "delete_note",
        "delete_note_if",
        "delete_note_with",
        "write_blob",
        "append_blob",
        "rewrite_blobs",
        "delete_blob",
        "quarantine_blob",
    ),
)
class InPlaceFileNotes(InMemoryKnowledgeBackend):
    """The reference backend made durable the naive way: after every change it rewrites one
    file in place (truncated, then pickled into), and loads it when opened. A clean close
    keeps everything; a crash in the middle of a rewrite leaves a truncated file, and every
    note is gone."""

    def __init__(self, path: str | Path) -> None:
        super().__init__()
        self._file = Path(path)
        if self._file.exists():
            with self._file.open("rb") as stored:
                self._notes, self._blobs, self._log, self._cursor, self._version = pickle.load(stored)

    def _persist(self) -> None:
        with self._lock, self._file.open("wb") as stored:  # the bug: truncated first, then written
            pickle.dump((self._notes, self._blobs, self._log, self._cursor, self._version), stored)


class UpdateLockInOneProcess(SqliteKnowledgeBackend):
    """Keeps the contract's default update_note: read, change and write under a lock of this
    process only (two transactions), which other processes opening the store do not hold."""

    update_note = KnowledgeBackend.update_note


# ---- the suites the child pytest runs ------------------------------------------------------------
def memory_suite(kind: type[KnowledgeBackend]) -> type[KnowledgeBackendTests]:
    """The kit over ``kind()`` (a variant of the reference backend: change feed, no disk)."""

    class Suite(KnowledgeBackendTests):
        capabilities = frozenset({"change_feed"})

        @pytest.fixture
        def backend(self) -> KnowledgeBackend:
            return kind()

    return Suite


def sqlite_suite(kind: Callable[[Path], KnowledgeBackend]) -> type[KnowledgeBackendTests]:
    """The kit over a variant kept in one file (the SQLite example's, or a file of its own), with
    what a restart needs (cross-process runs are left to ``test_example_sqlite_knowledge.py``:
    this harness keeps to its time budget)."""

    class Suite(KnowledgeBackendTests):
        capabilities = frozenset({"change_feed", "durable"})

        @pytest.fixture
        def backend(self, tmp_path: Path) -> KnowledgeBackend:
            return kind(tmp_path / "notes.db")

        @pytest.fixture
        def opener(self, tmp_path: Path) -> Callable[[], KnowledgeBackend]:
            return functools.partial(kind, tmp_path / "notes.db")

    return Suite


def sqlite_processes_suite(kind: type[SqliteKnowledgeBackend]) -> type[KnowledgeBackendTests]:
    """The kit over a SQLite variant in several processes at once."""

    class Suite(sqlite_suite(kind)):  # type: ignore[misc]
        capabilities = frozenset({"change_feed", "cross_process"})

    return Suite


# mutant -> the tests allowed to be the first to fail (the ones about its bug)
MUTANTS: dict[str, tuple[str, set[str]]] = {
    "NotUnitVectors": (
        "memory",
        {"test_vectors_are_unit_rows_of_the_texts", "test_hybrid_ranking_equals_the_reference_backend"},
    ),
    "VectorsInWrongOrder": (
        "memory",
        {"test_vectors_come_in_the_order_asked", "test_hybrid_ranking_equals_the_reference_backend"},
    ),
    "VectorsIgnoreModel": ("memory", {"test_vectors_are_kept_per_model_identity"}),
    "DiscardDoesNothing": ("memory", {"test_discard_removes_vectors"}),
    "VectorMemoByNote": ("memory", {"test_an_edited_text_gets_its_new_vector"}),
    "KeptInDigestOrder": (
        "memory",
        {"test_an_edited_text_gets_its_new_vector", "test_kept_vectors_are_found_by_digest_in_the_order_asked"},
    ),
    "ListingNotFiltered": ("memory", {"test_unprefixed_listing_holds_only_note_names"}),
    "PrefixAsLikePattern": ("memory", {"test_listing_per_user_is_exact", "test_store_search_isolates_users"}),
    "FeedDropsDeletes": ("memory", {"test_change_feed_sees_inserts_modifications_and_deletes"}),
    "DeleteNotIdempotent": ("memory", {"test_delete_is_idempotent"}),
    "RewriteBesideAppends": ("memory", {"test_rewrite_blobs_loses_no_append_made_meanwhile"}),
    "ModifiedInMilliseconds": ("memory", {"test_note_times_are_wall_clock_seconds_since_the_epoch"}),
    "FeedTrustsUnknownCursor": ("memory", {"test_change_feed_refuses_a_cursor_it_never_handed_out"}),
    "ReadBlobsDropsEmpty": ("memory", {"test_read_blobs_gives_those_that_exist"}),
    "FollowOwnerListsEveryone": ("memory", {"test_following_an_owner_gives_the_feed_cursor_and_their_listing"}),
    "CursorOutsideTheWriteLock": ("sqlite_processes", {"test_processes_writing_notes_lose_nothing"}),
    "UpdateLockInOneProcess": ("sqlite_processes", {"test_processes_updating_one_note_lose_no_update"}),
    "InPlaceFileNotes": ("sqlite", {"test_confirmed_writes_survive_a_killed_writer"}),
    "ErasureMarkersInMemory": (
        "sqlite",
        {"test_a_pending_erasure_survives_a_restart", "test_everything_survives_a_reopen"},
    ),
}
BASES = {"InMemoryKnowledgeBackend": "memory", "VectorsBase": "memory", "SqliteKnowledgeBackend": "sqlite"}


def start_kit(kind: str, flavour: str, folder: Path) -> subprocess.Popen[str]:
    """Start the whole kit against class ``kind`` of this module in a fresh pytest process that
    has no configuration: its own root folder (no ini file, no conftest, no asyncio setting)
    and no plugins but pytest's own."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "test_kit.py").write_text(
        textwrap.dedent(f"""\
            import sys
            sys.path[:0] = [{str(TESTS)!r}, {str(EXAMPLES)!r}]
            from test_knowledge_mutants import {kind}, {flavour}_suite

            TestKit = {flavour}_suite({kind})
        """)
    )
    args = ["-x", "-q", "-p", "no:cacheprovider", "--rootdir", str(folder), str(folder)]
    code = f"import sys, pytest; sys.exit(pytest.main({args!r}))"
    env = dict(os.environ, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1", PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    return subprocess.Popen(
        [sys.executable, "-c", code], cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )


@pytest.fixture(scope="module")
def kit_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, list[Future[tuple[int, str]]]]]:
    """Every chosen run of the kit (a base once, a mutant ``KIT_MUTANT_RUNS`` times), three at a
    time, started on first use."""

    def run(kind: str, flavour: str) -> tuple[int, str]:
        proc = start_kit(kind, flavour, tmp_path_factory.mktemp(kind))
        out, _ = proc.communicate(timeout=300)
        return proc.returncode, out

    kinds = {**BASES, **{kind: flavour for kind, (flavour, _) in MUTANTS.items()}}
    with ThreadPoolExecutor(max_workers=3) as pool:
        yield {
            kind: [pool.submit(run, kind, flavour) for _ in range(1 if kind in BASES else RUNS)]
            for kind, flavour in kinds.items()
            if selected(kind)
        }


def _first_failure(output: str) -> str | None:
    found = re.search(r"^(?:FAILED|ERROR) \S*::TestKit::(test_\w+)", output, re.MULTILINE)
    return found.group(1) if found else None


@pytest.mark.parametrize("kind", list(BASES))
def test_the_unmutated_bases_pass(kind: str, kit_runs: dict[str, list[Future[tuple[int, str]]]]) -> None:
    if not selected(kind):
        pytest.skip("not among KIT_MUTANTS")
    [run] = kit_runs[kind]
    code, output = run.result()
    assert code == 0, output[-4000:]
    assert re.search(r"\d+ passed", output)


def _missed(kind: str, code: int, output: str) -> str | None:
    """Why a run does not count as the kit catching mutant ``kind`` (``None``: it does)."""
    if code != 1:
        return f"the kit passed {kind} (exit {code}):\n{output[-4000:]}"
    failed = _first_failure(output)
    if failed not in MUTANTS[kind][1]:
        return f"{kind} was caught by {failed}, not by a test about its bug:\n{output[-4000:]}"
    if re.search(r"^E\s+(KeyError|IndexError|TypeError|AttributeError)\b", output, re.MULTILINE):
        return f"the kit failed with a bare error, not a message naming the contract rule broken:\n{output[-4000:]}"
    return None


@pytest.mark.parametrize("kind", list(MUTANTS))
def test_the_kit_catches_the_planted_bug(kind: str, kit_runs: dict[str, list[Future[tuple[int, str]]]]) -> None:
    if not selected(kind):
        pytest.skip("not among KIT_MUTANTS")
    misses = [reason for run in kit_runs[kind] if (reason := _missed(kind, *run.result())) is not None]
    caught = len(kit_runs[kind]) - len(misses)
    assert not misses, f"caught in {caught} of {len(kit_runs[kind])} runs; first miss: {misses[0]}"
