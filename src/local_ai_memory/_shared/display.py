"""HTML views for Jupyter: what a retrieval decided and what a scope's memory holds.

Pure functions from data to escaped HTML; :class:`RetrievalResult` and :class:`MemoryManager`
expose them as ``_repr_html_`` so a notebook shows a table instead of a dataclass dump.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["memory_html", "retrieval_html", "table_html"]

_STYLE = "border-collapse:collapse;font-size:90%"
_CELL = "border:1px solid #ccc;padding:2px 6px;text-align:left;vertical-align:top"


def table_html(headers: Sequence[str], rows: Iterable[Sequence[object]], caption: str = "") -> str:
    """A small bordered table; every value is escaped."""
    head = "".join(f'<th style="{_CELL}">{html.escape(h)}</th>' for h in headers)
    body = "".join(
        "<tr>" + "".join(f'<td style="{_CELL}">{html.escape(str(v))}</td>' for v in row) + "</tr>" for row in rows
    )
    title = f"<caption style='text-align:left'><b>{html.escape(caption)}</b></caption>" if caption else ""
    return f'<table style="{_STYLE}">{title}<tr>{head}</tr>{body}</table>'


def retrieval_html(
    query: str,
    candidates: Sequence[Any],
    files: Sequence[Any],
    used_tokens: int,
    max_tokens: int,
    selection_fallback: bool,
) -> str:
    """Stage 1 candidates with what Stage 2 chose and Stage 3 loaded."""
    loaded = {f.filename: f for f in files}
    rows = []
    for rank, candidate in enumerate(candidates, start=1):
        got = loaded.get(candidate.filename)
        status = "—" if got is None else f"loaded, {got.tokens} tokens" + (" (cut)" if got.truncated else "")
        rows.append((rank, candidate.filename, candidate.title, candidate.category, f"{candidate.score:.3f}", status))
    chooser = "Stage 1 order (no usable LLM answer)" if selection_fallback else "chosen by the LLM"
    caption = f"{query!r}: {len(files)} file(s), {used_tokens}/{max_tokens} tokens, {chooser}"
    return table_html(["rank", "file", "title", "category", "score", "stage 3"], rows, caption)


def memory_html(scope: str, state: Mapping[str, Any], working: str, plans: Sequence[Any], results: int) -> str:
    """One scope's L0-L3 at a glance."""
    plan_rows = [(p.plan_id, p.status, p.step, len(p.tool_result_ids)) for p in plans]
    parts = [
        f"<b>memory of scope {html.escape(scope)}</b>",
        f"<p><b>L0 state</b></p><pre>{html.escape(json.dumps(dict(state), indent=2, ensure_ascii=False))}</pre>",
        f"<p><b>L1 working memory</b></p><pre>{html.escape(working) or '(empty)'}</pre>",
        table_html(["plan id", "status", "step", "tool results"], plan_rows, "L2 checkpoints"),
        f"<p><b>L3</b>: {results} stored tool result(s)</p>",
    ]
    return "\n".join(parts)
