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
* :func:`caller_message` words a library error for a model or a remote caller (its own ids,
  no host path) and logs the full text: every adapter's error answer goes through it;
* :func:`note_filename` is the file name of a user's note (the naming rule that keeps
  ``bob`` out of ``bob_admin``'s notes), for integrations that address notes by name.
"""

from local_ai_memory._knowledge.selection import (
    SelectionCandidate,
    build_selection_prompt,
    parse_selection,
    resolve_selection,
)
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
from local_ai_memory._shared.collector import collector_paused
from local_ai_memory._shared.drive import adrive, drive
from local_ai_memory._shared.errors import caller_message
from local_ai_memory._shared.events import log_event
from local_ai_memory._shared.fs import atomic_write
from local_ai_memory._shared.naming import note_filename, scope_name, validate_id, validate_name

__all__ = [
    "DEFAULT_PAGE_CHARS",
    "DEFAULT_PAGE_LINES",
    "DEFAULT_SEARCH_MATCHES",
    "MAX_CONTEXT_LINES",
    "MAX_SEARCH_MATCHES",
    "SelectionCandidate",
    "adrive",
    "afinish_run",
    "assemble_context",
    "atomic_write",
    "build_selection_prompt",
    "caller_message",
    "checkpoint_log",
    "collector_paused",
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
