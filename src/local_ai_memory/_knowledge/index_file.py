"""The knowledge index (one per user, ``.index/{user}_index.json``, v4) and metadata extraction from Markdown.

Everything here is pure: parse and serialize the index, pull a title, a description and
heuristic keywords out of a Markdown text, build the Stage 1 terms of an entry, and the prompt
and parser for the optional LLM keyword refinement. :mod:`.store` does the disk work.

Titles and descriptions keep the author's text (underscores, code spans, punctuation):
``# my_snake_case_func and __init__`` is stored and shown as written. Ranking sees them only
through :mod:`local_ai_memory._shared.text`. (Entries written before 0.2 may hold titles without underscores
or Markdown characters; the format is unchanged, so they are kept, with any LLM keywords,
until their note changes or ``populate_index_from_files`` runs.)

Index format (``index_version: 3``)::

    {"index_version": 3, "last_updated": 1764400000.5,
     "files": [{"filename": "alice_python.md", "title": "Python Basics",
                "description": "Introduction to Python programming",
                "keywords": ["python", "programming"], "category": "knowledge",
                "last_modified": 1764400000.1, "size": 812, "mtime_ns": 1764400000100000000}]}

``size`` and ``mtime_ns`` are optional additions: the staleness check compares them (exact,
stat-only) when present and ``last_modified`` otherwise. Two more optional additions, which
readers that do not know them ignore: an entry's ``indexed_bytes`` (only that prefix of a
huge note was indexed) and a top-level ``skipped`` list of notes that could not be indexed
(``category``, ``filename``, ``size``, ``mtime_ns``, ``reason``), so no process re-reads them
until they change. An entry's ``tk`` holds its note's token counts taken at index time, packed
into one string (:func:`~.token_marks.pack_marks`, versioned by its own ``v``; unpacked and
checked only when a query uses them), so Stage 3 need not encode the notes it loads. Indexes
written by 0.3 hold them as a ``tokens`` object (:class:`~.token_marks.TokenMarks`): read as
they are, and the first write after loading such a snapshot writes a packed one (readers of 0.3
ignore ``tk``). Entries without either (older indexes) are read as they are and their notes are
counted at query time until they are indexed again. An index with an older version is
rebuilt from the files; a newer one is refused with :class:`UnsupportedFormatError`.

A snapshot written after 0.3 also holds ``meta``: each entry's :func:`metadata_checksum`, in
the order of ``files`` (readers that do not know it ignore it; a list of another length is
ignored). A new process compares a ranker snapshot's rows with these instead of computing one
per note. A wrong value can only make a row mismatch, and then its note is read again.

A snapshot written since the columns came also ends with ``cols`` (:class:`IndexColumns`, its
own ``v``): per entry, in the order of ``files``, its key, ``mtime_ns``, ``size``, metadata
checksum, whether it holds a content hash and the byte offset of its JSON, with the CRC-32 of
every byte before it. A new process reads only these (:func:`parse_columns`) and decodes an
entry from its own bytes when it is read (:class:`SnapshotRows`); a compaction copies the rows
it never decoded (:class:`StoredEntry`). Columns whose CRC, version or lengths do not fit the
bytes (another tool rewrote the JSON) are ignored: the snapshot is parsed whole, and the next
write rewrites it with columns. Readers that do not know ``cols`` ignore it, so 0.3 reads these
snapshots as before.

Version 4 (0.3) is version 3 plus a ``journal`` id: the snapshot is followed by the journal
blob ``memory_index.journal``, one JSON line per changed note, so a write appends its note's
entry instead of rewriting every entry::

    {"journal": "5f0c...", "index_version": 4}                      header: the snapshot it follows
    {"k": ["knowledge", "alice_tea.md"], "e": {entry}, "s": null}    the note's entry now
    {"k": ["knowledge", "alice_old.md"], "e": null, "s": null}       deleted (no entry)

(each line is written with its line break first, so a torn append never swallows the next).

A line says the whole state of its note (entry and skipped record, ``null`` when none), so
applying lines in order is idempotent. Lines are applied only when the header names the
snapshot's ``journal`` id (a compaction writes the snapshot, then a fresh journal); a line
that does not parse (a torn last append) is skipped: the listing comparison that follows every
load finds what it missed. A version 3 index (0.2) is read as it is; the first write rewrites
it as version 4.
"""

