from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from local_ai_memory import DirectoryGuard, InvalidInputError, PathEscapeError
from local_ai_memory._shared.naming import check_component, decode_name, encode_name, owner_of, user_file_prefix
from local_ai_memory.integration import scope_name, validate_id, validate_name


def test_resolve_stays_under_root(tmp_path: Path) -> None:
    guard = DirectoryGuard(tmp_path / "root")
    assert guard.root == (tmp_path / "root").resolve()
    assert guard.resolve("memory/state", "a.json") == guard.root / "memory" / "state" / "a.json"


@pytest.mark.parametrize(
    "parts",
    [("..",), ("memory/../../x",), ("/etc/passwd",), ("a\x00b",), ("",), ("a\\..\\b",), ("memory", "."), ("a//b",)],
)
def test_resolve_rejects_escapes(tmp_path: Path, parts: tuple[str, ...]) -> None:
    guard = DirectoryGuard(tmp_path)
    with pytest.raises(PathEscapeError):
        guard.resolve(*parts)


def test_symlink_leading_outside_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    root = tmp_path / "root"
    root.mkdir()
    (root / "link").symlink_to(outside)
    (root / "inside").mkdir()
    (root / "ok").symlink_to(root / "inside")
    guard = DirectoryGuard(root)
    with pytest.raises(PathEscapeError, match="outside the data root"):
        guard.resolve("link", "secret.md")
    assert not guard.contains(root / "link")
    assert guard.resolve("ok", "note.md") == root / "ok" / "note.md"


def test_root_is_created_owner_only(tmp_path: Path) -> None:
    guard = DirectoryGuard(tmp_path / "new" / "root")
    assert guard.root.is_dir()
    assert (guard.root.stat().st_mode & 0o777) == 0o700


def test_root_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(InvalidInputError, match="not a folder"):
        DirectoryGuard(tmp_path / "file", create=False)


@pytest.mark.parametrize("value", ["abc", "A-b_9", "x" * 128])
def test_valid_ids(value: str) -> None:
    assert validate_id(value) == value


@pytest.mark.parametrize("value", ["", "../x", "a/b", "a.b", "x" * 129, "a\x00", "é", 5, None])
def test_invalid_ids(value: object) -> None:
    with pytest.raises(InvalidInputError):
        validate_id(value, "plan id")


@pytest.mark.parametrize(
    "value",
    [
        "",
        "../x",
        "/etc",
        "a\x00b",
        "x" * 10_000,
        ".",
        "..",
        "a\nb",
        "a\u202eb",  # right-to-left override
        "a\u200bb",  # zero-width space
        "\uff0e\uff0e",  # fullwidth dots: NFKC '..'
        "a\uff0fb",  # fullwidth solidus: NFKC '/'
        "a\\b",
        3,
    ],
)
def test_hostile_names_are_refused(value: object) -> None:
    with pytest.raises(InvalidInputError):
        validate_name(value, "user_id")


def test_names_with_unicode_and_punctuation_are_allowed() -> None:
    for name in ["alice", "bob_admin", "alice@example.com", "Zoë", "用户", "a b", ".hidden"]:
        assert validate_name(name) == name


def test_scopes_are_unambiguous() -> None:
    assert scope_name("a_b", "c") != scope_name("a", "b_c")
    assert scope_name("alice", "s1") == "alice_s1"


def test_prefix_users_do_not_share_files() -> None:
    bob, bob_admin = user_file_prefix("bob"), user_file_prefix("bob_admin")
    admin_file = f"{bob_admin}notes.md"
    assert not admin_file.startswith(bob)
    assert owner_of(admin_file) == "bob_admin"
    assert owner_of(f"{bob}notes.md") == "bob"
    assert owner_of("notes.md") is None
    assert owner_of("bob%4_x.md") is None  # not a canonical encoding


def test_encoded_names_are_plain_file_names() -> None:
    for name in [".hidden", "..x", "a b", "CON", "a%b", "a~b"]:
        encoded = encode_name(name)
        assert not encoded.startswith(".")
        assert set(encoded) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-.%")
        assert decode_name(encoded) == name


@given(st.text(min_size=1, max_size=40))
def test_encoding_round_trips_and_never_contains_separators(name: str) -> None:
    try:
        validate_name(name)
    except InvalidInputError:
        return
    encoded = encode_name(name)
    assert "_" not in encoded
    assert "/" not in encoded
    assert encoded not in (".", "..")
    assert decode_name(encoded) == name
    assert owner_of(f"{encoded}_file.md") == name


@given(st.text(min_size=1, max_size=20), st.text(min_size=1, max_size=20))
def test_scope_name_is_injective(user: str, session: str) -> None:
    try:
        scope = scope_name(user, session)
    except InvalidInputError:
        return
    head, _, tail = scope.partition("_")
    assert (decode_name(head), decode_name(tail)) == (user, session)


@pytest.mark.parametrize("name", ["CON", "nul.txt", "com1.md", "x" * 256])
def test_component_rejects_reserved_and_long_names(name: str) -> None:
    with pytest.raises(InvalidInputError):
        check_component(name)


def test_guard_repr_and_nul_root(tmp_path: Path) -> None:
    assert "DirectoryGuard(" in repr(DirectoryGuard(tmp_path))
    with pytest.raises(PathEscapeError):
        DirectoryGuard(os.fspath(tmp_path) + "\x00x")
