"""The entry point: one data root, shared backends, sessions and knowledge, on files and in memory."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from local_ai_memory import (
    InvalidInputError,
    Memory,
    MemoryConfig,
    MemoryManager,
    PathEscapeError,
    RecordNotFoundError,
    Session,
)
from local_ai_memory.backends import InMemoryKnowledgeBackend, InMemoryRuntimeBackend
from local_ai_memory.types import NoteName


@pytest.fixture(params=["files", "in memory"])
def memory(request: pytest.FixtureRequest, tmp_path: Path) -> Memory:
    if request.param == "files":
        return Memory.open(tmp_path, fsync=False)
    return Memory.in_memory(MemoryConfig(runtime_data_dir=tmp_path / "unused"))


def test_sessions_share_the_backend_and_stay_apart(memory: Memory) -> None:
    alice = memory.session("alice", "s1")
    assert isinstance(alice, Session)
    alice.update_state({"task": "a"})
    assert memory.session("alice", "s1").get_state() == {"task": "a"}
    assert memory.session("alice_s1", "x").get_state() == {}
    listed = [(info.scope.user_id, info.scope.session_id) for info in memory.sessions()]
    assert listed == [("alice", "s1")]
    with pytest.raises(InvalidInputError):
        memory.session("../etc", "s1")


def test_notes_by_plain_name_follow_the_naming_rule(memory: Memory) -> None:
    knowledge = memory.knowledge
    assert knowledge.write_note("ops_admin", "secret", "# Secret\n\nkestrel root password rotation\n") == (
        "ops%5Fadmin_secret.md"
    )
    knowledge.write_note("ops", "deploy", "# Deploy\n\nkestrel is the staging cluster\n")
    assert knowledge.notes("ops") == [NoteName("deploy", "knowledge")]
    assert [c.filename for c in knowledge.search("kestrel", "ops")] == ["ops_deploy.md"]
    assert [c.filename for c in knowledge.search("kestrel", "ops_admin")] == ["ops%5Fadmin_secret.md"]
    assert knowledge.read_note("ops_admin", "secret.md").startswith("# Secret")
    assert knowledge.retrieve("staging cluster", "ops").files[0].filename == "ops_deploy.md"
    assert knowledge.delete_note("ops", "deploy") is True
    assert knowledge.delete_note("ops", "deploy") is False
    assert knowledge.search("kestrel", "ops") == []
    with pytest.raises(RecordNotFoundError):
        knowledge.read_note("ops", "deploy")
    for bad in ("", "../x", "a/b", "nul\x00"):
        with pytest.raises((InvalidInputError, PathEscapeError)):
            knowledge.write_note("ops", bad, "x")
    assert knowledge.notes("ops") == []


@pytest.mark.parametrize("on_disk", [True, False])
def test_note_names_round_trip_across_every_category(tmp_path: Path, on_disk: bool) -> None:
    config = MemoryConfig(runtime_data_dir=tmp_path, categories=("knowledge", "work"))
    memory = Memory(config) if on_disk else Memory.in_memory(config)
    knowledge = memory.knowledge
    knowledge.write_note("ops", "deploy", "# Deploy\n\nstaging first\n")
    knowledge.write_note("ops", "on call", "# On call\n\nweek rota\n", category="work")
    knowledge.write_note("ops", "v1.2_notes", "# Release\n\nnotes\n", category="work")
    knowledge.write_note("ops_admin", "secret", "# Secret\n\nroot\n", category="work")
    knowledge.write_note("ops", "readme.md.md", "# Readme\n\nfile ops_readme.md.md\n")
    listed = knowledge.notes("ops")
    assert listed == [
        NoteName("deploy", "knowledge"),
        NoteName("readme.md.md", "knowledge"),
        NoteName("on call", "work"),
        NoteName("v1.2_notes", "work"),
    ]
    assert knowledge.notes("ops", category="work") == listed[2:]
    assert knowledge.notes("ops_admin") == [NoteName("secret", "work")]
    for name, category in listed:  # what notes() gives, read_note and delete_note take back
        assert knowledge.read_note("ops", name, category=category).startswith("# ")
        assert knowledge.note_info("ops", name, category=category) is not None
    assert all(knowledge.delete_note("ops", note.name, category=note.category) for note in listed)
    assert knowledge.notes("ops") == []
    memory.close()


def test_in_memory_writes_nothing_to_disk(tmp_path: Path) -> None:
    memory = Memory.in_memory(MemoryConfig(runtime_data_dir=tmp_path / "never"))
    assert isinstance(memory.runtime, InMemoryRuntimeBackend)
    assert isinstance(memory.knowledge_backend, InMemoryKnowledgeBackend)
    session = memory.session("u", "s")
    session.externalize("dump", "x" * 10_000)
    memory.knowledge.write_note("u", "n", "# N\n\ntext\n")
    assert memory.root is None
    assert not (tmp_path / "never").exists()


def test_the_data_root_is_given_once(tmp_path: Path) -> None:
    memory = Memory.open(tmp_path / "data", fsync=False)
    memory.session("u", "s").update_state({"a": 1})
    memory.knowledge.write_note("u", "n", "# N\n\ntext\n")
    assert (tmp_path / "data" / "memory" / "state" / "u_s.json").exists()
    assert (tmp_path / "data" / "memory_data" / "knowledge" / "u_n.md").exists()
    assert memory.root == (tmp_path / "data").resolve()


def test_open_takes_backends_and_keeps_the_other_kind_under_the_root(tmp_path: Path) -> None:
    """``Memory.open(root, runtime=...)``: the runtime levels go to the backend, the notes under ``root``."""
    from local_ai_memory.backends import InMemoryRuntimeBackend

    runtime = InMemoryRuntimeBackend()
    memory = Memory.open(tmp_path, runtime=runtime)
    assert memory.runtime is runtime
    memory.session("alice", "s1").update_state({"k": 1})
    assert not (tmp_path / "memory").exists()
    memory.knowledge.write_note("alice", "tea", "# Tea\n\ngreen\n")
    assert (tmp_path / "memory_data" / "knowledge" / "alice_tea.md").read_text() == "# Tea\n\ngreen\n"
    assert memory.root == tmp_path


def test_a_custom_runtime_without_a_folder_or_knowledge_backend_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Never a silent default folder: the error names both ways out, and nothing is written."""
    from local_ai_memory import ConfigError
    from local_ai_memory.backends import InMemoryKnowledgeBackend, InMemoryRuntimeBackend

    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(ConfigError, match=r"knowledge=.*Memory\.open\(root"):
        Memory(runtime=InMemoryRuntimeBackend())
    memory = Memory(runtime=InMemoryRuntimeBackend(), knowledge=InMemoryKnowledgeBackend())
    memory.knowledge.write_note("alice", "tea", "# Tea\n")
    assert memory.root is None
    assert list(tmp_path.iterdir()) == []


