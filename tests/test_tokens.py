"""Token counting: identical to tiktoken's official encodings, and never a download."""

from __future__ import annotations

import hashlib
import inspect
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import tiktoken
from tiktoken_ext import openai_public

from local_ai_memory import InvalidInputError, TokenCounter
from local_ai_memory._shared.tokens import _SPECS, official_file_bytes

ENCODINGS = ["cl100k_base", "o200k_base"]


def _official_definition(name: str, monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, Any], str]:
    """tiktoken's own definition of ``name``, capturing the file hash instead of downloading."""
    captured: dict[str, str] = {}

    def fake_load(url: str, expected_hash: str | None = None) -> dict[bytes, int]:
        captured["hash"] = expected_hash or ""
        return {}

    monkeypatch.setattr(openai_public, "load_tiktoken_bpe", fake_load)
    definition = getattr(openai_public, name)()
    return definition, captured["hash"]


@pytest.mark.parametrize("name", ENCODINGS)
def test_shipped_files_are_tiktokens_official_files(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    definition, expected_hash = _official_definition(name, monkeypatch)
    assert hashlib.sha256(official_file_bytes(name)).hexdigest() == expected_hash
    pattern, special = _SPECS[name]
    assert pattern == definition["pat_str"]
    assert special == definition["special_tokens"]


def _stdlib_texts() -> list[str]:
    import collections
    import json
    import pathlib

    texts = [inspect.getdoc(module) or "" for module in (json, pathlib, collections, inspect, os)]
    texts += ["", " ", "héllo wörld — ünïcode 你好世界 🎉🎉", "def f(x):\n\treturn x ** 2  # comment\n" * 5]
    texts.append("<|endoftext|> is plain text here")
    return texts


@pytest.mark.parametrize("name", ENCODINGS)
def test_ids_equal_the_official_encoding(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # llama-index-core (a test dependency only) ships tiktoken's original files in tiktoken's
    # cache layout; point tiktoken at them to get the official encoding without a download.
    import llama_index.core

    cache = Path(llama_index.core.__file__).parent / "_static" / "tiktoken_cache"
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(cache))
    official = tiktoken.get_encoding(name)
    counter = TokenCounter(name)
    for text in _stdlib_texts():
        assert counter.encode(text) == official.encode_ordinary(text)
        assert counter.count(text) == len(official.encode_ordinary(text))
        assert counter.decode(counter.encode(text)) == text


def test_counts_with_sockets_blocked_and_no_cache(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import socket, sys
        class Blocked(socket.socket):
            def __init__(self, *args, **kwargs):
                raise OSError("network access attempted")
        socket.socket = Blocked
        socket.create_connection = lambda *a, **k: (_ for _ in ()).throw(OSError("network access attempted"))
        sys.modules["llama_index"] = None  # prove the core does not lean on llama-index's copies
        from local_ai_memory import TokenCounter
        print(TokenCounter().count("hello world"), TokenCounter("o200k_base").count("hello world"))
        """
    )
    env = {**os.environ, "TIKTOKEN_CACHE_DIR": str(tmp_path / "empty-cache"), "DATA_GYM_CACHE_DIR": str(tmp_path)}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["2", "2"]
    assert not (tmp_path / "empty-cache").exists()


def test_truncate_respects_the_budget() -> None:
    counter = TokenCounter()
    text = inspect.getdoc(inspect) or ""
    assert counter.truncate(text, 10_000) == text
    for budget in (1, 2, 5, 17, 50):
        cut = counter.truncate(text, budget)
        assert counter.count(cut) <= budget
        assert cut.endswith("…")
    assert counter.truncate(text, 0) == ""
    assert counter.truncate("🎉" * 50, 7).endswith("…")


def test_unknown_encoding_is_a_clear_error() -> None:
    with pytest.raises(InvalidInputError, match="unknown encoding 'p50k_base'"):
        TokenCounter("p50k_base")
