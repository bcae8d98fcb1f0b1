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
    from local_ai_memory._shared.config import MemoryConfig

__all__ = [
    "Categories",
    "ConfigFile",
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
]

app = typer.Typer(
    name="local-ai-memory",
    help="Search and index knowledge notes; list, inspect, export, import and erase what local-ai-memory keeps.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # click's plain help: typer's rich help costs ~0.3 s of imports per call
)
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
