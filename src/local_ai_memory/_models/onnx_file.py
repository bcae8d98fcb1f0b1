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
import contextlib
import json
import logging
import os
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from local_ai_memory._shared import fs as _fs
from local_ai_memory._shared.errors import InvalidInputError, ModelError, StorageError

__all__ = ["EXPORT_FORMAT", "QUERY_MODEL", "OnnxModelEmbedder", "export_dir", "export_model", "local_embedder"]

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
    with contextlib.suppress(OSError):
        (folder / QUERY_MODEL).unlink()  # quantized from an older model: made again when asked for
    return folder


QUERY_MODEL = "model.q8.onnx"
"""The query model: the export with its weights quantized to int8 per channel (ONNX Runtime's
dynamic quantization; 22 MB instead of 87). Passages are embedded by the full model; a query
vector by this one has cosine 0.994-0.997 with the full model's on probe questions. It runs in
about half the time (4.8 against 9.0 ms CPU for a short query) and its session loads in a
fraction. Natural questions, hybrid, R@5 / MRR@10 (``bench_natural_questions.py`` with the
queries by either model): 400 pages dev .838 / .723 against .851 / .728 (one to two questions of
116), held-out .836 / .733 against .836 / .731; 1,000 pages dev .830 / .689 both, held-out
.819 / .728 against .842 / .725. Since quality comes first here and the full model already keeps a
warm hybrid query at 10k notes near 11 ms, it is opt-in: ``quantized_queries=True`` (or
``LOCAL_AI_MEMORY_ONNX_QUERIES=int8`` for :func:`local_embedder`); it is made from the export
the first time it is asked for (about 10 s)."""


@contextlib.contextmanager
def _quiet_quantizer() -> Iterator[None]:
    """Drop the quantizer's advice to pre-process the model, which it logs on the root logger
    (measured without it: cosine 0.994-0.997 to the full model's vectors)."""

    def advice(record: logging.LogRecord) -> bool:
        return "pre-processing before quantization" not in record.getMessage()

    root = logging.getLogger()
    root.addFilter(advice)
    try:
        yield
    finally:
        root.removeFilter(advice)


def _query_model(folder: Path) -> Path | None:
    """The int8 query model of the export in ``folder``, quantized now if it is missing
    (a few seconds, once; written atomically); ``None`` when it cannot be made (the quantizer
    or the ``onnx`` package missing, a read-only folder): queries then use the full model."""
    path = folder / QUERY_MODEL
    if path.is_file():
        return path
    try:
        import tempfile

        from onnxruntime.quantization import QuantType, quantize_dynamic

        with tempfile.TemporaryDirectory(dir=folder) as tmp, _quiet_quantizer():
            made = Path(tmp) / QUERY_MODEL
            quantize_dynamic(folder / "model.onnx", made, weight_type=QuantType.QInt8, per_channel=True)
            _fs.atomic_write(path, made.read_bytes(), durable=True)
    except Exception as exc:  # any failure only means the full model answers queries
        logging.getLogger(__name__).debug("no int8 query model in %s: %s", folder, exc)
        return None
    return path


def _session(path: Path, threads: int) -> Any:
    """An ONNX Runtime session of ``path`` with ``threads`` intra-op threads.

    The graph optimizations ONNX Runtime applies at load (about a quarter of the load time)
    are done once: the optimized graph is saved beside the model, named by the runtime's
    version and the machine (what it may depend on), and later sessions load it with
    optimizations off. A missing or unwritable cache only means optimizing at each load."""
    try:
        import onnxruntime
    except ImportError as exc:
        raise ModelError("onnxruntime and tokenizers are needed: pip install 'local-ai-memory[embeddings]'") from exc
    import platform

    def options(level: Any, save_to: str = "") -> Any:
        chosen = onnxruntime.SessionOptions()
        chosen.intra_op_num_threads = threads
        chosen.inter_op_num_threads = 1
        chosen.log_severity_level = 3
        chosen.graph_optimization_level = level
        if save_to:
            chosen.optimized_model_filepath = save_to
        return chosen

    levels = onnxruntime.GraphOptimizationLevel
    providers = ["CPUExecutionProvider"]
    optimized = path.with_name(f"{path.stem}.opt-{onnxruntime.__version__}-{platform.machine() or 'cpu'}.onnx")
    fresh = False
    with contextlib.suppress(OSError):
        fresh = optimized.stat().st_mtime_ns >= path.stat().st_mtime_ns
    if fresh:
        try:
            return onnxruntime.InferenceSession(str(optimized), options(levels.ORT_DISABLE_ALL), providers=providers)
        except Exception as exc:  # a damaged cache is made again below
            logging.getLogger(__name__).debug("optimized model %s not loaded: %s", optimized, exc)
    import tempfile

    try:
        scratch = tempfile.TemporaryDirectory(dir=path.parent)
    except OSError:  # a read-only export: optimize at each load
        return onnxruntime.InferenceSession(str(path), options(levels.ORT_ENABLE_EXTENDED), providers=providers)
    with scratch as tmp:
        saved = Path(tmp) / optimized.name
        # EXTENDED, not ALL: ALL may add layout changes tied to this CPU, and the file is reused
        session = onnxruntime.InferenceSession(
            str(path), options(levels.ORT_ENABLE_EXTENDED, str(saved)), providers=providers
        )
        with contextlib.suppress(OSError):
            _fs.atomic_write(optimized, saved.read_bytes(), durable=True)
            _drop_stale_graphs(optimized, f"{path.stem}.opt-", f"-{platform.machine() or 'cpu'}.onnx")
    return session


