"""Agent middleware for ``langchain.agents.create_agent``: what the model sees, and what survives a crash.

Callbacks can only watch an agent; middleware sits in its path. :class:`LocalMemoryMiddleware`
does all of the following, and each part is also available alone:

* :class:`ToolResultMiddleware` (``wrap_tool_call`` / ``awrap_tool_call``): a successful tool
  output above ``config.tool_result_inline_limit`` UTF-8 bytes is saved to L3 and the
  ``ToolMessage`` the model gets carries the JSON reference ``{result_id, summary, size}``
  instead. Error results and the output of ``load_tool_result`` and ``search_tool_result``
  themselves stay inline. It also registers those two tools with the agent.
* :class:`MemoryPromptMiddleware` (``wrap_model_call``): appends the L0 agent state and the L1
  working memory, fenced as data by the core's ``ContextBuilder``, to the system message of
  each model request. The graph state is not changed: nothing is added to ``messages``.
* :class:`CheckpointMiddleware` (``before_agent`` / ``before_model`` / ``after_agent``): before
  every model call (so after every tool step) it updates L0 (``current_task``,
  ``current_step``) and saves the conversation as an L2 checkpoint (``in_progress``); after
  the run the checkpoint becomes ``completed``. Its own records (``plan_id``,
  ``resumed_from_step``) go to the L0 bookkeeping, which prompts never show. When a run starts and
  the scope holds a resumable checkpoint of the same ``plan_id`` (the process was killed, or
  the run raised), the stored conversation is restored and the agent continues from it.
* :class:`WorkingMemoryMiddleware` (``after_agent``): merges the messages of the run into L1
  with the core's ``WorkingMemoryCompressor`` (an LLM if given, else the extractive summary).

Every part works on one :class:`~local_ai_memory.Memory` (``memory=``; ``config=`` is a
shortcut that builds ``Memory(config)``): :class:`LocalMemoryMiddleware` hands its memory to
its parts, and :meth:`LocalMemoryMiddleware.checkpointer` puts a LangGraph checkpointer on that
same memory. The user and session are bound at construction or read per run from the runtime
context (``agent.invoke(..., context={"user_id": ..., "session_id": ...})``) or ``configurable``.
Every hook has a sync and an async variant; the async ones run the file I/O in a worker thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest, ModelResponse
from langchain_core.language_models import BaseLanguageModel
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
    messages_from_dict,
    messages_to_dict,
)
from langchain_core.tools import BaseTool
from langgraph.config import get_config
from langgraph.graph.message import REMOVE_ALL_MESSAGES
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.runtime import Runtime
from langgraph.types import Command

from local_ai_memory import (
    LLM,
    CheckpointRun,
    ContextBuilder,
    InvalidInputError,
    LocalMemoryError,
    Memory,
    MemoryConfig,
    RecordNotFoundError,
    RetentionPolicy,
    RunInterrupted,
    Session,
    TokenCounter,
    ToolResultStore,
    WorkingMemoryCompressor,
)
from local_ai_memory.integration import load_checkpoint, mark_status, parse_reference, raise_on_signals
from local_ai_memory.types import AgentCheckpoint

from ._adapters import as_llm
from ._retriever import LocalMemoryRetriever
from ._scope import MemoryLocation, memory_of, resolve_scope
from ._tools import LOAD_TOOL_RESULT, SEARCH_TOOL_RESULT, LoadToolResultTool, SearchToolResultTool

if TYPE_CHECKING:
    from ._checkpointer import LocalMemorySaver

__all__ = [
    "CheckpointMiddleware",
    "LocalMemoryMiddleware",
    "MemoryPromptMiddleware",
    "ToolResultMiddleware",
    "WorkingMemoryMiddleware",
    "message_text",
    "reference_of",
]

DEFAULT_PLAN_ID = "agent"
logger = logging.getLogger("langchain_local_ai_memory")
_TASK_CHARS = 500
_KNOWLEDGE_CACHE = 64


def message_text(message: BaseMessage) -> str:
    """The text of a message (text blocks of a list content joined)."""
    return str(message.text)


def reference_of(message: BaseMessage) -> str | None:
    """The ``result_id`` if ``message`` is a tool message carrying an L3 reference, else ``None``."""
    if not isinstance(message, ToolMessage):
        return None
    reference = parse_reference(message.content)
    return None if reference is None else reference.result_id


def _current_config() -> Any:
    with contextlib.suppress(RuntimeError):
        return get_config()
    return None


_CHECKPOINTER_KEY = "__pregel_checkpointer"  # where LangGraph puts the run's checkpointer in ``configurable``


def _graph_persists() -> bool:
    """Whether this run is persisted by a LangGraph checkpointer (``create_agent(checkpointer=...)``).

    Then LangGraph keeps the conversation, resumes it (``invoke(None, thread)``) and knows what is
    left to do; the middleware writes no L2 record of its own beside it.
    """
    config = _current_config()
    configurable = config.get("configurable", {}) if isinstance(config, dict) else {}
    return configurable.get(_CHECKPOINTER_KEY) is not None


class _Scoped:
    """Shared by the parts: the memory, and how a call's scope is found."""

    def __init__(
        self,
        user_id: str | None,
        session_id: str | None,
        memory: Memory | None,
        config: MemoryConfig | None,
    ) -> None:
        self.location = MemoryLocation(memory_of(memory, config))
        self.user_id = user_id
        self.session_id = session_id
        if user_id is not None and session_id is not None:
            resolve_scope(user_id, session_id)  # fail early on a malformed id

    @property
    def memory(self) -> Memory:
        return self.location.memory

    @property
    def config(self) -> MemoryConfig:
        return self.location.config

    def manager(self, runtime: Any, config: Any = None) -> Session:
        """The session of the call (bound ids, else the runtime context / configurable)."""
        run_config = config if config is not None else getattr(runtime, "config", None) or _current_config()
        return self.location.session(*resolve_scope(self.user_id, self.session_id, runtime, run_config))