from __future__ import annotations

import itertools
import json
import operator
import re
import zlib
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Literal, NamedTuple

import numpy as np
import numpy.typing as npt
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_serializer

from local_ai_memory._knowledge.token_marks import PackedMarks, TokenMarks, pack_marks
from local_ai_memory._shared.errors import UnsupportedFormatError
from local_ai_memory._shared.text import Analyzer, words

__all__ = [
    "COLUMNS_VERSION",
    "INDEX_VERSION",
    "NO_MTIME",
    "READABLE_VERSIONS",
    "IndexColumns",
    "IndexEntry",
    "IndexFile",
    "JournalHeader",
    "JournalLine",
    "ParsedIndex",
    "SkippedNote",
    "SnapshotRows",
    "StoredEntry",
    "column_keys",
    "column_skipped",
    "extract_description",
    "extract_keywords",
    "extract_metadata",
    "extract_title",
    "journal_header",
    "journal_line",
    "keyword_prompt",
    "lead_text",
    "metadata_checksum",
    "metadata_text",
    "parse_columns",
    "parse_index",
    "parse_journal",
    "parse_keywords",
    "ranking_text",
    "ranking_tokens",
    "serialize_index",
    "stored_entries",
    "tokenize",
]

INDEX_VERSION = 4
READABLE_VERSIONS = (3, 4)
"""Versions read as they are: 3 (0.2, no journal) and 4 (snapshot plus journal)."""
MAX_DESCRIPTION = 300
HEURISTIC_KEYWORDS = 10
RankingField = Literal["metadata", "content", "both"]

_H1_RE = re.compile(r"^#\s+(.+?)(?:\s+#+)?\s*$")
_MARKER_RE = re.compile(r"^(?:>\s*)+|^[-*+]\s+")
_DEFAULT_ANALYZER = Analyzer()


class IndexEntry(BaseModel):
    """Metadata of one knowledge file, as stored in the index."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    filename: str
    title: str = ""
    description: str = ""
    keywords: list[str] = Field(default_factory=list)
    category: str
    last_modified: float = 0.0
    size: int | None = None
    mtime_ns: int | None = None
    content_hash: str | None = Field(
        default=None,
        description="SHA-256 of the text, kept only while the file's mtime is too recent to trust (see _store).",
    )
    indexed_bytes: int | None = Field(
        default=None,
        description="Set when only the note's first bytes were indexed (a huge note; see _note_indexing).",
    )
    tokens: TokenMarks | PackedMarks | None = Field(
        default=None,
        validation_alias=AliasChoices("tk", "tokens"),
        serialization_alias="tk",
        description=(
            "The note's token counts taken at index time, for Stage 3: packed (stored as ``tk``, "
            "unpacked and checked at use) or, as read from an older index's ``tokens``, a TokenMarks."
        ),
    )

    @field_serializer("tokens")
    def _packed(self, tokens: TokenMarks | PackedMarks | None) -> PackedMarks | None:
        # Always stored packed: an entry read from an older index migrates when written.
        return pack_marks(tokens) if isinstance(tokens, TokenMarks) else tokens


class SkippedNote(BaseModel):
    """A note that could not be indexed (not UTF-8, binary), remembered by its signature."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    category: str
    filename: str
    size: int
    mtime_ns: int
    reason: str = ""


class IndexFile(BaseModel):
    """The whole ``memory_index.json``."""

    model_config = ConfigDict(extra="ignore")

    index_version: int = INDEX_VERSION
    last_updated: float = 0.0
    journal: str | None = None
    files: list[IndexEntry] = Field(default_factory=list)
    skipped: list[SkippedNote] = Field(default_factory=list)
    meta: list[int] | None = Field(
        default=None,
        description="metadata_checksum of each entry of files, in order (after 0.3; see the module docstring).",
    )


class JournalHeader(BaseModel):
    """The first line of the journal blob: which snapshot its lines follow."""

    model_config = ConfigDict(extra="ignore")

    journal: str
    index_version: int = INDEX_VERSION


class JournalLine(BaseModel):
    """One journal line: the whole state of one note after a change (see the module docstring)."""

    model_config = ConfigDict(extra="ignore")

    k: tuple[str, str]
    e: IndexEntry | None = None
    s: SkippedNote | None = None


