"""What an L2 checkpoint costs per agent step, early and late in a long run.

Runs a real ``create_agent`` with a scripted tool-calling model (no model time is measured)
for ``--steps`` tool steps. The checkpoint middleware saves after every step; this script
counts the bytes it writes to disk (through the library's write seam) and the time it spends,
step by step, and prints the mean around step 10 and around the last step. Flat means the cost
of a step does not grow with the length of the run.

Side by side, in the same run: the 0.1.0 strategy (rewrite the whole checkpoint, with the
whole conversation, at every step), which is what this library did before and what a
hand-written "save the state each step" loop does.

Run: ``.venv/bin/python benchmarks/bench_checkpoint_steps.py [--steps 1000]``
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import AgentState
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage, messages_to_dict
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langchain_local_ai_memory import CheckpointMiddleware
from langgraph.runtime import Runtime

from local_ai_memory import MemoryConfig
from local_ai_memory._runtime.checkpoints import save_checkpoint
from local_ai_memory._shared import fs as _fs
from local_ai_memory.types import AgentCheckpoint


class ByteCounter(_fs.Syscalls):
    """The real syscalls, counting the bytes written."""

    def __init__(self) -> None:
        self.written = 0

    def write(self, fd: int, data: memoryview) -> int:
        count = super().write(fd, data)
        self.written += count
        return count


class Scripted(BaseChatModel):
    """Calls ``lookup`` until it has seen ``steps`` tool results, then answers."""

    steps: int = 100

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Scripted:
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        done = sum(1 for m in messages if isinstance(m, ToolMessage))
        if done >= self.steps:
            answer = AIMessage(content="all steps done")
        else:
            call = {"name": "lookup", "args": {"n": done}, "id": f"call-{done}"}
            answer = AIMessage(content=f"step {done}: looking up the next record", tool_calls=[call])
        return ChatResult(generations=[ChatGeneration(message=answer)])


@tool
def lookup(n: int) -> str:
    """Look up record ``n``."""
    return f"record {n}: " + "the quick brown fox jumps over the lazy dog; " * 5


class Measured(CheckpointMiddleware):
    """The shipped middleware, timing each checkpoint and counting its bytes."""

    def __init__(self, counter: ByteCounter, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.counter = counter
        self.costs: list[tuple[int, float]] = []

    def before_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        before, start = self.counter.written, time.perf_counter()
        result = super().before_model(state, runtime)
        self.costs.append((self.counter.written - before, time.perf_counter() - start))
        return result


class RewriteEveryStep(Measured):
    """The 0.1.0 strategy: read the checkpoint back, then rewrite it whole with the whole conversation."""

    def before_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        before, start = self.counter.written, time.perf_counter()
        manager = self._scope.manager(runtime)
        messages = list(state["messages"])
        self._previous(manager)
        save_checkpoint(
            manager.engine,
            AgentCheckpoint(plan_id=self.plan_id, messages=messages_to_dict(messages), step=len(messages) // 2),
        )
        manager.update_state({"current_step": len(messages) // 2, "plan_id": self.plan_id})
        self.costs.append((self.counter.written - before, time.perf_counter() - start))
        return None


def run(kind: type[Measured], steps: int, fsync: bool) -> list[tuple[int, float]]:
    counter = ByteCounter()
    with tempfile.TemporaryDirectory() as root, _fs.use_syscalls(counter):
        middleware = kind(
            counter, user_id="bench", session_id="s1", config=MemoryConfig(runtime_data_dir=root, fsync=fsync)
        )
        agent = create_agent(Scripted(steps=steps), tools=[lookup], middleware=[middleware])
        agent.invoke({"messages": [("user", "Go through every record.")]}, {"recursion_limit": 4 * steps + 10})
    return middleware.costs


def around(costs: list[tuple[int, float]], step: int, width: int = 5) -> tuple[float, float]:
    """Mean bytes and milliseconds of the checkpoints around ``step`` (1-based)."""
    window = costs[max(0, step - width) : step + width]
    return statistics.mean(b for b, _ in window), statistics.mean(t for _, t in window) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--fsync", action="store_true", help="durable writes (the library's default)")
    args = parser.parse_args()
    last = args.steps
    print(f"create_agent run of {args.steps} tool steps, fsync={args.fsync}; mean of the 10 checkpoints around a step")
    late_bytes, late_ms = f"bytes @{last}", f"ms @{last}"
    print(f"{'strategy':28}{'bytes @10':>11}{late_bytes:>13}{'ratio':>8}{'ms @10':>9}{late_ms:>10}{'ratio':>8}")
    results = {}
    for name, kind in (("step log (this version)", Measured), ("rewrite every step (0.1.0)", RewriteEveryStep)):
        costs = run(kind, args.steps, args.fsync)
        early, late = around(costs, 10), around(costs, last)
        results[name] = (early, late, sum(b for b, _ in costs))
        print(
            f"{name:28}{early[0]:>11,.0f}{late[0]:>13,.0f}{late[0] / early[0]:>7.1f}x"
            f"{early[1]:>9.2f}{late[1]:>10.2f}{late[1] / early[1]:>7.1f}x"
        )
    ours, old = results["step log (this version)"][2], results["rewrite every step (0.1.0)"][2]
    print(f"bytes written over the whole run: {ours:,} vs {old:,} ({old / ours:.0f}x less)")


if __name__ == "__main__":
    main()
