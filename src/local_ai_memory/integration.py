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
* :func:`log_event` emits the library's named log events.
"""

from ._checkpoints import raise_on_signals
from ._context import assemble_context
from ._events import log_event
from ._guard import validate_id, validate_name
from ._messages import to_message, to_messages
from ._selection import SelectionCandidate, build_selection_prompt, parse_selection, resolve_selection
from ._tool_results import DEFAULT_PAGE_CHARS, make_reference, parse_reference

__all__ = [
    "DEFAULT_PAGE_CHARS",
    "SelectionCandidate",
    "assemble_context",
    "build_selection_prompt",
    "log_event",
    "make_reference",
    "parse_reference",
    "parse_selection",
    "raise_on_signals",
    "resolve_selection",
    "to_message",
    "to_messages",
    "validate_id",
    "validate_name",
]