def test_engines_take_a_backend_not_a_folder(tmp_path: Path) -> None:
    """An engine is given its backend; a folder passed where the backend goes is a clear error."""
    from local_ai_memory import DirectoryGuard, InvalidInputError, MemoryManager, MemoryStore

    with pytest.raises(InvalidInputError, match=r"needs a RuntimeBackend.*Memory\.open"):
        MemoryManager(DirectoryGuard(tmp_path))  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match=r"needs a KnowledgeBackend.*Memory\.open"):
        MemoryStore(DirectoryGuard(tmp_path))  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


SESSION_METHODS = {
    # L0: the agent's state; the library's own run status is read-only here
    *("get_state", "update_state", "replace_state", "bookkeeping"),
    *("aget_state", "aupdate_state", "areplace_state", "abookkeeping"),
    # L1: working memory, its compression, and the context for the next model call
    *("get_working_memory", "update_working_memory", "swap_working_memory"),
    *("aget_working_memory", "aupdate_working_memory", "aswap_working_memory"),
    *("compress", "finish_run", "build_context", "acompress", "afinish_run", "abuild_context"),
    "compressor_with",  # a compressor with an adapter's own model, logging to the conversation log
    # L2: checkpoints of agent runs
    *("checkpoint_run", "checkpoints", "resumable", "acheckpoints", "aresumable"),
    # L3: stored tool outputs, scope-checked
    *("externalize", "load_page", "read_tool_result", "search_tool_result", "list_tool_results", "count_tool_results"),
    *("aexternalize", "aload_page", "aread_tool_result", "asearch_tool_result"),
    *("alist_tool_results", "acount_tool_results"),
}
SESSION_ATTRIBUTES = {
    *("memory", "engine", "user_id", "session_id", "tool_results", "messages", "compressor", "context"),
    "remember_conversation",
}


def test_a_session_exposes_exactly_what_a_session_means() -> None:
    """The public surface of ``Session``, listed: a new name is a deliberate change to these sets.

    The engine's internals (raw plans and payloads, locks, ``scoped``, bookkeeping writes) stay
    behind ``session.engine``; a session is not a ``MemoryManager`` and cannot become another scope.
    """
    session = Memory.in_memory().session("alice", "s1")
    public = {name for name in dir(session) if not name.startswith("_")}
    assert public - SESSION_ATTRIBUTES == SESSION_METHODS
    assert public == SESSION_METHODS | SESSION_ATTRIBUTES
    assert all(callable(getattr(session, name)) for name in SESSION_METHODS)
    assert not isinstance(session, MemoryManager)
    assert isinstance(session.engine, MemoryManager)
    assert session.engine.scope == "alice_s1"
    for name in SESSION_METHODS - {"checkpoint_run", "compressor_with"}:  # neither does I/O itself
        if not name.startswith("a") or name[1:] not in SESSION_METHODS:
            assert inspect.iscoroutinefunction(getattr(session, f"a{name}", None)), f"{name} has no async twin"
    assert list(inspect.signature(session.update_state).parameters) == ["patch"]
    assert session.update_state.__doc__ == MemoryManager.update_state.__doc__
