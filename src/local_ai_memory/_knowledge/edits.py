"""The rules for editing a note in place, shared by every tool that edits one.

An MCP tool, Claude's memory tool and :meth:`~local_ai_memory.Knowledge.edit_note` all apply
these pure functions, so "replace exactly one occurrence" or "the hash a write must expect"
means the same thing everywhere:

>>> replace_unique("a b a", "b", "c")
'a c a'
>>> insert_lines("one\\ntwo\\n", 1, "between")
'one\\nbetween\\ntwo\\n'
>>> note_hash("text")[:15]
'sha256:982d9e3e'
"""

from __future__ import annotations

import hashlib

from local_ai_memory._shared.errors import ConflictError, InvalidInputError

__all__ = ["check_expected", "insert_lines", "note_hash", "replace_unique"]


def note_hash(text: str | bytes) -> str:
    """``sha256:<hex>`` of a note's UTF-8 bytes: what a reader hands back to a write that
    must not overwrite someone else's change."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    return "sha256:" + hashlib.sha256(data).hexdigest()


def check_expected(current: str | bytes | None, expected_hash: str | None, shown: str) -> None:
    """Raise :class:`ConflictError` unless the stored ``current`` content (``None``: no note)
    hashes to ``expected_hash``; ``expected_hash=None`` accepts anything.

    ``expected_hash=""`` means "the note must not exist yet" (create, never overwrite).
    """
    if expected_hash is None:
        return
    now = None if current is None else note_hash(current)
    if expected_hash == "" and now is None:
        return
    if now != expected_hash:
        state = "does not exist" if now is None else f"has hash {now}"
        raise ConflictError(
            f"{shown} changed since it was read: expected {expected_hash or 'no note'}, it {state}; "
            "read it again and retry with the current hash",
            now,
        )


def replace_unique(text: str, old: str, new: str, shown: str = "the note") -> str:
    """``text`` with its one occurrence of ``old`` replaced by ``new``.

    :class:`InvalidInputError` when ``old`` is empty, absent, or occurs more than once (the
    caller must quote more context to say which occurrence it means).
    """
    if not old:
        raise InvalidInputError("the text to replace is empty: quote the exact text to change")
    count = text.count(old)
    if count != 1:
        where = "does not occur" if count == 0 else f"occurs {count} times"
        raise InvalidInputError(
            f"the text to replace {where} in {shown}; it must occur exactly once (quote more of it)"
        )
    return text.replace(old, new, 1)


def insert_lines(text: str, line: int, insert: str, shown: str = "the note") -> str:
    """``text`` with ``insert`` placed after its first ``line`` lines (``0``: at the start).

    A missing final newline is supplied on both sides, so the inserted text always forms
    whole lines. :class:`InvalidInputError` when ``line`` is outside ``0..number of lines``.
    """
    lines = text.splitlines(keepends=True)
    if not 0 <= line <= len(lines):
        raise InvalidInputError(f"line {line} is outside {shown}, which has {len(lines)} lines (0..{len(lines)})")
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    block = insert if insert.endswith("\n") or not insert else insert + "\n"
    return "".join([*lines[:line], block, *lines[line:]])
