"""L1 working memory over a 30-turn conversation with compaction: do the user's facts survive?

A scripted conversation: a user asks an agent to add CSV bulk export to an orders API, states
13 facts and decisions along the way (names, versions, a deadline, rules, a preference), asks
follow-up questions, asks for steps ("Run the tests."), and at turn 22 changes the task. The
agent calls tools (file listings, test runs, diffs) whose outputs sit between the turns.

After every exchange the conversation is merged into L1 with ``merge_new`` and then compacted to
its last ``--keep`` messages, as ``LocalMemoryChatMessageHistory`` does. At the end it counts how
many of the facts are still in L1, and in L1 plus the kept messages, and in how many turns the
goal was the task the user had set. Each configuration runs twice, at the default budget of 768
tokens and at a tight 256:

* ``extractive``: no model, the deterministic summary;
* ``fake LLM``: a scripted model that answers well (it keeps the current task, repeats every
  user fact it can see in its prompt as a discovery, in the user's words, and writes one
  completed step per tool call, carrying the earlier ones over, so the budget is under
  pressure). It does not mark facts with ``User: `` (the prompt does not ask for it), so
  they get no protection from trimming beyond their section's rank.

Run: ``.venv/bin/python benchmarks/bench_working_memory.py`` (offline, a few seconds).

The conversation and the rules came from the same hands, so a full score here says little about
what users write: ``bench_l1_blind.py`` measures L1 on conversations written blind, with a
held-out third.
"""

from __future__ import annotations

import argparse
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from local_ai_memory import MemoryConfig
from local_ai_memory._runtime.compressor import WorkingMemoryCompressor
from local_ai_memory._runtime.scope import MemoryManager
from local_ai_memory._runtime.summary import COMPLETED, parse_summary
from local_ai_memory._shared.naming import DirectoryGuard
from local_ai_memory._shared.tokens import TokenCounter
from local_ai_memory.backends import FileRuntimeBackend

TASK_A = (
    "I need to add CSV bulk export to the orders API. The service is called ledger-api and lives in services/ledger."
)
TASK_B = "Now write the migration guide for the v2 export endpoint."
TASK_B_MORE = "Also add an example curl call to the guide."


@dataclass(frozen=True)
class Fact:
    """A fact the user states, and the words that show it survived."""

    sentence: str
    check: str


FACTS = [
    Fact("The service is called ledger-api and lives in services/ledger.", "ledger-api"),
    Fact("The staging cluster is called kestrel.", "kestrel"),
    Fact("We use PostgreSQL 16 in production.", "PostgreSQL 16"),
    Fact("Never push directly to main.", "directly to main"),
    Fact("The deadline for the export feature is March 14.", "March 14"),
    Fact("Customer exports are capped at 50,000 rows.", "50,000 rows"),
    Fact("I prefer UTF-8 with a BOM so Excel opens the files.", "BOM so Excel"),
    Fact("The feature flag is named bulk_export_v2.", "bulk_export_v2"),
    Fact("Our CI runs on GitHub Actions.", "GitHub Actions"),
    Fact("Always run the linter before committing.", "linter before committing"),
    Fact("The on-call engineer this week is Priya.", "Priya"),
    Fact("We decided to keep the v1 endpoint until June.", "until June"),
    Fact("The API gateway listens on port 8443.", "8443"),
]

PYTEST_FAIL = """============================= test session starts ==============================
collected 42 items

tests/test_orders.py ..........................                          [ 61%]
tests/test_export.py ...............F                                    [100%]

=================================== FAILURES ===================================
____________________________ test_export_filters _______________________________
    def test_export_filters(client):
>       assert response.headers["content-type"] == "text/csv"
E       AssertionError: assert 'application/json' == 'text/csv'
=========================== 1 failed, 41 passed in 3.12s ======================="""
PYTEST_PASS = "collected 44 items\n\ntests/test_orders.py ....\ntests/test_export.py ....\n\n44 passed in 3.40s"
DIFF = """diff --git a/services/ledger/api/export.py b/services/ledger/api/export.py
@@ -12,7 +12,15 @@ def export_orders(request):
-    rows = [order.to_dict() for order in query.all()]
-    return JSONResponse(rows)
+    if request.query_params.get("format") == "csv":
+        return StreamingResponse(_csv_rows(query), media_type="text/csv")
+    rows = [order.to_dict() for order in query.all()]
+    return JSONResponse(rows)"""
LISTING = "services/ledger/api/__init__.py\nservices/ledger/api/orders.py\nservices/ledger/api/export.py\n" + (
    "services/ledger/tests/test_orders.py\nservices/ledger/tests/test_export.py"
)
EXPORT_PY = '''def export_orders(request):
    """Return every order matching the filters as JSON."""
    query = Order.filter(**request.query_params)
    rows = [order.to_dict() for order in query.all()]
    return JSONResponse(rows)'''

