"""local-ai-memory for LlamaIndex (retrievers)."""

from __future__ import annotations

__all__: list[str] = []
