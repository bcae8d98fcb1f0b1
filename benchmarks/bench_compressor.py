"""L1 working memory: how much smaller it is than the transcript, and what compression costs.

Builds a realistic 40-message agent run (a user asks for a log-archiving script; the agent
reads real stdlib documentation and source files through tools, runs tests, hits an error,
makes decisions) and reports:

* tokens of the raw transcript, of the L1 summary, and of the two things a user would
  otherwise do: keep the last N messages, or cut the transcript to the same token budget;
* whether the goal and the decisions survive in each;
* the compressor's own latency (no model time): the extractive path, and the LLM path with an
  instant fake LLM (prompt building, parsing, budget enforcement, file writes), median of runs.

Run: ``.venv/bin/python benchmarks/bench_compressor.py``
"""

from __future__ import annotations

import argparse
import inspect
import json
import pathlib
import shutil
import statistics
import tempfile
import textwrap
import time
from typing import Any

from local_ai_memory._runtime.compressor import WorkingMemoryCompressor
from local_ai_memory._runtime.messages import to_messages
from local_ai_memory._runtime.prompts import render_transcript
from local_ai_memory._runtime.scope import MemoryManager
from local_ai_memory._shared.config import MemoryConfig
from local_ai_memory._shared.naming import DirectoryGuard
from local_ai_memory._shared.tokens import TokenCounter
from local_ai_memory.backends import FileRuntimeBackend

GOAL = "Write a script that gzips every *.log file older than 7 days under /var/app and keeps a manifest."
DECISIONS = [
    "We will use pathlib.Path.rglob instead of os.walk.",
    "We decided to write the manifest as JSON lines.",
    "We will use gzip.open with shutil.copyfileobj instead of calling the gzip binary.",
]


def _source(obj: Any) -> str:
    return inspect.getsource(obj)


def _doc(obj: Any) -> str:
    return inspect.getdoc(obj) or ""


def build_transcript() -> list[dict[str, Any]]:
    """40 messages; tool outputs are real documentation and source text from the stdlib."""
    tool_outputs = [
        ("read_doc", _doc(pathlib.Path) + "\n\n" + _doc(pathlib.Path.rglob) + "\n\n" + _doc(pathlib.Path.stat)),
        ("read_source", _source(shutil.copyfileobj) + _source(shutil.copyfile)),
        ("read_source", _source(textwrap)),
        ("read_doc", _doc(json.dump) + "\n\n" + _doc(json.dumps)),
        ("read_source", _source(tempfile.TemporaryDirectory)),
        ("run_tests", "Error: test_manifest failed\n" + _source(argparse.ArgumentParser.parse_known_args)),
        ("read_source", _source(argparse.ArgumentParser.add_argument)),
        ("read_doc", _doc(time.strftime) + "\n\n" + _doc(time.localtime)),
        ("read_source", _source(statistics.median) + _source(statistics.mean)),
    ]
    assistant_lines = [
        "Let me look at the pathlib API first.",
        DECISIONS[0],
        "Found that Path.stat returns st_mtime, which gives the file age.",
        "Now I need the copy helpers.",
        DECISIONS[2],
        "Checking textwrap for the help text formatting.",
        DECISIONS[1],
        "The manifest test still fails because the temp folder is cleaned too early.",
        "I updated the fixture to keep the folder until the end.",
        "Checking argparse for the --dry-run flag.",
    ]
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent with file, shell and test tools."},
        {"role": "user", "content": GOAL},
    ]
    step = 0
    while len(messages) < 39:
        name, output = tool_outputs[step % len(tool_outputs)]
        text = assistant_lines[step % len(assistant_lines)]
        messages.append({"role": "assistant", "content": text, "tool_calls": [{"function": {"name": name}}]})
        messages.append({"role": "tool", "name": name, "tool_call_id": f"call{step}", "content": output})
        if step == 8:
            messages.append({"role": "user", "content": "Also add a --dry-run flag that only prints the plan."})
        step += 1
    messages.append({"role": "assistant", "content": "I added the --dry-run flag and all tests pass now."})
    return messages[:40]


