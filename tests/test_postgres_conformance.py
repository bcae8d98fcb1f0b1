"""The conformance suites against PostgreSQL (an embedded server, see ``conftest.py``), and the
proof that search over PostgreSQL ranks and scores exactly as search over files."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from local_ai_memory._backends.postgres.knowledge import PostgresKnowledgeBackend
from local_ai_memory._backends.postgres.runtime import PostgresRuntimeBackend
from local_ai_memory._contracts.knowledge import KnowledgeBackend
from local_ai_memory._knowledge.store import MemoryStore
from local_ai_memory._shared.config import MemoryConfig
from local_ai_memory._shared.naming import DirectoryGuard
from local_ai_memory.backends import FileKnowledgeBackend
from local_ai_memory.testing import CROSS_PROCESS, DURABLE, KnowledgeBackendTests, RuntimeBackendTests
from local_ai_memory.testing._processes import Opener


class TestPostgresRuntimeBackend(RuntimeBackendTests):
    capabilities: ClassVar[frozenset[str]] = frozenset({CROSS_PROCESS, DURABLE})

    @pytest.fixture
    def opener(self, postgres_url: str, postgres_schema: str) -> Opener:
        return functools.partial(PostgresRuntimeBackend, postgres_url, schema=postgres_schema, pool_max_size=12)


class TestPostgresKnowledgeBackend(KnowledgeBackendTests):
    """Every optional capability: a complete change feed on every host, durable, shared by
    processes, and note writes that store their index line in the same transaction."""

    capabilities: ClassVar[frozenset[str]] = frozenset({"change_feed", "durable", "cross_process", "atomic_appends"})

    @pytest.fixture
    def opener(self, postgres_url: str, postgres_schema: str) -> Opener:
        return functools.partial(PostgresKnowledgeBackend, postgres_url, schema=postgres_schema, pool_max_size=6)

    @pytest.fixture
    def backend(self, postgres_url: str, postgres_schema: str) -> Iterator[KnowledgeBackend]:
        backend = PostgresKnowledgeBackend(postgres_url, schema=postgres_schema, pool_max_size=6)
        yield backend
        backend.close()


class _WordEmbedder:
    """A deterministic embedder: one dimension per word of a small vocabulary."""

    model_name = "words-v1"
    words = ("apple", "banana", "cherry", "tea", "deploy", "kiwi", "note", "green")

    def embed(self, texts: list[str]) -> list[list[float]]:
        return [[float(text.lower().count(word)) + 0.01 for word in self.words] for text in texts]

    async def aembed(self, texts: list[str]) -> list[list[float]]:
        return self.embed(texts)


@pytest.mark.parametrize("mode", ["bm25", "hybrid"])
def test_file_and_postgres_rank_and_score_identically(
    tmp_path: Path, postgres_url: str, postgres_schema: str, mode: str
) -> None:
    words = ["apple", "banana", "cherry", "tea", "deploy", "kiwi", "green", "note", "server", "queue"]
    notes = {
        f"{user}_n{i}.md": f"# Note {i} of {user}\n\n"
        + " ".join(words[(i * k + len(user)) % len(words)] for k in range(1, i % 7 + 3))
        for user in ("alice", "bob")
        for i in range(40)
    }
    config = MemoryConfig(fsync=False, categories=("knowledge",), search_mode=mode)  # type: ignore[arg-type]
    backend = PostgresKnowledgeBackend(postgres_url, schema=postgres_schema)
    stores = [
        MemoryStore(FileKnowledgeBackend(DirectoryGuard(tmp_path / "files"), config), config, embedder=_WordEmbedder()),
        MemoryStore(backend, config, embedder=_WordEmbedder()),
    ]
    for store in stores:
        for name, text in notes.items():
            store.write_file(f"knowledge/{name}", text)
        store.delete_file("knowledge/alice_n3.md")
    try:
        for user in ("alice", "bob"):
            for query in ("apple cherry", "green tea", "deploy the queue server", "zebra", "note kiwi"):
                on_files, on_postgres = (store.search(query, 20, user_id=user) for store in stores)
                assert [(c.filename, c.score) for c in on_files] == [(c.filename, c.score) for c in on_postgres]
        assert len(stores[1].search("apple", 20, user_id="alice")) > 3
    finally:
        backend.close()