COLUMNS_VERSION = 1
"""Version of :class:`IndexColumns` (a reader ignores columns of another version)."""
_COLUMNS_KEY = b',"cols":'
NO_MTIME = -(1 << 63)
"""A row's ``mtime_ns`` in the columns when its entry has none (any other value is a real one)."""
BULK_DECODE = 256
"""Single entries decoded from a snapshot after which the rest are decoded in one pass."""


class IndexColumns(BaseModel):
    """The snapshot's last member, ``cols``: per entry (in the order of ``files``) what a new
    process needs before it reads any entry (the key, the listing signature, the metadata
    checksum, whether it holds a content hash) and where the entry's bytes are, so it decodes
    an entry only when one is asked for. ``crc`` is the CRC-32 of every byte of the snapshot
    before ``,"cols":``: columns of other bytes (an index that another writer rewrote) are not
    used. Readers that do not know it ignore it, as they ignore ``meta``."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    v: int
    index_version: int
    crc: int
    journal: str | None = None
    last_updated: float = 0.0
    cats: list[tuple[str, int]] = Field(description="runs of rows: category, how many rows")
    names: str = Field(description="file names of the rows, joined by '/'")
    mtime: list[int] = Field(description="mtime_ns of each row, NO_MTIME when absent")
    size: list[int] = Field(description="size of each row, -1 when absent")
    meta: list[int] = Field(description="metadata_checksum of each row")
    racy: list[int] = Field(description="rows that hold a content hash")
    at: list[int] = Field(description="byte offset of each row's entry, plus one past the last (+1)")
    skipped: tuple[int, int] | None = Field(default=None, description="byte span of the skipped list")


class StoredEntry(NamedTuple):
    """An entry of a loaded snapshot that was never decoded: its stored JSON and columns."""

    category: str
    filename: str
    raw: bytes
    mtime_ns: int
    size: int
    meta: int
    racy: bool


class _VersionOnly(BaseModel):
    model_config = ConfigDict(extra="ignore")
    index_version: int = 0


ParsedIndex = tuple[Literal["ok", "outdated", "corrupt"], "IndexFile | None", str]
_ENTRY_LIST = TypeAdapter(list[IndexEntry])
_SKIPPED_LIST = TypeAdapter(list[SkippedNote])


def parse_index(data: bytes) -> ParsedIndex:
    """Classify and parse index bytes: ``("ok", index, "")``, ``("outdated", None, why)``
    or ``("corrupt", None, why)``. Raises :class:`UnsupportedFormatError` for a newer version.

    A current index is parsed and validated in one pass by pydantic's JSON parser (about twice
    as fast as ``json.loads`` and validating the objects: 0.6 s less at 100k notes); anything
    else takes the slower path that tells outdated, newer and broken indexes apart.
    """
    try:
        index = IndexFile.model_validate_json(data)
    except ValueError:  # ValidationError included: classified below
        pass
    else:
        if index.index_version in READABLE_VERSIONS and "index_version" in index.model_fields_set:
            return "ok", index, ""
    try:
        raw = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        return "corrupt", None, f"not valid JSON: {exc}"
    if not isinstance(raw, dict):
        return "corrupt", None, "top level is not an object"
    try:
        version = _VersionOnly.model_validate(raw).index_version
    except ValidationError:
        return "corrupt", None, "index_version is not an integer"
    if version > INDEX_VERSION:
        raise UnsupportedFormatError(
            f"the knowledge index has index_version {version}; this library reads up to {INDEX_VERSION}:"
            " upgrade local-ai-memory"
        )
    if version not in READABLE_VERSIONS:
        return "outdated", None, f"index_version {version} < {READABLE_VERSIONS[0]}"
    try:
        return "ok", IndexFile.model_validate(raw), ""
    except ValidationError as exc:
        return "corrupt", None, f"invalid entries: {exc.error_count()} error(s)"


def serialize_index(
    entries: Iterable[IndexEntry | StoredEntry],
    last_updated: float,
    skipped: list[SkippedNote] | None = None,
    journal: str | None = None,
    checksum: Callable[[IndexEntry], int] | None = None,
) -> bytes:
    """The bytes of an index holding ``entries`` (sorted by category, then file name) and
    ``skipped``, followed by the journal ``journal`` (when given), with each entry's
    :func:`metadata_checksum` (``checksum``: a function that may know it already) and the
    columns a new process reads instead of the entries (``cols``, last; see
    :class:`IndexColumns`). A :class:`StoredEntry` (an entry of a loaded snapshot, never
    decoded) is copied as it was stored."""
    ordered = sorted(entries, key=lambda e: (e.category, e.filename))
    crc_of = checksum or metadata_checksum
    head: dict[str, object] = {"index_version": INDEX_VERSION, "last_updated": last_updated}
    if journal is not None:
        head["journal"] = journal
    out = bytearray(_dumps(head)[:-1] + b',"files":[')
    at: list[int] = []
    mtime: list[int] = []
    size: list[int] = []
    meta: list[int] = []
    racy: list[int] = []
    cats: list[tuple[str, int]] = []
    for row, e in enumerate(ordered):
        if row:
            out += b","
        at.append(len(out))
        if isinstance(e, StoredEntry):
            out += e.raw
            mtime.append(e.mtime_ns)
            size.append(e.size)
            meta.append(e.meta)
            hashed = e.racy
        else:
            out += e.model_dump_json(exclude_none=True, by_alias=True).encode("utf-8")
            mtime.append(e.mtime_ns if e.mtime_ns is not None else NO_MTIME)
            size.append(e.size if e.size is not None else -1)
            meta.append(crc_of(e))
            hashed = e.content_hash is not None
        if hashed:
            racy.append(row)
        if cats and cats[-1][0] == e.category:
            cats[-1] = (e.category, cats[-1][1] + 1)
        else:
            cats.append((e.category, 1))
    at.append(len(out) + 1)  # entry i is data[at[i] : at[i + 1] - 1]: its bytes without the comma
    out += b"]"
    span: tuple[int, int] | None = None
    if skipped:
        out += b',"skipped":'
        start = len(out)
        out += _dumps([n.model_dump() for n in sorted(skipped, key=lambda n: (n.category, n.filename))])
        span = (start, len(out))
    out += b',"meta":' + _dumps(meta)
    columns = IndexColumns(
        v=COLUMNS_VERSION,
        index_version=INDEX_VERSION,
        crc=zlib.crc32(out),
        journal=journal,
        last_updated=last_updated,
        cats=cats,
        names="/".join(e.filename for e in ordered),
        mtime=mtime,
        size=size,
        meta=meta,
        racy=racy,
        at=at,
        skipped=span,
    )
    out += _COLUMNS_KEY + columns.model_dump_json().encode("utf-8") + b"}"
    return bytes(out)


def _dumps(value: object) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def parse_columns(data: bytes) -> IndexColumns | None:
    """The :class:`IndexColumns` of index bytes when they hold columns that describe exactly
    these bytes (their CRC-32 matches, every span lies inside, every list has one value per
    entry); ``None`` otherwise (an index written before columns, by a reader that rewrote it
    without them, or damaged): then it is parsed whole by :func:`parse_index`."""
    tail = data.rfind(_COLUMNS_KEY)
    if tail < 0 or not data.endswith(b"}"):
        return None
    try:
        columns = IndexColumns.model_validate_json(data[tail + len(_COLUMNS_KEY) : -1])
    except ValueError:
        return None
    n = len(columns.mtime)
    at = columns.at
    if (
        columns.v != COLUMNS_VERSION
        or columns.index_version != INDEX_VERSION
        or len(columns.size) != n
        or len(columns.meta) != n
        or len(at) != n + 1
        or sum(count for _, count in columns.cats) != n
        or any(not 0 <= row < n for row in columns.racy)
        or (n and (at[0] <= 0 or at[-1] > tail or not all(map(operator.lt, at, itertools.islice(at, 1, None)))))
        or (columns.skipped is not None and not 0 < columns.skipped[0] <= columns.skipped[1] <= tail)
        or zlib.crc32(memoryview(data)[:tail]) != columns.crc
    ):
        return None
    return columns


class SnapshotRows:
    """The entries of a snapshot read through its :class:`IndexColumns`: each decoded from its
    own bytes the first time it is asked for (a query reads a handful of the 10k a process
    loads), all of them in one pass once many are (:data:`BULK_DECODE` single ones)."""

    def __init__(self, data: bytes, columns: IndexColumns, keys: list[tuple[str, str]]) -> None:
        self.data = data
        self.keys = keys
        self.at = columns.at
        self.mtime = columns.mtime
        self.size = columns.size
        self.meta = columns.meta
        self.racy = frozenset(columns.racy)
        self._decoded: dict[int, IndexEntry] = {}
        self._single = 0
        self._signatures: npt.NDArray[np.int64] | None = None
        self._racy_mask: npt.NDArray[np.bool_] | None = None

    def __len__(self) -> int:
        return len(self.keys)

    def raw(self, row: int) -> bytes:
        """The stored JSON of row ``row``."""
        return self.data[self.at[row] : self.at[row + 1] - 1]

    @property
    def decoded_count(self) -> int:
        """How many rows are decoded."""
        return len(self._decoded)

    def decoded(self, row: int) -> IndexEntry | None:
        """Row ``row``'s entry if it was decoded already (the very object every reader got)."""
        return self._decoded.get(row)

    def entry(self, row: int) -> IndexEntry:
        """Row ``row``'s entry, decoded on the first ask (then the same object each time)."""
        found = self._decoded.get(row)
        if found is not None:
            return found
        self._single += 1
        if self._single > BULK_DECODE:
            self.decode_all()
            return self._decoded[row]
        entry = IndexEntry.model_validate_json(self.raw(row))
        self._check(row, entry)
        self._decoded[row] = entry
        return entry

    def decode_all(self) -> None:
        """Decode every row not decoded yet, in one parse of the stored list."""
        if len(self._decoded) == len(self.keys):
            return
        at = self.at
        entries = _ENTRY_LIST.validate_json(self.data[at[0] - 1 : at[-1]])
        if len(entries) != len(self.keys):
            raise ValueError("index snapshot: its entries do not match its columns")
        decoded = self._decoded
        for row, entry in enumerate(entries):
            if row not in decoded:
                self._check(row, entry)
                decoded[row] = entry

    def _check(self, row: int, entry: IndexEntry) -> None:
        if (entry.category, entry.filename) != self.keys[row]:
            raise ValueError("index snapshot: an entry does not match its columns")

    def stored(self, row: int) -> StoredEntry:
        """Row ``row`` as :func:`serialize_index` copies it into a new snapshot."""
        category, filename = self.keys[row]
        return StoredEntry(
            category, filename, self.raw(row), self.mtime[row], self.size[row], self.meta[row], row in self.racy
        )

    def signatures(self) -> npt.NDArray[np.int64]:
        """``(mtime_ns, size, metadata checksum)`` of every row as stored (absent: :data:`NO_MTIME`
        and -1), one row each."""
        if self._signatures is None:
            self._signatures = np.array([self.mtime, self.size, self.meta], dtype=np.int64).T.copy()
        return self._signatures

    def racy_mask(self) -> npt.NDArray[np.bool_]:
        """Whether each row holds a content hash, one flag per row."""
        if self._racy_mask is None:
            mask = np.zeros(len(self.keys), dtype=np.bool_)
            mask[sorted(self.racy)] = True
            self._racy_mask = mask
        return self._racy_mask

    def signature(self, row: int) -> tuple[int | None, int | None, bool]:
        """Row ``row``'s ``(mtime_ns, size, has a content hash)`` as stored (``None``: absent)."""
        mtime, size = self.mtime[row], self.size[row]
        return (mtime if mtime != NO_MTIME else None, size if size >= 0 else None, row in self.racy)


