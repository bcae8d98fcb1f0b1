"""Choosing PostgreSQL with one setting, and the errors a user sees when it goes wrong."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from local_ai_memory import Memory, MemoryConfig
from local_ai_memory._backends.postgres.pool import Database, DatabaseSettings, Op, Stmt
from local_ai_memory._shared.errors import ConfigError, LockTimeoutError, StorageError
from local_ai_memory.backends import PostgresKnowledgeBackend, PostgresRuntimeBackend


def test_one_setting_puts_the_whole_memory_in_postgres(
    postgres_url: str, postgres_schema: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOCAL_AI_MEMORY_DATABASE_URL", postgres_url)
    monkeypatch.setenv("LOCAL_AI_MEMORY_DATABASE_SCHEMA", postgres_schema)
    config = MemoryConfig(runtime_data_dir=tmp_path / "root")
    assert config.database_url == postgres_url
    assert postgres_url not in repr(config)  # the URL may hold a password
    with Memory(config) as memory:
        assert isinstance(memory.runtime, PostgresRuntimeBackend)
        assert isinstance(memory.knowledge_backend, PostgresKnowledgeBackend)
        session = memory.session("alice", "s1")
        session.update_state({"task": "ship"})
        memory.knowledge.write_note("alice", "deploy", "# Deploy\n\nRun the blue-green deploy script.")
        assert memory.knowledge.search("deploy script", "alice")[0].filename == "alice_deploy.md"
        assert [info.scope.user_id for info in memory.sessions()] == ["alice"]
    assert not (tmp_path / "root").exists()  # nothing went to files
    with Memory(MemoryConfig(runtime_data_dir=tmp_path / "root")) as again:  # from the environment again
        assert again.session("alice", "s1").get_state() == {"task": "ship"}


def test_files_stay_the_default(tmp_path: Path) -> None:
    with Memory(MemoryConfig(runtime_data_dir=tmp_path)) as memory:
        assert type(memory.runtime).__name__ == "FileRuntimeBackend"
        assert type(memory.knowledge_backend).__name__ == "FileKnowledgeBackend"
        assert memory.root == tmp_path


def test_a_wrong_database_is_one_line_naming_host_and_database_never_the_password(postgres_url: str) -> None:
    parts = conninfo_to_dict(postgres_url)
    wrong = make_conninfo(postgres_url, dbname="no_such_db", password="s3cret-pw")
    with pytest.raises(StorageError) as failed:
        Memory(MemoryConfig(database_url=wrong))
    message = str(failed.value)
    assert "\n" not in message
    assert f"host {parts['host']}" in message
    assert "database no_such_db" in message
    assert "s3cret-pw" not in message
    with pytest.raises(ConfigError, match="connection string"):
        Memory(MemoryConfig(database_url="this is not = a url ="))


def test_an_exhausted_pool_waits_a_bounded_time_then_raises(postgres_url: str, postgres_schema: str) -> None:
    backend = PostgresRuntimeBackend(postgres_url, schema=postgres_schema, pool_max_size=1, pool_timeout=0.5)
    backend.setup()
    from local_ai_memory._contracts.runtime import Scope

    scope = Scope.of("alice", "s1")
    holding, release = threading.Event(), threading.Event()

    def slow(state: dict[str, object]) -> dict[str, object]:
        holding.set()
        release.wait(10)
        return {"slow": True}

    worker = threading.Thread(target=backend.update_state, args=(scope, slow))
    worker.start()
    try:
        assert holding.wait(10)
        with pytest.raises(LockTimeoutError, match=r"no database connection free within 0\.5 s"):
            backend.get_state(scope)
    finally:
        release.set()
        worker.join()
    assert backend.get_state(scope) == {"slow": True}
    backend.close()


async def test_async_callers_beyond_the_pool_size_wait_their_turn(postgres_url: str, postgres_schema: str) -> None:
    import asyncio

    from local_ai_memory._contracts.runtime import Scope

    backend = PostgresRuntimeBackend(postgres_url, schema=postgres_schema, pool_max_size=1, pool_timeout=0.5)
    await backend.asetup()
    scope = Scope.of("alice", "s1")
    assert await backend.aupdate_state(scope, lambda state: {"n": 1}) == {"n": 1}
    results = await asyncio.gather(*(backend.aget_state(scope) for _ in range(5)))
    assert results == [{"n": 1}] * 5  # five callers share one connection in turn
    backend.close()


@pytest.mark.slow
def test_a_100_mb_tool_output_round_trips_and_pages_by_chunk(postgres_url: str, postgres_schema: str) -> None:
    import psycopg
    from psycopg import sql

    from local_ai_memory._backends.postgres.runtime import CHUNK_CHARS
    from local_ai_memory._contracts.runtime import Scope

    backend = PostgresRuntimeBackend(postgres_url, schema=postgres_schema)
    scope = Scope.of("alice", "s1")
    unit = "0123456789\x00\r\n\u00e9" * 7  # NUL and a 2-byte character (4-byte ones: the conformance suite)
    text = unit * (100 * 1024 * 1024 // len(unit.encode()) + 1)
    assert len(text.encode()) > 100 * 1024 * 1024
    payload = {"id": "big", "tool": "dump", "created_at": "", "content": text}
    assert backend.save_tool_result(scope, "big", payload) > 100 * 1024 * 1024
    middle = len(text) // 2 + 3
    page = backend.read_tool_result_page(scope, "big", middle, 5000)
    assert page.content == text[middle : middle + 5000]
    assert page.total_chars == len(text)
    assert page.next_offset == middle + 5000
    with psycopg.connect(postgres_url) as conn:
        query = sql.SQL("SELECT count(*) FROM {}.tool_result_chunks WHERE result_id = 'big'")
        chunks = conn.execute(query.format(sql.Identifier(postgres_schema))).fetchone()
    assert chunks == (-(-len(text) // CHUNK_CHARS),)  # a page reads one or two of these
    del page
    assert backend.load_tool_result(scope, "big") == payload
    backend.close()


def _pid_op(db: Database) -> Op[int]:
    row = yield Stmt(db.q("SELECT pg_backend_pid()"), fetch="one")
    return int(row[0])


def _terminate(url: str, name: str) -> int:
    """End every server process of connections named ``name`` (as an administrator would)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s", (name,)
        ).fetchall()
    return sum(1 for (ended,) in rows if ended)


