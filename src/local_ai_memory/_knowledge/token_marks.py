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

**Packed form.** Validating every mark of every entry was the largest cost of loading an index
(about 130 ms of a fresh process's first query at 10k notes), though the marks of only a few
notes are ever used by a query. So an index entry stores its marks as one string
(:data:`PackedMarks`, see :func:`pack_marks`)::

    "1:w:cl100k_base:BAQAAPUAAAD3hiVo...:5c1e0a77"

``v``, ``w`` (whole) or ``p`` (not whole), the encoding, the marks as little-endian unsigned
32-bit ``chars, tokens, crc`` triples in base64, and the CRC-32 of everything before it. Loading
an index keeps the string as it is; :func:`usable_marks` unpacks it when a query needs the
note's counts and checks it then (its CRC, its shape, marks in order): a string that fails is
not trusted, and the note is encoded as if it had no marks.
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
import string
import struct
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
    "SPLIT_AT",
    "PackedMarks",
    "TokenMarks",
    "count_marks",
    "least_tokens",
    "pack_marks",
    "unpack_marks",
    "usable_marks",
]

MARKS_VERSION = 1
MARK_EVERY = 512
"""Characters between two marks (about 125 tokens of English): at most what a cut encodes. At 1024
a cut cost twice as much; 512 adds about a tenth to an index of man pages (marks of indexes
written before stay as they are and are read alike)."""
MAX_COUNTED_CHARS = 32_768
"""Characters of a note counted at index time (about 8,000 tokens: budgets beyond that count at
query time); bounds the indexing cost of long notes."""

ASCII_ALNUM = frozenset(string.ascii_letters + string.digits)
SAFE_AFTER = frozenset(chr(c) for c in range(128)) - ASCII_ALNUM - {"'"}
_SAFE_CLASS = "".join(re.escape(c) for c in sorted(SAFE_AFTER))
SPLIT_AT = re.compile(f"[A-Za-z0-9](?=[{_SAFE_CLASS}])")
"""A split point's last character (the point is its ``end()``): see :func:`.retriever.split_point`."""


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

    def prefix(self, text: str, limit: int) -> tuple[int, int, int, int | None]:
        """``(chars, tokens, end, end_tokens)``: the longest marked prefix of ``text`` with at
        most ``limit`` tokens whose CRC matches the text (``(0, 0, ...)`` when none), and the
        next mark's characters and tokens (``len(text)`` and ``None`` when there is none): a
        cut there lies in ``text[chars:end]``, whose ``end_tokens - tokens`` tokens say how
        many characters a token takes in it."""
        best = (0, 0, 0)
        end, end_tokens = len(text), None
        for mark in self.marks:
            if mark[0] > len(text):
                break
            if mark[1] > limit:
                end, end_tokens = mark[0], mark[1]
                break
            best = mark
        chars, tokens, crc = best
        if chars and zlib.crc32(text[:chars].encode("utf-8")) != crc:
            return 0, 0, len(text), None
        return chars, tokens, end, end_tokens

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
        found = SPLIT_AT.search(counted, start + MARK_EVERY) if start + MARK_EVERY < len(counted) else None
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


PackedMarks = str
"""A :class:`TokenMarks` packed into one string (see the module docstring and :func:`pack_marks`)."""

_TRIPLE = struct.Struct("<III")


def pack_marks(marks: TokenMarks) -> PackedMarks:
    """``marks`` as one string: ``v:w|p:encoding:base64 of the triples:crc`` (little-endian
    unsigned 32-bit ``chars, tokens, crc``; the CRC-32 covers everything before it)."""
    payload = b"".join(_TRIPLE.pack(*mark) for mark in marks.marks)
    head = f"{marks.v}:{'w' if marks.whole else 'p'}:{marks.encoding}:{base64.b64encode(payload).decode('ascii')}"
    return f"{head}:{zlib.crc32(head.encode('utf-8', 'surrogatepass')):08x}"


