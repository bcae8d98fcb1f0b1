"""Path confinement and the naming rules for ids, users and scopes.

:class:`DirectoryGuard` resolves every path the library touches and refuses any that would
leave its root: ``..`` components, absolute paths, NUL bytes, and symlinks pointing outside.

Naming rules (one rule for every file name built from user input):

* **Record ids** (plan ids, tool-result ids, categories) match ``[A-Za-z0-9_-]{1,128}`` and
  are used as file names as they are.
* **Names** (user ids, session ids) may be any printable text up to 128 characters without
  path separators, and not ``.`` or ``..``. In file names they are percent-encoded: every
  character except ASCII letters, digits, ``-`` and a non-leading ``.`` becomes ``%XX``
  (UTF-8), so ``_`` never appears inside an encoded name.
* A **scope** file is ``{enc(user_id)}_{enc(session_id)}``, and a knowledge file of a user is
  ``{enc(user_id)}_{rest}.md``. Because ``_`` only ever separates, ``("a_b", "c")`` and
  ``("a", "b_c")`` give different files, and user ``bob`` never owns ``bob_admin``'s files
  (those start with ``bob%5Fadmin_``).

Example::

    >>> scope_name("alice", "s1")
    'alice_s1'
    >>> scope_name("a_b", "c"), scope_name("a", "b_c")
    ('a%5Fb_c', 'a_b%5Fc')
    >>> owner_of("bob%5Fadmin_notes.md")
    'bob_admin'
"""

from __future__ import annotations

import functools
import os
import re
import string
import unicodedata
from pathlib import Path
from urllib.parse import unquote

from local_ai_memory._shared import fs as _fs
from local_ai_memory._shared.errors import InvalidInputError, PathEscapeError

__all__ = [
    "DirectoryGuard",
    "decode_name",
    "encode_name",
    "note_filename",
    "note_name_of",
    "optional_scope",
    "owner_of",
    "scope_name",
    "user_file_prefix",
    "validate_id",
    "validate_name",
]

MAX_ID_LENGTH = 128
MAX_ENCODED_NAME = 120
_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,128}")
_PLAIN = frozenset(string.ascii_letters + string.digits + "-.")
_INVISIBLE = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
_WINDOWS_RESERVED = {"con", "prn", "aux", "nul"} | {f"{p}{n}" for p in ("com", "lpt") for n in range(1, 10)}


