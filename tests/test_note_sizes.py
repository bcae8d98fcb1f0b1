"""Notes of any size and notes that are not text: bounded reads, remembered skips, ``k`` above 5."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import tracemalloc
from pathlib import Path

import pytest

from local_ai_memory._knowledge.indexer import MAX_INDEXED_BYTES
from local_ai_memory._knowledge.retriever import MAX_K, TRUNCATION_MARKER, MemoryRetriever
from local_ai_memory._knowledge.store import MemoryStore
from local_ai_memory._shared.config import MemoryConfig
from local_ai_memory._shared.errors import InvalidInputError
from local_ai_memory._shared.naming import DirectoryGuard
from local_ai_memory._shared.tokens import TokenCounter
from local_ai_memory.backends import FileKnowledgeBackend

PARAGRAPH = ("Zebras graze on the savanna while the herd keeps watch for lions. " * 20 + "\n\n").encode()


def make_store(root: Path) -> MemoryStore:
    return MemoryStore(
        FileKnowledgeBackend(DirectoryGuard(root), MemoryConfig(fsync=False, auto_watch=False)),
        MemoryConfig(fsync=False, auto_watch=False),
    )


def write_huge(path: Path, megabytes: int) -> None:
    with path.open("wb") as handle:
        handle.write(b"# Huge zebra note\n\nAll about zebras.\n\n")
        for _ in range(megabytes * 1024 * 1024 // len(PARAGRAPH)):
            handle.write(PARAGRAPH)


def test_a_60_mb_note_is_indexed_by_its_head_and_retrieved_within_300_tokens(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    folder = store.category_dir("knowledge")
    huge = folder / "alice_huge.md"
    write_huge(huge, 60)
    (folder / "alice_small.md").write_text("# Small\n\nzebras are striped.\n", encoding="utf-8")
    assert huge.stat().st_size > 60_000_000

    tracemalloc.start()
    try:
        store.ensure_index()
        index_peak = tracemalloc.get_traced_memory()[1]
        entry = store.find_entry("alice_huge.md")
        assert entry is not None
        assert entry.indexed_bytes == MAX_INDEXED_BYTES  # the metadata says only a head was indexed
        assert entry.size == huge.stat().st_size

        retriever = MemoryRetriever(store)
        retriever.retrieve_result("zebras savanna lions", "alice", max_tokens=300)  # rankers loaded
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        result = retriever.retrieve_result("zebras savanna lions", "alice", max_tokens=300)
        retrieve_extra = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    # Reading the whole note would hold 60 MB of bytes (and more as text); the bounds are generous.
    assert index_peak < 48 * 1024 * 1024, index_peak
    assert retrieve_extra < 4 * 1024 * 1024, retrieve_extra
    assert result.used_tokens <= 300
    files = {f.filename: f for f in result.files}
    assert files["alice_huge.md"].truncated
    assert files["alice_huge.md"].content.endswith(TRUNCATION_MARKER)
    head = files["alice_huge.md"].content.removesuffix(TRUNCATION_MARKER)
    assert head.startswith("# Huge zebra note\n\nAll about zebras.\n\nZebras graze")
    assert TokenCounter().count(result.text) == result.used_tokens


def test_a_head_is_read_further_when_its_tokens_are_long(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    # Runs of spaces and long digit-free symbols make tokens of many bytes each: the first
    # head read holds fewer tokens than the room, so the retriever must read on.
    text = "# Wide\n\nwide spacing\n\n" + ("x" + " " * 300 + "\n") * 4000
    store.write_file("knowledge/alice_wide.md", text)
    result = MemoryRetriever(store).retrieve_result("wide spacing", "alice", max_tokens=1500)
    assert result.used_tokens <= 1500
    (loaded,) = result.files
    assert loaded.truncated
    assert text.startswith(loaded.content.removesuffix(TRUNCATION_MARKER))
    assert loaded.tokens > 1000  # the budget was used, not just the first head


def test_a_cut_through_a_multibyte_character_is_never_shown(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    text = "# Emoji\n\nemoji party\n\n" + "🦓" * 200_000
    store.write_file("knowledge/alice_emoji.md", text)
    content, complete = store.read_head("knowledge/alice_emoji.md", 101)
    assert not complete
    assert text.startswith(content)
    result = MemoryRetriever(store).retrieve_result("emoji party", "alice", max_tokens=200)
    assert "\ufffd" not in result.text
    assert result.used_tokens <= 200


def test_a_huge_note_written_through_the_store_indexes_its_head(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    text = "# Big\n\nbig words\n\n" + "alpha beta " * 200_000 + "omegaword"
    store.write_file("knowledge/alice_big.md", text)
    entry = store.find_entry("alice_big.md")
    assert entry is not None
    assert entry.indexed_bytes == MAX_INDEXED_BYTES
    assert store.bm25_search("alpha", user_id="alice") == ["alice_big.md"]
    assert store.bm25_search("omegaword", user_id="alice") == []  # beyond the indexed head
    store.write_file("knowledge/alice_big.md", "# Big\n\nsmall now omegaword")
    entry = store.find_entry("alice_big.md")
    assert entry is not None
    assert entry.indexed_bytes is None
    assert store.bm25_search("omegaword", user_id="alice") == ["alice_big.md"]


# -- notes that are not text ----------------------------------------------------------------------

COUNT_SKIPS = textwrap.dedent(
    """
    import json, logging, sys
    from local_ai_memory import DirectoryGuard, MemoryConfig, MemoryStore
    from local_ai_memory.backends import FileKnowledgeBackend

    skips = []

    class Count(logging.Handler):
        def emit(self, record):
            if getattr(record, "event", None) == "FILE_SKIPPED":
                skips.append(record.fields["path"])

    logger = logging.getLogger("local_ai_memory")
    logger.addHandler(Count())
    logger.setLevel(logging.INFO)
    config = MemoryConfig(fsync=False, auto_watch=False)
    store = MemoryStore(FileKnowledgeBackend(DirectoryGuard(sys.argv[1]), config), config)
    found = [store.bm25_search("readable words", user_id="alice") for _ in range(3)]
    print(json.dumps({"skips": skips, "found": found[-1]}))
    """
)


def count_skips(root: Path) -> dict[str, list[str]]:
    done = subprocess.run(
        [sys.executable, "-c", COUNT_SKIPS, str(root)], capture_output=True, text=True, timeout=60, check=True
    )
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def test_unreadable_notes_are_read_once_across_processes_until_they_change(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    folder = store.category_dir("knowledge")
    (folder / "alice_text.md").write_text("# Text\n\nreadable words", encoding="utf-8")
    for i in range(5):
        (folder / f"alice_latin{i}.md").write_bytes("# Caf\xe9 cr\xe8me\n\nreadable words".encode("latin-1"))
    (folder / "alice_blob.md").write_bytes(b"readable words\x00\x01\x02")
    assert store.populate_index_from_files() == 1
    reasons = {n.filename: n.reason for n in store.skipped_notes()}
    assert reasons == {**{f"alice_latin{i}.md": "not UTF-8 text" for i in range(5)}, "alice_blob.md": "binary content"}

    first = count_skips(tmp_path)  # another process: the skips come from the index, no note is re-read
    assert first == {"skips": [], "found": ["alice_text.md"]}

    (folder / "alice_latin0.md").write_bytes("caf\xe9 again, longer".encode("latin-1"))  # changed: read once more
    second = count_skips(tmp_path)
    assert second["skips"] == ["knowledge/alice_latin0.md"]
    assert count_skips(tmp_path)["skips"] == []  # and remembered again for every later process

    (folder / "alice_latin1.md").write_text("# Fixed\n\nreadable words now", encoding="utf-8")
    fixed = count_skips(tmp_path)
    assert fixed["skips"] == []
    assert sorted(fixed["found"]) == ["alice_latin1.md", "alice_text.md"]
    (folder / "alice_latin2.md").unlink()
    store = make_store(tmp_path)
    store.bm25_search("anything", user_id="alice")
    assert [n.filename for n in store.skipped_notes("alice")] == [
        "alice_blob.md",
        "alice_latin0.md",
        "alice_latin3.md",
        "alice_latin4.md",
    ]


def test_index_command_lists_what_it_skipped(tmp_path: Path) -> None:
    folder = tmp_path / "memory_data" / "knowledge"
    folder.mkdir(parents=True)
    (folder / "alice_ok.md").write_text("# Ok\n\nfine", encoding="utf-8")
    (folder / "alice_bad.md").write_bytes(b"\xff\xfe not utf-8")
    env = {**os.environ, "LOCAL_AI_MEMORY_AUTO_WATCH": "false"}
    cli = [sys.executable, "-m", "local_ai_memory.cli", "index", "-d", str(tmp_path)]
    done = subprocess.run([*cli, "--json"], capture_output=True, text=True, timeout=60, env=env, check=True)
    report = json.loads(done.stdout)
    assert report["files"] == 1
    assert report["skipped"] == [
        {"category": "knowledge", "filename": "alice_bad.md", "size": 12, "reason": "not UTF-8 text"}
    ]
    done = subprocess.run(cli, capture_output=True, text=True, timeout=60, env=env, check=True)
    assert "knowledge/alice_bad.md: not UTF-8 text" in done.stderr


# -- k ----------------------------------------------------------------------------------------------


def twenty_notes(store: MemoryStore) -> None:
    for i in range(25):
        words = "shared topic " if i < 20 else "other subject "
        store.write_file(f"knowledge/alice_n{i:02d}.md", f"# Note {i}\n\n{words * (1 + i % 3)} number {i}")


def test_k_20_returns_20_where_20_notes_match(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    twenty_notes(store)
    retriever = MemoryRetriever(store)
    assert len(retriever.retrieve_result("shared topic", "alice").files) == 5  # the default k
    result = retriever.retrieve_result("shared topic", "alice", max_tokens=4000, k=20)
    assert len(result.candidates) == 20
    assert len(result.files) == 20
    assert len(MemoryRetriever(store, k=50).retrieve_result("shared topic", "alice", max_tokens=4000).files) == 20
    assert len(store.search("shared topic", 20, user_id="alice")) == 20
    with pytest.raises(InvalidInputError):
        retriever.retrieve_result("shared topic", "alice", k=MAX_K + 1)
    with pytest.raises(InvalidInputError):
        MemoryRetriever(store, k=0)


def test_with_an_llm_stage_2_still_picks_at_most_five_of_k(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    twenty_notes(store)

    class ChooseAll:
        def __init__(self) -> None:
            self.prompts: list[str] = []

        def complete(self, prompt: str) -> str:
            self.prompts.append(prompt)
            return json.dumps([f"alice_n{i:02d}.md" for i in range(20)])

        async def acomplete(self, prompt: str) -> str:
            return self.complete(prompt)

    llm = ChooseAll()
    result = MemoryRetriever(store, llm).retrieve_result("shared topic", "alice", max_tokens=4000, k=20)
    assert len(result.candidates) == 20
    assert all(f"alice_n{i:02d}.md" in llm.prompts[0] for i in range(20))  # the LLM saw all 20
    assert len(result.files) == 5
    assert {f.stage for f in result.files} == {2}


def test_cli_retrieve_top_20(tmp_path: Path) -> None:
    twenty_notes(make_store(tmp_path))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "local_ai_memory.cli",
            "retrieve",
            "shared topic",
            "-u",
            "alice",
            "-d",
            str(tmp_path),
            "--top",
            "20",
            "--max-tokens",
            "4000",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert len(json.loads(done.stdout)["files"]) == 20
