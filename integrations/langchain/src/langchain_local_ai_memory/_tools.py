"""Tools the model can call: page an externalized tool result back, and search the knowledge memory.

* :class:`LoadToolResultTool` (``load_tool_result``): ``result_id``, ``offset``, ``limit``; returns
  characters ``offset`` to ``offset + limit`` of an output the middleware moved to L3, under a
  one-line header saying how much is left and where the next page starts (or, given ``line``,
  ``lines`` numbered lines from there). Its own output is never externalized (the middleware
  skips it by name), so a page always reaches the model.
* :class:`SearchToolResultTool` (``search_tool_result``): ``result_id``, ``pattern`` and options;
  returns the matching lines with their numbers and a few lines of context, paged and capped,
  so a model finds the one error line of a large log in one call.
  Both tools only reach results stored for their own ``(user_id, session_id)``: the core's
  scope check answers another scope's id as not found.
* :class:`KnowledgeSearchTool` (``search_memory``): runs the three retrieval stages for the
  bound user and returns the loaded files as text.
* :class:`RecallTool` (``recall``): the passages of the user's notes and past conversations
  that answer a question (:meth:`local_ai_memory.Memory.recall`).

Both work on a :class:`~local_ai_memory.Memory` (``memory=``; ``config=`` is a shortcut that
builds ``Memory(config)``): the load tool reads the memory's sessions, the search tool its
knowledge, through a :class:`~langchain_local_ai_memory.LocalMemoryRetriever`.

The user and session are bound through :func:`create_memory_tools` or read per call from the
runtime context / ``configurable`` (see :mod:`._scope`); they are never arguments the model sets.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from langchain_core.callbacks import AsyncCallbackManagerForToolRun, CallbackManagerForToolRun
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, ToolException
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from local_ai_memory import InvalidInputError, LocalMemoryError, Memory, MemoryConfig, ToolResultStore
from local_ai_memory.integration import (
    DEFAULT_PAGE_CHARS,
    DEFAULT_PAGE_LINES,
    DEFAULT_SEARCH_MATCHES,
    MAX_CONTEXT_LINES,
    MAX_SEARCH_MATCHES,
    RECALL_DESCRIPTION,
)

from ._scope import MemoryLocation, memory_of, resolve_scope, resolve_user

if TYPE_CHECKING:
    from ._retriever import LocalMemoryRetriever

__all__ = [
    "LOAD_TOOL_RESULT",
    "RECALL",
    "SEARCH_MEMORY",
    "SEARCH_TOOL_RESULT",
    "KnowledgeSearchInput",
    "KnowledgeSearchTool",
    "LoadToolResultInput",
    "LoadToolResultTool",
    "RecallInput",
    "RecallTool",
    "SearchToolResultInput",
    "SearchToolResultTool",
    "create_memory_tools",
]

LOAD_TOOL_RESULT = "load_tool_result"
SEARCH_TOOL_RESULT = "search_tool_result"
SEARCH_MEMORY = "search_memory"
RECALL = "recall"
MAX_PAGE_CHARS = 20_000
MAX_PAGE_LINES = 1_000


class LoadToolResultInput(BaseModel):
    """Arguments of ``load_tool_result``."""

    result_id: str = Field(description="The result_id from a tool result that was stored instead of shown.")
    offset: int = Field(default=0, ge=0, description="First character to return (0 for the start).")
    limit: int = Field(
        default=DEFAULT_PAGE_CHARS, ge=1, le=MAX_PAGE_CHARS, description="How many characters to return at most."
    )
    line: int | None = Field(
        default=None, ge=1, description="Read by lines instead: the first line to return (1 for the start)."
    )
    lines: int = Field(
        default=DEFAULT_PAGE_LINES, ge=1, le=MAX_PAGE_LINES, description="With line: how many lines to return at most."
    )


class _StoredResultTool(BaseTool):
    """A tool over the stored outputs of one scope: the memory, the bound ids and the scope's store."""

    memory: Memory = Field(exclude=True, description="The Memory whose sessions hold the stored results.")
    user_id: str | None = Field(default=None, description="Bound user (else read from the runtime context per call).")
    session_id: str | None = Field(
        default=None, description="Bound session (else read from the runtime context per call)."
    )
    handle_tool_error: bool = True

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    _location: MemoryLocation = PrivateAttr()

    def __init__(self, *, memory: Memory | None = None, config: MemoryConfig | None = None, **fields: Any) -> None:
        """``memory`` (or ``config``, a shortcut for ``Memory(config)``; not both), then the fields."""
        super().__init__(memory=memory_of(memory, config), **fields)

    def model_post_init(self, context: Any, /) -> None:
        """The sessions this tool reads are the memory's (reused per scope)."""
        self._location = MemoryLocation(self.memory)

    def _store(self, config: RunnableConfig | None) -> ToolResultStore:
        """The store of the bound (or per-call) scope; a missing or bad scope is a tool error."""
        try:
            return self._location.session(*resolve_scope(self.user_id, self.session_id, None, config)).tool_results
        except LocalMemoryError as exc:
            raise ToolException(str(exc)) from exc


