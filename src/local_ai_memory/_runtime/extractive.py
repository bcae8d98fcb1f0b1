"""The extractive summary: the five L1 sections filled from cue words when no LLM is configured.

Deterministic and offline. What the user says is read first, because nothing else keeps it once
the messages are compacted: :func:`classify_user_sentence` sorts each user sentence into a
question, a task request, a decision (a rule, a preference, a choice) or a stated fact, and
:func:`next_goal` decides whether a user message sets, extends or leaves the goal. Stated
facts and decisions become bullets marked :data:`~.summary.USER_MARK`, which trimming drops
last. Completed steps come from tool results; discoveries, open issues and decisions from cue
words in assistant sentences. Tool outputs are data from outside, so they never feed Decisions.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from itertools import pairwise
from typing import Literal

from local_ai_memory._runtime.messages import Message
from local_ai_memory._runtime.summary import (
    COMPLETED,
    DECISIONS,
    DISCOVERIES,
    LIST_SECTIONS,
    MAX_BULLETS,
    OPEN_ISSUES,
    USER_MARK,
    Summary,
    clean_line,
    dedupe,
    keep_newest,
    render_summary,
)
from local_ai_memory._shared.tokens import TokenCounter

__all__ = [
    "GoalEffect",
    "SentenceKind",
    "classify_user_sentence",
    "extract_summary",
    "goal_effect",
    "next_goal",
    "user_statements",
]

SentenceKind = Literal[
    "question", "step", "request", "new_task", "follow_up", "continue", "decision", "fact", "other", "chat"
]

_STOP_SPLIT = re.compile(r"(?<=[.!?])\s+|(?<=[。！？])\s*")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")
"""Kana, CJK ideographs and Hangul: text written without spaces between words."""


def _words(text: str) -> int:
    """How many words ``text`` has, also when it is written without spaces (two CJK characters count as one)."""
    return len(text.split()) + len(_CJK.findall(text)) // 2


_DECISION_CUE = re.compile(
    r"\b(decided|decide to|decision|we will|we'll|i will use|i'll use|let's use|let's go with|going with|go with|"
    r"chose|choose|opted|instead of|prefer|agreed|switch(?:ed)? to|settled on)\b",
    re.IGNORECASE,
)
_ISSUE_CUE = re.compile(
    r"\b(todo|to do|need to|needs to|still|not yet|remaining|blocked|unresolved|open question|unclear|"
    r"fails?|failing|failed|error|exception|traceback|bug|broken|missing|unknown)\b",
    re.IGNORECASE,
)
_DISCOVERY_CUE = re.compile(
    r"\b(found|discovered|turns out|noticed|learned|shows?|reveals?|the cause|because|located|defined in|"
    r"is defined|returns|requires|depends on|note that|important|means)\b",
    re.IGNORECASE,
)
_TOOL_ERROR = re.compile(r"^\W*(error|exception|traceback|failed|failure|fatal)\b", re.IGNORECASE)

# ---- how a user sentence is read (lower-cased text, leading discourse words removed first)

_FILLER = re.compile(
    r"^(?:(?:ok(?:ay)?|great|good|cool|nice|thanks|thank you|perfect|alright|all right|right|so|well|hi|hey|hello|"
    r"yes|yeah|sure|fine|hmm|oh|ugh|oops|argh|by the way|fyi|for context|for the record|note|just so you know|"
    r"hola|buenas|bonjour|salut|coucou|hallo|moin|servus|oi|ol[aá]|ciao|buongiorno|merci|gracias|obrigad[oa]|"
    r"danke|grazie)(?=[\s,:;!.-]|$)[\s,:;!.-]*)+"
)
_POLITE = re.compile(
    r"^(?:please|pls|kindly|can you|could you|would you|will you|can we|could we|"
    r"i (?:want|need|would like|'d like) you to|i'd like you to|help me(?: to)?|(?:i|we) need help(?: with)?|"
    r"your task is to|the task is to|"
    r"i (?:want|need) to|we (?:want|need) to|let's|let us|i'm trying to|we're trying to|i am trying to|"
    r"(?:i|we)(?: would|'d)? (?:like|want|need)(?= an? \w+ (?:to|for|of|on)\b)|"
    r"(?:est-ce que )?(?:peux-tu|pouvez-vous|pourrais-tu|pourriez-vous|tu peux|vous pouvez)|"
    r"¿?(?:puedes|podr[ií]as|puede|podr[ií]a)|(?:voc[eê] )?(?:pode|poderia)|"
    r"(?:kannst du|k[öo]nnen sie|k[öo]nntest du|k[öo]nnten sie)|(?:puoi|potresti|pu[oò]|potrebbe))\b[\s,]*"
)
_NEW_TASK = re.compile(
    r"^(?:now|next|new task|change of plans?|moving on|let's move on|instead(?!\s+of)|forget (?:that|the last one|it)|"
    r"different task|another task|switch(?:ing)? to)\b[\s,:;-]*"
)
_INSTEAD = re.compile(r"\binstead\b(?!\s+of)")
_FOLLOW_UP = re.compile(r"^(?:also|and|additionally|plus|then|too|btw|one more thing|as well)\b[\s,:;-]*")
_QUESTION_START = re.compile(
    r"^(?:what|why|how|where|when|which|who|whom|whose|is|are|was|were|do|does|did|can|could|should|would|will|"
    r"shall|may|might|has|have|had|isn't|aren't|doesn't|don't|didn't|any idea|any chance|what's|how's|where's|"
    r"who's|wouldn't|shouldn't|couldn't)\b"
)
_RULE_START = re.compile(
    r"^(?:always|never|don't|do not|dont|avoid|make sure|ensure|be sure|stick (?:with|to)|only use|use|keep using|"
    r"no more|stop using|prefer|we (?:always|never|use|are using|don't use|do not use|prefer|only|stick)|"
    r"we're using|i (?:always|never|prefer|use|like|don't like|hate|would rather)|i'd rather|we'd rather)\b"
)
_PREFERENCE = re.compile(
    r"^(?:i|we)(?: would|'d)? (?:like|want|need) (?!to\b|you\b|us\b|help\b|an? \w+ (?:to|for|of|on)\b)"
)
_DONE_BY_YOU = re.compile(
    r"^(?:i|we)(?: would|'d)? (?:want|need|like) (?:it|them|this|that|these|those|"
    r"(?:the|our|my|this|that|these|those|all|every) (?:[\w./-]+ ){0,3}?[\w./-]+) "
    r"(?:\w+ed|done|split|built|made|written|rewritten|found|sent|set up|cut|put|run|shown|kept|taken|torn down|"
    r"broken up|shut down|paid|undone|gone)\b"
)
"""A request said as what the user wants done ("I want it split into modules.", "We need the cause found and
fixed."), not a preference for a thing ("I'd like the output as JSON.")."""
_CJK_ASK = re.compile(
    r"帮我|幫我|^请|^請|请你|請你|麻烦你|麻煩你|你(?:直接|先|来|來)|(?:て|で)(?:ください|下さい|ほしい|もらえ|くれ)|"
    r"お願い|주세요|해\s?줘|부탁"
)
"""A request in Chinese, Japanese or Korean ("你直接帮我整理一个大纲", "調べてください", "정리해 주세요")."""
_CJK_NOT = re.compile(r"不要|别|別|不用|不必|しないで|하지\s?마")
_LABELLED = re.compile(r"^[a-z][\w /-]{1,30}:\s+\S")
_WANT_OTHER = re.compile(
    r"^(?:(?:primeiro|primero|ahora|agora|d'abord|maintenant|zuerst|jetzt|prima|ora|najpierw|teraz|eerst|nu)\s+)?"
    r"(?:quero|queremos|quiero|queremos|je veux|on veut|nous voulons|ich will|ich m[öo]chte|wir wollen|wir m[öo]chten|"
    r"voglio|vogliamo|chc[eę]|chcemy|ik wil|we willen)\s+(?!(?:\w+\s+)?(?:no|n[ãa]o|pas|plus|nicht|kein\w*|non|nie|"
    r"niet|geen)\b)\w"
)
"""A request said as what the user wants done, in other languages ("primeiro quero quitar o cartão", "quiero migrar
todo a pgBackRest"), not negated ("Ich will aber keine neue Bibliothek")."""
_FOCUS = re.compile(
    r"^(?:(?:just |only )?focus on|concentrate on|concentre[- ]toi|concentrez[- ]vous|"
    r"konzentrier(?:e|en sie)? (?:dich|sich)|c[ée]ntrate|conc[ée]ntrate|c[ée]ntrese|concentrati|concentratevi|"
    r"foca(?:-te)?|foque|skup si[ęe]|focus je)\b"
)
"""A narrowing of the task to one part of it ("Focus on that.", "Concentre-toi là-dessus.", "Céntrate en eso.")."""
_NAMED_THING = re.compile(r"^[\w-]+\s+v?\d")
"""A sentence that opens with a thing and its number ("Release 2.8 is on March 15."), not an order."""
_LEAD_CLAUSE = re.compile(r"^[^,;:?]{1,60},\s*")
"""A short clause before the main one ("So instead of the blog post, can you ...?"): the request follows it."""
_CONTINUE = re.compile(
    r"^(?:go on|go ahead|continue|keep going|carry on|proceed|try again|retry|do it|do that|fix it|fix that|"
    r"run it|yes do it|sounds good|go)\b[\s\w]{0,12}$"
)
_TASK_VERB = re.compile(
    r"^(?:add|adapt|analy[sz]e|automate|benchmark|book|build|bump|change|check|clean|compare|compile|configure|"
    r"convert|create|debug|delete|deploy|design|diagnose|document|draft|drop|enable|disable|explain|extend|extract|"
    r"figure out|find|finish|fix|generate|get|handle|help|implement|improve|install|integrate|investigate|keep|"
    r"list|look into|look at|make|merge|migrate|move|optimi[sz]e|organi[sz]e|patch|plan|port|prepare|profile|"
    r"prototype|publish|put|refactor|release|remove|rename|reorgani[sz]e|repair|replace|reproduce|research|"
    r"restructure|review|rewrite|run|schedule|set up|setup|ship|show|simplify|sort|speed up|split|start|"
    r"roll|revert|restore|recover|resolve|refund|cancel|reply|respond|send|rotate|renew|restart|"
    r"provision|rebuild|backfill|triage|audit|reconcile|forecast|estimate|recommend|evaluate|assess|outline|"
    r"propose|write up|clean up|turn|"
    r"summari[sz]e|support|test|trace|translate|try|tune|update|upgrade|validate|verify|wire|work on|write)\b"
)
_STEP_VERB = re.compile(
    r"^(?:show|explain|list|check|look at|run|try|tell|describe|print|open|read|get|give|remind|paste|send)\b"
)
_LINKING = re.compile(
    r"\b(?:is|are|was|were|am|'s|'re|'m|has|have|had|will be|uses?|runs?|lives?|sits?|points?|belongs?|needs?|"
    r"requires?|expects?|depends?|listens?|contains?|deploys?|hosts?|stores?|owns?|handles?|works?|costs?|takes?|"
    r"supports?|targets?|goes|meets?|reads?|writes?|ships?|starts?|ends?|expires?|lasts?|holds?|serves?|"
    r"manages?|leads?|reports?|limits?|allows?|caps?|happens?|(?:should|must|will|can|could|would|may|might) be)\b"
)
_VAGUE_SUBJECT = re.compile(r"^(?:that|this|it|it's|that's|there|i|i'm|we|we're|you|you're)\b")
_SPECIFIC = re.compile(r"\d|[`'\"]|\w[_./:=@-]\w")


_ABBREVIATION = re.compile(
    r"(?:^|[\s(])(?:(?i:e\.g|i\.e|vs|approx|cf|incl|z\.\s?b|d\.\s?h|p\.\s?ex|nr|n°)|Dr|Mr|Mrs|Ms|Prof|Mme|Sr|Sra)\.$"
)


def _split_sentences(text: str) -> list[str]:
    """Sentences of ``text``, line by line; a stop after an abbreviation ("e.g.", "vs.", "z.B.") ends none."""
    found: list[str] = []
    for line in text.splitlines():
        pieces: list[str] = []
        for piece in _STOP_SPLIT.split(line):
            if pieces and _ABBREVIATION.search(pieces[-1]):
                pieces[-1] = f"{pieces[-1]} {piece}"
            else:
                pieces.append(piece)
        found += [piece.strip() for piece in pieces if piece.strip()]
    return found


def _sentences(text: str) -> list[str]:
    return [s for s in _split_sentences(text) if _words(s) >= 3]


def _all_sentences(text: str) -> list[str]:
    return _split_sentences(text)


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def _is_question(text: str, original: str) -> bool:
    return original.rstrip().endswith(("?", "？")) or bool(_QUESTION_START.match(text))


def _is_fact(text: str, original: str) -> bool:
    """A declarative sentence that states something specific (a name, a value, a date, an owner)."""
    if _words(text) < 3:
        return False
    if not _LINKING.search(text):
        return False
    specific = bool(_SPECIFIC.search(original) or re.search(r"\s[A-Z]", original))
    # "That works", "It looks good", "I was away": kept only with something specific in them.
    return specific or not _VAGUE_SUBJECT.match(text)


def classify_user_sentence(sentence: str) -> SentenceKind:
    """What one sentence of a user message does.

    * ``new_task``: an explicit change of task ("Now ...", "Next, ...", "New task: ...",
      "... instead." but not "instead of");
    * ``follow_up``: an addition to the current task ("Also add a flag.", "And keep the logs.");
    * ``continue``: a go-ahead without a task of its own ("Go on.", "Try again.", "Fix it.");
    * ``request``: a task, as an imperative ("Write the deploy script.") or a polite request
      ("Can you add retries?", "I need you to ...", "Let's add caching.");
    * ``step``: a request to look at or run something on the way ("Run the tests.", "Show me
      the diff.", "Explain this error."): it serves the task rather than changing it;
    * ``question``: anything else that asks ("What does the error mean?");
    * ``decision``: a rule, a preference or a choice ("Always run the linter.", "Never push to
      main.", "We use Postgres 16.", "I prefer pytest.", "We decided to ...");
    * ``fact``: a statement of something specific ("The staging cluster is called kestrel.",
      "The deadline is March 14.", "Our CI runs on GitHub Actions.");
    * ``other``: a remark that is not specific enough to keep ("That looks good.");
    * ``chat``: nothing but small talk ("Thanks!", "Hi.").
    """
    original = clean_line(sentence)
    text = _FILLER.sub("", original.lower()).strip().rstrip(".!?;: ")
    if not text:
        return "chat"
    if _NEW_TASK.match(text) or _INSTEAD.search(text) or text.startswith("new task"):
        rest = _NEW_TASK.sub("", text, count=1).strip()
        if rest and not (_is_question(rest, original) and not _POLITE.match(rest)):
            return "new_task"
    follow = _FOLLOW_UP.match(text)
    if follow:
        rest = _POLITE.sub("", text[follow.end() :], count=1).strip()
        if _TASK_VERB.match(rest) or _RULE_START.match(rest):
            return "follow_up"
        text = text[follow.end() :].strip() or text
    polite = _POLITE.match(text)
    lead = None if polite else _LEAD_CLAUSE.match(text)
    if lead is not None and _POLITE.match(text[lead.end() :]):  # "So instead of the blog post, can you ...?"
        text = text[lead.end() :]
        polite = _POLITE.match(text)
    rest = _POLITE.sub("", text, count=1).strip() if polite else text
    if _DONE_BY_YOU.match(text):
        return "request"
    if polite and _TASK_VERB.match(rest) and not _RULE_START.match(rest) and original.rstrip().endswith("?"):
        return "step" if _STEP_VERB.match(rest) else "request"  # asked for, whatever "instead of" it also says
    if _DECISION_CUE.search(text) or _RULE_START.match(rest) or _PREFERENCE.match(text):
        return "decision"
    if _CONTINUE.match(rest):
        return "continue"
    if _CJK_ASK.search(original) and not _CJK_NOT.search(original):
        return "request"
    core = _WIDEN.sub("", _LEAD_CLAUSE.sub("", rest, count=1), count=1).strip()  # "mira, ya que estamos, quiero ..."
    if any(_WANT_OTHER.match(part) or _FOCUS.match(part) for part in (rest, core)):
        return "request"
    ordered = _TASK_VERB.match(text) and not _NAMED_THING.match(text) and not original.rstrip().endswith("?")
    if polite or ordered or _DELIVERABLE_OTHER.match(rest):
        return "step" if _STEP_VERB.match(rest) else "request"
    if _is_question(text, original):
        return "question"
    if _is_fact(text, original):
        return "fact"
    if _LABELLED.match(text) and _SPECIFIC.search(original):  # "Budget: 2 engineers, 3 weeks."
        return "fact"
    return "other"


_STATED: tuple[SentenceKind, ...] = ("decision", "fact")


def user_statements(text: str) -> list[tuple[str, str]]:
    """The facts and decisions a user message states, as ``(section, sentence)`` pairs, in order.

    Decisions (rules, preferences, choices) go to Decisions, facts to Important Discoveries.
    Questions, requests and small talk are left out: the goal keeps the request.
    """
    found: list[tuple[str, str]] = []
    for sentence in _all_sentences(text):
        kind = classify_user_sentence(sentence)
        if kind == "decision":
            found.append((DECISIONS, sentence))
        elif kind == "fact":
            found.append((DISCOVERIES, sentence))
    return found


GoalEffect = Literal["set", "extend", "keep"]


_ASKING: tuple[SentenceKind, ...] = ("request", "new_task", "follow_up", "question", "step")


def _goal_effect(kinds: list[SentenceKind], has_task: bool) -> GoalEffect:
    """Whether a user message made of sentences of ``kinds`` sets, extends or keeps the goal."""
    if "new_task" in kinds:
        return "set"
    if has_task and "follow_up" in kinds and "request" not in kinds:
        return "extend"
    if "request" in kinds or "follow_up" in kinds:
        return "set"
    if not has_task and any(kind in ("question", "step", "other") for kind in kinds):
        return "set"  # no task yet: what the user asked or said last stands in for one
    return "keep"


def goal_effect(message: str, previous_goal: str) -> GoalEffect:
    """Whether ``message`` sets a new goal, extends ``previous_goal`` or leaves it (see :func:`next_goal`)."""
    kinds = [classify_user_sentence(sentence) for sentence in _all_sentences(message)]
    has_task = any(classify_user_sentence(s) in _ASKING for s in _all_sentences(previous_goal))
    return _goal_effect(kinds, has_task)


def _without_chat(text: str) -> str:
    """``text`` without its sentences of small talk ("Hi!", "Good.", "Bonjour !"): a goal pays for each word."""
    sentences = _all_sentences(text)
    kept = [s for s in sentences if classify_user_sentence(s) != "chat"]
    return clean_line(" ".join(kept)) if kept and len(kept) < len(sentences) else text


def _without_statements(text: str) -> str:
    """``text`` without the facts and decisions it states, but with its first sentence, which names the subject,
    and the choices and narrowings that shape the task (:func:`_refines`)."""
    sentences = _all_sentences(text)
    kept = [s for i, s in enumerate(sentences) if i == 0 or classify_user_sentence(s) not in _STATED or _refines(s)]
    return clean_line(" ".join(kept))


_DUE = re.compile(
    r"\b(?:deadline|due|by (?:mon|tues|wednes|thurs|fri|satur|sun)day|by (?:tomorrow|tonight|eod|the end)|today|"
    r"tonight|tomorrow|asap|morgen|vandaag|heute|bis (?:morgen|montag|freitag|ende)|demain|aujourd'hui|mañana|hoy|"
    r"amanh[ãa]|hoje|domani|oggi|entro)\b|今天|明天|之前|今日|明日|までに"
)
"""When the task is due ("by Friday", "tomorrow", "morgen", "entro"): part of the goal, kept before other context."""


_IDENTIFIER = re.compile(r"\w[-_./#:]\w|\d|\b[A-Z][a-z]+\s[A-Z][a-z]+|\b[A-Z]{2,}\b")
"""What names the subject of a task: an identifier ("INC-2291", "prod-eu-1"), a number, a two-word name ("Maple
Court"), an acronym."""


def _cut_rank(sentence: str) -> tuple[bool, bool]:
    """Which sentences a cut goal keeps first after its first sentence and first ask: when it is due, then what
    names the subject (an identifier, a number, a name), then the rest, each in order."""
    return not _DUE.search(sentence.lower()), not _IDENTIFIER.search(sentence)


def _goal_core(text: str, counter: TokenCounter | None = None, cap: int = 0) -> str:
    """What a long goal keeps when cut: its first sentence (which names the subject) and what it asks for.

    With ``counter`` and ``cap``, only its first ask is sure to stay (the later ones say how, "Make it
    concrete."), and the other sentences follow, in order, while they fit: what the user said about the
    task ("It's the standard CRC-32.", "Priya will do it.") comes before the details asked after it.
    """
    sentences = _all_sentences(text)
    asking = [i for i, s in enumerate(sentences) if i and classify_user_sentence(s) in _ASKING]
    kept = {0, *asking[:1]} if counter is not None else {0, *asking}
    if counter is not None:
        used = counter.count(" ".join(sentences[i] for i in sorted(kept)))
        order = sorted(range(len(sentences)), key=lambda i: _cut_rank(sentences[i]))
        for i in order:
            cost = counter.count(sentences[i]) + 1
            if i not in kept and used + cost <= cap:
                kept.add(i)
                used += cost
    return clean_line(" ".join(sentences[i] for i in sorted(kept)))


def next_goal(
    previous_goal: str, message: str, counter: TokenCounter, cap: int, effect: GoalEffect | None = None
) -> tuple[str, list[tuple[str, str]]]:
    """The goal after one more user message, and the statements that must now live as bullets.

    The goal is the task the user set: a request or an explicit change ("Now ...", "Instead
    ...", "New task: ...") replaces it; a follow-up ("Also ...") is appended to it; a question,
    a step on the way ("Run the tests."), a go-ahead ("Go on."), a stated fact or a decision
    leaves it as it is. Until the user asked for something (no sentence of the goal is a
    request or a question), the goal is a stand-in: the latest question or remark replaces it.

    The goal keeps the message whole, facts included ("Our exporter writes NaN. Fix it."),
    so nothing is said twice. What it stated is handed back (as :func:`user_statements`
    pairs) when it stops holding it: when the goal is replaced, and when a goal longer than
    ``cap`` tokens would have to be cut (then its statements move out first, and the first
    sentence, which names the subject, stays with what is asked and the other sentences that fit). ``effect`` overrides
    :func:`goal_effect`.
    """
    effect = effect or goal_effect(message, previous_goal)
    if effect == "keep":
        return previous_goal, []
    text = _without_chat(clean_line(message))
    if effect == "set":
        if counter.count(text) > cap:
            return _cut(_goal_core(text, counter, cap) or text, counter, cap, 0), [
                *user_statements(previous_goal),
                *user_statements(text),
            ]
        return text, user_statements(previous_goal)
    if counter.count(f"{previous_goal} {text}") <= cap:
        return f"{previous_goal} {text}", []
    displaced = [*user_statements(previous_goal), *user_statements(text)]
    text = _without_statements(text) or text
    room = cap - counter.count(text) - 1  # the newest request is kept whole; the older part is cut
    if room <= 8 < cap // 3:  # but the older part, which names the task, keeps a third of the cap
        room = cap // 3
        text = _cut(_goal_core(text, counter, cap - room - 1), counter, cap - room - 1, 0)
    goal = f"{_older_part(previous_goal, counter, room)} {text}" if room > 8 else text
    return _cut(goal, counter, cap, 0), displaced


def _older_part(goal: str, counter: TokenCounter, room: int) -> str:
    """A goal cut to ``room`` tokens to make way for what a later message adds to it: its core (see
    :func:`_goal_core`); when its first sentence alone is longer than the room, that sentence is cut so that
    the goal's first ask stays whole ("I just got out of a meeting: legal… What I need now is: can pgvector
    ...?")."""
    sentences = _all_sentences(goal)
    ask = next((s for s in sentences[1:] if classify_user_sentence(s) in _ASKING), "")
    rest = room - counter.count(ask) - 1
    if ask and sentences and counter.count(sentences[0]) > room and rest >= 8:
        return f"{_cut(sentences[0], counter, rest, 0)} {ask}"
    return _cut(_goal_core(goal, counter, room) or goal, counter, room, 0)


def _not_the_user(line: str) -> str:
    """A bullet from a tool or the assistant, which cannot pass itself off as the user's words."""
    while line.startswith(USER_MARK):
        line = line[len(USER_MARK) :].lstrip()
    return line


def _stored_output_line(content: str) -> str:
    """An externalized output's reference, said in words; any other output unchanged."""
    if not content.startswith('{"result_id"'):
        return content
    try:
        reference = json.loads(content)
        where, size = str(reference["result_id"]), int(reference["size"])
        preview = _first_line(str(reference.get("summary", "")))
    except (ValueError, KeyError, TypeError):
        return content
    return f"output of {size:,} bytes stored as tool result {where}: {preview}"


# ---- what a message does (the whole-run extractive summary)

_GOAL_LABEL = re.compile(
    r"^\W*(?:(?:new|current|main|updated|revised|the)\s+)?(?:goal|task|objective|aim|mission|ziel|aufgabe|objectif|"
    r"t[aâ]che|objetivo|tarea|meta|tarefa|obiettivo|compito)\s*[:\-–]\s*",
    re.IGNORECASE,
)
_CHANGE_CUE = re.compile(
    r"\b(?:change of plans?|plans? (?:have |has )?changed|new plan|new task|new goal|different task|"
    r"what (?:i|we|she|he|they) (?:actually |really )?needs? (?:from you )?(?:now |instead )?is|"
    r"switch(?:ing)? gears|pivot|change of (?:direction|priorit(?:y|ies))|"
    r"priorit(?:y|ies) (?:has |have )?(?:changed|shifted)|"
    r"new (?:priority|request|assignment|ask)|different (?:question|request|task|topic)|"
    r"nouvelle t[aâ]che|changement de (?:plan|programme)|nouvel objectif|neue aufgabe|plan(?:ä|ae)nderung|neues ziel|"
    r"cambio de planes?|nueva tarea|nuevo objetivo|mudan[cç]a de planos?|nova tarefa|novo objetivo|"
    r"cambio di (?:programma|piano|programmi|piani)|cambiamo (?:piano|programma)|nuovo (?:compito|obiettivo)|"
    r"mud(?:a|ou|ar|amos) (?:o|de) plano|zmiana planu|zmieniamy plan|nowe zadanie|verandering van plan|"
    r"ander plan|nieuwe taak)\b|予定変更|計画変更|方針変更|计划有变|計劃有變|改计划|换个方向",
    re.IGNORECASE,
)
"""An explicit change of goal wherever it stands in a sentence ("Ugh, change of plan.")."""
_CHANGE_START = re.compile(
    r"^(?:forget (?:that|the|it|about)|scratch (?:that|this|the|it)|moving on|let's move on|switch(?:ing)? to|"
    r"never ?mind|"
    r"on second thought|drop (?:that|this|the)|park (?:that|this|the)|put (?:that|this|the) .{0,40}(?:aside|on hold)|"
    r"hold off (?:on )?(?:that|this|the|it)|pause (?:that|this|the)|"
    r"(?:wait|hold on|actually)[\s,.!-]+(?:actually[\s,]+)?(?:don't|do not|let's not|no need|stop|skip|forget|scratch|"
    r"drop)\b[^.!?;,]*|stop (?:there|here|that|this)|no need to (?:continue|go on|keep going|(?:go|dig|look) (?:any )?"
    r"(?:further|deeper))|"
    r"oublie[zs]? (?:ça|la|le)|laisse tomber|pas besoin d'aller plus loin|arr[êe]te(?:z)? (?:là|ça)|"
    r"vergiss (?:das|die|den)|lass (?:das|es) (?:gut )?sein|nicht weiter|"
    r"olvida (?:eso|lo|la|el)|no hace falta seguir|d[ée]jalo|esquece (?:isso|o|a)|n[ãa]o precisa continuar|"
    r"lascia (?:perdere|stare)|non serve (?:continuare|andare avanti)|laat maar|vergeet (?:dat|het)|"
    r"(?:donc |alors )?(?:finalement )?on laisse tomber|olv[ií]da(?:te)? de|esquece|deixa (?:pra|para) l[áa]|"
    r"zapomnij o|niewa[żz]ne|od[łl][óo][żz]my)\b|"
    r"^(?:不用再|不要再|别再|別再|不必再|算了|先不[用要]|もういい|やめて|그만)"
)
"""A change of goal that only counts at the start of a sentence ("Don't forget the tests." is none): the user sets
the current work aside ("Forget that", "Wait, actually don't ...", "No need to dig further", "不用再往下挖了"). It
changes the goal only when the message then asks for something new ("Never mind, it works now." asks nothing)."""
_COMMITMENT = re.compile(
    r"\b(?:we(?:'ll| will| are going to| won't| will not| should| keep| stick| use)|i(?:'ll| will) (?:use|keep|go|add|"
    r"write|pin|switch|leave|not|make|set|change|move|drop|replace|skip|do|implement|fix|open|file)|let's|let us|"
    r"decided|decision|agreed|going with|go with|settled on|chose|choose|opted|instead|rather than|"
    r"keep(?:s|ing)?\b.{0,60}\b(?:unchanged|as (?:is|they are|it is)|the same|exactly|intact|stable)|"
    r"stays? (?:the same|unchanged|as|exactly)|remains? (?:the same|unchanged)|don't|do not|never|always|"
    r"must(?:n't| not)?|won't|skip|separate(?:ly)?|not in this|out of scope|pin(?:ned)?|prefer|"
    r"only (?:use|run|touch|change|ship|deploy|keep|apply|send)|"
    r"the plan is|plan:|approach:|"
    r"on (?:part|garde|ne touche|va|reste)|nous allons|d[ée]cid|pas de|ne (?:pas|touche)|garder|plut[oô]t|"
    r"vamos a|usaremos|decid|no (?:toques|usar|vamos|tocar)|mant[eé]n|mantener|mejor|en lugar de|dejamos|"
    r"vamos|n[ãa]o (?:mexer|usar|vamos)|manter|mantenha|em vez de|fica(?:mos)?|"
    r"wir (?:machen|nehmen|bleiben|lassen|werden|wollen)|machen wir|bleibt|keine?|nicht|separat|stattdessen|"
    r"entschieden|lieber)\b",
    re.IGNORECASE,
)
_NARRATION = re.compile(
    r"^(?:let me|let's (?:check|look|see|start|try|confirm|verify)|i'll (?:check|look|start|pull|read|run|try|"
    r"confirm|verify|see|dig|grab|fetch|open)|now (?:let me|i'll|the|for)|starting with|pulling|checking|looking|"
    r"reading|running|making the|fetching|opening|searching|one moment|ok(?:ay)?|got it|sure|thanks|"
    r"great|good|perfect|done\.?$|on it|here(?:'s| is) (?:the|a|what))\b",
    re.IGNORECASE,
)
_CONCLUSION = re.compile(
    r"\b(?:root cause|the cause|caused by|because|so the|that's why|which means|means|confirmed|found|turns out|"
    r"explains|the problem|the issue|the reason|result|shows?|matches|verified|passed|failed|fails|"
    r"la cause|parce que|donc|weil|ursache|daher|porque|la causa|por eso|a causa)\b",
    re.IGNORECASE,
)
_FAILURE = re.compile(
    r"\b(?:fails?|failing|failed|error|exception|traceback|broken|blocked|still|not yet|todo|unresolved|"
    r"open question|unclear|pending|waiting|need(?:s)? (?:to|sign-off|approval))\b",
    re.IGNORECASE,
)
_CODEISH = re.compile(r"`[^`]+`|\d[\d.,:%/-]*\w*|\w+[_./:@#=-]\w[\w./:@#=-]*|\b[A-Z][a-z]+[A-Z]\w*|\b[A-Z]{2,}\b")
_NAME = re.compile(r"(?<=[a-z,;]\s)[A-Z][a-zà-ÿ]+")
_CLAUSE_SPLIT = re.compile(r"(?<=[;:])\s+|\s+[—–]\s+|,\s+(?=(?:so|and|but|which|because|while|then)\b)|(?<=[；：])\s*")
_PAGE_HEADER = re.compile(r"^\[tool result (?P<id>\S+) \((?P<tool>[^)]*)\): (?P<what>characters|lines) (?P<a>\d+)-")
_PAGE_NUMBER = re.compile(r"page (?P<n>\d+) of (?P<of>\d+)")
_SEARCH_HEADER = re.compile(r"^\[search in tool result (?P<id>\S+) \((?P<tool>[^)]*)\)")
_TOOL_SUMMARY = re.compile(
    r"\b(?:passed|failed|errors?|exception|not found|denied|timed? ?out|refused|no such|rows?|matches|"
    r"hunks? applied|created|deleted|exit (?:code|status))\b",
    re.IGNORECASE,
)
_PAGING_TOOLS = ("load_tool_result", "search_tool_result")


@dataclass
class _Candidate:
    """A possible bullet: its section, text, score, position in the run and whether the user said it.

    ``score`` rates the kind of line (a user's decision over an assistant's remark); what the line
    names (numbers, identifiers, names) is counted by :func:`_select`, against what is already kept.
    """

    section: str
    text: str
    score: float
    order: int
    user: bool = False
    sentence: tuple[int, str] | None = None
    """For a clause of a sentence that was cut: which sentence (message order, the whole sentence) ..."""
    part: int = 0
    """... and which clause of it, so clauses of one sentence that are both kept make one bullet."""
    bold: bool = False
    """Whether its writer put words of it in bold ("**47,988** of them are parked at forwarder.go:88")."""


def _specificity(text: str) -> int:
    """How much a sentence names: numbers, code, identifiers, proper names (capped)."""
    return min(5, len(_CODEISH.findall(text)) + len(_NAME.findall(text)))


def _clauses(sentence: str, counter: TokenCounter, cap: int) -> list[str]:
    """A sentence, or its clauses when it is longer than ``cap`` tokens (each clause then is one bullet).

    A clause is never cut inside a code span (```max_retries: 0```), and a short label stays with
    what it labels ("Hotel da Ribeira: €145/night, 15 rooms free") when both fit in ``cap``.
    """
    if counter.count(sentence) <= cap:
        return [sentence]
    pieces = _split_outside_code(sentence)
    merged: list[str] = []
    for piece in pieces:
        label = merged[-1] if merged else ""
        if label.rstrip().endswith(":") and len(label.split()) <= _LABEL_WORDS:
            joined = f"{label.rstrip()} {piece.strip()}"
            if counter.count(joined) <= cap:
                merged[-1] = joined
                continue
        merged.append(piece)
    parts = [part.strip() for part in merged if _words(part) >= 3]
    return parts or [sentence]


_CUT_SLACK = 3
"""A cut may end this many tokens past its cap to keep whole the number or identifier the cap falls in."""


def _cut(text: str, counter: TokenCounter, cap: int, slack: int = _CUT_SLACK) -> str:
    """``text`` in at most ``cap`` tokens, cut at a space, never inside a word, a number or an identifier.

    A number or identifier the cap falls in or right before is kept whole when that costs at most
    ``slack`` tokens more ("31.400 €", "commit 3d81f0a"), else the cut goes before it: a
    token cut would leave a part ("31.…", "3d…") that names nothing and reads as a different value.
    Only a word so long that cutting before it would leave less than half the line is cut inside.
    """
    if cap <= 0 or counter.count(text) <= cap:
        return text
    head = counter.truncate(text, cap)[:-1]  # a prefix of text; the marker is put back below
    at = len(head)
    inside = bool(head) and not head[-1].isspace() and not text[at].isspace()
    start = head.rfind(" ") + 1 if inside else len(text) - len(text[at:].lstrip())
    end = text.find(" ", start)
    end = len(text) if end < 0 else end
    if _SPECIFIC_WORD.search(text[start:end]) and counter.count(text[:end].rstrip(" ,;:") + "…") <= cap + slack:
        head = text[:end]
    elif inside and counter.count(text[:start]) * 2 >= cap:  # a line that would keep too little keeps a part
        head = text[:start]
    return head.rstrip(" ,;:") + "…"


_LABEL_WORDS = 5
"""A clause this short that ends with ":" is a label ("Hotel da Ribeira:", "Root cause:")."""


_UNCUT = re.compile(r"`[^`]*`|\([^()]{1,80}\)|\[[^\[\]]{1,80}\]")
"""Where a clause is never cut: a code span (```max_retries: 0```), a short aside in brackets ("(FY22: 202.9m)")."""


def _split_outside_code(sentence: str) -> list[str]:
    """``sentence`` cut at its clause marks, but never inside a code span or a short aside in brackets."""
    parts, start = [], 0
    spans = [found.span() for found in _UNCUT.finditer(sentence)]
    for mark in _CLAUSE_SPLIT.finditer(sentence):
        if any(a < mark.start() < b for a, b in spans):
            continue
        parts.append(sentence[start : mark.start()])
        start = mark.end()
    return [*parts, sentence[start:]]


_FIRST_PERSON_PLAN = re.compile(
    r"\b(?:i(?:'ll| will| am going to|'m going to)\s+(?:also\s+|now\s+|then\s+)?(?P<verb>\w+)|"
    r"(?:i'm|i am)\s+(?:also\s+|now\s+)?(?P<doing>\w+ing)\b)",
    re.IGNORECASE,
)
_LOOKING = re.compile(
    r"^(?:check|look|see|start|pull|read|run|try|confirm|verify|dig|grab|fetch|open|search|think|need|have|be|get|"
    r"going|checking|looking|reading|running|trying|searching|pulling|fetching|opening|starting|thinking)$",
    re.IGNORECASE,
)


_DOING = re.compile(
    r"^(?!(?:no|some|any|every)thing\b|(?:morning|evening|during|string|thing)\b)(?P<verb>[a-z]+ing)\s+\S"
)
"""An action the assistant is taking as it speaks ("Adding status_code=201 to the route."), when no verb follows."""
_USE = re.compile(r"^(?:use|pass|set|buffer|pin|bump|raise|lower|return|register|keep|leave|wrap|call)\s")
"""An imperative that says how something is to be done ("Use a context with a timeout.")."""
_NOUN_FIRST = re.compile(r"^\w+\s+(?:is|are|was|were|has|have|had|stays?|remains?)\b")
"""A sentence whose first word is followed by its verb ("Buffer is 256."): that word is a noun, not an order."""


def _plans(sentence: str) -> bool:
    """Whether an assistant sentence commits to an action ("I'll generate the table with a const fn.",
    "I'm adding forbid(unsafe_code).", "Deploy the fix to one pod first."), not to looking around."""
    found = _FIRST_PERSON_PLAN.search(sentence)
    if found and not _LOOKING.match(found["verb"] or found["doing"]):
        return True
    text = _FILLER.sub("", sentence.lower()).strip()
    doing = _DOING.match(text)
    if doing and not _LOOKING.match(doing["verb"]) and not _LINKING.search(text):  # "Morning traffic is ..."
        return True
    if _NOUN_FIRST.match(text):  # "Buffer is 256.": the first word is what the sentence is about
        return False
    return bool(_TASK_VERB.match(text) or _USE.match(text)) and not _STEP_VERB.match(text)


def _table_row(line: str) -> str:
    """A Markdown table row said as "first cell: other cells" (fewer tokens than the pipes); a rule row is ""."""
    cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
    cells = [cell for cell in cells if cell]
    if not cells or all(re.fullmatch(r":?-+:?", cell) for cell in cells):
        return ""
    return f"{cells[0]}: {', '.join(cells[1:])}" if len(cells) > 1 else cells[0]


def _assistant_candidates(text: str, order: int, counter: TokenCounter, cap: int) -> list[_Candidate]:
    """What an assistant message does, sentence by sentence: commits, concludes, asks or narrates."""
    found: list[_Candidate] = []
    lines = text.splitlines()
    rows = [row for row in (_table_row(line) for line in lines if line.lstrip().startswith("|")) if row]
    prose = "\n".join(line for line in lines if not line.lstrip().startswith("|"))

    for sentence in [*_sentences(prose), *rows]:  # a row is kept however short ("Total: 7,330")
        line = _not_the_user(clean_line(sentence))
        if not line or (_NARRATION.match(line) and not _specificity(line)):
            continue
        # a row stays one line: cut at its first cell's ":", its values would lose what they are about
        parts = [line] if sentence in rows else _clauses(line, counter, cap)
        for at, part in enumerate(parts):
            specific = _specificity(part)
            narration = bool(_NARRATION.match(part))
            if part.rstrip().endswith("?"):
                section, score = OPEN_ISSUES, 1.0 + 0.5 * specific
            elif _COMMITMENT.search(part) or _plans(part):
                section, score = DECISIONS, 2.5 + specific
            elif _FAILURE.search(part) and not _CONCLUSION.search(part):
                section, score = OPEN_ISSUES, 1.5 + specific
            else:
                section = DISCOVERIES
                score = 0.5 + specific + (1.5 if _CONCLUSION.search(part) else 0.0)
            if narration:
                score -= 2.0
            if score > 0.5:
                where = (order, line) if len(parts) > 1 else None
                bold = bool(_BOLD.search(part))
                found.append(_Candidate(section, part, score - specific, order, sentence=where, part=at, bold=bold))
    return found


def _user_candidates(text: str, order: int, counter: TokenCounter, cap: int) -> list[_Candidate]:
    """What a user message states besides its task: decisions (rules, choices, constraints) and facts."""
    found: list[_Candidate] = []
    for sentence in _all_sentences(text):
        kind = classify_user_sentence(sentence)
        line = clean_line(sentence)
        if kind in ("chat", "continue") or _words(line) < 3:
            continue
        if kind == "question" and not _specificity(line):
            continue
        parts = _clauses(line, counter, cap)
        for at, part in enumerate(parts):
            specific = _specificity(part)
            if kind == "decision" or _COMMITMENT.search(part):
                section, score = DECISIONS, 4.0
            elif kind == "question":
                section, score = OPEN_ISSUES, 1.5
            elif kind == "fact" or (specific and _words(part) >= 5):
                section, score = DISCOVERIES, 3.0
            elif kind in ("request", "step", "follow_up", "other") and _words(part) >= 5:
                section, score = DECISIONS, 1.5
            else:
                continue
            where = (order, line) if len(parts) > 1 else None
            found.append(_Candidate(section, part, score, order, user=True, sentence=where, part=at))
    return found


def _tool_line(message: Message) -> tuple[str, str] | None:
    """A tool result's own summary line (``(section, line)``), or ``None``: its raw text is never copied."""
    content = message.content.strip()
    label = message.name or "tool"
    label = f"tool {label}" if f"{label}: ".startswith(USER_MARK) else label
    if _TOOL_ERROR.match(content):
        return OPEN_ISSUES, f"{label} failed: {clean_line(_first_line(content))}"
    lines = [clean_line(line) for line in content.splitlines() if line.strip()]
    short = [
        line for line in lines if len(line.split()) <= 12 and _TOOL_SUMMARY.search(line) and re.search(r"\d", line)
    ]
    if short:
        return DISCOVERIES, f"{label} reported: {short[-1]}"
    return None


_KEY_VALUE = re.compile(r"^[\"']?(?P<key>[A-Za-z][\w ./()-]{0,30}?)[\"']?\s*:\s+(?P<value>\S.*)$")
"""A tool output line that states one value under a short name ("Expiry Date: 2025-03-21", "Rows Removed by
Filter: 21904312", ``"id": "cus_Q8842",``)."""
_KEY_WORDS = 4
"""A name of more words than this is prose ("The build on staging took: ..."), not a field."""
_VALUE_WORDS = 10
"""A value of more words than this is a dump, not one fact."""
_LOG_KEY = re.compile(r"^(?:info|debug|warn(?:ing)?|error|trace|fatal|notice|note|hint|detail|at|line|file|see)$", re.I)
"""A name that marks a log or message line, whose text is not a value."""
_PROSE = re.compile(r"[.!?]\s+\S")
"""A value that holds more than one sentence is prose, not a field's value."""
_FIELDS_PER_RESULT = 4
"""At most this many field lines from one tool result: a long listing gives its first ones."""


def _tool_fields(content: str) -> list[str]:
    """The short "name: value" lines of a tool output whose value names something (a number, an identifier).

    The output's raw text is never copied: only a line that is one field and one value, each
    short, is said again as ``name: value`` (quotes and a trailing comma of JSON dropped). A
    field whose name says it holds a secret (:func:`secret_key`) is never said.
    """
    found: dict[str, str] = {}
    for raw in content.splitlines():
        line = raw.strip().rstrip(",;")
        match = _KEY_VALUE.match(line)
        if match is None:
            continue
        key, value = " ".join(match["key"].split()), match["value"].strip().strip("\"'").strip()
        if (
            not value
            or len(key.split()) > _KEY_WORDS
            or len(value.split()) > _VALUE_WORDS
            or _LOG_KEY.match(key)
            or secret_key(key)
            or secret_value(value)
            or _PROSE.search(value)
            or not _SPECIFIC_WORD.search(value)
            or value.startswith(("{", "["))
            or "..." in value
        ):
            continue
        if key.lower() not in found:  # a listing's first record, which a search or a report ranks first
            found[key.lower()] = clean_line(f"{key}: {value}")
        if len(found) == _FIELDS_PER_RESULT:
            break
    return list(found.values())


def _explicit_goal(content: str) -> tuple[str, str] | None:
    """``(before, goal)`` when the message states its goal explicitly ("Goal: ...", "New task: ...")."""
    text = content.strip()
    label = _GOAL_LABEL.match(text)
    if label:
        return "", text[label.end() :].strip()
    for sentence in _all_sentences(text):
        label = _GOAL_LABEL.match(sentence)
        opening = _FILLER.sub("", clean_line(sentence).lower()).strip()
        dismissal = not label and not _CHANGE_CUE.search(sentence) and _dismisses(opening) is not None
        added = not label and _FOLLOW_UP.match(opening)  # "Also, change of plan for the rest: don't book more."
        if (dismissal or added) and not _asks_after(text[text.find(sentence) :]):
            continue  # "Never mind, it works now.": no new ask
        if label or _CHANGE_CUE.search(sentence) or dismissal:
            at = text.find(sentence)
            rest = text[at:]
            if label:
                rest = rest[label.end() :]
            return text[:at].strip(), rest.strip()
    return None


def _without_cue(goal: str) -> str:
    """A new goal without a first sentence that only announces the change ("Change of plans."): it asks nothing."""
    sentences = _all_sentences(goal)
    if len(sentences) > 1:
        rest = _CHANGE_CUE.sub("", _FILLER.sub("", sentences[0].lower()))
        if not re.search(r"\w", rest):
            return clean_line(" ".join(sentences[1:]))
    return goal


_ADDED = re.compile(r"\b(?:also|too|as well|additionally)\b")
"""An ask that adds to the work at hand ("Can you also check the heap?"): no new task, whatever came before it."""


def _dismisses(opening: str) -> int | None:
    """Where the dismissal a sentence (lower-cased, filler removed) opens with ends, also after a short lead clause
    ("actually you know what, forget the flaky test", "weißt du was, vergiss das"); ``None`` without one."""
    found = _CHANGE_START.match(opening)
    if found:
        return found.end()
    lead = _LEAD_CLAUSE.match(opening)
    found = _CHANGE_START.match(opening[lead.end() :]) if lead else None
    return lead.end() + found.end() if lead and found else None


def _without_dismissal(goal: str) -> str:
    """A new goal without a first sentence that only sets the old work aside ("Stop there."), when it is cut."""
    sentences = _all_sentences(goal)
    opening = _FILLER.sub("", clean_line(sentences[0]).lower()).strip() if sentences else ""
    if len(sentences) > 1 and _dismisses(opening) is not None and not _asks_after(sentences[0]):
        return clean_line(" ".join(sentences[1:]))
    return goal


def _asks_after(text: str) -> bool:
    """Whether ``text`` (a change of goal and what follows it) asks for something new: a request or a question."""
    for sentence in _all_sentences(text):
        opening = _FILLER.sub("", clean_line(sentence).lower()).strip()
        rest = opening[_dismisses(opening) or 0 :].strip(" ,:;-")
        cue = _CHANGE_CUE.search(opening)
        after = opening[cue.end() :].strip(" ,:;-") if cue else ""  # "Change of plan: primeiro quero ..."
        if _ADDED.search(rest) or _FOLLOW_UP.match(opening):
            continue
        if any(part and classify_user_sentence(part) in _ASKING for part in (rest, after)):
            return True
    return False


def _asks(text: str) -> bool:
    """Whether a user text asks for something (a request, a change of task, a question), not only states things."""
    return any(classify_user_sentence(s) in _ASKING for s in _all_sentences(text))


def _requests(text: str) -> bool:
    """Whether a user text asks for work to be done (a request, a step, a change of task), not only a question."""
    return any(classify_user_sentence(s) in ("request", "new_task", "follow_up", "step") for s in _all_sentences(text))


def _is_task(goal: str) -> bool:
    """Whether a goal is a task the user set, not a stand-in remark ("Hello there.") a later message replaces."""
    sentences = _all_sentences(goal)
    return any(classify_user_sentence(s) in _ASKING for s in sentences) or _words(goal) >= 6


_BACK_REFERENCE = re.compile(r"^(?:please\s+)?\w+\s+(?:it|this|that|these|those|them|the (?:fix|change|patch))\b")


def _changes_task(sentence: str) -> bool:
    """Whether a user sentence opens with a change of task ("Now ...", "Instead, ...", "New task: ...")."""
    text = _FILLER.sub("", clean_line(sentence).lower()).strip()
    if classify_user_sentence(sentence) != "new_task" or not _NEW_TASK.match(text):
        return False
    rest = _NEW_TASK.sub("", text, count=1).strip()
    # "Next, run the tests." / "Now deploy it to staging.": a step on the way, or more work on what is at hand
    if _STEP_VERB.match(rest) or _BACK_REFERENCE.match(rest):
        return False
    return not _NEXT_CUE.match(text)


_NEXT_CUE = re.compile(r"^(?:now|next|then)\b")
"""A change of task that only says what comes next ("Now add the tests."): more work on the goal, which it extends."""


_DELIVERABLE = re.compile(
    r"^(?:make|write|draft|produce|create|prepare|build|put together|generate|compile|give)(?: me| us)? "
    r"(?:a|an|the|that|this|those|these|it|them)(?: up)?\s"
)
"""A request for a new piece of work ("make me a checklist for the other 10"): it adds to the goal."""


_DELIVERABLE_OTHER = re.compile(
    r"^(?:prep[aá]rame|escr[ií]beme|hazme|red[aá]ctame|pr[ée]pare-moi|r[ée]dige-moi|[ée]cris-moi|fais-moi|"
    r"schreib(?:e)? mir|erstell(?:e)? mir|mach(?:e)? mir|prepara-me|escreve-me|faz-me|preparami|scrivimi|fammi)"
    r"\s+(?:un|una|une|ein|eine|einen|um|uma|uno)\b|^(?:schrijf|maak)(?: me| mij| ook| nog)* een\b"
)
"""The same in Spanish, French, German, Portuguese, Italian and Dutch ("prepárame un correo", "schreib mir eine
Mail", "schrijf ook een bericht")."""


def _new_deliverable(sentence: str) -> bool:
    """Whether a user sentence, or a clause of it after a dash or a semicolon, asks for a new thing to be made
    ("Write me a summary for the team.", "I don't want to accuse anyone — write it up neutrally for LP.")."""
    for clause in re.split(r"\s[—–]\s|;\s", clean_line(sentence)):
        text = _POLITE.sub("", _FILLER.sub("", clause.lower()).strip(), count=1).strip()
        if _DELIVERABLE_OTHER.match(text):
            return True
        if classify_user_sentence(clause) == "request" and _DELIVERABLE.match(text):
            return True
    return False


_CHOICE = re.compile(
    r"^(?:(?:ok(?:ay)? |so |then |alright |fine )?(?:let's |we'll |we will |i'll )?(?:go|going) with|"
    r"(?:let's|we'll|we will) (?:use|pick|take)|pick|(?:i|we) (?:pick|choose|chose|prefer) (?!not\b)|"
    r"on part sur|on prend|on choisit|on garde|partons sur|(?:wir )?nehmen (?:wir )?|wir machen|machen wir|"
    r"vamos (?:con|a usar|de|com)|nos quedamos con|ficamos com|andiamo (?:con|su)|scegliamo|prendiamo|"
    r"bierzemy|wybieramy|idziemy w|zr[óo]bmy tak|we gaan voor|we nemen)\b"
)
"""A choice between options ("Let's go with Resend.", "On part sur HelloAsso.", "Zróbmy tak: ...")."""
_ONLY = re.compile(
    r"^(?:(?:but |and )?(?:now |for now |teraz |nu |jetzt |ahora |agora |maintenant |ora )?"
    r"(?:only|nur|tylko|solo|s[óo]lo|seulement|uniquement|alleen|s[óo] (?:o|a|os|as))\s+(?!if\b|when\b|after\b)\w)"
)
"""A narrowing of the task to a part of it ("Only reports/ for now.", "teraz tylko checkout", "nur der Vorstand")."""


_PROPOSAL = re.compile(
    r"^(?:what|how) about\s+(?!(?:it|that|this|them|you)\b)\S.*\binstead\b|"
    r"^(?!(?:that|this|it|everything|all|which|what|one|each)\b)[\w.+/-]+(?:\s[\w.+/-]+){0,2}\s(?:is|are|sounds|works)\s"
    r"(?:fine|ok|okay|good|great|perfect)\b(?!\s+to\b)|"
    r"(?:で|にして|にしよう|にしましょう|でどう|でお願い)[。？?]?$"
)
"""A parameter the user puts in place ("What about Porto instead?", "pytest-xdist is fine.", "鎌倉で。")."""


def _refines(sentence: str) -> bool:
    """Whether a user sentence decides how the task is to be done: a choice between options, a parameter put in
    place, or a narrowing of it."""
    text = _FILLER.sub("", clean_line(sentence).lower()).strip()
    if _PROPOSAL.search(text):
        return True
    lead = _LEAD_CLAUSE.match(text)
    return any(bool(_CHOICE.match(part) or _ONLY.match(part)) for part in (text, text[lead.end() :] if lead else ""))


def _next_step(sentence: str) -> bool:
    """Whether a user sentence asks for the next piece of work on the goal ("Now add the tests for it.")."""
    text = _FILLER.sub("", clean_line(sentence).lower()).strip()
    if not _NEXT_CUE.match(text) or classify_user_sentence(sentence) != "new_task":
        return False
    rest = _NEW_TASK.sub("", text, count=1).strip()
    return not (_STEP_VERB.match(rest) or _BACK_REFERENCE.match(rest))


_WIDEN = re.compile(
    r"\b(?:while (?:we're|we are|you're|you are|i'm) at it|on top of that|ya que estamos|de paso|tant qu'on y est|"
    r"wo wir (?:schon )?dabei sind|j[áa] que estamos|gi[àa] che ci siamo|skoro ju[żz]|nu we toch bezig zijn)\b[\s,]*"
)
"""A widening of the task ("While we're at it, ...", "ya que estamos, quiero migrar todo a pgBackRest")."""


def _extends(sentence: str) -> bool:
    """Whether a user sentence adds a task to the goal ("Also add a flag.", "While we're at it, move the cron
    job too."), not a rule ("And don't ...")."""
    text = _FILLER.sub("", clean_line(sentence).lower()).strip()
    widen = _WIDEN.search(text)
    if widen and classify_user_sentence(text[widen.end() :]) in ("request", "new_task", "follow_up"):
        return True
    follow = _FOLLOW_UP.match(text)
    if not follow:
        return False
    rest = _POLITE.sub("", text[follow.end() :], count=1).strip()
    return bool(_TASK_VERB.match(rest)) and not _RULE_START.match(rest)


def _collapse_tools(tools: list[Message], pages: dict[str, list[int]]) -> list[str]:
    """One Completed line per kind of tool call: "read_file ×3", and "read result r-3 (pages 1-50)"."""
    counts: dict[str, int] = {}
    for message in tools:
        name = message.name or "tool"
        if name in _PAGING_TOOLS:
            continue
        counts[name] = counts.get(name, 0) + 1
    lines: list[str] = []
    if counts:
        lines.append("ran " + ", ".join(f"{name} ×{n}" if n > 1 else name for name, n in counts.items()))
    for result_id, seen in pages.items():
        numbers = sorted(set(seen))
        if not numbers:
            lines.append(f"searched result {result_id}")
            continue
        span = f"page {numbers[0]}" if len(numbers) == 1 else f"pages {numbers[0]}-{numbers[-1]}"
        lines.append(f"read result {result_id} ({span})")
    return [line if not line.startswith(USER_MARK) else f"tool {line}" for line in lines]


_ARGUMENT_CHARS = 60
"""An argument value longer than this (a file's content, a whole query) is data, not what the call was about."""


_SECRET_WORDS = frozenset(
    {
        "pass", "password", "passwd", "passphrase", "pwd", "secret", "token", "apikey", "auth", "authorization",
        "credential", "credentials", "private", "privatekey", "cookie", "bearer", "otp", "pin",
    }
)  # fmt: skip
"""The words of a name that say its value is a secret ("api_key", "authToken", "DB_PASSWORD")."""
_NAME_WORDS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")


def secret_key(name: str) -> bool:
    """Whether an argument or field name says its value is a secret: a whole word of it does.

    The name is cut into words at "_", "-", ".", spaces and camelCase ("authToken" is "auth",
    "token"), and two neighbours are also read together ("api_key" is "apikey"). Only a whole
    word counts: "author", "max_tokens", "compass" and "pinned" name no secret.
    """
    words = [word.lower() for word in _NAME_WORDS.findall(name)]
    pairs = [a + b for a, b in pairwise(words)]
    if len(words) > 1 and words[-1] == "key":  # "STRIPE_KEY", "signing key"
        return True
    return any(word in _SECRET_WORDS for word in [*words, *pairs])


_SECRET_VALUE = re.compile(
    r"\b(?:sk|pk|rk)[-_](?:live|test|proj)?[-_]?[A-Za-z0-9]{6,}|\bgh[pousr]_[A-Za-z0-9]{6,}|\bgithub_pat_|"
    r"\bxox[abprs]-|\bAKIA[0-9A-Z]{12,}|-----BEGIN|\beyJ[A-Za-z0-9_-]{10,}\.",
)
"""A value that has the shape of a key or a token ("sk-...", "ghp_...", "AKIA...", a JWT, a PEM block)."""


def secret_value(value: str) -> bool:
    """Whether a value names a secret ("password is hunter2") or has the shape of a key or a token."""
    return bool(_SECRET_VALUE.search(value)) or any(secret_key(word) for word in value.split())


def _argument_words(arguments: str) -> str:
    """A call's arguments said briefly: its short scalar values, ``key=value`` when there are several."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return ""
    if not isinstance(value, dict):
        value = {"": value}
    pairs = [
        (str(key), " ".join(str(item).split()))
        for key, item in value.items()
        if isinstance(item, (str, int, float)) and not isinstance(item, bool)
    ]
    pairs = [
        (key, item)
        for key, item in pairs
        if item and len(item) <= _ARGUMENT_CHARS and not secret_key(key) and not _SECRET_VALUE.search(item)
    ]
    if len(pairs) == 1:
        return pairs[0][1]
    return ", ".join(f"{key}={item}" for key, item in pairs)


def _call_lines(calls: list[tuple[str, str]]) -> list[str]:
    """What the run's tool calls were about, one line per tool: "read_file: src/app.py; src/db.py".

    The paging tools are left out (their own line says which pages were read), and so is a call
    whose arguments name nothing short enough to say.
    """
    said: dict[str, list[str]] = {}
    for name, arguments in calls:
        words = _argument_words(arguments) if name not in _PAGING_TOOLS else ""
        if words and words not in said.setdefault(name, []):
            said[name].append(words)
    lines = [f"{name}: {'; '.join(words)}" for name, words in said.items() if words]
    return [line if not line.startswith(USER_MARK) else f"tool {line}" for line in lines]


_EMPHASIS = re.compile(r"\*\*|__")
_OPENER = re.compile(
    r"^(?:(?:so|and|but|ok(?:ay)?|yes|yeah|right|well|alright|also|separately|then|now|anyway|basically|actually|"
    r"in short|in other words|good news|bad news|confirmed|note|fyi|oui|donc|alors|ja|sí|si|pues|sim|então)"
    r"\b[\s,:;!.-]*)+",
    re.IGNORECASE,
)
_HEDGE = re.compile(
    r"\s\b(?:actually|basically|just|really|simply|genuinely|definitely|certainly|pretty much|essentially)\b(?=\s)",
    re.IGNORECASE,
)


def _compress(text: str) -> str:
    """A bullet said in fewer tokens: no emphasis marks, no leading discourse words, no hedges.

    Only words that carry no fact go ("So, ...", "Confirmed: ...", "actually", "just"); numbers,
    names and identifiers are never touched. A line that would be left with less than two
    words is kept as it was. A typeset minus becomes "-", the sign one types and searches for.
    """
    line = _EMPHASIS.sub("", text).replace("\u2212", "-")  # a typeset minus ("−0.3%"): the sign one types
    line = _OPENER.sub("", line, count=1)
    line = " ".join(_HEDGE.sub("", line).split())
    if len(line.split()) < 2:
        return text
    return line[0].upper() + line[1:] if line[0].islower() and text[:1].isupper() else line


_ARTICLE = re.compile(r"(?:^(?:The|An?)|\b(?:the|an?))\s+(?=[\w`'\"(])")
"""An article: lower-case inside a line ("Option A" is a name), capitalized only where the line starts."""
_ENGLISH = re.compile(r"\b(?:the|is|are|was|were|and|of|to|with|for|it|this|that|from|on|by)\b", re.IGNORECASE)
_NOT_ENGLISH = re.compile(
    r"\b(?:der|die|das|und|ist|nicht|le|la|les|et|est|des|une|el|los|las|que|y|es|una|não|uma|os|il|è|che|di)\b",
    re.IGNORECASE,
)
_TIGHT_FILLER = re.compile(
    r"(?:(?<=shows)|(?<=showed)|(?<=means)|(?<=meant)|(?<=found)|(?<=confirms)|(?<=confirmed)|(?<=suggests)|"
    r"(?<=indicates)|(?<=says)|(?<=noticed)|(?<=verified)|(?<=assume)|(?<=think)|(?<=seems)) that(?=\s)|"
    r"\b(?:also|as well|in order)\s+(?=\w)"
)
_QUOTED = re.compile(r"`[^`]*`|\"[^\"]*\"|“[^”]*”")
"""Code and quotations, which are kept word for word."""
_TELEGRAPHIC_BELOW = 512
"""Under this budget an assistant's English bullet drops its articles ("the", "a", "an"): a word each, no fact."""


def _without_articles(text: str) -> str:
    """An English line without its articles and a few empty words ("Planner walks orders_created_at_idx
    backwards", "shows the queue is full" -> "shows queue is full"), never inside code or quotes.

    Each of these words is a token that carries no fact; a tight budget spends it better on one
    more finding. A line in another language, or with too little English to tell, is left as it is.
    """
    if len(_ENGLISH.findall(text)) < 2 or len(_NOT_ENGLISH.findall(text)) >= 2:
        return text
    line = text
    for pattern in (_ARTICLE, _TIGHT_FILLER):
        line = _outside_quotes(pattern, line)
    if len(line.split()) < 2:
        return text
    return line[0].upper() + line[1:] if text[:1].isupper() else line


def _outside_quotes(pattern: re.Pattern[str], text: str) -> str:
    """``text`` without the matches of ``pattern`` that stand outside code spans and quotations."""
    spans = [found.span() for found in _QUOTED.finditer(text)]
    out, start = [], 0
    for found in pattern.finditer(text):
        if not any(a <= found.start() < b for a, b in spans):
            out.append(text[start : found.start()])
            start = found.end()
    return "".join([*out, text[start:]])


_STOP = frozenset(
    re.findall(
        r"\w+",
        "about after again against also although among another because been before being below between both "
        "could does doing during each either every from further have having here into itself might more most "
        "much must other ourselves over same should since some such than that their them then there these they "
        "this those though through under until very what when where which while will with would your yours "
        "looks seems going thing things maybe still already really",
    )
)
_WORD = re.compile(r"[\w$€£%#@./:+=-]+(?:,\d[\w$€£%#@./:+=-]*)*")  # "1,249.00" is one unit
_SMALL_NUMBER = re.compile(r"\d{1,2}")
_SPECIFIC_WORD = re.compile(r"\d|\w[_./:@#=+-]\w|^[#$@]")
_NAME_WORD = re.compile(r"[a-z][A-Z]|^[A-Z]{2,}$")

# How the selection weighs what a bullet tells (tuned on the development conversations only).
_NAME_WEIGHT = 0.8  # a capitalized word inside a sentence, an ACRONYM, a camelCase name
_WORD_WEIGHT = 0.25  # a long plain word that is not a stop word
_GAIN_CAP = 6.0  # past this, more units in one bullet add nothing
_FLOOR = 0.5  # what a bullet of a valued kind is worth even when it names nothing new
_KIND_SCALE = 4.0  # how much the kind of a bullet (a user's decision, a finding) multiplies its worth
_LENGTH_EXPONENT = 0.75  # value per token**exponent: below 1, a long informative line is not starved
_RAN_SCORE = -2.0  # "ran read_file ×3": what was done, worth a line only when there is room
_EARLIER_SCORE = 1.5  # an earlier goal, which holds what the user first said
_CALL_SCORE = -2.0  # "read_file: src/app.py": what the calls were about, worth a line only when there is room
_TOOL_SCORE = -2.0  # a tool result's own summary line ("run_sql reported: 3 rows")
_FIELD_SCORE = -1.0  # a "name: value" line of a tool output ("ssh_exec: Expiry Date: 2025-03-21")
_STORED_SCORE = 1.5  # where a stored output is: the one way back to it
_ECHO_CAP = 3  # a unit said in this many messages counts sqrt(3) times one said once
_BOLD_KIND = 1.5  # a line its writer put words of in bold is worth this much more
_BOLD_UNIT = 2.0  # a unit the run puts in bold somewhere counts this much more, in any line that says it
_BOLD = re.compile(r"\*\*\S|\S\*\*|__\S|\S__")
"""Markdown bold around some words of a line (its leading marks may be stripped already)."""
_BOLD_SPAN = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*|__(?=\S)(.+?)(?<=\S)__")


def _units(text: str) -> dict[str, float]:
    """What a line tells, as weighted units: specific tokens (numbers, identifiers, names) count most.

    A number with a unit, a version, a path, an id or an amount weighs 1; a capitalized name
    inside the sentence, an acronym or a camelCase name :data:`_NAME_WEIGHT`; any other long
    word that is not a stop word :data:`_WORD_WEIGHT`; a bare one- or two-digit number weighs
    like a plain word (it is rarely the fact itself).
    """
    units: dict[str, float] = {}
    for index, raw in enumerate(_WORD.findall(text)):
        word = raw.strip(".,:;-=+/")
        if not word:
            continue
        key = word.lower()
        if _SMALL_NUMBER.fullmatch(word):
            weight = _WORD_WEIGHT
        elif _SPECIFIC_WORD.search(word):
            weight = 1.0
        elif (index > 0 and word[:1].isupper()) or _NAME_WORD.search(word):
            weight = _NAME_WEIGHT
        elif len(word) >= 5 and key not in _STOP:
            weight = _WORD_WEIGHT
        else:
            continue
        units[key] = max(units.get(key, 0.0), weight)
    return units


def _emphasized(texts: list[str]) -> set[str]:
    """The units that ``texts`` put in bold: what the writer marked as the point ("**4.20% in June**")."""
    return {unit for text in texts for span in _BOLD_SPAN.finditer(text) for unit in _units(span[1] or span[2])}


def _echo_counts(texts: list[str]) -> dict[str, int]:
    """In how many of ``texts`` each unit occurs: what the run keeps coming back to matters more."""
    counts: dict[str, int] = {}
    for text in texts:
        for unit in _units(text):
            counts[unit] = counts.get(unit, 0) + 1
    return counts


def _select(
    candidates: list[_Candidate],
    counter: TokenCounter,
    room: int,
    goal: str = "",
    echoes: dict[str, int] | None = None,
    bullet_cap: int = 0,
    emphasized: frozenset[str] | set[str] = frozenset(),
) -> list[_Candidate]:
    """The candidates that tell the most per token and fit in ``room`` tokens, in their original order.

    Greedy, one bullet per round: the candidate with the best value per token (tokens to the
    power :data:`_LENGTH_EXPONENT`) that still fits. Its value is what it tells that the goal
    and the bullets already taken do not (its new :func:`_units`, each weighed more when the run
    repeats it in several messages, see ``echoes``), times a factor for its kind (a decision
    the user stated over a remark). So a near-duplicate of a chosen bullet is worth little
    and is passed over for one that adds something, and a candidate the goal already says is
    left out. What the writers put in bold counts more: a line with bold words
    (:data:`_BOLD_KIND`), and each unit the run puts in bold anywhere (``emphasized``,
    :data:`_BOLD_UNIT`), also when another line repeats it.
    """
    in_goal = " ".join(re.sub(r"[^\w\s]", " ", goal.lower()).split())
    covered = set(_units(goal))
    echoes = echoes or {}
    pool: list[tuple[int, float, dict[str, float], int, int]] = []
    seen: set[str] = set()
    for index, candidate in enumerate(candidates):
        said = " ".join(re.sub(r"[^\w\s]", " ", candidate.text.lower()).split())
        if not said or said in seen or (len(said) > 20 and said in in_goal):
            continue
        seen.add(said)
        kind = max(0.1, 1 + candidate.score / _KIND_SCALE) * (_BOLD_KIND if candidate.bold else 1.0)
        units = {
            u: w * min(_ECHO_CAP, max(1, echoes.get(u, 1))) ** 0.5 * (_BOLD_UNIT if u in emphasized else 1.0)
            for u, w in _units(candidate.text).items()
        }

        cost = counter.count(f"* {USER_MARK if candidate.user else ''}{candidate.text}\n")  # as it is rendered
        joined = counter.count(f"{_JOIN}{candidate.text}")  # added to a kept clause of the same sentence
        pool.append((index, kind, units, cost, joined))
    chosen: list[int] = []
    kept: dict[_SentenceKey, int] = {}  # a sentence's bullet so far: its tokens
    used = 0
    while pool:
        best, best_ratio, best_cost, best_same = -1, 0.0, 0, False
        for at, (index, kind, units, whole, joined) in enumerate(pool):
            key = _sentence_key(candidates[index])
            same = key is not None and key in kept and (not bullet_cap or kept[key] + joined <= bullet_cap)
            cost = joined if same else whole
            if used + cost > room:
                continue
            gain = sum(weight for unit, weight in units.items() if unit not in covered)
            ratio = kind * (min(gain, _GAIN_CAP) + _FLOOR) / cost**_LENGTH_EXPONENT
            if ratio > best_ratio:
                best, best_ratio, best_cost, best_same = at, ratio, cost, same
        if best < 0:
            break
        index, _kind, units, _whole, _added = pool.pop(best)
        chosen.append(index)
        used += best_cost
        covered.update(units)
        key = _sentence_key(candidates[index])
        if key is not None:
            kept[key] = kept[key] + best_cost if best_same else best_cost
    return _joined([candidates[index] for index in sorted(chosen)], counter, bullet_cap)


_SentenceKey = tuple[str, bool, tuple[int, str]]
"""Clauses that may share one bullet: the same section, the same speaker, the same sentence."""


def _sentence_key(candidate: _Candidate) -> _SentenceKey | None:
    """Which bullet a clause may share with other clauses of its sentence (``None``: a whole sentence)."""
    return (candidate.section, candidate.user, candidate.sentence) if candidate.sentence else None


_JOIN = "; "
"""Between two kept clauses of one sentence, said as one bullet ("Optimistic: back to $19 from Aug 1; churn drops
to ~3.3%"); " … " stands for the clauses left out between them."""


def _joined(chosen: list[_Candidate], counter: TokenCounter, bullet_cap: int = 0) -> list[_Candidate]:
    """``chosen`` with the kept clauses of one sentence (same section, same speaker) made one bullet, in order.

    Each bullet costs its mark ("* ", and "User: " for the user's words) and a line: clauses of
    one sentence said in one bullet pay for it once, which :func:`_select` counts on.
    """
    out: list[_Candidate] = []
    first: dict[_SentenceKey, tuple[_Candidate, int]] = {}
    for candidate in chosen:
        key = _sentence_key(candidate)
        if key is None or key not in first:
            copy = replace(candidate)
            out.append(copy)
            if key is not None:
                first[key] = (copy, candidate.part)
            continue
        head, last = first[key]
        gap = " … " if candidate.part > last + 1 else _JOIN
        text = f"{head.text.rstrip(' ;:,')}{gap}{candidate.text}"
        if bullet_cap and counter.count(f"{USER_MARK if head.user else ''}{text}") > bullet_cap:
            copy = replace(candidate)
            out.append(copy)  # too long for one bullet: this clause starts the next one
            first[key] = (copy, candidate.part)
            continue
        head.text = text
        first[key] = (head, candidate.part)
    return out


def extract_summary(
    messages: list[Message], counter: TokenCounter, target_tokens: int, previous_goal: str = ""
) -> Summary:
    """A deterministic summary of a whole run, from what each message does; used when no LLM is configured.

    * goal: the task the user set. The first request (or a ``Goal: ...`` line) sets it; a later
      explicit change ("New task: ...", "Change of plans. ...", "Goal: ...") or setting the work
      aside before a new ask ("Wait, actually don't ... Can you ...?", "You know what, forget
      the flaky test. ...") replaces it, the earlier goal moves to Completed and a note after the
      goal says what it was about (its first sentence, then what names things); a follow-up
      ("Also add a flag", "While we're at it, ..."), a request for the piece of work itself
      ("Draft the memo now"), a choice ("Let's go with Resend", "What about Porto instead?") or
      a narrowing ("Only reports/ for now") extends it; a tight budget only cuts it (see
      :func:`_goal_core`); constraints, questions and requests about the task at hand ("send it
      as a PR") leave it;
    * decisions: commitments and choices from either side ("we will", "let's", "decided",
      "keep X unchanged", "don't ...", and their French, Spanish, Portuguese and German
      counterparts); what the user decided is marked ``User:`` so trimming keeps it longest;
    * discoveries: facts the user stated, the assistant's conclusions and findings (sentences
      that name things: numbers, code, identifiers, names), and a tool result's own summary
      line ("3 passed", "1 failed");
    * open issues: questions still open and failures (a tool result that is an error, a
      sentence saying something fails or is blocked);
    * completed: one line per kind of tool call ("ran read_file ×3, run_shell"), paging
      collapsed to "read result r-3 (pages 1-50)", and earlier goals. Raw tool output is
      never copied in, and tool outputs never feed Decisions.

    The bullets that say the most per token are kept first (what the user and the assistant put in
    bold counts more, see :func:`_select`), so the summary fits
    ``target_tokens`` without dropping decisions for tool chatter (the budget rules of the
    compressor then apply as usual).
    """
    reader = _RunReader(counter, target_tokens, previous_goal)
    for order, message in enumerate(messages):
        reader.texts.append(message.content)
        if message.role in ("user", "assistant"):
            reader.said.append(message.content)
        if message.role == "tool":
            reader.tool(message, order)
        elif message.role == "user":
            reader.user(message.content.strip(), order)
        elif message.role == "assistant":
            reader.calls += zip(message.tool_calls, message.tool_arguments, strict=False)
            if message.content.strip() not in message.tool_arguments:  # a Responses call item holds its arguments
                reader.candidates += _assistant_candidates(message.content.strip(), order, counter, reader.clause_cap)
    return reader.summary()


class _RunReader:
    """The state of :func:`extract_summary` while it reads a run: the goal, the candidates, the tool calls."""

    def __init__(self, counter: TokenCounter, target_tokens: int, goal: str) -> None:
        self.counter = counter
        self.target_tokens = target_tokens
        self.bullet_cap = max(8, min(48, target_tokens // 6))
        self.clause_cap = max(24, min(40, target_tokens // 12))
        self.goal_cap = max(8, target_tokens // 4)
        self.goal = goal
        self.earlier = ""  # what the goal an explicit change replaced was about, said after the goal
        self.candidates: list[_Candidate] = []
        self.tools: list[Message] = []
        self.pages: dict[str, list[int]] = {}
        self.earlier_goals: list[str] = []
        self.texts: list[str] = []
        self.said: list[str] = []  # what the user and the assistant wrote (a tool's output is not theirs)
        self.calls: list[tuple[str, str]] = []
        self.context: list[str] = []

    def tool(self, message: Message, order: int) -> None:
        """A tool result: paging is counted, a stored output is named, else only its own summary line."""
        content = message.content.strip()
        self.tools.append(message)
        header = _first_line(content)
        found = _PAGE_HEADER.match(header) or _SEARCH_HEADER.match(header)
        if found is not None:
            numbers = self.pages.setdefault(found["id"], [])
            if found.re is _PAGE_HEADER:
                number = _PAGE_NUMBER.search(header)
                numbers.append(int(number["n"]) if number else len(numbers) + 1)
            return
        stored = _stored_output_line(content)
        if stored is not content:
            where, _, preview = stored.partition(": ")  # the id is never cut, only the preview
            line = f"{message.name or 'tool'}: {clean_line(where)}: {clean_line(preview, self.counter, 8)}"
            self.candidates.append(_Candidate(COMPLETED, line, _STORED_SCORE, order))
            return
        summary_line = _tool_line(message)
        if summary_line is not None:
            text = clean_line(summary_line[1])  # cut with the other candidates
            self.candidates.append(_Candidate(summary_line[0], text, _TOOL_SCORE, order))
        if not _TOOL_ERROR.match(content):
            label = f"{message.name or 'tool'}: "
            label = f"tool {label}" if label.startswith(USER_MARK) else label  # a tool named "User" is a tool
            for field in _tool_fields(content):
                text = clean_line(f"{label}{field}")
                self.candidates.append(_Candidate(DISCOVERIES, text, _FIELD_SCORE, order))

    def _explicit(self, before: str, new_goal: str, order: int) -> None:
        """An explicit goal ("Goal: ...", "New task: ..."): it replaces the goal; the earlier one is kept aside."""
        counter, goal = self.counter, self.goal
        if goal:
            self.earlier_goals.append(goal)
            self.candidates += _user_candidates(_without_goal_text(goal), order, counter, self.clause_cap)
        text = _without_chat(_without_cue(clean_line(new_goal)))
        if counter.count(text) > self.goal_cap:
            self.candidates += _user_candidates(text, order, counter, self.clause_cap)
            text = _cut(_goal_core(_without_dismissal(text), counter, self.goal_cap) or text, counter, self.goal_cap, 0)
        self.earlier = clean_line(f"{goal} {self.earlier}")  # what the replaced goals were about, newest first
        self.goal = text
        self.candidates += _user_candidates(before, order, counter, self.clause_cap)

    def user(self, content: str, order: int) -> None:
        """A user message: it may set, change or extend the goal; what else it states becomes candidates."""
        # the user spoke after the assistant asked: those questions are answered, no longer open
        self.candidates = [candidate for candidate in self.candidates if not _asked(candidate)]
        explicit = _explicit_goal(content)
        if explicit is not None and explicit[1]:
            self._explicit(*explicit, order)
            return
        effect: GoalEffect | None = None
        added = content
        if _is_task(self.goal):  # a goal stands: only an explicit change replaces it, only a new request extends it
            sentences = _all_sentences(content)
            if any(_changes_task(sentence) for sentence in sentences):
                effect = "set"
            elif (
                any(_extends(sentence) for sentence in sentences)
                or (not _asks(self.goal) and _requests(content))
                or any(_next_step(sentence) or _new_deliverable(sentence) for sentence in sentences)
            ):
                effect = "extend"  # an added task, or the first ask after a remark that was its context
            elif any(_refines(sentence) for sentence in sentences):
                effect = "extend"  # a choice or a narrowing: the goal says it, with what the message asks
                added = " ".join(s for s in sentences if _refines(s) or classify_user_sentence(s) in _ASKING)
                rest = " ".join(s for s in sentences if s not in added)
                self.candidates += _user_candidates(rest, order, self.counter, self.clause_cap)
            else:
                effect = "keep"
        before = self.goal
        self.goal, stated = next_goal(before, added, self.counter, self.goal_cap, effect)
        if not before and self.goal and self.context:  # what the user stated before asking is the ask's context
            self.goal = self._with_context(self.goal)
        elif not before and not self.goal and user_statements(content):
            self.context.append(content)
        if before and self.goal != before and not self.goal.startswith(before):
            self.earlier_goals.append(before)
            if not self.goal.startswith(before[:20]):  # replaced, not extended: the note was about another goal
                self.earlier = ""
        if self.goal == before:
            self.candidates += _user_candidates(content, order, self.counter, self.clause_cap)
        for section, sentence in stated:
            line = clean_line(sentence)
            if line:
                self.candidates.append(_Candidate(section, line, 4.0, order, user=True))

    def _with_context(self, ask: str) -> str:
        """The first ask after what the user stated before it: the context comes first, cut like an older goal.

        The ask stays whole; the context keeps its first sentence and what else fits, at any budget, so a
        tight budget shortens the goal instead of making it another one.
        """
        counter = self.counter
        context = clean_line(" ".join(self.context))
        whole = clean_line(f"{context} {ask}")
        room = self.goal_cap - counter.count(ask) - 1
        if counter.count(whole) <= self.goal_cap:
            return whole
        if room <= 8:
            return ask
        return f"{_cut(_goal_core(context, counter, room), counter, room, 0)} {ask}"

    def _goal_with_earlier(self) -> str:
        """The goal, then what the goal it replaced was about ("(earlier: ...)") in the room the goal leaves.

        The note comes last and is cut first: a request added to the goal later outranks it.
        """
        room = self.goal_cap - self.counter.count(self.goal) - 4
        if not self.earlier or room < 8:
            return self.goal
        return f"{self.goal} (earlier: {_earlier_note(self.earlier, self.counter, room)})"

    def summary(self) -> Summary:
        """The summary: fixed lines (tool calls, earlier goals), then the best candidates that fit."""
        counter = self.counter
        summary = Summary(self._goal_with_earlier())
        # What was done comes first in Completed; it competes for room like any other bullet.
        done = [_Candidate(COMPLETED, line, _RAN_SCORE, -1) for line in _collapse_tools(self.tools, self.pages)]
        done += [
            _Candidate(COMPLETED, _cut(clean_line(line), counter, self.clause_cap), _CALL_SCORE, -1)
            for line in _call_lines(self.calls)
        ]
        done += [
            _Candidate(COMPLETED, f"earlier goal: {_cut(clean_line(g), counter, self.bullet_cap)}", _EARLIER_SCORE, -1)
            for g in self.earlier_goals
        ]
        headings = counter.count(render_summary(Summary(summary.goal)))
        room = max(0, self.target_tokens - headings - 4)
        for candidate in self.candidates:
            text = candidate.text if candidate.user else _compress(candidate.text)  # the user's words stay theirs
            if not candidate.user and self.target_tokens < _TELEGRAPHIC_BELOW:
                text = _without_articles(text)
            candidate.text = _cut(clean_line(text), counter, self.clause_cap)
        echoes, emphasized = _echo_counts(self.texts), _emphasized(self.said)
        chosen = _select([*done, *self.candidates], counter, room, summary.goal, echoes, self.bullet_cap, emphasized)
        for candidate in chosen:
            text = candidate.text
            summary.bullets[candidate.section].append(USER_MARK + text if candidate.user else _not_the_user(text))
        for name in LIST_SECTIONS:
            summary.bullets[name] = keep_newest(dedupe(summary.bullets[name]), MAX_BULLETS)
        return summary


def _earlier_note(earlier: str, counter: TokenCounter, room: int) -> str:
    """What a replaced goal was about, in ``room`` tokens: its first sentence, then the sentences that name the most
    (identifiers, numbers, names), said in their order; the note names the subject the new goal may continue."""
    if counter.count(earlier) <= room:
        return earlier
    sentences = _all_sentences(earlier)
    if not sentences:
        return _cut(earlier, counter, room, 0)
    order = [0, *sorted(range(1, len(sentences)), key=lambda i: -_specificity(sentences[i]))]
    kept, used = {0}, counter.count(sentences[0])  # the first sentence, which names the task, cut if need be
    for i in order[1:]:
        cost = counter.count(sentences[i]) + 1
        if used + cost <= room:
            kept.add(i)
            used += cost
    return _cut(clean_line(" ".join(sentences[i] for i in sorted(kept))), counter, room, 0)


def _asked(candidate: _Candidate) -> bool:
    """Whether a candidate is a question the assistant asked (the user's next message answers it)."""
    return candidate.section == OPEN_ISSUES and not candidate.user and candidate.text.rstrip().endswith(("?", "？"))


def _without_goal_text(goal: str) -> str:
    """What a goal said besides asking, which must live on as bullets once it is replaced.

    Facts and decisions, and also a remark that names things without a verb ("14 people,
    Lisbon, late September, budget €9,000."): the questions and requests stay in the
    "earlier goal" line.
    """
    kept = [s for s in _all_sentences(goal) if classify_user_sentence(s) not in (*_ASKING, "chat", "continue")]
    return " ".join(kept)
