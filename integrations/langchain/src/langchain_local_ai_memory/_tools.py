"""Tools the model can call: page an externalized tool result back, and search the knowledge memory.

* :class:`LoadToolResultTool` (``load_tool_result``): ``result_id``, ``offset``, ``limit``; returns
  characters ``offset`` to ``offset + limit`` of an output the middleware moved to L3, under a
  one-line header saying how much is left and where the next page starts. Its own output is
  never externalized (the middleware skips it by name), so a page always reaches the model.
  Only results stored for the tool's own ``(user_id, session_id)`` can be loaded.
* :class:`KnowledgeSearchTool` (``search_memory``): runs the three retrieval stages for the
  bound user and returns the loaded files as text.

The user and session are bound through :func:`create_memory_tools` or read per call from the
runtime context / ``configurable`` (see :mod:`._scope`); they are never arguments the model sets.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from langchain_core.callbacks import AsyncCallbackManagerForToolRun, CallbackManagerForToolRun
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, ToolException
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from local_ai_memory import DirectoryGuard, LocalMemoryError, MemoryConfig, ToolResultStore
from local_ai_memory.integration import DEFAULT_PAGE_CHARS

from ._scope import MemoryLocation, resolve_scope

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

    config: MemoryConfig = Field(default_factory=MemoryConfig, description="Settings; runtime_data_dir is the root.")
    user_id: str | None = Field(default=None, description="Bound user (else read from the runtime context per call).")
    session_id: str | None = Field(
        default=None, description="Bound session (else read from the runtime context per call)."
    )
    guard: DirectoryGuard | None = Field(default=None, exclude=True)

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    _stores: dict[tuple[str, str], ToolResultStore] = PrivateAttr(default_factory=dict)
    _location: MemoryLocation | None = PrivateAttr(None)

    def _store(self, config: RunnableConfig | None) -> ToolResultStore:
        """The store of the bound (or per-call) scope; a missing or bad scope is a tool error."""
        try:
            scope = resolve_scope(self.user_id, self.session_id, None, config)
            store = self._stores.get(scope)
            if store is None:
                if self._location is None:
                    self._location = MemoryLocation(self.config, self.guard)
                store = ToolResultStore(self._location.manager(*scope))
                self._stores[scope] = store
        except LocalMemoryError as exc:
            raise ToolException(str(exc)) from exc
        return store

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
    config: MemoryConfig | None = None,
    guard: DirectoryGuard | None = None,
    retriever: LocalMemoryRetriever | None = None,
) -> list[BaseTool]:
    """The memory tools for one user and session: ``load_tool_result``, plus ``search_memory`` with a retriever.

    Leave ``user_id`` / ``session_id`` out to read them per call from the runtime context
    (``agent.invoke(..., context={"user_id": ..., "session_id": ...})``) or from
    ``config["configurable"]``.
    """
    settings = config if config is not None else (retriever.config if retriever is not None else MemoryConfig())
    tools: list[BaseTool] = [LoadToolResultTool(config=settings, user_id=user_id, session_id=session_id, guard=guard)]
    if retriever is not None:
        tools.append(KnowledgeSearchTool(retriever=retriever, user_id=user_id))
    return tools