@pytest.mark.parametrize("read", [False, True])
@pytest.mark.parametrize("check", [True, False])
def test_a_connection_the_server_ended_is_replaced_without_the_caller_seeing_it(
    postgres_url: str, postgres_schema: str, check: bool, read: bool
) -> None:
    """Connections are not probed when taken from the pool: the operation's BEGIN (a read
    operation's statement) finds a dead one, and the operation runs on a new connection
    (``check_connections=False``: it fails)."""
    name = f"ended-{postgres_schema}"
    url = make_conninfo(postgres_url, application_name=name)
    db = Database(DatabaseSettings(url, schema=postgres_schema, pool_max_size=3, check_connections=check))
    try:
        first = db.run("pid", _pid_op(db), read=read)
        assert _terminate(postgres_url, name) >= 1
        if not check:
            with pytest.raises(StorageError, match="pid failed on PostgreSQL"):
                db.run("pid", _pid_op(db), read=read)
            return
        second = db.run("pid", _pid_op(db), read=read)
        assert second != first  # a new server process: the ended one was dropped
    finally:
        db.close()


@pytest.mark.parametrize("read", [False, True])
@pytest.mark.parametrize("check", [True, False])
async def test_an_async_connection_the_server_ended_is_replaced_without_the_caller_seeing_it(
    postgres_url: str, postgres_schema: str, check: bool, read: bool
) -> None:
    name = f"aended-{postgres_schema}"
    url = make_conninfo(postgres_url, application_name=name)
    db = Database(DatabaseSettings(url, schema=postgres_schema, pool_max_size=3, check_connections=check))
    try:
        first = await db.arun("pid", _pid_op(db), read=read)
        assert _terminate(postgres_url, name) >= 1
        if not check:
            with pytest.raises(StorageError, match="pid failed on PostgreSQL"):
                await db.arun("pid", _pid_op(db), read=read)
            return
        second = await db.arun("pid", _pid_op(db), read=read)
        assert second != first
    finally:
        await db.aclose()


def test_setup_opens_the_pool_so_the_first_operation_finds_a_connection(
    postgres_url: str, postgres_schema: str
) -> None:
    from local_ai_memory._contracts.runtime import Scope

    backend = PostgresRuntimeBackend(postgres_url, schema=postgres_schema)
    backend.setup()
    pool = backend.db._pool
    assert pool is not None
    pool.wait(10)  # the first connection is made in the background
    assert pool.get_stats()["pool_available"] == 1
    assert backend.get_state(Scope.of("alice", "s1")) == {}
    assert pool.get_stats()["connections_num"] == 1  # the operation used it: no second connection
    backend.close()


def test_a_read_operation_sends_no_transaction_and_leaves_the_connection_as_it_was(
    postgres_url: str, postgres_schema: str
) -> None:
    """A read runs each statement in autocommit (no BEGIN: ``now()`` is each statement's own
    start), and the pooled connection goes back out of autocommit, so the next operation is one
    transaction again."""
    db = Database(DatabaseSettings(postgres_url, schema=postgres_schema, pool_max_size=1))

    def two() -> Op[tuple[Any, Any]]:
        first = yield Stmt(db.q("SELECT now()"), fetch="one")
        second = yield Stmt(db.q("SELECT pg_sleep(0.01), now()"), fetch="one")
        return first[0], second[1]

    try:
        first, second = db.run("two", two(), read=True)
        assert second > first  # each statement its own transaction
        first, second = db.run("two", two())
        assert second == first  # one transaction: now() is its start
        db.run("two", two(), read=True)
        with db._sync_pool().connection() as conn:  # the pool's one connection, out of autocommit again
            assert conn.autocommit is False
    finally:
        db.close()


