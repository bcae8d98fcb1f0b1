"""The local-ai-memory demo (grows with the product; run it with ./scripts/demo)."""

from __future__ import annotations

import argparse
import inspect
import json
import tempfile
from pathlib import Path

from local_ai_memory import DirectoryGuard, MemoryConfig, TokenCounter, _fs, scope_name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data-dir", type=Path, default=None, help="where to write (default: a new temp folder)")
    args = parser.parse_args()
    root = args.data_dir or Path(tempfile.mkdtemp(prefix="local-ai-memory-demo-"))
    config = MemoryConfig(runtime_data_dir=root)
    guard = DirectoryGuard(config.runtime_data_dir)
    counter = TokenCounter(config.token_encoding)

    print(f"data root: {guard.root}")
    doc = inspect.getdoc(json) or ""
    print(f"json module docstring: {len(doc)} characters, {counter.count(doc)} tokens ({counter.encoding_name})")
    state = guard.resolve("memory", "state", f"{scope_name('alice', 'demo')}.json")
    _fs.atomic_write(state, json.dumps({"format_version": 1, "state": {"current_task": "demo"}}).encode())
    print(f"wrote {state.relative_to(guard.root)}: {state.read_text()}")


if __name__ == "__main__":
    main()
