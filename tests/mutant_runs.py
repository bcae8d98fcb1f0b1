"""What both mutation harnesses (test_runtime_mutants.py, test_knowledge_mutants.py) share:
which mutants to run and how many times.

By default every mutant runs once. To show that a racy or timed catch is not luck, run chosen
mutants again and again; the harness then requires the kit to catch every run::

    KIT_MUTANTS=CursorOutsideTheWriteLock,InPlaceJsonNotes KIT_MUTANT_RUNS=10 \\
        python -m pytest tests/test_knowledge_mutants.py -q -p no:cacheprovider

``KIT_MUTANTS`` names mutants by class name (or, in the runtime harness, by description),
comma-separated; the unmutated bases then run only when named too.
"""

from __future__ import annotations

import os

__all__ = ["RUNS", "selected"]

RUNS = max(1, int(os.environ.get("KIT_MUTANT_RUNS", "1")))
"""How many times each selected mutant runs (each run must be caught)."""
_WANTED = {name.strip() for name in os.environ.get("KIT_MUTANTS", "").split(",") if name.strip()}


def selected(*names: str) -> bool:
    """Whether a target known by any of ``names`` runs (every target when none is chosen)."""
    return not _WANTED or bool(_WANTED & set(names))
