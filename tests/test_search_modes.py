"""Every Stage 1 entry point follows ``memory.search_mode`` (one decision, in ``MemoryStore.stage1``).

A concept embedder maps synonyms to one dimension, so a query whose words no note holds is
answered only by hybrid search: BM25 finds nothing, hybrid finds the note about the same thing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from local_ai_memory import Memory

CONCEPTS = {"car": 0, "automobile": 0, "vehicle": 0, "tea": 1, "infusion": 1, "garden": 2, "yard": 2}


class ConceptEmbedder:
    """Counts words per concept (synonyms share a dimension); records every text it embeds."""

    model_name = "concepts-v1"

    def __init__(self) -> None:
        self.texts: list[str] = []

    def embed(self, texts: list[str]) -> list[list[float]]:
        self.texts.extend(texts)
        out = []
        for text in texts:
            vector = [0.01] * 4
            for word in text.lower().replace(".", " ").split():
                if word in CONCEPTS:
                    vector[CONCEPTS[word]] += 1.0
            out.append(vector)
        return out

    async def aembed(self, texts: list[str]) -> list[list[float]]:
        return self.embed(texts)


@pytest.fixture
def memory(tmp_path: Path) -> Memory:
    embedder = ConceptEmbedder()
    memory = Memory.open(tmp_path / "data", fsync=False, auto_watch=False, search_mode="hybrid", embedder=embedder)
    memory.knowledge.write_note("alice", "repairs", "# Repairs\n\nFixing the car brakes and oil.\n")
    memory.knowledge.write_note("alice", "drinks", "# Drinks\n\nGreen tea and black tea.\n")
    return memory


def test_knowledge_search_follows_hybrid_mode(memory: Memory) -> None:
    found = memory.knowledge.search("automobile", "alice")
    assert found
    assert found[0].filename == "alice_repairs.md"
    bm25 = memory.knowledge.store.stage1("automobile", 5, user_id="alice", mode="bm25")
    assert bm25 == []  # no note holds the word: only the hybrid mode finds it


async def test_async_search_and_retrieve_follow_hybrid_mode(memory: Memory) -> None:
    found = await memory.knowledge.asearch("automobile", "alice")
    assert found[0].filename == "alice_repairs.md"
    result = memory.knowledge.retrieve("automobile", "alice")
    assert result.files
    assert result.files[0].filename == "alice_repairs.md"
    aresult = await memory.knowledge.aretrieve("automobile", "alice")
    assert aresult.files[0].filename == "alice_repairs.md"


def test_bm25_mode_is_followed_too(tmp_path: Path) -> None:
    embedder = ConceptEmbedder()
    memory = Memory.open(tmp_path / "data", fsync=False, auto_watch=False, search_mode="bm25", embedder=embedder)
    memory.knowledge.write_note("alice", "repairs", "# Repairs\n\nFixing the car brakes.\n")
    assert memory.knowledge.search("automobile", "alice") == []
    assert not memory.knowledge.retrieve("automobile", "alice").files
    assert [c.filename for c in memory.knowledge.search("car brakes", "alice")] == ["alice_repairs.md"]
