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
from ._config import MemoryConfig
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
from ._guard import DirectoryGuard, owner_of, scope_name, user_file_prefix, validate_id, validate_name
from ._manager import MemoryManager
from ._protocols import LLM, Embedder
from ._records import FileRecordFolder, RecordFolder
from ._tokens import TokenCounter
from ._tool_results import RetentionPolicy, ToolResultPage, ToolResultStore, render_page

__version__ = "0.1.0"

__all__ = [
    "LLM",
    "AgentCheckpoint",
    "CheckpointRun",
    "CheckpointStatus",
    "ConfigError",
    "DirectoryGuard",
    "Embedder",
    "Event",
    "FileRecordFolder",
    "InvalidInputError",
    "LocalMemoryError",
    "LockTimeoutError",
    "MemoryConfig",
    "MemoryManager",
    "ModelError",
    "PathEscapeError",
    "RecordFolder",
    "RecordNotFoundError",
    "RetentionPolicy",
    "RunInterrupted",
    "StorageError",
    "TokenCounter",
    "ToolResultPage",
    "ToolResultStore",
    "UnsupportedFormatError",
    "__version__",
    "afind_resumable",
    "alist_checkpoints",
    "aload_checkpoint",
    "amark_status",
    "asave_checkpoint",
    "find_resumable",
    "list_checkpoints",
    "load_checkpoint",
    "mark_status",
    "owner_of",
    "render_page",
    "save_checkpoint",
    "scope_name",
    "user_file_prefix",
    "validate_id",
    "validate_name",
]
