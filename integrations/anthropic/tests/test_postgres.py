"""The memory tool on PostgreSQL: what Claude writes on one host is searchable on another at once."""

from __future__ import annotations

from pathlib import Path

from local_ai_memory_anthropic import LocalMemoryTool

from local_ai_memory import Memory, MemoryConfig


def test_a_note_written_on_one_host_is_found_on_another(
    postgres_url: str, postgres_schema: str, tmp_path: Path
) -> None:
    def host(name: str) -> Memory:
        return Memory(
            MemoryConfig(runtime_data_dir=tmp_path / name, database_url=postgres_url, database_schema=postgres_schema)
        )

    with host("a") as first, host("b") as second:
        LocalMemoryTool(first, "alice").call(
            {"command": "create", "path": "/memories/deploy.md", "file_text": "We deploy on Fridays.\n"}
        )
        assert [hit.filename for hit in second.knowledge.search("fridays", "alice")] == ["alice_deploy.md"]
        tool = LocalMemoryTool(second, "alice")
        tool.call({"command": "str_replace", "path": "/memories/deploy.md", "old_str": "Fridays", "new_str": "Mondays"})
        assert first.knowledge.read_note("alice", "deploy") == "We deploy on Mondays.\n"
        assert "deploy.md" in str(LocalMemoryTool(first, "alice").call({"command": "view", "path": "/memories"}))
        assert "deploy.md" not in str(LocalMemoryTool(first, "bob").call({"command": "view", "path": "/memories"}))
