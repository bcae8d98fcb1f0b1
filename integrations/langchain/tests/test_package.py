"""The package surface: every exported name resolves, and importing it needs only langchain-core."""

from __future__ import annotations

import subprocess
import sys

import langchain_local_ai_memory


def test_every_exported_name_resolves() -> None:
    for name in langchain_local_ai_memory.__all__:
        assert getattr(langchain_local_ai_memory, name) is not None


def test_import_does_not_pull_in_langchain_agents_or_llama_index() -> None:
    code = (
        "import sys, warnings; warnings.simplefilter('error'); "
        "import langchain_local_ai_memory as m; "
        "m.LocalMemoryRetriever; m.create_memory_tools; m.LocalMemoryChatMessageHistory; "
        "bad = sorted(k for k in sys.modules if k.startswith(('langchain.', 'llama_index')) or k == 'langchain'); "
        "print(bad); assert not bad, bad"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr + done.stdout
