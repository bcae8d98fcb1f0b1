"""Token counts taken at index time (``TokenMarks``) and Stage 3 packing from them.

The stored counts must give exactly what encoding the loaded text gives: the same files, the
same cuts, the same ``used_tokens``, never over the budget, for both shipped encodings, and
whatever the note holds (non-ASCII, apostrophes, digits, leading blank lines). A note changed
since indexing must not be packed by its old counts; an index without counts (older format)
must still answer.
"""

from __future__ import annotations

import base64
import json
import random
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from local_ai_memory import close_shared_stores
from local_ai_memory._knowledge import retriever as retriever_module
from local_ai_memory._knowledge.index_file import IndexEntry
from local_ai_memory._knowledge.retriever import MemoryRetriever, _Packer
from local_ai_memory._knowledge.search import Candidate
from local_ai_memory._knowledge.store import MemoryStore
from local_ai_memory._knowledge.token_marks import (
    MARK_EVERY,
    MAX_COUNTED_CHARS,
    TokenMarks,
    count_marks,
    least_tokens,
    pack_marks,
    segment_counts,
    unpack_marks,
    usable_marks,
)
from local_ai_memory._shared.config import MemoryConfig
from local_ai_memory._shared.naming import DirectoryGuard
from local_ai_memory._shared.tokens import TokenCounter
from local_ai_memory.backends import FileKnowledgeBackend

ENCODINGS = ("cl100k_base", "o200k_base")

WORDS = [
    "the", "note", "Python's", "don't", "12345", "3.14", "naïve", "café", "中文字符", "日本語",
    "emoji🙂", "x=1;", "(paren)", "[link](http://a.b/c)", "`code`", "--flag", "O'Brien", "IT'S",
    "tab\there", "multi  space", "end.", "q?", "a-b", "ÄÖÜ", "ß", "√2", "naïve's",
]  # fmt: skip


def sample_text(rng: random.Random, chars: int, lead: str = "# Title\n\n") -> str:
    """Markdown-like text: headings, paragraphs, lists and odd words, about ``chars`` long."""
    parts = [lead]
    size = len(lead)
    while size < chars:
        kind = rng.random()
        if kind < 0.1:
            block = f"## Section {rng.randint(1, 99)}\n\n"
        elif kind < 0.25:
            block = "".join(f"- {' '.join(rng.choices(WORDS, k=5))}\n" for _ in range(3)) + "\n"
        else:
            block = " ".join(rng.choices(WORDS, k=rng.randint(20, 80))) + "\n\n"
        parts.append(block)
        size += len(block)
    return "".join(parts)


def texts() -> list[str]:
    rng = random.Random(27)
    out = [sample_text(rng, n) for n in (0, 40, 900, 3000, 7000, 12000)]
    out += [
        "",
        "word",
        "\n\nstarts with blank lines\n\nand goes on " * 40,
        "   indented start, " * 200,
        "中文" * 3000,  # no split point at all
        "It's 2024; don't stop. " * 300,
        sample_text(rng, 5000, lead="'quoted start' "),
        sample_text(rng, 4000) + "ends without a split point 中",
    ]
    return out


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_every_mark_counts_its_prefix(encoding: str) -> None:
    counter = TokenCounter(encoding)
    for text in texts():
        marks = count_marks(counter, text)
        assert marks.whole
        assert marks.encoding == encoding
        assert marks.total == counter.count(text)
        assert marks.whole_count(text) == counter.count(text)
        assert all(n >= 0 for n in segment_counts(marks.marks))
        for chars, tokens, _crc in marks.marks:
            assert tokens == counter.count(text[:chars]), (text[:60], chars)
        assert [m[0] for m in marks.marks] == sorted({m[0] for m in marks.marks})
        if len(text) > 3 * MARK_EVERY and any(c.isascii() for c in text):
            assert len(marks.marks) > 1  # long texts with split points are marked inside


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_newline_before_a_text_is_one_token(encoding: str) -> None:
    """The rule Stage 3 relies on to add a stored count after ``## name``."""
    counter = TokenCounter(encoding)
    for text in texts():
        for start in range(0, len(text), 97):
            piece = text[start : start + 400]
            if piece and not piece[0].isspace():
                assert counter.count("\n" + piece) == 1 + counter.count(piece), piece[:40]


