"""A real-text knowledge corpus built from the Python standard library installed here.

The demo, the notebooks, the tests and the quality benchmark need Markdown notes written by
people, plus questions whose right answer is known, without downloading anything. Every
Python installation carries such text: the documentation strings of its standard library.

:func:`build_corpus` makes one note per top-level standard-library module: an H1 title (the
module name), the first paragraph of the module's docstring as the description, the rest
of it, then its public functions and classes with their signatures and docstrings. Pure
Python modules are read with :mod:`ast` (nothing is imported, so nothing runs); the few
built-in and C modules are imported to read their ``__doc__``. Modules with side effects
(``this``, ``antigravity``, ``readline``), GUI and test packages, and the "dead batteries"
deprecated since 3.11 are skipped.

Evaluation queries come from text that is **not in the note**: for a module with enough
documented functions, one to three functions (picked by a hash, so the choice is stable) are
left out of the note, and the first sentence of their docstring becomes a query whose
expected answer is that module's note. A query is dropped when its text still occurs in the
note or when two modules would give the same query.

The result is deterministic for one Python version and takes about a second::

    corpus = build_corpus()
    corpus.notes[0].module, len(corpus.queries)
    write_corpus(store, "alice")            # one file per module into the knowledge category
"""

from __future__ import annotations

import ast
import contextlib
import functools
import hashlib
import importlib
import importlib.util
import inspect
import io
import re
import sys
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from local_ai_memory._knowledge.store import MemoryStore
from local_ai_memory._shared.errors import InvalidInputError
from local_ai_memory._shared.naming import user_file_prefix

__all__ = ["EvalQuery", "SampleCorpus", "SampleNote", "build_corpus", "write_corpus"]

_SKIP_TEXT = """
antigravity this idlelib tkinter turtle turtledemo test lib2to3 ensurepip pydoc_data distutils readline
rlcompleter site sitecustomize usercustomize msilib msvcrt nt winreg winsound sre_compile sre_constants
sre_parse asynchat asyncore imp smtpd cgi cgitb crypt nntplib pipes sndhdr spwd sunau telnetlib uu
xdrlib aifc audioop chunk imghdr mailcap nis ossaudiodev venv
"""
SKIP = frozenset(_SKIP_TEXT.split())
_MAX_MODULE_DOC = 3000
_MAX_MEMBER_DOC = 800
_MAX_MEMBERS = 40
_MIN_QUERY_WORDS = 4
_WORD_RE = re.compile(r"[A-Za-z]{3,}")
_SIGNATURE_LINE_RE = re.compile(r"^[\w.]+\(.*\)(\s*->\s*.*)?$")
_QUERY_STOP = frozenset(re.findall(r"\w+", "the and for with from that this into are its return returns given"))


@dataclass(frozen=True)
class _Member:
    name: str
    signature: str
    doc: str
    is_function: bool


@dataclass(frozen=True)
class SampleNote:
    """One module's note: ``stem`` is the file name without the user prefix and ``.md``."""

    module: str
    stem: str
    text: str

    def filename(self, user_id: str) -> str:
        """The note's knowledge-file name for ``user_id``."""
        return f"{user_file_prefix(user_id)}{self.stem}.md"


@dataclass(frozen=True)
class EvalQuery:
    """A question and the module whose note answers it; ``source`` is where the text came from."""

    text: str
    module: str
    source: str

    def expected(self, user_id: str) -> str:
        """The file name that should be found for ``user_id``."""
        return f"{user_file_prefix(user_id)}{self.module}.md"


@dataclass(frozen=True)
class SampleCorpus:
    """The notes and the evaluation queries."""

    notes: tuple[SampleNote, ...]
    queries: tuple[EvalQuery, ...]

    def note(self, module: str) -> SampleNote:
        """The note of ``module``."""
        for note in self.notes:
            if note.module == module:
                return note
        raise KeyError(module)


def _first_paragraph(doc: str) -> str:
    lines: list[str] = []
    for line in doc.strip().splitlines():
        if not line.strip():
            if lines:
                break
            continue
        lines.append(line.strip())
    return " ".join(lines)


def _strip_signature(doc: str) -> str:
    """Drop C-style leading ``name(args) -> result`` lines from a docstring."""
    lines = doc.strip().splitlines()
    while lines and (_SIGNATURE_LINE_RE.match(lines[0].strip()) or lines[0].strip() == "--"):
        lines.pop(0)
    return "\n".join(lines).strip()