class InstantLLM:
    """Answers immediately with a fixed, realistic summary (so only the library's own work is timed)."""

    def __init__(self, answer: str) -> None:
        self.answer = answer

    def complete(self, prompt: str) -> str:
        return self.answer

    async def acomplete(self, prompt: str) -> str:
        return self.answer


def timed(fn: Any, runs: int) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1000


def keeps(text: str) -> str:
    goal = "yes" if "gzips every *.log" in text else "no"
    decisions = sum(decision.rstrip(".") in text for decision in DECISIONS)
    return f"goal kept: {goal:3}  decisions kept: {decisions}/{len(DECISIONS)}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--target", type=int, default=768)
    args = parser.parse_args()
    counter = TokenCounter()
    messages = build_transcript()
    normalized = to_messages(messages)
    raw = "\n\n".join(f"{m.role}: {m.content}" for m in normalized)
    raw_tokens = counter.count(raw)

    root = tempfile.mkdtemp(prefix="bench-l1-")
    try:
        results = {}
        for fsync in (False, True):
            config = MemoryConfig(fsync=fsync)
            manager = MemoryManager(FileRuntimeBackend.from_config(config, DirectoryGuard(root)), config).scoped(
                "bench", f"fsync{int(fsync)}"
            )
            extractive = WorkingMemoryCompressor(manager, None, counter, args.target)
            summary = extractive.compress(messages)
            llm = WorkingMemoryCompressor(manager, InstantLLM(summary.text), counter, args.target)
            results[fsync] = (
                summary,
                timed(lambda c=extractive: c.compress(messages), args.runs),
                timed(lambda c=llm: c.compress(messages), args.runs),
                timed(lambda c=llm: c.update_summary(messages[-4:]), args.runs),
            )
        prompt_ms = timed(lambda: render_transcript(normalized, counter), args.runs)
    finally:
        shutil.rmtree(root)

    summary = results[False][0]
    last6 = "\n\n".join(f"{m.role}: {m.content}" for m in normalized[-6:])
    head_cut = counter.truncate(raw, args.target)
    tail_cut = counter.decode(counter.encode(raw)[-args.target :])
    print(f"Transcript: {len(messages)} messages, {raw_tokens:,} tokens (cl100k_base), target {args.target} tokens")
    print()
    print(f"{'what the next call would get':40} {'tokens':>8} {'vs raw':>8}   content check")
    rows = [
        ("raw transcript", raw),
        ("L1 summary (extractive, no LLM)", summary.text),
        ("naive: last 6 messages", last6),
        (f"naive: first {args.target} tokens", head_cut),
        (f"naive: last {args.target} tokens", tail_cut),
    ]
    for label, text in rows:
        tokens = counter.count(text)
        print(f"{label:40} {tokens:>8,} {raw_tokens / max(tokens, 1):>7.1f}x   {keeps(text)}")
    print()
    print(f"Compressor latency, median of {args.runs} runs, model time excluded (ms):")
    print(f"{'':44} {'fsync off':>10} {'fsync on':>10}")
    labels = [
        "extractive compress(40 messages)",
        "LLM path compress, instant fake LLM",
        "LLM path update_summary(4 new)",
    ]
    for index, label in enumerate(labels, start=1):
        print(f"  {label:42} {results[False][index]:>10.1f} {results[True][index]:>10.1f}")
    print(f"  {'of which: bounded prompt transcript':42} {prompt_ms:>10.1f}")
    print()
    print("The L1 summary as stored:")
    print(textwrap.indent(render_summary_preview(summary.text), "  | "))


def render_summary_preview(text: str, lines: int = 30) -> str:
    parts = text.splitlines()
    return "\n".join(parts[:lines] + (["..."] if len(parts) > lines else []))


if __name__ == "__main__":
    main()