def _packed_head(packed: str) -> tuple[int, str] | None:
    """``(v, encoding)`` of a packed string, read without unpacking its marks."""
    version, _, rest = packed.partition(":")
    encoding = rest[2:].rpartition(":")[0].rpartition(":")[0]
    if not version.isdigit() or len(version) > 9:
        return None
    return int(version), encoding


def _checked_parts(packed: PackedMarks) -> tuple[str, str, str, str] | None:
    """``(v, w|p, encoding, base64 data)`` of a packed string whose CRC and shape check out."""
    head, sep, crc = packed.rpartition(":")
    if not sep or len(crc) != 8:
        return None
    try:
        if int(crc, 16) != zlib.crc32(head.encode("utf-8", "surrogatepass")):
            return None
        version, whole, rest = head.split(":", 2)
    except (ValueError, UnicodeError):
        return None
    encoding, _, data = rest.rpartition(":")
    if whole not in ("w", "p") or not version.isdigit():
        return None
    return version, whole, encoding, data


@functools.lru_cache(maxsize=4096)
def unpack_marks(packed: PackedMarks) -> TokenMarks | None:
    """The :class:`TokenMarks` of a string :func:`pack_marks` wrote; ``None`` when it does not
    check out (its CRC, its parts, or marks that are not in order): it is not trusted.

    Remembered per string (the model is frozen), so a note that comes back query after query
    is checked and decoded once (5.8 us each time before, 0.2 us remembered, on the marks of
    2,000 man pages)."""
    parts = _checked_parts(packed)
    if parts is None:
        return None
    version, whole, encoding, data = parts
    try:
        payload = base64.b64decode(data, validate=True)
    except (ValueError, binascii.Error):
        return None
    if len(payload) % _TRIPLE.size:
        return None
    marks = tuple(_TRIPLE.iter_unpack(payload))
    last_chars = last_tokens = -1
    for chars, tokens, _crc in marks:
        if chars <= last_chars or tokens < last_tokens or chars > MAX_COUNTED_CHARS:
            return None
        last_chars, last_tokens = chars, tokens
    return TokenMarks.model_construct(v=int(version), encoding=encoding, whole=whole == "w", marks=marks)


def least_tokens(marks: TokenMarks | PackedMarks | None, counter: TokenCounter) -> tuple[int, bool] | None:
    """``(at_least, whole)`` of :func:`usable_marks`' answer, read from a packed string's last
    mark alone after its CRC checks: what Stage 3 needs to skip a note it has no room for
    (most candidates of a query), without unpacking every mark."""
    if not isinstance(marks, str):
        usable = usable_marks(marks, counter)
        return None if usable is None else (usable.at_least, usable.whole)
    if type(counter) is not TokenCounter or _packed_head(marks) != (MARKS_VERSION, counter.encoding_name):
        return None
    parts = _checked_parts(marks)
    if parts is None or len(parts[3]) % 16:
        return None
    _version, whole, _encoding, data = parts
    if not data:
        return 0, whole == "w"
    try:  # a triple is 12 bytes, 16 base64 characters: the last 16 are the last mark
        _chars, tokens, _crc = _TRIPLE.unpack(base64.b64decode(data[-16:], validate=True))
    except (ValueError, binascii.Error):
        return None
    return tokens, whole == "w"


def usable_marks(marks: TokenMarks | PackedMarks | None, counter: TokenCounter) -> TokenMarks | None:
    """``marks`` when they were counted by this rule and with ``counter``'s encoding (packed
    marks are unpacked and checked here, at use: see :func:`unpack_marks`)."""
    if marks is None or type(counter) is not TokenCounter:
        return None
    if isinstance(marks, str):
        head = _packed_head(marks)
        if head is None or head != (MARKS_VERSION, counter.encoding_name):
            return None
        unpacked = unpack_marks(marks)
        if unpacked is None:
            return None
        marks = unpacked
    if marks.v != MARKS_VERSION:
        return None
    return marks if marks.encoding == counter.encoding_name else None


def segment_counts(marks: Sequence[tuple[int, int, int]]) -> list[int]:
    """Tokens of each marked segment (for tests and inspection)."""
    return [tokens - (marks[i - 1][1] if i else 0) for i, (_c, tokens, _crc) in enumerate(marks)]
