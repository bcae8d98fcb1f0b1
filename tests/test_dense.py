"""Embedding belongs to indexing: passages embedded by index/write/watcher, never by a query
(unless a note changed since indexing and nobody embedded it), scored by the best passage."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from local_ai_memory import ConfigError, Memory, MemoryConfig, note_hash
from local_ai_memory._knowledge.passages import MAX_PASSAGES, PASSAGE_WORDS, body_passages, passages_of
from local_ai_memory.backends import InMemoryKnowledgeBackend, InMemoryRuntimeBackend

WORDS = ("kestrel", "falcon", "tea", "brakes", "oil", "garden", "python", "lid", "suspend")


class CountingEmbedder:
    """Bag of :data:`WORDS` vectors; counts calls and texts."""

    model_name = "count-words-v1"

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def embed(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        return [[text.lower().count(w) + 0.01 for w in WORDS] for text in texts]

    async def aembed(self, texts: list[str]) -> list[list[float]]:
        return self.embed(texts)

    @property
    def texts(self) -> list[str]:
        return [t for call in self.calls for t in call]


def test_passages_follow_structure_and_are_bounded() -> None:
    words = PASSAGE_WORDS * MAX_PASSAGES
    text = "# Title\n\nIntro line.\n\n## Options\n\n" + "word " * words + "\n\n## Later\n\nNever reached.\n"
    body = body_passages("Title", text)
    assert len(body) == MAX_PASSAGES - 1
    # a section's heading opens its words; a paragraph longer than a passage is cut in windows
    assert body[0] == "Title\nIntro line."
    assert body[1].startswith("Title\nOptions: word word")
    assert all(p.startswith("Title\n") for p in body)
    assert all(len(p.split("\n", 1)[1].split()) <= PASSAGE_WORDS for p in body)
    assert not any("Never" in p for p in body)  # past the bound: BM25 only
    assert passages_of("lead", "Title", text)[0] == "lead"
    assert body_passages("T", "---\nkey: v\n---\nbody text\n") == ["T\nbody text"]


def test_a_long_note_is_cut_to_its_end_below_the_bound() -> None:
    """A question answered deep in a long note (a man page's later sections) finds it: the
    passages reach the last section of a note of 20 passages, past the old bound of 16."""
    text = "# Title\n\n" + "".join(f"## Part {i}\n\n" + "word " * (PASSAGE_WORDS - 5) + "\n\n" for i in range(20))
    text += "## Last\n\nThe answer sits here.\n"
    body = body_passages("Title", text)
    assert 20 <= len(body) < MAX_PASSAGES - 1
    assert "The answer sits here." in body[-1]
    assert body_passages("T", "") == []


def test_a_paragraph_the_lead_says_is_not_embedded_twice() -> None:
    note = "# wc(1)\n\nwc - count lines\n\n## NAME\n\nwc - count lines\n\n## SYNOPSIS\n\nwc [FILE]\n"
    passages = passages_of("wc 1 wc(1) wc - count lines", "wc(1)", note)
    assert passages == ["wc 1 wc(1) wc - count lines", "wc(1)\nSYNOPSIS: wc [FILE]"]
    assert body_passages("T", "## A\n\nshort a\n\n## B\n\nshort b\n") == ["T\nA: short a B: short b"]
    # short sections share a passage; they split when the next would overflow it
    long_note = "## A\n\n" + "a " * 150 + "\n\n## B\n\n" + "b " * 100 + "\n"
    assert [p.split("\n", 1)[1].split()[0] for p in body_passages("T", long_note)] == ["A:", "B:"]


def _open(root: Path, embedder: CountingEmbedder, mode: str = "hybrid") -> Memory:
    return Memory.open(root, fsync=False, auto_watch=False, search_mode=mode, embedder=embedder)


def test_first_hybrid_query_after_index_embeds_nothing(tmp_path: Path) -> None:
    (tmp_path / "data" / "memory_data" / "knowledge").mkdir(parents=True)
    for i, topic in enumerate(["kestrel falcon", "green tea", "car brakes oil"]):
        body = f"# Note {i}\n\nFirst paragraph.\n\n## Details\n\nAbout {topic}.\n"
        (tmp_path / "data" / "memory_data" / "knowledge" / f"alice_n{i}.md").write_text(body)
    embedder = CountingEmbedder()
    with _open(tmp_path / "data", embedder) as memory:
        assert memory.knowledge.build_index() == 3
        indexed = len(embedder.texts)
        assert indexed == 6  # lead + one body passage (short sections share one) per note, by build_index
        embedder.calls.clear()
        found = memory.knowledge.search("falcon", "alice")
        assert found[0].filename == "alice_n0.md"
        assert embedder.calls == [["falcon"]]  # the query, nothing else
    # A new process: the vectors and the passage map come from storage, still nothing to embed.
    again = CountingEmbedder()
    with _open(tmp_path / "data", again) as memory:
        assert memory.knowledge.search("brakes", "alice")[0].filename == "alice_n2.md"
        assert again.calls == [["brakes"]]


async def test_write_note_embeds_and_the_query_does_not(tmp_path: Path) -> None:
    embedder = CountingEmbedder()
    with _open(tmp_path / "data", embedder) as memory:
        memory.knowledge.write_note("alice", "birds", "# Birds\n\nintro\n\n## Hunting\n\nThe kestrel hovers.\n")
        assert any("kestrel" in t for t in embedder.texts)
        embedder.calls.clear()
        assert (await memory.knowledge.asearch("kestrel", "alice"))[0].filename == "alice_birds.md"
        assert embedder.calls == [["kestrel"]]


def test_a_conditional_edit_embeds_at_write_time_too(tmp_path: Path) -> None:
    """The compare-and-swap path (MCP, Claude's memory tool) indexes through the same step as
    write_note, so its edit is embedded by the write, not by the next query."""
    embedder = CountingEmbedder()
    with _open(tmp_path / "data", embedder) as memory:
        memory.knowledge.write_note("alice", "birds", "# Birds\n\nintro\n\n## Hunting\n\nThe owl hovers.\n")
        embedder.calls.clear()
        memory.knowledge.edit_note(
            "alice", "birds", "owl", "kestrel", expected_hash=note_hash(memory.knowledge.read_note("alice", "birds"))
        )
        assert any("kestrel" in t for t in embedder.texts)
        embedder.calls.clear()
        assert memory.knowledge.search("kestrel", "alice")[0].filename == "alice_birds.md"
        assert embedder.calls == [["kestrel"]]


def test_a_note_changed_behind_the_index_is_embedded_once_by_a_query(tmp_path: Path, caplog: object) -> None:
    embedder = CountingEmbedder()
    with _open(tmp_path / "data", embedder) as memory:
        memory.knowledge.write_note("alice", "garden", "# Garden\n\nroses\n")
        memory.knowledge.write_note("alice", "laptop", "# Laptop\n\nscreen\n")
        path = tmp_path / "data" / "memory_data" / "knowledge" / "alice_garden.md"
        path.write_text("# Garden\n\nroses and a kestrel nest in the garden\n")  # an editor, no watcher
        embedder.calls.clear()
        assert memory.knowledge.search("kestrel", "alice")[0].filename == "alice_garden.md"
        embedded = [t for t in embedder.texts if t != "kestrel"]
        assert embedded
        assert all("Garden" in t or "garden" in t for t in embedded)  # that note only
        embedder.calls.clear()
        memory.knowledge.search("kestrel", "alice")
        assert embedder.calls == [["kestrel"]]  # once


def test_best_passage_decides_and_forget_removes_passage_vectors(tmp_path: Path) -> None:
    embedder = CountingEmbedder()
    filler = "\n\n".join(f"Paragraph {i} about nothing in particular at all." for i in range(3))
    with _open(tmp_path / "data", embedder) as memory:
        memory.knowledge.write_note("alice", "long", f"# Long\n\n{filler}\n\n## End\n\nsuspend on lid close\n")
        memory.knowledge.write_note("alice", "other", "# Other\n\npython oil tea\n")
        found = memory.knowledge.store.hybrid_candidates("lid suspend", 2, 0.0, user_id="alice")
        assert found[0].filename == "alice_long.md"  # only a later passage holds these words
        dense = memory.knowledge.store._dense()
        assert dense is not None
        digests = dense.digests_of_user("alice", ["knowledge"])
        assert dense.cache.kept(digests) is not None
        forgotten = memory.knowledge.store.forget_user("alice")
        assert forgotten.vectors >= len(set(digests))
        assert dense.cache.kept(digests) is None
        assert dense.digests_of_user("alice", ["knowledge"]) == []


def test_dense_scores_mix_the_best_passage_and_the_whole_note() -> None:
    from local_ai_memory._knowledge.dense import BEST_SHARE, DenseMatrix
    from local_ai_memory._knowledge.index_file import IndexEntry

    entries = [
        IndexEntry(filename=f"a_{i}.md", title="t", description="", keywords=[], category="k", last_modified=0.0)
        for i in range(2)
    ]
    matrix = np.array([[1, 0], [0, 1], [0.6, 0.8]], dtype=np.float32)
    dense = DenseMatrix(entries, matrix, np.array([0, 2], dtype=np.int64))
    # note 0: best passage 1.0, whole-note vector (unit mean of its two) 0.707; note 1: 0.8 and 0.8
    expected = [BEST_SHARE * 1.0 + (1 - BEST_SHARE) * 0.5**0.5, 0.8]
    assert dense.note_scores(np.array([0.0, 1.0], dtype=np.float32)).tolist() == pytest.approx(expected, abs=1e-6)


def test_the_watchers_refresh_embeds_what_an_editor_changed(tmp_path: Path) -> None:
    embedder = CountingEmbedder()
    with _open(tmp_path / "data", embedder) as memory:
        memory.knowledge.write_note("alice", "garden", "# Garden\n\nroses\n")
        path = tmp_path / "data" / "memory_data" / "knowledge" / "alice_garden.md"
        path.write_text("# Garden\n\nroses and a falcon on the fence\n")  # an editor
        embedder.calls.clear()
        assert memory.knowledge.store.refresh_stale_entries() == 1  # what a polling watcher calls
        assert any("falcon" in t for t in embedder.texts)
        embedder.calls.clear()
        assert memory.knowledge.search("falcon", "alice")[0].filename == "alice_garden.md"
        assert embedder.calls == [["falcon"]]


def test_a_map_cut_by_an_older_passage_rule_is_embedded_again_at_index(tmp_path: Path) -> None:
    import json

    from local_ai_memory._knowledge import dense as dense_module

    embedder = CountingEmbedder()
    with _open(tmp_path / "data", embedder) as memory:
        memory.knowledge.write_note("alice", "birds", "# Birds\n\nintro\n\n## Hunting\n\nThe kestrel hovers.\n")
    (journal,) = (tmp_path / "data").rglob(".passages/*/*.journal.jsonl")
    raw = json.loads(journal.read_text().splitlines()[-1])
    raw["version"] = 1  # a map written (whole, no journal) before the passage rule changed
    blob = journal.with_name(journal.name.replace(".journal.jsonl", ".json"))
    blob.write_text(json.dumps(raw))
    journal.unlink()
    again = CountingEmbedder()
    with _open(tmp_path / "data", again) as memory:
        memory.knowledge.build_index()  # re-cuts the note (its vectors are in the cache already: no model call)
        assert json.loads(journal.read_text().splitlines()[-1])["version"] == dense_module.MAP_VERSION
        again.calls.clear()
        assert memory.knowledge.search("kestrel", "alice")[0].filename == "alice_birds.md"
        assert again.calls == [["kestrel"]]


class _CacheOfVersion02:
    """A third-party vector cache written for 0.2: only the whole-text half of the contract."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def vectors_for(self, items: Any) -> Any:
        return self._inner.vectors_for(items)

    async def avectors_for(self, items: Any) -> Any:
        return await self._inner.avectors_for(items)

    def embed_query(self, text: str) -> Any:
        return self._inner.embed_query(text)

    async def aembed_query(self, text: str) -> Any:
        return await self._inner.aembed_query(text)

    def discard(self, items: Any) -> int:
        return int(self._inner.discard(items))


async def test_a_vector_cache_without_passage_methods_is_refused_not_silently_bm25() -> None:
    class OldCacheBackend(InMemoryKnowledgeBackend):
        def vector_cache(self, embedder: Any) -> Any:
            return _CacheOfVersion02(super().vector_cache(embedder))

    config = MemoryConfig(search_mode="hybrid")
    memory = Memory(config, runtime=InMemoryRuntimeBackend(), knowledge=OldCacheBackend(), embedder=CountingEmbedder())
    memory.knowledge.write_note("alice", "tea.md", "# Tea\n\nGreen tea at four.\n")  # the write itself stands
    with pytest.raises(ConfigError, match=r"lacks digest_of, kept, discard_kept.*search_mode='bm25'"):
        memory.knowledge.store.hybrid_candidates("tea", user_id="alice")
    with pytest.raises(ConfigError, match="lacks digest_of"):
        await memory.knowledge.store.ahybrid_candidates("tea", user_id="alice")
    assert memory.knowledge.read_note("alice", "tea.md").startswith("# Tea")


def _random_matrix(notes: int, seed: int) -> Any:
    from local_ai_memory._knowledge.dense import DenseMatrix
    from local_ai_memory._knowledge.index_file import IndexEntry

    rng = np.random.default_rng(seed)
    counts = rng.integers(1, 7, size=notes)
    rows = rng.standard_normal((int(counts.sum()), 16)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    starts = (np.cumsum(counts) - counts).astype(np.int64)
    entries = [
        IndexEntry(filename=f"alice_n{i}.md", category="knowledge", title=f"n{i}", last_modified=0.0)
        for i in range(notes)
    ]
    query = rng.standard_normal(16).astype(np.float32)
    return DenseMatrix(entries, rows, starts), query / np.linalg.norm(query)


def test_pool_scores_are_the_exact_scores_of_the_pool_and_the_bm25_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    from local_ai_memory._knowledge import dense as dense_module

    matrix, query = _random_matrix(300, 7)
    exact = matrix.note_scores(query)
    small = matrix.pool_scores(query, 10, [3, 299])  # under the shortlist size: every passage compared
    best = set(np.argsort(-exact)[:10].tolist())
    assert set(small) == best | {3, 299}
    assert all(abs(small[row] - float(exact[row])) < 1e-6 for row in small)
    monkeypatch.setattr(dense_module, "SHORTLIST", 40)  # 300 notes > max(40, 16 x 2): the shortlist is used
    short = matrix.pool_scores(query, 2, [5, 250])
    assert {5, 250} <= set(short)
    assert all(abs(short[row] - float(exact[row])) < 1e-6 for row in short)  # chosen notes scored exactly
    picked = set(short) - {5, 250}
    assert len(picked) >= 2
    whole = matrix.means @ query
    shortlist = set(np.argsort(-whole)[:40].tolist())
    assert picked <= shortlist  # picked from the whole-note shortlist, best exact scores there
    inside = sorted(shortlist, key=lambda row: -exact[row])[:2]
    assert set(inside) <= picked


def test_a_note_write_appends_its_map_row_and_a_map_of_the_previous_version_opens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    from local_ai_memory._knowledge import dense as dense_module

    embedder = CountingEmbedder()
    with _open(tmp_path / "data", embedder) as memory:
        for i, topic in enumerate(["kestrel falcon", "green tea", "car brakes oil"]):
            memory.knowledge.write_note(
                "alice", f"n{i}", f"# Note {i}\n\nFirst paragraph.\n\n## Details\n\nAbout {topic}.\n"
            )
    (journal,) = (tmp_path / "data").rglob(".passages/*/*.journal.jsonl")
    lines = journal.read_text().splitlines()
    assert [sorted(json.loads(line)["notes"]) for line in lines] == [["alice_n0.md"], ["alice_n1.md"], ["alice_n2.md"]]
    blob = journal.with_name(journal.name.replace(".journal.jsonl", ".json"))
    assert not blob.exists()  # nothing rewritten whole
    journal.write_text(journal.read_text() + '{"version": 3, "notes": {"alice_n1.md": [[1')  # a writer killed mid-line
    again = CountingEmbedder()
    with _open(tmp_path / "data", again) as memory:
        assert memory.knowledge.search("brakes", "alice")[0].filename == "alice_n2.md"
        assert again.calls == [["brakes"]]  # the partial line is skipped, the rows before it are read
    # The previous version kept the whole map in the blob and had no journal: such a folder opens as it is.
    rows: dict[str, Any] = {}
    for line in lines:
        rows.update(json.loads(line)["notes"])
    blob.write_text(json.dumps({"version": dense_module.MAP_VERSION, "notes": rows}))
    journal.unlink()
    again = CountingEmbedder()
    with _open(tmp_path / "data", again) as memory:
        assert memory.knowledge.search("tea", "alice")[0].filename == "alice_n1.md"
        assert again.calls == [["tea"]]
        monkeypatch.setattr(dense_module, "JOURNAL_BYTES", 10)  # the next row folds the journal into the blob
        memory.knowledge.write_note("alice", "n3", "# Note 3\n\nFirst paragraph.\n\n## Details\n\nAbout the garden.\n")
    assert not journal.exists()
    assert sorted(json.loads(blob.read_text())["notes"]) == ["alice_n0.md", "alice_n1.md", "alice_n2.md", "alice_n3.md"]
    again = CountingEmbedder()
    with _open(tmp_path / "data", again) as memory:
        assert memory.knowledge.search("garden", "alice")[0].filename == "alice_n3.md"
        assert again.calls == [["garden"]]


class QueryRuleEmbedder(CountingEmbedder):
    """Embeds queries its own way (as the local ONNX model does with its int8 copy)."""

    def __init__(self) -> None:
        super().__init__()
        self.queries: list[str] = []

    def embed_query(self, text: str) -> list[float]:
        self.queries.append(text)
        return [text.lower().count(w) + 0.02 for w in WORDS]

    async def aembed_query(self, text: str) -> list[float]:
        return self.embed_query(text)


@pytest.mark.parametrize("where", ["files", "memory"])
async def test_a_query_goes_through_the_embedders_own_query_rule(tmp_path: Path, where: str) -> None:
    embedder = QueryRuleEmbedder()
    if where == "files":
        memory = _open(tmp_path / "data", embedder)
    else:
        config = MemoryConfig(search_mode="hybrid")
        memory = Memory(
            config, runtime=InMemoryRuntimeBackend(), knowledge=InMemoryKnowledgeBackend(), embedder=embedder
        )
    with memory:
        memory.knowledge.write_note("alice", "birds", "# Birds\n\nintro\n\n## Hunting\n\nThe kestrel hovers.\n")
        memory.knowledge.write_note("alice", "tea", "# Tea\n\nGreen tea at 80 degrees.\n")
        embedder.calls.clear()
        assert memory.knowledge.search("kestrel", "alice")[0].filename == "alice_birds.md"
        assert (await memory.knowledge.asearch("green tea", "alice"))[0].filename == "alice_tea.md"
        assert embedder.queries == ["kestrel", "green tea"]
        assert embedder.calls == []  # notes were embedded at write time, queries by embed_query


def _deleting_store(kind: str, tmp_path: Path, request: pytest.FixtureRequest, embedder: CountingEmbedder) -> Any:
    from local_ai_memory._knowledge.store import MemoryStore
    from local_ai_memory._shared.naming import DirectoryGuard
    from local_ai_memory.backends import FileKnowledgeBackend

    config = MemoryConfig(fsync=False, categories=("knowledge",), search_mode="hybrid")
    if kind == "files":
        return MemoryStore(FileKnowledgeBackend(DirectoryGuard(tmp_path / "files"), config), config, embedder=embedder)
    from local_ai_memory._backends.postgres.knowledge import PostgresKnowledgeBackend

    backend = PostgresKnowledgeBackend(
        request.getfixturevalue("postgres_url"), schema=request.getfixturevalue("postgres_schema")
    )
    request.addfinalizer(backend.close)
    return MemoryStore(backend, config, embedder=embedder)


@pytest.mark.parametrize("kind", ["files", "postgres"])
def test_a_deleted_notes_passages_leave_the_map_and_its_vectors_the_cache(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    embedder = CountingEmbedder()
    store = _deleting_store(kind, tmp_path, request, embedder)
    birds = "# Birds\n\nintro about birds\n\n## Hunting\n\nThe kestrel hovers over the falcon.\n"
    store.write_file("knowledge/alice_birds.md", birds)
    store.write_file("knowledge/alice_copy.md", birds)  # the same passages: shared vectors
    store.write_file("knowledge/alice_tea.md", "# Tea\n\nGreen tea at 80 degrees.\n\n## Oil\n\nolive oil\n")
    store.write_file("knowledge/bob_garden.md", "# Garden\n\nThe garden and the python.\n")
    store.write_file("knowledge/alice_brakes.md", "# Car\n\nbrakes\n\n## Lid\n\nlaptop lid suspend\n")
    dense = store._dense()
    rows = dense._read("knowledge", "alice")
    copy_digests, tea_digests = rows["alice_copy.md"][1], rows["alice_tea.md"][1]
    brakes_digests = rows["alice_brakes.md"][1]
    bob_digests = dense._read("knowledge", "bob")["bob_garden.md"][1]
    queries = ["green tea", "kestrel falcon", "garden python", "brakes"]

    def ask(store: Any = store) -> dict[tuple[str, str], list[tuple[str, float]]]:
        return {
            (q, u): [(c.filename, c.score) for c in store.hybrid_candidates(q, 3, user_id=u)]
            for q in queries
            for u in ("alice", "bob")
        }

    assert store.delete_file("knowledge/alice_brakes.md")
    store.write_file("knowledge/alice_tea.md", "# Tea\n\nGreen tea at 80 degrees.\n")  # re-cut: the oil passage goes
    assert store.delete_file("knowledge/alice_birds.md")
    kept_tea = dense._read("knowledge", "alice")["alice_tea.md"][1]
    freed = sorted(set(brakes_digests) | (set(tea_digests) - set(kept_tea)))
    assert freed
    assert not set(freed) & set(copy_digests)
    stored = dense._read("knowledge", "alice")
    assert sorted(stored) == ["alice_copy.md", "alice_tea.md"]  # the rows left the map at once, by journal lines
    if kind == "files":  # the file cache deletes by rewriting shards: at the map's next fold
        assert dense.cache.kept(brakes_digests) is not None
    before = ask()
    embedder.calls.clear()
    dense.compact("knowledge", "alice")
    assert embedder.calls == []
    for digest in freed:
        assert dense.cache.kept([digest]) is None, digest
    for digests in (copy_digests, kept_tea, bob_digests):
        assert dense.cache.kept(digests) is not None  # other notes' vectors stay (shared ones too)
    assert sorted(dense._read("knowledge", "alice")) == ["alice_copy.md", "alice_tea.md"]

    fresh = _deleting_store(kind, tmp_path, request, embedder)  # reads the folded map and the cache anew
    after = ask(fresh)
    assert embedder.calls == [[q] for q in queries for _ in ("alice", "bob")]  # queries only: no note re-embedded
    assert after == before
    assert after[("kestrel falcon", "alice")][0][0] == "alice_copy.md"
    assert after[("garden python", "bob")][0][0] == "bob_garden.md"
    assert not {name for found in after.values() for name, _ in found} & {"alice_brakes.md", "alice_birds.md"}


def test_forgetting_a_user_drops_a_deleted_notes_vectors_the_map_did_not_fold_yet(tmp_path: Path) -> None:
    embedder = CountingEmbedder()
    with _open(tmp_path / "data", embedder) as memory:
        memory.knowledge.write_note("alice", "birds", "# Birds\n\nThe kestrel hovers.\n")
        memory.knowledge.write_note("alice", "tea", "# Tea\n\nGreen tea.\n")
        store = memory.knowledge.store
        dense = store._dense()
        assert dense is not None
        birds = dense._read("knowledge", "alice")["alice_birds.md"][1]
        assert store.delete_file("knowledge/alice_birds.md")
        assert dense.cache.kept(birds) is not None  # files: released, not folded yet
        assert set(birds) <= set(dense.digests_of_user("alice", ["knowledge"]))
        store.forget_user("alice")
        assert dense.cache.kept(birds) is None


def test_passages_are_cut_to_the_word_pieces_the_model_reads() -> None:
    def pieces(words: Any) -> list[int]:  # a long URL is many pieces, a plain word one
        return [8 if "/" in w else 1 for w in words]

    text = "# T\n\n" + " ".join(["see https://x.org/a/b"] * 40) + "\n\n## More\n\n" + "plain " * 30 + "\n"
    cut = body_passages("T", text, pieces=pieces, budget=101)
    sizes = [sum(pieces(p.split())) for p in cut]  # the title's piece included
    assert sizes == [101, 100, 100, 94]  # full, and the last packs the URLs' end with the next section
    assert (
        " ".join(" ".join(p.split()[1:]) for p in cut).split()
        == [*(["see", "https://x.org/a/b"] * 40), "More:"] + ["plain"] * 30
    )  # every word once, in order: nothing the model would truncate is dropped
    assert body_passages("T", text) == [f"T\n{' '.join(text.split()[2:]).replace('## More', 'More:')}"]  # by words
    assert len(body_passages("T", text, pieces=pieces, budget=101, limit=2)) == 2


def test_a_note_is_cut_by_its_embedders_own_piece_count(tmp_path: Path) -> None:
    class PieceEmbedder(CountingEmbedder):
        def count_pieces(self, words: Any) -> list[int]:
            return [3] * len(words)

    embedder = PieceEmbedder()
    long = "# Birds\n\nintro\n\n## Hunting\n\n" + "kestrel " * 200 + "\n"
    with _open(tmp_path / "data", embedder) as memory:
        memory.knowledge.write_note("alice", "birds", long)
    body = [t for t in embedder.texts if t.startswith("Birds\n")]
    assert len(body) == 2  # 320 pieces a passage, 3 a word: 106 words and the rest, not one passage of 200
    assert all(3 * len(t.split()) <= 320 for t in body)


def _recount(dense: Any) -> dict[str, int]:
    """Each digest's rows over the maps a :class:`DenseIndex` holds, counted the slow way."""
    out: dict[str, int] = {}
    for rows in dense._maps.values():
        for _, digests in rows.values():
            for digest in digests:
                out[digest] = out.get(digest, 0) + 1
    return out


def test_a_shared_passage_keeps_its_vector_when_one_of_its_notes_is_deleted() -> None:
    """The cache is shared by content: deleting one of two notes with the same passages frees
    nothing they share (a cache that deletes cheaply drops freed vectors at once), and the
    reference counts that decide it follow every write, re-cut, delete and re-read."""
    embedder = CountingEmbedder()
    config = MemoryConfig(search_mode="hybrid")
    memory = Memory(config, runtime=InMemoryRuntimeBackend(), knowledge=InMemoryKnowledgeBackend(), embedder=embedder)
    with memory:
        birds = "# Birds\n\nintro about birds\n\n## Hunting\n\nThe kestrel hovers over the falcon.\n"
        memory.knowledge.write_note("alice", "birds", birds)
        memory.knowledge.write_note("alice", "copy", birds)
        memory.knowledge.write_note("bob", "garden", "# Garden\n\nThe garden and the python.\n")
        store = memory.knowledge.store
        dense = store._dense()
        assert dense is not None
        rows = dense._read("knowledge", "alice")
        mine, theirs = rows["alice_birds.md"][1], rows["alice_copy.md"][1]
        shared = set(mine) & set(theirs)
        assert shared  # the body passage is the same text in both
        assert shared != set(mine)  # and birds has its own lead (its file name's words)
        assert dense._refs == _recount(dense)

        memory.knowledge.write_note("bob", "garden", "# Garden\n\nThe garden and the python.\n\nmore oil\n")
        assert dense._refs == _recount(dense)  # a re-cut moved the counts
        assert store.delete_file("knowledge/alice_birds.md")
        assert dense._refs == _recount(dense)
        own = sorted(set(mine) - set(dense._read("knowledge", "alice")["alice_copy.md"][1]))
        assert own
        for digest in own:  # what only the deleted note named is gone at once here
            assert dense.cache.kept([digest]) is None, digest
        for digest in shared:  # the passage both notes had keeps its vector
            assert dense.cache.kept([digest]) is not None, digest
        assert store.hybrid_candidates("kestrel falcon", 1, user_id="alice")[0].filename == "alice_copy.md"

        dense._map("knowledge", "alice", fresh=True)  # a re-read replaces the held map: counted once
        assert dense._refs == _recount(dense)
        store.forget_user("alice")
        assert dense._refs == _recount(dense)
        assert set(dense._refs) == set(dense._read("knowledge", "bob")["bob_garden.md"][1])


class PieceEmbedder(CountingEmbedder):
    """The same model (``model_name``) as :class:`CountingEmbedder`, cutting by word pieces."""

    def count_pieces(self, words: Any) -> list[int]:
        return [3] * len(words)


def test_a_store_that_cuts_by_word_pieces_does_not_read_passages_cut_by_words(tmp_path: Path) -> None:
    """One model, two embedders (sentence-transformers cuts by words, the ONNX export by word
    pieces): each reads the passages its own rule cuts, not the other's row for the same note,
    and forgetting the user drops both rules' maps and vectors."""
    from local_ai_memory._knowledge.index_file import lead_text

    long = "# Birds\n\nintro\n\n## Hunting\n\n" + "kestrel " * 200 + "\n"
    folder = tmp_path / "data" / "memory_data"
    with _open(tmp_path / "data", CountingEmbedder()) as memory:  # by words: one body passage
        memory.knowledge.write_note("alice", "birds", long)
        words_dense = memory.knowledge.store._dense()
        assert words_dense is not None
        by_words = words_dense._read("knowledge", "alice")["alice_birds.md"][1]
    pieces = PieceEmbedder()
    with _open(tmp_path / "data", pieces) as memory:
        memory.knowledge.build_index()
        assert memory.knowledge.search("kestrel", "alice")
        store = memory.knowledge.store
        dense = store._dense()
        assert dense is not None
        entry = next(e for e in store.read_index().files if e.filename == "alice_birds.md")
        cut = passages_of(
            lead_text(entry), entry.title, (folder / "knowledge" / entry.filename).read_text(), pieces.count_pieces
        )
        own = [dense.cache.digest_of(p) for p in cut]  # the lead and body passages of at most 320 pieces
        assert not set(own[1:]) & set(by_words)  # no body passage is cut alike by both rules
        assert dense._read("knowledge", "alice")["alice_birds.md"][1] == own
        assert dense.cache.kept(by_words) is not None
        store.forget_user("alice")
        assert dense.cache.kept(by_words) is None  # the word-cut passages' vectors too
        assert not [p for p in (folder / ".passages").rglob("alice_*") if p.is_file()]


def test_a_changed_passage_cap_is_said_once_and_reuses_the_vectors_both_cuts_share(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The rule (model, cut, cap) is stored beside the maps: a memory opened with another cap
    says so once (EMBEDDINGS_REBUILD, WARNING), records the notes under the new rule from the
    vectors both cuts share (embedding nothing), and forgetting the user drops every rule's maps."""
    long = "# Birds\n\n" + "\n\n".join(f"## Part {i}\n\n" + " ".join(["kestrel falcon"] * 120) for i in range(6))
    embedder = CountingEmbedder()
    with Memory.open(tmp_path, fsync=False, auto_watch=False, search_mode="hybrid", embedder=embedder) as memory:
        memory.knowledge.write_note("alice", "birds", long)
        full = len(embedder.texts)
    assert full > 3
    fewer = CountingEmbedder()
    settings = {"fsync": False, "auto_watch": False, "search_mode": "hybrid", "hybrid_passages": 3}
    with caplog.at_level("INFO", logger="local_ai_memory"), Memory.open(tmp_path, embedder=fewer, **settings) as memory:
        assert memory.knowledge.search("falcon", "alice")[0].filename == "alice_birds.md"
        assert fewer.calls == [["falcon"]]  # the first three passages were embedded under the old cap
        memory.knowledge.search("kestrel", "alice")
    rebuilds = [r for r in caplog.records if getattr(r, "event", "") == "EMBEDDINGS_REBUILD"]
    assert len(rebuilds) == 1
    assert rebuilds[0].levelname == "WARNING"
    assert "max_passages 257 -> 3" in rebuilds[0].getMessage()
    maps = tmp_path / "memory_data" / ".passages" / "knowledge"
    assert len(list(maps.glob("alice_*.json*"))) >= 2  # one per rule
    with Memory.open(tmp_path, embedder=CountingEmbedder(), **settings) as memory:
        memory.forget_user("alice")
    assert list(maps.glob("alice_*")) == []
