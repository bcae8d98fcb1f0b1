"""Recall: the passages of a user's notes and past conversations that answer a question.

Stage 1 ranks whole notes; the answer to "when is Mia's recital?" is one turn of one session,
or one paragraph in the middle of a long note. Recall therefore ranks *passages*:

1. the best notes of Stage 1 (:data:`CANDIDATE_NOTES`, every category including the
   conversation logs) are cut into passages: a conversation log into its turns
   (:func:`.conversations.parse_turns`), any other note into its paragraphs (long ones into
   windows of :data:`PARAGRAPH_WORDS` words);
2. each passage is scored with BM25 over the pool of those passages (its own words, its
   speaker, and its run's date as words: "march", "monday"), plus a share of the score of
   its context (the passages just before it: an answer often leaves its topic to them) and
   of the next passage, plus a share of its note's Stage 1 score; with hybrid search on,
   the cosine of its embedding (plus a share of its context's) is fused in by reciprocal
   rank; newer passages gain a little, and a passage that is itself a question loses half;
3. the best passages are rendered with what places them (the note, the run's date and time,
   the speaker, the turn before) and taken in order while they fit ``max_tokens``.

Everything here is pure; :meth:`local_ai_memory.Knowledge.recall` reads the notes.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import date

from local_ai_memory._knowledge.conversations import CONVERSATIONS, parse_turns
from local_ai_memory._knowledge.passages import blocks
from local_ai_memory._shared.naming import note_name_of
from local_ai_memory._shared.text import Analyzer, words

__all__ = [
    "CANDIDATE_NOTES",
    "NOTHING_RECALLED",
    "PARAGRAPH_WORDS",
    "RECALL_DESCRIPTION",
    "Recall",
    "RecalledPassage",
    "cut_note",
    "rank_passages",
    "recalled",
]

CANDIDATE_NOTES = 40
"""Notes of Stage 1 whose passages are ranked."""
PARAGRAPH_WORDS = 120
"""Words of a note's passage at most: a longer paragraph is cut into windows this long."""

# The weights below were chosen on the tuning part of ``benchmarks/bench_recall.py`` (blind
# multi-session conversations; R@5 / R@10 of answering turns). Figures are BM25 / hybrid.
CONTEXT_BEFORE = 2
"""Passages before a passage that are its context: an answer often leaves its topic to the
turns before it ("How did the fair go?" / "Sold out by 1:30, $1,460 total"). Measured: no
context .531 / .625 (BM25 R@5 / R@10), one turn .559 / .675, two .617 / .712, three .589 / .723."""
CONTEXT_SHARE = 0.5
"""Weight of the context's BM25 score in a passage's (0.25 and 1.0 were no better)."""
NEIGHBOUR_SHARE = 0.25
"""Share of the next passage's score a passage adds (a question answered by the turn after)."""
LEXICAL_WEIGHT = 0.5
"""Weight of the word ranking against the embedding ranking in reciprocal-rank fusion (0.3 to
1.0 within a point of each other; 2.0 lost three)."""
RRF_K = 10
"""The rank offset of reciprocal-rank fusion: a small one lets the first ranks decide."""
DENSE_CONTEXT = 0.4
"""Share of the best cosine among the passages before a passage (its context) that it adds:
hybrid .640 / .812 without, .700 / .851 with (0.2: .668 / .833; 0.8 lost four points)."""
RECENCY = 0.2
"""How much the newest passage outranks the oldest on equal words (what was said last holds
now); within noise here (+.005), kept small for questions about what changed."""
QUESTION_SHARE = 0.5
"""Multiplier of a passage that is itself a question: it shares the asker's words but is rarely
the answer. The largest single gain measured: hybrid .700 / .851 -> .786 / .865 (0.6) and
.789 / .883 (0.3); BM25 .591 / .718 -> .650 / .746."""
NOTE_SHARE = 0.3
"""Share of the pool's best passage score that the best note of Stage 1 adds to its passages
(the others in proportion): a note that matches as a whole lifts its passages."""
NOTHING_RECALLED = "Nothing in the user's notes or past conversations matches that."
RECALL_DESCRIPTION = (
    "Recall what the user said in earlier conversations or saved in their notes: give a question or "
    "the words of what you are looking for (a name, a date, a preference). Returns the best matching "
    "passages, each labelled with where and when it was said."
)
"""The one description of the recall tool every adapter registers."""
_K1, _B = 1.2, 0.75
_CONTEXT_WORDS = 40
_CONSIDERED = 200  # passages a budget is filled from at most


