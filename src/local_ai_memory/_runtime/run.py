"""The post-run step: merge a run into the L1 working memory, then compact the session log.

:func:`finish_run` (and its async twin) joins the compressor and the session store, which is
why it lives here rather than next to either: the store knows nothing of the compressor, so
the message module stays free of the compressor and its prompts (no import circle). The
session is compacted only when the merge succeeded, so messages never disappear before they
reached the working memory.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from local_ai_memory._runtime.compressor import CompressionResult, WorkingMemoryCompressor
from local_ai_memory._runtime.messages import MessageLike, SessionMessageStore
from local_ai_memory._shared.errors import InvalidInputError

__all__ = ["RunOutcome", "afinish_run", "finish_run"]


@dataclass(frozen=True)
class RunOutcome:
    """What :func:`finish_run` did."""

    summary: CompressionResult
    compacted: int
    status: Literal["compacted", "kept", "summary_failed"]


def _merged(result: CompressionResult | None) -> CompressionResult:
    """``merge_new``'s answer, with "nothing new" as a successful merge that changed nothing."""
    return (
        result
        if result is not None
        else CompressionResult(ok=True, changed=False, text="", mode="incremental", method="none")
    )


def _decide(store: SessionMessageStore, summary: CompressionResult, history_limit: int | None) -> bool:
    if history_limit is None:
        history_limit = store.config.working_memory_history_limit
    if history_limit < 0:
        raise InvalidInputError(f"history_limit must be non-negative, got {history_limit!r}")
    return summary.ok and len(store) > history_limit


def finish_run(
    compressor: WorkingMemoryCompressor,
    store: SessionMessageStore,
    run_messages: Iterable[MessageLike],
    *,
    history_limit: int | None = None,
    keep_last: int | None = None,
    new_only: bool = False,
) -> RunOutcome:
    """The post-run step: merge ``run_messages`` into L1, then compact the session if it is too long.

    ``history_limit`` and ``keep_last`` default to ``memory.working_memory_history_limit`` and
    ``memory.working_memory_compact_keep_last``. With ``new_only``, ``run_messages`` is the
    whole conversation as the caller holds it and only what L1 has not seen is merged
    (:meth:`WorkingMemoryCompressor.merge_new`).

    The session is compacted only when the merge succeeded, so messages never disappear before
    they reached the working memory.
    """
    summary = _merged(compressor.merge_new(run_messages)) if new_only else compressor.update_summary(list(run_messages))
    if not _decide(store, summary, history_limit):
        return RunOutcome(summary, 0, "kept" if summary.ok else "summary_failed")
    return RunOutcome(summary, store.compact(keep_last), "compacted")


async def afinish_run(
    compressor: WorkingMemoryCompressor,
    store: SessionMessageStore,
    run_messages: Iterable[MessageLike],
    *,
    history_limit: int | None = None,
    keep_last: int | None = None,
    new_only: bool = False,
) -> RunOutcome:
    """Async twin of :func:`finish_run`."""
    if new_only:
        summary = _merged(await compressor.amerge_new(run_messages))
    else:
        summary = await compressor.aupdate_summary(list(run_messages))
    if not await asyncio.to_thread(_decide, store, summary, history_limit):
        return RunOutcome(summary, 0, "kept" if summary.ok else "summary_failed")
    return RunOutcome(summary, await store.acompact(keep_last), "compacted")