class _MemoryPart(AgentMiddleware[AgentState[Any], Any, Any]):
    """A middleware on one memory: :attr:`memory`, and the scope of each call."""

    _scope: _Scoped

    @property
    def memory(self) -> Memory:
        """The :class:`~local_ai_memory.Memory` this middleware keeps."""
        return self._scope.memory


# --------------------------------------------------------------------------- L3: tool results


class ToolResultMiddleware(_MemoryPart):
    """Moves large successful tool outputs to L3; the model gets a reference and the tools to read and search it."""

    def __init__(
        self,
        user_id: str | None = None,
        session_id: str | None = None,
        *,
        memory: Memory | None = None,
        config: MemoryConfig | None = None,
        retention: RetentionPolicy | None = None,
        inline_tools: Sequence[str] = (),
        register_tool: bool = True,
    ) -> None:
        super().__init__()
        self._scope = _Scoped(user_id, session_id, memory, config)
        self.retention = retention
        self.inline_tools = frozenset({LOAD_TOOL_RESULT, SEARCH_TOOL_RESULT, *inline_tools})
        self.tools: Sequence[BaseTool] = (
            [
                LoadToolResultTool(memory=self.memory, user_id=user_id, session_id=session_id),
                SearchToolResultTool(memory=self.memory, user_id=user_id, session_id=session_id),
            ]
            if register_tool
            else []
        )

    def _store(self, session: Session) -> ToolResultStore:
        return session.tool_results.with_retention(self.retention)

    def _shrink(self, request: ToolCallRequest, result: ToolMessage | Command[Any]) -> ToolMessage | Command[Any]:
        if not isinstance(result, ToolMessage) or result.status == "error":
            return result
        name = result.name or request.tool_call.get("name") or ""
        if name in self.inline_tools:
            return result
        if isinstance(result.content, str):
            content = result.content
        elif all(isinstance(block, str) or block.get("type") == "text" for block in result.content):
            content = message_text(result)
        else:
            return result  # images or other blocks: not ours to rewrite
        reference = self._store(self._scope.manager(request.runtime)).externalize(name, content)
        if reference == content:
            return result
        return result.model_copy(update={"content": reference})

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        """Run the tool, then externalize its output if it is large."""
        return self._shrink(request, handler(request))

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        """Async twin of :meth:`wrap_tool_call` (the write runs in a worker thread)."""
        result = await handler(request)
        return await asyncio.to_thread(self._shrink, request, result)


# --------------------------------------------------------------------------- L0 + L1 in the prompt