# (user message, tool name or "", tool output, assistant answer); facts are referenced by index.
TURNS: list[tuple[str, str, str, str]] = [
    (TASK_A, "list_files", LISTING, "I found the export endpoint in services/ledger/api/export.py."),
    ("What does the current JSON export do?", "read_file", EXPORT_PY, "It loads every order and returns JSON."),
    (FACTS[1].sentence, "", "", "Noted, I will use kestrel for the staging deploy."),
    ("How are the orders paginated today?", "", "", "They are not: the endpoint returns every row at once."),
    (FACTS[2].sentence, "", "", "Good, then COPY ... TO STDOUT is available for fast exports."),
    ("Run the tests.", "run_tests", PYTEST_FAIL, "One test fails because the endpoint still returns JSON."),
    (FACTS[3].sentence, "", "", "Understood, I will open a pull request instead."),
    ("Why does test_export_filters fail?", "", "", "It expects text/csv but the endpoint answers JSON."),
    (FACTS[4].sentence, "", "", "That leaves about two weeks, enough for the export and its tests."),
    ("Also stream the rows instead of building the file in memory.", "", "", "I will use StreamingResponse."),
    (FACTS[5].sentence, "", "", "I will enforce the cap in the query with a LIMIT."),
    ("What encoding should the CSV use?", "", "", "UTF-8 is the safe default."),
    (FACTS[6].sentence, "", "", "I will write the BOM as the first chunk of the stream."),
    ("Show me the diff.", "git_diff", DIFF, "Here is the diff of export.py."),
    (FACTS[7].sentence, "", "", "I will guard the new path with that flag."),
    ("Can the export run in a background job?", "", "", "Yes, but streaming keeps it simple for now."),
    (FACTS[8].sentence, "", "", "I will add the export tests to the existing workflow."),
    ("Run the tests again.", "run_tests", PYTEST_PASS, "All 44 tests pass now."),
    (FACTS[9].sentence, "run_lint", "ruff check: All checks passed!", "The linter is clean."),
    ("Does the endpoint need a rate limit?", "", "", "The row cap already bounds each request."),
    (FACTS[10].sentence, "", "", "I will ask Priya before the staging deploy."),
    (TASK_B, "", "", "I will start with what changes for clients of the v1 endpoint."),
    ("Who reads the guide, support or customers?", "", "", "Mostly customers who call the API directly."),
    (FACTS[11].sentence, "", "", "The guide will say that v1 keeps working until June."),
    ("What should the guide say about the row cap?", "", "", "It should explain the cap and how to page."),
    (FACTS[12].sentence, "", "", "I will use that port in the examples."),
    ("Show me the draft.", "read_file", "# Migrating to the v2 export\n\n1. Ask for format=csv ...", "Here it is."),
    (TASK_B_MORE, "", "", "Added a curl example with format=csv."),
    ("Is the guide clear about the BOM?", "", "", "Yes, it has a short section on Excel."),
    ("Thanks, go on.", "", "", "I will polish the wording next."),
]


class WellAnsweringLLM:
    """A scripted model that answers well: the current task, every user fact it can see, each tool call.

    It reads only its prompt, as a model would: facts it cannot see there (because the summary
    lost them and their messages were compacted) it cannot repeat.
    """

    def __init__(self) -> None:
        self.calls = 0

    def complete(self, prompt: str) -> str:
        self.calls += 1
        plain = prompt.replace("\\#", "#")
        tasks = [TASK_A, TASK_B]
        goal = max((task for task in tasks if task in plain), key=tasks.index, default="")
        if goal == TASK_B and TASK_B_MORE in plain:
            goal = f"{TASK_B} {TASK_B_MORE}"
        completed: list[str] = []
        existing = re.search(r"Existing summary:\n(`{3,})\n(.*?)\n\1", plain, re.DOTALL)
        if existing:
            parsed = parse_summary(existing.group(2))
            if parsed is not None:
                completed = list(parsed[0].bullets[COMPLETED])
        completed += [f"{name}: {line}" for name, line in re.findall(r"^tool \((\w+)\): (.*)$", plain, re.MULTILINE)]
        facts = [fact.sentence for fact in FACTS if fact.sentence in plain]
        lines = [f"# Current Goal\n{goal}\n", "# Completed", *(f"* {c}" for c in completed), ""]
        lines += ["# Important Discoveries", *(f"* {fact}" for fact in facts), "", "# Open Issues", "", "# Decisions"]
        return "\n".join(lines)

    async def acomplete(self, prompt: str) -> str:
        return self.complete(prompt)


