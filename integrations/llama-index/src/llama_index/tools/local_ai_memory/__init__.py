"""local-ai-memory for LlamaIndex (tools)."""

from __future__ import annotations

__all__: list[str] = []
