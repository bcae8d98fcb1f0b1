"""What a user waits for at the shell: ``local-ai-memory --help``, a BM25 ``search`` end to end,
and ``import local_ai_memory``, each as a fresh process, beside ``python -c pass``.

Wall time of whole subprocesses (start, imports, work, exit), median of ``--runs`` runs after
one warm-up run that writes the bytecode caches (into a temporary ``PYTHONPYCACHEPREFIX``, so
``PYTHONDONTWRITEBYTECODE`` in the environment does not make every run compile the sources).
The search runs over 200 generated notes of one user, indexed before timing; auto-watch is off
as in scripts. Targets (issue 25): ``--help`` under 0.5 s, ``search`` under 0.8 s. Run::

    .venv/bin/python benchmarks/bench_cli_startup.py            # about 30 s
    .venv/bin/python benchmarks/bench_cli_startup.py --runs 11 --json

The figures depend on the machine's load: the ``python -c pass`` row is the floor to compare with.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGETS = {"--help": 0.5, "search (BM25)": 0.8}
CLI = "from local_ai_memory.cli import main; main()"
"""What the ``local-ai-memory`` console script runs (``python -m`` would import the module twice)."""


def wall(command: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return time.perf_counter() - start


def notes(root: Path, count: int) -> None:
    folder = root / "memory_data" / "knowledge"
    folder.mkdir(parents=True)
    topics = ("python lists", "rust ownership", "deploy the staging cluster", "postgres vacuum", "git rebase")
    for i in range(count):
        topic = topics[i % len(topics)]
        text = f"# {topic.title()} {i}\n\nNotes on {topic}, number {i}: what to check first and why.\n"
        (folder / f"alice_note-{i}.md").write_text(text, encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="timed runs per command (median reported)")
    parser.add_argument("--notes", type=int, default=200, help="notes of the searched user")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "data"
        notes(root, args.notes)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env |= {"PYTHONPYCACHEPREFIX": str(Path(tmp) / "pycache"), "LOCAL_AI_MEMORY_AUTO_WATCH": "false"}
        py = sys.executable
        subprocess.run([py, "-c", CLI, "index", "-d", str(root)], env=env, check=True, capture_output=True)
        commands = {
            "python -c pass": [py, "-c", "pass"],
            "import local_ai_memory": [py, "-c", "import local_ai_memory"],
            "--help": [py, "-c", CLI, "--help"],
            "search (BM25)": [
                py,
                "-c",
                CLI,
                "search",
                "python lists",
                "-u",
                "alice",
                "-d",
                str(root),
                "--mode",
                "bm25",
            ],
        }
        results: dict[str, dict[str, float]] = {}
        for name, command in commands.items():
            wall(command, env)  # warm-up: bytecode caches, page cache
            times = [wall(command, env) for _ in range(args.runs)]
            results[name] = {"median_s": statistics.median(times), "min_s": min(times), "max_s": max(times)}
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    if args.json:
        print(json.dumps({"runs": args.runs, "load_1min": load, "results": results}, indent=2))
        return
    print(f"{args.runs} runs each, 1-minute load average {load}")
    print(f"{'command':<24} {'median':>8} {'min':>8} {'max':>8}  target")
    for name, row in results.items():
        target = TARGETS.get(name)
        verdict = "" if target is None else f"< {target} s {'ok' if row['median_s'] < target else 'MISSED'}"
        print(f"{name:<24} {row['median_s']:>7.3f}s {row['min_s']:>7.3f}s {row['max_s']:>7.3f}s  {verdict}")


if __name__ == "__main__":
    main()
