"""Stage 1 ranking: differential tests against a plain BM25 written out independently
(``local_ai_memory.testing._knowledge.reference_bm25``), plus the properties the scoring promises."""

from __future__ import annotations

import os
import random
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from local_ai_memory._knowledge.bm25 import BM25Index, Vocabulary, rank, read_snapshot, unpack_texts
from local_ai_memory._knowledge.rankers import SnapshotMeta
from local_ai_memory._knowledge.store import MemoryStore
from local_ai_memory._shared.config import MemoryConfig
from local_ai_memory._shared.errors import ConfigError
from local_ai_memory._shared.naming import DirectoryGuard, user_file_prefix
from local_ai_memory._shared.text import EXACT, LEAD, Analyzer
from local_ai_memory.backends import FileKnowledgeBackend
from local_ai_memory.testing._knowledge import reference_bm25

sys.path.insert(0, str(Path(__file__).parent))  # the helpers the test files share
from index_support import stored_index

WORDS = [f"w{i}" for i in range(12)]
TERMS = [*WORDS, LEAD + "w1", LEAD + "w2", EXACT + "w1", EXACT + "w3"]
Query = list[str | tuple[str, float]]


def expected(docs: dict[str, list[str]], query: Query) -> dict[str, float]:
    """Reference scores of the documents sharing a term with ``query``."""
    return reference_bm25(docs, query)


def assert_matches(got: list[tuple[str, str, float]], docs: dict[str, list[str]], query: Query) -> None:
    want = expected(docs, query)
    assert {key for _, key, _ in got} == set(want)
    for _, key, score in got:
        assert score == pytest.approx(want[key], rel=1e-9, abs=1e-12)
        assert score > 0
    ordered = [score for _, _, score in got]
    assert ordered == sorted(ordered, reverse=True)


def rank_thrice(indexes: list[BM25Index], query: Query, top_n: int) -> list[tuple[str, str, float]]:
    """``rank`` three times: a word's first query (added term by term), its second (kept as
    one contribution) and its third (the kept one added): all three answer the same."""
    first, second, third = (rank(indexes, query, top_n) for _ in range(3))
    assert [key for _, key, _ in second] == [key for _, key, _ in first] == [key for _, key, _ in third]
    assert [s for *_, s in second] == pytest.approx([s for *_, s in first], rel=1e-12)
    assert [s for *_, s in third] == [s for *_, s in second]
    return first


def built_and_ranked(initial: dict[int, list[str]], query: Query) -> tuple[dict[str, list[str]], BM25Index]:
    """An index built from ``initial`` and ranked for ``query`` (which keeps the words'
    contributions, which must not outlive the changes a test makes next)."""
    docs = {f"d{k}": v for k, v in initial.items()}
    index = BM25Index(Vocabulary(), "c")
    index.build(docs.items())
    assert_matches(rank_thrice([index], query, 100), dict(docs), query)
    return docs, index


def change(index: BM25Index, docs: dict[str, list[str]], op: str, key: str, tokens: list[str]) -> None:
    """Add (``"add"``) or remove a document in ``index`` and in the reference ``docs`` alike."""
    if op == "add":
        index.add(key, tokens)
        docs[key] = tokens
    else:
        assert index.remove(key) == (key in docs)
        docs.pop(key, None)


doc_st = st.lists(st.sampled_from(TERMS), min_size=0, max_size=15)
query_st = st.lists(
    st.one_of(st.sampled_from([*TERMS, "absent"]), st.tuples(st.sampled_from(TERMS), st.sampled_from([0.4, 0.5, 2.0]))),
    min_size=1,
    max_size=5,
)
op_st = st.tuples(st.sampled_from(["add", "remove"]), st.integers(0, 30), doc_st)


