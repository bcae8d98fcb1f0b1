"""Runtime memory under real processes: concurrent update_state, SIGKILL mid-write."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from local_ai_memory._runtime.scope import MemoryManager
from local_ai_memory._shared import fs as _fs
from local_ai_memory._shared.config import MemoryConfig
from local_ai_memory._shared.naming import DirectoryGuard
from local_ai_memory.backends import FileRuntimeBackend

UPDATER = textwrap.dedent(
    """
    import sys
    from local_ai_memory._shared.config import MemoryConfig
    from local_ai_memory._shared.naming import DirectoryGuard
    from local_ai_memory._runtime.scope import MemoryManager
    from local_ai_memory.backends import FileRuntimeBackend

    root, label, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    config = MemoryConfig(fsync=True)
    backend = FileRuntimeBackend.from_config(config, DirectoryGuard(root))
    manager = MemoryManager(backend, config).scoped("shared", "session")
    for n in range(count):
        manager.update_state({f"{label}-{n}": n, "last": label})
    """
)


def test_four_processes_times_500_updates_lose_nothing(tmp_path: Path) -> None:
    workers = [subprocess.Popen([sys.executable, "-c", UPDATER, str(tmp_path), f"p{i}", "500"]) for i in range(4)]
    for worker in workers:
        assert worker.wait(timeout=280) == 0
    state = (
        MemoryManager(FileRuntimeBackend.from_config(MemoryConfig(), DirectoryGuard(tmp_path)))
        .scoped("shared", "session")
        .get_state()
    )
    expected = {f"p{i}-{n}": n for i in range(4) for n in range(500)}
    assert {key: value for key, value in state.items() if key != "last"} == expected
    folder = tmp_path / "memory/state"
    assert [p.name for p in folder.iterdir() if _fs.is_temp_file(p.name)] == []
    assert not list(folder.glob("*.bak"))


KILLED = textwrap.dedent(
    """
    import sys
    from local_ai_memory._shared.config import MemoryConfig
    from local_ai_memory._shared.naming import DirectoryGuard
    from local_ai_memory._runtime.scope import MemoryManager
    from local_ai_memory.backends import FileRuntimeBackend

    config = MemoryConfig(fsync=True)

    backend = FileRuntimeBackend.from_config(config, DirectoryGuard(sys.argv[1]))

    manager = MemoryManager(backend, config).scoped("u", "s")
    blobs = ["A" * 300_000, "B" * 300_000]
    manager.update_state({"warm": True})
    print("ready", flush=True)
    n = 0
    while True:
        manager.update_state({"n": n, "body": blobs[n % 2]})
        manager.update_working_memory(blobs[n % 2])
        n += 1
    """
)


def test_sigkill_mid_write_always_leaves_readable_state(tmp_path: Path) -> None:
    rng = random.Random(11)
    deadline = time.monotonic() + 150
    kills = 0
    last_n = -1
    while kills < 50 and time.monotonic() < deadline:
        with subprocess.Popen(
            [sys.executable, "-c", KILLED, str(tmp_path)], stdout=subprocess.PIPE, text=True
        ) as writer:
            assert writer.stdout is not None
            assert writer.stdout.readline().strip() == "ready"
            time.sleep(rng.uniform(0.0, 0.06))
            writer.send_signal(signal.SIGKILL)
            writer.wait()
        kills += 1
        raw = (tmp_path / "memory/state/u_s.json").read_bytes()
        stored = json.loads(raw)  # never torn
        assert stored["format_version"] == 1
        if "n" in stored["state"]:
            assert stored["state"]["body"] in ("A" * 300_000, "B" * 300_000)
            last_n = stored["state"]["n"]
        working = tmp_path / "memory/working/u_s.md"
        assert (working.read_text() if working.exists() else "") in ("", "A" * 300_000, "B" * 300_000)
    assert kills >= 50
    assert last_n >= 0  # some kills happened after real writes
    manager = MemoryManager(
        FileRuntimeBackend.from_config(MemoryConfig(fsync=False), DirectoryGuard(tmp_path)), MemoryConfig(fsync=False)
    ).scoped("u", "s")
    state = manager.get_state()
    assert state["warm"] is True
    for folder in ("state", "working"):
        assert not list((tmp_path / "memory" / folder).glob("*.bak"))
        # the first use in this process removed what the killed writers left behind
        assert [p.name for p in (tmp_path / "memory" / folder).iterdir() if _fs.is_temp_file(p.name)] == []
