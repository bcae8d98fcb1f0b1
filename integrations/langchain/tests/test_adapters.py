"""Adapters: LangChain chat models / LLMs / embeddings behind the core protocols, sync and async."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from langchain_core.callbacks import BaseCallbackHandler, CallbackManager
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.language_models import FakeListLLM
from langchain_core.messages import AIMessage
from langchain_local_ai_memory import ChatModelLLM, EmbeddingsEmbedder, LocalMemoryRetriever, as_embedder, as_llm
from lc_fakes import ScriptedChatModel, TextLLM, write_notes

from local_ai_memory import LLM, Embedder, InvalidInputError, Memory


class Starts(BaseCallbackHandler):
    def __init__(self) -> None:
        self.names: list[str] = []

    def on_chat_model_start(self, serialized: Any, messages: Any, *, run_id: uuid.UUID, **kwargs: Any) -> None:
        self.names.append(str(kwargs.get("name")))


def test_chat_model_llm_sync_with_callbacks() -> None:
    model = ScriptedChatModel(script=[AIMessage(content="hello"), AIMessage(content=[{"type": "text", "text": "hi"}])])
    starts = Starts()
    llm = ChatModelLLM(model).with_callbacks(CallbackManager([starts]), run_name="stage2")
    assert isinstance(llm, LLM)
    assert llm.complete("say hello") == "hello"
    assert llm.complete("again") == "hi"  # content blocks become text
    assert model.received[0][0].content == "say hello"
    assert starts.names == ["stage2", "stage2"]


async def test_chat_model_llm_async_and_plain_llm() -> None:
    model = ScriptedChatModel(script=[AIMessage(content="async answer")])
    assert await ChatModelLLM(model).acomplete("q") == "async answer"
    plain = as_llm(FakeListLLM(responses=["from a plain LLM", "second"]))
    assert plain is not None
    assert plain.complete("q") == "from a plain LLM"
    assert await plain.acomplete("q") == "second"


def test_as_llm_passes_protocol_objects_and_refuses_others() -> None:
    text = TextLLM("x")
    assert as_llm(text) is text
    assert as_llm(None) is None
    with pytest.raises(InvalidInputError):
        as_llm(42)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        ChatModelLLM("gpt")  # type: ignore[arg-type]


async def test_embeddings_embedder_sync_and_async() -> None:
    embeddings = DeterministicFakeEmbedding(size=8)
    embedder = as_embedder(embeddings)
    assert isinstance(embedder, EmbeddingsEmbedder)
    assert isinstance(embedder, Embedder)
    vectors = embedder.embed(["a", "b"])
    assert len(vectors) == 2
    assert len(vectors[0]) == 8
    assert await embedder.aembed(["a", "b"]) == vectors
    assert as_embedder(embedder) is embedder
    with pytest.raises(InvalidInputError):
        as_embedder("nope")  # type: ignore[arg-type]


@pytest.mark.parametrize("wiring", ["memory", "config"])
async def test_hybrid_retrieval_through_langchain_embeddings(tmp_path: Path, wiring: str) -> None:
    config = write_notes(tmp_path / "data").replace(search_mode="hybrid")
    embeddings = DeterministicFakeEmbedding(size=16)
    if wiring == "memory":  # the memory's embedder ranks its notes, for every object on it
        retriever = LocalMemoryRetriever(memory=Memory(config, embedder=as_embedder(embeddings)), user_id="alice", k=5)
    else:  # the shortcut builds Memory(config, embedder=...) for this retriever
        retriever = LocalMemoryRetriever(config=config, user_id="alice", embeddings=embeddings, k=5)
    assert retriever.memory.embedder is not None
    docs = retriever.invoke("python json")
    adocs = await retriever.ainvoke("python json")
    assert docs
    assert {d.metadata["filename"] for d in docs} <= {
        "alice_python.md",
        "alice_json.md",
        "alice_venv.md",
        "alice_typing.md",
        "alice_rust.md",
    }
    assert [d.metadata["filename"] for d in adocs] == [d.metadata["filename"] for d in docs]


def test_embeddings_beside_a_ready_memory_are_refused() -> None:
    with pytest.raises(InvalidInputError, match="its own embedder"):
        LocalMemoryRetriever(memory=Memory.in_memory(), embeddings=DeterministicFakeEmbedding(size=4))
