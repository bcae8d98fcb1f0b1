"""A progress bar for the library's ``progress(done, total)`` callbacks, in a terminal or a notebook.

Long operations (``build_index``, ``embed_notes``, their async twins) take a ``progress``
callable that they call with what is done and the total (passages, for embedding).
:func:`progress_bar` gives one that draws a rich bar with the count, the time spent and the
time left (rich draws in a terminal and in Jupyter alike); the command line uses it too::

    from local_ai_memory import progress_bar

    with progress_bar("embedding") as progress:
        memory.knowledge.embed_notes("alice", progress=progress)
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

__all__ = ["progress_bar", "progress_bars"]

Report = Callable[[int, int], None]


@contextlib.contextmanager
def progress_bars(labels: Sequence[str], *, console: Any = None, transient: bool = False) -> Iterator[list[Report]]:
    """One ``progress(done, total)`` callable per label, each drawing its own bar in one display
    while the block runs: ``done/total``, elapsed time and an estimate of the time left. A bar
    shows once its callable is first called. ``console`` is a ``rich.console.Console`` (default:
    rich's own); ``transient`` removes the bars at the end."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, TimeRemainingColumn(), TextColumn("left"), console=console, transient=transient) as bar:

        def reporter(label: str) -> Report:
            task: list[Any] = []

            def report(done: int, total: int) -> None:
                if not task:
                    task.append(bar.add_task(label, total=None))
                bar.update(task[0], completed=done, total=total or None)

            return report

        yield [reporter(label) for label in labels]


@contextlib.contextmanager
def progress_bar(label: str, *, console: Any = None, transient: bool = False) -> Iterator[Report]:
    """A ``progress(done, total)`` callable drawing a bar labelled ``label`` while the block runs
    (see :func:`progress_bars`)."""
    with progress_bars([label], console=console, transient=transient) as (report,):
        yield report
