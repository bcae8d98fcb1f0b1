"""Token counts of a note taken at index time, so Stage 3 fills its budget without encoding notes.

Stage 3 must know how many tokens a loaded note has (does it fit?) and, for the note it cuts,
where the budget ends. Encoding every loaded note at query time was most of a retrieval's
time; indexing reads each note anyway, so it counts the tokens once and keeps them in the
note's index entry as :class:`TokenMarks`::

    "tokens": {"v": 1, "encoding": "cl100k_base", "whole": true,
               "marks": [[2051, 498, 3735928559], [4102, 1013, 305419896], [5230, 1290, 2596069104]]}

Each mark is ``[chars, tokens, crc]``: the text's first ``chars`` characters have ``tokens``
tokens, and ``crc`` is the CRC-32 of their UTF-8 bytes. Marks are taken about every
:data:`MARK_EVERY` characters, each at a **split point** (an ASCII letter or digit followed by
an ASCII character that is neither a letter, a digit nor an apostrophe): tiktoken encodes the
pieces its regular expression finds one by one, and no piece of the two shipped encodings runs
across such a point, so the count of a prefix ending there is the sum of its segments' counts
(see :func:`.retriever.split_point`). The last mark is the end of the text when ``whole`` is
true; a note longer than :data:`MAX_COUNTED_CHARS` characters is counted that far only
(``whole`` false: its last mark is then a lower bound of the note's tokens, enough to know it
does not fit a budget below it).

At query time nothing is trusted blindly: a mark is used only after the CRC of the text just
read up to it matches (a note edited since indexing falls back to encoding), and only for the
very encoding the retriever counts with. ``v`` names this rule; entries with another ``v``
(or none: indexes written by 0.3 and earlier) are read as they are and their notes encoded as before.
"""

from __future__ import annotations

import re
import string
import zlib
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from local_ai_memory._shared.tokens import TokenCounter

__all__ = [
    "ASCII_ALNUM",
    "MARKS_VERSION",
    "MARK_EVERY",
    "MAX_COUNTED_CHARS",
    "SAFE_AFTER",
    "TokenMarks",
    "count_marks",
    "usable_marks",
]

MARKS_VERSION = 1
MARK_EVERY = 1024
"""Characters between two marks (about 250 tokens of English): what a cut encodes."""
MAX_COUNTED_CHARS = 32_768
"""Characters of a note counted at index time (about 8,000 tokens: budgets beyond that count at
query time); bounds the indexing cost of long notes."""

ASCII_ALNUM = frozenset(string.ascii_letters + string.digits)
SAFE_AFTER = frozenset(chr(c) for c in range(128)) - ASCII_ALNUM - {"'"}
_SAFE_CLASS = "".join(re.escape(c) for c in sorted(SAFE_AFTER))
_SPLIT = re.compile(f"[A-Za-z0-9](?=[{_SAFE_CLASS}])")


class TokenMarks(BaseModel):
    """Token counts of a note's text at split points (see the module docstring)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    v: int = MARKS_VERSION
    encoding: str
    whole: bool = Field(description="The last mark is the end of the note's text.")
    marks: tuple[tuple[int, int, int], ...] = ()

    @property
    def total(self) -> int | None:
        """The note's tokens when it was counted whole."""
        return self.marks[-1][1] if self.whole and self.marks else None

    @property
    def at_least(self) -> int:
        """Tokens the note has at least (its last mark's)."""
        return self.marks[-1][1] if self.marks else 0

    def whole_count(self, text: str) -> int | None:
        """Tokens of ``text`` if it is the very text counted whole, else ``None``."""
        if not self.whole or not self.marks:
            return None
        chars, tokens, crc = self.marks[-1]
        if chars != len(text) or zlib.crc32(text.encode("utf-8")) != crc:
            return None
        return tokens

    def prefix(self, text: str, limit: int) -> tuple[int, int, int]:
        """``(chars, tokens, end)``: the longest marked prefix of ``text`` with at most ``limit``
        tokens whose CRC matches the text (``(0, 0, end)`` when none), and where the next mark
        lies (or ``len(text)``): the stretch a cut there has to encode is ``text[chars:end]``."""
        best = (0, 0, 0)
        end = len(text)
        for mark in self.marks:
            if mark[0] > len(text):
                break
            if mark[1] > limit:
                end = mark[0]
                break
            best = mark
        chars, tokens, crc = best
        if chars and zlib.crc32(text[:chars].encode("utf-8")) != crc:
            return 0, 0, len(text)
        return chars, tokens, end

    def chars_for(self, tokens: int) -> int | None:
        """Characters of the note that hold more than ``tokens`` tokens, if a mark says so."""
        for chars, counted, _crc in self.marks:
            if counted > tokens:
                return chars
        return None


def count_marks(counter: TokenCounter, text: str, complete: bool = True) -> TokenMarks:
    """The :class:`TokenMarks` of ``text`` (its first :data:`MAX_COUNTED_CHARS` characters);
    ``complete`` is false when ``text`` is only the beginning of the note."""
    counted = text[:MAX_COUNTED_CHARS]
    whole = complete and len(counted) == len(text)
    marks: list[tuple[int, int, int]] = []
    start = tokens = crc = 0
    while start < len(counted):
        found = _SPLIT.search(counted, start + MARK_EVERY) if start + MARK_EVERY < len(counted) else None
        end = found.end() if found is not None else len(counted)
        if end == len(counted) and not whole:
            # The counted part's end is not a split point of the whole text: stop at the last mark.
            break
        segment = counted[start:end]
        tokens += counter.count(segment)
        crc = zlib.crc32(segment.encode("utf-8"), crc)
        marks.append((end, tokens, crc))
        start = end
    if whole and not marks:  # the empty note
        marks.append((0, 0, 0))
    return TokenMarks(encoding=counter.encoding_name, whole=whole, marks=tuple(marks))


def usable_marks(marks: TokenMarks | None, counter: TokenCounter) -> TokenMarks | None:
    """``marks`` when they were counted by this rule and with ``counter``'s encoding."""
    if marks is None or marks.v != MARKS_VERSION or type(counter) is not TokenCounter:
        return None
    return marks if marks.encoding == counter.encoding_name else None


def segment_counts(marks: Sequence[tuple[int, int, int]]) -> list[int]:
    """Tokens of each marked segment (for tests and inspection)."""
    return [tokens - (marks[i - 1][1] if i else 0) for i, (_c, tokens, _crc) in enumerate(marks)]
