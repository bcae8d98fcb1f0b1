"""LocalMemoryRetriever with the real llama-index-core classes: nodes, RetrieverQueryEngine,
QueryFusionRetriever (reciprocal_rerank), and the LLM / embed model adapters."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from llama_index.core import Document, SummaryIndex
from llama_index.core.embeddings import MockEmbedding
from llama_index.core.llms import MockLLM
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.retrievers import QueryFusionRetriever
from llama_index.core.schema import MetadataMode
from llama_index.memory.local_ai_memory import LocalWorkingMemoryBlock
from llama_index.postprocessor.local_ai_memory import LocalMemoryFileSelector
from llama_index.retrievers.local_ai_memory import (
    LlamaIndexEmbedderAdapter,
    LlamaIndexLLMAdapter,
    LocalMemoryRetriever,
    node_id_for,
)
from llama_index.tools.local_ai_memory import LocalMemoryToolSpec
from pydantic import ValidationError

from local_ai_memory import InvalidInputError, Memory, MemoryConfig, ModelError


def _names(nodes: list[Any]) -> list[str]:
    return [n.node.metadata["filename"] for n in nodes]


def test_nodes_one_per_file_with_metadata_and_stable_ids(notes: Memory) -> None:
    retriever = LocalMemoryRetriever(memory=notes, user_id="alice")
    nodes = retriever.retrieve("python list comprehension")
    assert _names(nodes)[0] == "alice_python.md"
    assert "bob_python.md" not in _names(nodes)
    node = nodes[0].node
    assert node.node_id == node_id_for("knowledge", "alice_python.md")
    assert node.get_content(metadata_mode=MetadataMode.NONE) == notes.knowledge.read_note("alice", "python")
    assert set(node.metadata) == {"filename", "title", "category", "keywords", "last_modified"}
    assert node.metadata["title"] == "Python Basics"
    assert node.metadata["category"] == "knowledge"
    assert "python" in node.metadata["keywords"]
    assert isinstance(node.metadata["last_modified"], float)
    assert "last_modified" not in node.get_content(metadata_mode=MetadataMode.LLM)
    assert isinstance(nodes[0].score, float)
    again = retriever.retrieve("comprehension of lists in python")
    assert again[0].node.node_id == node.node_id


async def test_async_matches_sync_and_binds_user_and_categories(notes: Memory) -> None:
    retriever = LocalMemoryRetriever(memory=notes, user_id="alice", categories=["work"])
    sync_nodes = retriever.retrieve("deploy workers migrations python")
    async_nodes = await retriever.aretrieve("deploy workers migrations python")
    assert _names(sync_nodes) == _names(async_nodes) == ["alice_deploy.md"]
    bob = LocalMemoryRetriever(memory=notes, user_id="bob")
    assert _names(await bob.aretrieve("python notes")) == ["bob_python.md"]
    with pytest.raises(InvalidInputError):
        LocalMemoryRetriever(memory=notes, user_id="../alice")
    with pytest.raises(InvalidInputError, match="unknown categories"):
        LocalMemoryRetriever(memory=notes, user_id="alice", categories=["recipes"])


async def test_aretrieve_calls_the_llm_through_acomplete(notes: Memory, answer_llm: Any) -> None:
    llm = answer_llm(answer='["alice_rust.md"]')
    # The models belong to the memory: a second Memory over the same folder, with the LLM.
    with Memory(notes.config, llm=LlamaIndexLLMAdapter(llm)) as with_llm:
        retriever = LocalMemoryRetriever(memory=with_llm, user_id="alice")
        nodes = await retriever.aretrieve("python rust ownership lists")
        assert _names(nodes) == ["alice_rust.md"]  # Stage 2 chose it
        assert llm.async_calls == 1
        sync_nodes = retriever.retrieve("python rust ownership lists")
        assert _names(sync_nodes) == ["alice_rust.md"]
        assert llm.async_calls == 1


def test_max_tokens_bounds_the_loaded_files(notes: Memory) -> None:
    retriever = LocalMemoryRetriever(memory=notes, user_id="alice", max_tokens=40)
    nodes = retriever.retrieve("python rust deploy")
    assert nodes
    total = sum(notes.token_counter.count(f"## {n.node.metadata['filename']}\n{n.node.text}") for n in nodes)
    assert total <= 40


def test_query_engine_with_mock_llm_answers_over_memory(notes: Memory) -> None:
    retriever = LocalMemoryRetriever(memory=notes, user_id="alice")
    engine = RetrieverQueryEngine.from_args(retriever, llm=MockLLM())
    response = engine.query("How do I write a list comprehension in python?")
    assert _names(response.source_nodes)[0] == "alice_python.md"
    # MockLLM echoes its prompt: the answer was written from the memory file's text.
    assert "A list comprehension builds a list in one line." in str(response)
    assert "hunter2" not in str(response)


async def test_query_engine_async_with_selector(notes: Memory, answer_llm: Any) -> None:
    retriever = LocalMemoryRetriever(memory=notes, user_id="alice")
    selector = LocalMemoryFileSelector(llm=answer_llm(answer="no idea, sorry"), top_n=2)
    engine = RetrieverQueryEngine.from_args(retriever, llm=MockLLM(), node_postprocessors=[selector])
    response = await engine.aquery("python lists and rust ownership")
    assert set(_names(response.source_nodes)) == {"alice_python.md", "alice_rust.md"}
    assert "Every value in Rust has one owner" in str(response)


def _other_retriever() -> Any:
    documents = [
        Document(text="Tuesday deploys need a rollback plan.", metadata={"filename": "runbook.md"}),
        Document(text="Python virtual environments isolate packages.", metadata={"filename": "venv.md"}),
    ]
    # SummaryIndex needs neither an LLM nor an embed model for plain retrieval. (VectorStoreIndex would do
    # too, but in this shared venv its embed-model check imports the installed langchain-community.)
    return SummaryIndex.from_documents(documents).as_retriever()


def _fusion(notes: Memory) -> QueryFusionRetriever:
    ours = LocalMemoryRetriever(memory=notes, user_id="alice")
    return QueryFusionRetriever(
        [ours, _other_retriever()],
        mode="reciprocal_rerank",
        num_queries=1,
        similarity_top_k=10,
        use_async=True,
        llm=MockLLM(),
    )


def test_query_fusion_reciprocal_rerank_combines_both(notes: Memory) -> None:
    fused = _fusion(notes).retrieve("python deploy")
    names = _names(fused)
    assert {"alice_python.md", "alice_deploy.md"} <= set(names)
    assert {"runbook.md", "venv.md"} <= set(names)
    assert len(names) == len(set(names))
    ours = {n.node.node_id for n in fused if n.node.metadata["filename"].startswith("alice_")}
    assert node_id_for("knowledge", "alice_python.md") in ours


async def test_query_fusion_reciprocal_rerank_async(notes: Memory) -> None:
    fused = await _fusion(notes).aretrieve("python deploy")
    names = _names(fused)
    assert {"alice_python.md", "alice_deploy.md", "runbook.md", "venv.md"} <= set(names)
    scores = [n.score for n in fused]
    assert scores == sorted(scores, reverse=True)


async def test_adapters(answer_llm: Any) -> None:
    llm = LlamaIndexLLMAdapter(answer_llm(answer="yes"))
    assert llm.complete("q") == "yes"
    assert await llm.acomplete("q") == "yes"
    failing = LlamaIndexLLMAdapter(answer_llm(fail=True))
    with pytest.raises(ModelError, match="unreachable"):
        failing.complete("q")
    with pytest.raises(ModelError):
        await failing.acomplete("q")
    embedder = LlamaIndexEmbedderAdapter(MockEmbedding(embed_dim=4))
    assert embedder.embed(["a", "b"]) == [[0.5] * 4, [0.5] * 4]
    assert await embedder.aembed(["a"]) == [[0.5] * 4]
    assert embedder.embed([]) == []
    with pytest.raises(InvalidInputError):
        LlamaIndexLLMAdapter("not a model")  # type: ignore[arg-type]


def test_hybrid_mode_with_a_llama_index_embed_model(config: MemoryConfig) -> None:
    hybrid = config.replace(search_mode="hybrid")
    # config= builds the retriever's own Memory, with the embed model as its embedder.
    retriever = LocalMemoryRetriever(config=hybrid, user_id="alice", embed_model=MockEmbedding(embed_dim=8))
    assert isinstance(retriever.memory.embedder, LlamaIndexEmbedderAdapter)
    retriever.memory.knowledge.write_note("alice", "tea", "# Tea\n\nGreen tea steeps at 80 degrees.")
    assert _names(retriever.retrieve("green tea")) == ["alice_tea.md"]
    assert (config.runtime_data_dir / "memory_data" / ".embeddings").is_dir()
    retriever.memory.close()


async def test_search_tool_is_bound_to_the_user(notes: Memory) -> None:
    spec = LocalMemoryToolSpec(memory=notes, user_id="alice", session_id="s1", search=True, max_tokens=500)
    tools = {tool.metadata.name: tool for tool in spec.to_tool_list()}
    assert set(tools) == {"load_tool_result", "search_tool_result", "search_memory"}
    search = tools["search_memory"]
    schema = search.metadata.get_parameters_dict()
    assert set(schema["properties"]) == {"query"}
    assert "user" not in json.dumps(schema).lower()
    text = search.call(query="python notes").content
    assert "## alice_python.md" in text
    assert "hunter2" not in text
    async_text = (await search.acall(query="python notes")).content
    assert async_text == text
    nothing = await asyncio.wait_for(search.acall(query="zebra quantum"), 30)
    assert nothing.content == "No matching notes in memory."


def test_unknown_arguments_are_refused(notes: Memory, config: MemoryConfig) -> None:
    """A misspelt or foreign argument (``similarity_topk``, ``usr_id``) is an error, never ignored."""
    with pytest.raises(TypeError, match="'similarity_topk'"):
        LocalMemoryRetriever(memory=notes, user_id="alice", similarity_topk=2)
    with pytest.raises(TypeError, match="'usr_id'"):
        LocalMemoryRetriever.from_config(config, user_id="alice", usr_id="ops")
    with pytest.raises(TypeError, match="'score_threshold'"):
        LocalMemoryRetriever(notes, user_id="alice", score_threshold=9.0)
    with pytest.raises(ValidationError, match="top_k") as info:
        LocalMemoryFileSelector(top_k=2)
    assert [error["type"] for error in info.value.errors()] == ["extra_forbidden"]
    with pytest.raises(ValidationError, match="max_token"):
        LocalWorkingMemoryBlock(memory=notes, user_id="alice", session_id="s1", max_token=10)
    with pytest.raises(TypeError, match="'usr_id'"):
        LocalMemoryToolSpec.from_config(config, user_id="alice", session_id="s1", usr_id="x")


def test_similarity_top_k_20_returns_20_nodes_where_20_notes_match(notes: Memory) -> None:
    for i in range(24):
        topic = "harbour cranes" if i < 20 else "mountain goats"
        notes.knowledge.write_note("alice", f"port{i:02d}", f"# Port {i}\n\n{topic} unload ship number {i}.")
    retriever = LocalMemoryRetriever(memory=notes, user_id="alice", similarity_top_k=20, max_tokens=8000)
    assert len(retriever.retrieve("harbour cranes")) == 20
    assert len(asyncio.run(retriever.aretrieve("harbour cranes"))) == 20
    assert len(LocalMemoryRetriever(memory=notes, user_id="alice").retrieve("harbour cranes")) == 5
    with pytest.raises(InvalidInputError):
        LocalMemoryRetriever(memory=notes, user_id="alice", similarity_top_k=0)