def test_a_long_note_is_counted_to_a_bound() -> None:
    counter = TokenCounter()
    text = sample_text(random.Random(1), MAX_COUNTED_CHARS * 2)
    marks = count_marks(counter, text)
    assert not marks.whole
    assert marks.total is None
    assert marks.marks[-1][0] <= MAX_COUNTED_CHARS
    assert marks.at_least == counter.count(text[: marks.marks[-1][0]]) <= counter.count(text)
    assert marks.whole_count(text) is None
    # Only the beginning of a note read (complete=False) is never taken for the whole note.
    assert not count_marks(counter, text[:500], complete=False).whole


def test_marks_of_a_changed_text_are_not_used() -> None:
    counter = TokenCounter()
    text = sample_text(random.Random(2), 6000)
    marks = count_marks(counter, text)
    edited = text.replace("note", "NOTE", 1)
    assert marks.whole_count(edited) is None
    chars, tokens, _end, _end_tokens = marks.prefix(edited, 10_000)
    if text.index("note") < marks.marks[0][0]:
        assert (chars, tokens) == (0, 0)  # the CRC of the first mark no longer matches
    assert usable_marks(marks, TokenCounter("o200k_base")) is None
    assert usable_marks(marks.model_copy(update={"v": 99}), counter) is None
    assert usable_marks(marks, counter) is marks


def make_store(tmp_path: Path, encoding: str = "cl100k_base") -> MemoryStore:
    cfg = MemoryConfig(runtime_data_dir=tmp_path, fsync=False, auto_watch=False, token_encoding=encoding)
    return MemoryStore(FileKnowledgeBackend(DirectoryGuard(tmp_path), cfg), cfg)


def fill(store: MemoryStore, rng: random.Random) -> list[str]:
    names = []
    for i, text in enumerate(texts()):
        name = f"alice_note{i:02d}.md"
        store.write_file(f"knowledge/{name}", f"# topic shared{i}\n\nshared words here\n\n{text}")
        names.append(name)
    for i in range(6):
        name = f"alice_extra{i}.md"
        store.write_file(f"knowledge/{name}", sample_text(rng, rng.choice([300, 2500, 9000])) + " shared")
        names.append(name)
    return names


def entries_of(store: MemoryStore) -> list[IndexEntry]:
    found = [store.find_entry(path.name, "knowledge") for path in store.list_user_files("alice", "knowledge")]
    return [entry for entry in found if entry is not None]


