"""The two model protocols the engines talk to.

The core never imports a model framework. An *LLM* is anything with ``complete`` and
``acomplete`` taking a prompt string and returning the answer text; an *embedder* turns a
batch of texts into vectors. The integrations adapt LangChain and LlamaIndex models to these,
and :mod:`local_ai_memory` ships an OpenAI-compatible client for use without either::

    class Echo:
        def complete(self, prompt: str) -> str:
            return prompt[-20:]

        async def acomplete(self, prompt: str) -> str:
            return self.complete(prompt)

    assert isinstance(Echo(), LLM)
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["LLM", "Embedder"]


@runtime_checkable
class LLM(Protocol):
    """A text-in, text-out language model."""

    def complete(self, prompt: str) -> str:
        """Return the model's answer to ``prompt``."""
        ...

    async def acomplete(self, prompt: str) -> str:
        """Async twin of :meth:`complete`."""
        ...


@runtime_checkable
class Embedder(Protocol):
    """A text embedding model: one vector per input text, all of one dimension."""

    def embed(self, texts: list[str]) -> list[list[float]]:
        """Return one vector per text, in order."""
        ...

    async def aembed(self, texts: list[str]) -> list[list[float]]:
        """Async twin of :meth:`embed`."""
        ...
