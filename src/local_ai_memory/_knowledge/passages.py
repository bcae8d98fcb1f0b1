"""Passages: a note cut along its structure into pieces the embedding model reads whole.

all-MiniLM-L6-v2 reads at most 256 word pieces; a note's title and first paragraph (what
hybrid search embedded before) say what the note is called, not what it tells. Dense search
therefore embeds a note as up to :data:`MAX_PASSAGES` passages and scores the note from its
passages (:mod:`.dense`):

* passage 0 is the lead (:func:`.index_file.lead_text`: file-name words, title, description),
  the vector hybrid search always had, so caches made before stay useful;
* the body follows in order: paragraphs (split at blank lines and headings) packed together
  up to :data:`PASSAGE_WORDS` words (and :data:`PASSAGE_PIECES` word pieces when the
  embedder counts them), across section boundaries (a section heading becomes
  the first words of its paragraph, ``"Options: ..."``), so short sections (a synopsis, a
  one-line name) share a passage instead of each taking one of the few the bound allows. A
  paragraph longer than a passage is cut into windows of that many words. A paragraph the
  lead already says (a man page's NAME line, a first paragraph used as the description) is
  skipped. Every body passage starts with the note's title, so a passage about "options"
  still says whose options.

The bound: at most ``MAX_PASSAGES - 1`` body passages, i.e. the first ~``(MAX_PASSAGES - 1) *
PASSAGE_WORDS`` words of a note (256 x 200 = 51,200 with the defaults: the whole of all but
the very longest notes); the rest of a longer note counts for BM25 only. Index-time work per
note is therefore at most ``MAX_PASSAGES`` model calls' worth of text, whatever the note's
length. Everything here is pure: no disk, no model.

Measured (``benchmarks/bench_natural_questions.py``, dev questions, 400 man pages): see
:meth:`.dense.DenseMatrix.note_scores` and the CHANGELOG for the figures behind the bound.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

__all__ = [
    "MAX_PASSAGES",
    "PASSAGE_PIECES",
    "PASSAGE_WORDS",
    "PieceCounter",
    "blocks",
    "body_passages",
    "passages_of",
]

PieceCounter = Callable[[Sequence[str]], list[int]]
"""How many word pieces the embedding model makes of each word (an embedder's ``count_pieces``)."""
PASSAGE_PIECES = 320
"""Word pieces a passage holds at most when the model's tokenizer is known. all-MiniLM-L6-v2
reads 256 (two of them its start and end marks), so up to the last fifth of a full passage is
not read; measured (dev questions and both known-item sets, see the CHANGELOG) this beat
cutting at 254: a man page's 200 words are about 290 pieces, and cutting them at 254 spread
the first 3,200 words over more, shorter passages and lost natural questions, while README
passages (prose with code and URLs, about 460 pieces per 200 words) were half unread at 200
words and are now read to four fifths."""

PASSAGE_WORDS = 200
"""Words a body passage holds at most (the model reads about its first 256 word pieces)."""
MAX_PASSAGES = 257
"""Passages of one note at most: the lead plus 256 body passages.

The bound was sixteen body passages (the first ~3,200 words). A natural question is often
answered deep in a long note (``bash``'s redirections and aliases, ``find``'s time tests), and
a note cut off at its first sixteen passages could not be found by what it says later.
Measured (``benchmarks/bench_natural_questions.py`` dev questions, 400 man pages; known-item
sets of ``bench_quality.py``; R@5 / MRR@10) with the passages of the whole note against the
first sixteen: dense side alone on questions .899 / .788 against .856 / .748, hybrid .845 /
.750 against .828 / .732; ``stdlib`` .917 / .814 and ``readmes`` .900 / .820 hybrid, the same
as before. Costs index time in proportion: passages per note on that question corpus 6.6 ->
11.4, on the READMEs 8.5 -> 13.9; 48 of the 400 man pages and 36 of the 185 READMEs had more
than sixteen. 256 keeps every note of those corpora whole but ``bash`` (324 passages, its last
fifth left to BM25; the figures are the same as with no bound), while a runaway note (a log
pasted into a note) still costs a bounded number of model calls.

Checked again for issue 45, whether a lower default would be affordable at no loss
(``benchmarks/bench_passage_cap.py``: 400 man pages holding every page of the five
natural-question sets, and the known-item sets; R@5 with passages per note stored): every
lower cap loses natural questions on the held-out sets. ``held_out`` / ``fresh`` / ``fresh2`` /
``fresh3`` at 257 (12.1 a note) .877 / .741 / .812 / .746; at 128 (11.5) .877 / .724 / .779 /
.727; at 32 (8.4) .851 / .714 / .774 / .732; at 16 (6.8) .851 / .713 / .762 / .719; at 4 (3.5)
.798 / .718 / .734 / .685; at 1 (the lead alone) .816 / .685 / .711 / .670. Known items
hardly move down to 16 (``stdlib`` .949 throughout, ``readmes`` .902 / .895). A few long pages
answer many questions from their last passages, so the bound stays; the cost of indexing was
cut elsewhere (one model path, threads, length-sorted batches: see ``benchmarks/
bench_hybrid_index.py``). ``memory.hybrid_passages`` sets it per memory."""

_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$")
_FRONT_MATTER = re.compile(r"\A---\s*\n.*?\n---\s*\n", re.DOTALL)


def blocks(text: str) -> list[tuple[str, str]]:
    """``(heading, paragraph)`` pairs in order: paragraphs split at blank lines and headings."""
    text = _FRONT_MATTER.sub("", text, count=1)
    out: list[tuple[str, str]] = []
    heading = ""
    lines: list[str] = []

    def close() -> None:
        paragraph = " ".join(" ".join(lines).split())
        if paragraph:
            out.append((heading, paragraph))
        lines.clear()

    for line in text.splitlines():
        match = _HEADING.match(line)
        if match:
            close()
            heading = match.group(1).strip()
        elif not line.strip():
            close()
        else:
            lines.append(line)
    close()
    return out


def body_passages(
    title: str,
    text: str,
    words: int = PASSAGE_WORDS,
    limit: int = MAX_PASSAGES - 1,
    lead: str = "",
    pieces: PieceCounter | None = None,
    budget: int = PASSAGE_PIECES,
) -> list[str]:
    """At most ``limit`` passages of ``text``, each ``title`` then at most ``words`` words,
    paragraphs packed in order across sections; paragraphs contained in ``lead`` are skipped.

    With ``pieces`` (the model's own count of word pieces per word, :data:`PieceCounter`), a
    passage also closes before its word pieces, title included, would pass ``budget``: what
    the model truncates is then never cut into a passage, it opens the next one."""
    if limit <= 0 or words <= 0:
        return []
    out: list[str] = []
    current: list[str] = []
    used = 0
    room = budget - sum(pieces(title.split())) if pieces is not None and title else budget
    last_heading = title

    def emit() -> None:
        nonlocal used
        if current:
            body = " ".join(current)
            out.append(f"{title}\n{body}" if title else body)
            current.clear()
        used = 0

    for heading, paragraph in blocks(text):
        if len(out) >= limit:
            break
        if lead and paragraph in lead:
            continue
        tokens = paragraph.split()
        if heading and heading != last_heading:
            tokens.insert(0, f"{heading}:")
            last_heading = heading
        counts = pieces(tokens) if pieces is not None else [0] * len(tokens)
        if current and (len(current) + len(tokens) > words or used + sum(counts) > room):
            emit()
        for token, count in zip(tokens, counts, strict=True):
            if current and (len(current) >= words or used + count > room):
                emit()
                if len(out) >= limit:
                    break
            current.append(token)
            used += count
    if len(out) < limit:
        emit()
    return out[:limit]


def passages_of(
    lead: str, title: str, text: str, pieces: PieceCounter | None = None, max_passages: int = MAX_PASSAGES
) -> list[str]:
    """A note's passages: its ``lead`` first, then :func:`body_passages` of ``text`` (cut by
    the model's word pieces when ``pieces`` is given), ``max_passages`` in all at most. The
    body passages under a lower bound are the first of those under a higher one."""
    return [lead, *body_passages(title, text, limit=max_passages - 1, lead=lead, pieces=pieces)]
