"""L2 checkpoints of agent runs: save after each step, resume after a crash or a signal.

A checkpoint (:class:`AgentCheckpoint`) is stored as plan ``plan_id`` of the manager's scope.
The helpers here save one after every step, mark it ``completed`` or ``interrupted``, and find
the checkpoint a new run should resume.

**Cost per step.** :meth:`CheckpointRun.step` does not rewrite the run: it appends one entry
(the step number, the messages and result ids that are new, the state keys that changed) to
the plan's step log. :func:`load_checkpoint` folds the log into the stored record; a full save
(start, finish, :func:`save_checkpoint`) folds it for good and empties the log. Each entry
carries a ``seq`` and the record remembers the last one folded (``journal_seq``), so a crash
between the save and the emptying never applies an entry twice.

:class:`CheckpointRun` wraps a run::

    with CheckpointRun(manager, "fix-login", task="Fix the login bug") as run:
        for step in range(run.checkpoint.step, 10):   # resumes where the last run stopped
            ...                                        # do one step
            run.step(state={"last_file": "auth.py"})

On leaving the block normally the checkpoint becomes ``completed``. On SIGINT or SIGTERM
(handlers are installed while the block runs in the main thread) the signal becomes a
:class:`RunInterrupted` exception (a ``KeyboardInterrupt``), the checkpoint becomes
``interrupted`` and the exception propagates. Any other exception, or a hard crash, leaves it
``in_progress``: still resumable. Every write is atomic, so a signal arriving during a write
leaves the previous checkpoint, never a torn file.

``async with CheckpointRun(...) as run`` (with ``await run.astep(...)``) does the same in an
event loop: the signal cancels the task that entered the block, the checkpoint becomes
``interrupted`` and :class:`RunInterrupted` is raised in place of the cancellation.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from types import FrameType, TracebackType
from typing import Any

from pydantic import ValidationError

from local_ai_memory._runtime.scope import MemoryManager
from local_ai_memory._shared.errors import InvalidInputError, RecordNotFoundError
from local_ai_memory._shared.naming import validate_id
from local_ai_memory._shared.records import AgentCheckpoint, CheckpointStatus

__all__ = [
    "CheckpointRun",
    "RunInterrupted",
    "afind_resumable",
    "alist_checkpoints",
    "aload_checkpoint",
    "amark_status",
    "asave_checkpoint",
    "find_resumable",
    "list_checkpoints",
    "load_checkpoint",
    "mark_status",
    "raise_on_signals",
    "save_checkpoint",
    "step_entry",
]

_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM)


class RunInterrupted(KeyboardInterrupt):
    """Raised in the main thread when SIGINT or SIGTERM arrives during a :class:`CheckpointRun`."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"run interrupted by {signal.Signals(signum).name}")


def fold_steps(checkpoint: AgentCheckpoint, steps: Sequence[dict[str, Any]]) -> AgentCheckpoint:
    """The checkpoint with the log entries it has not folded yet applied, in order (pure)."""
    current = checkpoint
    for entry in steps:
        seq = entry.get("seq")
        if not isinstance(seq, int) or seq <= current.journal_seq:
            continue
        added = [item for item in entry.get("messages", []) if isinstance(item, dict)]
        messages = added if entry.get("reset") else [*current.messages, *added]
        ids = list(dict.fromkeys([*current.tool_result_ids, *entry.get("tool_result_ids", [])]))
        changes: dict[str, Any] = {
            "step": entry.get("step", current.step),
            "messages": messages,
            "tool_result_ids": ids,
            "state": {**current.state, **entry.get("state", {})},
            "status": "in_progress",
            "reason": None,
            "updated_at": entry.get("updated_at", current.updated_at),
            "pid": entry.get("pid", current.pid),
            "journal_seq": seq,
        }
        current = current.model_copy(update=changes)
    return current


