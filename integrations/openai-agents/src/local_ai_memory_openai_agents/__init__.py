"""OpenAI Agents SDK integration of local-ai-memory: a ``Session`` kept in a ``Memory``, and tools.

::

    from agents import Agent, Runner
    from local_ai_memory import Memory
    from local_ai_memory_openai_agents import LocalMemorySession, memory_tools

    memory = Memory.open("~/.local-ai")
    session = LocalMemorySession(memory, "alice", "chat-1")
    agent = Agent(
        name="assistant",
        instructions=session.instructions("You are a helpful assistant."),
        tools=memory_tools(memory, "alice", "chat-1"),
    )
    result = await Runner.run(agent, "What did we decide yesterday?", session=session)

* :class:`LocalMemorySession`: the SDK's ``Session`` protocol over the ``(user, session)``
  message log; items come back exactly, ``pop_item`` is atomic, compaction merges into the
  working memory (the SDK's ``run_compaction`` hook).
* :func:`memory_tools`: ``load_tool_result`` (paging stored tool outputs) and
  ``search_memory`` (knowledge retrieval within a token budget), bound to one user and session.
"""

from __future__ import annotations

from local_ai_memory_openai_agents._session import LocalMemorySession, safe_keep
from local_ai_memory_openai_agents._tools import LOAD_TOOL_RESULT, SEARCH_MEMORY, memory_tools

__all__ = ["LOAD_TOOL_RESULT", "SEARCH_MEMORY", "LocalMemorySession", "memory_tools", "safe_keep"]
