"""More real-text corpora for ``bench_quality.py``, built from what is installed in this venv.

The standard-library corpus (:func:`local_ai_memory._knowledge.samples.build_corpus`) is one kind of
text. Tuning a ranker on it alone would tune it for that corpus, so the benchmark also runs on:

* ``packages``: one note per module of the third-party packages installed here (their
  docstrings, rendered like the standard-library notes: title, first paragraph, the rest of
  the module docstring, public functions and classes). Queries are held out the same way:
  the first sentence of one to three public functions' docstrings, removed from the note.
  At most ``limit`` modules (2,000 by default), chosen by a hash of the module name.
* ``readmes``: one note per installed distribution's long description (its README, from the
  ``METADATA`` file). Two kinds of query: the first sentence of one paragraph (chosen by a
  hash) that is removed from the note, and the distribution's one-line ``Summary``, which its
  author wrote apart from the README (a query about what the whole note is about).

For both, a query is kept only when it is a known-item query: its text occurs in no note
(its own included) and no two queries are equal. Everything is read from files (``ast``,
nothing is imported), deterministic for one set of installed packages.
"""

from __future__ import annotations

import email
import email.policy
import hashlib
import re
import sysconfig
from pathlib import Path

from local_ai_memory._knowledge.samples import (
    EvalQuery,
    SampleCorpus,
    SampleNote,
    _first_sentence,
    _from_source,
    _held_out,
    _is_query_text,
    _render,
)

__all__ = ["CORPORA", "build_packages_corpus", "build_readmes_corpus"]

_SKIP_PARTS = frozenset({"tests", "test", "testing", "_vendor", "vendor", "_vendored", "__pycache__", "examples"})
_SKIP_TOP = frozenset({"local_ai_memory", "pip", "setuptools", "_pytest", "pkg_resources"})
_MODULE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _stable(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()


def _site_packages() -> Path:
    return Path(sysconfig.get_paths()["purelib"])


def _module_files(root: Path) -> list[tuple[str, Path]]:
    out: list[tuple[str, Path]] = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        parts = list(rel.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if not parts or parts[0] in _SKIP_TOP or parts[0].endswith((".dist-info", ".egg-info")):
            continue
        if any(p in _SKIP_PARTS or p.startswith("test_") or not _MODULE_RE.match(p) for p in parts):
            continue
        if any(p.startswith("_") and p != "__init__" for p in parts[1:]):
            continue
        out.append((".".join(parts), path))
    return out


def _known_items(notes: list[SampleNote], raw: list[EvalQuery]) -> tuple[EvalQuery, ...]:
    """Queries whose text is in no note and that no other query repeats."""
    texts = [" ".join(note.text.lower().split()) for note in notes]
    seen: dict[str, int] = {}
    for query in raw:
        seen[query.text.lower()] = seen.get(query.text.lower(), 0) + 1
    kept = []
    for query in raw:
        key = query.text.lower()
        if seen[key] == 1 and not any(key in text for text in texts):
            kept.append(query)
    return tuple(kept)


def build_packages_corpus(limit: int = 2000) -> SampleCorpus:
    """Notes and held-out queries from the docstrings of the third-party modules installed here."""
    candidates = sorted(_module_files(_site_packages()), key=lambda item: _stable(item[0]))
    notes: list[SampleNote] = []
    raw: list[EvalQuery] = []
    for name, path in candidates:
        if len(notes) >= limit:
            break
        found = _from_source(path)
        if found is None:
            continue
        doc, members = found
        if len(doc.strip()) < 40 or len(members) < 2:
            continue
        held = _held_out(name, members)
        kept = [m for m in members if m not in held]
        text = _render(name, doc, kept)
        notes.append(SampleNote(name, name, text))
        for member in held:
            raw.append(EvalQuery(_first_sentence(member.doc), name, f"{name}.{member.name}"))
    notes.sort(key=lambda n: n.module)
    return SampleCorpus(tuple(notes), _known_items(notes, raw))


def _readme(path: Path) -> tuple[str, str, str] | None:
    try:
        message = email.message_from_bytes(path.read_bytes(), policy=email.policy.compat32)
    except OSError:
        return None
    name = str(message.get("Name") or "").strip()
    payload = message.get_payload()
    body = payload if isinstance(payload, str) else ""
    if not body.strip():
        body = str(message.get("Description") or "")
    if not name or len(body) < 800:
        return None
    return name, body, " ".join(str(message.get("Summary") or "").split())


def _paragraphs(text: str) -> list[str]:
    return [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]


def _prose(paragraph: str) -> bool:
    first = paragraph.lstrip()[:1]
    return first.isalpha() and "```" not in paragraph and not paragraph.lstrip().startswith(("#", "|", ".."))


def build_readmes_corpus() -> SampleCorpus:
    """Notes and held-out queries from the READMEs of the distributions installed here."""
    notes: list[SampleNote] = []
    raw: list[EvalQuery] = []
    seen_names: set[str] = set()
    for metadata in sorted(_site_packages().glob("*.dist-info/METADATA")):
        found = _readme(metadata)
        if found is None:
            continue
        name, body, summary = found
        stem = re.sub(r"[^A-Za-z0-9.-]+", "-", name.lower()).strip("-.")
        if not stem or stem in seen_names or stem == "local-ai-memory":
            continue
        seen_names.add(stem)
        paragraphs = _paragraphs(body)
        usable = [i for i, p in enumerate(paragraphs[1:], 1) if _prose(p) and _is_query_text(_first_sentence(p))]
        held = sorted(usable, key=lambda i: _stable(stem, str(i)))[:1] if len(paragraphs) >= 6 else []
        kept = [p for i, p in enumerate(paragraphs) if i not in held]
        text = f"# {name}\n\n" + "\n\n".join(kept) + "\n"
        notes.append(SampleNote(stem, stem, text))
        for i in held:
            raw.append(EvalQuery(_first_sentence(paragraphs[i]), stem, f"{stem} paragraph {i}"))
        if len(summary.split()) >= 3 and summary.lower() != name.lower():
            raw.append(EvalQuery(summary, stem, f"{stem} summary"))
    return SampleCorpus(tuple(notes), _known_items(notes, raw))


CORPORA = {
    "stdlib": lambda: __import__("local_ai_memory._knowledge.samples", fromlist=["build_corpus"]).build_corpus(),
    "packages": build_packages_corpus,
    "readmes": build_readmes_corpus,
}