def step_entry(
    seq: int,
    step: int,
    *,
    messages: Sequence[dict[str, Any]] = (),
    reset: bool = False,
    tool_result_ids: Sequence[str] = (),
    state: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One step-log entry (what :meth:`CheckpointRun.step` appends)."""
    entry: dict[str, Any] = {"seq": seq, "step": step, "updated_at": time.time(), "pid": os.getpid()}
    if messages or reset:
        entry["messages"] = list(messages)
    if reset:
        entry["reset"] = True
    if tool_result_ids:
        entry["tool_result_ids"] = list(tool_result_ids)
    if state:
        entry["state"] = state
    return entry


def save_checkpoint(manager: MemoryManager, checkpoint: AgentCheckpoint) -> AgentCheckpoint:
    """Store the whole ``checkpoint`` (stamped with the time and this pid) as plan ``checkpoint.plan_id``.

    Folds and empties the plan's step log (``checkpoint`` is taken to include it).
    """
    validate_id(checkpoint.plan_id, "plan id")
    for result_id in checkpoint.tool_result_ids:
        validate_id(result_id, "tool result id")
    stamped = checkpoint.model_copy(update={"updated_at": time.time(), "pid": os.getpid()})
    manager.save_plan(stamped.plan_id, stamped.model_dump(mode="json"))
    manager.clear_plan_steps(stamped.plan_id)
    return stamped


def _as_checkpoint(payload: Any) -> AgentCheckpoint | None:
    try:
        return AgentCheckpoint.model_validate(payload)
    except ValidationError:
        return None


def load_checkpoint(manager: MemoryManager, plan_id: str) -> AgentCheckpoint:
    """The checkpoint stored as plan ``plan_id``; :class:`RecordNotFoundError` if there is none."""
    checkpoint = _as_checkpoint(manager.load_plan(plan_id))
    if checkpoint is None:
        raise RecordNotFoundError(f"plan {plan_id!r} is not an agent checkpoint")
    return fold_steps(checkpoint, manager.plan_steps(plan_id))


def list_checkpoints(manager: MemoryManager) -> list[AgentCheckpoint]:
    """Every checkpoint of the scope, newest first (plans that are not checkpoints are skipped)."""
    found: list[AgentCheckpoint] = []
    for plan_id, payload in manager.list_plans().items():
        checkpoint = _as_checkpoint(payload)
        if checkpoint is not None:
            found.append(fold_steps(checkpoint, manager.plan_steps(plan_id)))
    return sorted(found, key=lambda item: item.updated_at, reverse=True)


def find_resumable(manager: MemoryManager) -> AgentCheckpoint | None:
    """The newest ``in_progress`` or ``interrupted`` checkpoint of the scope, or ``None``."""
    return next((item for item in list_checkpoints(manager) if item.resumable), None)


def mark_status(
    manager: MemoryManager, plan_id: str, status: CheckpointStatus, *, reason: str | None = None
) -> AgentCheckpoint:
    """Set the status of checkpoint ``plan_id`` (under the scope's lock, so no step is lost)."""
    with manager.tool_index_locked():
        current = load_checkpoint(manager, plan_id)
        return save_checkpoint(manager, current.model_copy(update={"status": status, "reason": reason}))


async def asave_checkpoint(manager: MemoryManager, checkpoint: AgentCheckpoint) -> AgentCheckpoint:
    """Async twin of :func:`save_checkpoint`."""
    return await asyncio.to_thread(save_checkpoint, manager, checkpoint)


async def aload_checkpoint(manager: MemoryManager, plan_id: str) -> AgentCheckpoint:
    """Async twin of :func:`load_checkpoint`."""
    return await asyncio.to_thread(load_checkpoint, manager, plan_id)


async def alist_checkpoints(manager: MemoryManager) -> list[AgentCheckpoint]:
    """Async twin of :func:`list_checkpoints`."""
    return await asyncio.to_thread(list_checkpoints, manager)


async def afind_resumable(manager: MemoryManager) -> AgentCheckpoint | None:
    """Async twin of :func:`find_resumable`."""
    return await asyncio.to_thread(find_resumable, manager)


async def amark_status(
    manager: MemoryManager, plan_id: str, status: CheckpointStatus, *, reason: str | None = None
) -> AgentCheckpoint:
    """Async twin of :func:`mark_status`."""
    return await asyncio.to_thread(lambda: mark_status(manager, plan_id, status, reason=reason))


def _raise_interrupted(signum: int, frame: FrameType | None) -> None:
    raise RunInterrupted(signum)


@contextlib.contextmanager
def raise_on_signals(signals: Sequence[signal.Signals] = _SIGNALS) -> Iterator[bool]:
    """Turn ``signals`` into :class:`RunInterrupted` inside the block; yield whether installed.

    Handlers can only be installed from the main thread; elsewhere this does nothing and
    yields ``False``. The previous handlers are restored on exit.
    """
    if threading.current_thread() is not threading.main_thread():
        yield False
        return
    previous = {signum: signal.signal(signum, _raise_interrupted) for signum in signals}
    try:
        yield True
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextlib.contextmanager
def _signals_ignored(active: bool) -> Iterator[None]:
    """Ignore a second SIGINT/SIGTERM while the ``interrupted`` status is being written."""
    if not active or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, signal.SIG_IGN) for signum in _SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


class CheckpointRun:
    """Checkpoints one agent run: ``in_progress`` per step, then ``completed`` or ``interrupted``.

    If the scope already holds a resumable checkpoint with this ``plan_id`` and ``resume`` is
    true, the run continues from it (``run.checkpoint.step`` says how far it got); otherwise a
    fresh checkpoint starts at step 0.
    """

    def __init__(
        self,
        manager: MemoryManager,
        plan_id: str,
        *,
        task: str = "",
        plan: Sequence[str] = (),
        resume: bool = True,
        handle_signals: bool = True,
    ) -> None:
        validate_id(plan_id, "plan id")
        if not isinstance(task, str):
            raise InvalidInputError(f"task must be a string, got {type(task).__name__}")
        self.manager = manager
        self.plan_id = plan_id
        self.resume = resume
        self.handle_signals = handle_signals
        self.checkpoint = AgentCheckpoint(plan_id=plan_id, task=task, plan=list(plan))
        self.resumed = False
        self._saving = threading.Lock()  # a step's save and the final status never interleave
        self._closed = False
        self._signals: contextlib.ExitStack | None = None
        self._caught_signal: int | None = None
        self._loop_signals: list[signal.Signals] = []

    def start(self) -> AgentCheckpoint:
        """Load or create the checkpoint and save it as ``in_progress``."""
        if self.resume:
            with contextlib.suppress(RecordNotFoundError):
                previous = load_checkpoint(self.manager, self.plan_id)
                if previous.resumable:
                    self.checkpoint = previous
                    self.resumed = True
        with self._saving:
            self.checkpoint = save_checkpoint(
                self.manager, self.checkpoint.model_copy(update={"status": "in_progress", "reason": None})
            )
            self._closed = False
            return self.checkpoint

    def step(
        self,
        *,
        state: dict[str, Any] | None = None,
        messages: list[dict[str, Any]] | None = None,
        tool_result_ids: Sequence[str] = (),
        advance: int = 1,
    ) -> AgentCheckpoint:
        """Record that a step is done: bump ``step``, merge ``state``, set ``messages``, add result ids.

        Appends only what is new to the step log: when ``messages`` extends the list saved so
        far, only the added messages are written.
        """
        with self._saving:
            current = self.checkpoint
            if self._closed:
                # The run already ended (e.g. a cancelled ``astep`` whose thread finished after
                # ``interrupted`` was saved): its final status must not be overwritten.
                return current
            new_ids = [
                result_id for result_id in dict.fromkeys(tool_result_ids) if result_id not in current.tool_result_ids
            ]
            for result_id in new_ids:
                validate_id(result_id, "tool result id")
            added: list[dict[str, Any]] = []
            reset = False
            if messages is not None:
                known = len(current.messages)
                if len(messages) >= known and (known == 0 or messages[known - 1] == current.messages[-1]):
                    added = list(messages[known:])
                else:
                    added, reset = list(messages), True
            entry = step_entry(
                current.journal_seq + 1,
                current.step + advance,
                messages=added,
                reset=reset,
                tool_result_ids=new_ids,
                state=state,
            )
            with self.manager.tool_index_locked():  # retention waits while a step adds references
                self.manager.append_plan_steps(self.plan_id, [entry])
            self.checkpoint = fold_steps(current, [entry])
            return self.checkpoint

    def finish(self, status: CheckpointStatus, reason: str | None = None) -> AgentCheckpoint:
        """Save the final status; later :meth:`step` calls of this run no longer save."""
        with self._saving:
            self.checkpoint = save_checkpoint(
                self.manager, self.checkpoint.model_copy(update={"status": status, "reason": reason})
            )
            self._closed = status != "in_progress"
            return self.checkpoint

    def __enter__(self) -> CheckpointRun:
        stack = contextlib.ExitStack()
        if self.handle_signals:
            stack.enter_context(raise_on_signals())
        self._signals = stack
        try:
            self.start()
        except BaseException:
            stack.close()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        try:
            if error is None:
                self.finish("completed")
            elif isinstance(error, KeyboardInterrupt):
                reason = signal.Signals(error.signum).name if isinstance(error, RunInterrupted) else "SIGINT"
                with _signals_ignored(self.handle_signals):
                    self._tidy()
                    self.finish("interrupted", reason)
        finally:
            if self._signals is not None:
                self._signals.close()
                self._signals = None

    async def astart(self) -> AgentCheckpoint:
        """Async twin of :meth:`start`."""
        return await asyncio.to_thread(self.start)

    async def astep(
        self,
        *,
        state: dict[str, Any] | None = None,
        messages: list[dict[str, Any]] | None = None,
        tool_result_ids: Sequence[str] = (),
        advance: int = 1,
    ) -> AgentCheckpoint:
        """Async twin of :meth:`step`."""
        return await asyncio.to_thread(
            lambda: self.step(state=state, messages=messages, tool_result_ids=tool_result_ids, advance=advance)
        )

    async def afinish(self, status: CheckpointStatus, reason: str | None = None) -> AgentCheckpoint:
        """Async twin of :meth:`finish`."""
        return await asyncio.to_thread(self.finish, status, reason)

    async def __aenter__(self) -> CheckpointRun:
        """Start the run; SIGINT/SIGTERM cancel the task that entered and end as ``interrupted``.

        The handlers go through ``loop.add_signal_handler`` (main thread, Unix event loops).
        """
        self._caught_signal = None
        self._loop_signals = []
        if self.handle_signals and threading.current_thread() is threading.main_thread():
            loop = asyncio.get_running_loop()
            task = asyncio.current_task()
            for signum in _SIGNALS:
                try:
                    loop.add_signal_handler(signum, self._on_loop_signal, signum, task)
                except (NotImplementedError, RuntimeError, ValueError):  # pragma: no cover - non-Unix loops
                    continue
                self._loop_signals.append(signum)
        try:
            await self.astart()
        except BaseException:
            self._remove_loop_signals()
            raise
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        try:
            if error is None:
                await self.afinish("completed")
            elif self._caught_signal is not None and isinstance(error, asyncio.CancelledError):
                await asyncio.shield(self.afinish("interrupted", signal.Signals(self._caught_signal).name))
                raise RunInterrupted(self._caught_signal) from error
            elif isinstance(error, KeyboardInterrupt):
                reason = signal.Signals(error.signum).name if isinstance(error, RunInterrupted) else "SIGINT"
                await asyncio.shield(self.afinish("interrupted", reason))
        finally:
            self._remove_loop_signals()

    def _on_loop_signal(self, signum: int, task: asyncio.Task[Any] | None) -> None:
        if self._caught_signal is None:
            self._caught_signal = signum
            if task is not None:
                task.cancel()

    def _remove_loop_signals(self) -> None:
        if self._loop_signals:
            loop = asyncio.get_running_loop()
            for signum in self._loop_signals:
                loop.remove_signal_handler(signum)
            self._loop_signals = []

    def _tidy(self) -> None:
        """Clear what a write cut short by the signal may have left."""
        self.manager.cleanup_temp_files()