def _with_memory(system: SystemMessage | None, memory: str) -> SystemMessage:
    if system is None:
        return SystemMessage(content=memory)
    if isinstance(system.content, str):
        text = f"{system.content}\n\n{memory}" if system.content else memory
        return system.model_copy(update={"content": text})
    return system.model_copy(update={"content": [*system.content, {"type": "text", "text": memory}]})


class MemoryPromptMiddleware(_MemoryPart):
    """Adds the L0 state and L1 working memory (and, with a retriever, knowledge) to the system message.

    With ``retriever`` (a :class:`~langchain_local_ai_memory.LocalMemoryRetriever`), the
    user's knowledge notes matching the latest human message are added too; with
    ``recall_tokens`` (off: 0), the passages of their notes and past conversations that
    :meth:`~local_ai_memory.Memory.recall` finds for it, within that many tokens. Both run once
    per distinct message, not once per model call. ``max_tokens`` bounds the whole block; the
    core's ``ContextBuilder`` drops knowledge first and working memory last.
    """

    def __init__(
        self,
        user_id: str | None = None,
        session_id: str | None = None,
        *,
        memory: Memory | None = None,
        config: MemoryConfig | None = None,
        max_tokens: int = 1024,
        token_counter: TokenCounter | None = None,
        retriever: LocalMemoryRetriever | None = None,
        recall_tokens: int = 0,
    ) -> None:
        super().__init__()
        if isinstance(recall_tokens, bool) or not isinstance(recall_tokens, int) or recall_tokens < 0:
            raise InvalidInputError(f"recall_tokens must be a non-negative integer, got {recall_tokens!r}")
        self._scope = _Scoped(user_id, session_id, memory, config)
        self.max_tokens = max_tokens
        self.counter = token_counter or self.memory.token_counter
        self.retriever = retriever
        self.recall_tokens = recall_tokens
        self._found: dict[tuple[str, str], str] = {}
        self._found_lock = threading.Lock()

    def memory_text(self, runtime: Any, knowledge: str = "") -> str:
        """The fenced memory block for this scope ("" when there is nothing to show)."""
        builder = ContextBuilder(self._scope.manager(runtime).engine, self.counter, max_tokens=self.max_tokens)
        return builder.build(messages=[], knowledge=knowledge).text

    def _query(self, request: ModelRequest[Any]) -> tuple[str, str] | None:
        if self.retriever is None and not self.recall_tokens:
            return None
        last = next((m for m in reversed(request.messages) if isinstance(m, HumanMessage)), None)
        if last is None or not message_text(last).strip():
            return None
        user, _ = resolve_scope(self._scope.user_id, self._scope.session_id, request.runtime, _current_config())
        return user, message_text(last)

    def _remember(self, key: tuple[str, str], text: str) -> str:
        with self._found_lock:
            self._found[key] = text
            while len(self._found) > _KNOWLEDGE_CACHE:
                self._found.pop(next(iter(self._found)))
        return text

    def _knowledge(self, request: ModelRequest[Any]) -> str:
        key = self._query(request)
        if key is None:
            return ""
        if key in self._found:
            return self._found[key]
        retrieved = self.retriever.retrieve_result(key[1], user_id=key[0]).text if self.retriever else ""
        recalled = self.memory.recall(key[1], key[0], max_tokens=self.recall_tokens).text if self.recall_tokens else ""
        return self._remember(key, "\n\n".join(part for part in (retrieved, recalled) if part))

    async def _aknowledge(self, request: ModelRequest[Any]) -> str:
        key = self._query(request)
        if key is None:
            return ""
        if key in self._found:
            return self._found[key]
        retrieved = (await self.retriever.aretrieve_result(key[1], user_id=key[0])).text if self.retriever else ""
        recall = self.memory.arecall(key[1], key[0], max_tokens=self.recall_tokens) if self.recall_tokens else None
        recalled = (await recall).text if recall is not None else ""
        return self._remember(key, "\n\n".join(part for part in (retrieved, recalled) if part))

    def _request(self, request: ModelRequest[Any], memory: str) -> ModelRequest[Any]:
        if not memory:
            return request
        return request.override(system_message=_with_memory(request.system_message, memory))

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> Any:
        """Call the model with memory appended to the system message."""
        memory = self.memory_text(request.runtime, self._knowledge(request))
        return handler(self._request(request, memory))

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> Any:
        """Async twin of :meth:`wrap_model_call`."""
        knowledge = await self._aknowledge(request)
        memory = await asyncio.to_thread(self.memory_text, request.runtime, knowledge)
        return await handler(self._request(request, memory))


