"""LangChain and LangGraph integration of local-ai-memory."""

from __future__ import annotations

__all__: list[str] = []
