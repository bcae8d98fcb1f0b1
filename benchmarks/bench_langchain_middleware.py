"""LangChain middleware: what the model receives, and what the memory costs per agent step.

Runs a real ``create_agent`` whose tool returns about 200 KB of real text (the installed
langchain-core sources), with a scripted tool-calling model (no model time is measured), and
compares the plain agent with the agent plus ``LocalMemoryMiddleware``:

* tokens of the conversation the model receives on the call after the tool ran, and the
  largest single tool message it ever receives (the plain agent gets the whole output; the
  memory agent gets a short reference and pages of ``--page`` characters it asks for);
* wall time of a whole run and the cost per agent step of the memory work (L3 write,
  L0 update, L2 checkpoint, L1 summary), with ``fsync`` on (durable, the default) and off.

Run: ``.venv/bin/python benchmarks/bench_langchain_middleware.py``
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import tempfile
import time
from collections.abc import Sequence
from typing import Any

import langchain_core
from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langchain_local_ai_memory import LocalMemoryMiddleware
from pydantic import Field

from local_ai_memory import MemoryConfig, TokenCounter


def real_text(size: int) -> str:
    root = pathlib.Path(langchain_core.__file__).parent
    parts: list[str] = []
    total = 0
    for path in sorted(root.rglob("*.py")):
        parts.append(path.read_text(encoding="utf-8"))
        total += len(parts[-1])
        if total >= size:
            break
    return "".join(parts)[:size]


class Scripted(BaseChatModel):
    """Calls ``big_tool``; then, if it got a reference, pages ``pages`` pages back; then answers."""

    pages: int = 2
    page_chars: int = 4000
    received: list[list[BaseMessage]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Scripted:
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        self.received.append(list(messages))
        tools = [m for m in messages if isinstance(m, ToolMessage)]
        if not tools:
            answer = AIMessage(content="", tool_calls=[{"name": "big_tool", "args": {}, "id": "c0"}])
        elif str(tools[0].content).startswith('{"result_id"') and len(tools) <= self.pages:
            result_id = json.loads(str(tools[0].content))["result_id"]
            args = {"result_id": result_id, "offset": (len(tools) - 1) * self.page_chars, "limit": self.page_chars}
            answer = AIMessage(
                content="", tool_calls=[{"name": "load_tool_result", "args": args, "id": f"c{len(tools)}"}]
            )
        else:
            answer = AIMessage(content="done")
        return ChatResult(generations=[ChatGeneration(message=answer)])


def run(text: str, *, memory: bool, fsync: bool, pages: int, page_chars: int) -> tuple[float, Scripted, int]:
    @tool
    def big_tool() -> str:
        """Return a large document."""
        return text

    model = Scripted(pages=pages, page_chars=page_chars)
    with tempfile.TemporaryDirectory() as root:
        middleware = [LocalMemoryMiddleware("bench", "s1", config=MemoryConfig(runtime_data_dir=root, fsync=fsync))]
        agent = create_agent(model, tools=[big_tool], middleware=middleware if memory else [])
        start = time.perf_counter()
        result = agent.invoke({"messages": [HumanMessage("Read the document and tell me what it is.")]})
        elapsed = time.perf_counter() - start
    steps = sum(1 for m in result["messages"] if isinstance(m, AIMessage))
    return elapsed, model, steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=200 * 1024, help="characters of the tool output")
    parser.add_argument("--pages", type=int, default=2, help="pages the model reads back")
    parser.add_argument("--page", type=int, default=4000, help="characters per page")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    text = real_text(args.size)
    counter = TokenCounter()

    def tokens(messages: list[BaseMessage]) -> int:
        return sum(counter.count(str(m.content)) for m in messages)

    _, plain, _ = run(text, memory=False, fsync=False, pages=args.pages, page_chars=args.page)
    _, managed, _ = run(text, memory=True, fsync=False, pages=args.pages, page_chars=args.page)
    plain_after, managed_after = tokens(plain.received[1]), tokens(managed.received[1])
    plain_max = max(
        counter.count(str(m.content)) for call in plain.received for m in call if isinstance(m, ToolMessage)
    )
    managed_max = max(
        counter.count(str(m.content)) for call in managed.received for m in call if isinstance(m, ToolMessage)
    )
    print(f"tool output: {len(text.encode()):,} bytes, {counter.count(text):,} tokens")
    print(f"{'':34}{'plain agent':>14}{'with memory':>14}{'ratio':>9}")
    ratio = plain_after / managed_after
    print(f"{'tokens sent on the call after it':34}{plain_after:>14,}{managed_after:>14,}{ratio:>8.0f}x")
    print(f"{'largest tool message (tokens)':34}{plain_max:>14,}{managed_max:>14,}{plain_max / managed_max:>8.0f}x")

    print(f"\nwall time of one run, median of {args.repeat} (scripted model, {args.pages} pages read back):")
    base = statistics.median(
        run(text, memory=False, fsync=False, pages=args.pages, page_chars=args.page)[0] for _ in range(args.repeat)
    )
    print(f"  plain agent (no paging)      {base * 1000:8.1f} ms")
    for fsync in (False, True):
        timings = [
            run(text, memory=True, fsync=fsync, pages=args.pages, page_chars=args.page) for _ in range(args.repeat)
        ]
        median = statistics.median(t for t, _, _ in timings)
        steps = timings[0][2]
        print(
            f"  with memory, fsync={fsync!s:5}  {median * 1000:8.1f} ms  ({steps} model steps, "
            f"{(median - base) / steps * 1000:.1f} ms of memory work per step)"
        )


if __name__ == "__main__":
    main()
