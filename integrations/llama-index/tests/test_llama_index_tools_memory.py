"""The tool spec, the externalizing wrapper and the working-memory block, outside and inside agents."""

from __future__ import annotations

import json
from typing import Any

import pytest
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ChatMessage, ImageBlock, MessageRole, TextBlock
from llama_index.core.llms import MockLLM
from llama_index.core.tools import AsyncBaseTool, FunctionTool, ToolMetadata, ToolOutput
from llama_index.core.workflow import Context
from llama_index.memory.local_ai_memory import LocalWorkingMemoryBlock
from llama_index.retrievers.local_ai_memory import LlamaIndexLLMAdapter
from llama_index.tools.local_ai_memory import ExternalizingTool, LocalMemoryToolSpec, externalize_tools

from local_ai_memory import InvalidInputError, Memory, RecordNotFoundError, Session

pytestmark = [
    pytest.mark.filterwarnings("ignore:The `__fields__` attribute is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:The `__fields_set__` attribute is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:Accessing the 'model_computed_fields' attribute:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:Accessing the 'model_fields' attribute:DeprecationWarning"),
]

SUMMARY = """# Current Goal
Ship the parser fix

# Completed
* Read the failing test

# Important Discoveries
* The tokenizer drops trailing spaces

# Open Issues
* Windows line endings

# Decisions
* Keep the old API
"""


class _ErrorTool(AsyncBaseTool):
    """A tool that reports a long error, as a failing shell command would."""

    @property
    def metadata(self) -> ToolMetadata:
        return ToolMetadata(name="failing", description="Fails loudly.")

    def call(self, input: Any = None) -> ToolOutput:
        return ToolOutput(tool_name="failing", content="e" * 10_000, raw_input={}, is_error=True)

    async def acall(self, input: Any = None) -> ToolOutput:
        return self.call(input)


def _big(n: int = 10_000) -> FunctionTool:
    return FunctionTool.from_defaults(fn=lambda: "z" * n, name="big", description="Big output.")


def _spec(memory: Memory, **kwargs: Any) -> LocalMemoryToolSpec:
    return LocalMemoryToolSpec(memory=memory, user_id="alice", session_id="s1", **kwargs)


def test_spec_needs_a_scope_and_checks_arguments(memory: Memory, session: Session) -> None:
    with pytest.raises(TypeError, match="session_id"):
        LocalMemoryToolSpec(memory=memory, user_id="alice")  # type: ignore[call-arg]
    with pytest.raises(InvalidInputError):
        LocalMemoryToolSpec(memory=memory, user_id="../x", session_id="s1")
    with pytest.raises(InvalidInputError):
        LocalMemoryToolSpec(memory=memory, user_id="alice", session_id="")
    with pytest.raises(InvalidInputError):
        _spec(memory, max_page_chars=0)
    with pytest.raises(InvalidInputError, match="Session"):
        LocalMemoryToolSpec(memory=session, user_id="alice", session_id="s1")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="not both"):
        _spec(memory, config=memory.config)
    with pytest.raises(InvalidInputError, match="config= only"):
        _spec(memory, llm=MockLLM())
    assert [t.metadata.name for t in _spec(memory).to_tool_list()] == ["load_tool_result", "search_tool_result"]


async def test_load_tool_result_pages_clamps_and_reports_missing(memory: Memory) -> None:
    spec = _spec(memory, max_page_chars=100)
    reference = json.loads(ExternalizingTool(_big(), memory, user_id="alice", session_id="s1").call().content)
    load, _grep = spec.to_tool_list()
    page = load.call(result_id=reference["result_id"], offset=9_950, limit=10_000).content
    header, body = page.split("\n", 1)
    assert body == "z" * 50
    assert "end of result" in header
    clamped = (await load.acall(result_id=reference["result_id"], limit=10_000)).content
    assert len(clamped.split("\n", 1)[1]) == 100
    with pytest.raises(RecordNotFoundError):
        spec.load_tool_result("0123456789abcdef")
    with pytest.raises(InvalidInputError):
        await spec.aload_tool_result("../../etc/passwd")
    with pytest.raises(InvalidInputError):
        spec.load_tool_result(reference["result_id"], limit=0)


