"""``LocalMemoryToolSpec``: the memory tools an agent calls, bound to one user and session.

Up to four tools, each with a sync and an async implementation (``FunctionTool`` picks the one
the agent needs):

* ``load_tool_result(result_id, offset=0, limit=8000, line=None, lines=200)`` pages an
  externalized tool output back by characters (or, given ``line``, by numbered lines).
* ``search_tool_result(result_id, pattern, regex=False, ...)`` returns the lines of a stored
  output that match a literal or regular-expression pattern, numbered, with context, paged
  and capped: one call finds the error line of a large log. The core applies the scope check
  of ``load_tool_result``, so another scope's id is "not found" in both. The output of either
  tool is never externalized again.
* ``search_memory(query)`` (with ``search=True``) runs ``memory.knowledge.retrieve``
  (Stage 1, Stage 2 when the memory has an LLM, Stage 3 within ``max_tokens``) over the bound
  user's notes.
* ``recall(query)`` (with ``recall=True``) runs ``memory.recall``: the passages of the bound
  user's notes and past conversations that answer a question, within ``recall_tokens``.

``user_id`` and ``session_id`` are fixed when the spec is built and are not parameters of the
tools, so the model can neither see nor change whose memory it reads. The spec works through
``memory.session(user_id, session_id)``, so the memory block and the externalizing wrappers
built from the same :class:`~local_ai_memory.Memory` see the same stored outputs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from llama_index.core.tools import BaseTool, FunctionTool
from llama_index.core.tools.tool_spec.base import SPEC_FUNCTION_TYPE, BaseToolSpec
from llama_index.core.tools.types import ToolMetadata
from llama_index.retrievers.local_ai_memory._adapters import resolve_memory
from llama_index.retrievers.local_ai_memory.base import known_categories

from local_ai_memory import InvalidInputError, Memory, MemoryConfig, RetentionPolicy
from local_ai_memory.integration import (
    DEFAULT_PAGE_CHARS,
    DEFAULT_PAGE_LINES,
    DEFAULT_SEARCH_MATCHES,
    RECALL_DESCRIPTION,
)

from ._externalize import externalize_tools

__all__ = ["LocalMemoryToolSpec"]

_LOAD_DESCRIPTION = (
    f"load_tool_result(result_id: str, offset: int = 0, limit: int = {DEFAULT_PAGE_CHARS}, line: int | None = None, "
    f"lines: int = {DEFAULT_PAGE_LINES}) -> str\n"
    "Read back a large tool output that was stored instead of shown. A stored output appears as JSON "
    'like {"result_id": "...", "summary": "...", "size": 123456, "chars": 123000, "lines": 2400, "pages": 16} '
    "(size in bytes). Pass its result_id; the answer is the characters offset to offset+limit (or, with "
    "line, that many numbered lines from line), after a header saying how much remains and where to ask "
    "next. To find something specific, use search_tool_result instead of reading every page."
)
_SEARCH_RESULT_DESCRIPTION = (
    "search_tool_result(result_id: str, pattern: str, regex: bool = False, ignore_case: bool = True, "
    f"context: int = 2, skip: int = 0, max_matches: int = {DEFAULT_SEARCH_MATCHES}) -> str\n"
    "Search a large tool output that was stored instead of shown for the lines containing pattern (a "
    "regular expression with regex=True). Returns the matching lines with their line numbers and context "
    "lines around them, and says how to see more matches."
)
_SEARCH_DESCRIPTION = (
    "search_memory(query: str) -> str\n"
    "Search the user's knowledge memory (Markdown notes) and return the most relevant notes' text, "
    "each under a '## filename' heading. Use it for facts the user stored earlier."
)


class LocalMemoryToolSpec(BaseToolSpec):
    """``load_tool_result``, ``search_tool_result`` and (with ``search=True``) ``search_memory`` as
    LlamaIndex tools for one ``(user_id, session_id)`` of a :class:`~local_ai_memory.Memory`.

    Pass ``memory=`` to share one memory with the other adapters; ``config=`` instead builds one
    ``Memory(config)`` for this spec (``llm`` and ``embed_model`` then serve ``search_memory``).
    ``retention`` overrides the configured bounds of the stored outputs of this scope.

    >>> from local_ai_memory import Memory
    >>> spec = LocalMemoryToolSpec(memory=Memory.in_memory(), user_id="alice", session_id="s1", search=True)
    >>> [tool.metadata.name for tool in spec.to_tool_list()]
    ['load_tool_result', 'search_tool_result', 'search_memory']
    """

    spec_functions: list[SPEC_FUNCTION_TYPE]  # set per instance: search_memory only with search=True

    def __init__(
        self,
        memory: Memory | None = None,
        *,
        user_id: str,
        session_id: str,
        config: MemoryConfig | None = None,
        llm: Any = None,
        embed_model: Any = None,
        search: bool = False,
        recall: bool = False,
        categories: Sequence[str] | None = None,
        max_tokens: int = 2000,
        recall_tokens: int = 1000,
        max_page_chars: int = 20_000,
        retention: RetentionPolicy | None = None,
    ) -> None:
        for flag, value in (("search", search), ("recall", recall)):
            if not isinstance(value, bool):
                raise InvalidInputError(f"{flag} must be True or False, got {value!r}")
        for size, number in (("max_tokens", max_tokens), ("recall_tokens", recall_tokens)):
            if isinstance(number, bool) or not isinstance(number, int) or number < 1:
                raise InvalidInputError(f"{size} must be a positive integer, got {number!r}")
        if isinstance(max_page_chars, bool) or not isinstance(max_page_chars, int) or max_page_chars < 1:
            raise InvalidInputError(f"max_page_chars must be a positive integer, got {max_page_chars!r}")
        if retention is not None and not isinstance(retention, RetentionPolicy):
            raise InvalidInputError(f"retention must be a RetentionPolicy, got {type(retention).__name__}")
        self.memory = resolve_memory(memory, config, llm=llm, embed_model=embed_model)
        self.session = self.memory.session(user_id, session_id)
        self.user_id: str = user_id
        self.session_id: str = session_id
        self.retention = retention
        self.store = self.session.tool_results.with_retention(retention)
        self.search_enabled = search
        self.categories = known_categories(self.memory, categories) if search else None
        self.max_tokens = max_tokens
        self.recall_tokens = recall_tokens
        self.max_page_chars = max_page_chars
        self.spec_functions = [
            ("load_tool_result", "aload_tool_result"),
            ("search_tool_result", "asearch_tool_result"),
        ]
        if search:
            self.spec_functions.append(("search_memory", "asearch_memory"))
        if recall:
            self.spec_functions.append(("recall", "arecall"))

    @classmethod
    def from_config(
        cls, config: MemoryConfig | None = None, *, user_id: str, session_id: str, **kwargs: Any
    ) -> LocalMemoryToolSpec:
        """``LocalMemoryToolSpec(config=config, ...)``: over one new ``Memory(config)`` (default ``~/.local-ai``)."""
        return cls(config=config, user_id=user_id, session_id=session_id, **kwargs)

    def __repr__(self) -> str:
        return f"LocalMemoryToolSpec(scope={self.session.engine.scope!r}, search={self.search_enabled})"

    # -- load_tool_result

    def _limit(self, limit: int) -> int:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise InvalidInputError(f"limit must be a whole number >= 1, got {limit!r}")
        return min(limit, self.max_page_chars)

    def load_tool_result(
        self,
        result_id: str,
        offset: int = 0,
        limit: int = DEFAULT_PAGE_CHARS,
        line: int | None = None,
        lines: int = DEFAULT_PAGE_LINES,
    ) -> str:
        """Characters ``offset`` to ``offset + limit`` of a stored tool output (or ``lines`` lines from
        ``line``), with a position header."""
        return self.store.read(result_id, offset, self._limit(limit), line=line, lines=lines)

    async def aload_tool_result(
        self,
        result_id: str,
        offset: int = 0,
        limit: int = DEFAULT_PAGE_CHARS,
        line: int | None = None,
        lines: int = DEFAULT_PAGE_LINES,
    ) -> str:
        """Async twin of :meth:`load_tool_result`."""
        return await self.store.aread(result_id, offset, self._limit(limit), line=line, lines=lines)

    # -- search_tool_result

    def search_tool_result(
        self,
        result_id: str,
        pattern: str,
        regex: bool = False,
        ignore_case: bool = True,
        context: int = 2,
        skip: int = 0,
        max_matches: int = DEFAULT_SEARCH_MATCHES,
    ) -> str:
        """The lines of a stored tool output matching ``pattern``, numbered, with ``context`` lines around."""
        return self.store.search_text(
            result_id,
            pattern,
            regex=regex,
            ignore_case=ignore_case,
            context=context,
            skip=skip,
            max_matches=max_matches,
        )

    async def asearch_tool_result(
        self,
        result_id: str,
        pattern: str,
        regex: bool = False,
        ignore_case: bool = True,
        context: int = 2,
        skip: int = 0,
        max_matches: int = DEFAULT_SEARCH_MATCHES,
    ) -> str:
        """Async twin of :meth:`search_tool_result`."""
        return await self.store.asearch_text(
            result_id,
            pattern,
            regex=regex,
            ignore_case=ignore_case,
            context=context,
            skip=skip,
            max_matches=max_matches,
        )

    # -- search_memory

    def _require_search(self) -> None:
        if not self.search_enabled:
            raise InvalidInputError("search_memory is off: build the spec with search=True")

    def search_memory(self, query: str) -> str:
        """The bound user's most relevant knowledge notes for ``query``, within ``max_tokens``."""
        self._require_search()
        knowledge = self.memory.knowledge
        return knowledge.retrieve(
            query, self.user_id, categories=self.categories, max_tokens=self.max_tokens
        ).for_model()

    async def asearch_memory(self, query: str) -> str:
        """Async twin of :meth:`search_memory`."""
        self._require_search()
        knowledge = self.memory.knowledge
        result = await knowledge.aretrieve(query, self.user_id, categories=self.categories, max_tokens=self.max_tokens)
        return result.for_model()

    # -- recall

    def recall(self, query: str) -> str:
        """The passages of the bound user's notes and past conversations that answer ``query``."""
        return self.memory.recall(query, self.user_id, max_tokens=self.recall_tokens).answer

    async def arecall(self, query: str) -> str:
        """Async twin of :meth:`recall`."""
        return (await self.memory.arecall(query, self.user_id, max_tokens=self.recall_tokens)).answer

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
            "search_tool_result": ToolMetadata(
                name="search_tool_result",
                description=_SEARCH_RESULT_DESCRIPTION,
                fn_schema=FunctionTool.from_defaults(fn=self.search_tool_result).metadata.fn_schema,
            ),
            "search_memory": ToolMetadata(
                name="search_memory",
                description=_SEARCH_DESCRIPTION,
                fn_schema=FunctionTool.from_defaults(fn=self.search_memory).metadata.fn_schema,
            ),
            "recall": ToolMetadata(
                name="recall",
                description=f"recall(query: str) -> str\n{RECALL_DESCRIPTION}",
                fn_schema=FunctionTool.from_defaults(fn=self.recall).metadata.fn_schema,
            ),
        }
        mapping.update(func_to_metadata_mapping or {})
        return super().to_tool_list(spec_functions, mapping)

    def wrap_tools(self, tools: Iterable[BaseTool]) -> list[BaseTool]:
        """``tools`` wrapped so their large outputs are stored in this scope and replaced by references."""
        return externalize_tools(
            tools, self.memory, user_id=self.user_id, session_id=self.session_id, retention=self.retention
        )
