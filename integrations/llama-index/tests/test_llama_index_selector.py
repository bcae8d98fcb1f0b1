"""LocalMemoryFileSelector on plain LlamaIndex nodes: selection, bad answers, failures, budget."""

from __future__ import annotations

from typing import Any

import pytest
from llama_index.core.postprocessor import LLMRerank
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
from llama_index.postprocessor.local_ai_memory import LocalMemoryFileSelector

from local_ai_memory._shared.tokens import TokenCounter

TEXTS = {
    "python.md": "# Python\nLists and dictionaries.",
    "rust.md": "# Rust\nOwnership and borrowing. " + "Lifetimes explained at length. " * 40,
    "go.md": "# Go\nGoroutines and channels.",
    "sql.md": "# SQL\nJoins and indexes.",
}


def _nodes() -> list[NodeWithScore]:
    return [
        NodeWithScore(node=TextNode(text=text, metadata={"filename": name}), score=float(len(TEXTS) - i))
        for i, (name, text) in enumerate(TEXTS.items())
    ]


def _names(nodes: list[NodeWithScore]) -> list[str]:
    return [n.node.metadata["filename"] for n in nodes]


BAD_ANSWERS = ["I think the second file is best.", "", '{"files": "python.md"', "[1, 2, 3]"]


@pytest.mark.parametrize("answer", BAD_ANSWERS)
async def test_bad_answer_keeps_the_input_order(answer: str, answer_llm: Any) -> None:
    selector = LocalMemoryFileSelector(llm=answer_llm(answer=answer), top_n=5)
    assert _names(selector.postprocess_nodes(_nodes(), query_str="ownership")) == list(TEXTS)
    assert _names(await selector.apostprocess_nodes(_nodes(), query_str="ownership")) == list(TEXTS)


def test_llm_rerank_drops_everything_on_the_same_answer(answer_llm: Any) -> None:
    """The behaviour this selector exists to avoid (llama-index-core 0.14)."""
    rerank = LLMRerank(llm=answer_llm(answer=BAD_ANSWERS[0]), top_n=5)
    assert rerank.postprocess_nodes(_nodes(), query_str="ownership") == []


async def test_selection_order_and_unknown_names_ignored(answer_llm: Any) -> None:
    llm = answer_llm(answer='Sure:\n```json\n["go.md", "../../etc/passwd", "bob_secret.md", "python.md", "go.md"]\n```')
    selector = LocalMemoryFileSelector(llm=llm, top_n=5)
    assert _names(selector.postprocess_nodes(_nodes(), query_str="concurrency")) == ["go.md", "python.md"]
    assert _names(await selector.apostprocess_nodes(_nodes(), query_str="concurrency")) == ["go.md", "python.md"]
    assert llm.async_calls == 1
    prompt = llm.prompts[0]
    assert "concurrency" in prompt
    assert '"file": "rust.md"' in prompt
    assert '"title": "Rust"' in prompt


async def test_failing_llm_keeps_the_input_order_and_top_n_applies(answer_llm: Any) -> None:
    selector = LocalMemoryFileSelector(llm=answer_llm(fail=True), top_n=2)
    assert _names(selector.postprocess_nodes(_nodes(), query_str="x")) == ["python.md", "rust.md"]
    assert _names(await selector.apostprocess_nodes(_nodes(), query_str="x")) == ["python.md", "rust.md"]


def test_empty_list_answer_means_nothing_relevant(answer_llm: Any) -> None:
    selector = LocalMemoryFileSelector(llm=answer_llm(answer="[]"), top_n=5)
    assert selector.postprocess_nodes(_nodes(), query_str="cooking") == []


async def test_token_budget_skips_what_does_not_fit(answer_llm: Any) -> None:
    counter = TokenCounter()
    budget = counter.count(TEXTS["python.md"]) + counter.count(TEXTS["go.md"]) + 5
    selector = LocalMemoryFileSelector(llm=answer_llm(answer='["python.md", "rust.md", "go.md"]'), max_tokens=budget)
    kept = await selector.apostprocess_nodes(_nodes(), query_str="languages")
    assert _names(kept) == ["python.md", "go.md"]  # rust.md is too long for what is left
    assert sum(counter.count(n.node.text) for n in kept) <= budget
    no_llm = LocalMemoryFileSelector(max_tokens=budget, top_n=3)
    assert _names(no_llm.postprocess_nodes(_nodes(), QueryBundle("languages"))) == ["python.md", "go.md"]


def test_nodes_without_filenames_and_duplicates(answer_llm: Any) -> None:
    nodes = [
        NodeWithScore(node=TextNode(id_="n1", text="Alpha facts", metadata={"file_name": "notes.md"})),
        NodeWithScore(node=TextNode(id_="n2", text="Beta facts", metadata={"file_name": "notes.md"})),
        NodeWithScore(node=TextNode(id_="n3", text="Gamma facts")),
    ]
    llm = answer_llm(answer='["n3", "notes.md#2"]')
    kept = LocalMemoryFileSelector(llm=llm).postprocess_nodes(nodes, query_str="gamma beta")
    assert [n.node.node_id for n in kept] == ["n3", "n2"]