async def test_another_scopes_result_id_loads_nothing(memory: Memory) -> None:
    [wrapped] = _spec(memory).wrap_tools([_big()])
    reference = json.loads(wrapped.call().content)
    for user, session in (("bob", "s1"), ("alice", "s2")):
        load, grep = LocalMemoryToolSpec(memory=memory, user_id=user, session_id=session).to_tool_list()
        with pytest.raises(RecordNotFoundError):
            load.call(result_id=reference["result_id"])
        with pytest.raises(RecordNotFoundError):
            await load.acall(result_id=reference["result_id"])
        # search_tool_result refuses another scope's id exactly as load_tool_result does
        with pytest.raises(RecordNotFoundError) as searched:
            grep.call(result_id=reference["result_id"], pattern="x")
        with pytest.raises(RecordNotFoundError) as loaded:
            load.call(result_id=reference["result_id"])
        assert str(searched.value) == str(loaded.value)
        with pytest.raises(RecordNotFoundError):
            await grep.acall(result_id=reference["result_id"], pattern="x")


def test_load_tool_result_is_never_wrapped(memory: Memory) -> None:
    spec = _spec(memory)
    tools = spec.wrap_tools([*spec.to_tool_list(), _big()])
    assert not isinstance(tools[0], ExternalizingTool)
    assert not isinstance(tools[1], ExternalizingTool)  # search_tool_result's answer is never stored either
    assert isinstance(tools[2], ExternalizingTool)
    assert externalize_tools(tools, memory, user_id="alice", session_id="s1")[2] is tools[2]
    direct = FunctionTool.from_defaults(fn=lambda: "d" * 10_000, name="d", description="d", return_direct=True)
    assert externalize_tools([direct], memory, user_id="alice", session_id="s1") == [direct]


async def test_errors_and_non_text_outputs_stay_inline(memory: Memory, session: Session) -> None:
    def wrap(tool: Any) -> ExternalizingTool:
        return ExternalizingTool(tool, memory, user_id="alice", session_id="s1")

    def broken() -> str:
        """Always fails."""
        raise ValueError("disk on fire")

    wrapped = wrap(FunctionTool.from_defaults(fn=broken))
    with pytest.raises(ValueError, match="disk on fire"):
        wrapped.call()
    erroring_wrapped = wrap(_ErrorTool())
    assert (await erroring_wrapped.acall()).content == "e" * 10_000
    assert erroring_wrapped.call().is_error
    image = ImageBlock(image=b"\x89PNG", image_mimetype="image/png")
    mixed = FunctionTool.from_defaults(fn=lambda: [TextBlock(text="x" * 10_000), image], name="m", description="m")
    out = wrap(mixed).call()
    assert len(out.blocks) == 2
    assert session.list_tool_results() == {}
    with pytest.raises(InvalidInputError, match="not both"):
        ExternalizingTool(mixed, memory, user_id="alice", session_id="s1", config=memory.config)
    with pytest.raises(InvalidInputError, match="memory must be"):
        ExternalizingTool(mixed, "not a memory", user_id="alice", session_id="s1")  # type: ignore[arg-type]


async def test_context_tools_keep_their_context_in_an_agent(
    memory: Memory, scripted_llm: Any, tool_call: Any, last_tool_output: Any
) -> None:
    async def remember(ctx: Context, topic: str) -> str:
        """Store the topic in the workflow state and return a long report."""
        await ctx.store.set("topic", topic)
        return f"report on {topic}: " + "r" * 8000

    # This module postpones annotations; LlamaIndex finds the Context parameter by its real annotation.
    remember.__annotations__["ctx"] = Context
    spec = _spec(memory)
    [wrapped] = spec.wrap_tools([FunctionTool.from_defaults(fn=remember)])
    assert isinstance(wrapped, ExternalizingTool)
    assert wrapped.requires_context
    assert set(wrapped.metadata.get_parameters_dict()["properties"]) == {"topic"}
    outputs: list[str] = []

    def answer(messages: list[ChatMessage]) -> ChatMessage:
        outputs.append(last_tool_output(messages))
        return ChatMessage(role=MessageRole.ASSISTANT, content="done")

    llm, _ = scripted_llm([lambda m: tool_call("remember", "c1", topic="tides"), answer])
    agent = FunctionAgent(tools=[wrapped], llm=llm, streaming=False)
    ctx = Context(agent)
    await agent.run("Remember tides.", ctx=ctx)
    assert await ctx.store.get("topic") == "tides"
    reference = json.loads(outputs[0])
    assert reference["summary"].startswith("report on tides: rrr")
    assert reference["size"] == len("report on tides: ") + 8000


