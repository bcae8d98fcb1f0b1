"""LlamaIndex retriever of local-ai-memory: a user's Markdown knowledge files as scored nodes.

Also home of the adapters from LlamaIndex LLMs and embed models to the core's model
protocols, which the other packages of this distribution reuse.
"""

from __future__ import annotations

from ._adapters import LlamaIndexEmbedderAdapter, LlamaIndexLLMAdapter, as_core_embedder, as_core_llm
from .base import LocalMemoryRetriever, node_id_for

__all__ = [
    "LlamaIndexEmbedderAdapter",
    "LlamaIndexLLMAdapter",
    "LocalMemoryRetriever",
    "as_core_embedder",
    "as_core_llm",
    "node_id_for",
]
