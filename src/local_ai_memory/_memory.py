"""``Memory``: the one entry point. It owns the data root, the storage backends and the caches.

::

    from local_ai_memory import Memory

    memory = Memory.open("~/.local-ai")             # or Memory(MemoryConfig(...)), Memory.in_memory()
    session = memory.session("alice", "s1")         # one scope's runtime memory
    session.update_state({"current_task": "fix the login bug"})
    reference = session.externalize("grep", big_output)   # L3: a {result_id, summary, size} reference
    page = session.load_page(result_id)                   # scope-checked paging
    answer = memory.knowledge.retrieve("how do we deploy?", user_id="alice")

The data root is given once (``config.runtime_data_dir``); every object a ``Memory`` hands out
shares its backends, its token counter and its knowledge index, so building a session or a
retriever per request costs next to nothing.
"""

from __future__ import annotations

import asyncio
import functools
import os
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
from functools import cached_property
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Concatenate, Literal, NamedTuple, ParamSpec, TypeVar

from local_ai_memory._composition import compose, embedder_for, in_memory_backends
from local_ai_memory._contracts.knowledge import KnowledgeBackend, NoteInfo
from local_ai_memory._contracts.runtime import Erasure, RuntimeBackend, ScopeInfo
from local_ai_memory._knowledge.edits import check_expected, insert_lines, note_hash, replace_unique
from local_ai_memory._knowledge.recall import Recall
from local_ai_memory._knowledge.retriever import MemoryRetriever, RetrievalResult
from local_ai_memory._knowledge.store import Candidate, MemoryStore
from local_ai_memory._runtime.messages import MessageLike, SessionMessageStore
from local_ai_memory._runtime.scope import MemoryManager
from local_ai_memory._runtime.tool_results import DEFAULT_PAGE_CHARS, DEFAULT_PAGE_LINES, ToolResultStore
from local_ai_memory._shared.config import MemoryConfig
from local_ai_memory._shared.errors import ConfigError, ConflictError, InvalidInputError, RecordNotFoundError
from local_ai_memory._shared.models import LLM, Embedder
from local_ai_memory._shared.naming import (
    DirectoryGuard,
    note_filename,
    note_name_of,
    user_file_prefix,
    validate_name,
)
from local_ai_memory._shared.records import ToolResultPage
from local_ai_memory._shared.text import Analyzer
from local_ai_memory._shared.tokens import TokenCounter
from local_ai_memory._shared.twins import thread_twin

if TYPE_CHECKING:  # imported where used: a search loads no compressor, archive or watcher code
    from local_ai_memory._knowledge.service import MemoryIndexService
    from local_ai_memory._operations.archive import ArchiveManifest, ImportReport
    from local_ai_memory._operations.lifecycle import ErasureReport, RetentionReport, ScopeReport, UserInfo
    from local_ai_memory._runtime.checkpoints import CheckpointRun
    from local_ai_memory._runtime.compressor import CompressionResult, WorkingMemoryCompressor
    from local_ai_memory._runtime.context import BuiltContext, ContextBuilder
    from local_ai_memory._runtime.run import RunOutcome
    from local_ai_memory._shared.records import AgentCheckpoint

__all__ = ["Knowledge", "Memory", "NoteName", "Session"]

P = ParamSpec("P")
R = TypeVar("R")

_PARTS = ("runtime", "knowledge", "llm", "embedder", "token_counter")


