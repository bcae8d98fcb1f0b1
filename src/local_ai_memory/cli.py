"""The ``local-ai-memory`` command line: index, search, retrieve, watch and stats here; the
commands that list, show, export, import and erase data live in :mod:`._cli.data`.

Every command takes ``--data-dir`` (default: ``$LOCAL_AI_MEMORY_DATA_DIR``, else ``--config``'s
``app.runtime_data_dir``, else ``~/.local-ai``) and ``--json`` for scripts. Tables and
progress bars go to the terminal; errors are one line on stderr and exit code 1 (2 for bad
usage). An LLM is used only when ``--llm-base-url`` and ``--llm-model`` name an
OpenAI-compatible server (for keyword refinement in ``index`` and Stage 2 in ``retrieve``);
when it fails, ``retrieve`` says so on stderr and keeps Stage 1's order.

``search``, ``retrieve`` and ``stats`` only read: they create no folder (a data folder
without ``memory_data/`` is an error, so a typo in ``--data-dir`` is reported, and a
configured category without a folder counts as empty). What they may still write is the
index cache (``memory_data/.index/``, each user's), and only when it is missing or older
than the notes, so the next command does not re-read them. Output that is not a terminal is
never wrapped (log lines and tables stay one line each).

Examples::

    local-ai-memory index --data-dir ./data
    local-ai-memory search "python lists" --user alice --data-dir ./data
    local-ai-memory retrieve "python lists" --user alice --max-tokens 800 --json
"""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from local_ai_memory._cli import data as _cli_data
from local_ai_memory._cli import mcp as _cli_mcp
from local_ai_memory._cli.common import (
    Categories,
    ConfigFile,
    CreateFlag,
    DataDir,
    JsonFlag,
    LlmModel,
    LlmUrl,
    app,
    config_of,
    err,
    errors,
    fail,
    out,
    print_json,
    require_memory,
    require_user,
)

if TYPE_CHECKING:  # the engines are imported by the command that runs, not for --help
    from local_ai_memory._memory import Memory
    from local_ai_memory._shared.models import LLM
    from local_ai_memory._shared.naming import DirectoryGuard
    from local_ai_memory._shared.progress import Report

__all__ = ["app", "main"]

DATA_DIR = "memory_data"
"""The notes' folder under the data root (``_contracts.knowledge.DATA_DIR``; named here so that
``--help`` imports no engine)."""


def _existing_guard(root: Path) -> DirectoryGuard:
    """The guard of a data folder that holds ``memory_data/``; a one-line error (exit 1) otherwise."""
    from local_ai_memory._shared.naming import DirectoryGuard

    root = root.expanduser()
    hint = f"no memory at {root} (check --data-dir, or start one with `local-ai-memory index -d {root} --create`)"
    if not root.exists():
        fail(hint)
    guard = DirectoryGuard(root, create=False)
    if not guard.resolve(DATA_DIR).is_dir():
        fail(hint)
    return guard


def _open(
    data_dir: Path | None,
    config_file: Path | None,
    *,
    read_only: bool = False,
    llm: LLM | None = None,
    search_mode: str | None = None,
) -> Memory:
    """The one :class:`Memory` a command works through, built from its options.

    ``read_only`` refuses a data folder without ``memory_data/`` instead of creating one, and
    reads the notes through a file backend that creates no missing category folder.
    ``search_mode`` overrides the configured one (``--mode``); a hybrid memory gets the local
    embedding model from :class:`Memory` itself (a one-line error naming the extra when it is
    not installed).
    """
    from local_ai_memory._memory import Memory

    if search_mode not in (None, "bm25", "hybrid"):
        fail(f"--mode must be bm25 or hybrid, got {search_mode!r}", 2)
    config = config_of(data_dir, config_file)
    if search_mode is not None and search_mode != config.search_mode:
        config = config.replace(search_mode=search_mode)
    if read_only and not config.database_url:  # notes in PostgreSQL: nothing to create or refuse on disk
        from local_ai_memory._cli.files import ReadOnlyFiles

        files = ReadOnlyFiles(_existing_guard(config.runtime_data_dir), config)
        return Memory(config, knowledge=files, llm=llm)
    return Memory(config, llm=llm)


Mode = Annotated[
    str | None, typer.Option("--mode", help="bm25 or hybrid (default: config; hybrid uses the local model).")
]


def _llm(base_url: str | None, model: str | None) -> LLM | None:
    if base_url is None and model is None:
        return None
    if not base_url or not model:
        fail("--llm-base-url and --llm-model go together")
    from local_ai_memory._models.openai import OpenAICompatibleLLM

    return OpenAICompatibleLLM(base_url, model)