@dataclass
class Outcome:
    facts_l1: int
    facts_all: int
    goal_right: int
    conversation_tokens: int
    l1_tokens: int
    first: tuple[int, int]
    longer: int
    merges: int
    memory: str


def expected_goal(turn: int) -> str:
    return "CSV bulk export" if turn < 21 else "migration guide"


def run(llm: Any, target: int, keep: int, counter: TokenCounter) -> Outcome:
    with tempfile.TemporaryDirectory() as root:
        manager = MemoryManager(FileRuntimeBackend.from_config(MemoryConfig(), DirectoryGuard(Path(root)))).scoped(
            "dev", "export"
        )
        compressor = WorkingMemoryCompressor(manager, llm, counter, target_tokens=target)
        everything: list[dict[str, Any]] = []
        kept: list[dict[str, Any]] = []
        goal_right = longer = merges = 0
        first = (0, 0)
        for index, (user, tool, output, answer) in enumerate(TURNS):
            exchange: list[dict[str, Any]] = [{"role": "user", "content": user}]
            if tool:
                exchange.append({"role": "assistant", "content": "", "tool_calls": [{"name": tool}]})
                exchange.append({"role": "tool", "name": tool, "content": output})
            exchange.append({"role": "assistant", "content": answer})
            everything += exchange
            kept += exchange
            result = compressor.merge_new(kept)
            if result is None or not result.ok:
                raise RuntimeError(f"merge {index} failed: {result}")
            merges += 1
            if index == 0:
                first = (result.tokens_before, result.tokens_after)
            longer += result.tokens_after > result.tokens_before
            kept = kept[-keep:]
            parsed = parse_summary(manager.get_working_memory())
            goal = parsed[0].goal if parsed else ""
            goal_right += expected_goal(index) in goal
        memory = manager.get_working_memory()
        history = "\n".join(str(m["content"]) for m in kept)
        return Outcome(
            facts_l1=sum(f.check.lower() in memory.lower() for f in FACTS),
            facts_all=sum(f.check.lower() in (memory + history).lower() for f in FACTS),
            goal_right=goal_right,
            conversation_tokens=counter.count("\n\n".join(f"{m['role']}: {m['content']}" for m in everything)),
            l1_tokens=counter.count(memory),
            first=first,
            longer=longer,
            merges=merges,
            memory=memory,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--keep", type=int, default=4, help="messages kept after each compaction")
    parser.add_argument("--show", action="store_true", help="print the final L1 of each run")
    args = parser.parse_args()
    counter = TokenCounter()
    n = len(FACTS)
    print(f"{len(TURNS)} turns, {n} user facts, compaction to the last {args.keep} messages after each exchange")
    print()
    header = (
        f"| {'summarizer':10} | {'budget':>6} | {'facts in L1':>11} | {'facts in L1+kept':>16} | {'goal right':>10} "
        f"| {'conversation tok':>16} | {'L1 tok':>6} | {'1st merge before->after':>23} | {'merges longer':>13} |"
    )
    print(header)
    print("|" + "|".join("-" * (len(cell)) for cell in header.split("|")[1:-1]) + "|")
    finals: list[tuple[str, int, str]] = []
    for label, make in (("extractive", lambda: None), ("fake LLM", WellAnsweringLLM)):
        for target in (768, 256):
            outcome = run(make(), target, args.keep, counter)
            finals.append((label, target, outcome.memory))
            first = f"{outcome.first[0]} -> {outcome.first[1]}"
            print(
                f"| {label:10} | {target:>6} | {outcome.facts_l1:>5} / {n:<3} | {outcome.facts_all:>10} / {n:<3} "
                f"| {outcome.goal_right:>4} / {len(TURNS):<3} | {outcome.conversation_tokens:>16,} "
                f"| {outcome.l1_tokens:>6} | {first:>23} | {outcome.longer:>6} / {outcome.merges:<4} |"
            )
    if args.show:
        for label, target, memory in finals:
            print(f"\n{label}, budget {target}, final L1:\n{memory}")


if __name__ == "__main__":
    main()