def _drop_stale_graphs(current: Path, prefix: str, suffix: str) -> None:
    """Delete this machine's optimized graphs of ``current``'s model saved by other ONNX Runtime
    versions: after an upgrade nothing loads them again, and each is as large as the model.
    Graphs of other machines (a folder shared over the network) are left to their owners."""
    for other in current.parent.glob(f"{prefix}*{suffix}"):
        if other.name != current.name:
            with contextlib.suppress(StorageError):
                _fs.remove(other)


class OnnxModelEmbedder:
    """all-MiniLM-L6-v2 from an :func:`export_model` folder: ONNX Runtime, ``tokenizers`` and
    numpy, no torch. Loads on first use; thread-safe. ``max_chars`` cuts texts like the torch
    embedder does; ``threads`` is ONNX Runtime's intra-op thread count."""

    model_name = MODEL_NAME
    dimension = 384

    def __init__(
        self,
        folder: Path | None = None,
        *,
        threads: int = 1,
        batch_size: int = 32,
        max_chars: int = 4000,
        quantized_queries: bool = False,
    ) -> None:
        if threads < 1 or batch_size < 1 or max_chars < 1:
            raise InvalidInputError("threads, batch_size and max_chars must be positive")
        self.folder = folder if folder is not None else export_dir()
        self.threads = threads
        self.batch_size = batch_size
        self.max_chars = max_chars
        self.quantized_queries = quantized_queries
        self._lock = threading.Lock()
        self._loaded: tuple[Any, Any] | None = None
        self._query: tuple[Any, Any] | None = None
        self._tokens: Any = None

    def __repr__(self) -> str:
        return f"OnnxModelEmbedder({str(self.folder)!r})"

    def _load(self) -> tuple[Any, Any]:
        """The full-precision session (passages) and the tokenizer."""
        with self._lock:
            if self._loaded is None:
                tokenizer = self._tokenizer()
                self._loaded = (_session(self.folder / "model.onnx", self.threads), tokenizer)
            return self._loaded

    def _load_query(self) -> tuple[Any, Any]:
        """The session queries run on: the int8 model (:data:`QUERY_MODEL`, made once from the
        export when missing) when it can be had, else the full-precision one."""
        with self._lock:
            if self._query is None:
                tokenizer = self._tokenizer()
                path = _query_model(self.folder) if self.quantized_queries else None
                if path is None:
                    self._query = self._loaded or (_session(self.folder / "model.onnx", self.threads), tokenizer)
                else:
                    self._query = (_session(path, self.threads), tokenizer)
            return self._query

    def _tokenizer(self) -> Any:
        """The fast tokenizer of the export (``tokenizers`` alone, no transformers); loaded once."""
        if self._tokens is None:
            meta = _exported(self.folder)
            if meta is None:
                raise ModelError(f"no ONNX export in {self.folder} (run `local-ai-memory index` in hybrid mode)")
            try:
                from tokenizers import Tokenizer
            except ImportError as exc:
                raise ModelError(
                    "onnxruntime and tokenizers are needed: pip install 'local-ai-memory[embeddings]'"
                ) from exc
            tokenizer = Tokenizer.from_file(str(self.folder / "tokenizer.json"))
            tokenizer.enable_truncation(max_length=int(meta.get("max_length", 256)))
            tokenizer.enable_padding()
            self._tokens = tokenizer
        return self._tokens

    def count_pieces(self, words: Sequence[str]) -> list[int]:
        """How many word pieces the model makes of each of ``words`` (without its start and end
        marks), by the export's own tokenizer: hybrid indexing cuts passages to what the model
        reads (:mod:`local_ai_memory._knowledge.passages`). Loads the tokenizer only."""
        unique = list(dict.fromkeys(words))
        if not unique:
            return []
        tokenizer = self._tokenizer()
        with self._lock:  # one tokenizer, padding settings shared
            encoded = tokenizer.encode_batch(unique, add_special_tokens=False)
        sizes = {word: sum(e.attention_mask) for word, e in zip(unique, encoded, strict=True)}
        return [sizes[word] for word in words]

    def _encode(self, texts: list[str], loaded: tuple[Any, Any] | None = None) -> npt.NDArray[np.float32]:
        session, tokenizer = loaded if loaded is not None else self._load()
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

    def embed_query(self, text: str) -> list[float]:
        """The vector of one search query, by the int8 query model (see :data:`QUERY_MODEL`):
        half the time of :meth:`embed` per query, and a process that only searches never loads
        the 90 MB full-precision model."""
        try:
            vector: list[float] = self._encode([text[: self.max_chars]], self._load_query())[0].tolist()
        except ModelError:
            raise
        except Exception as exc:
            raise ModelError(f"embedding failed: {type(exc).__name__}: {exc}") from exc
        return vector

    async def aembed_query(self, text: str) -> list[float]:
        """Async twin of :meth:`embed_query` (in a worker thread)."""
        return await asyncio.to_thread(self.embed_query, text)


def local_embedder() -> Any:
    """The local MiniLM embedder: ONNX Runtime from the export when there is one (no torch
    loaded; queries by the int8 :data:`QUERY_MODEL` when ``$LOCAL_AI_MEMORY_ONNX_QUERIES`` is
    ``int8``), else the sentence-transformers one (torch)."""
    if _exported(export_dir()) is not None:
        return OnnxModelEmbedder(quantized_queries=os.environ.get("LOCAL_AI_MEMORY_ONNX_QUERIES", "full") == "int8")
    from local_ai_memory._models.sentence_transformers import SentenceTransformerEmbedder

    return SentenceTransformerEmbedder()
