"""Reading the stored per-owner knowledge indexes in tests, as a new process would find them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from local_ai_memory._knowledge.index import OWNER_DIR
from local_ai_memory._knowledge.index_file import stored_entries


def owner_index(data_dir: Path, user: str) -> Path:
    """The path of ``user``'s index snapshot under ``data_dir`` (``memory_data``); plain ids only."""
    return data_dir / OWNER_DIR / f"{user}_index.json"


def journal_of(snapshot: Path) -> bytes | None:
    """The journal stored beside an owner's snapshot (``None``: none)."""
    journal = snapshot.with_suffix(".journal")
    return journal.read_bytes() if journal.exists() else None


def stored_index(data_dir: Path) -> list[Any]:
    """Every entry the owners' stored indexes hold (each snapshot with its journal replayed)."""
    found: list[Any] = []
    for snapshot in sorted((data_dir / OWNER_DIR).glob("*_index.json")):
        found.extend(stored_entries(snapshot.read_bytes(), journal_of(snapshot)))
    return found
