"""The library's exception tree.

Every error the library raises on purpose derives from :class:`LocalMemoryError`, and each
also subclasses the builtin that fits, so ``except ValueError`` or ``except FileNotFoundError``
in user code keeps working::

    LocalMemoryError
    ├── ConfigError            (ValueError)       a bad config key, type or value
    ├── InvalidInputError      (ValueError)       a hostile or malformed id, name or argument
    ├── PathEscapeError        (PermissionError)  a path that would leave the data root
    ├── RecordNotFoundError    (FileNotFoundError) a plan, tool result or file that is not there
    ├── UnsupportedFormatError (ValueError)       a file written by a newer format version
    ├── ConflictError          (ValueError)       a write expected content that changed meanwhile
    ├── StorageError           (OSError)          a read or write failed; stored data is intact
    │   └── LockTimeoutError   (TimeoutError)     another process held a lock for too long
    └── ModelError             (RuntimeError)     an LLM or embedder call failed or answered badly

The name avoids ``MemoryError``, which would shadow Python's builtin.

:func:`.caller.caller_message` is the one place an error is worded for a model or a remote
caller (the MCP server, Claude's memory tool): in the caller's own note ids, without a host path.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "ConflictError",
    "InvalidInputError",
    "LocalMemoryError",
    "LockTimeoutError",
    "ModelError",
    "PathEscapeError",
    "RecordNotFoundError",
    "StorageError",
    "UnsupportedFormatError",
]


class LocalMemoryError(Exception):
    """Base class of every error local-ai-memory raises on purpose."""


class ConfigError(LocalMemoryError, ValueError):
    """A configuration key is unknown, or its value has the wrong type or range."""


class InvalidInputError(LocalMemoryError, ValueError):
    """An id, user name, file name or argument is malformed or hostile."""


class PathEscapeError(LocalMemoryError, PermissionError):
    """A path would resolve outside the data root (``..``, absolute path, symlink)."""


class RecordNotFoundError(LocalMemoryError, FileNotFoundError):
    """The requested plan, tool result or memory file does not exist."""


class UnsupportedFormatError(LocalMemoryError, ValueError):
    """A stored file was written by a newer format version than this library understands."""


class ConflictError(LocalMemoryError, ValueError):
    """A write named the content it expected (a hash from an earlier read) and found other content.

    ``current_hash`` is the hash of what is stored now (``None`` when nothing is), so the caller
    can read again, redo its change and retry with that hash.
    """

    def __init__(self, message: str, current_hash: str | None) -> None:
        super().__init__(message)
        self.current_hash = current_hash


class StorageError(LocalMemoryError, OSError):
    """A filesystem operation failed. The previous content of the target is left intact."""


class LockTimeoutError(StorageError, TimeoutError):
    """A cross-process lock could not be acquired within the configured timeout."""


class ModelError(LocalMemoryError, RuntimeError):
    """An LLM or embedder call failed, timed out or returned something unusable."""
