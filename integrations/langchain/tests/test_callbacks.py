"""LocalMemoryCallbackHandler: L3 persistence as tools finish, L1 after each top-level run, sync and async."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langchain_core.tools import tool
from langchain_local_ai_memory import LocalMemoryCallbackHandler
from lc_fakes import ScriptedChatModel, TextLLM

from local_ai_memory import Memory

DOC = "report line\n" * 2000  # 24,000 bytes


@tool
def fetch_report() -> str:
    """Fetch the quarterly report."""
    return DOC


@tool
def fetch_title() -> str:
    """Fetch the report title."""
    return "Q3 report"


SUMMARY = "# Current Goal\nSummarize the report\n\n# Completed\n* fetched the report\n"


def _chain(model: ScriptedChatModel) -> RunnableLambda[str, str]:
    def inner(question: str, config: RunnableConfig) -> str:
        fetch_title.invoke({}, config)
        report = fetch_report.invoke({}, config)
        return str(model.invoke([HumanMessage(f"{question}\n{report}")], config).text)

    async def ainner(question: str, config: RunnableConfig) -> str:
        await fetch_title.ainvoke({}, config)
        report = await fetch_report.ainvoke({}, config)
        return str((await model.ainvoke([HumanMessage(f"{question}\n{report}")], config)).text)

    nested = RunnableLambda(inner, afunc=ainner, name="nested")
    return RunnableLambda(lambda q: q, name="outer") | nested


def _check(memory: Memory, handler: LocalMemoryCallbackHandler, model: ScriptedChatModel, llm: TextLLM) -> None:
    # The model received the whole report: a callback cannot change that...
    assert DOC in str(model.received[0][0].content)
    # ...but the large output is now in L3, and the small one is not.
    (result_id,) = handler.stored_result_ids
    assert memory.session("alice", "s1").engine.load_tool_result(result_id)["content"] == DOC
    # One top-level run -> one L1 merge, with the run's transcript (large output as its reference).
    assert len(llm.prompts) == 1
    assert "Summarize the report" in llm.prompts[0]
    assert result_id in llm.prompts[0]
    assert "Q3 report" in llm.prompts[0]
    assert "the summary" in llm.prompts[0]
    assert "Summarize the report" in memory.session("alice", "s1").get_working_memory()


def test_chain_run_sync(memory: Memory) -> None:
    llm = TextLLM(SUMMARY)
    handler = LocalMemoryCallbackHandler("alice", "s1", memory=memory, llm=llm)
    assert handler.memory is memory
    assert handler.session is handler.manager
    model = ScriptedChatModel(script=[AIMessage(content="the summary")])
    assert _chain(model).invoke("Summarize the report", config={"callbacks": [handler]}) == "the summary"
    _check(memory, handler, model, llm)


async def test_chain_run_async(memory: Memory) -> None:
    llm = TextLLM(SUMMARY)
    handler = LocalMemoryCallbackHandler("alice", "s1", memory=memory, llm=llm)
    model = ScriptedChatModel(script=[AIMessage(content="the summary")])
    assert await _chain(model).ainvoke("Summarize the report", config={"callbacks": [handler]}) == "the summary"
    _check(memory, handler, model, llm)


def test_failed_run_leaves_working_memory_alone(memory: Memory) -> None:
    llm = TextLLM(SUMMARY)
    handler = LocalMemoryCallbackHandler("alice", "s1", memory=memory, llm=llm)

    def broken(_: Any) -> str:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        RunnableLambda(broken).invoke("x", config={"callbacks": [handler]})
    assert llm.prompts == []
    assert memory.session("alice", "s1").get_working_memory() == ""


def test_docstring_says_callbacks_only_observe() -> None:
    doc = LocalMemoryCallbackHandler.__doc__ or ""
    assert "observe and cannot shrink what the model already received" in " ".join(doc.split())
