"""all-MiniLM-L6-v2 without torch: a one-time export to an ONNX file, then ONNX Runtime alone.

A hybrid query embeds one short text. Loading torch and sentence-transformers for it costs
seconds per process (about 9 s per CLI call measured in issue 27); ONNX Runtime, the Rust
``tokenizers`` library and the model file load in a fraction of that. :func:`export_model`
runs once (the CLI's ``index`` in hybrid mode does it): it loads the model through torch,
exports the network (:func:`.onnx.onnx_encoder`, which checks the ONNX vectors against torch's
on probe texts, cosine >= 0.9999) and writes, atomically, into :func:`export_dir`:

    model.onnx        the network (token vectors out; pooling is done here in numpy)
    tokenizer.json    the fast tokenizer, cut at the model's 256 word pieces
    export.json       {"model_name": ..., "max_length": 256, "dimension": 384, "format": 1}

:class:`OnnxModelEmbedder` then embeds from those three files only. Its ``model_name`` is the
sentence-transformers embedder's, on purpose: the vectors are the same (within the checked
tolerance), so the vectors already cached stay valid and both embedders share them.
:func:`local_embedder` picks the ONNX one when an export is there, else the torch one.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from local_ai_memory._shared import fs as _fs
from local_ai_memory._shared.errors import InvalidInputError, ModelError

__all__ = ["EXPORT_FORMAT", "OnnxModelEmbedder", "export_dir", "export_model", "local_embedder"]

EXPORT_FORMAT = 1
MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"


def export_dir() -> Path:
    """Where the export lives: ``$LOCAL_AI_MEMORY_ONNX_DIR``, else the user's cache folder
    (``~/.cache/local-ai-memory/onnx/all-MiniLM-L6-v2``): one export serves every data folder."""
    configured = os.environ.get("LOCAL_AI_MEMORY_ONNX_DIR")
    if configured:
        return Path(configured)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "local-ai-memory" / "onnx" / "all-MiniLM-L6-v2"


def _exported(folder: Path) -> dict[str, Any] | None:
    """The export's ``export.json`` if the folder holds a complete export of this format."""
    try:
        meta = json.loads((folder / "export.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or meta.get("format") != EXPORT_FORMAT:
        return None
    if not (folder / "model.onnx").is_file() or not (folder / "tokenizer.json").is_file():
        return None
    return meta


def export_model(folder: Path | None = None, *, force: bool = False) -> Path:
    """Export all-MiniLM-L6-v2 to ``folder`` (default :func:`export_dir`) once; return the folder.

    Needs torch and sentence-transformers (the ``embeddings`` extra) this one time. Raises
    :class:`ModelError` when the export cannot be made or does not agree with torch."""
    from local_ai_memory._models.onnx import onnx_encoder
    from local_ai_memory._models.sentence_transformers import SentenceTransformerEmbedder

    folder = folder if folder is not None else export_dir()
    if not force and _exported(folder) is not None:
        return folder
    model = SentenceTransformerEmbedder()._model()
    encoder = onnx_encoder(model, threads=1)
    if encoder is None or not encoder.model_bytes:
        raise ModelError("the model could not be exported to ONNX (see the debug log)")
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer_json = model.tokenizer.backend_tokenizer.to_str()
    meta = {"model_name": MODEL_NAME, "max_length": int(model.max_seq_length), "dimension": 384, "format": 1}
    _fs.atomic_write(folder / "model.onnx", encoder.model_bytes, durable=True)
    _fs.atomic_write(folder / "tokenizer.json", tokenizer_json.encode("utf-8"), durable=True)
    _fs.atomic_write(folder / "export.json", json.dumps(meta).encode("utf-8"), durable=True)  # last: marks it whole
    return folder


class OnnxModelEmbedder:
    """all-MiniLM-L6-v2 from an :func:`export_model` folder: ONNX Runtime, ``tokenizers`` and
    numpy, no torch. Loads on first use; thread-safe. ``max_chars`` cuts texts like the torch
    embedder does; ``threads`` is ONNX Runtime's intra-op thread count."""

    model_name = MODEL_NAME
    dimension = 384

    def __init__(
        self, folder: Path | None = None, *, threads: int = 1, batch_size: int = 32, max_chars: int = 4000
    ) -> None:
        if threads < 1 or batch_size < 1 or max_chars < 1:
            raise InvalidInputError("threads, batch_size and max_chars must be positive")
        self.folder = folder if folder is not None else export_dir()
        self.threads = threads
        self.batch_size = batch_size
        self.max_chars = max_chars
        self._lock = threading.Lock()
        self._loaded: tuple[Any, Any] | None = None

    def __repr__(self) -> str:
        return f"OnnxModelEmbedder({str(self.folder)!r})"

    def _load(self) -> tuple[Any, Any]:
        with self._lock:
            if self._loaded is None:
                meta = _exported(self.folder)
                if meta is None:
                    raise ModelError(f"no ONNX export in {self.folder} (run `local-ai-memory index` in hybrid mode)")
                try:
                    import onnxruntime
                    from tokenizers import Tokenizer
                except ImportError as exc:
                    raise ModelError(
                        "onnxruntime and tokenizers are needed: pip install 'local-ai-memory[embeddings]'"
                    ) from exc
                tokenizer = Tokenizer.from_file(str(self.folder / "tokenizer.json"))
                tokenizer.enable_truncation(max_length=int(meta.get("max_length", 256)))
                tokenizer.enable_padding()
                options = onnxruntime.SessionOptions()
                options.intra_op_num_threads = self.threads
                options.inter_op_num_threads = 1
                options.log_severity_level = 3
                session = onnxruntime.InferenceSession(
                    str(self.folder / "model.onnx"), options, providers=["CPUExecutionProvider"]
                )
                self._loaded = (session, tokenizer)
            return self._loaded

    def _encode(self, texts: list[str]) -> npt.NDArray[np.float32]:
        session, tokenizer = self._load()
        with self._lock:  # one tokenizer, padding settings shared
            encoded = tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encoded], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encoded], dtype=np.int64)
        (tokens,) = session.run(None, {"input_ids": ids, "attention_mask": mask})
        weights = mask[:, :, None].astype(np.float32)
        pooled = (tokens * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        out: npt.NDArray[np.float32] = (pooled / np.maximum(norms, 1e-12)).astype(np.float32)
        return out

    def embed(self, texts: list[str]) -> list[list[float]]:
        """One 384-dimension unit vector per text (batches of ``batch_size``)."""
        if not texts:
            return []
        clipped = [text[: self.max_chars] for text in texts]
        try:
            parts = [self._encode(clipped[i : i + self.batch_size]) for i in range(0, len(clipped), self.batch_size)]
        except ModelError:
            raise
        except Exception as exc:
            raise ModelError(f"embedding failed: {type(exc).__name__}: {exc}") from exc
        result: list[list[float]] = np.concatenate(parts).tolist()
        return result

    async def aembed(self, texts: list[str]) -> list[list[float]]:
        """Async twin of :meth:`embed` (in a worker thread)."""
        return await asyncio.to_thread(self.embed, texts)


def local_embedder() -> Any:
    """The local MiniLM embedder: ONNX Runtime from the export when there is one (no torch
    loaded), else the sentence-transformers one (torch)."""
    if _exported(export_dir()) is not None:
        return OnnxModelEmbedder()
    from local_ai_memory._models.sentence_transformers import SentenceTransformerEmbedder

    return SentenceTransformerEmbedder()