class LoadToolResultTool(_StoredResultTool):
    """Pages an externalized tool output back to the model, by characters or by lines."""

    name: str = LOAD_TOOL_RESULT
    description: str = (
        "Read a large tool result that was stored instead of shown. A stored result appears as JSON with "
        "result_id, summary, size (in bytes), chars, lines and pages. Pass the result_id and read it page by page: "
        "start at offset 0 (or at line 1 to read by lines); each page says where the next one starts. "
        "To find something specific, use search_tool_result instead of reading every page."
    )
    args_schema: type[BaseModel] = LoadToolResultInput

    def _load(
        self, store: ToolResultStore, result_id: str, offset: int, limit: int, line: int | None, lines: int
    ) -> str:
        # The core checks that the result belongs to this scope: another session's id is "not found".
        try:
            return store.read(result_id, offset, limit, line=line, lines=lines)
        except LocalMemoryError as exc:
            raise ToolException(f"Cannot load tool result {result_id!r}: {exc}") from exc

    async def _aload(
        self, store: ToolResultStore, result_id: str, offset: int, limit: int, line: int | None, lines: int
    ) -> str:
        try:
            return await store.aread(result_id, offset, limit, line=line, lines=lines)
        except LocalMemoryError as exc:
            raise ToolException(f"Cannot load tool result {result_id!r}: {exc}") from exc

    def _run(
        self,
        result_id: str,
        offset: int = 0,
        limit: int = DEFAULT_PAGE_CHARS,
        line: int | None = None,
        lines: int = DEFAULT_PAGE_LINES,
        run_manager: CallbackManagerForToolRun | None = None,
        *,
        config: RunnableConfig,
    ) -> str:
        return self._load(self._store(config), result_id, offset, limit, line, lines)

    async def _arun(
        self,
        result_id: str,
        offset: int = 0,
        limit: int = DEFAULT_PAGE_CHARS,
        line: int | None = None,
        lines: int = DEFAULT_PAGE_LINES,
        run_manager: AsyncCallbackManagerForToolRun | None = None,
        *,
        config: RunnableConfig,
    ) -> str:
        return await self._aload(self._store(config), result_id, offset, limit, line, lines)


class SearchToolResultInput(BaseModel):
    """Arguments of ``search_tool_result``."""

    result_id: str = Field(description="The result_id from a tool result that was stored instead of shown.")
    pattern: str = Field(description="Text to look for in each line (a regular expression when regex is true).")
    regex: bool = Field(default=False, description="Treat pattern as a Python regular expression.")
    ignore_case: bool = Field(default=True, description="Match regardless of upper and lower case.")
    context: int = Field(default=2, ge=0, le=MAX_CONTEXT_LINES, description="Lines shown before and after each match.")
    skip: int = Field(default=0, ge=0, description="Matches to skip (to see the next ones).")
    max_matches: int = Field(
        default=DEFAULT_SEARCH_MATCHES, ge=1, le=MAX_SEARCH_MATCHES, description="Matches to show at most."
    )