@settings(max_examples=150, deadline=None)
@given(
    initial=st.dictionaries(st.integers(0, 30), doc_st, min_size=1, max_size=25),
    ops=st.lists(op_st, max_size=25),
    query=query_st,
)
def test_scores_match_the_reference_after_any_changes(
    initial: dict[int, list[str]], ops: list[tuple[str, int, list[str]]], query: Query
) -> None:
    docs, index = built_and_ranked(initial, query)
    for op, number, tokens in ops:
        change(index, docs, op, f"d{number}", tokens)
    got = rank_thrice([index], query, 100)
    assert_matches(got, docs, query)
    fresh = BM25Index(Vocabulary(), "c")
    fresh.build(docs.items())
    rebuilt = rank([fresh], query, 100)
    # incremental == fresh build: the same notes with the same scores (equal notes tie, and
    # a tie's order may differ in the last bits of a float sum, so compare by key)
    assert {key: score for _, key, score in rebuilt} == pytest.approx({key: score for _, key, score in got}, rel=1e-9)


def test_kept_word_contributions_stay_exact_over_every_slot_or_a_union() -> None:
    """A word whose terms hit most documents is kept over every slot, a rarer one over the
    union of its terms' postings; documents added, replaced or removed after the words were
    kept, and those still in the delta, are scored exactly all the same."""
    docs = {f"d{i}": ["w0", EXACT + "w0", *(["w1", LEAD + "w1"] if i % 3 == 0 else ["w2"])] for i in range(60)}
    index = BM25Index(Vocabulary(), "c")
    index.build(docs.items())
    query: Query = ["w0", (EXACT + "w0", 0.5), "w1", (EXACT + "w1", 0.5), (LEAD + "w1", 0.4), "w2"]
    assert_matches(rank_thrice([index], query, 100), docs, query)
    kept = {word: slots for word, (slots, _) in index._kept.items()}
    assert sorted(slots is None for slots in kept.values()) == [False, False, True]  # w0 dense, w1 and w2 not
    for key, tokens in {"d1": ["w1", LEAD + "w1"], "d99": ["w0", "w2", "w2"]}.items():
        index.add(key, tokens)
        docs[key] = tokens
    index.remove("d3")
    docs.pop("d3")
    assert_matches(rank_thrice([index], query, 100), docs, query)


def test_a_kept_word_holds_the_delta_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """A writer's delta (documents added since the last compaction) goes into a repeated word's
    kept contribution: from its third query on, the delta's postings are not read again, and
    the scores stay those of a fresh build (one-term words and words of several terms alike)."""
    docs = {f"d{i}": ["w0", EXACT + "w0", *(["w1"] if i % 3 == 0 else ["w2", LEAD + "w2"])] for i in range(60)}
    index = BM25Index(Vocabulary(), "c")
    index.build(docs.items())
    for i in range(60, 90):  # the delta: 30 documents, no compaction
        tokens = ["w0", *(["w1"] if i % 2 else ["w2", LEAD + "w2", "w3"])]
        index.add(f"d{i}", tokens)
        docs[f"d{i}"] = tokens
    assert index._pending
    query: Query = ["w1", "w3", "w0", (EXACT + "w0", 0.5), "w2", (LEAD + "w2", 0.4)]
    rank(index_list := [index], query, 100)
    rank(index_list, query, 100)  # the second query keeps each word, delta included
    reads: list[int] = []
    real = index._delta_part
    monkeypatch.setattr(index, "_delta_part", lambda term, *a: (reads.append(term), real(term, *a))[1])
    got = rank(index_list, query, 100)
    assert reads == []
    assert_matches(got, docs, query)
    fresh = BM25Index(Vocabulary(), "c")
    fresh.build(docs.items())
    want = {key: score for _, key, score in rank([fresh], query, 100)}
    assert {key: score for _, key, score in got} == pytest.approx(want, rel=1e-12)


def test_terms_in_most_documents_still_score_positive() -> None:
    # "common" is in 4 of 5 documents: Okapi's IDF would be negative; Lucene's stays above 0.
    docs = {
        "a": ["common", "alpha"],
        "b": ["common", "beta"],
        "c": ["common", "gamma"],
        "d": ["common", "delta", "delta"],
        "e": ["epsilon"],
    }
    index = BM25Index(Vocabulary())
    index.build(docs.items())
    got = rank([index], ["common"], 10)
    assert {key for _, key, _ in got} == {"a", "b", "c", "d"}
    assert_matches(got, docs, ["common"])
    assert_matches(rank([index], ["common", "delta", "common"], 10), docs, ["common", "delta", "common"])


