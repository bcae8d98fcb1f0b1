"""Writer loops run by forked processes in the crash tests (see ``test_crash.py``).

Each loop writes versions ``n, n+1, ...`` of deterministic content and appends ``n`` (plus
anything the checker needs) to ``{root}/acks.log`` after the library call returned: what is
acknowledged there must survive any kill. ``n`` continues from the last acknowledgement, so
versions only grow across kills.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from pathlib import Path

from local_ai_memory._backends.files.vectors import EmbeddingCache
from local_ai_memory._knowledge.store import MemoryStore
from local_ai_memory._runtime.checkpoints import CheckpointRun
from local_ai_memory._runtime.messages import SessionMessageStore
from local_ai_memory._runtime.scope import MemoryManager
from local_ai_memory._runtime.tool_results import RetentionPolicy, ToolResultStore
from local_ai_memory._shared.config import MemoryConfig
from local_ai_memory._shared.naming import DirectoryGuard
from local_ai_memory._shared.tokens import TokenCounter
from local_ai_memory.backends import FileKnowledgeBackend, FileRuntimeBackend

USER, SESSION = "crash user", "s_1é"  # a name that needs encoding

TokenCounter().count("load the encoding once in the fork server, not in every writer")


def blob(n: int, size: int = 120_000) -> str:
    return chr(65 + n % 26) * size


def tool_output(n: int) -> str:
    return f"#{n} " + blob(n, 150_000)


def doc(n: int, slot: int) -> str:
    return f"# Doc {slot}\n\nversion tok{n}x slot{slot}\n\n" + "filler words here. " * (200 + n % 7)


class FakeEmbedder:
    """Deterministic 16-dimensional vectors from a hash (no model)."""

    model_name = "fake-hash-16"
    dimension = 16

    def embed(self, texts: list[str]) -> list[list[float]]:
        out = []
        for text in texts:
            digest = hashlib.sha256(text.encode()).digest()
            out.append([b / 255.0 + 0.01 for b in digest[:16]])
        return out

    async def aembed(self, texts: list[str]) -> list[list[float]]:
        return self.embed(texts)


def _ack(root: Path, text: str) -> None:
    fd = os.open(root / "acks.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, (text + "\n").encode())
    finally:
        os.close(fd)


def _next(root: Path) -> int:
    try:
        lines = (root / "acks.log").read_bytes().decode().split("\n")[:-1]
    except FileNotFoundError:
        return 0
    return int(lines[-1].split()[0]) + 1 if lines else 0


def manager(root: Path, fsync: bool) -> MemoryManager:
    return MemoryManager(
        FileRuntimeBackend.from_config(MemoryConfig(fsync=fsync), DirectoryGuard(root / "data")),
        MemoryConfig(fsync=fsync),
    ).scoped(USER, SESSION)


def run(workload: str, root_text: str, seed: int) -> None:
    root = Path(root_text)
    n = _next(root)
    if workload == "state":
        m = manager(root, True)
        while True:
            m.update_state({"n": n, "body": blob(n), f"k{n % 40}": n})
            _ack(root, str(n))
            n += 1
    elif workload == "working":
        m = manager(root, False)
        while True:
            m.update_working_memory(f"v{n}\n" + blob(n))
            _ack(root, str(n))
            n += 1
    elif workload == "plans":
        m = manager(root, True)
        while True:
            m.save_plan(f"p{n % 3}", {"n": n, "body": blob(n, 60_000)})
            _ack(root, str(n))
            n += 1
    elif workload == "tool_results":
        store = ToolResultStore(manager(root, False), RetentionPolicy(max_count=None, max_bytes=None))
        while True:
            reference = store.externalize("crash_tool", tool_output(n))
            import json

            _ack(root, f"{n} {json.loads(reference)['result_id']}")
            n += 1
    elif workload == "checkpoint":
        m = manager(root, True)
        with CheckpointRun(m, "crashrun", task="survive kills", handle_signals=False) as cp:
            while True:
                saved = cp.step(state={"last": n, "body": blob(n, 20_000)})
                _ack(root, f"{n} {saved.step}")
                n += 1
    elif workload == "knowledge":
        store = MemoryStore(
            FileKnowledgeBackend(DirectoryGuard(root / "data"), MemoryConfig(fsync=False)),
            MemoryConfig(fsync=False),
            categories=["knowledge"],
        )
        while True:
            store.write_file(f"knowledge/crash%20user_doc{n % 4}.md", doc(n, n % 4))
            _ack(root, str(n))
            n += 1
    elif workload == "embeddings":
        cache = EmbeddingCache(DirectoryGuard(root / "data"), FakeEmbedder(), MemoryConfig(fsync=False))
        while True:
            cache.vectors_for([(f"k{i}", f"text {n} {i}") for i in range(3)])
            _ack(root, str(n))
            n += 1
    elif workload == "session":
        messages = SessionMessageStore(
            FileRuntimeBackend.from_config(MemoryConfig(fsync=False), DirectoryGuard(root / "data")),
            MemoryConfig(fsync=False),
            user_id=USER,
            session_id=SESSION,
        )
        while True:
            messages.append([{"role": "user", "content": f"m{n} " + blob(n, 30_000)}])
            _ack(root, str(n))
            n += 1
    elif workload == "session_compact":
        messages = SessionMessageStore(
            FileRuntimeBackend.from_config(MemoryConfig(fsync=False), DirectoryGuard(root / "data")),
            MemoryConfig(fsync=False),
            user_id=USER,
            session_id=SESSION,
        )
        while True:
            messages.append([{"role": "user", "content": f"m{n} " + blob(n, 30_000)}])
            messages.compact(keep_last=3)
            _ack(root, str(n))
            n += 1
    elif workload == "compressor":
        from local_ai_memory._runtime.compressor import WorkingMemoryCompressor

        compressor = WorkingMemoryCompressor(manager(root, False), None, target_tokens=300)
        while True:
            result = compressor.compress(
                [{"role": "user", "content": f"Please handle ticket T{n} now"}]
                + [{"role": "tool", "name": "read", "content": f"found detail {i} of T{n}"} for i in range(30)]
            )
            if result.ok:
                _ack(root, str(n))
            n += 1
    elif workload == "sigterm":
        m = manager(root, True)
        with CheckpointRun(m, "termrun", task="stop on SIGTERM") as cp:
            _ack(root, f"{n} entered")
            while True:
                cp.step(state={"last": n, "body": blob(n, 50_000)})
                n += 1
    elif workload == "sigterm_async":
        m = manager(root, True)

        async def main() -> None:
            nonlocal n
            async with CheckpointRun(m, "termrun", task="stop on SIGTERM") as cp:
                _ack(root, f"{n} entered")
                while True:
                    await cp.astep(state={"last": n, "body": blob(n, 50_000)})
                    n += 1

        asyncio.run(main())
    else:
        raise ValueError(workload)