class SearchToolResultTool(_StoredResultTool):
    """Finds the lines of an externalized tool output that match a pattern, with line numbers and context."""

    name: str = SEARCH_TOOL_RESULT
    description: str = (
        "Search a large tool result that was stored instead of shown (JSON with result_id, summary, size, "
        "lines, pages) for lines containing a text or matching a regular expression. Returns the matching "
        "lines with their line numbers and a few lines around them; much cheaper than reading every page. "
        "Use load_tool_result with line=N to read more around a match."
    )
    args_schema: type[BaseModel] = SearchToolResultInput

    def _run(
        self,
        result_id: str,
        pattern: str,
        regex: bool = False,
        ignore_case: bool = True,
        context: int = 2,
        skip: int = 0,
        max_matches: int = DEFAULT_SEARCH_MATCHES,
        run_manager: CallbackManagerForToolRun | None = None,
        *,
        config: RunnableConfig,
    ) -> str:
        store = self._store(config)
        try:  # the core applies the scope check of load_tool_result: another session's id is "not found"
            return store.search_text(
                result_id,
                pattern,
                regex=regex,
                ignore_case=ignore_case,
                context=context,
                skip=skip,
                max_matches=max_matches,
            )
        except LocalMemoryError as exc:
            raise ToolException(f"Cannot search tool result {result_id!r}: {exc}") from exc

    async def _arun(
        self,
        result_id: str,
        pattern: str,
        regex: bool = False,
        ignore_case: bool = True,
        context: int = 2,
        skip: int = 0,
        max_matches: int = DEFAULT_SEARCH_MATCHES,
        run_manager: AsyncCallbackManagerForToolRun | None = None,
        *,
        config: RunnableConfig,
    ) -> str:
        store = self._store(config)
        try:
            return await store.asearch_text(
                result_id,
                pattern,
                regex=regex,
                ignore_case=ignore_case,
                context=context,
                skip=skip,
                max_matches=max_matches,
            )
        except LocalMemoryError as exc:
            raise ToolException(f"Cannot search tool result {result_id!r}: {exc}") from exc


class KnowledgeSearchInput(BaseModel):
    """Arguments of ``search_memory``."""

    query: str = Field(description="What to look for in the user's knowledge notes.")


class KnowledgeSearchTool(BaseTool):
    """Searches the knowledge memory of the bound user and returns the best files' text."""

    name: str = SEARCH_MEMORY
    description: str = (
        "Search the user's knowledge notes (Markdown files) and return the most relevant ones. "
        "Use it for facts, preferences or earlier findings the user saved."
    )
    args_schema: type[BaseModel] = KnowledgeSearchInput
    handle_tool_error: bool = True

    retriever: Any = Field(description="The LocalMemoryRetriever that runs the search.")
    user_id: str | None = Field(
        default=None, description="Bound user (else the retriever's, else read from the runtime context per call)."
    )

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    def __init__(
        self,
        *,
        retriever: LocalMemoryRetriever | None = None,
        memory: Memory | None = None,
        config: MemoryConfig | None = None,
        **fields: Any,
    ) -> None:
        """A ``retriever``, or ``memory`` (or ``config``) to search with a default one over it."""
        from ._retriever import LocalMemoryRetriever

        if retriever is None:
            retriever = LocalMemoryRetriever(memory=memory, config=config)
        elif config is not None or (memory is not None and getattr(retriever, "memory", None) is not memory):
            raise InvalidInputError("give retriever= or memory=/config=, not both: the retriever has its memory")
        super().__init__(retriever=retriever, **fields)

    @property
    def memory(self) -> Memory:
        """The memory searched (the retriever's)."""
        return self._retriever().memory

    def _retriever(self) -> LocalMemoryRetriever:
        from ._retriever import LocalMemoryRetriever

        if not isinstance(self.retriever, LocalMemoryRetriever):
            raise TypeError(f"retriever must be a LocalMemoryRetriever, got {type(self.retriever).__name__}")
        return self.retriever

    def _run(self, query: str, run_manager: CallbackManagerForToolRun | None = None, *, config: RunnableConfig) -> str:
        retriever = self._retriever()
        try:
            return retriever.search_text(
                query, user_id=self.user_id, config=config, callbacks=run_manager.get_child() if run_manager else None
            )
        except LocalMemoryError as exc:
            raise ToolException(f"Memory search failed: {exc}") from exc

    async def _arun(
        self, query: str, run_manager: AsyncCallbackManagerForToolRun | None = None, *, config: RunnableConfig
    ) -> str:
        retriever = self._retriever()
        try:
            return await retriever.asearch_text(
                query, user_id=self.user_id, config=config, callbacks=run_manager.get_child() if run_manager else None
            )
        except LocalMemoryError as exc:
            raise ToolException(f"Memory search failed: {exc}") from exc


