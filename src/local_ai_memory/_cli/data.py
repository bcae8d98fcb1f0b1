"""``local-ai-memory`` commands for owning the data: sessions, show, notes, forget, export, import.

``sessions``, ``show`` and ``export`` only read: a data folder that does not exist is an error
and nothing is created. ``forget`` asks before erasing unless ``--yes`` is given (and refuses
without ``--yes`` when there is no terminal to ask on).

Examples::

    local-ai-memory sessions -d ./data
    local-ai-memory show -u alice -s s1 -d ./data
    local-ai-memory notes add -u ops_admin deploy --file deploy.md -d ./data
    local-ai-memory export -u alice -o alice.zip -d ./data
    local-ai-memory forget -u alice --yes -d ./data
    local-ai-memory import alice.zip -d ./other
"""

from __future__ import annotations

import datetime
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from local_ai_memory._cli.common import (
    Categories,
    ConfigFile,
    CreateFlag,
    DataDir,
    JsonFlag,
    app,
    config_of,
    errors,
    fail,
    out,
    print_json,
    read_text,
    require_memory,
    require_user,
)

if TYPE_CHECKING:  # imported by the command that runs, not for --help
    from local_ai_memory._memory import Memory

__all__ = ["register"]

User = Annotated[str, typer.Option("--user", "-u", help="The user id.")]
SessionOption = Annotated[str, typer.Option("--session", "-s", help="The session id.")]
notes_app = typer.Typer(
    help="Add, list and delete a user's knowledge notes by plain name.", no_args_is_help=True, rich_markup_mode=None
)


def _memory(
    data_dir: Path | None, config_file: Path | None, *, read_only: bool = False, create: bool = False
) -> Memory:
    """The memory of the data folder. A folder that holds none is refused: always when
    ``read_only``, else unless ``create`` (a mistyped ``--data-dir`` starts no new memory)."""
    from local_ai_memory._memory import Memory

    config = config_of(data_dir, config_file)
    if read_only:
        root = config.runtime_data_dir.expanduser()
        on_disk = (root / "memory").is_dir() or (root / "memory_data").is_dir()
        if not config.database_url and not on_disk:
            fail(f"no memory at {root} (check --data-dir)")
    else:
        require_memory(config, create)
    return Memory(config)


def _when(seconds: float) -> str:
    if not seconds:
        return "-"
    return datetime.datetime.fromtimestamp(seconds).astimezone().strftime("%Y-%m-%d %H:%M")


def human_size(count: int) -> str:
    """A byte count as people read it: ``512 B``, ``1.5 KB``."""
    for unit in ("B", "KB", "MB", "GB"):
        if count < 1024 or unit == "GB":
            return f"{count} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024  # type: ignore[assignment]
    raise AssertionError("unreachable")


