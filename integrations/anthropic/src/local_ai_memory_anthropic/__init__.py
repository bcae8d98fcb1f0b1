"""Anthropic SDK integration of local-ai-memory: a backend for Claude's client-side ``memory`` tool.

::

    import anthropic
    from local_ai_memory import Memory
    from local_ai_memory_anthropic import LocalMemoryTool

    memory = Memory.open("~/.local-ai")
    client = anthropic.Anthropic()
    runner = client.beta.messages.tool_runner(
        model="claude-sonnet-4-5", max_tokens=2048,
        messages=[{"role": "user", "content": "Remember that I deploy on Fridays."}],
        tools=[LocalMemoryTool(memory, "alice")],
    )
    runner.until_done()
    memory.knowledge.search("deploy", "alice")     # the note Claude wrote, found at once

* :class:`LocalMemoryTool` (sync) and :class:`AsyncLocalMemoryTool` (async) subclass the SDK's
  ``BetaAbstractMemoryTool`` / ``BetaAsyncAbstractMemoryTool``: ``view``, ``create``,
  ``str_replace``, ``insert``, ``delete`` and ``rename`` act on one user's notes.
* ``/memories/<file>`` is a note of the default category, ``/memories/<category>/<file>`` one of
  another configured category; nothing else (see :mod:`._paths`).
"""

from __future__ import annotations

from local_ai_memory_anthropic._paths import MAX_VIEW_CHARS, MAX_VIEW_ENTRIES, MAX_VIEW_LINES, ROOT
from local_ai_memory_anthropic._tool import AsyncLocalMemoryTool, LocalMemoryTool

__all__ = ["MAX_VIEW_CHARS", "MAX_VIEW_ENTRIES", "MAX_VIEW_LINES", "ROOT", "AsyncLocalMemoryTool", "LocalMemoryTool"]
