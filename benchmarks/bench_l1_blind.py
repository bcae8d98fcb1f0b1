"""L1 working memory on 120 conversations written blind: are the goal, the facts and the decisions kept?

The conversations in ``benchmarks/data/l1_conversations`` were written by people who saw neither
the summarizer's code nor its rules, only a brief of what L1 must keep: c01-c36 by a first writer,
c37-c66 by a second one who had not seen the first 36 either (added after the rules existed, so
the new dev files are a check of how well the rules generalize), c67-c84 by a third, who saw
none of the others, added when the first held-out third had been read several times: the whole
third batch is held out; and c85-c102 by a fourth (more goal changes, personal assistants), split
like the first two; and c103-c120 by a fifth (many goal changes), added as development data when the
goal rules had been tuned on the fourth batch's dev files: the whole fifth batch is dev, and its first
reading, before any rule was changed for it, is the fairest view of how the goal rules generalize.
Each lists the current
goal, the facts and the decisions that must survive, each with ``must_contain`` strings: an item
is kept when all of them appear (case-insensitively) in L1, and the goal is right when its
strings appear in the Current Goal section.

The split is fixed by file number, before anything was looked at: files whose number is
divisible by 3 (c03, c06, ..., c102), and every file of the third batch (c67-c84), are HELD OUT.
The rules were developed on the others only (44 files, 56 with the fourth batch); the held-out
files are read here and nowhere else, and are reported separately. The fifth batch (c103-c120) is
all development data, whatever the number. Each split is also reported per writer (``c01-c36``,
``c37-c66``, ``c67-c84``, ``c85-c102``, ``c103-c120``) for the extractive path.

Each conversation is merged into an empty L1 as one run (``Session.finish_run``), at budgets 768
and 256, by:

* ``extractive``: no model, the deterministic summary (:mod:`local_ai_memory._runtime.extractive`);
* ``scripted LLM``: a fake model that answers a fixed, well-formed summary (the expected goal,
  facts and decisions, in the writer's words). It tests the LLM path's plumbing (prompt, parse,
  merge, budget), not a model: its near-perfect score says nothing about a real one.

``per-turn`` repeats the extractive run with the conversation merged run by run (a run ends at
each assistant message followed by a user message), as an agent loop with ``finish_run`` after
each turn would.

Also printed: how many L1 texts were longer than their input (tokens of L1 vs tokens of the
messages). Run: ``python benchmarks/bench_l1_blind.py`` (offline, about a minute); ``--dev``
reads the development files only, ``--show ID`` prints the L1 of one development conversation.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from local_ai_memory import Memory
from local_ai_memory._runtime.compressor import WorkingMemoryCompressor
from local_ai_memory._runtime.run import finish_run
from local_ai_memory._runtime.summary import parse_summary

DATA = Path(__file__).parent / "data" / "l1_conversations"
BUDGETS = (768, 256)
BATCHES = (
    ("c01-c36", 1, 36),
    ("c37-c66", 37, 66),
    ("c67-c84", 67, 84),
    ("c85-c102", 85, 102),
    ("c103-c120", 103, 120),
)
"""The five writers' conversations, reported apart for the extractive path."""
THIRD_WRITER = BATCHES[2][1:]
"""The first and last file of the third batch, held out whole."""
FIFTH_WRITER = BATCHES[4][1:]
"""The first and last file of the fifth batch, development data whole."""


def is_held_out(path: Path) -> bool:
    """The fixed split: a file whose number is divisible by 3, or of the third batch, is held out;
    no file of the fifth batch is."""
    number = int(path.stem[1:])
    if FIFTH_WRITER[0] <= number <= FIFTH_WRITER[1]:
        return False
    return number % 3 == 0 or THIRD_WRITER[0] <= number <= THIRD_WRITER[1]


def conversation_files(*, held_out: bool) -> list[Path]:
    return [path for path in sorted(DATA.glob("c*.json")) if is_held_out(path) == held_out]


def messages_of(case: dict[str, Any]) -> list[dict[str, Any]]:
    """The conversation as message dicts the library reads (tool calls as ``{"name": ..., "args": ...}``)."""
    out: list[dict[str, Any]] = []
    for index, message in enumerate(case["messages"]):
        item: dict[str, Any] = {"role": message["role"], "content": message.get("content") or ""}
        if message.get("name"):
            item["name"] = message["name"]
        if message.get("tool_calls"):
            item["tool_calls"] = [
                {"name": call.get("name", "tool"), "args": call.get("args", {}), "id": f"call-{index}-{n}"}
                for n, call in enumerate(message["tool_calls"])
            ]
        out.append(item)
    return out


