"""The extractive summary: the five L1 sections filled from cue words when no LLM is configured.

Deterministic and offline. What the user says is read first, because nothing else keeps it once
the messages are compacted: :func:`classify_user_sentence` sorts each user sentence into a
question, a task request, a decision (a rule, a preference, a choice) or a stated fact, and
:func:`next_goal` decides whether a user message sets, extends or leaves the goal. Stated
facts and decisions become bullets marked :data:`~._summary.USER_MARK`, which trimming drops
last. Completed steps come from tool results; discoveries, open issues and decisions from cue
words in assistant sentences. Tool outputs are data from outside, so they never feed Decisions.
"""

from __future__ import annotations

import json
import re
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

_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+|\n+")
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
_DONE_CUE = re.compile(r"\b(done|completed|finished|fixed|created|updated|wrote|added|removed|implemented)\b", re.I)
_TOOL_ERROR = re.compile(r"^\W*(error|exception|traceback|failed|failure|fatal)\b", re.IGNORECASE)

# ---- how a user sentence is read (lower-cased text, leading discourse words removed first)

_FILLER = re.compile(
    r"^(?:(?:ok(?:ay)?|great|good|cool|nice|thanks|thank you|perfect|alright|all right|right|so|well|hi|hey|hello|"
    r"yes|yeah|sure|fine|hmm|oh|by the way|fyi|for context|for the record|note|just so you know)\b[\s,:;!.-]*)+"
)
_POLITE = re.compile(
    r"^(?:please|pls|kindly|can you|could you|would you|will you|can we|could we|"
    r"i (?:want|need|would like|'d like) you to|i'd like you to|help me(?: to)?|(?:i|we) need help(?: with)?|"
    r"your task is to|the task is to|"
    r"i (?:want|need) to|we (?:want|need) to|let's|let us|i'm trying to|we're trying to|i am trying to)\b[\s,]*"
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
_RULE_ANYWHERE = re.compile(
    r"\b(?:must(?: not)?|mustn't|shall not|should (?:always|never)|has to|have to|(?:is|are) not allowed|"
    r"(?:is|are) (?:required|mandatory|forbidden)|our (?:convention|policy|rule)|the (?:convention|policy|rule) is|"
    r"my preference|our preference|(?:i|we) (?:prefer|always|never))\b"
)
_PREFERENCE = re.compile(r"^(?:i|we)(?: would|'d)? (?:like|want|need) (?!to\b|you\b|us\b|help\b)")
_LABELLED = re.compile(r"^[a-z][\w /-]{1,30}:\s+\S")
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
    r"summari[sz]e|support|test|trace|translate|try|tune|update|upgrade|validate|verify|wire|work on|write)\b"
)
_NAMING = re.compile(r"\b(?:(?:is|are|was|were|'s)\s+(?:called|named)|named|called|known as|codename)\b")
_STEP_VERB = re.compile(
    r"^(?:show|explain|list|check|look at|run|try|tell|describe|print|open|read|get|give|remind|paste|send)\b"
)
_LINKING = re.compile(
    r"\b(?:is|are|was|were|am|'s|'re|'m|has|have|had|will be|uses?|runs?|lives?|sits?|points?|belongs?|needs?|"
    r"requires?|expects?|depends?|listens?|contains?|deploys?|hosts?|stores?|owns?|handles?|works?|costs?|takes?|"
    r"supports?|targets?|goes|meets?|reads?|writes?|ships?|starts?|ends?|expires?|lasts?|holds?|serves?|"
    r"manages?|leads?|reports?|limits?|allows?|caps?|happens?|(?:should|must|will|can|could|would|may|might) be)\b"
)
_TIME_OR_AMOUNT = re.compile(
    r"\b(?:deadline|due|by (?:monday|tuesday|wednesday|thursday|friday|saturday|sunday|tomorrow|eod|the end)|"
    r"until|version|v\d|port|\d)",
)
_VAGUE_SUBJECT = re.compile(r"^(?:that|this|it|it's|that's|there|i|i'm|we|we're|you|you're)\b")
_SPECIFIC = re.compile(r"\d|[`'\"]|\w[_./:=@-]\w")


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_SPLIT.split(text) if len(s.strip().split()) >= 3]


def _all_sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_SPLIT.split(text) if s.strip()]


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def _is_question(text: str, original: str) -> bool:
    return original.rstrip().endswith("?") or bool(_QUESTION_START.match(text))


def _is_fact(text: str, original: str) -> bool:
    """A declarative sentence that states something specific (a name, a value, a date, an owner)."""
    if len(text.split()) < 3:
        return False
    if _NAMING.search(text):
        return True
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
    rest = _POLITE.sub("", text, count=1).strip() if polite else text
    if _DECISION_CUE.search(text) or _RULE_START.match(rest) or _PREFERENCE.match(text):
        return "decision"
    if (_RULE_START.match(text) or _RULE_ANYWHERE.search(text)) and not (polite and _TASK_VERB.match(rest)):
        return "decision"
    if _CONTINUE.match(rest):
        return "continue"
    if polite or (_TASK_VERB.match(text) and not original.rstrip().endswith("?")):
        return "step" if _STEP_VERB.match(rest) else "request"
    if _is_question(text, original):
        return "question"
    if _is_fact(text, original):
        return "fact"
    if _TIME_OR_AMOUNT.search(text) and _LINKING.search(text):
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


