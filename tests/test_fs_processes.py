"""The write seam under real processes: concurrent read-modify-write and SIGKILL mid-write."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from local_ai_memory._shared import fs as _fs

RMW_WORKER = """
import json, sys
from pathlib import Path
from local_ai_memory._shared import fs as _fs

target, label, count = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])

def bump(old):
    data = json.loads(old) if old else {"total": 0, "by": {}}
    data["total"] += 1
    data["by"][label] = data["by"].get(label, 0) + 1
    return json.dumps(data).encode()

for _ in range(count):
    _fs.update_bytes(target, bump)
"""

KILL_WORKER = """
import json, sys
from pathlib import Path
from local_ai_memory._shared import fs as _fs

target = Path(sys.argv[1])
blobs = [json.dumps({"v": letter, "body": letter * 400_000}).encode() for letter in "AB"]
print("ready", flush=True)
i = 0
while True:
    _fs.atomic_write(target, blobs[i % 2])
    i += 1
"""


def test_two_processes_apply_every_update(tmp_path: Path) -> None:
    target = tmp_path / "shared.json"
    workers = [
        subprocess.Popen([sys.executable, "-c", RMW_WORKER, str(target), label, "1000"]) for label in ("p1", "p2")
    ]
    for worker in workers:
        assert worker.wait(timeout=240) == 0
    data = json.loads(target.read_bytes())
    assert data == {"total": 2000, "by": {"p1": 1000, "p2": 1000}}
    assert [p.name for p in tmp_path.iterdir() if _fs.is_temp_file(p.name)] == []


@pytest.mark.parametrize("kills", [60])
def test_sigkill_mid_write_never_tears_the_file(tmp_path: Path, kills: int) -> None:
    target = tmp_path / "state.json"
    _fs.atomic_write(target, json.dumps({"v": "start", "body": ""}).encode())
    rng = random.Random(7)
    deadline = time.monotonic() + 120
    seen: set[str] = set()
    done = orphans = 0
    while done < kills and time.monotonic() < deadline:
        with subprocess.Popen(
            [sys.executable, "-c", KILL_WORKER, str(target)], stdout=subprocess.PIPE, text=True
        ) as writer:
            assert writer.stdout is not None
            assert writer.stdout.readline().strip() == "ready"
            time.sleep(rng.uniform(0.0, 0.05))
            writer.send_signal(signal.SIGKILL)
            writer.wait()
        data = json.loads(target.read_bytes())  # never torn: always parses
        assert data["v"] in {"start", "A", "B"}
        assert data["body"] in {"", "A" * 400_000, "B" * 400_000}
        seen.add(data["v"])
        orphans += _fs.cleanup_temp_files(tmp_path)
        assert [p.name for p in tmp_path.iterdir() if _fs.is_temp_file(p.name)] == []
        done += 1
    assert done == kills, f"only {done} kills fit in the time bound"
    assert seen & {"A", "B"}, "no kill landed after a completed write"
    assert orphans > 0, "no kill landed in the middle of a write"
    print(f"{done} kills, {orphans} interrupted writes cleaned up, final versions seen: {sorted(seen)}")