def sessions(
    data_dir: DataDir = None,
    config: ConfigFile = None,
    user: Annotated[str | None, typer.Option("--user", "-u", help="Only this user.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Users and their sessions, with sizes and last use, and how many notes each user has."""
    with errors():
        memory = _memory(data_dir, config, read_only=True)
        if user is not None:
            require_user(memory, user)
        users = [info for info in memory.users() if user in (None, info.user_id)]
        if as_json:
            print_json([info.to_dict() for info in users])
            return
        if not users:
            out.print("No users." if user is None else f"Nothing kept for {user!r}.", highlight=False)
            return
        from rich.table import Table

        table = Table(title="what the memory keeps")
        for column in ("user", "session", "size", "last used"):
            table.add_column(column, justify="right" if column == "size" else "left")
        for info in users:
            notes = f"({info.notes} note{'' if info.notes == 1 else 's'})"
            table.add_row(info.user_id, notes, human_size(info.note_bytes), _when(info.notes_modified))
            for session in info.sessions:
                table.add_row("", str(session.scope.session_id), human_size(session.size), _when(session.modified))
        out.print(table)


def show(
    user: User, session: SessionOption, data_dir: DataDir = None, config: ConfigFile = None, as_json: JsonFlag = False
) -> None:
    """Everything one session holds: state, working memory, checkpoints, tool outputs, messages."""
    with errors():
        memory = _memory(data_dir, config, read_only=True)
        require_user(memory, user, session)
        report = memory.show(user, session)
        if as_json:
            print_json(report.to_dict())
            return
        out.print(f"[bold]{user} / {session}[/]")
        out.print("[bold]state (L0)[/]")
        sys.stdout.write(json.dumps(report.state, ensure_ascii=False, indent=2) + "\n")
        out.print("[bold]working memory (L1)[/]")
        sys.stdout.write((report.working_memory or "(empty)") + "\n")
        from rich.table import Table

        table = Table(title="checkpoints (L2)")
        for column in ("plan", "status", "step", "task", "updated"):
            table.add_column(column)
        for c in report.checkpoints:
            table.add_row(c.plan_id, c.status, str(c.step), c.task, _when(c.updated_at))
        out.print(table)
        outputs = Table(title="stored tool outputs (L3)")
        outputs.add_column("result id")
        outputs.add_column("size", justify="right")  # bytes, as 1.5 KB (pages count characters)
        outputs.add_column("saved")
        for result_id, entry in report.tool_results.items():
            outputs.add_row(result_id, human_size(entry.size), _when(entry.saved_at))
        out.print(outputs)
        out.print(f"messages in the session log: {report.messages}", highlight=False)
        graph = report.langgraph
        if graph.namespaces:
            out.print(
                f"LangGraph thread: {graph.checkpoints} checkpoints, {graph.messages} messages,"
                f" {human_size(graph.bytes)} of checkpoint logs",
                highlight=False,
            )


def _seconds(text: str) -> float:
    """``90``, ``45m``, ``12h``, ``30d`` or ``2w`` as seconds."""
    from local_ai_memory._shared.errors import InvalidInputError

    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    number, unit = (text[:-1], text[-1]) if text and text[-1] in units else (text, "s")
    try:
        value = float(number) * units[unit]
    except ValueError:
        raise InvalidInputError(f"not an age: {text!r} (use e.g. 90, 45m, 12h, 30d, 2w)") from None
    if not value >= 0:
        raise InvalidInputError(f"an age must be positive, got {text!r}")
    return value


def retain(
    data_dir: DataDir = None,
    config: ConfigFile = None,
    max_age: Annotated[
        str | None, typer.Option("--max-age", help="Drop checkpoints older than this (90, 45m, 12h, 30d, 2w).")
    ] = None,
    keep_last: Annotated[
        int | None, typer.Option("--keep-last", help="Keep only the newest N checkpoints per thread.")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Prune the LangGraph checkpoints of every session by age and/or to the newest N per thread."""
    from local_ai_memory._shared.errors import InvalidInputError

    with errors():
        if max_age is None and keep_last is None:
            raise InvalidInputError("give --max-age, --keep-last or both")
        memory = _memory(data_dir, config)
        report = memory.apply_retention(max_age=None if max_age is None else _seconds(max_age), keep_last=keep_last)
        if as_json:
            print_json(report.to_dict())
            return
        out.print(
            f"Removed {report.checkpoints_removed} checkpoint(s) from {len(report.sessions)} session(s):"
            f" {human_size(report.bytes_before)} -> {human_size(report.bytes_after)}",
            highlight=False,
        )


def forget(
    user: User,
    session: Annotated[str | None, typer.Option("--session", "-s", help="Only this session (the notes stay).")] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")] = False,
    data_dir: DataDir = None,
    config: ConfigFile = None,
    as_json: JsonFlag = False,
) -> None:
    """Erase a user entirely (every session and note, with index entries, rankers, vectors), or one session."""
    with errors():
        memory = _memory(data_dir, config, read_only=True)
        require_user(memory, user, session)
        what = f"session {session!r} of {user!r}" if session else f"everything kept about {user!r}"
        if not yes:
            if not sys.stdin.isatty():
                fail(f"refusing to erase {what} without --yes (no terminal to confirm on)")
            typer.confirm(f"Erase {what}? This cannot be undone", abort=True, err=True)
        report = memory.delete_session(user, session) if session else memory.forget_user(user)
        if as_json:
            print_json(report.to_dict())
            return
        out.print(
            f"Erased {what}: {len(report.sessions)} session(s) ({human_size(report.runtime_bytes)}), "
            f"{len(report.notes)} note(s) ({human_size(report.note_bytes)}), "
            f"{report.ranker_snapshots} ranker snapshot(s), {report.vectors} cached vector(s).",
            highlight=False,
        )


def export(
    user: User,
    output: Annotated[Path, typer.Option("--output", "-o", help="The archive to write (a .zip file).")],
    session: Annotated[str | None, typer.Option("--session", "-s", help="Only this session.")] = None,
    force: Annotated[bool, typer.Option("--force", is_flag=True, help="Overwrite an existing archive.")] = False,
    data_dir: DataDir = None,
    config: ConfigFile = None,
    as_json: JsonFlag = False,
) -> None:
    """Write a user's memory (or one session) to a portable archive.

    The archive's folder must exist; an existing archive is replaced only with --force (or
    when you confirm on a terminal).
    """
    with errors():
        target = output.expanduser()
        if not target.parent.is_dir():
            fail(f"no folder {target.parent} for the archive (create it first)")
        if target.is_dir():
            fail(f"{output} is a folder; give the archive's file name")
        if target.exists() and not force:
            if not sys.stdin.isatty():
                fail(f"{output} exists; pass --force to overwrite it")
            typer.confirm(f"Overwrite {output}?", abort=True, err=True)
        memory = _memory(data_dir, config, read_only=True)
        require_user(memory, user, session)
        manifest = memory.export(target, user, session)
        if as_json:
            print_json({"archive": str(output), **manifest.model_dump(mode="json")})
            return
        out.print(
            f"Wrote {output}: {len(manifest.sessions)} session(s), {len(manifest.notes)} note(s).", highlight=False
        )


def import_(
    archive: Annotated[Path, typer.Argument(help="An archive written by `local-ai-memory export`.")],
    replace: Annotated[
        bool, typer.Option("--replace", is_flag=True, help="Overwrite sessions and notes that already exist.")
    ] = False,
    data_dir: DataDir = None,
    config: ConfigFile = None,
    create: CreateFlag = False,
    as_json: JsonFlag = False,
) -> None:
    """Load an exported archive into this data folder (a new one needs --create)."""
    with errors():
        report = _memory(data_dir, config, create=create).import_archive(archive, replace=replace)
        if as_json:
            print_json(report.to_dict())
            return
        out.print(
            f"Imported {report.user_id!r}: {len(report.sessions)} session(s), {len(report.notes)} note(s), "
            f"{report.tool_results} tool output(s), {report.messages} message(s).",
            highlight=False,
        )


def notes_list(
    user: User,
    data_dir: DataDir = None,
    config: ConfigFile = None,
    category: Categories = None,
    as_json: JsonFlag = False,
) -> None:
    """The user's notes by plain name, one "category<TAB>name" line each (what "notes rm -k" takes).

    --json gives {category: [name, ...]} for every configured (or chosen) category.
    """
    with errors():
        memory = _memory(data_dir, config, read_only=True)
        require_user(memory, user)
        knowledge = memory.knowledge
        found = {
            cat: [n.name for n in knowledge.notes(user, category=cat)] for cat in category or knowledge.store.categories
        }
        # The conversation logs are listed when there are any; the configured categories always.
        found = {cat: names for cat, names in found.items() if names or category or cat in knowledge.store.searched}
        if as_json:
            print_json(found)
            return
        for cat, names in found.items():
            for name in names:
                sys.stdout.write(f"{cat}\t{name}\n")


def notes_add(
    user: User,
    name: Annotated[str, typer.Argument(help="The note's plain name (the user prefix is added for you).")],
    file: Annotated[Path | None, typer.Option("--file", "-f", help="Read the note from this Markdown file.")] = None,
    text: Annotated[str | None, typer.Option("--text", help="The note's text (instead of --file).")] = None,
    category: Annotated[str | None, typer.Option("--category", "-k", help="Category (default: the first).")] = None,
    data_dir: DataDir = None,
    config: ConfigFile = None,
    create: CreateFlag = False,
) -> None:
    """Add or replace a note of a user; it is indexed at once (a new memory needs --create)."""
    with errors():
        if (file is None) == (text is None):
            fail("give the note as --file PATH or --text TEXT", 2)
        body = read_text(file) if file is not None else str(text)
        if not body.strip():
            fail("the note is empty: give it some text", 2)
        stored = _memory(data_dir, config, create=create).knowledge.write_note(user, name, body, category=category)
        out.print(f"Stored {stored}", highlight=False)


def notes_rm(
    user: User,
    name: Annotated[str, typer.Argument(help="The note's plain name.")],
    category: Annotated[str | None, typer.Option("--category", "-k", help="Category (default: the first).")] = None,
    data_dir: DataDir = None,
    config: ConfigFile = None,
) -> None:
    """Delete a note of a user with its index entry."""
    with errors():
        if not _memory(data_dir, config, read_only=True).knowledge.delete_note(user, name, category=category):
            fail(f"{user!r} has no note {name!r}")
        out.print(f"Deleted {name!r} of {user!r}", highlight=False)


def notes_export(
    folder: Annotated[Path, typer.Argument(help="Where to write {category}/{user}_{name}.md files.")],
    data_dir: DataDir = None,
    config: ConfigFile = None,
) -> None:
    """Copy every note, byte for byte, to a folder in the file layout (from PostgreSQL, say)."""
    with errors():
        count = _memory(data_dir, config, read_only=True).export_notes(folder)
        out.print(f"Wrote {count} note(s) to {folder}", highlight=False)


def notes_import(
    folder: Annotated[Path, typer.Argument(help="A folder of {category}/{user}_{name}.md files.")],
    replace: Annotated[bool, typer.Option("--replace", is_flag=True, help="Overwrite notes that exist.")] = False,
    data_dir: DataDir = None,
    config: ConfigFile = None,
    create: CreateFlag = False,
) -> None:
    """Copy a folder of notes (the file layout) into this memory (to PostgreSQL, say; a new one needs --create)."""
    with errors():
        count = _memory(data_dir, config, create=create).import_notes(folder, replace=replace)
        out.print(f"Imported {count} note(s) from {folder}", highlight=False)


def register() -> None:
    """Add these commands to the ``local-ai-memory`` app."""
    app.command()(sessions)
    app.command()(show)
    app.command()(retain)
    app.command()(forget)
    app.command()(export)
    app.command(name="import")(import_)
    notes_app.command(name="list")(notes_list)
    notes_app.command(name="add")(notes_add)
    notes_app.command(name="rm")(notes_rm)
    notes_app.command(name="export")(notes_export)
    notes_app.command(name="import")(notes_import)
    app.add_typer(notes_app, name="notes")
