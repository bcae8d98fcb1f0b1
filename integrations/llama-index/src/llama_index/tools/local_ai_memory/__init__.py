"""LlamaIndex tools of local-ai-memory: paging stored tool outputs, knowledge search, and a
wrapper that keeps large tool outputs out of an agent's memory."""

from __future__ import annotations

from ._externalize import ExternalizingTool, externalize_tools
from ._spec import LocalMemoryToolSpec

__all__ = ["ExternalizingTool", "LocalMemoryToolSpec", "externalize_tools"]
