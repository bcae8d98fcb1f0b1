"""Exact, offline token counting with tiktoken.

tiktoken fetches its encoding files over the network on first use. The library ships
``cl100k_base`` and ``o200k_base`` itself (``_data/*.bpe.xz``, packed by
``scripts/pack_encodings.py``) and builds the :class:`tiktoken.Encoding` from them, so counting
never downloads anything. The ids are identical to tiktoken's own encodings (a test checks the
rebuilt files against the SHA-256 hashes tiktoken expects).

>>> TokenCounter().count("hello world")
2
"""

from __future__ import annotations

import base64
import functools
import lzma
from importlib import resources

import tiktoken

from local_ai_memory._shared.errors import InvalidInputError

__all__ = ["TokenCounter", "load_encoding"]

_ENDOFTEXT = "<|endoftext|>"
_ENDOFPROMPT = "<|endofprompt|>"

# Pattern strings and special tokens as defined by tiktoken_ext.openai_public.
_SPECS: dict[str, tuple[str, dict[str, int]]] = {
    "cl100k_base": (
        r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
        r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s""",
        {
            _ENDOFTEXT: 100257,
            "<|fim_prefix|>": 100258,
            "<|fim_middle|>": 100259,
            "<|fim_suffix|>": 100260,
            _ENDOFPROMPT: 100276,
        },
    ),
    "o200k_base": (
        "|".join(
            [
                r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
                r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
                r"""\p{N}{1,3}""",
                r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
                r"""\s*[\r\n]+""",
                r"""\s+(?!\S)""",
                r"""\s+""",
            ]
        ),
        {_ENDOFTEXT: 199999, _ENDOFPROMPT: 200018},
    ),
}


def packed_ranks(name: str) -> list[bytes]:
    """The token byte strings of encoding ``name`` in rank order, read from the shipped file."""
    if name not in _SPECS:
        raise InvalidInputError(f"unknown encoding {name!r}: choose one of {sorted(_SPECS)}")
    blob = lzma.decompress(resources.files(__package__).joinpath(f"_data/{name}.bpe.xz").read_bytes())
    tokens: list[bytes] = []
    position = 0
    while position < len(blob):
        length = blob[position]
        tokens.append(blob[position + 1 : position + 1 + length])
        position += 1 + length
    return tokens


def official_file_bytes(name: str) -> bytes:
    """Rebuild the original ``{name}.tiktoken`` file (base64 token, space, rank per line)."""
    lines = (base64.b64encode(token) + b" " + str(rank).encode() for rank, token in enumerate(packed_ranks(name)))
    return b"\n".join(lines) + b"\n"


@functools.cache
def load_encoding(name: str = "cl100k_base") -> tiktoken.Encoding:
    """Return the tiktoken encoding ``name`` built from the shipped data (cached per process)."""
    pattern, special = _SPECS.get(name, ("", {}))
    ranks = {token: rank for rank, token in enumerate(packed_ranks(name))}
    return tiktoken.Encoding(name=name, pat_str=pattern, mergeable_ranks=ranks, special_tokens=special)


class TokenCounter:
    """Counts, encodes and truncates text in tokens of one encoding.

    Special-token text such as ``<|endoftext|>`` inside memory files is counted as ordinary
    text, so hostile content cannot make counting fail.
    """

    def __init__(self, encoding: str = "cl100k_base") -> None:
        self.encoding_name = encoding
        self._encoding = load_encoding(encoding)

    def __repr__(self) -> str:
        return f"TokenCounter({self.encoding_name!r})"

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``."""
        return self._encoding.encode_ordinary(text)

    def decode(self, tokens: list[int]) -> str:
        """Text of token ids (invalid UTF-8 at a cut is replaced)."""
        return self._encoding.decode(tokens, errors="replace")

    def token_bytes(self, token: int) -> bytes:
        """The bytes one token id stands for (a part of a character for some ids)."""
        return self._encoding.decode_single_token_bytes(token)

    def count(self, text: str) -> int:
        """Number of tokens in ``text``."""
        return len(self._encoding.encode_ordinary(text))

    def truncate(self, text: str, max_tokens: int, *, marker: str = "…") -> str:
        """``text`` cut to at most ``max_tokens`` tokens, ending in ``marker`` when cut."""
        if max_tokens <= 0:
            return ""
        tokens = self.encode(text)
        if len(tokens) <= max_tokens:
            return text
        room = max(0, max_tokens - self.count(marker))
        cut = self.decode(tokens[:room]).rstrip("\ufffd")
        while cut and self.count(cut + marker) > max_tokens:
            cut = cut[:-1]
        return cut + marker
