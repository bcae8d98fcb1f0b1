"""LocalMemoryChatMessageHistory: L1 as a system message, compaction, quiet about the upstream deprecation."""

from __future__ import annotations

import warnings

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_local_ai_memory import LocalMemoryChatMessageHistory
from lc_fakes import ScriptedChatModel, TextLLM

from local_ai_memory import MemoryConfig

SUMMARY = "# Current Goal\nPlan the trip to Lisbon\n\n# Decisions\n* travel by train\n"


def _exchange(n: int) -> list[HumanMessage | AIMessage]:
    return [HumanMessage(f"question {n}"), AIMessage(f"answer {n}")]


def test_exchange_compresses_and_compacts(config: MemoryConfig) -> None:
    llm = TextLLM(SUMMARY)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        history = LocalMemoryChatMessageHistory("alice", "trip", config=config, llm=llm, keep_last=2)
        assert history.messages == []
        history.add_messages(_exchange(1))
        history.add_user_message("question 2")  # not an exchange end yet: nothing compacted
        history.add_ai_message("answer 2")
        messages = history.messages
    assert [w for w in caught if "deprecat" in str(w.message).lower()] == []
    assert isinstance(messages[0], SystemMessage)
    assert "Working memory:" in str(messages[0].content)
    assert "travel by train" in str(messages[0].content)
    assert [m.content for m in messages[1:]] == ["question 2", "answer 2"]
    # Each exchange reached the summarizer whole (question and answer), and only once.
    assert len(llm.prompts) == 2
    assert "question 1" in llm.prompts[0]
    assert "question 2" in llm.prompts[1]
    assert "answer 2" in llm.prompts[1]
    assert "question 1" not in llm.prompts[1].split("Conversation:")[-1]
    assert (config.runtime_data_dir / "memory" / "sessions" / "alice_trip.jsonl").is_file()


async def test_async_twins_with_chat_model_summarizer(config: MemoryConfig) -> None:
    summarizer = ScriptedChatModel(script=[AIMessage(content=SUMMARY)] * 3)
    history = LocalMemoryChatMessageHistory("alice", "trip", config=config, llm=summarizer)
    await history.aadd_messages(_exchange(1))
    messages = await history.aget_messages()
    assert "Plan the trip to Lisbon" in str(messages[0].content)
    assert [m.content for m in messages[1:]] == ["question 1", "answer 1"]
    assert "question 1" in str(summarizer.received[0][0].content)
    await history.aclear()
    assert await history.aget_messages() == []


def test_default_keep_last_and_extractive_summary(config: MemoryConfig) -> None:
    history = LocalMemoryChatMessageHistory("bob", "s", config=config)
    for n in range(5):
        history.add_messages(_exchange(n))
    stored = history.messages[1:]
    assert len(stored) == config.working_memory_compact_keep_last == 6
    assert stored[-1].content == "answer 4"
    assert "# Current Goal" in history.manager.get_working_memory()
    other = LocalMemoryChatMessageHistory("bob", "other", config=config)
    assert other.messages == []


async def test_runnable_with_message_history_keeps_memory_across_turns(config: MemoryConfig) -> None:
    from langchain_core.runnables.history import RunnableWithMessageHistory

    model = ScriptedChatModel(script=[AIMessage(content="Lisbon by train."), AIMessage(content="Yes, the train.")])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        chain = RunnableWithMessageHistory(
            model, lambda session_id: LocalMemoryChatMessageHistory("alice", session_id, config=config)
        )
        scope = {"configurable": {"session_id": "trip"}}
        chain.invoke([HumanMessage("Where and how do we travel?")], config=scope)
        await chain.ainvoke([HumanMessage("Did we pick the train?")], config=scope)
    # The only deprecation warning is upstream's own, about RunnableWithMessageHistory.
    assert {str(w.message).split(".")[0] for w in caught} <= {"RunnableWithMessageHistory is deprecated"}
    second = model.received[1]
    assert isinstance(second[0], SystemMessage)
    assert "Working memory:" in str(second[0].content)
    assert [m.content for m in second[1:]] == [
        "Where and how do we travel?",
        "Lisbon by train.",
        "Did we pick the train?",
    ]