def test_block_sync_paths_through_memory(memory: Memory, session: Session, make_memory: Any) -> None:
    block = LocalWorkingMemoryBlock(memory=memory, user_id="alice", session_id="s1")
    chat = make_memory(session_id="sync", memory_blocks=[block], token_limit=200, token_flush_size=50)
    chat.put_messages(
        [
            ChatMessage(role="user", content="Plan the database migration for the billing tables."),
            ChatMessage(role="assistant", content="We decided to migrate the invoices table first. " * 20),
            ChatMessage(role="user", content="Now write the rollback script."),
            ChatMessage(role="assistant", content="Done: rollback.sql drops the new columns."),
        ]
    )
    working = session.get_working_memory()
    assert "billing tables" in working  # the flushed first turn reached L1
    messages = chat.get()
    system = [m.content or "" for m in messages if m.role == MessageRole.SYSTEM]
    assert system
    assert "billing tables" in system[0]
    assert block.get_text() == working
    block.summarize_memory(chat)
    assert "rollback" in session.get_working_memory()
    assert block.summarize_memory(chat) is None


async def test_block_with_a_llama_index_llm_and_disabled_memory(
    memory: Memory, session: Session, answer_llm: Any
) -> None:
    llm = answer_llm(answer=SUMMARY)
    # config= builds the block's own Memory, with the LlamaIndex LLM as its model.
    block = LocalWorkingMemoryBlock(config=memory.config, user_id="alice", session_id="s1", llm=llm)
    result = await block.asummarize_messages([ChatMessage(role="user", content="Fix the parser")])
    assert result is not None
    assert result.method == "llm"
    assert llm.async_calls == 1
    assert "Keep the old API" in await block.aget()
    # With memory=, the model is the memory's own.
    with Memory(memory.config, llm=LlamaIndexLLMAdapter(answer_llm(fail=True))) as failing_memory:
        failing = LocalWorkingMemoryBlock(memory=failing_memory, user_id="alice", session_id="s1")
        before = session.get_working_memory()
        failed = failing.summarize_messages([ChatMessage(role="user", content="Another goal")])
        assert failed is not None
        assert not failed.ok
        assert session.get_working_memory() == before
        # A failed merge is retried next time instead of being marked as done.
        assert failing.summarize_messages([ChatMessage(role="user", content="Another goal")]) is not None

    disabled = LocalWorkingMemoryBlock(
        config=memory.config.replace(working_memory_enabled=False), user_id="alice", session_id="s1"
    )
    assert await disabled.aget() == ""
    assert disabled.summarize_messages([ChatMessage(role="user", content="x")]) is None
    with pytest.raises(InvalidInputError):
        LocalWorkingMemoryBlock(memory=memory, user_id="alice", session_id="../s1")
    with pytest.raises(InvalidInputError, match="config= only"):
        LocalWorkingMemoryBlock(memory=memory, user_id="alice", session_id="s1", llm=llm)
    for built in (block, disabled):
        built.memory.close()


async def test_from_config_builds_the_same_scope(notes: Memory, session: Session) -> None:
    spec = LocalMemoryToolSpec.from_config(notes.config, user_id="alice", session_id="s1", search=True)
    assert spec.memory is not notes
    assert spec.session.engine.scope == session.engine.scope
    assert "## alice_rust.md" in await spec.asearch_memory("rust ownership")
    session.update_working_memory("# Current Goal\nShip it\n")
    block = LocalWorkingMemoryBlock.from_config(notes.config, user_id="alice", session_id="s1")
    assert await block.aget() == "# Current Goal\nShip it\n"
    with pytest.raises(InvalidInputError):
        _spec(notes, search="yes")
    with pytest.raises(InvalidInputError, match="search=True"):
        _spec(notes).search_memory("rust")
    with pytest.raises(InvalidInputError, match="unknown categories"):
        _spec(notes, search=True, categories=["recipes"])
    spec.memory.close()
    block.memory.close()
