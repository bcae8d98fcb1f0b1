"""Function tools for an Agents SDK agent: page a stored tool output back, search the knowledge memory.

* ``load_tool_result``: a large output stored with ``session.externalize`` (the model saw a
  ``{result_id, summary, size}`` reference instead) comes back page by page, by characters or
  by lines; each page says where the next one starts. Only outputs of the bound
  ``(user_id, session_id)`` are reachable: the core answers another session's id as not found.
* ``search_memory``: the three retrieval stages over the bound user's notes, within a token
  budget, returned as fenced data.
* ``recall`` (with ``recall=True``): the passages of the user's notes and past conversations
  that answer a question (:meth:`local_ai_memory.Memory.recall`).

The user and session are bound when the tools are made (:func:`memory_tools`); the model
never names them. Errors of the library (an unknown id, a bad page) reach the model as the
tool's answer, so it can correct the call instead of the run failing.
"""

from __future__ import annotations

from typing import Annotated

from agents import FunctionTool, function_tool
from pydantic import Field

from local_ai_memory import LocalMemoryError, Memory
from local_ai_memory.integration import DEFAULT_PAGE_CHARS, DEFAULT_PAGE_LINES, RECALL_DESCRIPTION

__all__ = ["LOAD_TOOL_RESULT", "RECALL", "SEARCH_MEMORY", "memory_tools"]

LOAD_TOOL_RESULT = "load_tool_result"
SEARCH_MEMORY = "search_memory"
RECALL = "recall"
MAX_PAGE_CHARS = 20_000
MAX_PAGE_LINES = 1_000
MAX_SEARCH_TOKENS = 8_000


def memory_tools(
    memory: Memory,
    user_id: str,
    session_id: str,
    *,
    search_tokens: int = 2000,
    recall: bool = False,
    recall_tokens: int = 1000,
) -> list[FunctionTool]:
    """``[load_tool_result, search_memory]`` bound to one user and session of ``memory``, and
    ``recall`` last with ``recall=True``.

    ``search_tokens`` / ``recall_tokens``: the budget of one ``search_memory`` / ``recall`` answer.
    """
    session = memory.session(user_id, session_id)  # ids checked here, before any tool exists
    knowledge = memory.knowledge

    @function_tool(name_override=LOAD_TOOL_RESULT)
    async def load_tool_result(
        result_id: Annotated[str, "The result_id of a tool result that was stored instead of shown."],
        offset: Annotated[int, Field(ge=0, description="First character to return (0 for the start).")] = 0,
        limit: Annotated[
            int, Field(ge=1, le=MAX_PAGE_CHARS, description="How many characters to return at most.")
        ] = DEFAULT_PAGE_CHARS,
        line: Annotated[
            int | None, Field(ge=1, description="Read by lines instead: the first line (1 for the start).")
        ] = None,
        lines: Annotated[
            int, Field(ge=1, le=MAX_PAGE_LINES, description="With line: how many lines at most.")
        ] = DEFAULT_PAGE_LINES,
    ) -> str:
        """Read a large tool result that was stored instead of shown, page by page.

        A stored result appears as JSON with result_id, summary, size, chars, lines and pages.
        Start at offset 0 (or line 1); each page says where the next one starts.
        """
        try:
            return await session.aread_tool_result(result_id, offset, limit, line=line, lines=lines)
        except LocalMemoryError as error:
            return f"Cannot load tool result {result_id!r}: {error}"

    @function_tool(name_override=SEARCH_MEMORY)
    async def search_memory(
        query: Annotated[str, "What to look for in the user's notes, in a few words."],
        max_tokens: Annotated[
            int, Field(ge=100, le=MAX_SEARCH_TOKENS, description="Token budget of the answer.")
        ] = search_tokens,
    ) -> str:
        """Search the user's long-term notes and return the most relevant ones within a token budget."""
        try:
            found = await knowledge.aretrieve(query, user_id, max_tokens=min(max_tokens, search_tokens))
        except LocalMemoryError as error:
            return f"Cannot search memory: {error}"
        return found.for_model()

    async def recall_passages(
        query: Annotated[str, "A question, or the words of what to recall (a name, a date, a preference)."],
    ) -> str:
        try:
            return (await memory.arecall(query, user_id, max_tokens=recall_tokens)).answer
        except LocalMemoryError as error:
            return f"Cannot recall: {error}"

    recall_tool = function_tool(recall_passages, name_override=RECALL, description_override=RECALL_DESCRIPTION)
    return [load_tool_result, search_memory, *([recall_tool] if recall else [])]
