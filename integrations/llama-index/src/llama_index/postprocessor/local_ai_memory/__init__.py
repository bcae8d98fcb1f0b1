"""local-ai-memory for LlamaIndex (postprocessor)."""

from __future__ import annotations

__all__: list[str] = []
