"""LlamaIndex node postprocessor of local-ai-memory: LLM file selection (Stage 2) with a token budget."""

from __future__ import annotations

from .base import LocalMemoryFileSelector

__all__ = ["LocalMemoryFileSelector"]
