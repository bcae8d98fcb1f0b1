"""local-ai-memory for LlamaIndex (memory)."""

from __future__ import annotations

__all__: list[str] = []
