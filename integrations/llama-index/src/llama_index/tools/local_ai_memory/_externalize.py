"""Keep large tool outputs out of a LlamaIndex agent's memory (L3 externalization).

``FunctionAgent`` puts every tool output into its scratchpad and then into its memory, and
sends it to the model on every later step. :class:`ExternalizingTool` wraps any LlamaIndex
tool: after the tool runs, a successful, text-only output above
``config.tool_result_inline_limit`` UTF-8 bytes (6,144 by default) is stored as an L3 tool
result of ``memory.session(user_id, session_id)`` and the agent receives the short JSON
reference ``{"result_id", "summary", "size", ...}`` instead. The model pages the full text back
with the ``load_tool_result`` tool of a :class:`LocalMemoryToolSpec` built from the same
:class:`~local_ai_memory.Memory` and scope.

The wrapper is a ``FunctionTool`` so that agents still pass the workflow ``Context`` to a
wrapped tool that asks for one. Error outputs and outputs with non-text blocks (images,
documents) are passed through unchanged. An externalized output's ``raw_output`` is the
reference too, so the full text is not kept in the workflow's events either.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from llama_index.core.base.llms.types import TextBlock
from llama_index.core.tools import BaseTool, FunctionTool, ToolOutput, adapt_to_async_tool
from llama_index.retrievers.local_ai_memory._adapters import resolve_memory

from local_ai_memory import InvalidInputError, Memory, MemoryConfig, RetentionPolicy

__all__ = ["ExternalizingTool", "externalizable_text", "externalize_tools", "replace_output"]

#: Tools whose output is never externalized: paging a stored result back must stay inline.
NEVER_EXTERNALIZED = frozenset({"load_tool_result", "search_tool_result"})


def externalizable_text(output: ToolOutput) -> str | None:
    """The text that may be externalized, or ``None`` for errors and non-text outputs."""
    if output.is_error or not output.blocks:
        return None
    if not all(isinstance(block, TextBlock) for block in output.blocks):
        return None
    return output.content


def replace_output(output: ToolOutput, text: str, stored: str) -> ToolOutput:
    """``output`` itself when ``stored`` is ``text`` (kept inline), else a copy carrying the reference."""
    if stored is text:
        return output
    return ToolOutput(
        content=stored,
        tool_name=output.tool_name,
        raw_input=output.raw_input,
        raw_output=stored,
        is_error=False,
    )


class ExternalizingTool(FunctionTool):
    """A tool whose large outputs go to L3 storage of one ``(user_id, session_id)`` before the
    agent sees them.

    ``memory=`` is the :class:`~local_ai_memory.Memory` to store in (``config=`` instead builds
    one ``Memory(config)``); ``retention`` overrides the configured bounds of the scope's
    stored outputs.

    >>> from local_ai_memory import Memory
    >>> memory = Memory.in_memory()
    >>> big = FunctionTool.from_defaults(fn=lambda: "x" * 10_000, name="big", description="Big output.")
    >>> out = ExternalizingTool(big, memory=memory, user_id="alice", session_id="s1").call()
    >>> out.content.startswith('{"result_id"')
    True
    """

    def __init__(
        self,
        tool: BaseTool,
        memory: Memory | None = None,
        *,
        user_id: str,
        session_id: str,
        config: MemoryConfig | None = None,
        retention: RetentionPolicy | None = None,
    ) -> None:
        if not isinstance(tool, BaseTool):
            raise InvalidInputError(f"expected a LlamaIndex tool, got {type(tool).__name__}")
        if retention is not None and not isinstance(retention, RetentionPolicy):
            raise InvalidInputError(f"retention must be a RetentionPolicy, got {type(retention).__name__}")
        self.memory = resolve_memory(memory, config)
        self.session = self.memory.session(user_id, session_id)
        self.wrapped = tool
        self.store = self.session.tool_results.with_retention(retention)
        self._inner = adapt_to_async_tool(tool)
        super().__init__(fn=self._run_text, async_fn=self._arun_text, metadata=tool.metadata)
        # Agents inject the workflow Context only into FunctionTools that declare it: mirror the wrapped tool.
        self.requires_context = bool(isinstance(tool, FunctionTool) and tool.requires_context)
        self.ctx_param_name = tool.ctx_param_name if isinstance(tool, FunctionTool) else None

    def __repr__(self) -> str:
        return f"ExternalizingTool({self.metadata.name!r})"

    def _name(self) -> str:
        return self.metadata.name or type(self.wrapped).__name__

    def call(self, *args: Any, **kwargs: Any) -> ToolOutput:
        """Run the wrapped tool, then externalize its output if it is large."""
        output = self._inner.call(*args, **kwargs)
        text = externalizable_text(output)
        if text is None:
            return output
        return replace_output(output, text, self.store.externalize(self._name(), text))

    async def acall(self, *args: Any, **kwargs: Any) -> ToolOutput:
        """Async twin of :meth:`call` (the wrapped tool's ``acall``, disk work in a thread)."""
        output = await self._inner.acall(*args, **kwargs)
        text = externalizable_text(output)
        if text is None:
            return output
        return replace_output(output, text, await self.store.aexternalize(self._name(), text))

    def _run_text(self, *args: Any, **kwargs: Any) -> str:
        return self.call(*args, **kwargs).content

    async def _arun_text(self, *args: Any, **kwargs: Any) -> str:
        return (await self.acall(*args, **kwargs)).content


def externalize_tools(
    tools: Iterable[BaseTool],
    memory: Memory | None = None,
    *,
    user_id: str,
    session_id: str,
    config: MemoryConfig | None = None,
    retention: RetentionPolicy | None = None,
    skip: Sequence[str] = tuple(NEVER_EXTERNALIZED),
) -> list[BaseTool]:
    """Wrap each tool in :class:`ExternalizingTool` over ``memory``'s ``(user_id, session_id)``
    (``config=``: one ``Memory(config)`` for them all), except those named in ``skip``, those
    already wrapped, and ``return_direct`` tools (their output is the agent's final answer to
    the user, which must stay the real text)."""
    memory = resolve_memory(memory, config)
    wrapped: list[BaseTool] = []
    for tool in tools:
        if isinstance(tool, ExternalizingTool) or tool.metadata.name in skip or tool.metadata.return_direct:
            wrapped.append(tool)
        else:
            wrapped.append(ExternalizingTool(tool, memory, user_id=user_id, session_id=session_id, retention=retention))
    return wrapped
