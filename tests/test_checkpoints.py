"""L2 checkpoints: save per step, completed / interrupted / in_progress, resume, real signals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from local_ai_memory._runtime.checkpoints import (
    CheckpointRun,
    RunInterrupted,
    afind_resumable,
    alist_checkpoints,
    aload_checkpoint,
    amark_status,
    asave_checkpoint,
    find_resumable,
    list_checkpoints,
    load_checkpoint,
    mark_status,
    raise_on_signals,
    save_checkpoint,
)
from local_ai_memory._runtime.scope import MemoryManager
from local_ai_memory._shared import fs as _fs
from local_ai_memory._shared.config import MemoryConfig
from local_ai_memory._shared.errors import InvalidInputError, RecordNotFoundError
from local_ai_memory._shared.naming import DirectoryGuard
from local_ai_memory._shared.records import AgentCheckpoint
from local_ai_memory.backends import FileRuntimeBackend


@pytest.fixture
def manager(tmp_path: Path) -> MemoryManager:
    return MemoryManager(
        FileRuntimeBackend.from_config(MemoryConfig(fsync=False), DirectoryGuard(tmp_path)), MemoryConfig(fsync=False)
    ).scoped("alice", "s1")


def test_save_load_and_mark(manager: MemoryManager) -> None:
    saved = save_checkpoint(manager, AgentCheckpoint(plan_id="job", task="fix login", step=2, plan=["a", "b"]))
    assert saved.pid == os.getpid()
    loaded = load_checkpoint(manager, "job")
    assert loaded == saved
    assert loaded.status == "in_progress"
    assert find_resumable(manager) == loaded
    done = mark_status(manager, "job", "completed")
    assert done.status == "completed"
    assert find_resumable(manager) is None
    with pytest.raises(RecordNotFoundError):
        load_checkpoint(manager, "missing")
    with pytest.raises(InvalidInputError):
        save_checkpoint(manager, AgentCheckpoint(plan_id="../x"))
    with pytest.raises(InvalidInputError):
        save_checkpoint(manager, AgentCheckpoint(plan_id="ok", tool_result_ids=["../../etc/passwd"]))


def test_plan_that_is_not_a_checkpoint_is_skipped(manager: MemoryManager) -> None:
    manager.save_plan("free", {"steps": ["x"]})
    assert list_checkpoints(manager) == []
    with pytest.raises(RecordNotFoundError):
        load_checkpoint(manager, "free")


def test_find_resumable_picks_the_newest_unfinished(manager: MemoryManager) -> None:
    save_checkpoint(manager, AgentCheckpoint(plan_id="one"))
    save_checkpoint(manager, AgentCheckpoint(plan_id="two", status="interrupted"))
    save_checkpoint(manager, AgentCheckpoint(plan_id="three", status="completed"))
    resumable = find_resumable(manager)
    assert resumable is not None
    assert resumable.plan_id == "two"
    assert [item.plan_id for item in list_checkpoints(manager)] == ["three", "two", "one"]


async def test_async_helpers(manager: MemoryManager) -> None:
    await asave_checkpoint(manager, AgentCheckpoint(plan_id="a", step=3))
    found = await afind_resumable(manager)
    assert found is not None
    assert found.step == 3
    assert (await aload_checkpoint(manager, "a")).step == 3
    assert (await amark_status(manager, "a", "completed")).status == "completed"
    assert [item.plan_id for item in await alist_checkpoints(manager)] == ["a"]
    assert await afind_resumable(manager) is None


async def test_async_run_completes(manager: MemoryManager) -> None:
    async with CheckpointRun(manager, "job") as run:
        await run.astep(state={"a": 1}, tool_result_ids=["r1"])
        await run.astep()
    stored = load_checkpoint(manager, "job")
    assert (stored.status, stored.step, stored.state, stored.tool_result_ids) == ("completed", 2, {"a": 1}, ["r1"])


async def test_async_run_turns_sigterm_into_interrupted(manager: MemoryManager) -> None:
    import asyncio

    before = signal.getsignal(signal.SIGTERM)

    async def agent() -> None:
        async with CheckpointRun(manager, "job") as run:
            await run.astep()
            os.kill(os.getpid(), signal.SIGTERM)
            await asyncio.sleep(30)

    with pytest.raises(RunInterrupted) as caught:
        await agent()
    assert caught.value.signum == signal.SIGTERM
    stored = load_checkpoint(manager, "job")
    assert (stored.status, stored.reason, stored.step) == ("interrupted", "SIGTERM", 1)
    assert signal.getsignal(signal.SIGTERM) is before


def test_run_saves_each_step_and_completes(manager: MemoryManager) -> None:
    with CheckpointRun(manager, "job", task="count", plan=["one", "two"]) as run:
        assert load_checkpoint(manager, "job").status == "in_progress"
        run.step(state={"seen": 1}, tool_result_ids=["r1"])
        assert load_checkpoint(manager, "job").step == 1
        run.step(state={"other": 2}, messages=[{"role": "user", "content": "hi"}], tool_result_ids=["r1", "r2"])
        stored = load_checkpoint(manager, "job")
        assert stored.step == 2
        assert stored.state == {"seen": 1, "other": 2}
        assert stored.tool_result_ids == ["r1", "r2"]
        assert stored.messages == [{"role": "user", "content": "hi"}]
    final = load_checkpoint(manager, "job")
    assert final.status == "completed"
    assert final.task == "count"
    assert final.plan == ["one", "two"]


def test_an_exception_leaves_the_run_resumable(manager: MemoryManager) -> None:
    def failing_run() -> None:
        with CheckpointRun(manager, "job") as run:
            run.step()
            run.step()
            _ = 1 / 0

    with pytest.raises(ZeroDivisionError):
        failing_run()
    assert load_checkpoint(manager, "job").status == "in_progress"
    with CheckpointRun(manager, "job") as again:
        assert again.resumed is True
        assert again.checkpoint.step == 2
        again.step()
    assert load_checkpoint(manager, "job").step == 3
    with CheckpointRun(manager, "job") as fresh:  # completed runs are not resumed
        assert fresh.resumed is False
        assert fresh.checkpoint.step == 0


def test_keyboard_interrupt_marks_interrupted(manager: MemoryManager) -> None:
    def stopped_run() -> None:
        with CheckpointRun(manager, "job", handle_signals=False) as run:
            run.step()
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        stopped_run()
    stored = load_checkpoint(manager, "job")
    assert (stored.status, stored.reason, stored.step) == ("interrupted", "SIGINT", 1)


def test_signal_handlers_are_restored(manager: MemoryManager) -> None:
    before = signal.getsignal(signal.SIGTERM)
    with CheckpointRun(manager, "job"):
        assert signal.getsignal(signal.SIGTERM) is not before
    assert signal.getsignal(signal.SIGTERM) is before
    with raise_on_signals() as installed:
        assert installed is True
        with pytest.raises(RunInterrupted) as caught:
            signal.raise_signal(signal.SIGTERM)
    assert caught.value.signum == signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is before


RUNNER = textwrap.dedent(
    """
    import sys, time
    from local_ai_memory._runtime.checkpoints import CheckpointRun
    from local_ai_memory._shared.config import MemoryConfig
    from local_ai_memory._shared.naming import DirectoryGuard
    from local_ai_memory._runtime.scope import MemoryManager
    from local_ai_memory.backends import FileRuntimeBackend

    config = MemoryConfig()

    backend = FileRuntimeBackend.from_config(config, DirectoryGuard(sys.argv[1]))

    manager = MemoryManager(backend, config).scoped("alice", "s1")
    big = {"blob": "x" * 300_000}
    try:
        with CheckpointRun(manager, "job", task="long") as run:
            run.step(state=big)
            print("ready", flush=True)
            while True:
                run.step(state={"n": run.checkpoint.step})
    except KeyboardInterrupt:
        sys.exit(130)
    """
)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_real_signal_leaves_interrupted_not_a_torn_file(tmp_path: Path, signum: signal.Signals) -> None:
    for delay in (0.0, 0.05, 0.2):
        with subprocess.Popen(
            [sys.executable, "-c", RUNNER, str(tmp_path)], stdout=subprocess.PIPE, text=True
        ) as child:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == "ready"
            time.sleep(delay)
            child.send_signal(signum)
            assert child.wait(timeout=60) == 130
        plans = tmp_path / "memory/plans"
        stored = json.loads((plans / "alice_s1.json").read_bytes())["plans"]["job"]["payload"]
        assert stored["status"] == "interrupted"
        assert stored["reason"] == signum.name
        assert stored["step"] >= 1
        assert [p.name for p in plans.iterdir() if _fs.is_temp_file(p.name)] == []
        assert not list(plans.glob("*.bak"))
        manager = MemoryManager(FileRuntimeBackend.from_config(MemoryConfig(), DirectoryGuard(tmp_path))).scoped(
            "alice", "s1"
        )
        resumable = find_resumable(manager)
        assert resumable is not None
        assert resumable.plan_id == "job"
