"""Several hosts on one PostgreSQL: separate processes, each with its own working folder,
sharing only the database. Lost updates, cross-host paging and search, SIGKILL mid-write,
and a server restart in the middle of a run."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from local_ai_memory import Memory, MemoryConfig
from local_ai_memory._backends.postgres.schema import SCHEMA_VERSION
from local_ai_memory._shared.errors import StorageError

PRELUDE = textwrap.dedent(
    """
    import hashlib, json, sys
    from local_ai_memory import Memory, MemoryConfig

    url, schema, folder = sys.argv[1], sys.argv[2], sys.argv[3]
    memory = Memory(MemoryConfig(database_url=url, database_schema=schema, runtime_data_dir=folder, fsync=False))
    """
)


def host(
    script: str, url: str, schema: str, folder: Path, *args: str, prelude: bool = True, interactive: bool = False
) -> subprocess.Popen[str]:
    """A "host": a process of its own with its own working folder; only the database is shared."""
    folder.mkdir(parents=True, exist_ok=True)
    code = (PRELUDE if prelude else "import sys\nurl, schema = sys.argv[1], sys.argv[2]\n") + textwrap.dedent(script)
    return subprocess.Popen(
        [sys.executable, "-c", code, url, schema, str(folder), *args],
        stdin=subprocess.PIPE if interactive else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        text=True,
    )


@pytest.fixture
def memory(postgres_url: str, postgres_schema: str, tmp_path: Path) -> Iterator[Memory]:
    config = MemoryConfig(database_url=postgres_url, database_schema=postgres_schema, runtime_data_dir=tmp_path / "me")
    with Memory(config) as memory:
        yield memory


def test_four_hosts_times_300_updates_lose_nothing(
    memory: Memory, postgres_url: str, postgres_schema: str, tmp_path: Path
) -> None:
    script = """
        session = memory.session("shared", "session")
        label = sys.argv[4]
        for n in range(300):
            session.update_state({f"{label}-{n}": n})
    """
    hosts = [host(script, postgres_url, postgres_schema, tmp_path / f"h{i}", f"p{i}") for i in range(4)]
    for process in hosts:
        process.communicate(timeout=240)
        assert process.returncode == 0
    state = memory.session("shared", "session").get_state()
    assert state == {f"p{i}-{n}": n for i in range(4) for n in range(300)}


def test_a_tool_output_stored_on_one_host_pages_back_identically_on_another(
    postgres_url: str, postgres_schema: str, tmp_path: Path
) -> None:
    writer = host(
        """
        text = ("line \\x00 with NUL, emoji \\U0001f40d, CRLF\\r\\n" * 7000) + "end"
        reference = json.loads(memory.session("alice", "s1").externalize("dump", text))
        print(json.dumps([reference["result_id"], hashlib.sha256(text.encode()).hexdigest(), len(text)]))
        """,
        postgres_url,
        postgres_schema,
        tmp_path / "a",
    )
    out, _ = writer.communicate(timeout=60)
    assert writer.returncode == 0
    result_id, digest, length = json.loads(out)
    assert length > 200_000
    reader = host(
        """
        session, pieces, offset = memory.session("alice", "s1"), [], 0
        while offset is not None:
            page = session.load_page(sys.argv[4], offset, 7_000)
            pieces.append(page.content)
            offset = page.next_offset
        text = "".join(pieces)
        print(json.dumps([hashlib.sha256(text.encode()).hexdigest(), len(pieces)]))
        """,
        postgres_url,
        postgres_schema,
        tmp_path / "b",
        result_id,
    )
    out, _ = reader.communicate(timeout=60)
    assert reader.returncode == 0
    assert json.loads(out) == [digest, -(-length // 7_000)]


def test_a_note_written_on_one_host_is_found_by_the_next_query_on_another(
    postgres_url: str, postgres_schema: str, tmp_path: Path
) -> None:
    searcher = host(
        """
        for query in sys.stdin:
            found = memory.knowledge.search(query.strip(), "alice")
            print(json.dumps([c.filename for c in found]), flush=True)
        """,
        postgres_url,
        postgres_schema,
        tmp_path / "b",
        interactive=True,
    )
    assert searcher.stdin is not None
    assert searcher.stdout is not None

    def ask(query: str) -> list[str]:
        assert searcher.stdin is not None
        assert searcher.stdout is not None
        searcher.stdin.write(query + "\n")
        searcher.stdin.flush()
        answer: list[str] = json.loads(searcher.stdout.readline())
        return answer

    try:
        assert ask("kiwi orchard") == []
        writer = host(
            'memory.knowledge.write_note("alice", "fruit", "# Fruit\\n\\nThe kiwi orchard opens in May.")',
            postgres_url,
            postgres_schema,
            tmp_path / "a",
        )
        writer.communicate(timeout=60)
        assert writer.returncode == 0
        assert ask("kiwi orchard") == ["alice_fruit.md"]
        assert ask("kiwi") == ["alice_fruit.md"]
    finally:
        searcher.communicate(timeout=30)


KILLED = """
    label = sys.argv[4]
    session = memory.session("crash", "s")
    blobs = ["A" * 50_000, "B" * 50_000]
    print("ready", flush=True)
    n = 0
    while True:
        session.update_state({label: {"n": n, "body": blobs[n % 2]}})
        session.engine.save_tool_result(
            f"{label}-{n}", {"id": f"{label}-{n}", "tool": "t", "created_at": "", "content": blobs[n % 2] * 3}
        )
        session.messages.append([{"role": "user", "content": f"{label}:{n}"}])
        print(f"ack {n}", flush=True)
        n += 1
