"""Test doubles shared by the LangChain integration tests (and the crash-test child process).

* :class:`ScriptedChatModel`: a real ``BaseChatModel`` that supports ``bind_tools`` (which
  ``GenericFakeChatModel`` does not) and answers either from a fixed list of ``AIMessage`` s or
  from a policy function of the messages it receives. It records every request it gets,
  system message included, so tests can check what the model actually saw.
* :func:`paging_policy`: a model that calls ``big_tool``, then pages the stored result back
  with ``load_tool_result`` until the end, then answers. Its next move depends only on the
  conversation, so a resumed run continues exactly where the killed one stopped.
* :func:`real_text`: about N bytes of real text read from the installed langchain-core sources.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import langchain_core
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import Field, PrivateAttr

from local_ai_memory import Memory, MemoryConfig

Policy = Callable[[Sequence[BaseMessage]], AIMessage]

PAGE_HEADER = re.compile(
    r"^\[tool result (?P<id>[0-9a-f]+) .*?characters (?P<start>\d+)-(?P<end>\d+) of (?P<total>\d+);"
)
NEXT_OFFSET = re.compile(r"offset=(?P<next>\d+) for the next\]")


class ScriptedChatModel(BaseChatModel):
    """Answers with ``script`` in order, or with ``policy(messages)``; records what it received."""

    script: list[AIMessage] = Field(default_factory=list)
    policy: Any = None
    bound_tools: list[str] = Field(default_factory=list)
    received: list[list[BaseMessage]] = Field(default_factory=list)
    _position: int = PrivateAttr(0)

    @property
    def _llm_type(self) -> str:
        return "scripted-chat-model"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:
        self.bound_tools = [getattr(tool, "name", None) or tool["name"] for tool in tools]
        return self

    def _next(self, messages: list[BaseMessage]) -> AIMessage:
        self.received.append(list(messages))
        if self.policy is not None:
            return self.policy(messages)  # type: ignore[no-any-return]
        if self._position >= len(self.script):
            return AIMessage(content="(script exhausted)")
        message = self.script[self._position]
        self._position += 1
        return message

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self._next(messages))])


class TextLLM:
    """A core-protocol LLM answering a fixed text (for the compressor and Stage 2)."""

    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.prompts: list[str] = []

    def complete(self, prompt: str) -> str:
        self.prompts.append(prompt)
        return self.answer

    async def acomplete(self, prompt: str) -> str:
        return self.complete(prompt)


def real_text(size: int) -> str:
    """At least ``size`` characters of real text: the installed langchain-core sources, concatenated."""
    root = Path(langchain_core.__file__).parent
    parts: list[str] = []
    total = 0
    for path in sorted(root.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        parts.append(f"# ---- {path.relative_to(root)}\n{text}")
        total += len(parts[-1])
        if total >= size:
            break
    return "".join(parts)[:size]


def paging_policy(
    page_chars: int = 20_000,
    stall_before_page: int | None = None,
    stall_marker: Path | None = None,
) -> Policy:
    """A model that reads a big tool result through ``load_tool_result``, page by page.

    With ``stall_before_page=k`` it writes ``stall_marker`` and sleeps instead of asking for
    page ``k`` (0-based), so a test can kill the process at a known point.
    """

    def policy(messages: Sequence[BaseMessage]) -> AIMessage:
        call_id = f"call_{len(messages)}"
        tool_messages = [m for m in messages if isinstance(m, ToolMessage)]
        if not tool_messages:
            return AIMessage(content="", tool_calls=[{"name": "big_tool", "args": {}, "id": call_id}])
        last = tool_messages[-1]
        text = str(last.content)
        if last.name == "big_tool":
            reference = json.loads(text)
            args = {"result_id": reference["result_id"], "offset": 0, "limit": page_chars}
        else:
            header = PAGE_HEADER.match(text)
            if header is None:
                return AIMessage(content=f"unexpected tool output: {text[:200]}")
            following = NEXT_OFFSET.search(text.splitlines()[0])
            if following is None:
                return AIMessage(content=f"read {header['total']} characters")
            args = {"result_id": header["id"], "offset": int(following["next"]), "limit": page_chars}
        page = args["offset"] // page_chars
        if stall_before_page is not None and page == stall_before_page:
            if stall_marker is not None:
                stall_marker.write_text(str(page), encoding="utf-8")
            time.sleep(3600)
        return AIMessage(content="", tool_calls=[{"name": "load_tool_result", "args": args, "id": call_id}])

    return policy


NOTES = {
    "alice_python.md": "# Python basics\n\nPython lists, dicts and loops for beginners.",
    "alice_json.md": "# Parsing JSON in Python\n\nUse json.loads to parse JSON text in Python.",
    "alice_venv.md": "# Python virtual environments\n\nCreate a venv with python -m venv .venv.",
    "alice_typing.md": "# Python typing\n\nType hints and mypy for Python code.",
    "alice_rust.md": "# Rust ownership\n\nBorrowing rules in Rust; unrelated to the snake language.",
    "bob_python.md": "# Bob's Python secrets\n\nPython notes that only bob may read.",
}


def add_notes(memory: Memory) -> Memory:
    """:data:`NOTES` written into ``memory``'s knowledge (indexed at once); returns ``memory``."""
    for filename, text in NOTES.items():
        user_id, _, name = filename.partition("_")
        memory.knowledge.write_note(user_id, name, text)
    memory.knowledge.store.flush()  # the index on disk too, for another process or Memory
    return memory


def write_notes(root: Path) -> MemoryConfig:
    """:data:`NOTES` in the folder ``root``; returns its settings (for ``config=``)."""
    config = MemoryConfig(runtime_data_dir=root, fsync=False)
    add_notes(Memory(config))
    return config