def test_a_database_dropped_unclosed_closes_its_pool_even_when_a_pool_worker_collects_it(
    postgres_url: str, postgres_schema: str
) -> None:
    """A memory dropped without ``close`` is freed by whatever thread runs the next collection,
    one of its pool's workers included; a worker cannot wait for itself, so the pool is closed
    from a thread of its own, with no unraisable error and no connection left open."""
    import gc
    import sys
    import time
    import weakref

    from psycopg_pool.pool import MaintenanceTask

    unraisable: list[Any] = []
    hook, sys.unraisablehook = sys.unraisablehook, unraisable.append
    try:
        db = Database(DatabaseSettings(postgres_url, schema=postgres_schema))
        db.open()
        pool = db._sync_pool()
        pool.wait(10)
        cycle: dict[str, Any] = {"db": db}
        cycle["self"] = cycle  # reachable only through a cycle, as a dropped Memory is
        pool_ref = weakref.ref(pool)
        collected = threading.Event()

        class Collect(MaintenanceTask):
            def _run(self, pool: Any) -> None:
                gc.collect()
                collected.set()

        task = Collect(pool)
        del db, cycle, pool
        task.pool().run_task(task)  # type: ignore[union-attr]
        assert collected.wait(10)
        deadline = time.monotonic() + 10
        while (found := pool_ref()) is not None and not found.closed:
            assert time.monotonic() < deadline, "the dropped pool was never closed"
            time.sleep(0.01)
    finally:
        sys.unraisablehook = hook
    assert unraisable == []


def test_an_append_costs_its_line_not_the_blob(postgres_url: str, postgres_schema: str, tmp_path: Path) -> None:
    """An owner's index journal grows by a line at each note write. Appending by `data || line`
    rewrote the whole value each time (its TOAST chunks and their WAL: up to a few hundred KB
    a note); an append is now a row of its own (schema version 4), so its WAL is about its line,
    whatever the blob's size, and the blob still reads back whole, in order."""
    import os

    import psycopg

    config = MemoryConfig(database_url=postgres_url, database_schema=postgres_schema, runtime_data_dir=tmp_path)
    backend = PostgresKnowledgeBackend.from_config(config)
    big = os.urandom(1 << 20)  # incompressible: stored as 1 MB either way
    backend.write_blob(".index/alice_index.journal", big)
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        before = conn.execute("SELECT pg_current_wal_lsn()").fetchone()
        for n in range(3):
            backend.append_blob(".index/alice_index.journal", f"line {n}\n".encode())
        assert before is not None
        row = conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", (before[0],)).fetchone()
    assert row is not None
    assert int(row[0]) < 64 * 1024  # three rewrites of the blob wrote more than 3 MB of WAL
    assert backend.read_blob(".index/alice_index.journal") == big + b"line 0\nline 1\nline 2\n"
    assert backend.blob_size(".index/alice_index.journal") == len(big) + 21
    backend.write_blob(".index/alice_index.journal", b"fresh\n")  # a whole write drops the tail
    assert backend.read_blob(".index/alice_index.journal") == b"fresh\n"
    backend.db.close()


def test_a_version_3_database_keeps_its_blobs_and_old_hosts_are_stopped(
    postgres_url: str, postgres_schema: str, tmp_path: Path
) -> None:
    """Schema 4 moves appends to rows of their own: a version 3 database's blobs read as they
    were, and the blobs table is renamed, so a host of an older build still running fails at
    its next blob statement instead of appending where no new host reads."""
    import psycopg

    from local_ai_memory._backends.postgres.schema import MIGRATIONS, SCHEMA_VERSION

    schema = f'"{postgres_schema}"'
    journal = ".index/alice_index.journal"
    old_append = f"UPDATE {schema}.blobs SET data = data || %s WHERE name = %s"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(f"CREATE TABLE {schema}.schema_version (version integer PRIMARY KEY, applied_at timestamptz)")
        for version, statements in enumerate(MIGRATIONS[:3], start=1):
            for statement in statements:
                conn.execute(statement.replace("{s}", schema))
            conn.execute(f"INSERT INTO {schema}.schema_version (version) VALUES (%s)", (version,))
        conn.execute(f"INSERT INTO {schema}.blobs (name, data) VALUES (%s, %s)", (journal, b"line 1\n"))
        conn.execute(old_append, (b"line 2\n", journal))  # how a version 3 host appended
    config = MemoryConfig(database_url=postgres_url, database_schema=postgres_schema, runtime_data_dir=tmp_path)
    backend = PostgresKnowledgeBackend.from_config(config)
    try:
        assert backend.read_blob(journal) == b"line 1\nline 2\n"
        backend.append_blob(journal, b"line 3\n")
        assert backend.read_blob(journal) == b"line 1\nline 2\nline 3\n"
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            assert conn.execute(f"SELECT max(version) FROM {schema}.schema_version").fetchone() == (SCHEMA_VERSION,)
            with pytest.raises(psycopg.errors.UndefinedTable):
                conn.execute(old_append, (b"line 4\n", journal))
        assert backend.read_blob(journal) == b"line 1\nline 2\nline 3\n"
    finally:
        backend.db.close()