def _without_marks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(retriever_module, "usable_marks", lambda marks, counter: None)
    monkeypatch.setattr(retriever_module, "least_tokens", lambda marks, counter: None)


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_stage3_from_stored_counts_equals_encoding_everything(
    tmp_path: Path, encoding: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make_store(tmp_path, encoding)
    fill(store, random.Random(3))
    counter = TokenCounter(encoding)
    assert all(usable_marks(e.tokens, counter) is not None for e in entries_of(store))
    retriever = MemoryRetriever(store, token_counter=counter)
    cases = [
        (q, budget, k)
        for q in ("shared words", "topic", "note python")
        for budget in (0, 40, 90, 300, 700, 2000, 5000)
        for k in (3, 8, 20)
    ]
    stored = [retriever.retrieve_result(q, "alice", max_tokens=b, k=k) for q, b, k in cases]
    with monkeypatch.context() as patch:
        _without_marks(patch)
        encoded = [retriever.retrieve_result(q, "alice", max_tokens=b, k=k) for q, b, k in cases]
    cut = 0
    for (q, budget, k), a, b in zip(cases, stored, encoded, strict=True):
        assert a.used_tokens == counter.count(a.text) <= budget, (q, budget, k)
        assert [(f.filename, f.tokens, f.truncated) for f in a.files] == [
            (f.filename, f.tokens, f.truncated) for f in b.files
        ], (q, budget, k)
        assert a.text == b.text
        assert a.used_tokens == b.used_tokens
        assert set(a.skipped) == set(b.skipped)
        cut += sum(f.truncated for f in a.files)
    assert cut > 10  # the cuts were exercised, not only whole notes


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_cut_from_marks_is_the_cut_from_encoding_and_ends_between_words(encoding: str) -> None:
    """Every text of :func:`texts` under many budgets: the marked and the encoded cut are the
    same text with the same exact count, and where the text has ASCII words the cut ends
    after a letter or digit that a space or punctuation followed in the note."""
    counter = TokenCounter(encoding)
    candidate = Candidate("alice_x.md", "knowledge", "x", "", (), 1.0)
    on_a_word = 0
    for text in texts():
        marks = count_marks(counter, text)
        for budget in (70, 101, 333, 1000, 2500, 6000):
            marked, encoded = _Packer(counter, budget), _Packer(counter, budget)
            marked.offer(candidate, 1, text, True, marks=marks)
            encoded.offer(candidate, 1, text, True)
            assert (marked.text, marked.used) == (encoded.text, encoded.used), (text[:40], budget)
            assert marked.used == counter.count(marked.text) <= budget
            if marked.files and marked.files[0].truncated:
                kept = marked.files[0].content.removesuffix(retriever_module.TRUNCATION_MARKER)
                assert text.startswith(kept)
                if kept and kept[-1].isascii() and kept[-1].isalnum():
                    assert text[len(kept)] in retriever_module.SAFE_AFTER
                    on_a_word += 1
    assert on_a_word > 20


def test_a_cut_from_marks_encodes_little_more_than_it_keeps(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stage 3 encodes the stretch after the last mark only as far as the cut needs it (the
    encoding was most of a retrieval's time), not to the next mark or the end of the head."""
    counter = TokenCounter()
    text = sample_text(random.Random(8), 30_000)
    marks = count_marks(counter, text)
    encoded: list[int] = []
    original = TokenCounter.encode

    def spy(self: TokenCounter, piece: str) -> list[int]:
        encoded.append(len(piece))
        return original(self, piece)

    monkeypatch.setattr(TokenCounter, "encode", spy)
    candidate = Candidate("alice_x.md", "knowledge", "x", "", (), 1.0)
    for budget in range(150, 6000, 137):
        encoded.clear()
        retriever_module._cached_encode.cache_clear()  # what a cut encodes, not what an earlier one did
        packer = _Packer(counter, budget)
        packer.offer(candidate, 1, text, True, marks=marks)
        kept = len(packer.files[0].content.removesuffix(retriever_module.TRUNCATION_MARKER))
        last_mark = max((m[0] for m in marks.marks if m[0] <= kept), default=0)
        assert encoded or kept == last_mark, budget
        assert sum(encoded) <= (kept - last_mark) * 1.3 + 200, (budget, encoded, kept - last_mark)


def test_a_note_changed_behind_the_index_is_counted_not_trusted(tmp_path: Path) -> None:
    counter = TokenCounter()
    rng = random.Random(4)
    indexed = sample_text(rng, 5000)
    now = indexed.replace("the", "中文字符中文字符")  # many more tokens than the marks say
    candidate = Candidate("alice_x.md", "knowledge", "x", "", (), 1.0)
    for budget in (200, 1500, 20_000):
        packer = _Packer(counter, budget)
        packer.offer(candidate, 1, now, True, marks=count_marks(counter, indexed))
        assert packer.used == counter.count(packer.text) <= budget


def test_a_note_too_long_for_what_is_left_is_skipped_unread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = make_store(tmp_path)
    rng = random.Random(5)
    store.write_file("knowledge/alice_a.md", "# Alpha kiwi\n\n" + sample_text(rng, 4000) + " kiwi kiwi kiwi")
    store.write_file("knowledge/alice_b.md", "# Beta kiwi\n\n" + sample_text(rng, 4000) + " kiwi")
    reads: list[str] = []
    original = store.read_note_head

    def spy(category: str, filename: str, max_bytes: int) -> tuple[str, bool]:
        reads.append(filename)
        return original(category, filename, max_bytes)

    monkeypatch.setattr(store, "read_note_head", spy)
    result = MemoryRetriever(store).retrieve_result("kiwi", "alice", max_tokens=300)
    assert [f.filename for f in result.files] == ["alice_a.md"]
    assert result.files[0].truncated
    assert result.skipped == ("alice_b.md",)
    assert reads == ["alice_a.md"]


def test_counts_are_kept_in_the_index_and_old_indexes_still_answer(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    fill(store, random.Random(6))
    store._owner("alice").index.compact()  # every entry in the snapshot, none in the journal
    query = ("shared words", "alice")
    before = MemoryRetriever(store).retrieve_result(*query, max_tokens=700)
    # A new process reads the counts back from the index file.
    close_shared_stores()
    again = make_store(tmp_path)
    entries = entries_of(again)
    assert entries
    assert all(isinstance(e.tokens, str) and unpack_marks(e.tokens) is not None for e in entries)
    assert MemoryRetriever(again).retrieve_result(*query, max_tokens=700).text == before.text
    close_shared_stores()
    # An index written before the counts existed (no "tk" in its entries) is read as it is.
    index_path = tmp_path / "memory_data" / ".index" / "alice_index.json"
    data = json.loads(index_path.read_text(encoding="utf-8"))
    for entry in data["files"]:
        entry.pop("tk", None)
    index_path.write_text(json.dumps(data), encoding="utf-8")
    for stale in index_path.parent.glob("alice_index.journal*"):
        stale.unlink()
    old = make_store(tmp_path)
    assert entries_of(old)
    assert all(e.tokens is None for e in entries_of(old))
    assert MemoryRetriever(old).retrieve_result(*query, max_tokens=700).text == before.text


# -- packed marks --------------------------------------------------------------------------------


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_packed_marks_unpack_to_the_very_marks(encoding: str) -> None:
    counter = TokenCounter(encoding)
    long_text = sample_text(random.Random(8), MAX_COUNTED_CHARS * 2)
    for text, complete in [*((t, True) for t in texts()), (long_text, True), (long_text[:3000], False)]:
        marks = count_marks(counter, text, complete)
        packed = pack_marks(marks)
        assert unpack_marks(packed) == marks
        used = usable_marks(packed, counter)
        assert used == marks
        assert used is not None
        assert used.whole_count(text) == (counter.count(text) if marks.whole else None)
        assert least_tokens(packed, counter) == least_tokens(marks, counter) == (marks.at_least, marks.whole)


def _repacked(packed: str, change: Callable[[list[str]], None]) -> str:
    """``packed`` with its parts changed and a CRC that matches again (damage the CRC cannot see)."""
    import zlib

    parts = packed.rsplit(":", 1)[0].split(":")
    change(parts)
    head = ":".join(parts)
    return f"{head}:{zlib.crc32(head.encode()):08x}"


def _swap_first_marks(parts: list[str]) -> None:
    triples = base64.b64decode(parts[3])
    parts[3] = base64.b64encode(triples[12:24] + triples[:12] + triples[24:]).decode()


def test_damaged_packed_marks_are_not_trusted() -> None:
    counter = TokenCounter()
    text = sample_text(random.Random(9), 6000)
    packed = pack_marks(count_marks(counter, text))
    head, _, crc = packed.rpartition(":")
    payload_at = head.rindex(":") + 5
    flipped = "A" if packed[payload_at] != "A" else "B"
    damaged = {
        "a flipped payload character": packed[:payload_at] + flipped + packed[payload_at + 1 :],
        "a wrong checksum": f"{head}:{(int(crc, 16) ^ 1):08x}",
        "cut short": packed[:-12],
        "no checksum": head,
        "empty": "",
        "not base64 (checksum matching)": _repacked(packed, lambda p: p.__setitem__(3, "@@@@")),
        "a torn triple (checksum matching)": _repacked(packed, lambda p: p.__setitem__(3, p[3][:-8])),
        "marks out of order (checksum matching)": _repacked(packed, _swap_first_marks),
        "neither whole nor partial (checksum matching)": _repacked(packed, lambda p: p.__setitem__(1, "x")),
    }
    for why, bad in damaged.items():
        assert unpack_marks(bad) is None, why
        assert usable_marks(bad, counter) is None, why
        if "out of order" not in why:  # the last mark alone is read to skip a note: see least_tokens
            assert least_tokens(bad, counter) is None, why
    # Another rule or another encoding: well formed, but not for this counter.
    assert unpack_marks(_repacked(packed, lambda p: p.__setitem__(0, "99"))) is not None
    assert usable_marks(_repacked(packed, lambda p: p.__setitem__(0, "99")), counter) is None
    assert usable_marks(packed, TokenCounter("o200k_base")) is None
    assert least_tokens(packed, TokenCounter("o200k_base")) is None
    assert usable_marks(packed, counter) == count_marks(counter, text)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="1:wpcl00k_bases+/=AQB9af", max_size=60))
def test_reading_the_last_mark_of_any_string_never_fails(packed: str) -> None:
    counter = TokenCounter()
    found = least_tokens(packed, counter)
    unpacked = unpack_marks(packed)
    if unpacked is not None and usable_marks(packed, counter) is not None:
        assert found == (unpacked.at_least, unpacked.whole)


def test_damaged_packed_marks_in_a_stored_index_are_counted_again(tmp_path: Path) -> None:
    """Every entry's packed marks damaged on disk (the JSON itself is fine): the index loads,
    and Stage 3 encodes the notes instead of trusting them: the very same answers."""
    store = make_store(tmp_path)
    fill(store, random.Random(10))
    store.flush()
    cases = [("shared words", b) for b in (40, 300, 700, 5000)]
    before = [MemoryRetriever(store).retrieve_result(q, "alice", max_tokens=b) for q, b in cases]
    ranked = _ranked(store)
    close_shared_stores()
    index_path = tmp_path / "memory_data" / ".index" / "alice_index.json"
    data = json.loads(index_path.read_text(encoding="utf-8"))
    for entry in data["files"]:
        # Marks of another text under a matching checksum: only the shape checks and the CRCs
        # of the text read at use can catch these.
        entry["tk"] = _repacked(entry["tk"], _scramble)
    index_path.write_text(json.dumps(data), encoding="utf-8")
    again = make_store(tmp_path)
    assert _ranked(again) == ranked
    after = [MemoryRetriever(again).retrieve_result(q, "alice", max_tokens=b) for q, b in cases]
    for a, b in zip(before, after, strict=True):
        assert a.text == b.text
        assert a.used_tokens == b.used_tokens == TokenCounter().count(a.text)
        assert [(f.filename, f.tokens, f.truncated) for f in a.files] == [
            (f.filename, f.tokens, f.truncated) for f in b.files
        ]


def _unpacked(entry: dict[str, object]) -> None:
    """``entry`` (JSON) with its marks as 0.3 wrote them: a ``tokens`` object."""
    packed = entry.pop("tk")
    assert isinstance(packed, str)
    marks = unpack_marks(packed)
    assert marks is not None
    entry["tokens"] = marks.model_dump(mode="json")


def _ranked(store: MemoryStore) -> list[tuple[str, float]]:
    return [(c.filename, c.score) for c in store.search("shared words", 50, user_id="alice")]


def _scramble(parts: list[str]) -> None:
    """Marks that claim a third of the tokens at the same places, with wrong CRCs."""
    import struct

    triples = list(struct.iter_unpack("<III", base64.b64decode(parts[3])))
    scrambled = b"".join(struct.pack("<III", c, t // 3, crc ^ 0x5A5A) for c, t, crc in triples)
    parts[3] = base64.b64encode(scrambled).decode()


def test_an_index_with_unpacked_marks_opens_and_its_first_write_packs_them(tmp_path: Path) -> None:
    """An index written before the marks were packed (0.3: ``tokens`` objects) is read as it
    is, answers the same, and the first write rewrites it packed (a snapshot, not a journal line)."""
    store = make_store(tmp_path)
    fill(store, random.Random(11))
    store._owner("alice").index.compact()  # the notes in the snapshot, one more in the journal
    store.write_file("knowledge/alice_journaled.md", "# journaled\n\nshared words, a journal line")
    # Past the notes' timestamp tick, settled: no entry keeps a content hash, which the next
    # store's first query would otherwise settle (a real change it may store at once on a
    # loaded machine, where the tick is measured longer than settle() waits).
    time.sleep(store.backend.racy_window_ns / 1e9 + 0.01)
    store.settle()
    store.flush()
    assert not store._owner("alice").index.racy
    query = ("shared words", "alice")
    before = MemoryRetriever(store).retrieve_result(*query, max_tokens=700)
    ranked = _ranked(store)
    close_shared_stores()
    data_dir = tmp_path / "memory_data"
    index_path = data_dir / ".index" / "alice_index.json"
    data = json.loads(index_path.read_text(encoding="utf-8"))
    for entry in data["files"]:
        _unpacked(entry)
    index_path.write_text(json.dumps(data), encoding="utf-8")
    journal_path = data_dir / ".index" / "alice_index.journal"
    header, *lines = journal_path.read_text(encoding="utf-8").split("\n")
    assert lines  # the journal's entries are in the old form too
    changed = [json.loads(line) for line in lines]
    for line in changed:
        _unpacked(line["e"])
    journal_path.write_text("\n".join([header, *map(json.dumps, changed)]), encoding="utf-8")
    old = make_store(tmp_path)
    assert all(isinstance(e.tokens, TokenMarks) for e in entries_of(old))
    assert MemoryRetriever(old).retrieve_result(*query, max_tokens=700).text == before.text
    assert _ranked(old) == ranked
    assert "tokens" in json.loads(index_path.read_bytes())["files"][0]  # a query does not rewrite it
    old.write_file("knowledge/alice_later.md", "# later\n\nshared words, written after")
    old.flush()
    ranked = _ranked(old)
    before = MemoryRetriever(old).retrieve_result(*query, max_tokens=700)
    assert "alice_later.md" in before.text
    migrated = json.loads(index_path.read_bytes())
    assert all("tokens" not in e and isinstance(e["tk"], str) for e in migrated["files"])
    assert len(migrated["files"]) == len(entries_of(store)) + 1
    close_shared_stores()
    new = make_store(tmp_path)
    assert all(isinstance(e.tokens, str) for e in entries_of(new))
    assert MemoryRetriever(new).retrieve_result(*query, max_tokens=700).text == before.text
    assert _ranked(new) == ranked