@app.command()
def index(
    data_dir: DataDir = None,
    config: ConfigFile = None,
    user: Annotated[str | None, typer.Option("--user", "-u", help="Only this user's files (default: all).")] = None,
    category: Categories = None,
    mode: Mode = None,
    llm_base_url: LlmUrl = None,
    llm_model: LlmModel = None,
    create: CreateFlag = False,
    as_json: JsonFlag = False,
) -> None:
    """Build the index from the files (with progress bars); in hybrid mode embed the notes too.

    A folder that holds no memory yet (no memory_data/ or memory/) is refused unless --create
    is given, so a mistyped --data-dir does not quietly start a new memory. Ctrl-C while
    embedding keeps what was embedded: the next `index` continues from there.
    """
    with errors():
        require_memory(config_of(data_dir, config), create)
    quiet = as_json or not err.is_terminal
    with errors(), _open(data_dir, config, llm=_llm(llm_base_url, llm_model), search_mode=mode) as memory:
        knowledge = memory.knowledge
        store = knowledge.store
        start = time.perf_counter()
        labels = ["indexing notes", "embedding passages"] if memory.embedder is not None else ["indexing notes"]
        with _bars(labels, quiet) as bars:
            embedding = bars[1] if len(bars) > 1 else None
            count = knowledge.build_index(user, category, progress=bars[0], embed_progress=embedding)
        embedded = _embed(memory, user, category, quiet=quiet)  # what indexing could not embed, loudly
        seconds = time.perf_counter() - start
        skipped = [
            {"category": n.category, "filename": n.filename, "size": n.size, "reason": n.reason}
            for n in store.skipped_notes(user, category)
        ]
        if as_json:
            index = str(store.index_path)
            print_json(
                {"files": count, "embedded": embedded, "seconds": round(seconds, 3), "index": index, "skipped": skipped}
            )
        else:
            out.print(f"Indexed {count} file(s) in {seconds:.2f}s -> {store.index_path}", highlight=False)
            if embedded:
                out.print(f"Embedded {embedded} note(s) for hybrid search", highlight=False)
            if skipped:
                err.print(
                    f"Skipped {len(skipped)} file(s) that are not text (read again once changed):", highlight=False
                )
                for note in skipped:
                    err.print(
                        f"  {note['category']}/{note['filename']}: {note['reason']}", highlight=False, markup=False
                    )


@contextlib.contextmanager
def _bars(labels: list[str], quiet: bool, *, transient: bool = False) -> Iterator[list[Report | None]]:
    """Progress bars on stderr for ``progress(done, total)`` callbacks (``None`` each when quiet)."""
    if quiet:
        yield [None for _ in labels]
        return
    from local_ai_memory._shared.progress import progress_bars

    with progress_bars(labels, console=err, transient=transient) as reports:
        yield list(reports)


def _embed(memory: Memory, user: str | None, categories: list[str] | None, *, quiet: bool) -> int:
    """In hybrid mode, embed the notes indexing left unembedded (a failing model is an error
    here, not a silent BM25 at the next query); return how many notes were checked."""
    if memory.embedder is None or memory.config.search_mode != "hybrid":
        return 0
    with _bars(["embedding passages"], quiet, transient=True) as (report,):
        return memory.knowledge.embed_notes(user, categories, progress=report)


@contextlib.contextmanager
def _query_embedding(memory: Memory, *, quiet: bool) -> Iterator[None]:
    """While a hybrid query runs: a progress bar for notes it must embed first (notes nobody
    embedded, or all of them after a change of model or passage cut); gone when it is done."""
    if memory.embedder is None or memory.config.search_mode != "hybrid":
        yield
        return
    store = memory.knowledge.store
    with _bars(["embedding passages first"], quiet, transient=True) as (report,):
        store.embed_progress = report
        try:
            yield
        finally:
            store.embed_progress = None


