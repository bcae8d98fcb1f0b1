"""An LLM and an embedder for any OpenAI-compatible HTTP server, without LangChain or LlamaIndex.

Local servers (Ollama, llama.cpp server, vLLM, LM Studio) speak the same ``/v1`` API as the
hosted service, so one small client covers them all. It is built on the official ``openai``
package, an optional extra (``pip install 'local-ai-memory[openai]'``) that is imported only
when a client is created. Local servers need no key: a placeholder is sent when none is given.

Each call opens its own HTTP client and closes it before returning, so no connection outlives
a call or an event loop (a local server answers a new connection in well under a millisecond).

Every failure (connection refused, timeout, an HTTP error, an empty answer) becomes a
:class:`~local_ai_memory.ModelError` whose message names the model and the server, so the
engines can fall back instead of crashing::

    llm = OpenAICompatibleLLM("http://127.0.0.1:8080/v1", "smollm2")
    print(llm.complete("Say hello"))

:func:`llm_from_env` and :func:`embedder_from_env` build clients from environment variables
(``LOCAL_AI_MEMORY_BASE_URL``, ``LOCAL_AI_MEMORY_MODEL``, ``LOCAL_AI_MEMORY_API_KEY``,
``LOCAL_AI_MEMORY_EMBEDDING_MODEL``) and return ``None`` when they are not set, which lets a
demo run offline by default and use a real model when one is configured.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from local_ai_memory._shared.errors import ConfigError, ModelError

if TYPE_CHECKING:
    import openai

__all__ = [
    "ENV_API_KEY",
    "ENV_BASE_URL",
    "ENV_EMBEDDING_MODEL",
    "ENV_MODEL",
    "OpenAICompatibleEmbedder",
    "OpenAICompatibleLLM",
    "embedder_from_env",
    "llm_from_env",
]

ENV_BASE_URL = "LOCAL_AI_MEMORY_BASE_URL"
ENV_MODEL = "LOCAL_AI_MEMORY_MODEL"
ENV_API_KEY = "LOCAL_AI_MEMORY_API_KEY"
ENV_EMBEDDING_MODEL = "LOCAL_AI_MEMORY_EMBEDDING_MODEL"
PLACEHOLDER_KEY = "not-needed"
_INSTALL_HINT = "the OpenAI-compatible client needs the 'openai' package: pip install 'local-ai-memory[openai]'"


def _import_openai() -> Any:
    try:
        import openai
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise ImportError(_INSTALL_HINT) from exc
    return openai


def _describe_error(exc: BaseException, what: str) -> str:
    status = getattr(exc, "status_code", None)
    message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    if status is not None:
        return f"{what}: HTTP {status}: {message}"
    return f"{what}: {type(exc).__name__}: {message}"


class _Client:
    """Shared set-up: argument checks, the sync client, and one async client per event loop."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None,
        timeout: float,
        max_retries: int,
        default_headers: Mapping[str, str] | None,
    ) -> None:
        if not isinstance(base_url, str) or not base_url.strip():
            raise ConfigError("base_url: a server URL such as 'http://127.0.0.1:8080/v1' is required")
        if not isinstance(model, str) or not model.strip():
            raise ConfigError("model: a model name is required")
        if timeout <= 0:
            raise ConfigError(f"timeout: must be positive, got {timeout!r}")
        if max_retries < 0:
            raise ConfigError(f"max_retries: must be zero or more, got {max_retries!r}")
        self._openai = _import_openai()
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.timeout = float(timeout)
        self.max_retries = max_retries
        self._kwargs: dict[str, Any] = {
            "base_url": self.base_url,
            "api_key": api_key or PLACEHOLDER_KEY,
            "timeout": self.timeout,
            "max_retries": max_retries,
            "default_headers": dict(default_headers) if default_headers else None,
        }

    def __repr__(self) -> str:
        return f"{type(self).__name__}(base_url={self.base_url!r}, model={self.model!r})"

    @property
    def _what(self) -> str:
        return f"model {self.model!r} at {self.base_url}"

    def _sync_client(self) -> openai.OpenAI:
        """A client for one call, used as a context manager so its connections are always closed."""
        client: openai.OpenAI = self._openai.OpenAI(**self._kwargs)
        return client

    def _async_client(self) -> openai.AsyncOpenAI:
        """Async twin of :meth:`_sync_client` (an async connection pool belongs to one event loop)."""
        client: openai.AsyncOpenAI = self._openai.AsyncOpenAI(**self._kwargs)
        return client

    def _wrap(self, exc: Exception) -> ModelError:
        return ModelError(_describe_error(exc, self._what))