def _describe(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def validate_id(value: object, kind: str = "id") -> str:
    """Return ``value`` if it is a valid record id (``[A-Za-z0-9_-]{1,128}``), else raise."""
    if not isinstance(value, str) or _ID_RE.fullmatch(value) is None:
        raise InvalidInputError(
            f"invalid {kind} {_describe(value)}: use 1-{MAX_ID_LENGTH} characters from A-Z, a-z, 0-9, '_' and '-'"
        )
    return value


def validate_name(value: object, kind: str = "name") -> str:
    """Return ``value`` if it is a valid user or session id, else raise :class:`InvalidInputError`."""
    if not isinstance(value, str):
        raise InvalidInputError(f"{kind} must be a string, got {type(value).__name__}")
    if not value or len(value) > MAX_ID_LENGTH:
        raise InvalidInputError(f"{kind} must have 1 to {MAX_ID_LENGTH} characters, got {len(value)}")
    hidden = _invisible(value)
    if hidden is not None:
        raise InvalidInputError(f"{kind} {_describe(value)} contains a control or invisible character {hidden!r}")
    folded = unicodedata.normalize("NFKC", value)
    if "/" in folded or "\\" in folded:
        raise InvalidInputError(f"{kind} {_describe(value)} must not contain a path separator ('/' or '\\')")
    if not folded.strip():
        raise InvalidInputError(f"{kind} {_describe(value)} is blank: use letters, digits or other visible characters")
    if folded.strip(". ") == "":
        raise InvalidInputError(f"{kind} {_describe(value)} must not be only dots (and spaces)")
    if len(encode_name(value)) > MAX_ENCODED_NAME:
        raise InvalidInputError(f"{kind} {_describe(value)} is too long once encoded for a file name")
    return value


def encode_name(value: str) -> str:
    """Percent-encode a name for use inside a file name (see the module docstring)."""
    out: list[str] = []
    for index, char in enumerate(value):
        if char in _PLAIN and not (index == 0 and char == "."):
            out.append(char)
        else:
            out.extend(f"%{byte:02X}" for byte in char.encode("utf-8", "surrogatepass"))
    return "".join(out)


def decode_name(text: str) -> str:
    """Invert :func:`encode_name`."""
    return unquote(text, errors="strict")


def scope_name(user_id: str, session_id: str) -> str:
    """The file stem of a ``(user_id, session_id)`` scope; unambiguous by construction."""
    user = encode_name(validate_name(user_id, "user_id"))
    return f"{user}_{encode_name(validate_name(session_id, 'session_id'))}"


def optional_scope(user_id: str | None, session_id: str | None) -> str | None:
    """:func:`scope_name` when both ids are given, ``None`` when neither is (the global scope)."""
    if (user_id is None) != (session_id is None):
        raise InvalidInputError("give both user_id and session_id, or neither")
    return None if user_id is None or session_id is None else scope_name(user_id, session_id)


def user_file_prefix(user_id: str) -> str:
    """The prefix every knowledge file of ``user_id`` starts with."""
    return encode_name(validate_name(user_id, "user_id")) + "_"


def note_filename(user_id: str, name: str) -> str:
    """The file name of ``user_id``'s note ``name`` (``.md`` added unless given): the naming rule, applied.

    ``note_filename("ops_admin", "secret")`` is ``ops%5Fadmin_secret.md``, so the note can never
    be read as user ``ops``'s.
    """
    if not isinstance(name, str) or not name.removesuffix(".md"):
        raise InvalidInputError(f"a note name must be a non-empty string, got {name!r}")
    stem = name.removesuffix(".md")
    return check_component(f"{user_file_prefix(user_id)}{stem}.md", "note name")


def note_name_of(filename: str, prefix: str) -> str:
    """The plain name that :func:`note_filename` maps to ``filename`` (of the user whose
    :func:`user_file_prefix` is ``prefix``): ``ops_x.md`` -> ``x``. One ``.md`` is dropped, unless
    what is left still ends in ``.md`` (``x.md.md`` stays, since a name given with ``.md`` keeps it)."""
    tail = filename[len(prefix) :] if filename.startswith(prefix) else filename
    stem = tail.removesuffix(".md")
    return tail if stem.endswith(".md") else stem


def owner_of(filename: str) -> str | None:
    """The user id that owns a knowledge file name, or ``None`` if it follows no owner rule."""
    head, sep, rest = filename.partition("_")
    if not sep or not head or not rest:
        return None
    return _owner_of_prefix(head)


@functools.lru_cache(maxsize=4096)
def _owner_of_prefix(head: str) -> str | None:
    # Remembered: loading an index of 100k notes asks this for every note of a few users.
    try:
        owner = decode_name(head)
    except UnicodeDecodeError:
        return None
    return owner if encode_name(owner) == head else None


def _invisible(text: str) -> str | None:
    """The first control, format (bidi, zero-width), surrogate or unassigned character, if any."""
    if text.isascii() and text.isprintable():  # the usual name: no character to look up
        return None
    return next((char for char in text if unicodedata.category(char) in _INVISIBLE), None)


def check_component(part: str, kind: str = "path component") -> str:
    """Validate one file or folder name taken from input; return it unchanged.

    Refused: empty names, NUL, separators, ``.`` and ``..``; control, bidi and zero-width
    characters (they hide what a name says from users and models); lone surrogates; names of
    only dots and spaces or ending in one (Windows drops those, so two names would meet); names
    over 255 bytes; Windows device names.
    """
    if not isinstance(part, str) or not part:
        raise PathEscapeError(f"empty {kind}")
    if "\x00" in part:
        raise PathEscapeError(f"{kind} {_describe(part)} contains a NUL byte")
    if "/" in part or "\\" in part:
        raise PathEscapeError(f"{kind} {_describe(part)} contains a path separator")
    if part in (".", ".."):
        raise PathEscapeError(f"{kind} {_describe(part)} would leave its folder")
    hidden = _invisible(part)
    if hidden is not None:
        raise InvalidInputError(f"{kind} {_describe(part)} contains a control or invisible character {hidden!r}")
    if part.strip(". ") == "" or part.endswith((".", " ")):
        raise InvalidInputError(f"{kind} {_describe(part)} must not be only dots and spaces or end in one")
    if len(part.encode("utf-8")) > 255:
        raise InvalidInputError(f"{kind} {_describe(part)} is longer than 255 bytes")
    if part.split(".", maxsplit=1)[0].lower() in _WINDOWS_RESERVED:
        raise InvalidInputError(f"{kind} {_describe(part)} is a reserved device name on Windows")
    return part


class DirectoryGuard:
    """Confines every path the library uses to one root folder.

    ``resolve("memory", "state", "alice_s1.json")`` returns the path under the root, after
    checking each part and resolving symlinks; anything that would land outside the root
    raises :class:`PathEscapeError` (a ``PermissionError``).

    >>> import tempfile
    >>> guard = DirectoryGuard(tempfile.mkdtemp())
    >>> guard.resolve("memory", "state").relative_to(guard.root).as_posix()
    'memory/state'
    """

    def __init__(self, root: str | os.PathLike[str], *, create: bool = True) -> None:
        raw = os.fspath(root)
        if "\x00" in raw:
            raise PathEscapeError("root path contains a NUL byte")
        if _invisible(raw) is not None:
            raise InvalidInputError(f"root path {_describe(raw)} contains a control or invisible character")
        path = Path(raw).expanduser()
        if create:
            _fs.ensure_dir(path)
        if not path.is_dir():
            raise InvalidInputError(f"data root {path} is not a folder")
        self.root = path.resolve()

    def __repr__(self) -> str:
        return f"DirectoryGuard({str(self.root)!r})"

    def resolve(self, *parts: str) -> Path:
        """Join ``parts`` (each may hold ``/``-separated names) under the root, safely."""
        names: list[str] = []
        for part in parts:
            if not isinstance(part, str):
                raise PathEscapeError(f"path parts must be strings, got {type(part).__name__}")
            if part.startswith(("/", "\\")) or os.path.isabs(part):
                raise PathEscapeError(f"absolute path {_describe(part)} is not allowed")
            names.extend(check_component(name) for name in part.split("/"))
        return self.check(self.root.joinpath(*names))

    def check(self, path: Path) -> Path:
        """Return ``path`` if it (after resolving symlinks) lies under the root, else raise."""
        real = Path(os.path.realpath(path))
        if real != self.root and not real.is_relative_to(self.root):
            raise PathEscapeError(f"{path} resolves to {real}, outside the data root {self.root}")
        return path

    def contains(self, path: Path) -> bool:
        """Whether ``path`` resolves to a place under the root."""
        try:
            self.check(path)
        except PathEscapeError:
            return False
        return True
