"""local-ai-memory: file-based runtime and knowledge memory for LLM agents.

The engines here are framework-free; ``langchain-local-ai-memory`` and
``llama-index-local-ai-memory`` wrap them for LangChain and LlamaIndex.
"""

from __future__ import annotations

from ._checkpoints import (
    CheckpointRun,
    RunInterrupted,
    afind_resumable,
    alist_checkpoints,
    aload_checkpoint,
    amark_status,
    asave_checkpoint,
    find_resumable,
    list_checkpoints,
    load_checkpoint,
    mark_status,
    save_checkpoint,
)
from ._compressor import CompressionResult, WorkingMemoryCompressor
from ._config import MemoryConfig
from ._context import BuiltContext, ContextBuilder
from ._embeddings import EmbeddingCache, SentenceTransformerEmbedder
from ._envelopes import AgentCheckpoint, CheckpointStatus
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
from ._fusion import cosine_top_n, reciprocal_rank_fusion
from ._guard import DirectoryGuard, owner_of, scope_name, user_file_prefix, validate_id, validate_name
from ._index import INDEX_VERSION, IndexEntry, IndexFile
from ._index_service import MemoryIndexService
from ._manager import MemoryManager
from ._messages import Message, SessionMessageStore
from ._openai_client import OpenAICompatibleEmbedder, OpenAICompatibleLLM, embedder_from_env, llm_from_env
from ._protocols import LLM, Embedder
from ._records import FileRecordFolder, RecordFolder
from ._retriever import TOP_N, MemoryRetriever, RetrievalResult, RetrievedFile
from ._run import RunOutcome, afinish_run, finish_run
from ._samples import EvalQuery, SampleCorpus, build_corpus, write_corpus
from ._selection import SelectionCandidate, build_selection_prompt, parse_selection, resolve_selection
from ._store import Candidate, MemoryStore, StaleEntry
from ._tokens import TokenCounter
from ._tool_results import RetentionPolicy, ToolResultPage, ToolResultStore, render_page

__version__ = "0.1.0"

__all__ = [
    "INDEX_VERSION",
    "LLM",
    "TOP_N",
    "AgentCheckpoint",
    "BuiltContext",
    "Candidate",
    "CheckpointRun",
    "CheckpointStatus",
    "CompressionResult",
    "ConfigError",
    "ContextBuilder",
    "DirectoryGuard",
    "Embedder",
    "EmbeddingCache",
    "EvalQuery",
    "Event",
    "FileRecordFolder",
    "IndexEntry",
    "IndexFile",
    "InvalidInputError",
    "LocalMemoryError",
    "LockTimeoutError",
    "MemoryConfig",
    "MemoryIndexService",
    "MemoryManager",
    "MemoryRetriever",
    "MemoryStore",
    "Message",
    "ModelError",
    "OpenAICompatibleEmbedder",
    "OpenAICompatibleLLM",
    "PathEscapeError",
    "RecordFolder",
    "RecordNotFoundError",
    "RetentionPolicy",
    "RetrievalResult",
    "RetrievedFile",
    "RunInterrupted",
    "RunOutcome",
    "SampleCorpus",
    "SelectionCandidate",
    "SentenceTransformerEmbedder",
    "SessionMessageStore",
    "StaleEntry",
    "StorageError",
    "TokenCounter",
    "ToolResultPage",
    "ToolResultStore",
    "UnsupportedFormatError",
    "WorkingMemoryCompressor",
    "__version__",
    "afind_resumable",
    "afinish_run",
    "alist_checkpoints",
    "aload_checkpoint",
    "amark_status",
    "asave_checkpoint",
    "build_corpus",
    "build_selection_prompt",
    "cosine_top_n",
    "embedder_from_env",
    "find_resumable",
    "finish_run",
    "list_checkpoints",
    "llm_from_env",
    "load_checkpoint",
    "mark_status",
    "owner_of",
    "parse_selection",
    "reciprocal_rank_fusion",
    "render_page",
    "resolve_selection",
    "save_checkpoint",
    "scope_name",
    "user_file_prefix",
    "validate_id",
    "validate_name",
    "write_corpus",
]