class OpenAICompatibleLLM(_Client):
    """The :class:`~local_ai_memory.LLM` protocol over ``/v1/chat/completions``.

    The prompt is sent as a single user message (after an optional ``system`` message);
    ``temperature`` defaults to 0 so summaries and selections are as repeatable as the server allows.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        *,
        timeout: float = 60.0,
        temperature: float = 0.0,
        max_tokens: int = 1024,
        system: str | None = None,
        max_retries: int = 2,
        default_headers: Mapping[str, str] | None = None,
    ) -> None:
        if max_tokens <= 0:
            raise ConfigError(f"max_tokens: must be positive, got {max_tokens!r}")
        super().__init__(base_url, model, api_key, timeout, max_retries, default_headers)
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.system = system

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **kwargs: Any) -> OpenAICompatibleLLM | None:
        """Same as :func:`llm_from_env`."""
        return llm_from_env(environ, **kwargs)

    def _request(self, prompt: str) -> dict[str, Any]:
        if not isinstance(prompt, str):
            raise ModelError(f"{self._what}: the prompt must be a string, got {type(prompt).__name__}")
        messages: list[dict[str, str]] = []
        if self.system:
            messages.append({"role": "system", "content": self.system})
        messages.append({"role": "user", "content": prompt})
        return {
            "model": self.model,
            "messages": messages,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
        }

    def _answer(self, response: Any) -> str:
        choices = getattr(response, "choices", None) or []
        if not choices:
            raise ModelError(f"{self._what}: the server returned no choices")
        content = getattr(choices[0].message, "content", None)
        if not isinstance(content, str):
            raise ModelError(f"{self._what}: the answer has no text content")
        return content

    def complete(self, prompt: str) -> str:
        """Return the model's answer to ``prompt``; raises :class:`ModelError` on any failure."""
        request = self._request(prompt)
        try:
            with self._sync_client() as client:
                response = client.chat.completions.create(**request)
        except self._openai.OpenAIError as exc:
            raise self._wrap(exc) from exc
        return self._answer(response)

    async def acomplete(self, prompt: str) -> str:
        """Async twin of :meth:`complete`."""
        request = self._request(prompt)
        try:
            async with self._async_client() as client:
                response = await client.chat.completions.create(**request)
        except self._openai.OpenAIError as exc:
            raise self._wrap(exc) from exc
        return self._answer(response)


class OpenAICompatibleEmbedder(_Client):
    """The :class:`~local_ai_memory.Embedder` protocol over ``/v1/embeddings``, in batches."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        *,
        timeout: float = 60.0,
        batch_size: int = 64,
        max_retries: int = 2,
        default_headers: Mapping[str, str] | None = None,
    ) -> None:
        if batch_size <= 0:
            raise ConfigError(f"batch_size: must be positive, got {batch_size!r}")
        super().__init__(base_url, model, api_key, timeout, max_retries, default_headers)
        self.batch_size = batch_size

    def _batches(self, texts: list[str]) -> list[list[str]]:
        if not isinstance(texts, list) or not all(isinstance(text, str) for text in texts):
            raise ModelError(f"{self._what}: embed() takes a list of strings")
        return [texts[i : i + self.batch_size] for i in range(0, len(texts), self.batch_size)]

    def _vectors(self, response: Any, expected: int) -> list[list[float]]:
        data = sorted(getattr(response, "data", None) or [], key=lambda item: item.index)
        vectors: list[list[float]] = []
        for item in data:
            values = item.embedding
            if isinstance(values, list) and values and isinstance(values[0], list):
                raise ModelError(
                    f"{self._what}: the server returned one vector per token instead of one per text; "
                    "enable pooling on the server (llama.cpp: --pooling mean)"
                )
            try:
                vectors.append([float(x) for x in values])
            except (TypeError, ValueError) as exc:
                raise ModelError(
                    f"{self._what}: the server returned an embedding that is not a list of numbers"
                ) from exc
        if len(vectors) != expected:
            raise ModelError(f"{self._what}: asked for {expected} embeddings, got {len(vectors)}")
        if len({len(v) for v in vectors}) > 1:
            raise ModelError(f"{self._what}: the server returned vectors of different lengths")
        return vectors

    def embed(self, texts: list[str]) -> list[list[float]]:
        """One vector per text, in order; raises :class:`ModelError` on any failure."""
        out: list[list[float]] = []
        batches = self._batches(texts)
        try:
            with self._sync_client() as client:
                for batch in batches:
                    response = client.embeddings.create(model=self.model, input=batch)
                    out.extend(self._vectors(response, len(batch)))
        except self._openai.OpenAIError as exc:
            raise self._wrap(exc) from exc
        return out

    async def aembed(self, texts: list[str]) -> list[list[float]]:
        """Async twin of :meth:`embed`."""
        out: list[list[float]] = []
        batches = self._batches(texts)
        try:
            async with self._async_client() as client:
                for batch in batches:
                    response = await client.embeddings.create(model=self.model, input=batch)
                    out.extend(self._vectors(response, len(batch)))
        except self._openai.OpenAIError as exc:
            raise self._wrap(exc) from exc
        return out


def _env(environ: Mapping[str, str] | None, name: str) -> str | None:
    value = (os.environ if environ is None else environ).get(name, "").strip()
    return value or None


def llm_from_env(environ: Mapping[str, str] | None = None, **kwargs: Any) -> OpenAICompatibleLLM | None:
    """An :class:`OpenAICompatibleLLM` from ``LOCAL_AI_MEMORY_BASE_URL`` and ``LOCAL_AI_MEMORY_MODEL``.

    ``LOCAL_AI_MEMORY_API_KEY`` is optional. Returns ``None`` when the URL or the model is unset,
    so callers fall back to the offline behaviour. ``kwargs`` go to the constructor.
    """
    base_url, model = _env(environ, ENV_BASE_URL), _env(environ, ENV_MODEL)
    if base_url is None or model is None:
        return None
    return OpenAICompatibleLLM(base_url, model, _env(environ, ENV_API_KEY), **kwargs)


def embedder_from_env(environ: Mapping[str, str] | None = None, **kwargs: Any) -> OpenAICompatibleEmbedder | None:
    """An :class:`OpenAICompatibleEmbedder` from ``LOCAL_AI_MEMORY_BASE_URL`` and ``LOCAL_AI_MEMORY_EMBEDDING_MODEL``.

    Returns ``None`` when either is unset.
    """
    base_url, model = _env(environ, ENV_BASE_URL), _env(environ, ENV_EMBEDDING_MODEL)
    if base_url is None or model is None:
        return None
    return OpenAICompatibleEmbedder(base_url, model, _env(environ, ENV_API_KEY), **kwargs)