@pytest.mark.parametrize("count", [1, 2, 3])
def test_a_user_with_one_to_three_notes_gets_positive_scores(count: int) -> None:
    docs = {f"n{i}": ["python", "notes", f"topic{i}"] for i in range(count)}
    index = BM25Index(Vocabulary())
    index.build(docs.items())
    got = rank([index], ["python", "notes"], 5)
    assert len(got) == count
    assert all(score > 0 for _, _, score in got)
    assert_matches(got, docs, ["python", "notes"])


def test_lead_terms_are_not_length_normalized_and_do_not_count_for_length() -> None:
    # Same lead, very different body lengths: the lead match scores the same in both,
    # while a body match is worth less in the longer document.
    docs = {"short": [LEAD + "topic", "word"], "long": [LEAD + "topic", *(["word"] * 20), *(["other"] * 30)]}
    index = BM25Index(Vocabulary())
    index.build(docs.items())
    lead = {key: score for _, key, score in rank([index], [(LEAD + "topic", 1.0)], 5)}
    assert lead["short"] == pytest.approx(lead["long"])
    assert_matches(rank([index], [(LEAD + "topic", 0.4), "word"], 5), docs, [(LEAD + "topic", 0.4), "word"])


def test_single_document_corpus_still_returns_its_match() -> None:
    index = BM25Index(Vocabulary())
    index.add("only", ["python", "notes"])
    got = rank([index], ["python"], 5)
    assert [key for _, key, _ in got] == ["only"]
    assert got[0][2] > 0
    assert_matches(got, {"only": ["python", "notes"]}, ["python"])


reload_op_st = st.tuples(st.sampled_from(["add", "remove", "compact", "reload"]), st.integers(0, 30), doc_st)


@settings(max_examples=150, deadline=None)
@given(
    initial=st.dictionaries(st.integers(0, 30), doc_st, min_size=1, max_size=25),
    ops=st.lists(reload_op_st, max_size=30),
    dropped=st.sets(st.integers(0, 30), max_size=5),
    query=query_st,
    fresh=st.booleans(),
)
def test_compactions_and_snapshot_reloads_keep_scores_exact(
    initial: dict[int, list[str]],
    ops: list[tuple[str, int, list[str]]],
    dropped: set[int],
    query: Query,
    fresh: bool,
) -> None:
    """The base segment is merged (not re-sorted) by a compaction and installed as it is by a
    snapshot load, into vocabularies that number the terms in another order, or into a fresh
    one that takes the snapshot's own numbering and stored arrays (what a host does for each
    user it reloads): the scores stay those of the reference over exactly the live documents."""
    from local_ai_memory._knowledge.bm25 import snapshot_bytes

    docs, index = built_and_ranked(initial, query)
    for op, number, tokens in ops:
        key = f"d{number}"
        if op in ("add", "remove"):
            change(index, docs, op, key, tokens)
        elif op == "compact":
            index.compact()
        else:
            arrays, names = index.export()
            assert sorted(names) == sorted(docs)
            vocab = Vocabulary()
            if not fresh:
                vocab.ids_for(reversed(TERMS))  # ids in another order than the snapshot's
            restored = BM25Index(vocab, "c")
            skip = frozenset(f"d{n}" for n in dropped)
            taken = restored.load(
                read_snapshot(snapshot_bytes(arrays)), lambda keys, skip=skip: np.array([k not in skip for k in keys])
            )
            assert taken == set(docs) - skip
            docs = {name: tokens for name, tokens in docs.items() if name not in skip}
            index = restored
        assert len(index) == len(docs)
    assert_matches(rank_thrice([index], query, 100), docs, query)