def column_skipped(data: bytes, columns: IndexColumns) -> list[SkippedNote]:
    """The skipped notes of index bytes that :func:`parse_columns` accepted."""
    if columns.skipped is None:
        return []
    start, end = columns.skipped
    return _SKIPPED_LIST.validate_json(data[start:end])


def column_keys(columns: IndexColumns) -> list[tuple[str, str]] | None:
    """The ``(category, filename)`` of each row of ``columns``; ``None`` when the names do not
    split into one per row."""
    names = columns.names.split("/") if columns.names else []
    if len(names) != len(columns.mtime):
        return None
    keys: list[tuple[str, str]] = []
    start = 0
    for category, count in columns.cats:
        keys.extend(zip([category] * count, names[start : start + count], strict=True))
        start += count
    return keys


def journal_header(journal: str) -> bytes:
    """The first line of a fresh journal following the snapshot with id ``journal``."""
    return JournalHeader(journal=journal).model_dump_json().encode("utf-8")


def journal_line(key: tuple[str, str], entry: IndexEntry | None, skipped: SkippedNote | None) -> bytes:
    """One journal line: note ``key`` now has ``entry`` (``None``: none) and ``skipped`` record.

    The line break comes first, so a line appended after a torn one (a writer killed in its
    append) starts a line of its own: only the torn line is lost."""
    body = {
        "k": list(key),
        "e": entry.model_dump(exclude_none=True, by_alias=True) if entry is not None else None,
        "s": skipped.model_dump() if skipped is not None else None,
    }
    return b"\n" + json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def parse_journal(data: bytes, journal: str) -> tuple[list[JournalLine], int] | None:
    """The lines of a journal blob that follows the snapshot ``journal``, and how many lines it
    has in all; ``None`` when its header names another snapshot (or it has none).

    Lines that do not parse (a torn last append, a fragment that a crash left in front of a
    later append) are skipped, never fatal: the listing comparison after each load finds
    the notes they named."""
    lines = data.split(b"\n")
    try:
        header = JournalHeader.model_validate_json(lines[0])
    except ValueError:
        return None
    if header.journal != journal:
        return None
    found: list[JournalLine] = []
    for raw in lines[1:]:
        if not raw:
            continue
        try:
            found.append(JournalLine.model_validate_json(raw))
        except ValueError:
            continue
    return found, len(lines) - 1