@app.command()
def search(
    query: Annotated[str, typer.Argument(help="What to look for.")],
    user: Annotated[str, typer.Option("--user", "-u", help="Whose files to search.")],
    data_dir: DataDir = None,
    config: ConfigFile = None,
    category: Categories = None,
    top: Annotated[int, typer.Option("--top", "-n", min=1, max=1000, help="How many results.")] = 5,
    mode: Mode = None,
    as_json: JsonFlag = False,
) -> None:
    """Stage 1 search (no LLM): the best-matching files of one user; exit 1 when nothing matches
    (or the user is unknown), like grep. In hybrid mode, notes nobody embedded yet are embedded
    first, with a progress bar."""
    with errors(), _open(data_dir, config, read_only=True, search_mode=mode) as memory:
        require_user(memory, user)
        chosen = memory.config.search_mode
        with _query_embedding(memory, quiet=as_json or not err.is_terminal):
            found = memory.knowledge.search(query, user, k=top, categories=category)  # follows search_mode
        _uncovered(memory, user, category, empty=not found)
        if as_json:
            print_json(
                [
                    {
                        "filename": c.filename,
                        "category": c.category,
                        "title": c.title,
                        "description": c.description,
                        "keywords": list(c.keywords),
                        "score": c.score,
                    }
                    for c in found
                ]
            )
        elif not found:
            out.print(f"No matches for {query!r} in {user}'s files.", highlight=False)
        if not found:
            raise typer.Exit(1)
        if as_json:
            return
        from rich.table import Table

        table = Table(title=f"{chosen} results for {query!r}")
        for column in ("#", "file", "category", "title", "score"):
            table.add_column(column, justify="right" if column in ("#", "score") else "left")
        for rank, c in enumerate(found, 1):
            table.add_row(str(rank), c.filename, c.category, c.title, f"{c.score:.3f}")
        out.print(table)


def _uncovered(memory: Memory, user: str, chosen: list[str] | None, *, empty: bool) -> dict[str, int]:
    """Say on stderr, in one line, which folders hold ``user``'s notes that no configured
    category covers (only when no ``--category`` was chosen); return them. When nothing was
    found it is an error line (the command exits 1 then anyway, see ``search``)."""
    if chosen:
        return {}
    uncovered = memory.knowledge.uncovered_folders(user)
    if uncovered:
        folders = ", ".join(f"{DATA_DIR}/{folder}/ ({count})" for folder, count in uncovered.items())
        wanted = ",".join([*memory.config.categories, *uncovered])
        err.print(
            f"{'error' if empty else 'note'}: {user}'s notes in {folders} are in no configured category, so they "
            f"were not searched (configured: {', '.join(memory.config.categories)}); "
            f"set LOCAL_AI_MEMORY_CATEGORIES={wanted} or categories in --config",
            highlight=False,
            markup=False,
        )
    return uncovered


@app.command()
def retrieve(
    query: Annotated[str, typer.Argument(help="What the agent needs to know.")],
    user: Annotated[str, typer.Option("--user", "-u", help="Whose files to use.")],
    data_dir: DataDir = None,
    config: ConfigFile = None,
    category: Categories = None,
    max_tokens: Annotated[int, typer.Option("--max-tokens", "-t", min=1, help="Token budget of the result.")] = 2000,
    top: Annotated[
        int, typer.Option("--top", "-n", min=1, max=100, help="Stage 1 candidates (an LLM still picks at most 5).")
    ] = 5,
    mode: Mode = None,
    llm_base_url: LlmUrl = None,
    llm_model: LlmModel = None,
    as_json: JsonFlag = False,
) -> None:
    """Three-stage retrieval: Stage 1 search, Stage 2 LLM pick (if an LLM is given), budgeted
    load; exit 1 when nothing is retrieved (or the user is unknown)."""
    llm = _llm(llm_base_url, llm_model)
    with errors(), _open(data_dir, config, read_only=True, llm=llm, search_mode=mode) as memory:
        require_user(memory, user)
        with _SelectionFallbacks() as fallbacks, _query_embedding(memory, quiet=as_json or not err.is_terminal):
            result = memory.knowledge.retrieve(query, user, categories=category, max_tokens=max_tokens, k=top)
        reason = fallbacks.reason or (result.notes[0] if result.notes else None)
        _uncovered(memory, user, category, empty=not result.files)
        if llm is not None and result.selection_fallback and result.candidates:
            err.print(
                f"warning: model {llm_model!r} at {llm_base_url} gave no usable selection ({reason}); "
                "kept the Stage 1 order",
                highlight=False,
                markup=False,
            )
        if as_json:
            print_json(
                {
                    "query": result.query,
                    "user_id": result.user_id,
                    "max_tokens": result.max_tokens,
                    "used_tokens": result.used_tokens,
                    "selection_fallback": result.selection_fallback,
                    "selection_fallback_reason": reason if result.selection_fallback else None,
                    "files": [
                        {
                            "filename": f.filename,
                            "title": f.title,
                            "category": f.category,
                            "score": f.score,
                            "stage": f.stage,
                            "tokens": f.tokens,
                            "truncated": f.truncated,
                        }
                        for f in result.files
                    ],
                    "skipped": list(result.skipped),
                    "text": result.text,
                }
            )
        elif not result.files:
            out.print(f"Nothing retrieved for {query!r}.", highlight=False)
        if not result.files:
            raise typer.Exit(1)
        if as_json:
            return
        from rich.table import Table

        table = Table(title=f"{len(result.files)} file(s), {result.used_tokens}/{max_tokens} tokens")
        for column in ("file", "category", "title", "stage", "tokens"):
            table.add_column(column)
        for f in result.files:
            table.add_row(
                f.filename, f.category, f.title, str(f.stage), f"{f.tokens} (cut)" if f.truncated else str(f.tokens)
            )
        err.print(table)
        sys.stdout.write(result.text + "\n")


