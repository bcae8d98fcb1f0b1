"""Recall: the passages of a user's notes and past conversations that answer a question.

Stage 1 ranks whole notes; the answer to "when is Mia's recital?" is one turn of one session,
or one paragraph in the middle of a long note. Recall therefore ranks *passages*:

1. the best notes of Stage 1 (:data:`CANDIDATE_NOTES`, every category including the
   conversation logs) are cut into passages: a conversation log into its turns
   (:func:`.conversations.parse_turns`), any other note into its paragraphs (long ones into
   windows of :data:`PARAGRAPH_WORDS` words);
2. each passage is scored with BM25 over the pool of those passages (its own words, its
   speaker, and its run's date as words: "march", "monday"), plus a share of its neighbours'
   scores (a question often matches the turn before the answer), plus a share of its note's
   Stage 1 score;
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
NEIGHBOUR_SHARE = 0.25
"""Share of the better neighbour's score a passage adds: a question's words are often in the
turn before its answer ("where should we eat?" / "the Thai place on 5th")."""
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


def _plain_name(category: str, filename: str, prefix: str) -> str:
    stem = filename[len(prefix) :] if filename.startswith(prefix) else filename
    return stem.removesuffix(".md") if not stem.removesuffix(".md").endswith(".md") else stem


def cut_note(category: str, filename: str, prefix: str, text: str, analyzer: Analyzer) -> list[_Cut]:
    """The passages of one note with their BM25 terms: a log's turns, another note's paragraphs."""
    name = _plain_name(category, filename, prefix)
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


def rank_passages(notes: Sequence[tuple[list[_Cut], float]], query: str, analyzer: Analyzer) -> list[RecalledPassage]:
    """Every passage of ``notes`` (each note's cuts and its Stage 1 score) that shares a word
    with ``query``, best first (see the module docstring for the score)."""
    pool = [cut for cuts, _ in notes for cut in cuts]
    query_terms = set(analyzer.stems(words(query)))
    if not pool or not query_terms:
        return []
    df: Counter[str] = Counter()
    for cut in pool:
        df.update(query_terms.intersection(cut.terms))
    n = len(pool)
    idf = {t: math.log1p((n - df[t] + 0.5) / (df[t] + 0.5)) for t in query_terms if df[t]}
    avgdl = sum(len(cut.terms) for cut in pool) / n or 1.0

    def bm25(terms: list[str]) -> float:
        counts = Counter(t for t in terms if t in idf)
        norm = _K1 * (1 - _B + _B * len(terms) / avgdl)
        return sum(idf[t] * c * (_K1 + 1) / (c + norm) for t, c in counts.items())

    best_note = max((score for _, score in notes), default=0.0)
    own = [[bm25(cut.terms) for cut in cuts] for cuts, _ in notes]
    pool_top = max((score for scores in own for score in scores), default=0.0)
    scored: list[tuple[float, int, RecalledPassage]] = []
    for (cuts, note_score), scores in zip(notes, own, strict=True):
        prior = NOTE_SHARE * pool_top * note_score / best_note if best_note > 0 else 0.0
        for i, cut in enumerate(cuts):
            if scores[i] <= 0.0:
                continue
            around = max(scores[i - 1] if i else 0.0, scores[i + 1] if i + 1 < len(scores) else 0.0)
            score = scores[i] + NEIGHBOUR_SHARE * around + prior
            scored.append((-score, len(scored), replace(cut.passage, score=round(score, 6))))
    scored.sort(key=lambda item: item[:2])
    return [passage for _, _, passage in scored]


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
