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
from local_ai_memory._shared.tokens import TokenCounter

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