# --------------------------------------------------------------------------- L0 + L2: checkpoints


def _messages(state: Any) -> list[AnyMessage]:
    return list(state.get("messages", []) if isinstance(state, dict) else getattr(state, "messages", []))


def _task_of(messages: Sequence[BaseMessage]) -> str:
    first = next((m for m in messages if isinstance(m, HumanMessage)), None)
    return "" if first is None else " ".join(message_text(first).split())[:_TASK_CHARS]


def _step_of(messages: Sequence[BaseMessage]) -> int:
    return sum(1 for m in messages if isinstance(m, AIMessage))


@dataclass
class _TrackedRun:
    """This process's view of a scope's run: how much of the conversation is already saved."""

    run: CheckpointRun
    known: int = 0
    last: BaseMessage | None = None

    def continues(self, messages: Sequence[BaseMessage]) -> bool:
        """Whether ``messages`` extends what was saved (so only the tail needs writing)."""
        if self.last is None or not 0 < self.known <= len(messages):
            return False
        seen = messages[self.known - 1]
        return seen.id == self.last.id if self.last.id else seen == self.last


class CheckpointMiddleware(_MemoryPart):
    """Keeps L2 for an agent run: the step counter in L0, and resuming a run that was cut short.

    **With a LangGraph checkpointer** (``create_agent(..., checkpointer=...)``, for example
    :meth:`LocalMemoryMiddleware.checkpointer`), LangGraph is the one L2: it stores every step,
    resumes a thread (``agent.invoke(None, {"configurable": {"thread_id": ...}})``) and knows
    whether a thread is finished (``agent.get_state(thread).next``). This middleware then writes
    no checkpoint of its own; it keeps ``current_task`` and ``current_step`` in L0 and the run's
    status (``in_progress``, ``completed``, ``interrupted``) in the session's bookkeeping.

    **Without one**, it saves an L2 checkpoint before every model call (one step-log entry per
    step) and resumes an unfinished run: ``plan_id`` names the checkpoint within the scope (one
    resumable run per plan id); the stored conversation comes first and input messages it does
    not already hold are appended after it. With ``resume=False`` (or another ``plan_id``) a
    stored unfinished run is overwritten instead of continued.
    """

    def __init__(
        self,
        user_id: str | None = None,
        session_id: str | None = None,
        *,
        memory: Memory | None = None,
        config: MemoryConfig | None = None,
        plan_id: str = DEFAULT_PLAN_ID,
        resume: bool = True,
    ) -> None:
        super().__init__()
        self._scope = _Scoped(user_id, session_id, memory, config)
        self.plan_id = plan_id
        self.resume = resume
        self._running: set[tuple[str | None, str | None]] = set()
        self._runs: dict[tuple[str | None, str | None], _TrackedRun] = {}
        self._running_lock = threading.Lock()

    def _started(self, manager: Session, running: bool) -> None:
        with self._running_lock:
            scope = (manager.user_id, manager.session_id)
            if running:
                self._running.add(scope)
            else:
                self._running.discard(scope)
                self._runs.pop(scope, None)

    def _previous(self, manager: Session) -> AgentCheckpoint | None:
        try:
            checkpoint = load_checkpoint(manager.engine, self.plan_id)
        except RecordNotFoundError:
            return None
        return checkpoint if checkpoint.resumable else None

    def _begin(self, manager: Session, messages: Sequence[BaseMessage]) -> _TrackedRun:
        """Start (or resume) this scope's run; a resumable checkpoint is continued unless ``resume`` is off."""
        run = manager.checkpoint_run(self.plan_id, task=_task_of(messages), resume=self.resume, handle_signals=False)
        run.start()
        manager.engine.update_bookkeeping({"plan_id": self.plan_id})
        tracked = _TrackedRun(run)
        with self._running_lock:
            self._runs[(manager.user_id, manager.session_id)] = tracked
        return tracked

    def _tracked(self, manager: Session, messages: Sequence[BaseMessage]) -> _TrackedRun:
        with self._running_lock:
            tracked = self._runs.get((manager.user_id, manager.session_id))
        return tracked if tracked is not None else self._begin(manager, messages)

    def _save(self, manager: Session, tracked: _TrackedRun, messages: Sequence[BaseMessage]) -> AgentCheckpoint:
        """Append what is new since the last save (one step-log entry); rewrite only if the history changed."""
        run = tracked.run
        intact = tracked.continues(messages)
        new = messages[tracked.known :] if intact else messages
        dicts = messages_to_dict(new)
        saved = run.checkpoint
        checkpoint = run.step(
            messages=[*saved.messages, *dicts] if intact else dicts,
            tool_result_ids=[rid for rid in (reference_of(m) for m in new) if rid is not None],
            advance=_step_of(new) if intact else _step_of(messages) - saved.step,
        )
        tracked.known = len(messages)
        tracked.last = messages[-1] if messages else None
        manager.update_state({"current_task": checkpoint.task, "current_step": checkpoint.step})
        return checkpoint

    def mark_interrupted(
        self, user_id: str | None = None, session_id: str | None = None, *, reason: str = "SIGINT"
    ) -> bool:
        """Mark this scope's unfinished checkpoint ``interrupted``; return whether there was one."""
        manager = self._scope.location.session(
            *resolve_scope(
                user_id if user_id is not None else self._scope.user_id,
                session_id if session_id is not None else self._scope.session_id,
            )
        )
        if self._previous(manager) is None:
            if manager.bookkeeping().get("run_status") != "in_progress":
                return False
            manager.engine.update_bookkeeping({"run_status": "interrupted", "stop_reason": reason})
            return True
        mark_status(manager.engine, self.plan_id, "interrupted", reason=reason)
        return True

    @contextlib.contextmanager
    def handle_signals(self, user_id: str | None = None, session_id: str | None = None) -> Iterator[None]:
        """Inside the block, SIGINT and SIGTERM stop the run and mark its checkpoint ``interrupted``.

        Use it around ``agent.invoke(...)`` in the main thread; the signal surfaces as a
        ``KeyboardInterrupt`` after the checkpoint is marked. The run stays resumable.
        """
        with raise_on_signals():
            try:
                yield
            except KeyboardInterrupt as stop:
                reason = signal.Signals(stop.signum).name if isinstance(stop, RunInterrupted) else "SIGINT"
                with self._running_lock:
                    running = sorted(self._running, key=str)
                explicit = user_id is not None or session_id is not None
                for user, session in [(user_id, session_id)] if explicit or not running else running:
                    try:
                        self.mark_interrupted(user, session, reason=reason)
                    except LocalMemoryError as exc:  # never hide the interrupt behind a memory error
                        logger.warning("could not mark the run of %s/%s interrupted: %s", user, session, exc)
                raise

    def _count_steps(self, manager: Session, messages: Sequence[BaseMessage], status: str) -> None:
        """L0 and the run status when LangGraph's checkpointer keeps the run."""
        manager.update_state({"current_task": _task_of(messages), "current_step": _step_of(messages)})
        manager.engine.update_bookkeeping({"run_status": status, "stop_reason": None})

    def before_agent(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Resume a stored unfinished run or start a fresh checkpoint (under a LangGraph checkpointer: count)."""
        manager = self._scope.manager(runtime)
        self._started(manager, True)
        messages = _messages(state)
        if _graph_persists():
            self._count_steps(manager, messages, "in_progress")
            return None
        tracked = self._begin(manager, messages)
        previous = tracked.run.checkpoint if tracked.run.resumed else None
        if previous is None or not previous.messages:
            self._save(manager, tracked, messages)
            return None
        restored = messages_from_dict(previous.messages)
        restored_ids = {m.id for m in restored if m.id}
        current_ids = {m.id for m in messages if m.id}
        if restored_ids and restored_ids <= current_ids:
            self._save(manager, tracked, messages)
            return None  # the graph's own checkpointer already holds the conversation
        seen = {(type(m).__name__, message_text(m)) for m in restored}
        fresh = [m for m in messages if m.id not in restored_ids and (type(m).__name__, message_text(m)) not in seen]
        merged = [*restored, *fresh]
        self._save(manager, tracked, merged)
        manager.engine.update_bookkeeping({"resumed_from_step": previous.step})
        return {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), *merged]}

    def before_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Checkpoint what the conversation gained since the last call (every tool step is followed by one)."""
        manager = self._scope.manager(runtime)
        messages = _messages(state)
        if _graph_persists():
            self._count_steps(manager, messages, "in_progress")
            return None
        self._save(manager, self._tracked(manager, messages), messages)
        return None

    def after_agent(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Mark the run ``completed``."""
        manager = self._scope.manager(runtime)
        messages = _messages(state)
        if _graph_persists():
            self._count_steps(manager, messages, "completed")
            self._started(manager, False)
            return None
        tracked = self._tracked(manager, messages)
        self._save(manager, tracked, messages)
        tracked.run.finish("completed")
        self._started(manager, False)
        return None

    async def abefore_agent(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Async twin of :meth:`before_agent`."""
        return await asyncio.to_thread(self.before_agent, state, runtime)

    async def abefore_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Async twin of :meth:`before_model`."""
        return await asyncio.to_thread(self.before_model, state, runtime)

    async def aafter_agent(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Async twin of :meth:`after_agent`."""
        return await asyncio.to_thread(self.after_agent, state, runtime)


# --------------------------------------------------------------------------- L1 after the run


class WorkingMemoryMiddleware(_MemoryPart):
    """Merges each run's new messages into the L1 working memory after the run.

    The core's merge cursor remembers what was merged, so a conversation kept by a LangGraph
    checkpointer (and handed over whole on every run) is never summarized twice.
    """

    def __init__(
        self,
        user_id: str | None = None,
        session_id: str | None = None,
        *,
        memory: Memory | None = None,
        config: MemoryConfig | None = None,
        llm: BaseLanguageModel[Any] | LLM | None = None,
        token_counter: TokenCounter | None = None,
        target_tokens: int | None = None,
    ) -> None:
        super().__init__()
        self._scope = _Scoped(user_id, session_id, memory, config)
        self.llm = as_llm(llm) if llm is not None else self.memory.llm
        self.counter = token_counter or self.memory.token_counter
        self.target_tokens = target_tokens

    def _compressor(self, manager: Session) -> WorkingMemoryCompressor:
        return manager.compressor_with(self.llm, self.counter, self.target_tokens)

    def after_agent(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Merge what the run added into L1 (failures are logged by the core and leave L1 unchanged)."""
        if self._scope.config.working_memory_enabled:
            self._compressor(self._scope.manager(runtime)).merge_new(_messages(state))
        return None

    async def aafter_agent(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Async twin of :meth:`after_agent` (the LLM call uses the model's async path)."""
        if self._scope.config.working_memory_enabled:
            await self._compressor(self._scope.manager(runtime, _current_config())).amerge_new(_messages(state))
        return None


# --------------------------------------------------------------------------- all of it


class LocalMemoryMiddleware(AgentMiddleware[AgentState[Any], Any, Any]):
    """All four parts in one middleware: L3 externalization, L0/L1 prompt, L2 checkpoints, L1 compression.

    All parts keep ``memory`` (``config=`` builds ``Memory(config)``), and so does
    :meth:`checkpointer`. ``llm`` (a LangChain chat model or a core ``LLM``; default: the
    memory's) writes the L1 summary; without one the extractive summary is used.
    ``retriever`` adds matching knowledge notes to the prompt, ``recall_tokens`` what the user
    said in earlier sessions (:meth:`~local_ai_memory.Memory.recall`; off by default).
    Switch parts off with ``externalize``, ``inject``, ``checkpoint`` and ``compress``, or use
    :meth:`parts` to get them as separate middleware. ``plan_id`` names the L2 checkpoint
    (one resumable run per plan id and scope); :meth:`handle_signals` marks a run stopped by
    SIGINT/SIGTERM ``interrupted``.
    """

    def __init__(
        self,
        user_id: str | None = None,
        session_id: str | None = None,
        *,
        memory: Memory | None = None,
        config: MemoryConfig | None = None,
        llm: BaseLanguageModel[Any] | LLM | None = None,
        plan_id: str = DEFAULT_PLAN_ID,
        resume: bool = True,
        prompt_max_tokens: int = 1024,
        retriever: LocalMemoryRetriever | None = None,
        recall_tokens: int = 0,
        retention: RetentionPolicy | None = None,
        externalize: bool = True,
        inject: bool = True,
        checkpoint: bool = True,
        compress: bool = True,
    ) -> None:
        super().__init__()
        self.memory = memory_of(memory, config)
        self._user_id = user_id
        shared: dict[str, Any] = {"memory": self.memory}
        self.tool_results = (
            ToolResultMiddleware(user_id, session_id, retention=retention, **shared) if externalize else None
        )
        self.prompt = (
            MemoryPromptMiddleware(
                user_id,
                session_id,
                max_tokens=prompt_max_tokens,
                retriever=retriever,
                recall_tokens=recall_tokens,
                **shared,
            )
            if inject
            else None
        )
        self.checkpoints = (
            CheckpointMiddleware(user_id, session_id, plan_id=plan_id, resume=resume, **shared) if checkpoint else None
        )
        self.working_memory = WorkingMemoryMiddleware(user_id, session_id, llm=llm, **shared) if compress else None
        self.tools: Sequence[BaseTool] = list(self.tool_results.tools) if self.tool_results is not None else []

    def checkpointer(self, user_id: str | None = None) -> LocalMemorySaver:
        """A LangGraph checkpointer on this middleware's memory (``saver.memory is self.memory``):
        pass it to ``create_agent(checkpointer=...)``.

        Threads are sessions of ``user_id`` (default: this middleware's user), so run with
        ``{"configurable": {"thread_id": session_id}}`` and ``context`` naming the same user and
        session. LangGraph then keeps L2 (every step, resume, status) and this middleware writes
        no checkpoint of its own beside it.
        """
        from ._checkpointer import LocalMemorySaver

        user = user_id if user_id is not None else self._user_id
        if user is None:
            raise InvalidInputError("give the user whose sessions the threads are: checkpointer(user_id=...)")
        return LocalMemorySaver(self.memory, user_id=user)

    @contextlib.contextmanager
    def handle_signals(self, user_id: str | None = None, session_id: str | None = None) -> Iterator[None]:
        """See :meth:`CheckpointMiddleware.handle_signals` (does nothing when checkpoints are off)."""
        if self.checkpoints is None:
            yield
            return
        with self.checkpoints.handle_signals(user_id, session_id):
            yield

    def parts(self) -> list[AgentMiddleware[AgentState[Any], Any, Any]]:
        """The enabled parts as separate middleware (pass them to ``create_agent`` instead of this)."""
        found = (self.tool_results, self.checkpoints, self.prompt, self.working_memory)
        return [part for part in found if part is not None]

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        """See :meth:`ToolResultMiddleware.wrap_tool_call`."""
        if self.tool_results is None:
            return handler(request)
        return self.tool_results.wrap_tool_call(request, handler)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        """See :meth:`ToolResultMiddleware.awrap_tool_call`."""
        if self.tool_results is None:
            return await handler(request)
        return await self.tool_results.awrap_tool_call(request, handler)

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> Any:
        """See :meth:`MemoryPromptMiddleware.wrap_model_call`."""
        if self.prompt is None:
            return handler(request)
        return self.prompt.wrap_model_call(request, handler)

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> Any:
        """See :meth:`MemoryPromptMiddleware.awrap_model_call`."""
        if self.prompt is None:
            return await handler(request)
        return await self.prompt.awrap_model_call(request, handler)

    def before_agent(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """See :meth:`CheckpointMiddleware.before_agent`."""
        return None if self.checkpoints is None else self.checkpoints.before_agent(state, runtime)

    async def abefore_agent(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Async twin of :meth:`before_agent`."""
        return None if self.checkpoints is None else await self.checkpoints.abefore_agent(state, runtime)

    def before_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """See :meth:`CheckpointMiddleware.before_model`."""
        return None if self.checkpoints is None else self.checkpoints.before_model(state, runtime)

    async def abefore_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Async twin of :meth:`before_model`."""
        return None if self.checkpoints is None else await self.checkpoints.abefore_model(state, runtime)

    def after_agent(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Compress into L1, then mark the checkpoint ``completed``."""
        if self.working_memory is not None:
            self.working_memory.after_agent(state, runtime)
        if self.checkpoints is not None:
            self.checkpoints.after_agent(state, runtime)
        return None

    async def aafter_agent(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Async twin of :meth:`after_agent`."""
        if self.working_memory is not None:
            await self.working_memory.aafter_agent(state, runtime)
        if self.checkpoints is not None:
            await self.checkpoints.aafter_agent(state, runtime)
        return None
