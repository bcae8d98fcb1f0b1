"""What a model or a remote caller is told of an error: their own ids, never a host path.

One rule for every adapter that answers a model or a remote caller (the MCP server, Claude's
memory tool): :func:`caller_message`. Kept apart from :mod:`.errors`, which every module
imports, because it needs the naming rule and the log.
"""

from __future__ import annotations

import logging
import os
import re

from local_ai_memory._shared.errors import (
    ConfigError,
    ConflictError,
    InvalidInputError,
    LockTimeoutError,
    ModelError,
    PathEscapeError,
    RecordNotFoundError,
    UnsupportedFormatError,
)
from local_ai_memory._shared.events import Event, log_event
from local_ai_memory._shared.naming import user_file_prefix

__all__ = ["caller_message"]

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
