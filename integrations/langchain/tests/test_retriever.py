"""LocalMemoryRetriever: the standard suite, metadata, k per call, Stage 2 as a child run, sync and async."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage
from langchain_local_ai_memory import LocalMemoryRetriever
from langchain_tests.integration_tests import RetrieversIntegrationTests
from lc_fakes import NOTES, ScriptedChatModel, TextLLM, add_notes, write_notes
from pydantic import ValidationError

from local_ai_memory import InvalidInputError, Memory


class TestLocalMemoryRetrieverStandard(RetrieversIntegrationTests):
    """langchain-tests' standard retriever suite against real files."""

    root: Path

    @pytest.fixture(autouse=True)
    def _notes(self, tmp_path: Path) -> None:
        type(self).root = tmp_path / "data"
        write_notes(self.root)

    @property
    def retriever_constructor(self) -> type[LocalMemoryRetriever]:
        return LocalMemoryRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"memory": Memory.open(self.root, fsync=False), "user_id": "alice"}

    @property
    def retriever_query_example(self) -> str:
        return "python"


@pytest.fixture
def notes(tmp_path: Path) -> Memory:
    """A memory on a fresh folder holding :data:`NOTES`."""
    return add_notes(Memory.open(tmp_path / "data", fsync=False))


def test_documents_carry_metadata_and_only_the_users_files(notes: Memory) -> None:
    retriever = LocalMemoryRetriever(memory=notes, user_id="alice", k=5)
    docs = retriever.invoke("python json parsing")
    assert docs[0].metadata["filename"] == "alice_json.md"
    assert docs[0].metadata["title"] == "Parsing JSON in Python"
    assert docs[0].metadata["category"] == "knowledge"
    assert docs[0].metadata["stage"] == 1  # no LLM: Stage 1 order
    assert docs[0].metadata["score"] > 0
    assert docs[0].page_content == NOTES["alice_json.md"]
    assert all(doc.metadata["filename"].startswith("alice_") for doc in docs)
    assert [d.metadata["score"] for d in docs] == sorted((d.metadata["score"] for d in docs), reverse=True)


async def test_ainvoke_matches_invoke_and_takes_k(notes: Memory) -> None:
    retriever = LocalMemoryRetriever(memory=notes, user_id="alice")
    sync_docs = retriever.invoke("python", k=2)
    async_docs = await retriever.ainvoke("python", k=2)
    assert len(sync_docs) == 2
    assert [d.metadata["filename"] for d in async_docs] == [d.metadata["filename"] for d in sync_docs]


def test_user_per_call_through_configurable(tmp_path: Path) -> None:
    retriever = LocalMemoryRetriever(config=write_notes(tmp_path / "data"))  # the shortcut: Memory(config)
    docs = retriever.invoke("python secrets", config={"configurable": {"user_id": "bob"}})
    assert [d.metadata["filename"] for d in docs] == ["bob_python.md"]
    with pytest.raises(InvalidInputError, match="no user_id"):
        retriever.invoke("python")


class RunTree(BaseCallbackHandler):
    """Records (kind, run_id, parent_run_id) of every run."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, uuid.UUID, uuid.UUID | None]] = []

    def on_retriever_start(
        self, serialized: Any, query: str, *, run_id: uuid.UUID, parent_run_id: uuid.UUID | None = None, **kwargs: Any
    ) -> None:
        self.runs.append(("retriever", run_id, parent_run_id))

    def on_chat_model_start(
        self,
        serialized: Any,
        messages: Any,
        *,
        run_id: uuid.UUID,
        parent_run_id: uuid.UUID | None = None,
        **kwargs: Any,
    ) -> None:
        self.runs.append(("chat_model", run_id, parent_run_id))


def _selector() -> ScriptedChatModel:
    return ScriptedChatModel(script=[AIMessage(content='["alice_venv.md"]')] * 2)


def test_stage2_chat_model_is_a_child_run(notes: Memory) -> None:
    model = _selector()
    tree = RunTree()
    retriever = LocalMemoryRetriever(memory=notes, user_id="alice", llm=model)
    docs = retriever.invoke("python", config={"callbacks": [tree]})
    assert [d.metadata["filename"] for d in docs] == ["alice_venv.md"]
    assert docs[0].metadata["stage"] == 2
    (retriever_run,) = [run for run in tree.runs if run[0] == "retriever"]
    (model_run,) = [run for run in tree.runs if run[0] == "chat_model"]
    assert model_run[2] == retriever_run[1]
    assert "alice_json.md" in str(model.received[0][0].content)  # the selector saw the candidates


async def test_stage2_async_is_a_child_run(notes: Memory) -> None:
    tree = RunTree()
    retriever = LocalMemoryRetriever(memory=notes, user_id="alice", llm=_selector())
    docs = await retriever.ainvoke("python", config={"callbacks": [tree]})
    assert [d.metadata["filename"] for d in docs] == ["alice_venv.md"]
    (retriever_run,) = [run for run in tree.runs if run[0] == "retriever"]
    (model_run,) = [run for run in tree.runs if run[0] == "chat_model"]
    assert model_run[2] == retriever_run[1]


def test_core_llm_selector_and_bad_k(notes: Memory) -> None:
    llm = TextLLM('["alice_typing.md", "alice_rust.md"]')
    retriever = LocalMemoryRetriever(memory=notes, user_id="alice", llm=llm)
    names = [d.metadata["filename"] for d in retriever.invoke("python typing")]
    assert names[0] == "alice_typing.md"
    assert len(llm.prompts) == 1
    with pytest.raises(InvalidInputError):
        retriever.invoke("python", k=0)
    with pytest.raises(ValueError, match="expected a LangChain chat model"):
        LocalMemoryRetriever(memory=notes, user_id="alice", llm=object())


@pytest.mark.parametrize(
    "unknown", [{"search_kwargs": {"k": 1}}, {"score_threshold": 9.0}, {"usr_id": "ops"}], ids=lambda d: next(iter(d))
)
def test_unknown_arguments_are_refused_by_name(notes: Memory, unknown: dict[str, Any]) -> None:
    with pytest.raises(ValidationError) as info:
        LocalMemoryRetriever(memory=notes, user_id="alice", **unknown)
    (error,) = info.value.errors()
    assert error["loc"] == (next(iter(unknown)),)
    assert error["type"] == "extra_forbidden"
    retriever = LocalMemoryRetriever(memory=notes, user_id="alice", tags=["t"], metadata={"m": 1})
    assert retriever.tags == ["t"]  # BaseRetriever's own fields are still welcome


def test_k_20_returns_20_documents_where_20_notes_match(tmp_path: Path) -> None:
    memory = Memory.open(tmp_path / "many", fsync=False)
    for i in range(24):
        topic = "harbour cranes" if i < 20 else "mountain goats"
        memory.knowledge.write_note("alice", f"port{i:02d}", f"# Port {i}\n\n{topic} unload ship number {i}.")
    retriever = LocalMemoryRetriever(memory=memory, user_id="alice", k=20, max_tokens=8000)
    assert len(retriever.invoke("harbour cranes")) == 20
    assert len(retriever.invoke("harbour cranes", k=7)) == 7
    with pytest.raises(ValidationError):
        LocalMemoryRetriever(memory=memory, user_id="alice", k=101)
    with pytest.raises(InvalidInputError):
        retriever.invoke("harbour cranes", k=101)