def stored_entries(snapshot: bytes, journal: bytes | None) -> list[IndexEntry]:
    """The entries a stored index holds: its snapshot with its journal's lines applied, sorted
    by category and file name (what a new process loads; for tools and tests)."""
    status, index, why = parse_index(snapshot)
    if status != "ok" or index is None:
        raise ValueError(f"not a readable index: {why}")
    entries = {(e.category, e.filename): e for e in index.files}
    parsed = parse_journal(journal, index.journal) if journal is not None and index.journal is not None else None
    for line in parsed[0] if parsed is not None else []:
        if line.e is None:
            entries.pop(line.k, None)
        else:
            entries[line.k] = line.e
    return [entries[key] for key in sorted(entries)]


def tokenize(text: str) -> list[str]:
    """Lower-cased words without English stop words (``snake_case`` splits).

    See :func:`local_ai_memory._shared.text.words`.
    """
    return words(text)


def extract_title(text: str, fallback: str = "") -> str:
    """The first level-1 heading (``# Title``) outside code blocks, else ``fallback``."""
    fenced = False
    for line in text.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            continue
        match = None if fenced else _H1_RE.match(line)
        if match:
            return match.group(1).strip()
    return fallback


def extract_description(text: str, limit: int = MAX_DESCRIPTION) -> str:
    """The first paragraph of prose (not a heading, table or code) as written, shortened; leading
    quote and list markers are dropped."""
    paragraph: list[str] = []
    fenced = False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith(("```", "~~~")):
            fenced = not fenced
            if paragraph:
                break
            continue
        if fenced:
            continue
        if not stripped or stripped.startswith(("#", "|", "---", "===", "<!--")):
            if paragraph:
                break
            continue
        paragraph.append(_MARKER_RE.sub("", stripped).strip())
    text_out = " ".join(p for p in paragraph if p)
    if len(text_out) > limit:
        text_out = text_out[: limit - 1].rsplit(" ", 1)[0] + "…"
    return text_out


