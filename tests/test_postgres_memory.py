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


def test_index_blobs_are_stored_uncompressed(postgres_url: str, postgres_schema: str, tmp_path: Path) -> None:
    """An owner's index journal grows by a line at each note write; a compressed value would be
    recompressed whole at every append (half the server's work of a write), so blobs are kept
    uncompressed (schema version 3)."""
    import psycopg
    from psycopg import sql

    config = MemoryConfig(database_url=postgres_url, database_schema=postgres_schema, runtime_data_dir=tmp_path)
    with Memory(config) as memory:
        for n in range(40):
            memory.knowledge.write_note("alice", f"n{n}", f"# Note {n}\n\nwords about topic {n} " * 8)
        assert memory.knowledge.search("topic", "alice")
    with psycopg.connect(postgres_url) as conn:
        query = sql.SQL(
            "SELECT name, octet_length(data), pg_column_compression(data) FROM {}.blobs WHERE name LIKE %s"
        ).format(sql.Identifier(postgres_schema))
        rows = conn.execute(query, ("%alice%journal%",)).fetchall()
    assert rows
    assert all(size > 4096 for _, size, _ in rows)  # long enough that PostgreSQL would compress it
    assert [method for *_, method in rows] == [None] * len(rows)