def test_a_snapshot_that_does_not_fit_together_is_refused() -> None:
    from local_ai_memory._knowledge.bm25 import array_bounds, snapshot_bytes

    index = BM25Index(Vocabulary())
    index.build([("a", ["w1", "w2"]), ("b", ["w2", "w3"])])
    arrays, _ = index.export()
    for name, bad in [
        ("post_slots", arrays["post_slots"] + 5),
        ("doc_terms", arrays["doc_terms"] * 0 + 99),
        ("doc_ptr", arrays["doc_ptr"][::-1].copy()),
        ("post_ptr", arrays["post_ptr"][:-1]),
        ("doc_len", arrays["doc_len"][:1]),
        ("post_slots", arrays["post_slots"] - 5),
    ]:
        damaged = read_snapshot(snapshot_bytes({**arrays, name: bad}))
        for bounds in (None, array_bounds(damaged)):  # taken by the load, or by the thread that read it
            with pytest.raises(ValueError):
                BM25Index(Vocabulary()).load(damaged, lambda keys: np.ones(len(keys), dtype=bool), bounds)
    loaded = BM25Index(Vocabulary())
    loaded.load(read_snapshot(snapshot_bytes(arrays)), lambda keys: np.ones(len(keys), dtype=bool))
    with pytest.raises(ValueError):  # only into an empty index
        loaded.load(read_snapshot(snapshot_bytes(arrays)), lambda keys: np.ones(len(keys), dtype=bool))


def test_several_indexes_rank_like_one_corpus_over_their_union() -> None:
    rng = random.Random(7)
    vocab = Vocabulary()
    parts = []
    union: dict[str, list[str]] = {}
    for label in ("knowledge", "work", "personal"):
        index = BM25Index(vocab, label)
        docs = {f"{label}-{i}": [rng.choice(WORDS) for _ in range(rng.randint(1, 12))] for i in range(40)}
        index.build(docs.items())
        parts.append(index)
        union.update(docs)
    query = ["w1", "w5", "w5"]
    got = rank(parts, query, 1000)
    assert_matches(got, union, query)
    assert {label for label, _, _ in got} == {"knowledge", "work", "personal"}


def test_incremental_changes_across_compactions_stay_exact() -> None:
    rng = random.Random(3)
    docs = {f"d{i}": [rng.choice(WORDS) for _ in range(rng.randint(1, 10))] for i in range(300)}
    index = BM25Index(Vocabulary())
    index.build(docs.items())
    versions_before = index.version
    for step in range(2500):  # more than the compaction threshold of changes
        key = f"d{rng.randrange(400)}"
        if step % 5 == 0 and key in docs:
            index.remove(key)
            del docs[key]
        else:
            docs[key] = [rng.choice(WORDS) for _ in range(rng.randint(1, 10))]
            index.add(key, docs[key])
        if step % 500 == 0:  # queries between changes: kept term weights must follow them
            assert_matches(rank([index], ["w3", "w7"], 1000), docs, ["w3", "w7"])
    assert index.version > versions_before
    assert len(index) == len(docs)
    assert_matches(rank([index], ["w3", "w7"], 1000), docs, ["w3", "w7"])


def test_top_n_cut_and_tie_order_are_deterministic() -> None:
    index = BM25Index(Vocabulary())
    index.build((f"doc{i:02d}", ["same", "words"]) for i in range(30))
    got = rank([index], ["same"], 5)
    assert [key for _, key, _ in got] == [f"doc{i:02d}" for i in range(5)]
    assert rank([index], ["same"], 0) == []
    assert rank([index], [], 5) == []
    assert rank([index], ["unknown"], 5) == []


def test_replacing_a_document_changes_only_that_document() -> None:
    index = BM25Index(Vocabulary())
    index.build([("a", ["cats", "purr"]), ("b", ["dogs", "bark"]), ("c", ["fish", "swim"])])
    index.add("a", ["dogs", "run"])
    docs = {"a": ["dogs", "run"], "b": ["dogs", "bark"], "c": ["fish", "swim"]}
    assert rank([index], ["cats"], 5) == []
    assert_matches(rank([index], ["dogs"], 5), docs, ["dogs"])


def test_export_and_load_round_trip_into_a_new_vocabulary() -> None:
    from local_ai_memory._knowledge.bm25 import snapshot_bytes

    rng = random.Random(5)
    docs = {f"d{i}": [rng.choice(WORDS) for _ in range(rng.randint(1, 10))] for i in range(80)}
    index = BM25Index(Vocabulary())
    index.build(docs.items())
    index.add("d3", ["w1", "w1", "w2"])
    docs["d3"] = ["w1", "w1", "w2"]
    arrays, names = index.export()
    assert sorted(names) == sorted(docs)
    restored = BM25Index(Vocabulary())
    restored.vocab.add("unrelated")  # ids differ from the original vocabulary
    taken = restored.load(read_snapshot(snapshot_bytes(arrays)), lambda keys: np.array([key != "d7" for key in keys]))
    del docs["d7"]
    assert taken == set(docs)
    assert_matches(rank([restored], ["w1", "w4"], 1000), docs, ["w1", "w4"])
    with pytest.raises(ValueError):
        read_snapshot(b"not a zip file")