"""


def test_hosts_killed_mid_write_lose_nothing_acknowledged(
    memory: Memory, postgres_url: str, postgres_schema: str, tmp_path: Path
) -> None:
    rng = random.Random(13)
    acked: dict[str, int] = {}
    kills = 0
    for round_number in range(25):
        hosts = {f"w{i}": host(KILLED, postgres_url, postgres_schema, tmp_path / f"w{i}", f"w{i}") for i in range(4)}
        for process in hosts.values():
            assert process.stdout is not None
            assert process.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.05, 0.4))
        for process in hosts.values():
            process.send_signal(signal.SIGKILL)
        for label, process in hosts.items():
            out, _ = process.communicate(timeout=30)
            assert process.returncode == -signal.SIGKILL
            kills += 1
            done = [int(line.split()[1]) for line in out.splitlines() if line.startswith("ack ")]
            if done:
                acked[f"{label}/{round_number}"] = done[-1]
        session = memory.session("crash", "s")
        state = session.get_state()
        for label in hosts:
            if label in state:  # never a half-written value
                assert state[label]["body"] == ("A", "B")[state[label]["n"] % 2] * 50_000
            if f"{label}/{round_number}" in acked:
                assert state[label]["n"] >= acked[f"{label}/{round_number}"]
        records = session.messages.records()
        assert [record.seq for record in records] == list(range(len(records)))
        contents = {record.content for record in records}
        for key, last in acked.items():
            label, number = key.split("/")
            if int(number) == round_number:
                assert {f"{label}:{n}" for n in range(last + 1)} <= contents
        for result_id in session.list_tool_results():  # every stored output is whole
            label, n = result_id.split("-")
            payload = session.engine.load_tool_result(result_id)
            assert payload["content"] == ("A", "B")[int(n) % 2] * 150_000
    assert kills >= 100
    assert len(acked) > 50  # most hosts were killed after acknowledging writes, not before


def test_a_restarted_server_gives_a_clear_error_then_the_pool_reconnects(
    postgres_url: str, postgres_schema: str, postgres_server: Any, tmp_path: Path
) -> None:
    config = MemoryConfig(
        database_url=postgres_url, database_schema=postgres_schema, runtime_data_dir=tmp_path, database_pool_timeout=2
    )
    with Memory(config) as memory:
        session = memory.session("alice", "s1")
        session.update_state({"before": 1})
        memory.knowledge.write_note("alice", "kept", "# Kept\n\nsurvives the restart")
        postgres_server.stop()
        try:
            with pytest.raises(StorageError) as cut:
                session.update_state({"during": 1})
            message = str(cut.value)
            assert message.startswith("update_state failed: cannot connect to PostgreSQL (host /")
            assert "database laim_" in message
            assert "\n" not in message
        finally:
            postgres_server.start()
        assert session.update_state({"after": 1}) == {"before": 1, "after": 1}  # nothing acknowledged was lost
        assert memory.knowledge.search("restart", "alice")[0].filename == "alice_kept.md"


def test_two_hosts_setting_up_the_schema_at_once_both_succeed(
    postgres_url: str, postgres_schema: str, tmp_path: Path
) -> None:
    script = """
        from local_ai_memory.backends import PostgresRuntimeBackend
        print(PostgresRuntimeBackend(url, schema=schema).setup())
    """
    hosts = [host(script, postgres_url, postgres_schema, tmp_path / f"h{i}", prelude=False) for i in range(3)]
    outputs = [process.communicate(timeout=60)[0] for process in hosts]
    assert [process.returncode for process in hosts] == [0, 0, 0]
    # one ran the migrations, the others waited
    assert sorted(int(out.split()[-1]) for out in outputs) == [0, 0, SCHEMA_VERSION]