@app.command()
def watch(
    data_dir: DataDir = None,
    config: ConfigFile = None,
    poll: Annotated[
        bool,
        typer.Option("--poll", is_flag=True, metavar="", help="Poll every few seconds instead of native watching."),
    ] = False,
    interval: Annotated[float, typer.Option("--interval", min=0.1, help="Polling interval in seconds.")] = 3.0,
    duration: Annotated[
        float | None, typer.Option("--duration", min=0.0, help="Stop after this many seconds (default: Ctrl-C).")
    ] = None,
    create: CreateFlag = False,
) -> None:
    """Keep the index up to date while files change (Ctrl-C to stop); like "index", a folder
    that holds no memory yet needs --create."""
    with errors():
        require_memory(config_of(data_dir, config), create)
    with errors(), _open(data_dir, config) as memory:
        store = memory.knowledge.store
        handler = _RefreshPrinter()
        logger = logging.getLogger("local_ai_memory")
        logger.addHandler(handler)
        if logger.level == logging.NOTSET or logger.level > logging.INFO:
            logger.setLevel(logging.INFO)
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        try:
            with memory.knowledge.watch(mode="poll" if poll else "auto", poll_interval=interval) as service:
                err.print(
                    f"watching {store.data_dir} ({service.active_mode}); {len(store.read_index().files)} file(s)"
                    " indexed; Ctrl-C to stop",
                    highlight=False,
                )
                with contextlib.suppress(KeyboardInterrupt):
                    stop.wait(duration)
        finally:
            logger.removeHandler(handler)
        err.print("stopped; index written", highlight=False)


class _SelectionFallbacks(logging.Handler):
    """Collects why Stage 2 fell back (the retriever logs it as ``SELECTION_FALLBACK``) while in use."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.reason: str | None = None
        self._logger = logging.getLogger("local_ai_memory")

    def __enter__(self) -> _SelectionFallbacks:
        self._logger.addHandler(self)
        return self

    def __exit__(self, *_: object) -> None:
        self._logger.removeHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "event", None) == "SELECTION_FALLBACK" and record.levelno >= logging.WARNING:
            self.reason = str(getattr(record, "fields", {}).get("reason", "")) or None


class _RefreshPrinter(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "event", None) in ("INDEX_REFRESHED", "INDEX_REBUILT", "FILE_SKIPPED", "INDEX_WATCH_ERROR"):
            fields = getattr(record, "fields", {})
            text = " ".join(f"{k}={v}" for k, v in fields.items())
            err.print(f"{time.strftime('%H:%M:%S')} {record.event} {text}", highlight=False, markup=False)  # type: ignore[attr-defined]


@app.command()
def stats(data_dir: DataDir = None, config: ConfigFile = None, as_json: JsonFlag = False) -> None:
    """Files per category and per user, and the index size."""
    with errors(), _open(data_dir, config, read_only=True) as memory:
        store = memory.knowledge.store
        store.ensure_index()
        store.refresh_stale_entries()
        data = store.stats()
        if as_json:
            print_json(data)
            return
        from rich.table import Table

        table = Table(title=f"knowledge in {data['data_dir']}")
        table.add_column("what")
        table.add_column("count", justify="right")
        table.add_row("files", str(data["files"]))
        for name, count in data["categories"].items():
            table.add_row(f"category {name}", str(count))
        for name, count in data["users"].items():
            table.add_row(f"user {name}", str(count))
        table.add_row("index size", _cli_data.human_size(data["index_bytes"]))
        out.print(table)


@app.command()
def migrate(data_dir: DataDir = None, config: ConfigFile = None) -> None:
    """Store each user's index of their own now, from the one index of every user that 0.2 and
    0.3 kept (otherwise each user moves at their first write), then delete that one."""
    with errors(), _open(data_dir, config, read_only=True) as memory:
        moved = memory.knowledge.store.migrate_index()
        err.print(f"{moved} user(s) moved to an index of their own" if moved else "nothing to migrate")


_cli_data.register()
_cli_mcp.register()


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