# -- through a store: analysis, titles, scores, settings ---------------------------------------
def _store(root: Path, **settings: object) -> MemoryStore:
    config = MemoryConfig(runtime_data_dir=root, fsync=False, **settings)  # type: ignore[arg-type]
    return MemoryStore(FileKnowledgeBackend(DirectoryGuard(root), config), config, categories=["knowledge"])


def _write(store: MemoryStore, name: str, text: str) -> Path:
    path = store.category_dir("knowledge") / f"{user_file_prefix('alice')}{name}.md"
    path.write_text(text, encoding="utf-8")
    return path


def test_titles_and_descriptions_are_stored_and_shown_verbatim(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.write_file(
        "knowledge/alice_a.md",
        "# my_snake_case_func and __init__\n\nCall `my_snake_case_func(x_1)` before **__init__** runs.\n",
    )
    store.write_file("knowledge/alice_gcloud_ai_index-endpoints.md", "Endpoints of the *AI* index, listed.\n")
    (found,) = store.search("snake case func", user_id="alice")
    assert found.title == "my_snake_case_func and __init__"
    assert found.description == "Call `my_snake_case_func(x_1)` before **__init__** runs."
    entry = store.find_entry("alice_gcloud_ai_index-endpoints.md")
    assert entry is not None
    assert entry.title == "gcloud_ai_index-endpoints"  # no heading: the file name as written
    assert entry.description == "Endpoints of the *AI* index, listed."
    # Ranking still splits what is shown: the words of the file name find the note.
    assert store.bm25_search("gcloud endpoints", user_id="alice") == ["alice_gcloud_ai_index-endpoints.md"]
    store.flush()
    on_disk = stored_index(store.data_dir)
    assert "my_snake_case_func and __init__" in {e.title for e in on_disk}


@pytest.mark.parametrize("count", [1, 2, 3])
def test_scores_are_positive_for_a_user_with_few_notes(tmp_path: Path, count: int) -> None:
    store = _store(tmp_path)
    for i in range(count):
        store.write_file(f"knowledge/alice_n{i}.md", f"# Python {i}\n\nPython lists and dicts, part {i}.")
    found = store.search("python lists", user_id="alice")
    assert len(found) == count
    assert all(c.score > 0 for c in found)


def test_stemming_finds_other_forms_and_prefers_the_exact_one(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.write_file("knowledge/alice_a.md", "# Notes\n\nHow the store keeps its indexing fast.")
    store.write_file("knowledge/alice_b.md", "# More\n\nOld indexes are rebuilt, then indexing resumes.")
    store.write_file("knowledge/alice_c.md", "# Other\n\nNothing about that here.")
    assert store.bm25_search("indexes", user_id="alice") == ["alice_b.md", "alice_a.md"]
    plain = _store(tmp_path / "plain", stemmer_language=None)
    plain.write_file("knowledge/alice_a.md", "# Notes\n\nHow the store keeps its indexing fast.")
    assert plain.bm25_search("indexes", user_id="alice") == []


def test_stop_words_neither_match_nor_score(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.write_file("knowledge/alice_a.md", "# The book\n\nIt is about the sea and the wind.")
    store.write_file("knowledge/alice_b.md", "# Sea\n\nThe sea.")
    assert store.search("the and it is about", user_id="alice") == []
    with_stop_words = store.search("what is the sea", user_id="alice")
    assert [(c.filename, c.score) for c in with_stop_words] == [
        (c.filename, c.score) for c in store.search("sea", user_id="alice")
    ]


def test_analyzer_terms_and_languages() -> None:
    english = Analyzer("English")
    assert english.language == "english"
    assert english.stems(["indexes", "indexing", "index"]) == ["index"] * 3
    assert english.document_terms(["indexes"], ["notes"]) == ["index", EXACT + "indexes", LEAD + "note"]
    assert english.query_terms("the Indexes") == [("index", 1.0), (EXACT + "indexes", 0.5), (LEAD + "index", 0.4)]
    off = Analyzer(None)
    assert off.document_terms(["indexes"], ["notes"]) == ["indexes", LEAD + "notes"]
    assert off.signature != english.signature != Analyzer("german").signature
    assert Analyzer("german").stems(["häuser"]) == ["haus"]
    with pytest.raises(ConfigError, match="no stemmer"):
        Analyzer("klingon")


def test_stemmer_language_config_key(monkeypatch: pytest.MonkeyPatch) -> None:
    assert MemoryConfig().stemmer_language == "english"
    assert MemoryConfig(stemmer_language="German").stemmer_language == "german"
    assert MemoryConfig(stemmer_language=None).stemmer_language is None
    assert MemoryConfig(stemmer_language="none").stemmer_language is None
    with pytest.raises(ConfigError, match=r"memory\.stemmer_language"):
        MemoryConfig(stemmer_language="klingon")
    monkeypatch.setenv("LOCAL_AI_MEMORY_STEMMER_LANGUAGE", "none")
    assert MemoryConfig().stemmer_language is None
    monkeypatch.setenv("LOCAL_AI_MEMORY_STEMMER_LANGUAGE", "french")
    assert MemoryConfig().stemmer_language == "french"
    assert MemoryConfig.from_mapping({"memory": {"stemmer_language": "dutch"}}).stemmer_language == "french"
    monkeypatch.delenv("LOCAL_AI_MEMORY_STEMMER_LANGUAGE")
    assert MemoryConfig.from_mapping({"memory": {"stemmer_language": "dutch"}}).stemmer_language == "dutch"


def _snapshot_meta(path: Path) -> SnapshotMeta:
    return SnapshotMeta.model_validate_json(unpack_texts(read_snapshot(path.read_bytes())["meta"])[0])


def test_ranker_snapshot_is_not_reused_after_the_analysis_changes(tmp_path: Path) -> None:
    store = _store(tmp_path)
    path = _write(store, "a", "# A\n\napples")
    _write(store, "b", "# B\n\nbananas")
    old = time.time_ns() - 10_000_000_000  # older than the racy window: stat() alone is trusted
    os.utime(path, ns=(old, old))
    assert store.bm25_search("apples", user_id="alice") == ["alice_a.md"]
    snapshot = store.data_dir / ".bm25" / "knowledge" / "alice_bm25.npz"
    assert _snapshot_meta(snapshot).analyzer == Analyzer().signature
    # Change the note behind the store's back, keeping size and mtime: a store with the same
    # analysis trusts its snapshot (and still finds "apples")...
    st = path.stat()
    path.write_text("# A\n\nmelons")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert _store(tmp_path).bm25_search("apples", user_id="alice") == ["alice_a.md"]
    assert _store(tmp_path).bm25_search("melons", user_id="alice") == []
    # ...one with another analysis ignores it and re-reads the note's text.
    other = _store(tmp_path, stemmer_language=None)
    assert other.bm25_search("melons", user_id="alice") == ["alice_a.md"]
    assert _snapshot_meta(snapshot).analyzer == Analyzer(None).signature


def test_a_snapshot_loads_into_a_vocabulary_that_numbers_its_first_and_last_terms_alike() -> None:
    """A shared vocabulary (another user's snapshot loaded first) can give a snapshot's terms
    ids that start at 0 and end at its last row with foreign ids between: the documents must
    still be mapped term by term (they once kept the snapshot's numbering: wrong scores)."""
    from local_ai_memory._knowledge.bm25 import snapshot_bytes

    docs = {"d0": ["a", "b"], "d1": ["b", "c"], "d2": ["c"]}
    source = BM25Index(Vocabulary())
    source.build(docs.items())
    arrays, _ = source.export()
    shared = Vocabulary()
    shared.ids_for(["a", "other", "c"])  # the snapshot's words a, b, c get ids 0, 3, 2
    loaded = BM25Index(shared)
    assert loaded.load(read_snapshot(snapshot_bytes(arrays)), lambda keys: np.array([k != "d2" for k in keys])) == {
        "d0",
        "d1",
    }
    del docs["d2"]
    for query in (["a"], ["b"], ["c"], ["a", "c"]):
        assert_matches(rank([loaded], query, 10), docs, query)
