"""LocalMemoryChatMessageHistory: L1 as a system message, compaction, quiet about the upstream deprecation."""

from __future__ import annotations

import warnings

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_local_ai_memory import LocalMemoryChatMessageHistory
from lc_fakes import ScriptedChatModel, TextLLM

from local_ai_memory import Memory, MemoryConfig

SUMMARY = "# Current Goal\nPlan the trip to Lisbon\n\n# Decisions\n* travel by train\n"


def _exchange(n: int) -> list[HumanMessage | AIMessage]:
    return [HumanMessage(f"question {n}"), AIMessage(f"answer {n}")]


def test_exchange_compresses_and_compacts(memory: Memory) -> None:
    llm = TextLLM(SUMMARY)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        history = LocalMemoryChatMessageHistory("alice", "trip", memory=memory, llm=llm, keep_last=2)
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
    assert memory.root is not None
    assert (memory.root / "memory" / "sessions" / "alice_trip.jsonl").is_file()


async def test_async_twins_with_chat_model_summarizer(memory: Memory) -> None:
    summarizer = ScriptedChatModel(script=[AIMessage(content=SUMMARY)] * 3)
    history = LocalMemoryChatMessageHistory("alice", "trip", memory=memory, llm=summarizer)
    await history.aadd_messages(_exchange(1))
    messages = await history.aget_messages()
    assert "Plan the trip to Lisbon" in str(messages[0].content)
    assert [m.content for m in messages[1:]] == ["question 1", "answer 1"]
    assert "question 1" in str(summarizer.received[0][0].content)
    await history.aclear()
    assert await history.aget_messages() == []


def test_default_keep_last_and_extractive_summary(memory: Memory) -> None:
    history = LocalMemoryChatMessageHistory("bob", "s", memory=memory)
    for n in range(5):
        history.add_messages(_exchange(n))
    stored = history.messages[1:]
    assert len(stored) == memory.config.working_memory_compact_keep_last == 6
    assert stored[-1].content == "answer 4"
    assert "# Current Goal" in history.session.get_working_memory()
    assert history.manager is history.session  # the older name
    other = LocalMemoryChatMessageHistory("bob", "other", memory=memory)
    assert other.messages == []


async def test_runnable_with_message_history_keeps_memory_across_turns(memory: Memory) -> None:
    from langchain_core.runnables.history import RunnableWithMessageHistory

    model = ScriptedChatModel(script=[AIMessage(content="Lisbon by train."), AIMessage(content="Yes, the train.")])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        chain = RunnableWithMessageHistory(
            model, lambda session_id: LocalMemoryChatMessageHistory("alice", session_id, memory=memory)
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


def test_user_stated_fact_and_task_survive_compaction_without_llm(config: MemoryConfig) -> None:
    """Issue 14: seven turns, keep_last=4, no LLM: the fact the user stated and the task stay in memory."""
    from langchain_core.language_models.fake_chat_models import FakeListChatModel
    from langchain_core.runnables.history import RunnableWithMessageHistory

    config = config.model_copy(update={"working_memory_compact_keep_last": 4})
    turns = [
        "Help me write a deploy script for our staging environment.",
        "The staging cluster is called kestrel.",
        *(f"Another question {n}" for n in range(3, 8)),
    ]
    model = FakeListChatModel(responses=[f"Answer {n}: here is the next part of the script." for n in range(1, 8)])
    histories: dict[str, LocalMemoryChatMessageHistory] = {}

    def history_for(session_id: str) -> LocalMemoryChatMessageHistory:
        return histories.setdefault(session_id, LocalMemoryChatMessageHistory("ops", session_id, config=config))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        chain = RunnableWithMessageHistory(model, history_for)
        for turn in turns:
            chain.invoke([HumanMessage(turn)], config={"configurable": {"session_id": "deploy"}})
    messages = histories["deploy"].messages
    assert [m.content for m in messages[1:]] == [
        "Another question 6",
        "Answer 6: here is the next part of the script.",
        "Another question 7",
        "Answer 7: here is the next part of the script.",
    ]
    memory = str(messages[0].content)
    assert "* User: The staging cluster is called kestrel." in memory
    assert "# Current Goal\nHelp me write a deploy script for our staging environment.\n" in memory
    assert "Another question" not in memory
