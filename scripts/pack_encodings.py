"""Pack tiktoken's official encoding files into the compact files shipped in the wheel.

tiktoken downloads ``cl100k_base.tiktoken`` and ``o200k_base.tiktoken`` on first use, which
fails offline. We ship them instead, in a smaller form: the ranks in those files are
``0..n-1`` in file order, so only the token bytes are kept, each prefixed by its length,
and the whole is LZMA-compressed. ``local_ai_memory._shared.tokens`` rebuilds the exact rank table
and checks it against the SHA-256 that tiktoken itself expects for the original file.

Usage (needs the original files, e.g. the copies llama-index-core ships)::

    python scripts/pack_encodings.py cl100k_base=PATH/TO/cl100k_base.tiktoken \
        o200k_base=PATH/TO/o200k_base.tiktoken
"""

from __future__ import annotations

import base64
import lzma
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "src" / "local_ai_memory" / "_data"


def pack(source: Path, name: str) -> Path:
    tokens: list[bytes] = []
    for rank, line in enumerate(source.read_bytes().splitlines()):
        token, stated = line.split()
        if int(stated) != rank:
            raise SystemExit(f"{source}: ranks are not contiguous at line {rank + 1}")
        tokens.append(base64.b64decode(token))
    body = b"".join(bytes([len(t)]) + t for t in tokens)
    target = OUT / f"{name}.bpe.xz"
    target.write_bytes(lzma.compress(body, preset=9 | lzma.PRESET_EXTREME))
    return target


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        name, _, path = arg.partition("=")
        print(pack(Path(path), name))
