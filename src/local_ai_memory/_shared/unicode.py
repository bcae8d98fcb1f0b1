"""The one rule for text that enters the memory: it must be Unicode text, which a lone surrogate is not.

A Python ``str`` can hold a lone surrogate (``"a\\ud800b"``): what ``errors="surrogateescape"``
decoding leaves of undecodable bytes, or half of a UTF-16 pair cut in two. Every write (state,
working memory, plans and steps, tool outputs, messages and framework items, notes, imported
archives) refuses such text with :class:`InvalidInputError` before anything is written, naming
where the character is. Refusing, not storing it through an escape, because:

* it is not text: UTF-8 cannot encode it, so a note or working memory (plain Markdown files a
  person reads, greps and edits) could hold it only as bytes that are not UTF-8, or as a private
  escape that every other reader would show as ``\\ud800``;
* JSON's own escape would not keep it exactly either: ``"\\ud83d\\ude00"`` (two lone
  surrogates) comes back from ``json.loads`` as the one character ``😀``;
* a stored one poisons the session: every later run sends it to the model again, and an HTTP
  client encoding the request as UTF-8 fails there, run after run, far from its cause;
* replacing it (``U+FFFD``) would change the user's data without saying so.

The caller fixes the decode that made it (``errors="replace"``, say); what is already stored is
untouched by a refused write.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeAlias

from local_ai_memory._shared.errors import InvalidInputError

__all__ = ["check_text", "check_texts_in"]

_CHUNK = 1 << 20  # characters encoded per try: a 100 MB output is never copied whole


def check_text(text: str, what: str = "text") -> None:
    """Raise :class:`InvalidInputError` when ``text`` holds a lone surrogate (see the module's rule).

    ASCII text costs nothing; other text one UTF-8 encoding, a chunk at a time.
    """
    if text.isascii():
        return
    for start in range(0, len(text), _CHUNK):
        try:
            text[start : start + _CHUNK].encode("utf-8")
        except UnicodeEncodeError as exc:
            at = start + exc.start
            raise InvalidInputError(
                f"{what} is not Unicode text: a lone surrogate U+{ord(text[at]):04X} at character {at} "
                "(decoded with errors='surrogateescape', or a UTF-16 pair cut in two?); nothing was written"
            ) from None


def check_texts_in(value: object, what: str = "value") -> None:
    """:func:`check_text` on every string of a JSON-like ``value`` (keys included); the error
    names the path to the string (``state patch['notes'][2]``). Other leaves are left alone."""
    stack: list[tuple[object, _Where]] = [(value, None)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            if not item.isascii():
                check_text(item, _path(what, where))
        elif isinstance(item, Mapping):
            for key, child in item.items():
                if isinstance(key, str) and not key.isascii():
                    check_text(key, f"a key of {_path(what, where)}")
                stack.append((child, (where, key)))
        elif isinstance(item, (list, tuple)):
            stack.extend((child, (where, index)) for index, child in enumerate(item))


_Where: TypeAlias = "tuple[_Where, object] | None"
"""Where a string sits: the parent's place and the key or index (built only to name a failure)."""


def _path(what: str, where: _Where) -> str:
    keys: list[object] = []
    while where is not None:
        where, key = where
        keys.append(key)
    return what + "".join(f"[{key!r}]" for key in reversed(keys))
