"""search_tool_result: lines of a stored output that match a pattern, paged, capped and scope-checked everywhere."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from langchain_core.messages import ToolMessage
from langchain_local_ai_memory import SearchToolResultTool, create_memory_tools
from llama_index.tools.local_ai_memory import LocalMemoryToolSpec

from local_ai_memory import InvalidInputError, Memory, RecordNotFoundError
from local_ai_memory._runtime.tool_results import (
    DEFAULT_PAGE_CHARS,
    MAX_SEARCH_MATCHES,
    parse_reference,
    render_search,
)

LOG = "\n".join(
    f"2026-01-01 12:00:{n % 60:02d} {'WARN' if n % 500 == 7 else 'INFO'} request {n} ok" for n in range(4000)
).replace("request 2000 ok", "request 2000 ERROR disk full on /var/lib/db")


@pytest.fixture
def memory(tmp_path: Path) -> Memory:
    return Memory.open(tmp_path / "m", fsync=False)


def _stored(memory: Memory, user: str = "alice", session: str = "s1") -> str:
    reference = parse_reference(memory.session(user, session).externalize("read_log", LOG))
    assert reference is not None
    return reference.result_id


def test_reference_says_its_units_and_pages(memory: Memory) -> None:
    text = memory.session("alice", "s1").externalize("read_log", LOG)
    reference = parse_reference(text)
    assert reference is not None
    assert (reference.size, reference.chars, reference.lines) == (len(LOG.encode()), len(LOG), 4000)
    assert reference.pages == -(-len(LOG) // DEFAULT_PAGE_CHARS)
    # References written before these fields existed still parse with the one parser.
    old = json.dumps({"result_id": "3f9c0a7be21d4c55", "summary": "ab", "size": 9000})
    parsed = parse_reference(old)
    assert parsed is not None
    assert parsed.pages is None


def test_literal_search_finds_the_line_with_number_and_context(memory: Memory) -> None:
    session = memory.session("alice", "s1")
    found = session.tool_results.search(_stored(memory), "error", context=2)
    assert found.total_matches == 1
    assert found.total_lines == 4000
    assert found.next_skip is None
    [hit] = found.hits
    assert hit.line == 2001
    assert [number for number, _ in hit.around] == [1999, 2000, 2001, 2002, 2003]
    text = render_search(found)
    assert ">2001: 2026-01-01 12:00:20 INFO request 2000 ERROR disk full on /var/lib/db" in text
    # literal: regex characters mean themselves; case is ignored unless asked for
    assert session.tool_results.search(found.result_id, "/var/lib/db").total_matches == 1
    assert session.tool_results.search(found.result_id, "ERROR", ignore_case=False).total_matches == 1
    assert session.tool_results.search(found.result_id, "Error", ignore_case=False).total_matches == 0
    assert session.tool_results.search(found.result_id, "request 1.0 ").total_matches == 0


def test_regex_paging_and_caps(memory: Memory) -> None:
    session = memory.session("alice", "s1")
    result_id = _stored(memory)
    first = session.tool_results.search(result_id, r"WARN request \d*7 ", regex=True, max_matches=3, context=0)
    assert first.total_matches == 8
    assert [hit.line for hit in first.hits] == [8, 508, 1008]
    assert first.next_skip == 3
    assert "call search_tool_result with skip=3 for more" in render_search(first)
    rest = session.tool_results.search(result_id, r"WARN request \d*7 ", regex=True, skip=3, max_matches=100)
    assert [hit.line for hit in rest.hits] == [1508, 2008, 2508, 3008, 3508]
    assert rest.next_skip is None
    nothing = session.search_tool_result(result_id, "no such text")
    assert "no line matches 'no such text'" in nothing
    many = session.tool_results.search(result_id, "INFO", max_matches=MAX_SEARCH_MATCHES)
    assert len(many.hits) == MAX_SEARCH_MATCHES
    assert many.total_matches > 3900
    for bad in (
        {"pattern": "("},
        {"pattern": ""},
        {"pattern": "x" * 501},
        {"pattern": "x", "context": 11},
        {"pattern": "x", "max_matches": MAX_SEARCH_MATCHES + 1},
        {"pattern": "x", "skip": -1},
    ):
        options = dict(bad)
        pattern = str(options.pop("pattern"))
        with pytest.raises(InvalidInputError):
            session.tool_results.search(result_id, pattern, regex=True, **options)  # type: ignore[arg-type]


def test_pages_by_lines(memory: Memory) -> None:
    session = memory.session("alice", "s1")
    result_id = _stored(memory)
    page = session.read_tool_result(result_id, line=2000, lines=3)
    header, *body = page.splitlines()
    assert "lines 2000-2002 of 4000" in header
    assert "line=2003" in header
    assert body[1] == "2001: 2026-01-01 12:00:20 INFO request 2000 ERROR disk full on /var/lib/db"
    assert "end of result" in session.read_tool_result(result_id, line=3999, lines=10)
    by_chars = session.read_tool_result(result_id)
    assert f"characters 0-{DEFAULT_PAGE_CHARS} of {len(LOG)}; page 1 of " in by_chars.splitlines()[0]


async def test_async_twins(memory: Memory) -> None:
    session = memory.session("alice", "s1")
    result_id = _stored(memory)
    assert "ERROR disk full" in await session.asearch_tool_result(result_id, "disk full")
    assert "lines 1-2 of 4000" in await session.aread_tool_result(result_id, line=1, lines=2)


def test_another_scopes_id_is_refused_exactly_as_load_tool_result_does(memory: Memory) -> None:
    result_id = _stored(memory)
    for user, session_id in (("bob", "s1"), ("alice", "s2")):
        other = memory.session(user, session_id)
        # core: the store and the Session
        with pytest.raises(RecordNotFoundError) as loaded:
            other.tool_results.load_page(result_id)
        with pytest.raises(RecordNotFoundError) as searched:
            other.tool_results.search(result_id, "error")
        assert str(searched.value) == str(loaded.value)
        with pytest.raises(RecordNotFoundError) as via_session:
            other.search_tool_result(result_id, "error")
        assert str(via_session.value) == str(loaded.value)
        with pytest.raises(RecordNotFoundError):
            other.read_tool_result(result_id, line=1)
        # LangChain: both tools answer with the same tool error
        load, search = create_memory_tools(user, session_id, memory=memory, search_results=True)
        call = {"type": "tool_call", "id": "c1", "args": {"result_id": result_id}}
        load_answer = load.invoke({**call, "name": load.name})
        search_answer = search.invoke({**call, "name": search.name, "args": {"result_id": result_id, "pattern": "x"}})
        assert isinstance(load_answer, ToolMessage)
        assert isinstance(search_answer, ToolMessage)
        assert load_answer.status == search_answer.status == "error"
        assert str(loaded.value) in str(load_answer.content)
        assert str(loaded.value) in str(search_answer.content)
        # LlamaIndex: the spec's tools raise the core's error
        spec = LocalMemoryToolSpec(memory=memory, user_id=user, session_id=session_id)
        with pytest.raises(RecordNotFoundError) as via_spec:
            spec.search_tool_result(result_id, "error")
        assert str(via_spec.value) == str(loaded.value)
    # ... while the owner's tools find the line
    mine = SearchToolResultTool(memory=memory, user_id="alice", session_id="s1")
    assert "ERROR disk full" in str(mine.invoke({"result_id": result_id, "pattern": "disk full"}))
    spec = LocalMemoryToolSpec(memory=memory, user_id="alice", session_id="s1")
    assert "ERROR disk full" in spec.search_tool_result(result_id, "disk full")
