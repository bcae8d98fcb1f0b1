"""L1 working memory: a short Markdown summary with five fixed sections, kept under a token budget.

:class:`WorkingMemoryCompressor` turns an agent transcript into the L1 text of a scope::

    # Current Goal
    Fix the flaky login test

    # Completed
    * read_file: tests/test_login.py (120 lines)

    # Important Discoveries
    * The test depends on wall-clock time.

    # Open Issues
    * CI still fails on Windows.

    # Decisions
    * Freeze time with a fixture instead of sleeping.

``compress(messages)`` rebuilds L1 from a transcript; ``update_summary(new_messages)`` merges
new messages into the L1 that is there. With an LLM the model writes the summary; without
one a deterministic extractive summary fills the same sections (the goal is the task the user
set, facts and decisions the user stated are kept as ``User: `` bullets, completed steps come
from tool results, and discoveries, issues and decisions from cue words).

Guarantees, whatever the model answers:

* **Structure**: the stored text always has exactly the five headings above, in that order.
  The answer is parsed leniently (code fences, prose, unknown or repeated headings, missing
  sections) and re-rendered by the library; a bullet is one line and never starts with ``#``.
* **Budget**: the stored text never exceeds ``target_tokens``. An extractive summary written
  from messages alone (``compress``, or a merge into an empty L1) is also no longer than those
  messages when they are shorter than the budget, unless the five headings with the goal and
  what the user stated are larger by themselves (:func:`~.summary.summary_budget`). A merge
  into an existing L1 is bounded by the budget only (that L1 stands for earlier messages too),
  and so is a model's answer, which is not cut for what the model chose to keep.
  Over budget, the model gets one shrink pass, then bullets are removed oldest first from the
  least important section (Completed, then Important Discoveries, Open Issues, Decisions),
  bullets the user stated (``User: ...``) after all others, and the goal is cut last.
* **Failure**: an LLM error, a timeout, an answer without any of the headings or with nothing
  under them leaves L1 byte-identical, logs ``WORKING_MEMORY_FAILED`` and raises nothing.
* **Injection**: the transcript and the existing summary are fenced as data in the prompt,
  and Markdown headings inside them are escaped, so a tool output saying "ignore previous
  instructions" cannot add sections. In the extractive path tool outputs never feed Decisions.
* **Merging** keeps earlier decisions: a decision the model leaves out of an incremental
  update is carried over (budget trimming may still drop the oldest ones).

When the goal is non-empty it is also written to L0 ``current_task``. Each successful run
logs ``WORKING_MEMORY_COMPRESSED`` with ``mode`` (``full`` / ``incremental``), ``method``
(``llm`` / ``extractive``), ``tokens_before`` and ``tokens_after``.

The sync and async methods share one flow (:meth:`WorkingMemoryCompressor._flow`, a generator
that yields the I/O it needs); two short drivers perform that I/O with the manager's and the
LLM's sync or async methods.

The pure pieces live next door: the summary model, its parser, merge and budget in
:mod:`.summary`; the prompts in :mod:`.prompts`; the extractive heuristics in
:mod:`.extractive`; fencing of untrusted text in :mod:`local_ai_memory._shared.fencing`.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Generator, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from local_ai_memory._runtime.extractive import extract_summary
from local_ai_memory._runtime.merge_cursor import MergeCursor, plan_merge
from local_ai_memory._runtime.messages import Message, MessageLike, to_messages
from local_ai_memory._runtime.prompts import (
    DEFAULT_INPUT_TOKENS,
    build_compress_prompt,
    build_shrink_prompt,
    build_update_prompt,
    render_transcript,
)
from local_ai_memory._runtime.scope import MemoryManager
from local_ai_memory._runtime.summary import (
    Summary,
    cap_summary,
    enforce_budget,
    merge_summaries,
    parse_existing,
    parse_summary,
    render_summary,
    summary_budget,
)
from local_ai_memory._shared.drive import adrive, drive
from local_ai_memory._shared.errors import InvalidInputError, LocalMemoryError
from local_ai_memory._shared.events import Event, log_event
from local_ai_memory._shared.models import LLM
from local_ai_memory._shared.tokens import TokenCounter

__all__ = ["CompressionResult", "WorkingMemoryCompressor"]

_MAX_SAVE_ATTEMPTS = 5


@dataclass(frozen=True)
class CompressionResult:
    """What one compression did. ``text`` is the L1 now stored (unchanged when ``ok`` is false)."""

    ok: bool
    changed: bool
    text: str
    mode: Literal["full", "incremental"]
    method: Literal["llm", "extractive", "none"]
    tokens_before: int = 0
    tokens_after: int = 0
    shrink_pass: bool = False
    trimmed: bool = False
    error: str | None = None


@dataclass(frozen=True)
class _Read:
    """Op: read the current L1 text."""


@dataclass(frozen=True)
class _Ask:
    """Op: call the LLM with ``prompt``; the answer (or the exception) is sent back."""

    prompt: str


@dataclass(frozen=True)
class _Save:
    """Op: write the L1 text if L1 still is ``expected`` (``None``: always); replies the L1 found instead."""

    text: str
    expected: str | None


@dataclass(frozen=True)
class _ReadBooks:
    """Op: read the library's L0 bookkeeping (where the merge cursor is kept)."""