class RecallInput(BaseModel):
    """Arguments of ``recall``."""

    query: str = Field(description="A question, or the words of what to recall (a name, a date, a preference).")


class RecallTool(BaseTool):
    """Recalls the passages of the bound user's notes and past conversations that answer a question
    (:meth:`local_ai_memory.Memory.recall`), within ``max_tokens``."""

    name: str = RECALL
    description: str = RECALL_DESCRIPTION
    args_schema: type[BaseModel] = RecallInput
    handle_tool_error: bool = True

    memory: Memory = Field(exclude=True, description="The Memory whose notes and conversations are recalled.")
    user_id: str | None = Field(default=None, description="Bound user (else read from the runtime context per call).")
    max_tokens: int = Field(default=1000, ge=1, description="Tokens of recalled passages at most.")

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    def __init__(self, *, memory: Memory | None = None, config: MemoryConfig | None = None, **fields: Any) -> None:
        """``memory`` (or ``config``, a shortcut for ``Memory(config)``; not both), then the fields."""
        super().__init__(memory=memory_of(memory, config), **fields)

    def _run(self, query: str, run_manager: CallbackManagerForToolRun | None = None, *, config: RunnableConfig) -> str:
        try:
            return self.memory.recall(
                query, resolve_user(self.user_id, None, config), max_tokens=self.max_tokens
            ).answer
        except LocalMemoryError as exc:
            raise ToolException(f"Recall failed: {exc}") from exc

    async def _arun(
        self, query: str, run_manager: AsyncCallbackManagerForToolRun | None = None, *, config: RunnableConfig
    ) -> str:
        try:
            user = resolve_user(self.user_id, None, config)
            return (await self.memory.arecall(query, user, max_tokens=self.max_tokens)).answer
        except LocalMemoryError as exc:
            raise ToolException(f"Recall failed: {exc}") from exc


def create_memory_tools(
    user_id: str | None = None,
    session_id: str | None = None,
    *,
    memory: Memory | None = None,
    config: MemoryConfig | None = None,
    retriever: LocalMemoryRetriever | None = None,
    search_results: bool = False,
    recall: bool = False,
) -> list[BaseTool]:
    """The memory tools for one user and session: ``load_tool_result``, ``search_memory`` with a
    retriever, ``search_tool_result`` with ``search_results=True``, and ``recall`` (past
    conversations and notes, :class:`RecallTool`) last with ``recall=True``.

    ``search_tool_result`` is opt-in here so that code unpacking the two tools keeps working;
    the :class:`~langchain_local_ai_memory.ToolResultMiddleware` registers it with
    ``load_tool_result``. ``load_tool_result`` and ``search_tool_result`` read the sessions of
    ``memory`` (``config=`` builds ``Memory(config)``; given neither, the retriever's memory).
    Leave ``user_id`` / ``session_id`` out to read them per call from the runtime context
    (``agent.invoke(..., context={"user_id": ..., "session_id": ...})``) or from ``config["configurable"]``.
    """
    for flag, value in (("search_results", search_results), ("recall", recall)):
        if not isinstance(value, bool):
            raise InvalidInputError(f"{flag} must be True or False, got {value!r}")
    if memory is None and config is None and retriever is not None:
        memory = retriever.memory
    memory = memory_of(memory, config)
    tools: list[BaseTool] = [LoadToolResultTool(memory=memory, user_id=user_id, session_id=session_id)]
    if retriever is not None:
        tools.append(KnowledgeSearchTool(retriever=retriever, user_id=user_id))
    if search_results:
        tools.append(SearchToolResultTool(memory=memory, user_id=user_id, session_id=session_id))
    if recall:
        tools.append(RecallTool(memory=memory, user_id=user_id))
    return tools
