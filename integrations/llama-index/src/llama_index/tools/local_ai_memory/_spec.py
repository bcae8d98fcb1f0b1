"""``LocalMemoryToolSpec``: the memory tools an agent calls, bound to one user and session.

Two tools, each with a sync and an async implementation (``FunctionTool`` picks the one the
agent needs):

* ``load_tool_result(result_id, offset=0, limit=4000)`` pages an externalized tool output
  back by characters. Its own output is never externalized again.
* ``search_memory(query)`` runs the knowledge retrieval (Stage 1, Stage 2 when an LLM is
  configured, Stage 3 within ``max_tokens``) over the bound user's files.

``user_id`` and ``session_id`` are fixed when the spec is built and are not parameters of the
tools, so the model can neither see nor change whose memory it reads.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from llama_index.core.tools import BaseTool, FunctionTool
from llama_index.core.tools.tool_spec.base import SPEC_FUNCTION_TYPE, BaseToolSpec
from llama_index.core.tools.types import ToolMetadata
from llama_index.retrievers.local_ai_memory.base import LocalMemoryRetriever

from local_ai_memory import (
    DirectoryGuard,
    InvalidInputError,
    MemoryConfig,
    MemoryManager,
    MemoryRetriever,
    RetentionPolicy,
    ToolResultStore,
    render_page,
)
from local_ai_memory.integration import DEFAULT_PAGE_CHARS

from ._externalize import externalize_tools

__all__ = ["LocalMemoryToolSpec"]

_LOAD_DESCRIPTION = (
    "load_tool_result(result_id: str, offset: int = 0, limit: int = 4000) -> str\n"
    "Read back a large tool output that was stored instead of shown. A stored output appears as JSON "
    'like {"result_id": "...", "summary": "...", "size": 123456}. Pass its result_id; the answer is '
    "the characters offset to offset+limit, after a header saying how many characters remain and "
    "which offset to ask for next."
)
_SEARCH_DESCRIPTION = (
    "search_memory(query: str) -> str\n"
    "Search the user's knowledge memory (Markdown notes) and return the most relevant notes' text, "
    "each under a '## filename' heading. Use it for facts the user stored earlier."
)


class LocalMemoryToolSpec(BaseToolSpec):
    """``load_tool_result`` and ``search_memory`` as LlamaIndex tools for one ``(user_id, session_id)``.

    ``manager`` is a :class:`~local_ai_memory._runtime.scope.MemoryManager`, already scoped or scoped
    here with ``user_id`` and ``session_id``. ``retriever`` (a core ``MemoryRetriever`` or a
    :class:`LocalMemoryRetriever`, whose engine is used) enables ``search_memory`` over the
    scope's user; without it only ``load_tool_result`` is offered.
    """

    spec_functions: list[SPEC_FUNCTION_TYPE]  # set per instance: search_memory only with a retriever

    def __init__(
        self,
        manager: MemoryManager,
        *,
        user_id: str | None = None,
        session_id: str | None = None,
        retriever: MemoryRetriever | LocalMemoryRetriever | None = None,
        categories: Sequence[str] | None = None,
        max_tokens: int = 2000,
        max_page_chars: int = 20_000,
        retention: RetentionPolicy | None = None,
    ) -> None:
        if not isinstance(manager, MemoryManager):
            raise InvalidInputError(f"expected a MemoryManager, got {type(manager).__name__}")
        if user_id is not None or session_id is not None:
            if user_id is None or session_id is None:
                raise InvalidInputError("give both user_id and session_id, or neither")
            manager = manager.scoped(user_id, session_id)
        if manager.scope is None or manager.user_id is None:
            raise InvalidInputError("the tools need a scoped manager: pass user_id and session_id")
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise InvalidInputError(f"max_tokens must be a positive integer, got {max_tokens!r}")
        if isinstance(max_page_chars, bool) or not isinstance(max_page_chars, int) or max_page_chars < 1:
            raise InvalidInputError(f"max_page_chars must be a positive integer, got {max_page_chars!r}")
        self.manager = manager
        self.user_id: str = manager.user_id
        self.store = ToolResultStore(manager, retention)
        if isinstance(retriever, LocalMemoryRetriever):
            retriever = retriever.memory_retriever
        if retriever is not None and not isinstance(retriever, MemoryRetriever):
            raise InvalidInputError(f"retriever must be a MemoryRetriever, got {type(retriever).__name__}")
        self.retriever: MemoryRetriever | None = retriever
        self.categories = list(categories) if categories is not None else None
        self.max_tokens = max_tokens
        self.max_page_chars = max_page_chars
        self.spec_functions = [("load_tool_result", "aload_tool_result")]
        if retriever is not None:
            self.spec_functions.append(("search_memory", "asearch_memory"))

    @classmethod
    def from_config(
        cls,
        config: MemoryConfig | None = None,
        *,
        user_id: str,
        session_id: str,
        retriever: MemoryRetriever | LocalMemoryRetriever | None = None,
        **kwargs: Any,
    ) -> LocalMemoryToolSpec:
        """Tools for ``(user_id, session_id)`` over ``config.runtime_data_dir`` (default ``~/.local-ai``)."""
        config = config if config is not None else MemoryConfig()
        manager = MemoryManager(DirectoryGuard(config.runtime_data_dir), config)
        return cls(manager, user_id=user_id, session_id=session_id, retriever=retriever, **kwargs)

    def __repr__(self) -> str:
        return f"LocalMemoryToolSpec(scope={self.manager.scope!r}, search={self.retriever is not None})"

    # -- load_tool_result

    def _limit(self, limit: int) -> int:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise InvalidInputError(f"limit must be a whole number >= 1, got {limit!r}")
        return min(limit, self.max_page_chars)

    def load_tool_result(self, result_id: str, offset: int = 0, limit: int = DEFAULT_PAGE_CHARS) -> str:
        """Characters ``offset`` to ``offset + limit`` of a stored tool output, with a position header."""
        return render_page(self.store.load_page(result_id, offset, self._limit(limit)))

    async def aload_tool_result(self, result_id: str, offset: int = 0, limit: int = DEFAULT_PAGE_CHARS) -> str:
        """Async twin of :meth:`load_tool_result`."""
        return render_page(await self.store.aload_page(result_id, offset, self._limit(limit)))

    # -- search_memory

    def _require_retriever(self) -> MemoryRetriever:
        if self.retriever is None:
            raise InvalidInputError("search_memory needs a retriever: LocalMemoryToolSpec(..., retriever=...)")
        return self.retriever

    def search_memory(self, query: str) -> str:
        """The bound user's most relevant knowledge files for ``query``, within ``max_tokens``."""
        retriever = self._require_retriever()
        return retriever.retrieve_result(query, self.user_id, self.categories, self.max_tokens).for_model()

    async def asearch_memory(self, query: str) -> str:
        """Async twin of :meth:`search_memory`."""
        retriever = self._require_retriever()
        result = await retriever.aretrieve_result(query, self.user_id, self.categories, self.max_tokens)
        return result.for_model()

    # -- tools

    def to_tool_list(
        self,
        spec_functions: list[SPEC_FUNCTION_TYPE] | None = None,
        func_to_metadata_mapping: dict[str, ToolMetadata] | None = None,
    ) -> list[FunctionTool]:
        """The tools, with descriptions written for the model (no ``self``, no user or session id)."""
        mapping = {
            "load_tool_result": ToolMetadata(
                name="load_tool_result",
                description=_LOAD_DESCRIPTION,
                fn_schema=FunctionTool.from_defaults(fn=self.load_tool_result).metadata.fn_schema,
            ),
            "search_memory": ToolMetadata(
                name="search_memory",
                description=_SEARCH_DESCRIPTION,
                fn_schema=FunctionTool.from_defaults(fn=self.search_memory).metadata.fn_schema,
            ),
        }
        mapping.update(func_to_metadata_mapping or {})
        return super().to_tool_list(spec_functions, mapping)

    def wrap_tools(self, tools: Iterable[BaseTool]) -> list[BaseTool]:
        """``tools`` wrapped so their large outputs are stored in this scope and replaced by references."""
        return externalize_tools(tools, self.store)
