"""Seeing, moving and erasing what the memory keeps: users, show, delete, forget, export/import."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from local_ai_memory import InvalidInputError, Memory, RecordNotFoundError, UnsupportedFormatError
from local_ai_memory.backends import Erasure, Scope

MemoryFactory = Callable[[Path], Memory]

FACTORIES: dict[str, MemoryFactory] = {
    "files": lambda root: Memory.open(root, fsync=False),
    "in-memory": lambda root: Memory.in_memory(),
}

NOTES = {
    "tea": "# Green tea\r\nSteep at 80 \N{DEGREE SIGN}C for two minutes. \N{TEACUP WITHOUT HANDLE}\r\n",
    "deploy": "# Deploying kestrel\n\nRun `make deploy` from the ops_tools repo.\n",
}


def fill(memory: Memory, user: str) -> None:
    """Every level in two sessions, a checkpoint with steps, a large tool output and notes."""
    for session_id in ("s1", "s_2"):
        session = memory.session(user, session_id)
        session.update_state({"owner": user, "nested": {"nul": "a\x00b", "emoji": "\N{SNAKE}"}})
        session.update_working_memory(f"## Current Goal\nhelp {user}\r\n")
        run = session.checkpoint_run("agent", task="ship it", handle_signals=False)
        run.start()
        run.step(state={"note": "first"})
        run.step(state={"note": "second"})
        session.externalize("grep", f"{user} line\n" * 4000)
        session.messages.append(
            [{"role": "user", "content": f"hello from {user}"}, {"role": "assistant", "content": "hi"}]
        )
    for name, text in NOTES.items():
        memory.knowledge.write_note(user, name, text)


@pytest.fixture(params=[*sorted(FACTORIES), "postgres"])
def make(request: pytest.FixtureRequest) -> Iterator[MemoryFactory]:
    """Each test runs on files, in memory and on PostgreSQL (a fresh schema of the embedded server)."""
    opened: list[Memory] = []
    if request.param == "postgres":
        url = request.getfixturevalue("postgres_url")
        schema = request.getfixturevalue("postgres_schema")

        def factory(root: Path) -> Memory:
            return Memory.open(root, fsync=False, database_url=url, database_schema=schema)
    else:
        factory = FACTORIES[request.param]

    def tracked(root: Path) -> Memory:
        opened.append(factory(root))
        return opened[-1]

    yield tracked
    for memory in opened:
        memory.close()


def test_users_lists_sessions_sizes_and_notes(make: MemoryFactory, tmp_path: Path) -> None:
    memory = make(tmp_path)
    fill(memory, "bob")
    fill(memory, "bob_admin")
    users = {info.user_id: info for info in memory.users()}
    assert sorted(users) == ["bob", "bob_admin"]
    bob = users["bob"]
    assert [info.scope.session_id for info in bob.sessions] == ["s1", "s_2"]
    assert bob.notes == 2
    assert all(info.size > 30_000 for info in bob.sessions)  # the 4,000-line tool output counts
    assert bob.size == sum(info.size for info in bob.sessions) + bob.note_bytes
    assert bob.last_used > 0
    assert bob.to_dict()["sessions"][1]["session_id"] == "s_2"


def test_show_reports_every_level_without_bookkeeping(make: MemoryFactory, tmp_path: Path) -> None:
    memory = make(tmp_path)
    fill(memory, "bob")
    report = memory.show("bob", "s1")
    assert report.state == {"owner": "bob", "nested": {"nul": "a\x00b", "emoji": "\N{SNAKE}"}}
    assert report.working_memory.startswith("## Current Goal")
    assert [(c.plan_id, c.status, c.step) for c in report.checkpoints] == [("agent", "in_progress", 2)]
    assert len(report.tool_results) == 1
    assert next(iter(report.tool_results.values())).size > 30_000
    assert report.messages == 2
    assert json.loads(json.dumps(report.to_dict()))["checkpoints"][0]["status"] == "in_progress"


def test_delete_session_keeps_the_rest(make: MemoryFactory, tmp_path: Path) -> None:
    memory = make(tmp_path)
    fill(memory, "bob")
    result_id = next(iter(memory.show("bob", "s1").tool_results))
    report = memory.delete_session("bob", "s1")
    assert report.sessions == ["s1"]
    assert report.runtime_bytes > 30_000
    assert report.notes == []
    assert memory.session("bob", "s1").get_state() == {}
    with pytest.raises(RecordNotFoundError):
        memory.session("bob", "s1").load_page(result_id)
    assert memory.session("bob", "s_2").get_state()["owner"] == "bob"
    assert len(memory.knowledge.notes("bob")) == 2
    assert memory.delete_session("bob", "s1").runtime_bytes == 0


def test_forget_user_erases_everything_and_only_that_user(make: MemoryFactory, tmp_path: Path) -> None:
    memory = make(tmp_path)
    fill(memory, "bob")
    fill(memory, "bob_admin")
    assert memory.knowledge.search("tea", "bob")  # builds bob's ranker and its snapshot
    report = memory.forget_user("bob")
    assert report.sessions == ["s1", "s_2"]
    assert sorted(report.notes) == ["knowledge/bob_deploy.md", "knowledge/bob_tea.md"]
    assert report.runtime_bytes > 60_000
    assert report.note_bytes == sum(len(text.encode()) for text in NOTES.values())
    assert report.ranker_snapshots == 1
    assert [info.user_id for info in memory.users()] == ["bob_admin"]
    assert memory.knowledge.search("tea", "bob") == []
    assert memory.knowledge.notes("bob") == []
    assert memory.session("bob", "s1").get_state() == {}
    assert memory.knowledge.search("tea", "bob_admin")
    assert memory.session("bob_admin", "s1").get_state()["owner"] == "bob_admin"
    assert memory.forget_user("bob").sessions == []  # twice is harmless


Traces = Callable[[Memory, str], list[str]]
USER_ID = "zeduser-4711"  # ids found nowhere else: a trace of them is a trace of them
SESSION_ID = "thread-9f3a"


def test_delete_session_and_forget_user_leave_no_trace_of_the_ids(
    make: MemoryFactory, tmp_path: Path, traces: Traces
) -> None:
    memory = make(tmp_path)
    fill(memory, USER_ID)
    fill(memory, "alice")
    memory.session(USER_ID, SESSION_ID).update_state({"step": 1})
    memory.session(USER_ID, SESSION_ID).externalize("grep", "x\n" * 5000)
    memory.session(USER_ID, SESSION_ID).finish_run([{"role": "user", "content": "my tea is oolong"}])
    assert memory.knowledge.notes(USER_ID, category="conversations") == [(SESSION_ID, "conversations")]
    assert traces(memory, SESSION_ID) or memory.root is None or not (tmp_path / "memory").exists()
    memory.delete_session(USER_ID, SESSION_ID)
    assert memory.recall("oolong", USER_ID).passages == []
    assert traces(memory, SESSION_ID) == []
    memory.knowledge.search("tea", USER_ID)
    memory.forget_user(USER_ID)
    memory.knowledge.store.flush()
    # The PostgreSQL note change feed is the knowledge backend's (its own test below).
    assert [found for found in traces(memory, USER_ID) if not found.startswith("row note_changes:")] == []
    assert memory.session("alice", "s1").get_state()["owner"] == "alice"


def test_forget_user_leaves_no_note_name_in_the_postgres_change_feed(
    postgres_url: str, postgres_schema: str, tmp_path: Path, traces: Traces
) -> None:
    with Memory.open(tmp_path, fsync=False, database_url=postgres_url, database_schema=postgres_schema) as memory:
        memory.knowledge.write_note(USER_ID, "tea", NOTES["tea"])
        memory.forget_user(USER_ID)
        assert traces(memory, USER_ID) == []


def test_a_session_emptied_record_by_record_is_erased_without_trace(
    make: MemoryFactory, tmp_path: Path, traces: Traces
) -> None:
    """A session whose last record was removed (as a deleted LangGraph thread's is) still left
    its id behind: an empty plans record, its lock file and step-log folder, a ``scopes`` row.
    Deleting the session (or the user) must find and remove those too."""
    memory = make(tmp_path)
    scope = Scope.of(USER_ID, SESSION_ID)
    memory.runtime.update_plans(scope, lambda plans: {"p": {"kind": "x"}})
    memory.runtime.append_plan_steps(scope, "p", [{"n": 1}])
    memory.runtime.update_plans(scope, lambda plans: {})
    memory.delete_session(USER_ID, SESSION_ID)
    assert traces(memory, SESSION_ID) == []
    memory.runtime.update_plans(scope, lambda plans: {"p": {"kind": "x"}})
    memory.runtime.update_plans(scope, lambda plans: {})
    memory.forget_user(USER_ID)
    assert traces(memory, USER_ID) == []


def test_discard_if_empty_deletes_only_an_empty_scope(make: MemoryFactory, tmp_path: Path, traces: Traces) -> None:
    from local_ai_memory.integration import discard_if_empty

    memory = make(tmp_path)
    scope = Scope.of(USER_ID, SESSION_ID)
    memory.runtime.update_plans(scope, lambda plans: {"p": {"kind": "x"}})
    memory.runtime.append_plan_steps(scope, "p", [{"n": 1}])
    memory.session(USER_ID, SESSION_ID).update_state({"kept": True})
    memory.runtime.update_plans(scope, lambda plans: {})
    assert discard_if_empty(memory.runtime, scope) is False  # the state is still there
    assert memory.session(USER_ID, SESSION_ID).get_state() == {"kept": True}
    memory.runtime.update_state(scope, lambda state: {})
    assert discard_if_empty(memory.runtime, scope) is True
    assert traces(memory, SESSION_ID) == []


def test_forget_leaves_no_trace_on_disk(tmp_path: Path) -> None:
    memory = Memory.open(tmp_path, fsync=False)
    fill(memory, "bob")
    fill(memory, "alice")
    memory.knowledge.search("tea", "bob")
    memory.knowledge.store.flush()
    memory.forget_user("bob")
    leftovers = [path for path in tmp_path.rglob("*") if "bob" in path.name]
    assert leftovers == []
    index = "".join(path.read_text() for path in (tmp_path / "memory_data" / ".index").glob("*_index.*"))
    assert "bob" not in index
    assert "alice_tea.md" in index
    other = Memory.open(tmp_path, fsync=False)  # a new process sees the same
    assert other.knowledge.search("tea", "bob") == []
    assert other.knowledge.search("tea", "alice")


def test_a_half_done_erasure_is_hidden_and_then_finished(tmp_path: Path) -> None:
    """What a crash between the erasure record and the last deletion leaves: readers see nothing."""
    writer = Memory.open(tmp_path, fsync=False)
    fill(writer, "bob")
    writer.runtime.begin_erasure(Erasure("bob"))
    writer.knowledge.store.backend.write_blob(".erasing/bob_", b"")
    writer.runtime.delete_scope(Scope.of("bob", "s1"))  # ... and the process dies here

    reader = Memory.open(tmp_path, fsync=False)
    assert reader.runtime.get_state(Scope.of("bob", "s_2")) == {}  # not yet deleted, already hidden
    assert reader.knowledge.search("tea", "bob") == []  # the search finishes the knowledge part
    assert (tmp_path / "memory" / "state" / "bob_s%5F2.json").exists()
    assert [info.user_id for info in reader.users()] == []  # the first use finishes the rest
    assert reader.runtime.pending_erasures() == []
    assert [path for path in tmp_path.rglob("*") if "bob" in path.name] == []


def _begin_erasure_in_another_process(root: Path, user_id: str) -> None:
    code = (
        "import sys; from local_ai_memory import Memory; from local_ai_memory.backends import Erasure; "
        "Memory.open(sys.argv[1], fsync=False).runtime.begin_erasure(Erasure(sys.argv[2]))"
    )
    subprocess.run([sys.executable, "-c", code, str(root), user_id], check=True, timeout=120)


def test_an_erasure_begun_elsewhere_hides_at_once_though_reads_cache_an_empty_folder(tmp_path: Path) -> None:
    """Reads skip listing ``erasing/`` while its mtime is unchanged; another process's record changes it."""
    memory = Memory.open(tmp_path, fsync=False)
    memory.session("bob", "s1").update_state({"owner": "bob"})
    memory.delete_session("carol", "s1")  # an earlier erasure leaves an empty erasing/ folder behind
    erasing = tmp_path / "memory" / "erasing"
    long_ago = erasing.stat().st_mtime - 3600
    os.utime(erasing, (long_ago, long_ago))
    assert memory.runtime.get_state(Scope.of("bob", "s1")) == {"owner": "bob"}  # now known empty
    assert memory.runtime.get_state(Scope.of("bob", "s1")) == {"owner": "bob"}  # from the cached mtime

    _begin_erasure_in_another_process(tmp_path, "bob")
    assert memory.runtime.get_state(Scope.of("bob", "s1")) == {}
    assert memory.runtime.pending_erasures() == [Erasure("bob")]


def test_a_recently_changed_erasing_folder_is_listed_again_even_if_its_mtime_stands_still(tmp_path: Path) -> None:
    """A record written in the same timestamp tick as a listing leaves the mtime as it was: a
    folder changed within the last seconds is never trusted to be empty."""
    memory = Memory.open(tmp_path, fsync=False)
    memory.session("bob", "s1").update_state({"owner": "bob"})
    memory.delete_session("carol", "s1")
    erasing = tmp_path / "memory" / "erasing"
    seen = erasing.stat().st_mtime_ns
    assert memory.runtime.get_state(Scope.of("bob", "s1")) == {"owner": "bob"}  # listed, found empty

    _begin_erasure_in_another_process(tmp_path, "bob")
    os.utime(erasing, ns=(seen, seen))  # as if the record had landed in the same tick
    assert memory.runtime.get_state(Scope.of("bob", "s1")) == {}


def test_recovery_removes_what_a_cut_purge_leaves(tmp_path: Path) -> None:
    """A purge killed between a record and its lock file leaves only hidden lock files behind."""
    memory = Memory.open(tmp_path, fsync=False)
    fill(memory, "bob")
    result_id = next(iter(memory.show("bob", "s1").tool_results))
    memory.runtime.begin_erasure(Erasure("bob"))
    for path in tmp_path.rglob("*"):
        if path.is_file() and path.parent.name != "erasing" and ("bob" in path.name or path.name.startswith(result_id)):
            path.unlink()  # every record gone ...
    markers = tmp_path / "memory" / "tool_index" / "bob_s1"
    (markers / f".{result_id}.ref.lock").write_bytes(b"")  # ... but these lock files
    (tmp_path / "memory" / "state" / ".bob_s1.json.lock").write_bytes(b"")
    (tmp_path / "memory" / "plans" / "bob_s1" / ".agent.jsonl.lock").write_bytes(b"")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # temporary files of writers that died (their pid is gone) while writing bob's records
    (tmp_path / "memory_data" / ".erasing").mkdir(parents=True, exist_ok=True)
    for folder, name in [(".erasing", "bob_"), ("knowledge", "bob_tea.md")]:
        (tmp_path / "memory_data" / folder / f".{name}.{dead.pid}-0123456789ab.tmp").write_bytes(b"partial")
    (tmp_path / "memory" / "erasing" / f".u-bob.json.{dead.pid}-0123456789ab.tmp").write_bytes(b"{")
    Memory.open(tmp_path, fsync=False).users()  # the first use finishes the erasure
    leftovers = [p for p in tmp_path.rglob("*") if "bob" in p.name or p.name.startswith(f".{result_id}")]
    assert leftovers == []


# -- export / import -------------------------------------------------------------------------


def test_export_import_round_trip_is_byte_identical(make: MemoryFactory, tmp_path: Path) -> None:
    source = make(tmp_path / "a")
    fill(source, "bob")
    source.knowledge.store.backend.write_note("knowledge", "bob_latin1.md", "caf\xe9".encode("latin-1"))
    first = tmp_path / "bob.zip"
    manifest = source.export(first, "bob")
    assert manifest.sessions == ["s1", "s_2"]
    assert len(manifest.notes) == 3

    for target in (Memory.open(tmp_path / "b", fsync=False), Memory.in_memory()):
        report = target.import_archive(first)
        assert report.sessions == ["s1", "s_2"]
        assert report.tool_results == 2
        second = tmp_path / "again.zip"
        target.export(second, "bob")
        assert second.read_bytes() == first.read_bytes()
        assert target.knowledge.read_note("bob", "tea") == NOTES["tea"]
        assert target.show("bob", "s1").checkpoints[0].step == 2
        result_id = next(iter(target.show("bob", "s1").tool_results))
        assert target.session("bob", "s1").load_page(result_id, 0, 9).content == "bob line\n"
        assert target.knowledge.search("kestrel deploy", "bob")[0].filename == "bob_deploy.md"


def test_export_of_one_session(tmp_path: Path) -> None:
    memory = Memory.open(tmp_path, fsync=False)
    fill(memory, "bob")
    manifest = memory.export(tmp_path / "s1.zip", "bob", "s1")
    assert (manifest.sessions, manifest.notes) == (["s1"], [])
    names = zipfile.ZipFile(tmp_path / "s1.zip").namelist()
    assert "sessions/s1/state.json" in names
    assert not any(name.startswith(("notes/", "sessions/s%5F2")) for name in names)


def test_import_refuses_to_overwrite_unless_asked(tmp_path: Path) -> None:
    memory = Memory.open(tmp_path, fsync=False)
    fill(memory, "bob")
    archive = tmp_path / "bob.zip"
    memory.export(archive, "bob")
    memory.session("bob", "s1").update_state({"changed": True})
    with pytest.raises(InvalidInputError, match=r"already has .*session s1.*note knowledge/"):
        memory.import_archive(archive)
    assert memory.session("bob", "s1").get_state()["changed"] is True  # nothing was written
    memory.import_archive(archive, replace=True)
    assert "changed" not in memory.session("bob", "s1").get_state()


def _archive_with(tmp_path: Path, members: dict[str, bytes]) -> Path:
    path = tmp_path / "hostile.zip"
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


MANIFEST = json.dumps({"format": "local-ai-memory-archive", "format_version": 1, "user_id": "bob", "sessions": ["s1"]})


@pytest.mark.parametrize(
    ("members", "error"),
    [
        ({"manifest.json": MANIFEST.encode(), "sessions/s1/../../x": b"{}"}, InvalidInputError),
        ({"manifest.json": MANIFEST.encode(), "notes/knowledge/alice_x.md": b"x"}, InvalidInputError),
        ({"manifest.json": MANIFEST.encode(), "notes/../knowledge/bob_x.md": b"x"}, InvalidInputError),
        ({"manifest.json": MANIFEST.encode(), "sessions/s1/tool_results/../a.json": b"{}"}, InvalidInputError),
        ({"manifest.json": MANIFEST.encode(), "sessions/s1/state.json": b"[1]"}, InvalidInputError),
        ({"manifest.json": MANIFEST.replace('"bob"', '"../bob"').encode()}, InvalidInputError),
        (
            {"manifest.json": MANIFEST.replace('"format_version": 1', '"format_version": 9').encode()},
            UnsupportedFormatError,
        ),
        ({"state.json": b"{}"}, InvalidInputError),
    ],
)
def test_hostile_archives_are_refused_before_anything_is_written(
    tmp_path: Path, members: dict[str, bytes], error: type[Exception]
) -> None:
    memory = Memory.open(tmp_path / "data", fsync=False)
    with pytest.raises(error):
        memory.import_archive(_archive_with(tmp_path, members))
    assert memory.users() == []


def test_a_file_that_is_not_an_archive(tmp_path: Path) -> None:
    (tmp_path / "x.zip").write_text("not a zip")
    with pytest.raises(InvalidInputError, match="not a local-ai-memory archive"):
        Memory.open(tmp_path / "data").import_archive(tmp_path / "x.zip")
