"""basic-memory's search as a peer of the natural-question benchmark; runs in basic-memory's own venv.

basic-memory (PyPI ``basic-memory``) needs Python >= 3.12, so it lives in a venv of its own, and
this script imports nothing of ``local_ai_memory``. Given a folder of notes and a JSON list of
queries, it copies the notes into a scratch basic-memory project, indexes it as ``bm reindex
--full`` does (``run_reindex_command``), checks that every note became an entity, then runs the
MCP tool ``search_notes`` (what ``bm tool search-notes`` calls) for each query, 10 results, and
writes ``{"version", "search_type", "ms_per_query", "results": {query: [note file names, best first]}}``
(``search_type`` as the tool resolved it: basic-memory's default is ``hybrid`` where this Python can
load sqlite-vec, else ``text``, SQLite FTS5). Config, database and HOME are under
``--work`` (a fresh temporary folder by default), never the user's own.

    python -m venv ~/.cache/local-ai-memory-bench/basic-memory-venv
    ~/.cache/local-ai-memory-bench/basic-memory-venv/bin/pip install basic-memory
    .../basic-memory-venv/bin/python benchmarks/peer_basic_memory.py NOTES QUERIES.json OUT.json \
        [--search-type text|hybrid|vector]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PROJECT = "bench"


def isolate(work: Path, config: dict[str, Any]) -> Path:
    """Point basic-memory at ``work`` (config, database, HOME) before it is imported; the project folder."""
    home, config_dir, project = work / "home", work / "config", work / "project"
    for folder in (home, config_dir, project):
        folder.mkdir(parents=True, exist_ok=True)
    os.environ.update(
        {
            "HOME": str(home),
            "BASIC_MEMORY_CONFIG_DIR": str(config_dir),
            "BASIC_MEMORY_HOME": str(project),
            "BASIC_MEMORY_NO_PROMOS": "1",  # no analytics calls
            "HF_HUB_OFFLINE": "1",
            "FASTEMBED_CACHE_PATH": os.environ.get("FASTEMBED_CACHE_PATH", str(work / "fastembed_cache")),
        }
    )
    settings = {
        "projects": {PROJECT: {"path": str(project)}},
        "default_project": PROJECT,
        "auto_update": False,
        **config,
    }
    (config_dir / "config.json").write_text(json.dumps(settings, indent=2), encoding="utf-8")
    return project


def indexed_files(config_dir: Path) -> list[str]:
    """File paths (relative to the project) of the notes basic-memory holds as entities."""
    with contextlib.closing(sqlite3.connect(config_dir / "memory.db")) as db:
        rows = db.execute(
            "SELECT e.file_path FROM entity e JOIN project p ON p.id = e.project_id WHERE p.name = ?", (PROJECT,)
        ).fetchall()
    return [row[0] for row in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("notes", type=Path, help="folder of Markdown notes (*.md)")
    parser.add_argument("queries", type=Path, help="JSON list of query strings")
    parser.add_argument("out", type=Path, help="where to write {query: [file names]}")
    parser.add_argument(
        "--search-type", default=None, help="search_notes' search_type (default: basic-memory's own default)"
    )
    parser.add_argument("--config", default="{}", help="extra basic-memory config as JSON (e.g. embedding model)")
    parser.add_argument("--work", type=Path, default=None, help="scratch folder (default: a new temporary one)")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="bm-peer-"))
    project = isolate(work, json.loads(args.config))
    names = sorted(p.name for p in args.notes.glob("*.md"))
    for name in names:
        shutil.copyfile(args.notes / name, project / name)

    # imported only now: basic-memory reads its config location from the environment
    from basic_memory import __version__
    from basic_memory.cli.commands.command_utils import run_with_cleanup
    from basic_memory.cli.commands.db import run_reindex_command
    from basic_memory.mcp.tools import search_notes
    from basic_memory.mcp.tools.search import _default_search_type  # the rule search_notes applies

    search_type = args.search_type or _default_search_type([PROJECT])
    semantic = search_type != "text"
    with contextlib.redirect_stdout(sys.stderr):  # its progress output is not our result
        run_reindex_command(embeddings=semantic, search=True, full=True, project=PROJECT)
    held = {Path(f).name for f in indexed_files(work / "config")}
    missing = sorted(set(names) - held)
    print(f"basic-memory: {len(held & set(names))} of {len(names)} notes indexed", file=sys.stderr)
    if missing:
        sys.exit(f"basic-memory did not index {len(missing)} notes, e.g. {missing[:5]}")

    queries: list[str] = json.loads(args.queries.read_text(encoding="utf-8"))

    async def run_all() -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for query in queries:
            found = await search_notes(
                query=query, project=PROJECT, search_type=args.search_type, output_format="json", page_size=10
            )
            if isinstance(found, str):  # the tool's error text
                raise SystemExit(f"basic-memory search failed for {query!r}: {found[:2000]}")
            files = [Path(r["file_path"]).name for r in found["results"] if r.get("file_path")]
            out[query] = list(dict.fromkeys(files))[:10]
        return out

    started = time.perf_counter()
    results = run_with_cleanup(run_all())
    ms = (time.perf_counter() - started) * 1000 / max(1, len(queries))
    short = sum(len(found) < 10 for found in results.values())
    empty = sum(not found for found in results.values())
    print(f"basic-memory: {empty} of {len(queries)} queries found nothing, {short} fewer than 10", file=sys.stderr)
    summary = {"version": __version__, "search_type": search_type, "ms_per_query": ms, "results": results}
    args.out.write_text(json.dumps(summary, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
