"""Building blocks for framework integrations (LangChain, LlamaIndex, your own).

The integrations that ship with local-ai-memory import only from ``local_ai_memory`` and from
this module. Each rule that guards users' data lives in the core once, and an integration
calls it instead of re-implementing it:

* :func:`parse_reference` recognizes the ``{result_id, summary, size}`` reference of an
  externalized tool output (:func:`make_reference` writes it);
* :meth:`ToolResultStore.read` pages an output back for the model, scope-checked;
* :func:`build_selection_prompt`, :func:`parse_selection` and :func:`resolve_selection` are
  Stage 2 (an LLM picks files from candidates), usable on any framework's candidates;
* :func:`assemble_context` is the pure part of :class:`ContextBuilder`;
* :func:`raise_on_signals` turns SIGINT/SIGTERM into :class:`RunInterrupted` for a run;
* :func:`finish_run` merges a finished run into L1 and compacts the session log;
* :func:`load_checkpoint`, :func:`save_checkpoint` and :func:`mark_status` work on L2 checkpoints;
* :func:`drive` and :func:`adrive` run a sans-IO generator flow (one that yields requests and
  is sent the answers) blocking or async, so an integration writes its logic once;
* :func:`log_event` emits the library's named log events;
* :mod:`checkpoint_log` is the record format of LangGraph checkpoint logs and its pure rules
  (fold, list tails, compaction), shared by ``LocalMemorySaver`` and the memory's retention;
* :func:`atomic_write` replaces a small file of the integration's own (a cache, a record) the
  way the memory writes its files: temp file, rename, fsync unless ``durable=False``, one
  owner of the write syscalls so fault-injection tests see it;
* :func:`collector_paused` pauses Python's cyclic garbage collector over a bulk build (a
  thread's thousands of messages), nesting with the memory's own loads;
* :func:`discard_if_empty` (and :func:`adiscard_if_empty`) deletes a scope whole once its last
  record went, so an integration that removes records one by one leaves no trace of the ids;
* :func:`caller_message` words a library error for a model or a remote caller (its own ids,
  no host path) and logs the full text: every adapter's error answer goes through it;
* :func:`note_filename` is the file name of a user's note (the naming rule that keeps
  ``bob`` out of ``bob_admin``'s notes), for integrations that address notes by name.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what the checkers see; at run time each name is imported on first use
    from local_ai_memory._knowledge.recall import RECALL_DESCRIPTION
    from local_ai_memory._knowledge.selection import (
        SelectionCandidate,
        build_selection_prompt,
        parse_selection,
        resolve_selection,
    )
    from local_ai_memory._operations.lifecycle import adiscard_if_empty, discard_if_empty
    from local_ai_memory._runtime import checkpoint_log
    from local_ai_memory._runtime.checkpoints import load_checkpoint, mark_status, raise_on_signals, save_checkpoint
    from local_ai_memory._runtime.context import assemble_context
    from local_ai_memory._runtime.messages import to_message, to_messages
    from local_ai_memory._runtime.run import afinish_run, finish_run
    from local_ai_memory._runtime.tool_results import (
        DEFAULT_PAGE_CHARS,
        DEFAULT_PAGE_LINES,
        DEFAULT_SEARCH_MATCHES,
        MAX_CONTEXT_LINES,
        MAX_SEARCH_MATCHES,
        make_reference,
        parse_reference,
    )
    from local_ai_memory._shared.caller import caller_message
    from local_ai_memory._shared.collector import collector_paused
    from local_ai_memory._shared.drive import adrive, drive
    from local_ai_memory._shared.events import log_event
    from local_ai_memory._shared.fs import atomic_write
    from local_ai_memory._shared.naming import note_filename, scope_name, validate_id, validate_name

_EXPORTS: dict[str, str] = {
    "RECALL_DESCRIPTION": "local_ai_memory._knowledge.recall",
    "SelectionCandidate": "local_ai_memory._knowledge.selection",
    "build_selection_prompt": "local_ai_memory._knowledge.selection",
    "parse_selection": "local_ai_memory._knowledge.selection",
    "resolve_selection": "local_ai_memory._knowledge.selection",
    "adiscard_if_empty": "local_ai_memory._operations.lifecycle",
    "discard_if_empty": "local_ai_memory._operations.lifecycle",
    "checkpoint_log": "local_ai_memory._runtime.checkpoint_log",
    "load_checkpoint": "local_ai_memory._runtime.checkpoints",
    "mark_status": "local_ai_memory._runtime.checkpoints",
    "raise_on_signals": "local_ai_memory._runtime.checkpoints",
    "save_checkpoint": "local_ai_memory._runtime.checkpoints",
    "assemble_context": "local_ai_memory._runtime.context",
    "to_message": "local_ai_memory._runtime.messages",
    "to_messages": "local_ai_memory._runtime.messages",
    "afinish_run": "local_ai_memory._runtime.run",
    "finish_run": "local_ai_memory._runtime.run",
    "DEFAULT_PAGE_CHARS": "local_ai_memory._runtime.tool_results",
    "DEFAULT_PAGE_LINES": "local_ai_memory._runtime.tool_results",
    "DEFAULT_SEARCH_MATCHES": "local_ai_memory._runtime.tool_results",
    "MAX_CONTEXT_LINES": "local_ai_memory._runtime.tool_results",
    "MAX_SEARCH_MATCHES": "local_ai_memory._runtime.tool_results",
    "make_reference": "local_ai_memory._runtime.tool_results",
    "parse_reference": "local_ai_memory._runtime.tool_results",
    "collector_paused": "local_ai_memory._shared.collector",
    "adrive": "local_ai_memory._shared.drive",
    "drive": "local_ai_memory._shared.drive",
    "caller_message": "local_ai_memory._shared.caller",
    "log_event": "local_ai_memory._shared.events",
    "atomic_write": "local_ai_memory._shared.fs",
    "note_filename": "local_ai_memory._shared.naming",
    "scope_name": "local_ai_memory._shared.naming",
    "validate_id": "local_ai_memory._shared.naming",
    "validate_name": "local_ai_memory._shared.naming",
}
"""Where each name lives. They load on first use, so an adapter pays only for what it uses: the
MCP server's naming helpers do not import the runtime's compressor and checkpoint log (about
60 ms of the server's start)."""
_MODULES = frozenset({"checkpoint_log"})
"""The names in :data:`_EXPORTS` that are modules themselves."""

__all__ = [
    "DEFAULT_PAGE_CHARS",
    "DEFAULT_PAGE_LINES",
    "DEFAULT_SEARCH_MATCHES",
    "MAX_CONTEXT_LINES",
    "MAX_SEARCH_MATCHES",
    "RECALL_DESCRIPTION",
    "SelectionCandidate",
    "adiscard_if_empty",
    "adrive",
    "afinish_run",
    "assemble_context",
    "atomic_write",
    "build_selection_prompt",
    "caller_message",
    "checkpoint_log",
    "collector_paused",
    "discard_if_empty",
    "drive",
    "finish_run",
    "load_checkpoint",
    "log_event",
    "make_reference",
    "mark_status",
    "note_filename",
    "parse_reference",
    "parse_selection",
    "raise_on_signals",
    "resolve_selection",
    "save_checkpoint",
    "scope_name",
    "to_message",
    "to_messages",
    "validate_id",
    "validate_name",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    loaded = importlib.import_module(module)
    value = loaded if name in _MODULES else getattr(loaded, name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
