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

from ._checkpoints import CheckpointRun, RunInterrupted
from ._compressor import WorkingMemoryCompressor
from ._config import MemoryConfig
from ._context import ContextBuilder
from ._embeddings import SentenceTransformerEmbedder
from ._errors import (
    ConfigError,
    InvalidInputError,
    LocalMemoryError,
    LockTimeoutError,
    ModelError,
    PathEscapeError,
    RecordNotFoundError,
    StorageError,
    UnsupportedFormatError,
)
from ._events import Event
from ._guard import DirectoryGuard
from ._index_service import MemoryIndexService
from ._manager import MemoryManager
from ._memory import Knowledge, Memory, Session
from ._messages import SessionMessageStore
from ._openai_client import OpenAICompatibleEmbedder, OpenAICompatibleLLM, embedder_from_env, llm_from_env
from ._protocols import LLM, Embedder
from ._retriever import MemoryRetriever
from ._shared_roots import close_shared_stores
from ._store import MemoryStore
from ._tokens import TokenCounter
from ._tool_results import RetentionPolicy, ToolResultStore, render_page

__version__ = "0.2.0.dev0"

__all__ = [
    "LLM",
    "CheckpointRun",
    "ConfigError",
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
    "render_page",
]
