"""What every ``local-ai-memory`` command shares: the app, consoles, options and error handling."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.console import Console

from local_ai_memory._shared.errors import LocalMemoryError

if TYPE_CHECKING:  # pydantic and the settings load when a command runs, not for --help
    from local_ai_memory._memory import Memory
    from local_ai_memory._shared.config import MemoryConfig

__all__ = [
    "Categories",
    "ConfigFile",
    "CreateFlag",
    "DataDir",
    "JsonFlag",
    "LlmModel",
    "LlmUrl",
    "app",
    "config_of",
    "err",
    "errors",
    "fail",
    "out",
    "print_json",
    "read_text",
    "require_memory",
    "require_user",
]

app = typer.Typer(
    name="local-ai-memory",
    help="Search and index knowledge notes; list, inspect, export, import and erase what local-ai-memory keeps.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # click's plain help: typer's rich help costs ~0.3 s of imports per call
)


def _print_version(value: bool) -> None:
    if value:
        from local_ai_memory import __version__

        sys.stdout.write(f"local-ai-memory {__version__}\n")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option("--version", is_flag=True, is_eager=True, callback=_print_version, help="Print the version."),
    ] = False,
) -> None:
    """Search and index knowledge notes; list, inspect, export, import and erase what local-ai-memory keeps."""


PIPE_WIDTH = 4096
"""Console width when output is not a terminal: wide enough that nothing is wrapped."""


def _console(*, stderr: bool) -> Console:
    """Rich's console for a terminal; for a pipe or a file one that never wraps (rich would use 80 columns)."""
    probe = Console(stderr=stderr, soft_wrap=True)
    if probe.is_terminal:
        return probe
    return Console(stderr=stderr, soft_wrap=True, width=PIPE_WIDTH)


out = _console(stderr=False)
err = _console(stderr=True)

DataDir = Annotated[
    Path | None,
    typer.Option("--data-dir", "-d", help="Root data folder (holds memory_data/; default $LOCAL_AI_MEMORY_DATA_DIR)."),
]
ConfigFile = Annotated[Path | None, typer.Option("--config", "-c", help="config.yaml with memory: and app: sections.")]
JsonFlag = Annotated[bool, typer.Option("--json", is_flag=True, metavar="", help="Print machine-readable JSON.")]
Categories = Annotated[
    list[str] | None, typer.Option("--category", "-k", help="Category to use (repeatable; default: all configured).")
]
LlmUrl = Annotated[
    str | None, typer.Option("--llm-base-url", help="OpenAI-compatible server, e.g. http://localhost:11434/v1")
]
LlmModel = Annotated[str | None, typer.Option("--llm-model", help="Model name on that server.")]
CreateFlag = Annotated[
    bool, typer.Option("--create", is_flag=True, help="Start a new memory if the folder holds none.")
]


def require_memory(settings: MemoryConfig, create: bool) -> None:
    """Refuse a data folder that holds no memory yet (no ``memory_data/`` or ``memory/``) unless
    ``create``: a mistyped ``--data-dir`` must not quietly start a new memory."""
    root = settings.runtime_data_dir.expanduser()
    held = (root / "memory_data").is_dir() or (root / "memory").is_dir()
    if not (create or held or settings.database_url):
        fail(f"no memory at {root}: pass --create to start one there, or check --data-dir")


def require_user(memory: Memory, user: str, session: str | None = None) -> None:
    """A one-line error (exit 1) when nothing is kept for ``user`` (or that session): a mistyped
    ``--user`` must not read as "no matches". It names the users there are."""
    if memory.holds(user, session):
        return
    where = memory.root if memory.root is not None else "this memory"
    if session is not None:
        fail(f"no memory for session {session!r} of user {user!r} in {where} (`sessions -u {user}` lists them)")
    known = sorted(info.user_id for info in memory.users())
    shown = ", ".join(known[:20]) + (f" and {len(known) - 20} more" if len(known) > 20 else "")
    fail(f"no memory for user {user!r} in {where} ({f'users there: {shown}' if known else 'it holds no user yet'})")


def fail(message: str, code: int = 1) -> NoReturn:
    err.print(f"[bold red]error:[/] {message}", highlight=False, markup=True)
    raise typer.Exit(code)


@contextlib.contextmanager
def errors() -> Iterator[None]:
    """Turn the library's errors, the system's and a file that is not UTF-8 into one ``error:`` line."""
    try:
        yield
    except UnicodeDecodeError as exc:
        fail(f"a file is not UTF-8 text (byte {exc.start}: {exc.reason})")
    except (LocalMemoryError, OSError) as exc:
        fail(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)


def read_text(path: Path, what: str = "note") -> str:
    """The text of ``path``; a one-line error (exit 1) when it is empty, binary or not UTF-8."""
    data = path.expanduser().read_bytes()
    if not data.strip():
        fail(f"{path} is empty: a {what} needs text")
    if b"\x00" in data:
        fail(f"{path} is a binary file, not a {what}: give a UTF-8 text (Markdown) file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        fail(f"{path} is not UTF-8 text (byte {exc.start}); convert it first, e.g. iconv -t UTF-8")


def config_of(data_dir: Path | None, config_file: Path | None) -> MemoryConfig:
    """The configuration of a command: ``--config``'s file (which must be UTF-8 text), then ``--data-dir``."""
    from local_ai_memory._shared.config import MemoryConfig

    overrides: dict[str, Any] = {}
    if data_dir is not None:
        overrides["runtime_data_dir"] = data_dir
    if config_file is not None:
        if config_file.is_file() and config_file.stat().st_size:  # an empty file means the defaults
            read_text(config_file, "config file")  # binary or not UTF-8: one line before YAML sees it
        return MemoryConfig.from_yaml(config_file, **overrides)
    return MemoryConfig(**overrides)


def print_json(data: Any) -> None:
    """``data`` as indented JSON on stdout (for scripts)."""
    sys.stdout.write(json.dumps(data, ensure_ascii=False, indent=2) + "\n")