def extract_keywords(
    title: str,
    description: str,
    content: str,
    limit: int = HEURISTIC_KEYWORDS,
    *,
    content_tokens: list[str] | None = None,
) -> list[str]:
    """Heuristic keywords (no LLM): frequent content words, title and description words weigh more."""
    counts: Counter[str] = Counter(content_tokens if content_tokens is not None else tokenize(content))
    for word in tokenize(description):
        counts[word] += 2
    for word in tokenize(title):
        counts[word] += 4
    ranked = sorted(
        ((word, n) for word, n in counts.items() if len(word) > 2 and not word.isdigit()),
        key=lambda item: (-item[1], item[0]),
    )
    return [word for word, _ in ranked[:limit]]


def _stem_title(filename: str) -> str:
    """The file name without the user prefix and ``.md``, as written (the title of a note without one)."""
    stem = filename[:-3] if filename.endswith(".md") else filename
    _, _, rest = stem.partition("_")
    return (rest or stem).strip()


def extract_metadata(
    filename: str, category: str, text: str, *, content_tokens: list[str] | None = None
) -> tuple[str, str, list[str]]:
    """``(title, description, keywords)`` of one Markdown file's text (``content_tokens``: its
    :func:`tokenize` result, when the caller already has it)."""
    title = extract_title(text, fallback=_stem_title(filename))
    description = extract_description(text)
    return title, description, extract_keywords(title, description, text, content_tokens=content_tokens)


