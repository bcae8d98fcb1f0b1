"""The LlamaIndex entry points (retriever, ``search_memory`` tool) follow ``search_mode``:
a query whose words no note holds finds the note about the same thing only in hybrid mode."""

from __future__ import annotations

from pathlib import Path

import pytest
from llama_index.retrievers.local_ai_memory import LocalMemoryRetriever
from llama_index.tools.local_ai_memory import LocalMemoryToolSpec

from local_ai_memory import Memory

CONCEPTS = {"car": 0, "automobile": 0, "tea": 1, "infusion": 1}


class ConceptEmbedder:
    model_name = "concepts-v1"

    def embed(self, texts: list[str]) -> list[list[float]]:
        out = []
        for text in texts:
            vector = [0.01, 0.01, 0.01]
            for word in text.lower().replace(".", " ").split():
                if word in CONCEPTS:
                    vector[CONCEPTS[word]] += 1.0
            out.append(vector)
        return out

    async def aembed(self, texts: list[str]) -> list[list[float]]:
        return self.embed(texts)


@pytest.mark.parametrize("mode", ["bm25", "hybrid"])
async def test_llama_index_entry_points_follow_the_mode(tmp_path: Path, mode: str) -> None:
    memory = Memory.open(tmp_path / "data", fsync=False, auto_watch=False, search_mode=mode, embedder=ConceptEmbedder())
    memory.knowledge.write_note("alice", "repairs", "# Repairs\n\nFixing the car brakes and oil.\n")
    memory.knowledge.write_note("alice", "drinks", "# Drinks\n\nGreen tea and black tea.\n")
    hybrid = mode == "hybrid"
    retriever = LocalMemoryRetriever(memory=memory, user_id="alice", similarity_top_k=1)
    names = [n.node.metadata["filename"] for n in retriever.retrieve("automobile")]
    assert names == (["alice_repairs.md"] if hybrid else [])
    assert [n.node.metadata["filename"] for n in await retriever.aretrieve("automobile")] == names
    spec = LocalMemoryToolSpec(memory=memory, user_id="alice", session_id="s1", search=True)
    tool = {t.metadata.name: t for t in spec.to_tool_list()}["search_memory"]
    assert ("car brakes" in tool.call(query="automobile").content) is hybrid
