"""What a query costs PostgreSQL, counted on the wire: a host's first query of an owner (a
reload: the owner is not in its owner cache) reads the owner's index snapshot and journal, their
feed cursor with their listing, and the erasure marker with the ranker snapshot, in three
statements, none of them inside BEGIN/COMMIT. With 1,000 users most queries of a host are
reloads, and on a loaded machine every round trip is a chance to wait for the scheduler.

The count is libpq's own trace of the messages the client sends (``PQtrace``) on the pool's
one connection: what the server really received, not what the code meant to send."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from psycopg import pq

from local_ai_memory import Memory, MemoryConfig
from local_ai_memory.types import Candidate

USERS = ("alice", "bob", "carol")


def _notes(user: str) -> dict[str, str]:
    words = ("socket", "timeout", "note", "retry", "buffer")
    return {f"n{i}": f"# {user} note {i}\n\n" + " ".join(words[: 1 + i % 5] * (1 + i % 3)) for i in range(30)}


@pytest.fixture
def config(postgres_url: str, postgres_schema: str, tmp_path: Path) -> MemoryConfig:
    """One host's config: a pool of one connection, so the trace sees every statement."""
    return MemoryConfig(
        database_url=postgres_url,
        database_schema=postgres_schema,
        runtime_data_dir=tmp_path / "host",
        database_pool_min_size=1,
        database_pool_max_size=1,
        fsync=False,
    )


QUERY = "socket note timeout"


@pytest.fixture
def stored(config: MemoryConfig, tmp_path: Path) -> dict[str, list[Candidate]]:
    """Every user's notes, index and ranker snapshots stored by another host (then closed);
    returns what that host answered to :data:`QUERY` for each user."""
    with Memory(config.replace(runtime_data_dir=tmp_path / "writer")) as writer:
        for user in USERS:
            writer.knowledge.write_notes(user, _notes(user))
        return {user: writer.knowledge.search(QUERY, user_id=user) for user in USERS}


class Wire:
    """The messages the client sent on the pool's one connection while tracing (see the module)."""

    def __init__(self, memory: Memory, path: Path) -> None:
        self.memory = memory
        self.path = path

    @property
    def _pool(self):  # type: ignore[no-untyped-def]
        backend = self.memory.knowledge_backend
        return backend.db._sync_pool()  # type: ignore[attr-defined]

    def __enter__(self) -> Wire:
        self._file = self.path.open("w")
        with self._pool.connection() as conn:
            conn.pgconn.trace(self._file.fileno())
            conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        return self

    def __exit__(self, *exc: object) -> None:
        with self._pool.connection() as conn:
            conn.pgconn.untrace()
        self._file.close()
        # A sent message is "F <length> <type> <fields>", tab-separated.
        sent = [line.split("\t", 3) for line in self.path.read_text().splitlines() if line.startswith("F\t")]
        simple = [fields[3].strip() for fields in sent if fields[2] == "Query"]
        self.queries = [fields[3].strip() for fields in sent if fields[2] in ("Parse", "Query")]
        self.transactions = simple.count('"BEGIN"')
        self.statements = sum(1 for fields in sent if fields[2] == "Execute") + sum(
            1 for query in simple if query not in ('"BEGIN"', '"COMMIT"', '"ROLLBACK"')
        )


@pytest.fixture
def host(config: MemoryConfig, stored: dict[str, list[Candidate]]) -> Iterator[Memory]:
    """A fresh host that has answered one query (of the last user: its pool is warm)."""
    with Memory(config) as memory:
        memory.knowledge.search(QUERY, user_id=USERS[-1])
        yield memory


def test_a_reload_reads_an_owner_in_three_statements_and_no_transaction(
    host: Memory, stored: dict[str, list[Candidate]], tmp_path: Path
) -> None:
    for user in USERS[:-1]:
        with Wire(host, tmp_path / f"{user}.trace") as wire:
            found = host.knowledge.search(QUERY, user_id=user)
        assert found == stored[user]  # the same notes and scores as the host that wrote them
        assert wire.transactions == 0, wire.queries
        # the index snapshot and journal; the feed cursor and listing; the marker and ranker
        assert wire.statements == 3, wire.queries


def test_a_query_of_an_owner_held_reads_its_feed_and_marker_only(host: Memory, tmp_path: Path) -> None:
    with Wire(host, tmp_path / "held.trace") as wire:
        assert host.knowledge.search(QUERY, user_id=USERS[-1])  # held since the host's first query
    assert wire.transactions == 0, wire.queries
    assert wire.statements == 2, wire.queries


async def test_an_async_reload_ranks_as_the_host_that_wrote(
    config: MemoryConfig, stored: dict[str, list[Candidate]]
) -> None:
    with Memory(config) as fresh:
        for user in USERS:
            assert await fresh.knowledge.asearch(QUERY, user_id=user) == stored[user]


def test_a_note_write_is_two_statements_in_one_transaction(host: Memory, tmp_path: Path) -> None:
    """The owner's counter, the note's row and its change-log row in one statement, then the
    note's index journal line as one row of its own (schema 4): no statement per table."""
    user = USERS[-1]  # held, its index loaded: the write appends one journal line
    with Wire(host, tmp_path / "write.trace") as wire:
        host.knowledge.write_note(user, "fresh", "# Fresh\n\nsocket words written now")
    assert wire.transactions == 1, wire.queries
    assert wire.statements == 2, wire.queries
    assert [hit.filename for hit in host.knowledge.search("fresh socket", user_id=user)][:1] == [f"{user}_fresh.md"]
