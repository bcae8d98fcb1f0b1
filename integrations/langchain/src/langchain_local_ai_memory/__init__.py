"""LangChain and LangGraph integration of local-ai-memory.

* :class:`LocalMemoryRetriever`: the knowledge memory as a ``BaseRetriever``.
* :func:`create_memory_tools`: ``load_tool_result``, ``search_tool_result`` and ``search_memory`` tools.
* :class:`LocalMemoryMiddleware` (and its parts): agent middleware for ``create_agent``.
* :class:`LocalMemorySaver`: a LangGraph checkpointer (``checkpointer=``) over the memory's backend.
* :class:`LocalMemoryCallbackHandler`: persistence and L1 compression for chains without middleware.
* :class:`LocalMemoryChatMessageHistory`: a ``BaseChatMessageHistory`` over the session files.
* :class:`LocalMemoryStore`: a LangGraph ``BaseStore`` whose items are knowledge notes.
* :class:`ChatModelLLM`, :class:`EmbeddingsEmbedder`: LangChain models as the core's model protocols.

Each memory class takes a :class:`~local_ai_memory.Memory` (``memory=``) and uses that very
object: hand one memory to all of them and they share its backends, index and caches.
``config=`` is a shortcut that builds ``Memory(config)`` for one object.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._adapters import ChatModelLLM, EmbeddingsEmbedder, as_embedder, as_llm
from ._callbacks import LocalMemoryCallbackHandler
from ._history import LocalMemoryChatMessageHistory
from ._retriever import LocalMemoryRetriever
from ._tools import (
    KnowledgeSearchTool,
    LoadToolResultTool,
    RecallTool,
    SearchToolResultTool,
    create_memory_tools,
)

if TYPE_CHECKING:  # the middleware and the saver need the optional ``agents`` extra: imported lazily below
    from ._checkpointer import LocalMemorySaver
    from ._middleware import (
        CheckpointMiddleware,
        LocalMemoryMiddleware,
        MemoryPromptMiddleware,
        ToolResultMiddleware,
        WorkingMemoryMiddleware,
    )
    from ._store import LocalMemoryStore

__all__ = [
    "ChatModelLLM",
    "CheckpointMiddleware",
    "EmbeddingsEmbedder",
    "KnowledgeSearchTool",
    "LoadToolResultTool",
    "LocalMemoryCallbackHandler",
    "LocalMemoryChatMessageHistory",
    "LocalMemoryMiddleware",
    "LocalMemoryRetriever",
    "LocalMemorySaver",
    "LocalMemoryStore",
    "MemoryPromptMiddleware",
    "RecallTool",
    "SearchToolResultTool",
    "ToolResultMiddleware",
    "WorkingMemoryMiddleware",
    "as_embedder",
    "as_llm",
    "create_memory_tools",
]


def __getattr__(name: str) -> object:
    # The middleware needs the optional ``langchain`` package (extra ``agents``): import it lazily.
    if name in _MIDDLEWARE:
        from . import _middleware

        return getattr(_middleware, name)
    if name == "LocalMemorySaver":
        from ._checkpointer import LocalMemorySaver

        return LocalMemorySaver
    if name == "LocalMemoryStore":  # needs the optional ``langgraph`` package (extra ``agents``)
        from ._store import LocalMemoryStore

        return LocalMemoryStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_MIDDLEWARE = {
    "CheckpointMiddleware",
    "LocalMemoryMiddleware",
    "MemoryPromptMiddleware",
    "SearchToolResultTool",
    "ToolResultMiddleware",
    "WorkingMemoryMiddleware",
}
