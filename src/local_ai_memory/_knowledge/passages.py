"""Passages: a note cut along its structure into pieces the embedding model reads whole.

all-MiniLM-L6-v2 reads at most 256 word pieces; a note's title and first paragraph (what
hybrid search embedded before) say what the note is called, not what it tells. Dense search
therefore embeds a note as up to :data:`MAX_PASSAGES` passages and scores the note by its
best passage (:mod:`.dense`):

* passage 0 is the lead (:func:`.index_file.lead_text`: file-name words, title, description),
  the vector hybrid search always had, so caches made before stay useful;
* the body follows in order, cut at headings and blank lines, paragraphs packed together up
  to :data:`PASSAGE_WORDS` words; a longer paragraph is cut into windows of that many words.
  Each body passage starts with the note's title and its section heading, so a passage about
  "options" still says whose options.

The bound: at most ``MAX_PASSAGES - 1`` body passages, i.e. the first ~``(MAX_PASSAGES - 1) *
PASSAGE_WORDS`` words of a note (480 with the defaults); the rest of a long note counts for BM25
only. Index-time work per note is therefore at most ``MAX_PASSAGES`` model calls' worth of
text, whatever the note's length. Everything here is pure: no disk, no model.
"""

from __future__ import annotations

import re

__all__ = ["MAX_PASSAGES", "PASSAGE_WORDS", "body_passages", "passages_of"]

PASSAGE_WORDS = 120
"""Words a body passage holds at most (about 160 word pieces: the model reads it whole)."""
MAX_PASSAGES = 5
"""Passages of one note at most: the lead plus four body passages."""

_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$")
_FRONT_MATTER = re.compile(r"\A---\s*\n.*?\n---\s*\n", re.DOTALL)


def _blocks(text: str) -> list[tuple[str, str]]:
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


def body_passages(title: str, text: str, words: int = PASSAGE_WORDS, limit: int = MAX_PASSAGES - 1) -> list[str]:
    """At most ``limit`` passages of ``text``, each of at most ``words`` words plus its prefix
    (``title`` and section heading), paragraphs packed in order."""
    if limit <= 0:
        return []
    out: list[str] = []
    current: list[str] = []
    current_heading = ""

    def emit() -> None:
        if current:
            prefix = title if not current_heading or current_heading == title else f"{title}: {current_heading}"
            out.append(f"{prefix}\n{' '.join(current)}" if prefix else " ".join(current))
            current.clear()

    for heading, paragraph in _blocks(text):
        if len(out) >= limit:
            break
        tokens = paragraph.split()
        if heading != current_heading or len(current) + len(tokens) > words:
            emit()
            current_heading = heading
        while len(tokens) > words and len(out) < limit:
            current.extend(tokens[:words])
            emit()
            tokens = tokens[words:]
        current.extend(tokens)
    emit()
    return out[:limit]


def passages_of(lead: str, title: str, text: str) -> list[str]:
    """A note's passages: its ``lead`` first, then :func:`body_passages` of ``text``."""
    return [lead, *body_passages(title, text)]