def metadata_text(entry: IndexEntry) -> str:
    """File name words, title, description and keywords of an entry, as one text."""
    return " ".join([_stem_title(entry.filename), entry.title, entry.description, " ".join(entry.keywords)])


def metadata_checksum(entry: IndexEntry) -> int:
    """CRC-32 of :func:`metadata_text`: what a ranker snapshot row must match besides the
    note's version and size (the metadata words are ranked too). Stored beside the entries in
    a snapshot (``meta``), so a new process compares it instead of computing it for every note."""
    return zlib.crc32(metadata_text(entry).encode("utf-8", "surrogatepass"))


def _added_metadata(entry: IndexEntry, content: str) -> str:
    # Title and description normally come from the text itself: adding them again would count
    # their words twice (measured: it lowers recall on large corpora). They are added only
    # when they are not in the text, e.g. set by hand through ``update_index_entry``.
    parts = [_stem_title(entry.filename), " ".join(entry.keywords)]
    parts.extend(text for text in (entry.title, entry.description) if text and text not in content)
    return " ".join(parts)


def ranking_text(entry: IndexEntry, content: str | None, field: RankingField) -> str:
    """The text Stage 1 ranks an entry by.

    ``metadata``: file-name words, title, description, keywords. ``content``: the file's text.
    ``both`` (the default): the text plus file-name words and keywords (and title or
    description when they do not occur in the text).
    """
    if field == "metadata" or content is None:
        return metadata_text(entry)
    if field == "content":
        return content
    return _added_metadata(entry, content) + "\n" + content


def lead_text(entry: IndexEntry) -> str:
    """File-name words, title and description: what a note says it is about (the lead field)."""
    return " ".join([_stem_title(entry.filename), entry.title, entry.description])


def ranking_tokens(
    entry: IndexEntry,
    content: str | None,
    field: RankingField,
    content_tokens: list[str] | None = None,
    analyzer: Analyzer | None = None,
) -> list[str]:
    """The BM25 terms of an entry: the words of ``ranking_text(...)`` as the body (reusing already
    computed content words) and :func:`lead_text` as the lead, through ``analyzer``."""
    analyzer = analyzer if analyzer is not None else _DEFAULT_ANALYZER
    if content_tokens is None or content is None or field == "metadata":
        body = words(ranking_text(entry, content, field))
    elif field == "content":
        body = content_tokens
    else:
        body = words(_added_metadata(entry, content)) + content_tokens
    return analyzer.document_terms(body, words(lead_text(entry)))


def keyword_prompt(title: str, description: str, keywords: list[str], excerpt: str) -> str:
    """Prompt asking an LLM for 5-10 search keywords of one file."""
    return (
        "You label knowledge files for search. Give 5 to 10 short keywords (single words or short phrases) "
        "that a person would type to find this file. Answer with ONLY a JSON array of strings.\n\n"
        f"TITLE: {title}\nDESCRIPTION: {description}\nCANDIDATE KEYWORDS: {', '.join(keywords)}\n"
        f"EXCERPT:\n{excerpt}\n"
    )


def parse_keywords(answer: str, limit: int = 10) -> list[str]:
    """Keywords from an LLM answer: the first JSON array of strings in it, cleaned; ``[]`` if none."""
    start = answer.find("[")
    while start != -1:
        end = answer.find("]", start)
        while end != -1:
            try:
                value = json.loads(answer[start : end + 1])
            except ValueError:
                end = answer.find("]", end + 1)
                continue
            if isinstance(value, list):
                out: list[str] = []
                for item in value:
                    if isinstance(item, str):
                        word = " ".join(item.lower().split())[:60]
                        if word and word not in out:
                            out.append(word)
                return out[:limit]
            break
        start = answer.find("[", start + 1)
    return []
