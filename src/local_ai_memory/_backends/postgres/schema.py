"""The PostgreSQL schema of both PG backends and its versioned migrations.

Every table lives in one schema (``MemoryConfig.database_schema``, ``local_ai_memory`` by
default) and is keyed by the tenant first: ``(user_id, session_id)`` for the runtime levels,
the note owner (the user's file-name prefix) for notes. ``schema_version`` records which
migrations ran. :func:`migrate` applies the missing ones in one transaction under an advisory
lock, so hosts that start at the same moment wait for each other and all succeed; a schema
newer than this library is refused with :class:`UnsupportedFormatError`.

Text is stored as ``bytea`` (UTF-8, lone surrogates kept): PostgreSQL ``text`` cannot hold NUL.
"""

from __future__ import annotations

from local_ai_memory._backends.postgres.pool import Database, Op, Stmt
from local_ai_memory._shared.errors import UnsupportedFormatError

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "migrate"]

_LOCK_CLASS = 0x4C41494D  # "LAIM": the advisory-lock namespace of this library

_SCOPE = "user_id text NOT NULL, session_id text NOT NULL"

MIGRATIONS: list[list[str]] = [
    [  # 1: runtime levels, erasures, knowledge notes with their change feed, blobs, vectors
        f"""CREATE TABLE {{s}}.scopes ({_SCOPE},
            state bytea, working bytea, plans bytea,
            next_seq bigint NOT NULL DEFAULT 0,
            modified double precision NOT NULL DEFAULT extract(epoch FROM clock_timestamp()),
            PRIMARY KEY (user_id, session_id))""",
        f"""CREATE TABLE {{s}}.plan_steps ({_SCOPE}, plan_id text NOT NULL,
            id bigint GENERATED ALWAYS AS IDENTITY, body bytea NOT NULL,
            PRIMARY KEY (user_id, session_id, plan_id, id))""",
        f"""CREATE TABLE {{s}}.tool_results ({_SCOPE}, result_id text NOT NULL,
            meta bytea NOT NULL, paged boolean NOT NULL, total_chars bigint NOT NULL, chunk_chars integer NOT NULL,
            size bigint NOT NULL, saved_at double precision NOT NULL,
            PRIMARY KEY (user_id, session_id, result_id), UNIQUE (result_id))""",
        f"""CREATE TABLE {{s}}.tool_result_chunks ({_SCOPE}, result_id text NOT NULL, idx integer NOT NULL,
            data bytea NOT NULL,
            PRIMARY KEY (user_id, session_id, result_id, idx),
            FOREIGN KEY (user_id, session_id, result_id)
                REFERENCES {{s}}.tool_results (user_id, session_id, result_id) ON DELETE CASCADE)""",
        "ALTER TABLE {s}.tool_result_chunks ALTER COLUMN data SET STORAGE EXTERNAL",
        f"""CREATE TABLE {{s}}.messages ({_SCOPE}, seq bigint NOT NULL, body bytea NOT NULL,
            PRIMARY KEY (user_id, session_id, seq))""",
        """CREATE TABLE {s}.erasures (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            user_id text NOT NULL, session_id text NOT NULL, UNIQUE (user_id, session_id))""",
        """CREATE TABLE {s}.notes (owner text NOT NULL, category text NOT NULL, name text NOT NULL,
            data bytea NOT NULL, size bigint NOT NULL, version bigint NOT NULL, modified double precision NOT NULL,
            PRIMARY KEY (owner, category, name))""",
        "CREATE INDEX notes_by_category ON {s}.notes (category, name)",
        "CREATE TABLE {s}.note_feed (id integer PRIMARY KEY CHECK (id = 1), cursor bigint NOT NULL)",
        "INSERT INTO {s}.note_feed VALUES (1, 0)",
        """CREATE TABLE {s}.note_changes (id bigint PRIMARY KEY, owner text NOT NULL,
            category text NOT NULL, name text NOT NULL)""",
        "CREATE TABLE {s}.blobs (name text PRIMARY KEY, data bytea NOT NULL)",
        """CREATE TABLE {s}.vectors (model text NOT NULL, digest text NOT NULL, vector real[] NOT NULL,
            PRIMARY KEY (model, digest))""",
    ],
    [  # 2: a change feed per note owner (no row that every writer locks), versions from a sequence
        "CREATE SEQUENCE {s}.note_versions",
        """SELECT setval('{s}.note_versions', greatest((SELECT cursor FROM {s}.note_feed WHERE id = 1),
            (SELECT coalesce(max(version), 0) FROM {s}.notes)) + 1, false)""",
        """CREATE TABLE {s}.note_owners (owner text PRIMARY KEY, cursor bigint NOT NULL,
            incarnation bigint NOT NULL)""",
        "DROP TABLE {s}.note_changes",
        "DROP TABLE {s}.note_feed",
        """CREATE TABLE {s}.note_changes (owner text NOT NULL, id bigint NOT NULL,
            category text NOT NULL, name text NOT NULL, PRIMARY KEY (owner, id))""",
    ],
    [  # 3: blobs stored uncompressed. An owner's index journal grows by one line per note write
        # (`data || line`), and PostgreSQL recompresses the whole value with pglz at each append:
        # half the server's CPU of a note write (2.9 -> 1.5 ms a note at 200-note users). Only the
        # storage of values written from now on changes (no rewrite of the table).
        "ALTER TABLE {s}.blobs ALTER COLUMN data SET STORAGE EXTERNAL",
    ],
    [  # 4: appends to a blob are rows of their own. `data || line` rewrote an owner's whole
        # journal (up to a few hundred KB) at every note write: its TOAST chunks, their WAL, and
        # the dead chunks vacuum must clear. A blob is now its head row's data followed by its
        # tail rows in `seq` order; a write of the whole blob folds the tail away. Blobs of a
        # version 3 database have no tail rows and read as they are. The table is renamed so
        # that a host of an older build still running fails at its next blob statement instead
        # of appending after, and reading without, the tail rows.
        "ALTER TABLE {s}.blobs RENAME TO blob_heads",
        """CREATE TABLE {s}.blob_tails (name text NOT NULL, seq bigint GENERATED ALWAYS AS IDENTITY,
            data bytea NOT NULL, PRIMARY KEY (name, seq))""",
        "ALTER TABLE {s}.blob_tails ALTER COLUMN data SET STORAGE EXTERNAL",
    ],
]
SCHEMA_VERSION = len(MIGRATIONS)


