"""Text analysis for Stage 1: the words of a text and the weighted terms BM25 ranks by.

What is stored and shown (titles, descriptions) keeps the author's text; only ranking goes
through here. A text becomes **words**: lower-cased runs of letters and digits
(``snake_case`` and ``kebab-case`` split into their words), without a short list of English
stop words and single letters (digits stay). The :class:`Analyzer` turns words into
**terms** in three namespaces, chosen by measurement on three corpora
(``benchmarks/bench_quality.py``):

* the **stem** of each word of the body (Snowball, through PyStemmer; ``indexes`` and
  ``indexing`` both become ``index``), weight 1. Only these count for the document length;
* the **exact** word of the body, weight :data:`EXACT_WEIGHT`, so that a query's exact word
  form ranks above its other inflections (stemming alone lowered precision on code text);
* the stem of each word of the **lead** (file-name words, title and first paragraph),
  weight :data:`LEAD_WEIGHT`, scored without length normalization: a simple form of BM25F
  field weighting, since what a note is about is usually said first.

With stemming off (``language=None``) a term is the word itself and there is no exact
namespace. :attr:`Analyzer.signature` names all of this, so cached rankers built with other
settings are never reused.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Sequence
from typing import Any

import Stemmer

from local_ai_memory._shared.errors import ConfigError

__all__ = [
    "ANALYSIS_VERSION",
    "DEFAULT_LANGUAGE",
    "EXACT",
    "EXACT_WEIGHT",
    "LEAD",
    "LEAD_WEIGHT",
    "STOPWORDS",
    "Analyzer",
    "QueryTerms",
    "is_length_term",
    "stemmer_languages",
    "words",
]

ANALYSIS_VERSION = 2
"""Changes whenever words or terms change meaning (part of every ranker snapshot's signature)."""
DEFAULT_LANGUAGE = "english"
LEAD = "\x01"
EXACT = "\x02"
LEAD_WEIGHT = 0.4
EXACT_WEIGHT = 0.5
_NAMESPACES = (LEAD, EXACT)
_CACHE_LIMIT = 500_000

_WORD_RE = re.compile(r"[^\W_]+", re.UNICODE)
_STOPWORD_TEXT = """
    a about above after again against all also am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few for from further had has have having
    he her here hers herself him himself his how i if in into is it its itself just me more most my myself no
    nor not now of off on once only or other our ours ourselves out over own same she should so some such than
    that the their theirs them themselves then there these they this those through to too under until up very
    was we were what when where which while who whom why will with would you your yours yourself yourselves
    may might must shall us use used using via etc e g ie eg one two get set see also new like
"""
STOPWORDS = frozenset(_STOPWORD_TEXT.split())

QueryTerms = list[tuple[str, float]]


def words(text: str) -> list[str]:
    """Lower-cased words of ``text`` without stop words and single letters (``snake_case`` splits)."""
    return [w for w in _WORD_RE.findall(text.lower()) if w not in STOPWORDS and (len(w) > 1 or w.isdigit())]


def is_length_term(term: str) -> bool:
    """Whether a term counts for its document's length (stems of the body, not exact or lead terms)."""
    return term[:1] not in _NAMESPACES


def stemmer_languages() -> tuple[str, ...]:
    """The languages a stemmer exists for (Snowball's algorithms, ``porter`` included)."""
    return tuple(Stemmer.algorithms())


class _StemCache:
    """One stemmer per language with a memo of the words it has seen (PyStemmer objects are
    not thread-safe, so each call holds a lock)."""

    def __init__(self, language: str) -> None:
        self._stemmer: Any = Stemmer.Stemmer(language)
        self._memo: dict[str, str] = {}
        self._lock = threading.Lock()

    def stems(self, items: Sequence[str]) -> list[str]:
        memo = self._memo  # replaced, never cleared, when full: this reference stays complete
        unknown = [w for w in set(items) if w not in memo]
        if unknown:
            with self._lock:
                fresh = dict(zip(unknown, self._stemmer.stemWords(unknown), strict=True))
                if len(self._memo) + len(fresh) > _CACHE_LIMIT:
                    self._memo = {}
                self._memo.update(fresh)
            return [fresh[w] if w in fresh else memo[w] for w in items]
        return [memo[w] for w in items]


_STEMMERS: dict[str, _StemCache] = {}
_STEMMERS_LOCK = threading.Lock()


def _stem_cache(language: str) -> _StemCache:
    with _STEMMERS_LOCK:
        found = _STEMMERS.get(language)
        if found is None:
            found = _STEMMERS[language] = _StemCache(language)
        return found


class Analyzer:
    """Words to weighted BM25 terms for one stemming language (``None``: no stemming).

    >>> analyzer = Analyzer("english")
    >>> analyzer.stems(["indexes", "indexing"])
    ['index', 'index']
    >>> [term for term, _ in analyzer.query_terms("Indexes") if term.isalpha()]
    ['index']
    """

    def __init__(self, language: str | None = DEFAULT_LANGUAGE) -> None:
        if language is not None:
            language = language.strip().lower()
            if language not in stemmer_languages():
                raise ConfigError(
                    f"no stemmer for language {language!r}: choose one of {', '.join(stemmer_languages())} or none"
                )
        self.language = language
        self._cache = _stem_cache(language) if language is not None else None
        self.signature = (
            f"analysis {ANALYSIS_VERSION}; stems {language or 'off'}; lead {LEAD_WEIGHT}; exact {EXACT_WEIGHT}"
        )

    def __repr__(self) -> str:
        return f"Analyzer({self.language!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Analyzer) and other.signature == self.signature

    def __hash__(self) -> int:
        return hash(self.signature)

    def stems(self, items: Sequence[str]) -> list[str]:
        """The stems of ``items`` (the words themselves without stemming)."""
        return self._cache.stems(items) if self._cache is not None else list(items)

    def document_terms(self, body: Sequence[str], lead: Iterable[str]) -> list[str]:
        """The terms of a document from the words of its body and of its lead (name, title, first paragraph)."""
        terms = self.stems(body)
        if self._cache is not None:
            terms.extend(EXACT + w for w in body)
        terms.extend(LEAD + s for s in self.stems(list(lead)))
        return terms

    def query_terms(self, text: str) -> QueryTerms:
        """The weighted terms of a query: each word's stem, exact form and lead stem."""
        found = words(text)
        stems = self.stems(found)
        out: QueryTerms = []
        for word, stem in zip(found, stems, strict=True):
            out.append((stem, 1.0))
            if self._cache is not None:
                out.append((EXACT + word, EXACT_WEIGHT))
            out.append((LEAD + stem, LEAD_WEIGHT))
        return out
