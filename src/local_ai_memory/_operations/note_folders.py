"""Knowledge notes to and from a plain folder of Markdown files, whatever the backend.

The folder has the file backend's layout, ``{folder}/{category}/{user prefix}{name}.md``, so a
team moves its notes from files to PostgreSQL (``import``) and back (``export``), or hands
them to any Markdown tool. Notes are copied byte for byte through the storage contract; the
index, rankers and vectors are rebuilt by the receiving side on its next search.
"""

from __future__ import annotations

import os
from pathlib import Path

from local_ai_memory._contracts.knowledge import KnowledgeBackend, is_note_name
from local_ai_memory._shared import fs as _fs
from local_ai_memory._shared.errors import InvalidInputError
from local_ai_memory._shared.naming import check_component, owner_of, validate_id

__all__ = ["IMPORT_BATCH", "export_notes", "import_notes"]

IMPORT_BATCH = 500
"""Notes handed to :meth:`KnowledgeBackend.write_notes` at once by :func:`import_notes` (one
transaction each on a database: big enough to load at the database's speed, small enough to
hold in memory and to keep a transaction short)."""


def export_notes(knowledge: KnowledgeBackend, folder: str | os.PathLike[str]) -> int:
    """Write every note to ``folder/{category}/{name}``; return how many were written."""
    root = Path(folder)
    written = 0
    for category in knowledge.list_categories():
        for name in sorted(knowledge.list_notes(category)):
            data = knowledge.read_note(category, name)
            if data is None:
                continue  # deleted meanwhile
            _fs.atomic_write(root / category / check_component(name, "note name"), data)
            written += 1
    return written


def _shown(category: str, filename: str) -> str:
    """A stored note as its user names it: ``knowledge/deploy of alice``."""
    head, _, rest = filename.partition("_")
    owner = owner_of(filename)
    return f"{category}/{rest.removesuffix('.md')} of {owner}" if owner is not None else f"{category}/{head}"


def _notes_in(root: Path) -> list[tuple[str, str, Path]]:
    found = []
    for category_dir in sorted(root.iterdir()):
        if category_dir.name.startswith(".") or not category_dir.is_dir() or category_dir.is_symlink():
            continue
        category = validate_id(category_dir.name, "category")
        for path in sorted(category_dir.iterdir()):
            if is_note_name(path.name) and path.is_file() and not path.is_symlink():
                found.append((category, path.name, path))
    return found


def import_notes(knowledge: KnowledgeBackend, folder: str | os.PathLike[str], *, replace: bool = False) -> int:
    """Store every note of ``folder/{category}/`` in ``knowledge``; return how many.

    Only note names (``{user prefix}{name}.md``) in category folders are taken; hidden files,
    symlinks and anything else are left out. An existing note of the same name is an error
    (nothing is written) unless ``replace`` is true.
    """
    root = Path(folder)
    if not root.is_dir():
        raise InvalidInputError(f"{root} is not a folder of notes ({{category}}/{{user}}_{{name}}.md)")
    notes = _notes_in(root)
    if not replace:
        taken = [_shown(c, n) for c, n, _ in notes if knowledge.note_info(c, n) is not None]
        if taken:
            raise InvalidInputError(
                f"{len(taken)} note(s) already exist: {', '.join(taken)}; "
                "pass replace=True (on the command line: --replace) to overwrite them"
            )
    for category in dict.fromkeys(category for category, _, _ in notes):
        names = [(name, path) for c, name, path in notes if c == category]
        for start in range(0, len(names), IMPORT_BATCH):
            batch = names[start : start + IMPORT_BATCH]
            knowledge.write_notes(category, {name: path.read_bytes() for name, path in batch})
    return len(notes)
