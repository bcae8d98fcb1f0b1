"""The knowledge index (``memory_index.json`` v3) and metadata extraction from Markdown.

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

import json
import re
import zlib
from collections import Counter
from collections.abc import Callable
from typing import Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, field_serializer

from local_ai_memory._knowledge.token_marks import PackedMarks, TokenMarks, pack_marks
from local_ai_memory._shared.errors import UnsupportedFormatError
from local_ai_memory._shared.text import Analyzer, words

__all__ = [
    "INDEX_VERSION",
    "READABLE_VERSIONS",
    "IndexEntry",
    "IndexFile",
    "JournalHeader",
    "JournalLine",
    "ParsedIndex",
    "SkippedNote",
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


class _VersionOnly(BaseModel):
    model_config = ConfigDict(extra="ignore")
    index_version: int = 0


ParsedIndex = tuple[Literal["ok", "outdated", "corrupt"], "IndexFile | None", str]


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
            f"memory_index.json has index_version {version}; this library reads up to {INDEX_VERSION}"
        )
    if version not in READABLE_VERSIONS:
        return "outdated", None, f"index_version {version} < {READABLE_VERSIONS[0]}"
    try:
        return "ok", IndexFile.model_validate(raw), ""
    except ValidationError as exc:
        return "corrupt", None, f"invalid entries: {exc.error_count()} error(s)"


def serialize_index(
    entries: list[IndexEntry],
    last_updated: float,
    skipped: list[SkippedNote] | None = None,
    journal: str | None = None,
    checksum: Callable[[IndexEntry], int] | None = None,
) -> bytes:
    """The bytes of an index holding ``entries`` (sorted by category, then file name) and
    ``skipped``, followed by the journal ``journal`` (when given), with each entry's
    :func:`metadata_checksum` (``checksum``: a function that may know it already)."""
    ordered = sorted(entries, key=lambda e: (e.category, e.filename))
    files = [e.model_dump(exclude_none=True, by_alias=True) for e in ordered]
    body: dict[str, object] = {"index_version": INDEX_VERSION, "last_updated": last_updated}
    if journal is not None:
        body["journal"] = journal
    body["files"] = files
    if skipped:
        body["skipped"] = [n.model_dump() for n in sorted(skipped, key=lambda n: (n.category, n.filename))]
    body["meta"] = [(checksum or metadata_checksum)(e) for e in ordered]
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


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
