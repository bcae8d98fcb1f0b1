"""local-ai-memory: runtime and knowledge memory for LLM agents, in plain files by default.

Start with :class:`Memory`::

    from local_ai_memory import Memory

    memory = Memory.open("~/.local-ai")
    session = memory.session("alice", "s1")     # L0 state, L1 working memory, L2 checkpoints, L3 tool results
    memory.knowledge.retrieve("how do we deploy?", user_id="alice")

The engines here are framework-free; ``langchain-local-ai-memory`` and
``llama-index-local-ai-memory`` wrap them. Public submodules: :mod:`local_ai_memory.backends`
(the storage contract and its backends), :mod:`local_ai_memory.types` (result and record
types), :mod:`local_ai_memory.testing` (conformance suites), :mod:`local_ai_memory.integration`
(building blocks for framework integrations) and :mod:`local_ai_memory.samples` (a real
sample corpus for demos and benchmarks).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what the checkers see; at run time each name is imported on first use
    from local_ai_memory._knowledge.edits import note_hash
    from local_ai_memory._knowledge.retriever import MemoryRetriever
    from local_ai_memory._knowledge.roots import close_shared_stores
    from local_ai_memory._knowledge.service import MemoryIndexService
    from local_ai_memory._knowledge.store import MemoryStore
    from local_ai_memory._memory import Knowledge, Memory, Session
    from local_ai_memory._models.openai import (
        OpenAICompatibleEmbedder,
        OpenAICompatibleLLM,
        embedder_from_env,
        llm_from_env,
    )
    from local_ai_memory._models.sentence_transformers import SentenceTransformerEmbedder
    from local_ai_memory._runtime.checkpoints import CheckpointRun, RunInterrupted
    from local_ai_memory._runtime.compressor import WorkingMemoryCompressor
    from local_ai_memory._runtime.context import ContextBuilder
    from local_ai_memory._runtime.messages import SessionMessageStore
    from local_ai_memory._runtime.scope import MemoryManager
    from local_ai_memory._runtime.tool_results import RetentionPolicy, ToolResultStore, render_page
    from local_ai_memory._shared.config import MemoryConfig
    from local_ai_memory._shared.errors import (
        ConfigError,
        ConflictError,
        InvalidInputError,
        LocalMemoryError,
        LockTimeoutError,
        ModelError,
        PathEscapeError,
        RecordNotFoundError,
        StorageError,
        UnsupportedFormatError,
    )
    from local_ai_memory._shared.events import Event
    from local_ai_memory._shared.models import LLM, Embedder
    from local_ai_memory._shared.naming import DirectoryGuard
    from local_ai_memory._shared.progress import progress_bar
    from local_ai_memory._shared.tokens import TokenCounter

_EXPORTS: dict[str, str] = {
    "note_hash": "local_ai_memory._knowledge.edits",
    "MemoryRetriever": "local_ai_memory._knowledge.retriever",
    "close_shared_stores": "local_ai_memory._knowledge.roots",
    "MemoryIndexService": "local_ai_memory._knowledge.service",
    "MemoryStore": "local_ai_memory._knowledge.store",
    "Knowledge": "local_ai_memory._memory",
    "Memory": "local_ai_memory._memory",
    "Session": "local_ai_memory._memory",
    "OpenAICompatibleEmbedder": "local_ai_memory._models.openai",
    "OpenAICompatibleLLM": "local_ai_memory._models.openai",
    "embedder_from_env": "local_ai_memory._models.openai",
    "llm_from_env": "local_ai_memory._models.openai",
    "SentenceTransformerEmbedder": "local_ai_memory._models.sentence_transformers",
    "CheckpointRun": "local_ai_memory._runtime.checkpoints",
    "RunInterrupted": "local_ai_memory._runtime.checkpoints",
    "WorkingMemoryCompressor": "local_ai_memory._runtime.compressor",
    "ContextBuilder": "local_ai_memory._runtime.context",
    "SessionMessageStore": "local_ai_memory._runtime.messages",
    "MemoryManager": "local_ai_memory._runtime.scope",
    "RetentionPolicy": "local_ai_memory._runtime.tool_results",
    "ToolResultStore": "local_ai_memory._runtime.tool_results",
    "render_page": "local_ai_memory._runtime.tool_results",
    "MemoryConfig": "local_ai_memory._shared.config",
    "ConfigError": "local_ai_memory._shared.errors",
    "ConflictError": "local_ai_memory._shared.errors",
    "InvalidInputError": "local_ai_memory._shared.errors",
    "LocalMemoryError": "local_ai_memory._shared.errors",
    "LockTimeoutError": "local_ai_memory._shared.errors",
    "ModelError": "local_ai_memory._shared.errors",
    "PathEscapeError": "local_ai_memory._shared.errors",
    "RecordNotFoundError": "local_ai_memory._shared.errors",
    "StorageError": "local_ai_memory._shared.errors",
    "UnsupportedFormatError": "local_ai_memory._shared.errors",
    "Event": "local_ai_memory._shared.events",
    "Embedder": "local_ai_memory._shared.models",
    "LLM": "local_ai_memory._shared.models",
    "DirectoryGuard": "local_ai_memory._shared.naming",
    "progress_bar": "local_ai_memory._shared.progress",
    "TokenCounter": "local_ai_memory._shared.tokens",
}
"""Where each public name lives: ``import local_ai_memory`` loads none of it (a command line
that only prints ``--help`` stays fast); ``local_ai_memory.Memory`` or ``from local_ai_memory
import Memory`` imports its module then, once."""


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


__version__ = "0.2.0.dev0"

__all__ = [
    "LLM",
    "CheckpointRun",
    "ConfigError",
    "ConflictError",
    "ContextBuilder",
    "DirectoryGuard",
    "Embedder",
    "Event",
    "InvalidInputError",
    "Knowledge",
    "LocalMemoryError",
    "LockTimeoutError",
    "Memory",
    "MemoryConfig",
    "MemoryIndexService",
    "MemoryManager",
    "MemoryRetriever",
    "MemoryStore",
    "ModelError",
    "OpenAICompatibleEmbedder",
    "OpenAICompatibleLLM",
    "PathEscapeError",
    "RecordNotFoundError",
    "RetentionPolicy",
    "RunInterrupted",
    "SentenceTransformerEmbedder",
    "Session",
    "SessionMessageStore",
    "StorageError",
    "TokenCounter",
    "ToolResultStore",
    "UnsupportedFormatError",
    "WorkingMemoryCompressor",
    "__version__",
    "close_shared_stores",
    "embedder_from_env",
    "llm_from_env",
    "note_hash",
    "progress_bar",
    "render_page",
]
