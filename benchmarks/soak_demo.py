"""Run the demo many times in a row while other processes keep every core busy; print the pass count.

Issue 41: ``./scripts/demo`` from a fresh clone failed 9 runs of 14 on a busy 2-core machine
(a background writer put files back into the demo's temporary folder while it was removed).
A run passes when the demo exits 0 and leaves nothing behind in its temporary folder (``TMPDIR``
points each run at an empty folder of its own, checked again after the process is gone).

    python benchmarks/soak_demo.py                       # 20 runs, one CPU burner per core
    python benchmarks/soak_demo.py --runs 5 --burners 0  # idle machine, for comparison
    python benchmarks/soak_demo.py --python .venv/bin/python -- --postgres

It runs ``examples/demo.py`` with the given interpreter (default: this one) exactly as
``./scripts/demo`` does after its setup. Not a test: it takes minutes and loads the machine.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "examples" / "demo.py"
BURN = "while True:\n    pass\n"


def _left_in(folder: Path) -> list[str]:
    return sorted(path.relative_to(folder).as_posix() for path in folder.rglob("*"))


def one_run(python: str, extra: list[str], scratch: Path, timeout: float) -> tuple[bool, float, str]:
    """One demo run with its own empty ``TMPDIR``: (passed, seconds, why it failed)."""
    scratch.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCAL_AI_MEMORY_")}
    env |= {"TMPDIR": str(scratch), "COLUMNS": "120"}
    started = time.perf_counter()
    try:
        done = subprocess.run(
            [python, str(DEMO), *extra], capture_output=True, text=True, env=env, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return False, time.perf_counter() - started, f"no answer within {timeout:.0f} s"
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-6:])
        return False, seconds, f"exit {done.returncode}:\n{tail}"
    time.sleep(0.5)  # anything the finished process left running would write now
    left = _left_in(scratch)
    if left:
        return False, seconds, f"left behind: {left[:5]}{' ...' if len(left) > 5 else ''}"
    return True, seconds, ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument(
        "--burners", type=int, default=os.cpu_count() or 2, help="busy-loop processes (default: one per core)"
    )
    parser.add_argument("--python", default=sys.executable, help="the interpreter that runs the demo")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds one run may take")
    parser.add_argument("demo_args", nargs="*", help="passed to the demo (after --)")
    options = parser.parse_args()
    burners = [subprocess.Popen([sys.executable, "-c", BURN]) for _ in range(options.burners)]
    passed, times = 0, []
    try:
        with tempfile.TemporaryDirectory(prefix="soak-demo-") as base:
            for run in range(1, options.runs + 1):
                ok, seconds, why = one_run(options.python, options.demo_args, Path(base) / f"run{run}", options.timeout)
                passed += ok
                times.append(seconds)
                print(
                    f"run {run:2d}: {'pass' if ok else 'FAIL'} in {seconds:5.1f} s{'' if ok else ': ' + why}",
                    flush=True,
                )
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    times.sort()
    print(
        f"\n{passed} of {options.runs} runs passed with {options.burners} CPU burner(s) on {os.cpu_count()} cores; "
        f"run time median {times[len(times) // 2]:.1f} s, slowest {times[-1]:.1f} s"
    )
    return 0 if passed == options.runs else 1


if __name__ == "__main__":
    sys.exit(main())
