"""Structured log events.

The library logs through the standard :mod:`logging` module under the ``local_ai_memory``
logger. Every event has a fixed name (see :class:`Event`) and its fields travel in the
record's ``extra``: ``record.event`` holds the name and ``record.fields`` a dict of the
fields, so a handler can route or serialize them without parsing the message::

    import logging

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if getattr(record, "event", None) == "TOOL_RESULT_STORED":
                print(record.fields["result_id"], record.fields["size"])

    logging.getLogger("local_ai_memory").addHandler(Collect())
"""

from __future__ import annotations

import enum
import logging
from typing import Any

__all__ = ["Event", "log_event", "logger"]

logger = logging.getLogger("local_ai_memory")
logger.addHandler(logging.NullHandler())  # a library stays quiet until the application configures logging


class Event(str, enum.Enum):
    """Names of the events the library logs."""

    TOOL_RESULT_STORED = "TOOL_RESULT_STORED"
    MEMORY_CORRUPT = "MEMORY_CORRUPT"
    WORKING_MEMORY_COMPRESSED = "WORKING_MEMORY_COMPRESSED"
    WORKING_MEMORY_FAILED = "WORKING_MEMORY_FAILED"
    CONVERSATION_LOG_FAILED = "CONVERSATION_LOG_FAILED"
    TEMP_FILE_REMOVED = "TEMP_FILE_REMOVED"
    INDEX_REBUILT = "INDEX_REBUILT"
    INDEX_REFRESHED = "INDEX_REFRESHED"
    FILE_SKIPPED = "FILE_SKIPPED"
    SELECTION_FALLBACK = "SELECTION_FALLBACK"
    EMBEDDINGS_FALLBACK = "EMBEDDINGS_FALLBACK"
    EMBEDDINGS_MODEL_BUILT = "EMBEDDINGS_MODEL_BUILT"
    EMBEDDINGS_REBUILD = "EMBEDDINGS_REBUILD"
    INDEX_WATCH_ERROR = "INDEX_WATCH_ERROR"
    INDEX_WRITE_DEFERRED = "INDEX_WRITE_DEFERRED"
    TOOL_RESULTS_PRUNED = "TOOL_RESULTS_PRUNED"
    CALLER_ERROR = "CALLER_ERROR"


def log_event(event: Event, level: int = logging.INFO, **fields: Any) -> None:
    """Log ``event`` with ``fields``; the message reads ``EVENT key=value ...``."""
    if not logger.isEnabledFor(level):
        return
    text = " ".join(f"{key}={value!r}" for key, value in fields.items())
    message = f"{event.value} {text}" if text else event.value
    logger.log(level, message, extra={"event": event.value, "fields": dict(fields)})
