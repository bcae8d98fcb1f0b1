"""The standard-library sample corpus: real text, held-out queries, deterministic, per-user files."""

from __future__ import annotations

from pathlib import Path

from local_ai_memory._knowledge.index_file import extract_title
from local_ai_memory._knowledge.retriever import MemoryRetriever
from local_ai_memory._knowledge.samples import SKIP, build_corpus, write_corpus
from local_ai_memory._knowledge.store import MemoryStore
from local_ai_memory._shared.config import MemoryConfig
from local_ai_memory._shared.naming import DirectoryGuard
from local_ai_memory.backends import FileKnowledgeBackend


def test_corpus_is_real_and_large_enough() -> None:
    corpus = build_corpus()
    assert len(corpus.notes) >= 120
    assert len(corpus.queries) >= 100
    modules = {n.module for n in corpus.notes}
    assert {"json", "csv", "math", "os", "threading", "zipfile"} <= modules
    assert not modules & SKIP
    json_note = corpus.note("json").text
    assert extract_title(json_note) == "json"
    assert "JSON" in json_note.split("\n\n")[1]
    assert "## Functions" in json_note


def test_queries_are_not_copied_from_their_note() -> None:
    corpus = build_corpus()
    modules = {n.module for n in corpus.notes}
    texts = [q.text.lower() for q in corpus.queries]
    assert len(set(texts)) == len(texts)
    for query in corpus.queries:
        assert query.module in modules
        note = " ".join(corpus.note(query.module).text.lower().split())
        assert query.text.lower() not in note
        # the held-out function itself is not documented in the note
        function = query.source.rsplit(".", 1)[1]
        assert f"### {function}(" not in corpus.note(query.module).text
        assert len(query.text.split()) >= 3


def test_deterministic() -> None:
    first = build_corpus.__wrapped__(40)
    second = build_corpus.__wrapped__(40)
    assert first == second
    assert 20 <= len(first.notes) <= 40


def test_write_corpus_for_one_user(tmp_path: Path) -> None:
    config = MemoryConfig(runtime_data_dir=tmp_path, fsync=False)
    store = MemoryStore(FileKnowledgeBackend(DirectoryGuard(tmp_path), config), config)
    corpus = build_corpus()
    paths = write_corpus(store, "bob", modules=["json", "csv", "zipfile", "threading"], corpus=corpus)
    assert sorted(p.name for p in paths) == ["bob_csv.md", "bob_json.md", "bob_threading.md", "bob_zipfile.md"]
    assert (tmp_path / "memory_data" / "knowledge" / "bob_json.md").read_text() == corpus.note("json").text
    assert {e.filename for e in store.read_index().files} == {p.name for p in paths}
    retriever = MemoryRetriever(store)
    assert retriever.retrieve_result("csv dialect reader and writer", "bob").files[0].filename == "bob_csv.md"
    assert retriever.retrieve("comma separated values", "bob_admin") == ""
    query = next(q for q in corpus.queries if q.module in {"json", "csv", "zipfile", "threading"})
    assert query.expected("bob") in [c.filename for c in retriever.retrieve_result(query.text, "bob").candidates]
