"""The entry point: one data root, shared backends, sessions and knowledge, on files and in memory."""

from __future__ import annotations

from pathlib import Path

import pytest

from local_ai_memory import InvalidInputError, Memory, MemoryConfig, PathEscapeError, RecordNotFoundError, Session
from local_ai_memory.backends import InMemoryKnowledgeBackend, InMemoryRuntimeBackend


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
    assert knowledge.notes("ops") == ["ops_deploy.md"]
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