def _first_sentence(doc: str) -> str:
    paragraph = _first_paragraph(_strip_signature(doc))
    match = re.search(r"(?<=[a-z0-9)\]])\.(\s|$)", paragraph)
    sentence = paragraph[: match.start() + 1] if match else paragraph
    return " ".join(sentence.split())


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _stable(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()


def _from_source(path: Path) -> tuple[str, list[_Member]] | None:
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return None
    exported: set[str] | None = None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            with contextlib.suppress(ValueError, TypeError):
                exported = {str(x) for x in ast.literal_eval(node.value)}
    members: list[_Member] = []
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if node.name.startswith("_") or (exported is not None and node.name not in exported):
            continue
        doc = ast.get_docstring(node)
        if not doc:
            continue
        if isinstance(node, ast.ClassDef):
            members.append(_Member(node.name, f"class {node.name}", doc, is_function=False))
        else:
            members.append(_Member(node.name, f"{node.name}({ast.unparse(node.args)})", doc, is_function=True))
    doc = ast.get_docstring(tree) or ""
    for node in tree.body:  # some modules assign ``__doc__ = """..."""`` after a comment block
        if (
            not doc
            and isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "__doc__" for t in node.targets)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            doc = inspect.cleandoc(node.value.value)
    return doc, members


def _from_module(name: str) -> tuple[str, list[_Member]] | None:
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            module: ModuleType = importlib.import_module(name)
    except Exception:
        return None
    members: list[_Member] = []
    for member_name in sorted(vars(module)):
        if member_name.startswith("_"):
            continue
        obj = getattr(module, member_name)
        if getattr(obj, "__module__", name) not in (name, None) and not inspect.isbuiltin(obj):
            continue
        doc = inspect.getdoc(obj) if (inspect.isroutine(obj) or inspect.isclass(obj)) else None
        if not doc:
            continue
        if inspect.isclass(obj):
            members.append(_Member(member_name, f"class {member_name}", doc, is_function=False))
            continue
        try:
            signature = f"{member_name}{inspect.signature(obj)}"
        except (TypeError, ValueError):
            signature = f"{member_name}(...)"
        members.append(_Member(member_name, signature, doc, is_function=True))
    return inspect.getdoc(module) or "", members


def _module_source(name: str) -> tuple[str, list[_Member]] | None:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    origin = spec.origin or ""
    if origin.endswith(".py"):
        found = _from_source(Path(origin))
        if found is not None and (found[0] or len(found[1]) >= 2):
            return found
        # A thin wrapper (``from _decimal import *``): read the imported module instead.
    return _from_module(name)


def _is_query_text(text: str) -> bool:
    words = [w for w in _WORD_RE.findall(text.lower()) if w not in _QUERY_STOP]
    return len(words) >= _MIN_QUERY_WORDS and len(text) <= 300


def _render(module: str, doc: str, members: list[_Member]) -> str:
    summary = _first_paragraph(doc) or f"The {module} module of the Python standard library."
    rest = doc.strip()[len(doc.strip().split("\n\n", 1)[0]) :].strip() if doc.strip() else ""
    parts = [f"# {module}", "", _clip(summary, 600), ""]
    if rest:
        parts += [_clip(rest, _MAX_MODULE_DOC), ""]
    functions = [m for m in members if m.is_function][:_MAX_MEMBERS]
    classes = [m for m in members if not m.is_function][:_MAX_MEMBERS]
    for heading, group in (("Functions", functions), ("Classes", classes)):
        if not group:
            continue
        parts += [f"## {heading}", ""]
        for member in group:
            parts += [f"### {member.signature}", "", _clip(_strip_signature(member.doc), _MAX_MEMBER_DOC), ""]
    return "\n".join(parts).rstrip() + "\n"


def _held_out(module: str, members: list[_Member]) -> list[_Member]:
    usable = [m for m in members if m.is_function and _is_query_text(_first_sentence(m.doc))]
    documented = sum(1 for m in members if m.is_function)
    count = 3 if documented >= 10 else 2 if documented >= 5 else 1 if documented >= 3 else 0
    return sorted(usable, key=lambda m: _stable(module, m.name))[: min(count, len(usable))]


def _module_names(limit: int | None) -> list[str]:
    names = sorted(n for n in sys.stdlib_module_names if not n.startswith("_") and n not in SKIP)
    return names if limit is None else names[:limit]


@functools.lru_cache(maxsize=4)
def build_corpus(limit: int | None = None) -> SampleCorpus:
    """Notes and queries for the standard library (the first ``limit`` modules by name, or all)."""
    drafts: list[tuple[str, str, list[_Member], list[_Member]]] = []
    for name in _module_names(limit):
        found = _module_source(name)
        if found is None:
            continue
        doc, members = found
        if not doc.strip() and len(members) < 2:
            continue
        held = _held_out(name, members)
        kept = [m for m in members if m not in held]
        drafts.append((name, doc, kept, held))
    notes: list[SampleNote] = []
    raw_queries: list[EvalQuery] = []
    for name, doc, kept, held in drafts:
        text = _render(name, doc, kept)
        notes.append(SampleNote(name, name, text))
        lowered = " ".join(text.lower().split())
        for member in held:
            sentence = _first_sentence(member.doc)
            if sentence.lower() not in lowered:
                raw_queries.append(EvalQuery(sentence, name, f"{name}.{member.name}"))
    seen: dict[str, int] = {}
    for query in raw_queries:
        key = query.text.lower()
        seen[key] = seen.get(key, 0) + 1
    queries = tuple(q for q in raw_queries if seen[q.text.lower()] == 1)
    return SampleCorpus(tuple(notes), queries)


def write_corpus(
    store: MemoryStore,
    user_id: str,
    category: str | None = None,
    *,
    corpus: SampleCorpus | None = None,
    modules: Iterable[str] | None = None,
) -> list[Path]:
    """Write the notes as ``user_id``'s files in ``category`` (default: the store's first) and index them.

    Files are written atomically, then the index is refreshed once (no LLM). Returns the paths.
    """
    corpus = corpus if corpus is not None else build_corpus()
    category = category if category is not None else store.categories[0]
    wanted = set(modules) if modules is not None else None
    if category not in store.categories:
        raise InvalidInputError(f"unknown category {category!r}: the store has {list(store.categories)}")
    paths: list[Path] = []
    for note in corpus.notes:
        if wanted is not None and note.module not in wanted:
            continue
        name = note.filename(user_id)
        store.backend.write_note(category, name, note.text.encode("utf-8"))
        paths.append(store.data_dir / category / name)
    store.refresh_stale_entries(user_id, [category])
    return paths
