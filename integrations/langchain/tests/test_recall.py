"""Remembering across sessions through LangChain: a run's conversation is logged by the
middleware, and a later session's agent recalls it with the ``recall`` tool."""

from __future__ import annotations

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_local_ai_memory import LocalMemoryMiddleware, RecallTool, create_memory_tools
from lc_fakes import ScriptedChatModel

from local_ai_memory import Memory

FACT = "My daughter's swimming lessons moved to Thursdays at 5 pm at the Lido."


def _run(memory: Memory, session_id: str, words: str, answer: str) -> None:
    model = ScriptedChatModel(script=[AIMessage(content=answer)])
    agent = create_agent(model, middleware=[LocalMemoryMiddleware("ann", session_id, memory=memory)])
    agent.invoke({"messages": [HumanMessage(words)]})


def test_a_fact_from_session_one_is_recalled_by_the_recall_tool_in_session_five(memory: Memory) -> None:
    _run(memory, "s1", FACT, "Got it, Thursdays at 5.")
    for n in range(2, 5):
        _run(memory, f"s{n}", f"Remind me to buy bread on day {n}.", "Will do.")

    call = AIMessage(content="", tool_calls=[{"name": "recall", "args": {"query": "when is swimming?"}, "id": "r1"}])
    model = ScriptedChatModel(script=[call, AIMessage(content="Thursdays at 5 pm.")])
    tools = create_memory_tools("ann", "s5", memory=memory, recall=True)
    assert [tool.name for tool in tools] == ["load_tool_result", "recall"]
    agent = create_agent(model, tools=tools, middleware=[LocalMemoryMiddleware("ann", "s5", memory=memory)])
    agent.invoke({"messages": [HumanMessage("When is swimming again?")]})

    answer = next(m for m in model.received[-1] if isinstance(m, ToolMessage))
    assert FACT in str(answer.content)
    assert "[conversation s1" in str(answer.content)


async def test_the_recall_tool_reads_the_user_from_the_runtime_config(memory: Memory) -> None:
    memory.knowledge.remember_conversation("bob", "s1", [{"role": "user", "content": FACT}])
    tool = RecallTool(memory=memory)
    config = {"configurable": {"user_id": "bob"}}
    assert FACT in await tool.ainvoke({"query": "swimming lessons"}, config=config)  # type: ignore[arg-type]
    assert tool.invoke({"query": "swimming lessons"}, config={"configurable": {"user_id": "eve"}}).startswith("Nothing")


def test_the_middleware_puts_what_was_said_before_into_the_first_prompt_when_asked(memory: Memory) -> None:
    _run(memory, "s1", FACT, "Got it, Thursdays at 5.")
    for recall_tokens, expected in ((0, False), (300, True)):
        model = ScriptedChatModel(script=[AIMessage(content="Thursdays.")])
        middleware = LocalMemoryMiddleware("ann", f"later-{recall_tokens}", memory=memory, recall_tokens=recall_tokens)
        create_agent(model, middleware=[middleware]).invoke(
            {"messages": [HumanMessage("When are the swimming lessons?")]}
        )
        system = str(model.received[0][0].content)
        assert (FACT in system) is expected
