"""Stage 1 ranking: differential tests against rank_bm25.BM25Okapi (the reference scorer)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rank_bm25 import BM25Okapi

from local_ai_memory._ranking import BM25Index, Vocabulary, rank

WORDS = [f"w{i}" for i in range(12)]


def expected(docs: dict[str, list[str]], query: list[str]) -> dict[str, float]:
    """BM25Okapi scores of the documents sharing a term with ``query``."""
    keys = sorted(docs)
    scores = BM25Okapi([docs[k] for k in keys]).get_scores(query)
    return {k: float(scores[i]) for i, k in enumerate(keys) if any(t in docs[k] for t in query)}


def assert_matches(got: list[tuple[str, str, float]], docs: dict[str, list[str]], query: list[str]) -> None:
    want = expected(docs, query)
    assert {key for _, key, _ in got} == set(want)
    for _, key, score in got:
        assert score == pytest.approx(want[key], rel=1e-9, abs=1e-12)
    ordered = [score for _, _, score in got]
    assert ordered == sorted(ordered, reverse=True)


doc_st = st.lists(st.sampled_from(WORDS), min_size=0, max_size=15)
op_st = st.tuples(st.sampled_from(["add", "remove"]), st.integers(0, 30), doc_st)


@settings(max_examples=150, deadline=None)
@given(
    initial=st.dictionaries(st.integers(0, 30), doc_st, min_size=1, max_size=25),
    ops=st.lists(op_st, max_size=25),
    query=st.lists(st.sampled_from([*WORDS, "absent"]), min_size=1, max_size=4),
)
def test_scores_match_bm25okapi_after_any_changes(
    initial: dict[int, list[str]], ops: list[tuple[str, int, list[str]]], query: list[str]
) -> None:
    docs = {f"d{k}": v for k, v in initial.items()}
    index = BM25Index(Vocabulary(), "c")
    index.build(docs.items())
    for op, number, tokens in ops:
        key = f"d{number}"
        if op == "add":
            index.add(key, tokens)
            docs[key] = tokens
        else:
            assert index.remove(key) == (key in docs)
            docs.pop(key, None)
    if not docs or all(not d for d in docs.values()):
        assert rank([index], query, 100) == []
        return
    assert_matches(rank([index], query, 100), docs, query)


def test_epsilon_floor_for_terms_in_most_documents() -> None:
    # "common" is in 4 of 5 documents: its raw IDF is negative and BM25Okapi floors it at
    # epsilon * average IDF. A differential test on this corpus exercises that branch.
    docs = {
        "a": ["common", "alpha"],
        "b": ["common", "beta"],
        "c": ["common", "gamma"],
        "d": ["common", "delta", "delta"],
        "e": ["epsilon"],
    }
    index = BM25Index(Vocabulary())
    index.build(docs.items())
    ref = BM25Okapi(list(docs.values()))
    assert ref.idf["common"] == pytest.approx(ref.epsilon * ref.average_idf)
    assert_matches(rank([index], ["common"], 10), docs, ["common"])
    assert_matches(rank([index], ["common", "delta", "common"], 10), docs, ["common", "delta", "common"])


def test_single_document_corpus_still_returns_its_match() -> None:
    # With one document every IDF is negative; the match must still come back.
    index = BM25Index(Vocabulary())
    index.add("only", ["python", "notes"])
    got = rank([index], ["python"], 5)
    assert [key for _, key, _ in got] == ["only"]
    assert_matches(got, {"only": ["python", "notes"]}, ["python"])


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
    from local_ai_memory._ranking import read_snapshot, snapshot_bytes

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
    taken = restored.load(read_snapshot(snapshot_bytes(arrays)), lambda key, row: key != "d7")
    del docs["d7"]
    assert taken == set(docs)
    assert_matches(rank([restored], ["w1", "w4"], 1000), docs, ["w1", "w4"])
    with pytest.raises(ValueError):
        read_snapshot(b"not a zip file")
