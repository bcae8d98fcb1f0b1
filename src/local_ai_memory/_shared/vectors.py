"""Rules every vector cache shares: the embedder's identity, text keys, unit rows.

A vector is kept by the SHA-256 of its text (:func:`text_digest`), so a note whose text is
unchanged never costs a second call to the embedder; what an embedder answers is checked and
scaled to unit length (:func:`unit_vectors`) before anything keeps it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from local_ai_memory._shared.errors import InvalidInputError, ModelError
from local_ai_memory._shared.models import Embedder

__all__ = [
    "QueryEmbedding",
    "aquery_vector",
    "model_id_of",
    "normalize_rows",
    "query_vector",
    "stacked",
    "text_digest",
    "text_hash",
    "unit_vectors",
]


def text_digest(text: str) -> str:
    """The key of a text's vector (texts with lone surrogates hash too)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def unit_vectors(texts: Sequence[str], raw: object, embedder: str = "the embedder") -> npt.NDArray[np.float32]:
    """The embedder's answer for ``texts`` as unit rows; :class:`ModelError` (naming
    ``embedder``) unless it is one finite, non-empty vector per text. Every vector cache checks
    answers through this one rule before keeping anything."""
    try:
        array = np.asarray(raw, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise ModelError(f"{embedder} returned something that is not a list of vectors") from exc
    if array.ndim != 2 or array.shape[0] != len(texts) or array.shape[1] == 0:
        raise ModelError(f"{embedder} returned shape {array.shape} for {len(texts)} texts")
    if not np.all(np.isfinite(array)):
        raise ModelError(f"{embedder} returned non-finite values")
    return normalize_rows(array)


def stacked(vectors: Mapping[str, npt.NDArray[np.float32]], digests: Sequence[str]) -> npt.NDArray[np.float32]:
    """The vectors of ``digests`` as one matrix, in order (``(0, 0)`` for none)."""
    if not digests:
        return np.zeros((0, 0), dtype=np.float32)
    return np.stack([vectors[digest] for digest in digests])


def query_vector(embedder: Embedder, text: str) -> npt.NDArray[np.float32]:
    """The checked unit vector of the query ``text``: by the embedder's own ``embed_query``
    when it has one (a model may embed queries its own way, e.g. the local ONNX one with a
    faster int8 model), else by ``embed([text])``."""
    own = getattr(embedder, "embed_query", None)
    raw = [own(text)] if callable(own) else embedder.embed([text])
    vector: npt.NDArray[np.float32] = unit_vectors([text], raw)[0]
    return vector


async def aquery_vector(embedder: Embedder, text: str) -> npt.NDArray[np.float32]:
    """Async twin of :func:`query_vector` (``aembed_query``, else ``aembed``)."""
    own = getattr(embedder, "aembed_query", None)
    raw = [await own(text)] if callable(own) else await embedder.aembed([text])
    vector: npt.NDArray[np.float32] = unit_vectors([text], raw)[0]
    return vector


class QueryEmbedding:
    """``embed_query`` and its async twin for a vector cache with an ``embedder``: a query's
    vector is checked like any other and not kept (queries rarely repeat)."""

    embedder: Embedder

    def embed_query(self, text: str) -> npt.NDArray[np.float32]:
        return query_vector(self.embedder, text)

    async def aembed_query(self, text: str) -> npt.NDArray[np.float32]:
        return await aquery_vector(self.embedder, text)


def model_id_of(embedder: object) -> str:
    """The name recorded for ``embedder``: its ``model_name`` attribute, else its class name."""
    name = getattr(embedder, "model_name", None)
    if isinstance(name, str) and name:
        return name
    kind = type(embedder)
    return f"{kind.__module__}.{kind.__qualname__}"


def text_hash(model: str, text: str) -> str:
    """Cache key of ``text`` embedded by ``model`` (hex SHA-256)."""
    digest = hashlib.sha256(model.encode("utf-8"))
    digest.update(b"\x00")
    digest.update(text.encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def normalize_rows(matrix: npt.ArrayLike) -> npt.NDArray[np.float32]:
    """``matrix`` as float32 with every row scaled to unit length (all-zero rows stay zero)."""
    array = np.asarray(matrix, dtype=np.float32)
    if array.ndim == 1:
        array = array.reshape(1, -1)
    if array.ndim != 2:
        raise InvalidInputError(f"expected a 2-D matrix of vectors, got {array.ndim} dimensions")
    norms = np.linalg.norm(array, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    out: npt.NDArray[np.float32] = (array / norms).astype(np.float32, copy=False)
    return out