@dataclass(frozen=True)
class RecalledPassage:
    """One passage of a note: where it is, what it says, and what places it.

    ``kind`` is ``"turn"`` (a conversation log's turn; ``ordinal`` counts the log's turns from
    0, ``speaker`` and ``time`` are set, ``heading`` is the run's ``YYYY-MM-DD HH:MM``) or
    ``"paragraph"`` (``ordinal`` counts the note's passages, ``heading`` is its section).
    ``context`` is the turn or passage before it, shortened.
    """

    category: str
    filename: str
    name: str
    kind: str
    ordinal: int
    heading: str
    text: str
    speaker: str | None = None
    time: str | None = None
    context: str = ""
    score: float = 0.0

    @property
    def key(self) -> str:
        """Where the passage is: ``category/filename#ordinal``."""
        return f"{self.category}/{self.filename}#{self.ordinal}"

    def render(self) -> str:
        """The passage as a model reads it: a bracketed label, the turn before, the text."""
        if self.kind == "turn":
            day = self.heading.split(" ")[0]
            label = f"[conversation {self.name} · {day} {self.time} · {self.speaker}]"
        else:
            label = f"[note {self.name}" + (f" · {self.heading}" if self.heading else "") + "]"
        before = f"\n(before: {self.context})" if self.context else ""
        return f"{label}{before}\n{self.text}"


@dataclass(frozen=True)
class Recall:
    """What :meth:`~local_ai_memory.Knowledge.recall` found: passages best first, the text
    that puts them in a prompt, and its size in tokens (at most the ``max_tokens`` asked)."""

    passages: list[RecalledPassage] = field(default_factory=list)
    text: str = ""
    tokens: int = 0

    @property
    def answer(self) -> str:
        """What a ``recall`` tool tells a model: the passages, or that nothing was found (so an
        empty answer is never taken for a failure)."""
        return self.text or NOTHING_RECALLED


@dataclass(frozen=True)
class _Cut:
    passage: RecalledPassage
    terms: list[str]


def _shorten(text: str, limit: int = _CONTEXT_WORDS) -> str:
    found = text.split()
    return " ".join(found[:limit]) + (" …" if len(found) > limit else "")


def _date_words(run: str) -> list[str]:
    """``"2026-03-02 09:15"`` as words a question uses: ``["march", "monday", "2026"]``."""
    try:
        day = date.fromisoformat(run.split(" ", maxsplit=1)[0])
    except ValueError:
        return []
    return [day.strftime("%B").lower(), day.strftime("%A").lower(), str(day.year)]


def cut_note(category: str, filename: str, prefix: str, text: str, analyzer: Analyzer) -> list[_Cut]:
    """The passages of one note with their BM25 terms: a log's turns, another note's paragraphs."""
    name = note_name_of(filename, prefix)
    out: list[_Cut] = []
    if category == CONVERSATIONS:
        turns = parse_turns(text)
        for turn in turns:
            before = turns[turn.ordinal - 1] if turn.ordinal else None
            passage = RecalledPassage(
                category,
                filename,
                name,
                "turn",
                turn.ordinal,
                turn.run,
                turn.text,
                turn.speaker,
                turn.time,
                f"{before.speaker}: {_shorten(before.text)}" if before is not None else "",
            )
            terms = analyzer.stems([*words(turn.text), turn.speaker, *_date_words(turn.run)])
            out.append(_Cut(passage, terms))
        return out
    previous = ""
    for heading, paragraph in blocks(text):
        found = paragraph.split()
        for start in range(0, len(found), PARAGRAPH_WORDS):
            piece = " ".join(found[start : start + PARAGRAPH_WORDS])
            passage = RecalledPassage(
                category, filename, name, "paragraph", len(out), heading, piece, context=_shorten(previous)
            )
            out.append(_Cut(passage, analyzer.stems(words(f"{heading} {piece}"))))
            previous = piece
    return out


