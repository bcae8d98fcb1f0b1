"""Tools the model can call: page an externalized tool result back, and search the knowledge memory.

* :class:`LoadToolResultTool` (``load_tool_result``): ``result_id``, ``offset``, ``limit``; returns
  characters ``offset`` to ``offset + limit`` of an output the middleware moved to L3, under a
  one-line header saying how much is left and where the next page starts. Its own output is
  never externalized (the middleware skips it by name), so a page always reaches the model.
  Only results stored for the tool's own ``(user_id, session_id)`` can be loaded.
* :class:`KnowledgeSearchTool` (``search_memory``): runs the three retrieval stages for the
  bound user and returns the loaded files as text.

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
from local_ai_memory.integration import DEFAULT_PAGE_CHARS

from ._scope import MemoryLocation, memory_of, resolve_scope

if TYPE_CHECKING:
    from ._retriever import LocalMemoryRetriever

__all__ = [
    "LOAD_TOOL_RESULT",
    "SEARCH_MEMORY",
    "KnowledgeSearchInput",
    "KnowledgeSearchTool",
    "LoadToolResultInput",
    "LoadToolResultTool",
    "create_memory_tools",
]

LOAD_TOOL_RESULT = "load_tool_result"
SEARCH_MEMORY = "search_memory"
MAX_PAGE_CHARS = 20_000


class LoadToolResultInput(BaseModel):
    """Arguments of ``load_tool_result``."""

    result_id: str = Field(description="The result_id from a tool result that was stored instead of shown.")
    offset: int = Field(default=0, ge=0, description="First character to return (0 for the start).")
    limit: int = Field(
        default=DEFAULT_PAGE_CHARS, ge=1, le=MAX_PAGE_CHARS, description="How many characters to return at most."
    )


class LoadToolResultTool(BaseTool):
    """Pages an externalized tool output back to the model, by characters."""

    name: str = LOAD_TOOL_RESULT
    description: str = (
        "Read a large tool result that was stored instead of shown. A stored result appears as JSON with "
        "result_id, summary and size. Pass the result_id and read it page by page: start at offset 0; "
        "each page says where the next one starts."
    )
    args_schema: type[BaseModel] = LoadToolResultInput
    handle_tool_error: bool = True

    memory: Memory = Field(exclude=True, description="The Memory whose sessions hold the stored results.")
    user_id: str | None = Field(default=None, description="Bound user (else read from the runtime context per call).")
    session_id: str | None = Field(
        default=None, description="Bound session (else read from the runtime context per call)."
    )

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

    def _load(self, store: ToolResultStore, result_id: str, offset: int, limit: int) -> str:
        # The core checks that the result belongs to this scope: another session's id is "not found".
        try:
            return store.read(result_id, offset, limit)
        except LocalMemoryError as exc:
            raise ToolException(f"Cannot load tool result {result_id!r}: {exc}") from exc

    async def _aload(self, store: ToolResultStore, result_id: str, offset: int, limit: int) -> str:
        try:
            return await store.aread(result_id, offset, limit)
        except LocalMemoryError as exc:
            raise ToolException(f"Cannot load tool result {result_id!r}: {exc}") from exc

    def _run(
        self,
        result_id: str,
        offset: int = 0,
        limit: int = DEFAULT_PAGE_CHARS,
        run_manager: CallbackManagerForToolRun | None = None,
        *,
        config: RunnableConfig,
    ) -> str:
        return self._load(self._store(config), result_id, offset, limit)

    async def _arun(
        self,
        result_id: str,
        offset: int = 0,
        limit: int = DEFAULT_PAGE_CHARS,
        run_manager: AsyncCallbackManagerForToolRun | None = None,
        *,
        config: RunnableConfig,
    ) -> str:
        return await self._aload(self._store(config), result_id, offset, limit)


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


def create_memory_tools(
    user_id: str | None = None,
    session_id: str | None = None,
    *,
    memory: Memory | None = None,
    config: MemoryConfig | None = None,
    retriever: LocalMemoryRetriever | None = None,
) -> list[BaseTool]:
    """The memory tools for one user and session: ``load_tool_result``, plus ``search_memory`` with a retriever.

    ``load_tool_result`` reads the sessions of ``memory`` (``config=`` builds ``Memory(config)``;
    given neither, the retriever's memory). Leave ``user_id`` / ``session_id`` out to read them
    per call from the runtime context (``agent.invoke(..., context={"user_id": ..., "session_id": ...})``)
    or from ``config["configurable"]``.
    """
    if memory is None and config is None and retriever is not None:
        memory = retriever.memory
    tools: list[BaseTool] = [
        LoadToolResultTool(memory=memory_of(memory, config), user_id=user_id, session_id=session_id)
    ]
    if retriever is not None:
        tools.append(KnowledgeSearchTool(retriever=retriever, user_id=user_id))
    return tools
