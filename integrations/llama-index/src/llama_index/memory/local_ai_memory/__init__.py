"""LlamaIndex memory block of local-ai-memory: the L1 working memory of one user and session."""

from __future__ import annotations

from ._block import LocalWorkingMemoryBlock

__all__ = ["LocalWorkingMemoryBlock"]
