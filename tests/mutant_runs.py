"""What both mutation harnesses (test_runtime_mutants.py, test_knowledge_mutants.py) share:
which mutants to run and how many times.

By default every mutant runs once. To show that a racy or timed catch is not luck, run chosen
mutants again and again; the harness then requires the kit to catch every run::

    KIT_MUTANTS=CursorOutsideTheWriteLock,InPlaceFileNotes KIT_MUTANT_RUNS=10 \\
        python -m pytest tests/test_knowledge_mutants.py -q -p no:cacheprovider

``KIT_MUTANTS`` names mutants by class name (or, in the runtime harness, by description),
comma-separated; the unmutated bases then run only when named too.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

__all__ = ["RUNS", "persisting", "selected"]

T = TypeVar("T", bound=type)

RUNS = max(1, int(os.environ.get("KIT_MUTANT_RUNS", "1")))
"""How many times each selected mutant runs (each run must be caught)."""
_WANTED = {name.strip() for name in os.environ.get("KIT_MUTANTS", "").split(",") if name.strip()}


def selected(*names: str) -> bool:
    """Whether a target known by any of ``names`` runs (every target when none is chosen)."""
    return not _WANTED or bool(_WANTED & set(names))


def persisting(base: type, names: Iterable[str]) -> Callable[[T], T]:
    """A class decorator for the mutants that keep ``base`` (a reference backend) in a file:
    each method of ``names`` runs ``base``'s, then ``self._persist()``."""

    def wrap(name: str) -> Callable[..., Any]:
        def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            result = getattr(base, name)(self, *args, **kwargs)
            self._persist()
            return result

        method.__name__ = name
        return method

    def decorate(cls: T) -> T:
        for name in names:
            setattr(cls, name, wrap(name))
        return cls

    return decorate