def rank_passages(
    notes: Sequence[tuple[list[_Cut], float]],
    query: str,
    analyzer: Analyzer,
    similarity: Sequence[float] | None = None,
) -> list[RecalledPassage]:
    """The passages of ``notes`` (each note's cuts and its Stage 1 score) that match ``query``
    by their words or their context's, best first (see the module docstring for the score).

    ``similarity`` (one cosine per passage, in the order of ``notes``' cuts) fuses an embedding
    ranking in by reciprocal rank; every passage then takes part."""
    pool = [cut for cuts, _ in notes for cut in cuts]
    query_terms = set(analyzer.stems(words(query)))
    if not pool or (not query_terms and similarity is None):
        return []
    df: Counter[str] = Counter()
    for cut in pool:
        df.update(query_terms.intersection(cut.terms))
    n = len(pool)
    idf = {t: math.log1p((n - df[t] + 0.5) / (df[t] + 0.5)) for t in query_terms if df[t]}
    avgdl = sum(len(cut.terms) for cut in pool) / n or 1.0

    def bm25(terms: Sequence[str]) -> float:
        counts = Counter(t for t in terms if t in idf)
        norm = _K1 * (1 - _B + _B * len(terms) / avgdl)
        return sum(idf[t] * c * (_K1 + 1) / (c + norm) for t, c in counts.items())

    best_note = max((score for _, score in notes), default=0.0)
    own = [[bm25(cut.terms) for cut in cuts] for cuts, _ in notes]
    pool_top = max((score for scores in own for score in scores), default=0.0)
    lexical: list[float] = []
    for (cuts, note_score), scores in zip(notes, own, strict=True):
        prior = NOTE_SHARE * pool_top * note_score / best_note if best_note > 0 else 0.0
        for i in range(len(cuts)):
            before = [t for cut in cuts[max(0, i - CONTEXT_BEFORE) : i] for t in cut.terms]
            after = scores[i + 1] if i + 1 < len(scores) else 0.0
            words_score = scores[i] + CONTEXT_SHARE * bm25(before) + NEIGHBOUR_SHARE * after
            lexical.append(words_score + prior if words_score > 0 else 0.0)
    fused = lexical if similarity is None else _fused(lexical, _in_context(notes, similarity))
    fused = [value * _weight(cut.passage, when) for value, cut, when in zip(fused, pool, _ages(pool), strict=True)]
    order = sorted((i for i in range(n) if fused[i] > 0), key=lambda i: (-fused[i], i))
    return [replace(pool[i].passage, score=round(fused[i], 6)) for i in order]


def _ages(pool: Sequence[_Cut]) -> list[float]:
    """Each passage's place in time among the pool's dated ones: 0 the oldest, 1 the newest
    (undated passages, a note's paragraphs, count as 0.5)."""
    stamps = [f"{cut.passage.heading} {cut.passage.time}" if cut.passage.kind == "turn" else "" for cut in pool]
    dated = sorted({stamp for stamp in stamps if stamp})
    if len(dated) < 2:
        return [0.5] * len(pool)
    place = {stamp: i / (len(dated) - 1) for i, stamp in enumerate(dated)}
    return [place.get(stamp, 0.5) for stamp in stamps]


def _weight(passage: RecalledPassage, age: float) -> float:
    """A passage's multiplier: newer words outrank older ones on the same topic (what was said
    last is what holds now), and a question is rarely the answer to one."""
    weight = 1.0 + RECENCY * age
    return weight * QUESTION_SHARE if passage.text.rstrip().endswith("?") else weight


def _in_context(notes: Sequence[tuple[list[_Cut], float]], similarity: Sequence[float]) -> list[float]:
    """Each passage's cosine plus :data:`DENSE_CONTEXT` of the best of the passages before it
    (its context, as for the words)."""
    out: list[float] = []
    start = 0
    for cuts, _ in notes:
        own = similarity[start : start + len(cuts)]
        for i, value in enumerate(own):
            before = own[max(0, i - CONTEXT_BEFORE) : i]
            out.append(value + DENSE_CONTEXT * max(before, default=0.0))
        start += len(cuts)
    return out


def _fused(lexical: Sequence[float], similarity: Sequence[float]) -> list[float]:
    """Reciprocal-rank fusion of the word ranking (only passages that match) and the embedding
    ranking (every passage), the words at :data:`LEXICAL_WEIGHT`."""
    out = [0.0] * len(lexical)
    ranked = sorted((i for i in range(len(lexical)) if lexical[i] > 0), key=lambda i: (-lexical[i], i))
    for rank, i in enumerate(ranked):
        out[i] += LEXICAL_WEIGHT / (RRF_K + rank + 1)
    for rank, i in enumerate(sorted(range(len(similarity)), key=lambda i: (-similarity[i], i))):
        out[i] += 1.0 / (RRF_K + rank + 1)
    return out


def recalled(ranked: Sequence[RecalledPassage], count: Callable[[str], int], max_tokens: int) -> Recall:
    """The passages of ``ranked`` taken in order while their rendered text fits ``max_tokens``
    (one that does not fit is passed over for shorter ones after it)."""
    taken: list[RecalledPassage] = []
    parts: list[str] = []
    used = 0
    for passage in ranked[:_CONSIDERED]:
        text = passage.render()
        size = count(text) + (1 if parts else 0)
        if used + size > max_tokens:
            continue
        taken.append(passage)
        parts.append(text)
        used += size
    return Recall(taken, "\n\n".join(parts), used)
