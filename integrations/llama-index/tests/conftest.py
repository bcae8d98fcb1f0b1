"""Fixtures for the LlamaIndex integration tests: a ``local_ai_memory.Memory`` on a data root,
one session of it, knowledge notes, a 200 KB real text, and a scripted function-calling LLM for
``FunctionAgent`` runs.

The scripted LLM is LlamaIndex's own ``MockFunctionCallingLLM`` with a response generator
that plays a list of steps; every step gets the messages the agent sent, so a test can read
what the model would have seen (tool outputs included) and decide the next tool call.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import llama_index.core
import pytest
from llama_index.core.base.llms.types import (
    ChatMessage,
    CompletionResponse,
    CompletionResponseGen,
    LLMMetadata,
    MessageRole,
    ToolCallBlock,
)
from llama_index.core.bridge.pydantic import Field
from llama_index.core.llms import CustomLLM
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.memory import Memory
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from local_ai_memory import Memory as LocalMemory
from local_ai_memory import MemoryConfig, Session

BIG_SIZE = 200 * 1024

Step = Callable[[list[ChatMessage]], ChatMessage]


@pytest.fixture
def config(tmp_path: Path) -> MemoryConfig:
    return MemoryConfig(runtime_data_dir=tmp_path, fsync=False, categories=("knowledge", "work"))


@pytest.fixture
def memory(config: MemoryConfig) -> Iterator[LocalMemory]:
    """The memory every adapter of a test is built from (closed afterwards: no watcher left running)."""
    with LocalMemory(config) as ours:
        yield ours


@pytest.fixture
def session(memory: LocalMemory) -> Session:
    return memory.session("alice", "s1")


# (user, name, category, text): stored as {category}/{user}_{name}.md
KNOWLEDGE = [
    (
        "alice",
        "python",
        "knowledge",
        "# Python Basics\n\nLists, dictionaries and for loops in Python. "
        "A list comprehension builds a list in one line.\n",
    ),
    (
        "alice",
        "rust",
        "knowledge",
        "# Rust Ownership\n\nEvery value in Rust has one owner; borrowing lends it without moving it.\n",
    ),
    (
        "alice",
        "deploy",
        "work",
        "# Deploy Checklist\n\nRun the migrations, then restart the workers. The deploy window is Tuesday.\n",
    ),
    ("bob", "python", "knowledge", "# Bob's Python secrets\n\nBob keeps his python notes here: password hunter2.\n"),
]


@pytest.fixture
def notes(memory: LocalMemory) -> LocalMemory:
    """``memory`` with the KNOWLEDGE notes written through ``memory.knowledge``."""
    for user, name, category, text in KNOWLEDGE:
        memory.knowledge.write_note(user, name, text, category=category)
    return memory


@pytest.fixture(scope="session")
def big_text() -> str:
    """200 KB of real text: the installed llama-index-core sources, concatenated."""
    root = Path(llama_index.core.__file__).parent
    parts: list[str] = []
    size = 0
    for path in sorted(root.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        parts.append(f"# ---- {path.relative_to(root)}\n{text}")
        size += len(parts[-1].encode("utf-8"))
        if size > BIG_SIZE * 2:
            break
    data = "".join(parts).encode("utf-8")[:BIG_SIZE].decode("utf-8", "ignore")
    assert len(data.encode("utf-8")) > BIG_SIZE - 4
    return data


@dataclass
class Script:
    """Steps played in order by a scripted LLM, and every message list it received."""

    steps: list[Step]
    calls: list[list[ChatMessage]] = field(default_factory=list)

    def __call__(self, messages: Any, **kwargs: Any) -> ChatMessage:
        received = list(messages)
        self.calls.append(received)
        index = len(self.calls) - 1
        if index >= len(self.steps):
            return ChatMessage(role=MessageRole.ASSISTANT, content="(script finished)")
        return self.steps[index](received)


def tool_call(name: str, call_id: str, **kwargs: Any) -> ChatMessage:
    """An assistant message asking for one tool call."""
    return ChatMessage(
        role=MessageRole.ASSISTANT,
        blocks=[ToolCallBlock(tool_call_id=call_id, tool_name=name, tool_kwargs=kwargs)],
    )


def last_tool_output(messages: list[ChatMessage]) -> str:
    """Text of the newest tool message the model received."""
    tool_messages = [m for m in messages if m.role == MessageRole.TOOL]
    assert tool_messages, "the model received no tool output"
    return tool_messages[-1].content or ""


@pytest.fixture
def scripted_llm() -> Callable[[list[Step]], tuple[MockFunctionCallingLLM, Script]]:
    def make(steps: list[Step]) -> tuple[MockFunctionCallingLLM, Script]:
        script = Script(steps)
        return MockFunctionCallingLLM(response_generator=script), script

    return make


@pytest.fixture(name="tool_call")
def tool_call_fixture() -> Callable[..., ChatMessage]:
    return tool_call


@pytest.fixture(name="last_tool_output")
def last_tool_output_fixture() -> Callable[[list[ChatMessage]], str]:
    return last_tool_output


@pytest.fixture
async def make_memory() -> AsyncIterator[Callable[..., Memory]]:
    """Builds ``Memory`` objects on their own in-memory SQLite engines, disposed after the test
    (LlamaIndex never closes the default engine, which Python reports as a ResourceWarning)."""
    engines: list[AsyncEngine] = []

    def make(**kwargs: Any) -> Memory:
        engine = create_async_engine("sqlite+aiosqlite:///:memory:")
        engines.append(engine)
        return Memory.from_defaults(async_engine=engine, **kwargs)

    yield make
    for engine in engines:
        await engine.dispose()


class AnswerLLM(CustomLLM):
    """A LlamaIndex LLM that answers every prompt with a fixed text and records the prompts.

    ``fail=True`` makes every call raise, as an unreachable server would.
    """

    answer: str = ""
    fail: bool = False
    prompts: list[str] = Field(default_factory=list)
    async_calls: int = 0

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="answer-llm")

    def _reply(self, prompt: str) -> CompletionResponse:
        self.prompts.append(prompt)
        if self.fail:
            raise ConnectionError("model server unreachable")
        return CompletionResponse(text=self.answer)

    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return self._reply(prompt)

    async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        self.async_calls += 1
        return self._reply(prompt)

    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        response = self._reply(prompt)

        def gen() -> CompletionResponseGen:
            yield CompletionResponse(text=response.text, delta=response.text)

        return gen()


@pytest.fixture
def answer_llm() -> Callable[..., AnswerLLM]:
    return AnswerLLM
