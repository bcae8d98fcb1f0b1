"""local-ai-memory: file-based runtime and knowledge memory for LLM agents.

The engines here are framework-free; ``langchain-local-ai-memory`` and
``llama-index-local-ai-memory`` wrap them for LangChain and LlamaIndex.
"""

from __future__ import annotations

from ._config import MemoryConfig
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
from ._protocols import LLM, Embedder
from ._tokens import TokenCounter

__version__ = "0.1.0"

__all__ = [
    "LLM",
    "ConfigError",
    "DirectoryGuard",
    "Embedder",
    "Event",
    "InvalidInputError",
    "LocalMemoryError",
    "LockTimeoutError",
    "MemoryConfig",
    "ModelError",
    "PathEscapeError",
    "RecordNotFoundError",
    "StorageError",
    "TokenCounter",
    "UnsupportedFormatError",
    "__version__",
    "owner_of",
    "scope_name",
    "user_file_prefix",
    "validate_id",
    "validate_name",
]