def _without_statements(text: str) -> str:
    return clean_line(" ".join(s for s in _all_sentences(text) if classify_user_sentence(s) not in _STATED))


def next_goal(previous_goal: str, message: str, counter: TokenCounter, cap: int) -> tuple[str, list[tuple[str, str]]]:
    """The goal after one more user message, and the statements that must now live as bullets.

    The goal is the task the user set: a request or an explicit change ("Now ...", "Instead
    ...", "New task: ...") replaces it; a follow-up ("Also ...") is appended to it; a question,
    a step on the way ("Run the tests."), a go-ahead ("Go on."), a stated fact or a decision
    leaves it as it is. Until the user asked for something (no sentence of the goal is a
    request or a question), the goal is a stand-in: the latest question or remark replaces it.

    The goal keeps the message whole, facts included ("Our exporter writes NaN. Fix it."),
    so nothing is said twice. What it stated is handed back (as :func:`user_statements`
    pairs) when it stops holding it: when the goal is replaced, and when a goal longer than
    ``cap`` tokens would have to be cut (then its statements move out first).
    """
    effect = goal_effect(message, previous_goal)
    if effect == "keep":
        return previous_goal, []
    text = clean_line(message)
    if effect == "set":
        if counter.count(text) > cap:
            return counter.truncate(_without_statements(text) or text, cap), [
                *user_statements(previous_goal),
                *user_statements(text),
            ]
        return text, user_statements(previous_goal)
    if counter.count(f"{previous_goal} {text}") <= cap:
        return f"{previous_goal} {text}", []
    displaced = [*user_statements(previous_goal), *user_statements(text)]
    previous_goal, text = _without_statements(previous_goal) or previous_goal, _without_statements(text) or text
    room = cap - counter.count(text) - 1  # the newest request is kept whole; the older part is cut
    goal = f"{counter.truncate(previous_goal, room)} {text}" if room > 8 else text
    return counter.truncate(goal, cap), displaced


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


def extract_summary(
    messages: list[Message], counter: TokenCounter, target_tokens: int, previous_goal: str = ""
) -> Summary:
    """A deterministic summary from cue words, used when no LLM is configured.

    * goal: the task the user set (:func:`next_goal`): a request or an explicit change sets
      it, a follow-up such as "Also add a flag" extends it, questions leave it;
    * what the user stated (:func:`user_statements`): facts to discoveries and rules,
      preferences and choices to decisions, each marked with ``User:`` so trimming keeps them;
    * completed: one line per tool result (tool name and the first line of its output) and
      assistant sentences reporting work done;
    * open issues: tool results that start with an error, and sentences with words such as
      "still", "need to", "fails";
    * decisions: assistant sentences such as "we will", "decided", "instead of" (never tool
      outputs, which are data from outside);
    * discoveries: other assistant sentences with words such as "found", "because", "returns".
    """
    bullet_cap = max(8, min(48, target_tokens // 6))
    goal_cap = max(8, target_tokens // 4)
    summary = Summary()
    goal = previous_goal
    bullets = summary.bullets
    for message in messages:
        content = message.content.strip()
        if message.role == "tool":
            first = clean_line(_first_line(_stored_output_line(content)), counter, bullet_cap)
            label = message.name or "tool"
            label = f"tool {label}" if f"{label}: ".startswith(USER_MARK) else label  # never a "User: " bullet
            if _TOOL_ERROR.match(content):
                bullets[OPEN_ISSUES].append(f"{label} failed: {first}")
            elif first:
                bullets[COMPLETED].append(f"{label}: {first}")
            else:
                bullets[COMPLETED].append(f"{label}: (empty result)")
            continue
        if message.role == "user":
            goal_before = goal
            goal, stated = next_goal(goal, content, counter, goal_cap)
            if goal == goal_before:  # the message is not in the goal: what it states needs bullets
                stated += user_statements(content)
            for section, sentence in stated:
                line = clean_line(sentence, counter, bullet_cap)
                if line:
                    bullets[section].append(USER_MARK + line)
            continue
        if message.role != "assistant":
            continue
        for sentence in _sentences(content):
            line = _not_the_user(clean_line(sentence, counter, bullet_cap))
            if not line:
                continue
            if _DECISION_CUE.search(sentence):
                bullets[DECISIONS].append(line)
            elif _ISSUE_CUE.search(sentence):
                bullets[OPEN_ISSUES].append(line)
            elif _DONE_CUE.search(sentence):
                bullets[COMPLETED].append(line)
            elif _DISCOVERY_CUE.search(sentence):
                bullets[DISCOVERIES].append(line)
    summary.goal = goal
    for name in LIST_SECTIONS:
        bullets[name] = keep_newest(dedupe(bullets[name]), MAX_BULLETS)
    return summary