def runs_of(messages: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The conversation cut into runs: a new run starts at each user message after an assistant one."""
    runs: list[list[dict[str, Any]]] = [[]]
    for message in messages:
        if message["role"] == "user" and runs[-1] and runs[-1][-1]["role"] != "user":
            runs.append([])
        runs[-1].append(message)
    return [run for run in runs if run]


class ScriptedLLM:
    """A fake 'good LLM': whatever it is asked, it answers the expected summary, well formed."""

    def __init__(self, case: dict[str, Any]) -> None:
        facts = "\n".join(f"* {fact['text']}" for fact in case["facts"])
        decisions = "\n".join(f"* {decision['text']}" for decision in case["decisions"])
        self.answer = (
            f"# Current Goal\n{case['goal']['text']}\n\n# Completed\n\n# Important Discoveries\n{facts}\n\n"
            f"# Open Issues\n\n# Decisions\n{decisions}\n"
        )
        self.calls = 0

    def complete(self, prompt: str) -> str:
        self.calls += 1
        return self.answer

    async def acomplete(self, prompt: str) -> str:
        return self.complete(prompt)


def kept(strings: Iterable[str], text: str) -> bool:
    lowered = text.lower()
    return all(s.lower() in lowered for s in strings)


@dataclass
class Score:
    facts: int = 0
    facts_kept: int = 0
    decisions: int = 0
    decisions_kept: int = 0
    goals: int = 0
    goals_right: int = 0
    longer_than_input: int = 0
    missed: list[str] = field(default_factory=list)

    def add(self, case: dict[str, Any], l1: str, input_tokens: int, l1_tokens: int) -> None:
        parsed = parse_summary(l1)
        goal = parsed[0].goal if parsed else ""
        for fact in case["facts"]:
            self.facts += 1
            if kept(fact["must_contain"], l1):
                self.facts_kept += 1
            else:
                self.missed.append(f"{case['id']} fact: {fact['text']}")
        for decision in case["decisions"]:
            self.decisions += 1
            if kept(decision["must_contain"], l1):
                self.decisions_kept += 1
            else:
                self.missed.append(f"{case['id']} decision: {decision['text']}")
        self.goals += 1
        if kept(case["goal"]["must_contain"], goal):
            self.goals_right += 1
        else:
            self.missed.append(f"{case['id']} goal: {case['goal']['text']} | got: {goal[:160]}")
        self.longer_than_input += l1_tokens > input_tokens

    def line(self, label: str) -> str:
        def pct(a: int, b: int) -> str:
            return f"{100 * a / b:5.1f}%" if b else "  n/a"

        return (
            f"{label:<34} facts {pct(self.facts_kept, self.facts)} ({self.facts_kept}/{self.facts})  "
            f"decisions {pct(self.decisions_kept, self.decisions)} ({self.decisions_kept}/{self.decisions})  "
            f"goal right {self.goals_right}/{self.goals}  L1 > input: {self.longer_than_input}"
        )


def l1_of(case: dict[str, Any], budget: int, method: str) -> tuple[str, int, int]:
    """Run one conversation; return L1, the input's tokens and L1's tokens."""
    memory = Memory.in_memory()
    session = memory.session("bench", case["id"])
    llm = ScriptedLLM(case) if method == "scripted LLM" else None
    compressor = WorkingMemoryCompressor(session.engine, llm=llm, target_tokens=budget)
    messages = messages_of(case)
    runs = runs_of(messages) if method == "per-turn" else [messages]
    for run in runs:
        outcome = finish_run(compressor, session.messages, run)
        if not outcome.summary.ok:
            raise RuntimeError(f"{case['id']}: {outcome.summary.error}")
    counter = memory.token_counter
    text = session.get_working_memory()
    transcript = "\n\n".join(f"{m['role']}: {m['content']}" for m in messages)
    return text, counter.count(transcript), counter.count(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dev", action="store_true", help="development files only (never the held-out ones)")
    parser.add_argument("--show", help="print the L1 of this development conversation (e.g. c01) and stop")
    parser.add_argument("--budget", type=int, default=768)
    parser.add_argument("--missed", action="store_true", help="list what the extractive path lost (dev only)")
    args = parser.parse_args()
    if args.show:
        path = DATA / f"{args.show}.json"
        if is_held_out(path):
            raise SystemExit(f"{args.show} is held out: it is only read by the full benchmark run")
        case = json.loads(path.read_text(encoding="utf-8"))
        text, before, after = l1_of(case, args.budget, "extractive")
        print(text)
        print(f"[{after} tokens of L1 for {before} tokens of input]")
        return
    splits = [("dev", False)] if args.dev else [("dev", False), ("held-out", True)]
    for split, held_out in splits:
        cases = [json.loads(path.read_text(encoding="utf-8")) for path in conversation_files(held_out=held_out)]
        print(f"== {split}: {len(cases)} conversations")
        for method in ("extractive", "per-turn", "scripted LLM"):
            for budget in BUDGETS:
                score = Score()
                batches = {label: Score() for label, _first, _last in BATCHES}
                for case in cases:
                    result = l1_of(case, budget, method)
                    score.add(case, *result)
                    number = int(case["id"][1:])
                    for label, first, last in BATCHES:
                        if first <= number <= last:
                            batches[label].add(case, *result)
                print(score.line(f"{method} @ {budget}"))
                if method == "extractive":
                    for label, batch in batches.items():
                        if batch.goals:  # a batch with conversations in this split
                            print(batch.line(f"  {label} @ {budget}"))
                if args.missed and not held_out and method == "extractive":
                    for item in score.missed:
                        print("   missed", item)


if __name__ == "__main__":
    main()