def _engine_call(method: Callable[Concatenate[MemoryManager, P], R]) -> Callable[Concatenate[Session, P], R]:
    """A :class:`Session` method that runs the engine's ``method`` (same parameters and docstring),
    so the session's surface is chosen name by name while the rule stays in the engine, once."""

    def call(self: Session, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return method(self.engine, *args, **kwargs)

    _named_after(call, method)
    return call


def _engine_acall(
    method: Callable[Concatenate[MemoryManager, P], Awaitable[R]],
) -> Callable[Concatenate[Session, P], Coroutine[Any, Any, R]]:
    """:func:`_engine_call` for an async method: the session's twin is a coroutine function too."""

    async def call(self: Session, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await method(self.engine, *args, **kwargs)

    _named_after(call, method)
    return call


def _named_after(call: Callable[..., Any], method: Callable[..., Any]) -> None:
    functools.update_wrapper(call, method)  # name, docstring, inspect.signature()
    call.__module__ = __name__
    call.__qualname__ = f"Session.{method.__name__}"


class Session:
    """One ``(user_id, session_id)`` scope's runtime memory: L0-L3, messages, compression, context.

    A session holds its engine (:attr:`engine`, the scope's :class:`MemoryManager`) and exposes
    what a session means: state (L0), working memory (L1, with compression), checkpoints (L2),
    tool results (L3: externalize, page back, search inside, list), the message log and context
    building, plus the parts behind them: :attr:`tool_results`, :attr:`messages`,
    :attr:`compressor` and :attr:`context`. Raw plans, raw tool-result payloads, locks and the
    library's bookkeeping writes are the engine's (``session.engine``), not the session's.
    Get one from :meth:`Memory.session`.
    """

    def __init__(self, memory: Memory, user_id: str, session_id: str) -> None:
        self.memory = memory
        self.engine = MemoryManager(memory.runtime, memory.config, user_id=user_id, session_id=session_id)
        self.user_id = user_id  # checked by the engine above, before anything is stored
        self.session_id = session_id
        self.tool_results = ToolResultStore(self.engine)
        self.messages = SessionMessageStore.for_manager(self.engine)
        self.remember_conversation = memory.config.remember_conversations
        """Whether finished runs of this session go to the user's conversation log (set it
        ``False`` to keep one session out of it; ``memory.remember_conversations`` is the default)."""

    def __repr__(self) -> str:
        return f"Session(user_id={self.user_id!r}, session_id={self.session_id!r})"

    # -- L0 ----------------------------------------------------------------------------

    get_state = _engine_call(MemoryManager.get_state)
    update_state = _engine_call(MemoryManager.update_state)
    replace_state = _engine_call(MemoryManager.replace_state)
    bookkeeping = _engine_call(MemoryManager.bookkeeping)
    aget_state = _engine_acall(MemoryManager.aget_state)
    aupdate_state = _engine_acall(MemoryManager.aupdate_state)
    areplace_state = _engine_acall(MemoryManager.areplace_state)
    abookkeeping = _engine_acall(MemoryManager.abookkeeping)

    # -- L1 storage ----------------------------------------------------------------------

    get_working_memory = _engine_call(MemoryManager.get_working_memory)
    update_working_memory = _engine_call(MemoryManager.update_working_memory)
    swap_working_memory = _engine_call(MemoryManager.swap_working_memory)
    aget_working_memory = _engine_acall(MemoryManager.aget_working_memory)
    aupdate_working_memory = _engine_acall(MemoryManager.aupdate_working_memory)
    aswap_working_memory = _engine_acall(MemoryManager.aswap_working_memory)

    @cached_property
    def compressor(self) -> WorkingMemoryCompressor:
        """Keeps L1 under its token budget (with the memory's LLM, or extractive without one)."""
        return self.compressor_with(self.memory.llm)

    def compressor_with(
        self, llm: LLM | None, token_counter: TokenCounter | None = None, target_tokens: int | None = None
    ) -> WorkingMemoryCompressor:
        """A compressor of this session's L1 with ``llm`` (``None``: extractive) and its own
        budget, which logs what it merges to this session's conversation log (its :attr:`remember_conversation` switch):
        what an adapter with a model of its own uses, so every merge is logged the same way."""
        from local_ai_memory._runtime.compressor import WorkingMemoryCompressor

        counter = token_counter or self.memory.token_counter
        return WorkingMemoryCompressor(self.engine, llm, counter, target_tokens, conversation_log=self._log_turns)

    @cached_property
    def context(self) -> ContextBuilder:
        """Assembles state, working memory, knowledge and recent messages within a budget."""
        from local_ai_memory._runtime.context import ContextBuilder

        return ContextBuilder(self.engine, self.memory.token_counter, message_store=self.messages)

    def _log_turns(self, messages: Sequence[MessageLike]) -> int:
        """Append a run's ``messages`` to the user's log of this session, if this session
        remembers (:attr:`remember_conversation`); return the turns logged. The compressor calls
        it for what it merges, so each message is logged once (:mod:`.merge_cursor`)."""
        if not self.remember_conversation:
            return 0
        return self.memory.knowledge.remember_conversation(self.user_id, self.session_id, messages)

    # -- L3 ----------------------------------------------------------------------------

    list_tool_results = _engine_call(MemoryManager.list_tool_results)
    count_tool_results = _engine_call(MemoryManager.count_tool_results)
    alist_tool_results = _engine_acall(MemoryManager.alist_tool_results)
    acount_tool_results = _engine_acall(MemoryManager.acount_tool_results)

    def externalize(self, tool_name: str, content: str, *, is_error: bool = False) -> str:
        """``content`` if small or an error, else a ``{result_id, summary, size}`` reference.

        See :class:`ToolResultStore` for the rule and the retention that follows.
        """
        return self.tool_results.externalize(tool_name, content, is_error=is_error)

    async def aexternalize(self, tool_name: str, content: str, *, is_error: bool = False) -> str:
        """Async twin of :meth:`externalize`."""
        return await self.tool_results.aexternalize(tool_name, content, is_error=is_error)

    def load_page(self, result_id: str, offset: int = 0, limit: int = DEFAULT_PAGE_CHARS) -> ToolResultPage:
        """A page of one of this session's stored outputs; another scope's id is not found."""
        return self.tool_results.load_page(result_id, offset, limit)

    async def aload_page(self, result_id: str, offset: int = 0, limit: int = DEFAULT_PAGE_CHARS) -> ToolResultPage:
        """Async twin of :meth:`load_page`."""
        return await self.tool_results.aload_page(result_id, offset, limit)

    def read_tool_result(
        self,
        result_id: str,
        offset: int = 0,
        limit: int = DEFAULT_PAGE_CHARS,
        *,
        line: int | None = None,
        lines: int = DEFAULT_PAGE_LINES,
    ) -> str:
        """A page rendered for the model, by characters or (given ``line``, 1-based) by lines.

        What a ``load_tool_result`` tool answers (:meth:`load_tool_result` is the raw stored
        payload); another scope's id is not found.
        """
        return self.tool_results.read(result_id, offset, limit, line=line, lines=lines)

    async def aread_tool_result(
        self,
        result_id: str,
        offset: int = 0,
        limit: int = DEFAULT_PAGE_CHARS,
        *,
        line: int | None = None,
        lines: int = DEFAULT_PAGE_LINES,
    ) -> str:
        """Async twin of :meth:`read_tool_result`."""
        return await self.tool_results.aread(result_id, offset, limit, line=line, lines=lines)

    def search_tool_result(self, result_id: str, pattern: str, **options: Any) -> str:
        """The lines of a stored output matching ``pattern``, numbered, with context, rendered for the model.

        ``options``: ``regex``, ``ignore_case``, ``context``, ``skip``, ``max_matches`` (see
        :meth:`ToolResultStore.search`). The same scope check as :meth:`load_page`: another
        scope's id gives the same :class:`RecordNotFoundError` as a missing one.
        """
        return self.tool_results.search_text(result_id, pattern, **options)

    async def asearch_tool_result(self, result_id: str, pattern: str, **options: Any) -> str:
        """Async twin of :meth:`search_tool_result`."""
        return await self.tool_results.asearch_text(result_id, pattern, **options)

    # -- L2 ----------------------------------------------------------------------------

    def checkpoint_run(
        self, plan_id: str, *, task: str = "", plan: Sequence[str] = (), **options: Any
    ) -> CheckpointRun:
        """A :class:`CheckpointRun` for ``plan_id`` in this session (resumes a resumable one)."""
        from local_ai_memory._runtime.checkpoints import CheckpointRun

        return CheckpointRun(self.engine, plan_id, task=task, plan=plan, **options)

    def checkpoints(self) -> list[AgentCheckpoint]:
        """Every checkpoint of the session, newest first."""
        from local_ai_memory._runtime.checkpoints import list_checkpoints

        return list_checkpoints(self.engine)

    def resumable(self) -> AgentCheckpoint | None:
        """The newest ``in_progress`` or ``interrupted`` checkpoint, or ``None``."""
        from local_ai_memory._runtime.checkpoints import find_resumable

        return find_resumable(self.engine)

    async def acheckpoints(self) -> list[AgentCheckpoint]:
        """Async twin of :meth:`checkpoints`."""
        from local_ai_memory._runtime.checkpoints import alist_checkpoints

        return await alist_checkpoints(self.engine)

    async def aresumable(self) -> AgentCheckpoint | None:
        """Async twin of :meth:`resumable`."""
        from local_ai_memory._runtime.checkpoints import afind_resumable

        return await afind_resumable(self.engine)

    # -- L1 ----------------------------------------------------------------------------

    def compress(self, messages: Iterable[MessageLike]) -> CompressionResult:
        """Rebuild L1 from a transcript."""
        return self.compressor.compress(messages)

    async def acompress(self, messages: Iterable[MessageLike]) -> CompressionResult:
        """Async twin of :meth:`compress`."""
        return await self.compressor.acompress(messages)

    def finish_run(self, run_messages: Iterable[MessageLike], **options: Any) -> RunOutcome:
        """After a run: merge its messages into L1, then compact the session log if it grew too long."""
        from local_ai_memory._runtime.run import finish_run

        return finish_run(self.compressor, self.messages, run_messages, **options)

    async def afinish_run(self, run_messages: Iterable[MessageLike], **options: Any) -> RunOutcome:
        """Async twin of :meth:`finish_run`."""
        from local_ai_memory._runtime.run import afinish_run

        return await afinish_run(self.compressor, self.messages, run_messages, **options)

    def build_context(self, messages: Iterable[MessageLike] | None = None, **options: Any) -> BuiltContext:
        """State, working memory and messages for a model call, within ``max_tokens``."""
        return self.context.build(messages, **options)

    async def abuild_context(self, messages: Iterable[MessageLike] | None = None, **options: Any) -> BuiltContext:
        """Async twin of :meth:`build_context`."""
        return await self.context.abuild(messages, **options)

    def _repr_html_(self) -> str:
        from local_ai_memory._shared.display import memory_html

        return memory_html(
            self.engine.stem,
            self.get_state(),
            self.get_working_memory(),
            self.checkpoints(),
            self.count_tool_results(),
        )


class NoteName(NamedTuple):
    """One note of a user as :meth:`Knowledge.notes` lists it: what :meth:`Knowledge.read_note`,
    :meth:`~Knowledge.delete_note` and :meth:`~Knowledge.note_info` take back.

    ``name`` is the plain name (``deploy``, not the file name ``ops_deploy.md``) and ``category``
    the configured category it lives in, so ``knowledge.read_note(user, note.name,
    category=note.category)`` reads it. A named tuple: ``name, category = note`` works too.
    """

    name: str
    category: str


class Knowledge:
    """The knowledge memory of a :class:`Memory`: notes, search (BM25 / hybrid) and retrieval.

    Notes are addressed by user and plain name; the library applies the naming rule
    (``write_note("ops_admin", "secret", ...)`` stores ``ops%5Fadmin_secret.md``, which user
    ``ops`` can never see). ``category`` defaults to the first configured category.
    """

    def __init__(self, memory: Memory) -> None:
        self.memory = memory
        self.store = MemoryStore(memory.knowledge_backend, memory.config, embedder=memory.embedder)

    @cached_property
    def retriever(self) -> MemoryRetriever:
        """Stages 1-3 over :attr:`store`, built on first use: its token counter loads the
        tokenizer (~0.3 s), which a search, a note listing or an index build never needs."""
        return MemoryRetriever(self.store, self.memory.llm, self.memory.token_counter)

    def __repr__(self) -> str:
        return f"Knowledge({self.store!r})"

    def _path(self, user_id: str, name: str, category: str | None) -> str:
        return f"{category or self.store.categories[0]}/{note_filename(user_id, name)}"

    def write_note(
        self, user_id: str, name: str, text: str, *, category: str | None = None, expected_hash: str | None = None
    ) -> str:
        """Store ``text`` verbatim as ``user_id``'s note ``name`` (indexed at once); return its file name.

        ``expected_hash`` (a :func:`note_hash` from an earlier read; ``""``: the note must not
        exist yet) makes the write conditional: :class:`ConflictError`, carrying the current
        hash, when the note changed meanwhile.
        """
        path = self._path(user_id, name, category)
        if expected_hash is None:
            self.store.write_file(path, text)
        else:
            self._change(path, expected_hash, lambda _current: text)
        return path.rpartition("/")[2]

    def write_notes(self, user_id: str, notes: Mapping[str, str], *, category: str | None = None) -> list[str]:
        """Store many notes of ``user_id`` at once (``{name: text}``), indexed at once; return
        their file names in the order given. What a service uses to load a new tenant.

        The same naming and text rules as :meth:`write_note`, checked for every note before
        any is written: one bad name or text refuses the whole batch. On PostgreSQL the notes
        are one transaction and one statement; on every backend the user's index is written
        once for the batch (one journal append, or one snapshot), not once per note."""
        paths = [self._path(user_id, name, category) for name in notes]
        self.store.write_files(zip(paths, notes.values(), strict=True))
        return [path.rpartition("/")[2] for path in paths]

    def edit_note(
        self,
        user_id: str,
        name: str,
        old: str,
        new: str,
        *,
        category: str | None = None,
        expected_hash: str | None = None,
    ) -> str:
        """Replace the one occurrence of ``old`` in the note by ``new``; return the new :func:`note_hash`.

        :class:`InvalidInputError` when ``old`` occurs zero or several times,
        :class:`RecordNotFoundError` when there is no such note.
        """
        path = self._path(user_id, name, category)
        return self._change(
            path, expected_hash, lambda current: replace_unique(self._existing(current, path), old, new)
        )

    def insert_into_note(
        self,
        user_id: str,
        name: str,
        line: int,
        text: str,
        *,
        category: str | None = None,
        expected_hash: str | None = None,
    ) -> str:
        """Insert ``text`` as whole lines after the note's first ``line`` lines; return the new hash."""
        path = self._path(user_id, name, category)
        return self._change(
            path, expected_hash, lambda current: insert_lines(self._existing(current, path), line, text)
        )

    @staticmethod
    def _existing(current: str | None, path: str) -> str:
        if current is None:
            raise RecordNotFoundError(f"no memory file {path}")
        return current

    def _change(self, path: str, expected_hash: str | None, change: Callable[[str | None], str]) -> str:
        """Check ``expected_hash`` against the note at ``path`` and write ``change(current)``, as
        one atomic update of the backend (across threads, processes and, for a database, hosts:
        of two updates that read the same hash, one wins and the other gets a
        :class:`ConflictError` with the winner's hash); return the new hash."""

        def checked(current: str | None) -> str:
            check_expected(current, expected_hash, path)
            return change(current)

        return note_hash(self.store.update_file(path, checked))

    def rename_note(
        self,
        user_id: str,
        name: str,
        new_name: str,
        *,
        category: str | None = None,
        new_category: str | None = None,
    ) -> str:
        """Move ``user_id``'s note ``name`` to ``new_name`` (in ``new_category``, by default the
        same category); return the new file name. Both are indexed at once.

        :class:`RecordNotFoundError` when there is no such note, :class:`ConflictError` when the
        new name is taken or the note changed during the move (the new copy is then removed
        again). The text is written under the new name before the old one is deleted, so a
        crash in between leaves both copies, never none.
        """
        text = self.read_note(user_id, name, category=category)
        target = new_category if new_category is not None else category
        if self._path(user_id, name, category) == self._path(user_id, new_name, target):
            return self._path(user_id, new_name, target).rpartition("/")[2]
        written = self.write_note(user_id, new_name, text, category=target, expected_hash="")
        try:
            self.delete_note(user_id, name, category=category, expected_hash=note_hash(text))
        except ConflictError:  # edited meanwhile: keep the edit under its old name, drop the copy
            self.delete_note(user_id, new_name, category=target, expected_hash=note_hash(text))
            raise
        return written

    def read_note(self, user_id: str, name: str, *, category: str | None = None) -> str:
        """The text of ``user_id``'s note ``name``; :class:`RecordNotFoundError` if there is none."""
        return self.store.read_file(self._path(user_id, name, category))

    def delete_note(
        self, user_id: str, name: str, *, category: str | None = None, expected_hash: str | None = None
    ) -> bool:
        """Delete ``user_id``'s note ``name`` and its index entry; return whether it existed.

        With ``expected_hash`` the delete is conditional and atomic like :meth:`write_note`'s:
        :class:`ConflictError` with the current hash when the note changed (or is gone).
        """
        path = self._path(user_id, name, category)
        if expected_hash is None:
            return self.store.delete_file(path)
        return self.store.delete_file_if(path, lambda current: check_expected(current, expected_hash, path))

    def note_info(self, user_id: str, name: str, *, category: str | None = None) -> NoteInfo | None:
        """Size, version and write time of ``user_id``'s note ``name`` without reading it; ``None`` if there is none."""
        folder, _, filename = self._path(user_id, name, category).partition("/")
        return self.store.backend.note_info(folder, filename) if folder in self.store.categories else None

    async def anote_info(self, user_id: str, name: str, *, category: str | None = None) -> NoteInfo | None:
        """Async twin of :meth:`note_info`."""
        return await asyncio.to_thread(self.note_info, user_id, name, category=category)

    def notes(self, user_id: str, *, category: str | None = None) -> list[NoteName]:
        """``user_id``'s notes as :class:`NoteName` (plain name and category), sorted by category
        (in configured order) then name; every configured category unless ``category`` is given.

        Each one round-trips: ``read_note(user_id, note.name, category=note.category)``. (Names
        are given without ``.md``; one whose own stem ends in ``.md``, file ``ops_x.md.md``,
        keeps the suffix, ``x.md.md``, because ``read_note`` drops one ``.md``.)
        """
        prefix = user_file_prefix(user_id)
        return [
            NoteName(note_name_of(path.name, prefix), cat)
            for cat in ([category] if category is not None else self.store.categories)
            for path in self.store.list_user_files(user_id, cat)
        ]

    def uncovered_folders(self, user_id: str | None = None) -> dict[str, int]:
        """``{folder: count}`` of the folders beside the categories (``memory_data/man/``, say)
        that hold notes (of ``user_id``, or anyone's) but are no configured category.

        Search, retrieval and :meth:`notes` never look there, while :meth:`Memory.users`,
        export and forget do count them: ask this when a search finds nothing, and add the
        folder to ``categories`` (``LOCAL_AI_MEMORY_CATEGORIES=knowledge,man``) to search it.
        """
        backend = self.store.backend
        prefix = user_file_prefix(user_id) if user_id is not None else None
        found = {
            folder: len(backend.list_notes(folder, prefix))
            for folder in backend.list_categories()
            if folder not in self.store.categories
        }
        return {folder: count for folder, count in found.items() if count}

    def remember_conversation(self, user_id: str, session_id: str, messages: Iterable[MessageLike]) -> int:
        """Append ``messages`` as one run to ``user_id``'s log of session ``session_id``; return
        how many turns were logged.

        The log is the note ``session_id`` in the ``conversations`` category (created with its
        header on the first run), so it is searched, exported and erased like any note; see
        :mod:`local_ai_memory._knowledge.conversations` for its format. A message's own
        ``timestamp`` dates its turn (an imported chat keeps its dates), else the time of the
        call. A finished run calls this for you (``memory.remember_conversations``); call it
        to import past conversations::

            memory.knowledge.remember_conversation("alice", "2026-03-02", [
                {"role": "user", "content": "I moved to Lyon", "timestamp": "2026-03-02T09:15:00"},
            ])
        """
        from local_ai_memory._knowledge.conversations import (
            CONVERSATIONS,
            header_text,
            parse_turns,
            render_run,
            turns_of,
        )
        from local_ai_memory._runtime.messages import to_messages

        validate_name(session_id, "session_id")
        turns = turns_of(to_messages(messages), time.time())
        section = render_run(turns)
        if not section:
            return 0
        if CONVERSATIONS not in self.store.categories:
            raise ConfigError("conversation logs are off (memory.remember_conversations: false)")

        before = ""  # the log as this run found it

        def appended(current: str | None) -> str:
            nonlocal before
            before = current if current is not None else header_text(session_id)
            return before.rstrip("\n") + "\n\n" + section

        path = self._path(user_id, session_id, CONVERSATIONS)
        self.store.update_file(path, appended)
        if self.store.embeds_at_index:  # embedded now, under the keys recall asks by, so a recall need not
            logged = len(parse_turns(before))
            self.store.embed_passages([(f"{path}#{logged + t.ordinal}", t.text) for t in parse_turns(section)])
        return len(turns)

    def recall(self, query: str, user_id: str, *, max_tokens: int = 1000) -> Recall:
        """The passages of ``user_id``'s notes and past conversations that best answer ``query``,
        within ``max_tokens`` (see :mod:`local_ai_memory._knowledge.recall`).

        >>> memory = Memory.in_memory()
        >>> _ = memory.knowledge.remember_conversation("ann", "s1", [{"role": "user", "content": "My cat is Miso"}])
        >>> memory.knowledge.recall("what is my cat called?", "ann").passages[0].text
        'My cat is Miso'
        """
        from local_ai_memory._knowledge.recall import CANDIDATE_NOTES, cut_note, rank_passages, recalled

        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens <= 0:
            raise InvalidInputError(f"max_tokens must be a positive integer, got {max_tokens!r}")
        store = self.store
        candidates = store.stage1(query, CANDIDATE_NOTES, user_id=user_id, categories=store.categories)
        analyzer = Analyzer(store.config.stemmer_language)
        prefix = user_file_prefix(user_id)
        notes = []
        for candidate in candidates:
            text = store.backend.read_note(candidate.category, candidate.filename)
            if text is not None:
                cuts = cut_note(
                    candidate.category, candidate.filename, prefix, text.decode("utf-8", "replace"), analyzer
                )
                notes.append((cuts, candidate.score))
        pool = [cut.passage for cuts, _ in notes for cut in cuts]
        similarity = store.similarity(query, [(p.key, p.text) for p in pool])
        ranked = rank_passages(notes, query, analyzer, similarity)
        return recalled(ranked, self.memory.token_counter.count, max_tokens)

    aremember_conversation = thread_twin(remember_conversation)
    arecall = thread_twin(recall)
    awrite_note = thread_twin(write_note)
    awrite_notes = thread_twin(write_notes)
    aedit_note = thread_twin(edit_note)
    ainsert_into_note = thread_twin(insert_into_note)
    aread_note = thread_twin(read_note)
    adelete_note = thread_twin(delete_note)
    arename_note = thread_twin(rename_note)
    anotes = thread_twin(notes)
    auncovered_folders = thread_twin(uncovered_folders)

    def search(
        self, query: str, user_id: str, *, k: int = 5, categories: Iterable[str] | None = None
    ) -> list[Candidate]:
        """Stage 1 (BM25 or hybrid, per ``memory.search_mode``): scored candidates, best first."""
        return self.store.stage1(query, k, user_id=user_id, categories=categories)

    async def asearch(
        self, query: str, user_id: str, *, k: int = 5, categories: Iterable[str] | None = None
    ) -> list[Candidate]:
        """Async twin of :meth:`search`."""
        return await self.store.astage1(query, k, user_id=user_id, categories=categories)

    def retrieve(
        self,
        query: str,
        user_id: str,
        *,
        categories: Iterable[str] | None = None,
        max_tokens: int = 2000,
        k: int | None = None,
    ) -> RetrievalResult:
        """All three stages: ``k`` candidates (default 5, up to 100), the LLM's pick of at most 5
        (when there is an LLM; else all ``k`` in order), loading within ``max_tokens``."""
        return self.retriever.retrieve_result(query, user_id, categories, max_tokens, k=k)

    async def aretrieve(
        self,
        query: str,
        user_id: str,
        *,
        categories: Iterable[str] | None = None,
        max_tokens: int = 2000,
        k: int | None = None,
    ) -> RetrievalResult:
        """Async twin of :meth:`retrieve`."""
        return await self.retriever.aretrieve_result(query, user_id, categories, max_tokens, k=k)

    def _retriever_with(self, llm: LLM | None) -> MemoryRetriever:
        if llm is self.retriever.llm:
            return self.retriever
        return MemoryRetriever(store=self.store, llm=llm, token_counter=self.retriever.token_counter)

    def retrieve_with(
        self,
        query: str,
        user_id: str,
        *,
        llm: LLM | None,
        categories: Iterable[str] | None = None,
        max_tokens: int = 2000,
        k: int | None = None,
    ) -> RetrievalResult:
        """:meth:`retrieve` with ``llm`` making the Stage 2 pick instead of the memory's (``None``:
        none), for a caller that traces or swaps the model per call; index and caches stay the memory's."""
        return self._retriever_with(llm).retrieve_result(query, user_id, categories, max_tokens, k=k)

    async def aretrieve_with(
        self,
        query: str,
        user_id: str,
        *,
        llm: LLM | None,
        categories: Iterable[str] | None = None,
        max_tokens: int = 2000,
        k: int | None = None,
    ) -> RetrievalResult:
        """Async twin of :meth:`retrieve_with`."""
        return await self._retriever_with(llm).aretrieve_result(query, user_id, categories, max_tokens, k=k)

    # -- keeping the index current (the command line's index and watch) ----------------------

    def build_index(
        self,
        user_id: str | None = None,
        categories: Iterable[str] | None = None,
        *,
        progress: Callable[[int, int], None] | None = None,
        embed_progress: Callable[[int, int], None] | None = None,
    ) -> int:
        """Index every note of ``user_id`` (``None``: all users) from scratch; return how many.

        The memory's LLM, when it has one, refines each note's keywords (a failed call keeps
        the heuristic ones). ``progress(done, total)`` is called while notes are read; in
        hybrid mode the notes' passages are embedded next, ``embed_progress(done, total)``
        counting passages (:func:`~local_ai_memory.progress_bar` draws either as a bar).
        """
        return self.store.populate_index_from_files(
            user_id, categories, llm=self.memory.llm, progress=progress, embed_progress=embed_progress
        )

    async def abuild_index(
        self,
        user_id: str | None = None,
        categories: Iterable[str] | None = None,
        *,
        progress: Callable[[int, int], None] | None = None,
        embed_progress: Callable[[int, int], None] | None = None,
    ) -> int:
        """Async twin of :meth:`build_index` (the LLM through ``acomplete``)."""
        return await self.store.apopulate_index_from_files(
            user_id, categories, llm=self.memory.llm, progress=progress, embed_progress=embed_progress
        )

    def embed_notes(
        self,
        user_id: str | None = None,
        categories: Iterable[str] | None = None,
        *,
        progress: Callable[[int, int], None] | None = None,
    ) -> int:
        """Embed now what hybrid search compares, so the first query does not wait; return how
        many notes. Needs the memory's embedder (:class:`ConfigError` without one)."""
        return self.store.embed_notes(user_id, categories, progress)

    async def aembed_notes(
        self,
        user_id: str | None = None,
        categories: Iterable[str] | None = None,
        *,
        progress: Callable[[int, int], None] | None = None,
    ) -> int:
        """Async twin of :meth:`embed_notes` (runs it in a worker thread)."""
        return await asyncio.to_thread(self.store.embed_notes, user_id, categories, progress)

    def watch(
        self, *, mode: Literal["auto", "watch", "poll"] = "auto", poll_interval: float = 3.0
    ) -> MemoryIndexService:
        """A watcher that keeps the index current from file events while it runs (not started yet).

        Use it as a context manager, ``with`` or ``async with`` (so it needs no async twin);
        ``mode="poll"`` scans every ``poll_interval`` seconds instead of native watching. At
        start it loads or builds the index (with the memory's LLM when it must build it).
        """
        from local_ai_memory._knowledge.service import MemoryIndexService

        return MemoryIndexService(self.store, mode=mode, poll_interval=poll_interval, llm=self.memory.llm)


class Memory:
    """The data root, its storage backends and shared caches; hands out sessions and knowledge.

    >>> memory = Memory.in_memory()
    >>> session = memory.session("alice", "s1")
    >>> session.update_state({"current_task": "write docs"})
    {'current_task': 'write docs'}
    >>> memory.session("alice", "s1").get_state()["current_task"]
    'write docs'
    """

    def __init__(
        self,
        config: MemoryConfig | None = None,
        *,
        runtime: RuntimeBackend | None = None,
        knowledge: KnowledgeBackend | None = None,
        llm: LLM | None = None,
        embedder: Embedder | None = None,
        token_counter: TokenCounter | None = None,
    ) -> None:
        self.config = config if config is not None else MemoryConfig()
        self.llm = llm
        self.embedder = embedder_for(self.config, embedder)  # hybrid: the local model unless one is given
        self._token_counter = token_counter
        named = "runtime_data_dir" in self.config.model_fields_set
        backends = compose(self.config, runtime, knowledge, folder_named=named)
        self.guard: DirectoryGuard | None = backends.guard
        self.runtime: RuntimeBackend = backends.runtime
        self.knowledge_backend: KnowledgeBackend = backends.knowledge
        self._recovered = False

    @classmethod
    def open(cls, root: str | os.PathLike[str], **settings: Any) -> Memory:
        """A memory on the folder ``root``.

        ``settings`` are :class:`MemoryConfig` keys, or the parts :class:`Memory` takes
        (``runtime``, ``knowledge``, ``llm``, ``embedder``, ``token_counter``): a backend passed
        here replaces the files of that kind, the other kind stays under ``root``.
        """
        parts = {key: settings.pop(key) for key in _PARTS if key in settings}
        return cls(MemoryConfig(runtime_data_dir=Path(root).expanduser(), **settings), **parts)

    @classmethod
    def in_memory(cls, config: MemoryConfig | None = None, **parts: Any) -> Memory:
        """A memory kept in this process only, runtime levels and notes alike (for tests and notebooks)."""
        runtime, knowledge = in_memory_backends()
        return cls(config, runtime=runtime, knowledge=knowledge, **parts)

    def __repr__(self) -> str:
        return f"Memory({self.runtime!r})"

    @property
    def root(self) -> Path | None:
        """The data folder, or ``None`` when nothing is kept on disk."""
        return None if self.guard is None else self.guard.root

    @property
    def token_counter(self) -> TokenCounter:
        """The counter every part of this memory shares (offline; the configured encoding)."""
        if self._token_counter is None:
            self._token_counter = TokenCounter(self.config.token_encoding)
        return self._token_counter

    def session(self, user_id: str, session_id: str) -> Session:
        """The runtime memory of ``(user_id, session_id)``; ids are checked before anything is stored."""
        self._recover()
        return Session(self, user_id, session_id)

    def recall(self, query: str, user_id: str, *, max_tokens: int = 1000) -> Recall:
        """What ``user_id`` said or noted that answers ``query``: the best passages of their
        notes and past conversations within ``max_tokens`` (:meth:`Knowledge.recall`)."""
        return self.knowledge.recall(query, user_id, max_tokens=max_tokens)

    async def arecall(self, query: str, user_id: str, *, max_tokens: int = 1000) -> Recall:
        """Async twin of :meth:`recall`."""
        return await self.knowledge.arecall(query, user_id, max_tokens=max_tokens)

    def sessions(self) -> list[ScopeInfo]:
        """Every scope that holds runtime data, with its size and last change."""
        self._recover()
        return [info for info in self.runtime.list_scopes() if info.scope.scoped]

    # -- owning the data: see, move, erase -----------------------------------------------

    def _recover(self) -> None:
        """Finish, once per instance, the erasures a crashed process left half done."""
        if not self._recovered:
            self._recovered = True
            if self.runtime.pending_erasures():
                from local_ai_memory._operations.lifecycle import finish_pending

                finish_pending(self.runtime, self.knowledge.store)

    def users(self) -> list[UserInfo]:
        """Every user with runtime memory or notes: sessions with sizes and last use, note counts."""
        self._recover()
        from local_ai_memory._operations.lifecycle import list_users

        return list_users(self.runtime, self.knowledge.store.backend)

    def holds(self, user_id: str, session_id: str | None = None) -> bool:
        """Whether anything is kept for ``user_id`` (a session or a note in any folder), or, with
        ``session_id``, for that session: how a caller tells an unknown id (a typo) from an empty one."""
        validate_name(user_id, "user_id")
        self._recover()
        for info in self.runtime.list_scopes():
            if info.scope.user_id == user_id and session_id in (None, info.scope.session_id):
                return True
        if session_id is not None:
            return False
        backend = self.knowledge_backend
        prefix = user_file_prefix(user_id)
        return any(backend.list_notes(category, prefix) for category in backend.list_categories())

    def _known(self, user_id: str, session_id: str | None = None) -> None:
        if not self.holds(user_id, session_id):
            what = f"session {session_id!r} of user {user_id!r}" if session_id is not None else f"user {user_id!r}"
            raise RecordNotFoundError(f"no memory for {what}")

    def show(self, user_id: str, session_id: str) -> ScopeReport:
        """Everything one session holds: state, working memory, checkpoints, tool outputs, message
        count; :class:`RecordNotFoundError` for a session that holds nothing (a mistyped id, say)."""
        self._known(user_id, session_id)
        from local_ai_memory._operations.lifecycle import show_scope

        return show_scope(self.session(user_id, session_id).engine)

    def apply_retention(self, *, max_age: float | None = None, keep_last: int | None = None) -> RetentionReport:
        """Prune the LangGraph checkpoints (``LocalMemorySaver`` threads) of every session: keep those
        younger than ``max_age`` seconds and the ``keep_last`` newest per thread and namespace.
        Atomic per log; what a kept checkpoint reads is kept (see :mod:`~local_ai_memory._operations.lifecycle`)."""
        import time

        from local_ai_memory._operations.lifecycle import apply_retention

        self._recover()
        return apply_retention(self.runtime, now=time.time(), max_age=max_age, keep_last=keep_last)

    def delete_session(self, user_id: str, session_id: str) -> ErasureReport:
        """Delete one session's runtime memory (all levels and its log); the user's notes stay.

        All or nothing for readers, even if the process dies half-way
        (see :mod:`local_ai_memory._operations.lifecycle`).
        """
        from local_ai_memory._operations.lifecycle import erase

        self._recover()
        return erase(self.runtime, self.knowledge.store, Erasure(user_id, session_id))

    def forget_user(self, user_id: str) -> ErasureReport:
        """Erase everything kept about ``user_id``: every session, every note, index entries,
        ranker snapshots and cached vectors; return what was removed. All or nothing for readers.
        Erasing is idempotent: an unknown user gets an empty report (:meth:`holds` tells first).

        >>> memory = Memory.in_memory()
        >>> _ = memory.session("bob", "s1").update_state({"likes": "tea"})
        >>> memory.forget_user("bob").sessions
        ['s1']
        >>> memory.users()
        []
        """
        from local_ai_memory._operations.lifecycle import erase

        self._recover()
        return erase(self.runtime, self.knowledge.store, Erasure(user_id))

    def export(self, path: str | os.PathLike[str], user_id: str, session_id: str | None = None) -> ArchiveManifest:
        """Write a user's memory (or one session of it) to the archive ``path``
        (see :mod:`local_ai_memory._operations.archive`);
        :class:`RecordNotFoundError`, and no archive, when nothing is kept for them."""
        self._known(user_id, session_id)
        from local_ai_memory._operations.archive import export_archive

        return export_archive(path, self.runtime, self.knowledge.store.backend, user_id, session_id)

    def export_notes(self, folder: str | os.PathLike[str]) -> int:
        """Copy every knowledge note, byte for byte, to ``folder/{category}/`` (the file layout)."""
        from local_ai_memory._operations.note_folders import export_notes

        return export_notes(self.knowledge.store.backend, folder)

    def import_notes(self, folder: str | os.PathLike[str], *, replace: bool = False) -> int:
        """Copy the notes of a folder in the file layout into this memory (files to PostgreSQL, say)."""
        from local_ai_memory._operations.note_folders import import_notes

        return import_notes(self.knowledge.store.backend, folder, replace=replace)

    def import_archive(self, path: str | os.PathLike[str], *, replace: bool = False) -> ImportReport:
        """Load an archive made by :meth:`export`; existing sessions and notes are kept unless ``replace``."""
        self._recover()
        from local_ai_memory._operations.archive import import_archive

        return import_archive(path, self.runtime, self.knowledge.store.backend, replace=replace)

    asessions = thread_twin(sessions)
    ausers = thread_twin(users)
    aholds = thread_twin(holds)
    ashow = thread_twin(show)
    adelete_session = thread_twin(delete_session)
    aforget_user = thread_twin(forget_user)
    aexport = thread_twin(export)
    aexport_notes = thread_twin(export_notes)
    aimport_notes = thread_twin(import_notes)
    aimport_archive = thread_twin(import_archive)

    @cached_property
    def knowledge(self) -> Knowledge:
        """Notes, search and retrieval over ``{root}/memory_data/``."""
        return Knowledge(self)

    def close(self) -> None:
        """Stop the automatic watcher of the notes folder (writing what it had pending) and
        release the backends' connections and handles. Use it, or ``with Memory.open(...) as
        memory:``, before removing the data folder: a running watcher writes the index as it
        sees the notes go. A later search starts the watcher again."""
        if "knowledge" in self.__dict__:  # built on first use; nothing to stop otherwise
            self.knowledge.store.settle()  # the next process re-reads none of our last notes
            self.knowledge.store.stop_watching()
        self.runtime.close()
        self.knowledge_backend.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()
