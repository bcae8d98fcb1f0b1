"""The LangChain entry points (store search, retriever, search tool) follow ``search_mode``:
a query whose words no note holds finds the note about the same thing only in hybrid mode."""

from __future__ import annotations

from pathlib import Path

import pytest
from langchain_local_ai_memory import KnowledgeSearchTool, LocalMemoryRetriever, LocalMemoryStore

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
async def test_every_langchain_entry_point_follows_the_mode(tmp_path: Path, mode: str) -> None:
    memory = Memory.open(tmp_path / "data", fsync=False, auto_watch=False, search_mode=mode, embedder=ConceptEmbedder())
    memory.knowledge.write_note("bob", "repairs", "# Repairs\n\nFixing the car brakes and oil.\n")
    memory.knowledge.write_note("bob", "drinks", "# Drinks\n\nGreen tea and black tea.\n")
    hybrid = mode == "hybrid"
    store = LocalMemoryStore(memory)
    found = [item.key for item in store.search(("bob",), query="automobile", limit=1)]
    assert found == (["repairs"] if hybrid else [])
    afound = [item.key for item in await store.asearch(("bob",), query="automobile", limit=1)]
    assert afound == found
    retriever = LocalMemoryRetriever(memory=memory, user_id="bob", k=1)
    names = [d.metadata["filename"] for d in retriever.invoke("automobile")]
    assert names == (["bob_repairs.md"] if hybrid else [])
    assert [d.metadata["filename"] for d in await retriever.ainvoke("automobile")] == names
    text = KnowledgeSearchTool(retriever=retriever).invoke({"query": "automobile"})
    assert ("car brakes" in text) is hybrid
