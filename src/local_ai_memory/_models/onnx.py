"""Short texts (search queries) through ONNX Runtime instead of torch.

A hybrid query embeds one short text: all-MiniLM-L6-v2 took about 14 ms of CPU per query here
through torch, the same network exported to ONNX and run by ONNX Runtime about 6 ms, with
vectors at cosine 0.9999996 to torch's (``benchmarks/bench_embeddings.py`` compares the two).
:func:`onnx_encoder` exports the already loaded sentence-transformers model in memory (no file
is written, nothing is downloaded) and checks the result against torch on probe texts; any
difference, a pipeline other than transformer + mean pooling (+ normalize), or a missing
``onnxruntime``/``onnx`` gives ``None`` and the caller keeps using torch.
"""

from __future__ import annotations

import io
import logging
import threading
import warnings
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["OnnxEncoder", "onnx_encoder"]

logger = logging.getLogger("local_ai_memory")

PROBES = (
    "hello",
    "How do I resume an interrupted run from its last checkpoint?",
    "naïve café — über ünïcödé, 東京, emoji 🙂, code `my_snake_case(x) -> int`",
)
MIN_AGREEMENT = 0.9999
"""Cosine every probe's ONNX vector must reach against torch's, or ONNX is not used."""


class OnnxEncoder:
    """Mean-pooled, normalized sentence vectors from an ONNX Runtime session."""

    def __init__(self, session: Any, tokenizer: Any, max_length: int, model_bytes: bytes = b"") -> None:
        self.model_bytes = model_bytes
        """The exported ONNX model (what :func:`.onnx_file.export_model` writes to disk)."""
        self._session = session
        self._tokenizer = tokenizer
        self._max_length = max_length
        self._lock = threading.Lock()  # a fast tokenizer is not safe to call from two threads at once

    def encode(self, texts: list[str]) -> npt.NDArray[np.float32]:
        """One unit vector per text (the sentence-transformers pipeline's answer)."""
        with self._lock:
            batch = self._tokenizer(
                texts, padding=True, truncation=True, max_length=self._max_length, return_tensors="np"
            )
        mask = batch["attention_mask"].astype(np.int64)
        (tokens,) = self._session.run(None, {"input_ids": batch["input_ids"].astype(np.int64), "attention_mask": mask})
        weights = mask[:, :, None].astype(np.float32)
        pooled = (tokens * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        out: npt.NDArray[np.float32] = (pooled / np.maximum(norms, 1e-12)).astype(np.float32)
        return out


def _mean_pooled(model: Any) -> bool:
    """Whether ``model`` is transformer + mean pooling (+ normalize), what :class:`OnnxEncoder` computes."""
    names = [type(module).__name__ for module in model]
    if names not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]):
        return False
    config = model[1].get_config_dict()
    return bool(config.get("pooling_mode") == "mean" or config.get("pooling_mode_mean_tokens"))


def onnx_encoder(model: Any, threads: int | None) -> OnnxEncoder | None:
    """An :class:`OnnxEncoder` equivalent to the sentence-transformers ``model``, or ``None``
    (logged at debug level) when it cannot be built or does not agree with torch."""
    if not _mean_pooled(model):
        logger.debug("ONNX encoder not used: the model is not transformer + mean pooling")
        return None
    try:
        import onnxruntime
        import torch
    except ImportError:
        logger.debug("ONNX encoder not used: onnxruntime is not installed")
        return None
    network = model[0].auto_model.eval()

    class _Tokens(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.network = network

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            return self.network(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    tokenizer = model.tokenizer
    max_length = int(model.max_seq_length)
    try:
        example = tokenizer([PROBES[1]], return_tensors="pt")
        buffer = io.BytesIO()
        with warnings.catch_warnings(), torch.inference_mode():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                _Tokens(),
                (example["input_ids"], example["attention_mask"]),
                buffer,  # type: ignore[arg-type]  # the exporter writes to a file object too
                input_names=["input_ids", "attention_mask"],
                output_names=["tokens"],
                dynamic_axes={name: {0: "batch", 1: "length"} for name in ("input_ids", "attention_mask", "tokens")},
                opset_version=17,
                dynamo=False,
            )
        options = onnxruntime.SessionOptions()
        if threads is not None:
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
        options.log_severity_level = 3
        session = onnxruntime.InferenceSession(buffer.getvalue(), options, providers=["CPUExecutionProvider"])
        encoder = OnnxEncoder(session, tokenizer, max_length, buffer.getvalue())
        probes = [*PROBES, " ".join(PROBES) * 40]  # the last one is cut at max_length
        fast = encoder.encode(probes)
        reference = np.asarray(model.encode(probes, normalize_embeddings=True, show_progress_bar=False))
    except Exception as exc:  # an exporter or runtime that cannot handle this model: keep torch
        logger.debug("ONNX encoder not used: %s: %s", type(exc).__name__, exc)
        return None
    agreement = float(np.min(np.sum(fast * reference, axis=1)))
    if fast.shape != reference.shape or agreement < MIN_AGREEMENT:
        logger.debug("ONNX encoder not used: it agrees with torch only to cosine %.6f", agreement)
        return None
    return encoder
