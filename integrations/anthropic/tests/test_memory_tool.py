"""Claude's memory tool on a user's notes: the six commands (sync and async, through the SDK's own
``call`` entry), the path layout, hostile paths, isolation between users, paging, and the tool
driven by the SDK's tool runner against an in-process Messages API."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import anthropic
import httpx2 as httpx  # the HTTP package this anthropic release is built on
import pytest
from anthropic.lib.tools import BetaAbstractMemoryTool, BetaAsyncAbstractMemoryTool
from claude_fakes import ScriptedMessages, Use, memory_use, refused
from local_ai_memory_anthropic import MAX_VIEW_ENTRIES, MAX_VIEW_LINES, AsyncLocalMemoryTool, LocalMemoryTool

from local_ai_memory import InvalidInputError, Memory


def test_the_tools_subclass_the_sdks_abstract_memory_tools(memory: Memory) -> None:
    assert isinstance(LocalMemoryTool(memory, "alice"), BetaAbstractMemoryTool)
    assert isinstance(AsyncLocalMemoryTool(memory, "alice"), BetaAsyncAbstractMemoryTool)
    assert LocalMemoryTool(memory, "alice").to_dict() == {"type": "memory_20250818", "name": "memory"}


def test_a_note_lives_through_every_command(memory: Memory, tool_for: Callable[[str], Use]) -> None:
    use = tool_for("alice")
    assert use("view", path="/memories").splitlines()[1:] == ["0B\t/memories/projects/"]
    created = use("create", path="/memories/deploy.md", file_text="# Deploy\nWe deploy on Fridays.\n")
    assert created == "File created successfully at: /memories/deploy.md"
    assert memory.knowledge.read_note("alice", "deploy") == "# Deploy\nWe deploy on Fridays.\n"
    assert [hit.filename for hit in memory.knowledge.search("fridays", "alice")] == ["alice_deploy.md"], (
        "a write was not indexed at once"
    )
    shown = use("view", path="/memories/deploy.md")
    assert shown.splitlines()[1:] == ["     1\t# Deploy", "     2\tWe deploy on Fridays."]
    edited = use("str_replace", path="/memories/deploy.md", old_str="Fridays", new_str="Tuesdays")
    assert "We deploy on Tuesdays." in edited
    assert [hit.filename for hit in memory.knowledge.search("tuesdays", "alice")] == ["alice_deploy.md"]
    use("insert", path="/memories/deploy.md", insert_line=1, insert_text="Owner: ops")
    assert memory.knowledge.read_note("alice", "deploy") == "# Deploy\nOwner: ops\nWe deploy on Tuesdays.\n"
    use("create", path="/memories/projects/alpha.md", file_text="Alpha ships in May.")
    assert memory.knowledge.read_note("alice", "alpha", category="projects") == "Alpha ships in May."
    listing = use("view", path="/memories")
    assert "/memories/deploy.md" in listing
    assert "/memories/projects/" in listing
    assert "/memories/projects/alpha.md" in listing
    assert use("view", path="/memories/projects").count("alpha.md") == 1
    renamed = use("rename", old_path="/memories/projects/alpha.md", new_path="/memories/alpha-plan.md")
    assert renamed.startswith("Successfully renamed")
    assert memory.knowledge.read_note("alice", "alpha-plan") == "Alpha ships in May."
    assert [hit.filename for hit in memory.knowledge.search("alpha may", "alice")] == ["alice_alpha-plan.md"]
    assert use("delete", path="/memories/deploy.md") == "Successfully deleted /memories/deploy.md"
    assert memory.knowledge.search("tuesdays", "alice") == []
    assert [tuple(note) for note in memory.knowledge.notes("alice")] == [("alpha-plan", "knowledge")]


def test_errors_the_model_can_act_on(memory: Memory, tool_for: Callable[[str], Use]) -> None:
    use = tool_for("alice")
    use("create", path="/memories/a.md", file_text="x\nx\n")
    assert "already exists" in refused(use, "create", path="/memories/a.md", file_text="other")
    assert memory.knowledge.read_note("alice", "a") == "x\nx\n", "a refused create changed the note"
    assert "occurs 2 times" in refused(use, "str_replace", path="/memories/a.md", old_str="x", new_str="y")
    assert "does not occur" in refused(use, "str_replace", path="/memories/a.md", old_str="zzz", new_str="y")
    assert "does not exist" in refused(use, "str_replace", path="/memories/b.md", old_str="x", new_str="y")
    assert "does not exist" in refused(use, "view", path="/memories/b.md")
    assert "does not exist" in refused(use, "insert", path="/memories/b.md", insert_line=0, insert_text="y")
    assert "outside the note" in refused(use, "insert", path="/memories/a.md", insert_line=9, insert_text="y")
    assert "does not exist" in refused(use, "delete", path="/memories/b.md")
    assert "does not exist" in refused(use, "rename", old_path="/memories/b.md", new_path="/memories/c.md")
    use("create", path="/memories/c.md", file_text="c")
    assert "already exists" in refused(use, "rename", old_path="/memories/a.md", new_path="/memories/c.md")
    assert memory.knowledge.read_note("alice", "a") == "x\nx\n"
    assert "itself" in refused(use, "delete", path="/memories")
    assert "directory" in refused(use, "create", path="/memories/projects", file_text="x")
    assert "directories are the memory's categories" in refused(
        use, "rename", old_path="/memories/projects", new_path="/memories/p2"
    )
    assert "is a directory" in refused(use, "rename", old_path="/memories/a.md", new_path="/memories/projects/")


HOSTILE = [
    "/memories/../etc/passwd",
    "/memories/../../secret.md",
    "/memories/./a.md",
    "/memories/projects/../a.md",
    "/memories//a.md",
    "/memories/a/b/c.md",
    "/memories/elsewhere/a.md",
    "/memoriesX/a.md",
    "/etc/passwd",
    "memories/a.md",
    "../memories/a.md",
    "/memories/a\\..\\b.md",
    "/memories/a\x00.md",
    "/memories/..",
    "/memories/\u202eevil.md",
    "/memories/a\u200b.md",
    "/memories/x.md/",
    "/memories/a\uff0f..\uff0fb.md",
    "/memories/\uff0e\uff0e",
    "/memories/...",
    "",
]


@pytest.mark.parametrize("path", HOSTILE)
def test_hostile_paths_are_refused_and_nothing_is_written(
    memory: Memory, tool_for: Callable[[str], Use], path: str
) -> None:
    use = tool_for("alice")
    for command, fields in [
        ("create", {"path": path, "file_text": "pwned"}),
        ("view", {"path": path}),
        ("str_replace", {"path": path, "old_str": "a", "new_str": "b"}),
        ("insert", {"path": path, "insert_line": 0, "insert_text": "pwned"}),
        ("delete", {"path": path}),
        ("rename", {"old_path": path, "new_path": "/memories/ok.md"}),
        ("rename", {"old_path": "/memories/ok.md", "new_path": path}),
    ]:
        refused(use, command, **fields)
    assert memory.users() == []
    root = memory.root
    assert root is not None
    assert not any(p.name.endswith(("pwned", "passwd", "secret.md")) for p in root.parent.rglob("*"))


def test_a_non_string_path_is_refused(memory: Memory, tool_for: Callable[[str], Use]) -> None:
    assert "must be a string" in refused(tool_for("alice"), "view", path=42)


def test_users_never_see_each_other(memory: Memory, tool_for: Callable[[str], Use]) -> None:
    alice, bob, bob_admin = tool_for("alice"), tool_for("bob"), tool_for("bob_admin")
    alice("create", path="/memories/secret.md", file_text="alice's secret")
    bob_admin("create", path="/memories/admin.md", file_text="the admin password")
    bob("create", path="/memories/mine.md", file_text="bob's own")
    assert "does not exist" in refused(bob, "view", path="/memories/secret.md")
    assert "does not exist" in refused(bob, "view", path="/memories/admin.md")
    assert "does not exist" in refused(bob, "delete", path="/memories/admin.md")
    assert "does not exist" in refused(bob, "rename", old_path="/memories/admin.md", new_path="/memories/x.md")
    listing = bob("view", path="/memories")
    assert "mine.md" in listing
    assert "secret" not in listing
    assert "admin" not in listing
    bob("delete", path="/memories/projects")  # a whole category of bob's notes: nobody else's
    bob("create", path="/memories/secret.md", file_text="bob's secret")  # the same path, his own note
    assert memory.knowledge.read_note("alice", "secret") == "alice's secret"
    assert memory.knowledge.read_note("bob_admin", "admin") == "the admin password"
    assert memory.knowledge.search("password", "bob") == []


@pytest.mark.parametrize("user", ["../x", "a/b", "", "\x00"])
def test_hostile_users_are_refused(memory: Memory, user: str) -> None:
    with pytest.raises(InvalidInputError):
        LocalMemoryTool(memory, user)
    with pytest.raises(InvalidInputError):
        AsyncLocalMemoryTool(memory, user)


def test_large_files_and_listings_are_paged(memory: Memory, tool_for: Callable[[str], Use]) -> None:
    use = tool_for("alice")
    text = "".join(f"line {n}\n" for n in range(1, 1001))
    use("create", path="/memories/big.md", file_text=text)
    first = use("view", path="/memories/big.md")
    assert f"line {MAX_VIEW_LINES}\n" in first + "\n"
    assert f"line {MAX_VIEW_LINES + 1}\n" not in first + "\n"
    assert f"view_range [{MAX_VIEW_LINES + 1}, {2 * MAX_VIEW_LINES}]" in first
    page = use("view", path="/memories/big.md", view_range=[990, -1])
    assert page.splitlines()[1:] == [f"{n:>6}\tline {n}" for n in range(990, 1001)]
    assert "Invalid view_range" in refused(use, "view", path="/memories/big.md", view_range=[2000, -1])
    wide = "w" * 5000 + "\n"
    use("create", path="/memories/wide.md", file_text=wide * 50)
    assert len(use("view", path="/memories/wide.md")) < 50_000, "a page of long lines is not capped"
    for n in range(MAX_VIEW_ENTRIES + 20):
        memory.knowledge.write_note("alice", f"n{n:03d}", "x", category="projects")
    listing = use("view", path="/memories/projects")
    assert listing.count("/memories/projects/n") == MAX_VIEW_ENTRIES
    assert f"view_range [{MAX_VIEW_ENTRIES + 1}," in listing
    rest = use("view", path="/memories/projects", view_range=[MAX_VIEW_ENTRIES + 1, -1])
    assert rest.count("/memories/projects/n") == 20


def test_clear_all_memory_takes_only_the_users_notes(memory: Memory) -> None:
    LocalMemoryTool(memory, "bob").call({"command": "create", "path": "/memories/b.md", "file_text": "b"})
    tool = LocalMemoryTool(memory, "alice")
    tool.call({"command": "create", "path": "/memories/a.md", "file_text": "a"})
    tool.call({"command": "create", "path": "/memories/projects/p.md", "file_text": "p"})
    assert tool.clear_all_memory() == "All memory cleared (2 files)"
    assert memory.knowledge.notes("alice") == []
    assert asyncio.run(AsyncLocalMemoryTool(memory, "bob").clear_all_memory()) == "All memory cleared (1 files)"


def _script() -> ScriptedMessages:
    return ScriptedMessages(
        [
            [memory_use("t1", command="view", path="/memories")],
            [
                memory_use("t2", command="create", path="/memories/prefs.md", file_text="Alice likes tea.\n"),
                memory_use("t3", command="view", path="/memories/../../etc/passwd"),
            ],
            [memory_use("t4", command="str_replace", path="/memories/prefs.md", old_str="tea", new_str="green tea")],
            [{"type": "text", "text": "Noted: you like green tea."}],
        ]
    )


def _check(script: ScriptedMessages, memory: Memory, final: Any) -> None:
    assert final.content[0].text == "Noted: you like green tea."
    assert len(script.requests) == 4
    assert script.requests[0]["tools"] == [{"type": "memory_20250818", "name": "memory"}]
    first = script.tool_results(1)
    assert "/memories/projects/" in str(first[0]["content"])
    second = script.tool_results(2)
    assert [block["tool_use_id"] for block in second] == ["t2", "t3"]
    assert "File created successfully" in str(second[0]["content"])
    assert second[1]["is_error"] is True
    assert "/memories" in str(second[1]["content"])
    third = script.tool_results(3)
    assert "green tea" in str(third[0]["content"])
    assert not third[0].get("is_error")
    assert memory.knowledge.read_note("alice", "prefs") == "Alice likes green tea.\n"
    assert [hit.filename for hit in memory.knowledge.search("green tea", "alice")] == ["alice_prefs.md"]


def test_the_sdks_tool_runner_drives_the_tool(memory: Memory) -> None:
    script = _script()
    client = anthropic.Anthropic(api_key="test-key", http_client=httpx.Client(transport=httpx.MockTransport(script)))
    runner = client.beta.messages.tool_runner(
        model="claude-scripted",
        max_tokens=512,
        messages=[{"role": "user", "content": "Remember that I like tea."}],
        tools=[LocalMemoryTool(memory, "alice")],
    )
    _check(script, memory, runner.until_done())


async def test_the_sdks_async_tool_runner_drives_the_async_tool(memory: Memory) -> None:
    script = _script()

    async def answer(request: httpx.Request) -> httpx.Response:
        return script(request)

    transport = httpx.MockTransport(answer)
    client = anthropic.AsyncAnthropic(api_key="test-key", http_client=httpx.AsyncClient(transport=transport))
    runner = client.beta.messages.tool_runner(
        model="claude-scripted",
        max_tokens=512,
        messages=[{"role": "user", "content": "Remember that I like tea."}],
        tools=[AsyncLocalMemoryTool(memory, "alice")],
    )
    _check(script, memory, await runner.until_done())