@dataclass(frozen=True)
class _SetState:
    """Op: merge ``patch`` into the L0 state."""

    patch: dict[str, Any]


@dataclass(frozen=True)
class _SetBooks:
    """Op: merge ``patch`` into the library's L0 bookkeeping."""

    patch: dict[str, Any]


@dataclass(frozen=True)
class _Log:
    """Op: append merged ``messages`` to the session's conversation log (when it keeps one)."""

    messages: list[Message]


_Op = _Read | _Ask | _Save | _ReadBooks | _SetState | _SetBooks | _Log
_Flow = Generator[_Op, Any, CompressionResult]
_MergeFlow = Generator[_Op, Any, "CompressionResult | None"]
Outcome = TypeVar("Outcome")


class WorkingMemoryCompressor:
    """Builds and merges the L1 working memory of a scoped ``MemoryManager``.

    ``llm`` is any object with ``complete`` / ``acomplete`` (``None``: extractive mode).
    ``target_tokens`` defaults to the manager's ``working_memory_target_tokens`` (768);
    ``max_input_tokens`` bounds the transcript put into one prompt; ``timeout`` (seconds)
    bounds each LLM call.
    """

    def __init__(
        self,
        manager: MemoryManager,
        llm: LLM | None = None,
        token_counter: TokenCounter | None = None,
        target_tokens: int | None = None,
        *,
        max_input_tokens: int = DEFAULT_INPUT_TOKENS,
        timeout: float | None = None,
        conversation_log: Callable[[list[Message]], int] | None = None,
    ) -> None:
        self.manager = manager
        self.conversation_log = conversation_log
        """Where merged messages are logged: a session's log (:meth:`~local_ai_memory.Session.compressor_with`)."""
        self.llm = llm
        self.counter = token_counter or TokenCounter(manager.config.token_encoding)
        self.target_tokens = target_tokens if target_tokens is not None else manager.config.working_memory_target_tokens
        if not isinstance(self.target_tokens, int) or self.target_tokens <= 0:
            raise InvalidInputError(f"target_tokens must be a positive integer, got {self.target_tokens!r}")
        if self.counter.count(render_summary(Summary())) > self.target_tokens:
            raise InvalidInputError(f"target_tokens={self.target_tokens} is too small for the five section headings")
        if max_input_tokens < 256:
            raise InvalidInputError(f"max_input_tokens must be at least 256, got {max_input_tokens!r}")
        if timeout is not None and timeout <= 0:
            raise InvalidInputError(f"timeout must be positive, got {timeout!r}")
        if llm is not None and not isinstance(llm, LLM):
            raise InvalidInputError(f"llm must have complete() and acomplete(), got {type(llm).__name__}")
        self.max_input_tokens = max_input_tokens
        self.timeout = timeout

    def __repr__(self) -> str:
        kind = type(self.llm).__name__ if self.llm is not None else "extractive"
        return f"WorkingMemoryCompressor({kind}, target_tokens={self.target_tokens})"

    # ---- public API

    def compress(self, messages: Iterable[MessageLike]) -> CompressionResult:
        """Rebuild L1 from ``messages``. Never raises for model or storage failures (see ``ok``)."""
        return self._run_sync(self._flow(to_messages(messages), incremental=False))

    def update_summary(self, new_messages: Iterable[MessageLike]) -> CompressionResult:
        """Merge ``new_messages`` into the existing L1 (and, once merged, into the conversation
        log when the compressor has one: see :meth:`~local_ai_memory.Session.compressor_with`)."""
        return self._run_sync(self._update_flow(to_messages(new_messages)))

    async def acompress(self, messages: Iterable[MessageLike]) -> CompressionResult:
        """Async twin of :meth:`compress`."""
        return await self._run_async(self._flow(to_messages(messages), incremental=False))

    async def aupdate_summary(self, new_messages: Iterable[MessageLike]) -> CompressionResult:
        """Async twin of :meth:`update_summary`."""
        return await self._run_async(self._update_flow(to_messages(new_messages)))

    def merge_new(self, conversation: Iterable[MessageLike]) -> CompressionResult | None:
        """Merge the part of ``conversation`` that L1 has not seen yet, and remember how far it got.

        ``conversation`` is what a framework holds (it may have grown, or been trimmed or
        compacted at the front since the last call); the merge cursor kept in L0 bookkeeping
        says which messages were merged (see :mod:`.merge_cursor`). A failed merge keeps the
        cursor, so the next call offers the same messages again. ``None`` when nothing was new.
        """
        return self._run_sync(self._merge_flow(conversation))

    def forget_merged(self) -> None:
        """Forget what was merged (the conversation was cleared): the next :meth:`merge_new` starts over."""
        self.manager.update_bookkeeping({"merge_cursor": None})

    async def amerge_new(self, conversation: Iterable[MessageLike]) -> CompressionResult | None:
        """Async twin of :meth:`merge_new`."""
        return await self._run_async(self._merge_flow(conversation))

    # ---- drivers: perform the flow's I/O, sync or async

    def _call_sync(self, prompt: str) -> str:
        assert self.llm is not None
        if self.timeout is None:
            return self.llm.complete(prompt)
        box: dict[str, Any] = {}

        def target() -> None:
            try:
                box["answer"] = self.llm.complete(prompt)  # type: ignore[union-attr]
            except BaseException as exc:  # handed to the caller's thread below
                box["error"] = exc

        worker = threading.Thread(target=target, name="local-ai-memory-llm", daemon=True)
        worker.start()
        worker.join(self.timeout)
        if worker.is_alive():
            raise TimeoutError(f"the LLM did not answer within {self.timeout}s")
        if "error" in box:
            raise box["error"]
        return str(box["answer"])

    def _run_sync(self, flow: Generator[_Op, Any, Outcome]) -> Outcome:
        return drive(flow, self._answer)

    async def _run_async(self, flow: Generator[_Op, Any, Outcome]) -> Outcome:
        return await adrive(flow, self._aanswer)

    def _answer(self, op: _Op) -> Any:
        if isinstance(op, _Read):
            return self.manager.get_working_memory()
        if isinstance(op, _Ask):
            return self._call_sync(op.prompt)
        if isinstance(op, _Save):
            return self.manager.swap_working_memory(op.expected, op.text)
        if isinstance(op, _ReadBooks):
            return self.manager.bookkeeping()
        if isinstance(op, _SetBooks):
            return self.manager.update_bookkeeping(op.patch)
        if isinstance(op, _Log):
            return self.conversation_log(op.messages) if self.conversation_log is not None else 0
        return self.manager.update_state(op.patch)

    async def _aanswer(self, op: _Op) -> Any:
        if isinstance(op, _Read):
            return await self.manager.aget_working_memory()
        if isinstance(op, _Ask):
            assert self.llm is not None
            return await asyncio.wait_for(self.llm.acomplete(op.prompt), self.timeout)
        if isinstance(op, _Save):
            return await self.manager.aswap_working_memory(op.expected, op.text)
        if isinstance(op, _ReadBooks):
            return await self.manager.abookkeeping()
        if isinstance(op, _SetBooks):
            return await self.manager.aupdate_bookkeeping(op.patch)
        if isinstance(op, _Log):
            log = self.conversation_log
            return await asyncio.to_thread(log, op.messages) if log is not None else 0
        return await self.manager.aupdate_state(op.patch)

    # ---- the shared flows

    def _merge_flow(self, conversation: Iterable[MessageLike]) -> _MergeFlow:
        items = list(conversation) if not isinstance(conversation, (str, bytes, Mapping)) else conversation
        books = yield _ReadBooks()
        known = books.get("merge_cursor")
        plan = plan_merge(items, MergeCursor.from_json(known))
        result = (yield from self._update_flow(list(plan.messages))) if plan.messages else None
        if (result is None or result.ok) and known != plan.cursor.to_json():
            try:  # a merge patch: the rest of the bookkeeping stays as it is
                yield _SetBooks({"merge_cursor": plan.cursor.to_json()})
            except LocalMemoryError as exc:  # L1 is stored; the next call may offer these messages again
                log_event(Event.WORKING_MEMORY_FAILED, level=30, mode="incremental", method="cursor", reason=str(exc))
        return result

    def _update_flow(self, messages: list[Message]) -> _Flow:
        """An incremental merge of ``messages``; once it succeeded they are logged (a failed
        merge logs nothing: :meth:`merge_new` offers the same messages again)."""
        result = yield from self._flow(messages, incremental=True)
        if result.ok and messages:
            try:
                yield _Log(messages)
            except LocalMemoryError as exc:  # L1 is stored; the log misses this run, which is said
                log_event(Event.CONVERSATION_LOG_FAILED, level=30, reason=str(exc))
        return result

    def _fail(self, mode: Literal["full", "incremental"], method: str, existing: str, reason: str) -> CompressionResult:
        log_event(Event.WORKING_MEMORY_FAILED, level=30, mode=mode, method=method, reason=reason)
        return CompressionResult(
            ok=False,
            changed=False,
            text=existing,
            mode=mode,
            method="llm" if method == "llm" else "extractive",
            error=reason,
        )

    def _llm_summary(
        self, messages: list[Message], previous: Summary | None, mode: str
    ) -> Generator[_Op, Any, tuple[Summary, bool] | str]:
        """Ask for the summary, then shrink once if over budget; a string return is the failure reason."""
        counter, target = self.counter, self.target_tokens
        transcript = render_transcript(messages, counter, self.max_input_tokens)
        if previous is not None:
            prompt = build_update_prompt(render_summary(previous), transcript, target)
        else:
            prompt = build_compress_prompt(transcript, target)
        try:
            answer = yield _Ask(prompt)
        except Exception as exc:
            return f"LLM call failed: {type(exc).__name__}: {exc}"
        parsed = parse_summary(str(answer))
        if parsed is None:
            return "the LLM answer has none of the five section headings"
        summary, answered = parsed
        if not summary.goal and not any(summary.bullets.values()):
            # Small models sometimes echo the bare headings; storing that would wipe L1.
            return "the LLM answer has the headings but nothing under them"
        if previous is not None:
            summary = merge_summaries(previous, summary, answered)
        summary = cap_summary(summary, counter, target)
        size = counter.count(render_summary(summary))
        if size <= target:
            return summary, False
        try:
            shorter = yield _Ask(build_shrink_prompt(render_summary(summary), size, target))
        except Exception as exc:  # keep the first answer; trimming will fit it
            log_event(Event.WORKING_MEMORY_FAILED, level=20, mode=mode, method="shrink", reason=repr(exc))
            return summary, True
        reparsed = parse_summary(str(shorter))
        if reparsed is not None:
            candidate = cap_summary(reparsed[0], counter, target)
            candidate.goal = candidate.goal or summary.goal
            if counter.count(render_summary(candidate)) < size:
                summary = candidate
        return summary, True

    def _flow(self, messages: list[Message], *, incremental: bool) -> _Flow:
        mode: Literal["full", "incremental"] = "incremental" if incremental else "full"
        method: Literal["llm", "extractive"] = "extractive" if self.llm is None else "llm"
        if not self.manager.config.working_memory_enabled:
            return CompressionResult(ok=True, changed=False, text="", mode=mode, method="none")
        try:
            existing = yield _Read()
        except LocalMemoryError as exc:
            return self._fail(mode, method, "", f"could not read working memory: {exc}")
        existing = existing or ""
        if not messages:
            return CompressionResult(ok=True, changed=False, text=existing, mode=mode, method=method)
        counter, target = self.counter, self.target_tokens
        full_transcript = "\n\n".join(f"{m.role}: {m.content}" for m in messages)
        tokens_before = counter.count(full_transcript) + (counter.count(existing) if incremental else 0)
        previous = parse_existing(existing) if incremental and existing.strip() else None
        shrink_pass = False

        if self.llm is None:
            summary = extract_summary(messages, counter, target, previous.goal if previous else "")
            if previous is not None:
                summary = merge_summaries(previous, summary)
            summary = cap_summary(summary, counter, target)
        else:
            outcome = yield from self._llm_summary(messages, previous, mode)
            if isinstance(outcome, str):
                return self._fail(mode, method, existing, outcome)
            summary, shrink_pass = outcome

        # Extracted from the messages alone, a summary is no longer than they are (summary_budget);
        # merged into an L1, it stands for earlier messages too, whose size is not known here.
        budget = target
        if self.llm is None and previous is None:
            budget = summary_budget(summary, counter, target, tokens_before)
        summary, trimmed = enforce_budget(summary, counter, budget)
        text = render_summary(summary)
        # An incremental update only replaces the L1 it read; if another writer got in first
        # (e.g. during the LLM call), merge with what they stored instead of losing it.
        for _ in range(_MAX_SAVE_ATTEMPTS):
            if text == existing:
                break
            try:
                found = yield _Save(text, existing if incremental else None)
            except LocalMemoryError as exc:
                return self._fail(mode, method, existing, f"could not store working memory: {exc}")
            if found is None:
                break
            existing = found
            summary, more_trimmed = enforce_budget(merge_summaries(parse_existing(found), summary), counter, target)
            trimmed = trimmed or more_trimmed
            text = render_summary(summary)
        else:
            return self._fail(mode, method, existing, "working memory kept changing under concurrent updates")
        tokens_after = counter.count(text)
        if summary.goal:
            try:
                yield _SetState({"current_task": summary.goal})
            except LocalMemoryError as exc:  # L1 is stored; a stale current_task is only logged
                log_event(Event.WORKING_MEMORY_FAILED, level=30, mode=mode, method="l0_sync", reason=str(exc))
        log_event(
            Event.WORKING_MEMORY_COMPRESSED,
            mode=mode,
            method=method,
            tokens_before=tokens_before,
            tokens_after=tokens_after,
            shrink_pass=shrink_pass,
            trimmed=trimmed,
        )
        return CompressionResult(
            ok=True,
            changed=text != existing,
            text=text,
            mode=mode,
            method=method,
            tokens_before=tokens_before,
            tokens_after=tokens_after,
            shrink_pass=shrink_pass,
            trimmed=trimmed,
        )