def _migrate(db: Database) -> Op[int]:
    yield Stmt(db.q("SELECT pg_advisory_xact_lock(%s, hashtext(%s))"), (_LOCK_CLASS, db.settings.schema))
    yield Stmt(db.q("CREATE SCHEMA IF NOT EXISTS {s}"))
    yield Stmt(
        db.q(
            "CREATE TABLE IF NOT EXISTS {s}.schema_version (version integer PRIMARY KEY,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
    )
    row = yield Stmt(db.q("SELECT coalesce(max(version), 0) FROM {s}.schema_version"), fetch="one")
    current = int(row[0])
    if current > SCHEMA_VERSION:
        raise UnsupportedFormatError(
            f"the database schema {db.settings.schema!r} is at version {current}; this library knows up to "
            f"{SCHEMA_VERSION}: upgrade local-ai-memory"
        )
    for version in range(current + 1, SCHEMA_VERSION + 1):
        for statement in MIGRATIONS[version - 1]:
            yield Stmt(db.q(statement))
        yield Stmt(db.q("INSERT INTO {s}.schema_version (version) VALUES (%s)"), (version,))
    return SCHEMA_VERSION - current


def migrate(db: Database) -> int:
    """Bring the schema up to date; return how many migrations ran (0 when it was current)."""
    return db.run("schema setup", _migrate(db), pooled=False)


async def amigrate(db: Database) -> int:
    """Async twin of :func:`migrate`."""
    return await db.arun("schema setup", _migrate(db), pooled=False)
