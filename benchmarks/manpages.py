"""A real corpus for the natural-question benchmark: the English manual pages of sections 1 and 8.

Each page (``/usr/share/man/man1/wc.1.gz`` is page ``wc.1``) is rendered once with
``man -l`` (``MANWIDTH=80``, no pager, overstrikes removed) and turned into a Markdown-ish
note: ``# wc(1)``, the NAME line as the first paragraph, ``## SECTION`` headings. Rendered
notes are cached outside the repository (``~/.cache/local-ai-memory-bench/manpages/``), so a
second run renders nothing.

A corpus of ``n`` notes is every page a question set names as relevant, plus filler pages in a
stable order (SHA-256 of the page name), so corpora of 2,000 and 10,000 are the same on every
machine with the same pages installed, and the smaller is a subset of the larger.

    python benchmarks/manpages.py --render 2000   # render (and cache) the pages of a 2k corpus
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

MAN_DIRS = (Path("/usr/share/man/man1"), Path("/usr/share/man/man8"))
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "local-ai-memory-bench" / "manpages"
QUESTIONS = Path(__file__).parent / "data" / "natural_questions" / "questions.json"

_SECTION = re.compile(r"^[A-Z][A-Z0-9 ,/()&-]+$")


def all_pages() -> dict[str, Path]:
    """``{page name: file}`` of every installed page of sections 1 and 8 (``wc.1`` -> its .gz)."""
    out: dict[str, Path] = {}
    for folder in MAN_DIRS:
        for path in sorted(folder.glob("*.gz")):
            out[path.name[: -len(".gz")]] = path
    return out


def note_name(page: str) -> str:
    """The note name of a page (``wc.1`` -> ``wc_1``): letters, digits, ``_``, ``-`` and ``.``."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", page.replace(".", "_"))


def to_note(page: str, text: str) -> str:
    """A rendered page as a Markdown-ish note: title, the NAME line first, sections as ``##``."""
    lines = text.splitlines()
    if lines and page.split(".", maxsplit=1)[0].upper() in lines[0].upper():
        lines = lines[1:]  # the running header "WC(1)   User Commands   WC(1)"
    while lines and (not lines[-1].strip() or re.match(r"^\S.*\s{3,}\S.*\s{3,}\S+$", lines[-1])):
        lines.pop()  # blank lines and the running footer
    name, _, section = page.rpartition(".")
    out = [f"# {name}({section})", ""]
    body: list[str] = []
    lead = ""
    current = ""
    for line in lines:
        stripped = line.strip()
        if line and not line[0].isspace() and _SECTION.match(stripped):
            current = stripped
            body.extend(["", f"## {stripped}", ""])
            continue
        if current == "NAME" and stripped and not lead:
            lead = stripped
        body.append(stripped)
    if lead:
        out.extend([lead, ""])
    text_out = "\n".join(out + body)
    return re.sub(r"\n{3,}", "\n\n", text_out).strip() + "\n"


def render(page: str, path: Path) -> str | None:
    """The note of one page, from the cache or rendered now; ``None`` if it does not render."""
    cached = CACHE / f"{page}.md"
    if cached.exists():
        text = cached.read_text(encoding="utf-8")
        return text or None
    env = {**os.environ, "MANWIDTH": "80", "MANPAGER": "cat", "PAGER": "cat", "LANG": "C.UTF-8"}
    env.pop("MAN_KEEP_FORMATTING", None)
    try:
        done = subprocess.run(["man", "-l", str(path)], capture_output=True, env=env, timeout=60, check=False)
        plain = subprocess.run(["col", "-bx"], input=done.stdout, capture_output=True, timeout=60, check=False)
        text = plain.stdout.decode("utf-8", "replace")
    except (OSError, subprocess.SubprocessError):
        text = ""
    note = to_note(page, text) if len(text.split()) >= 5 else ""
    CACHE.mkdir(parents=True, exist_ok=True)
    cached.write_text(note, encoding="utf-8")
    return note or None


def stable_order(pages: Iterable[str]) -> list[str]:
    """Pages ordered by the SHA-256 of their name: the filler order."""
    return sorted(pages, key=lambda p: hashlib.sha256(p.encode()).hexdigest())


def relevant_pages(questions: Path = QUESTIONS) -> list[str]:
    """Every page some question of the set names as relevant."""
    if not questions.exists():
        return []
    data = json.loads(questions.read_text(encoding="utf-8"))
    return sorted({name for q in data for name in q["relevant"]})


def corpus(n: int, relevant: Iterable[str] = (), workers: int = 4) -> dict[str, str]:
    """``{page: note text}`` of ``n`` pages: the ``relevant`` ones, then filler in stable order
    (pages that do not render are skipped and replaced by the next)."""
    pages = all_pages()
    chosen: dict[str, str] = {}
    wanted = [p for p in relevant if p in pages]
    missing = sorted(set(relevant) - set(pages))
    if missing:
        print(f"warning: {len(missing)} relevant pages are not installed: {missing[:10]}", file=sys.stderr)
    order = wanted + [p for p in stable_order(pages) if p not in set(wanted)]
    position = 0
    with ThreadPoolExecutor(workers) as pool:
        while len(chosen) < n and position < len(order):
            batch = order[position : position + max(64, n - len(chosen))]
            position += len(batch)
            for page, note in zip(batch, pool.map(lambda p: render(p, pages[p]), batch), strict=True):
                if note is not None and len(chosen) < n:
                    chosen[page] = note
    return chosen


def with_copies(notes: dict[str, str], n: int) -> dict[str, str]:
    """``notes`` grown to ``n`` by numbered copies (``ls.1-copy0``, ...) when fewer pages are
    installed: each copy's first line is changed, so every text differs (for scale only)."""
    pages = list(notes.items())
    grown = dict(notes)
    for number in range(n - len(pages)):
        page, text = pages[number % len(pages)]
        grown[f"{page}-copy{number}"] = text.replace("\n", f" (copy {number})\n", 1)
    return grown


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--render", type=int, default=2000, help="corpus size to render and cache")
    parser.add_argument("--questions", type=Path, default=QUESTIONS)
    args = parser.parse_args()
    notes = corpus(args.render, relevant_pages(args.questions))
    words = sum(len(t.split()) for t in notes.values())
    print(f"{len(notes)} notes, {words} words, cached in {CACHE}")


if __name__ == "__main__":
    main()
