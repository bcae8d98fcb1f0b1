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

:func:`caller_message` is the one place an error is worded for a model or a remote caller
(the MCP server, Claude's memory tool): in the caller's own note ids, without a host path.
"""

from __future__ import annotations

import logging
import os
import re

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
    "caller_message",
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


_SAFE = (ConfigError, InvalidInputError, RecordNotFoundError, UnsupportedFormatError, ConflictError)
"""Errors about the caller's own input: their text is kept, in the caller's ids."""
_ABSOLUTE = re.compile(r"(?:^|[\s'\"(=])(?:/|[A-Za-z]:[\\/]|\\\\)")
"""Where a text names an absolute path (POSIX, a Windows drive or share)."""
_GENERIC: tuple[tuple[type[BaseException], str], ...] = (
    (PathEscapeError, "not allowed: that path leads outside your notes (absolute paths, '..' and links are refused)"),
    (LockTimeoutError, "the memory is busy (another process held a lock too long): try again shortly"),
    (ModelError, "the language model call failed: the details are in the server's log"),
    (OSError, "the server could not read or write its storage: the details are in its log"),
)
"""Errors whose text is about the host (paths, link targets, URLs): a fixed sentence instead."""


def caller_message(error: BaseException, user_id: str | None, root: str | os.PathLike[str] | None = None) -> str:
    """``error`` worded for a model or a remote caller acting as ``user_id``, and logged in full.

    A note's file name is shown as the caller's id (``knowledge/alice_x.md`` reads
    ``knowledge/x.md``: a model that retries with what it was told reaches the note it meant);
    an error about the host (a path leaving the data root, a link target, a failed read or
    write, a model server) becomes a fixed sentence; the data root ``root`` is never named.
    The full text goes to the ``local_ai_memory`` log as a ``CALLER_ERROR`` event.
    """
    from local_ai_memory._shared.events import Event, log_event

    detail = str(error)
    if isinstance(error, _SAFE) or (isinstance(error, PathEscapeError) and not _ABSOLUTE.search(detail)):
        text = _own_ids(detail, user_id)  # about the caller's input: '..', a NUL, an unknown name
    else:
        text = next(
            (sentence for kind, sentence in _GENERIC if isinstance(error, kind)),
            "internal error: the details are in the server's log",
        )
    for folder in _roots(root):
        text = text.replace(folder, "<data folder>")
    level = logging.INFO if isinstance(error, _SAFE) else logging.WARNING  # the caller's mistake, or the host's
    log_event(Event.CALLER_ERROR, level, error=type(error).__name__, detail=detail, user=user_id, shown=text)
    return text


def _own_ids(text: str, user_id: str | None) -> str:
    """``text`` with ``user_id``'s file-name prefix taken off each file name it starts."""
    if not user_id:
        return text
    from local_ai_memory._shared.naming import user_file_prefix

    try:
        prefix = user_file_prefix(user_id)
    except InvalidInputError:
        return text
    return re.sub(r"(?:^|(?<=[\s/'\"(]))" + re.escape(prefix), "", text)


def _roots(root: str | os.PathLike[str] | None) -> list[str]:
    """The spellings of the data root (as given, expanded, resolved), longest first."""
    if root is None:
        return []
    given = os.fspath(root)
    found = {given, os.path.expanduser(given), os.path.realpath(os.path.expanduser(given))}
    return sorted((folder for folder in found if len(folder) > 1), key=len, reverse=True)
