"""Hostile input wherever a string reaches the filesystem, hostile files and planted symlinks.

Every call gets a clear library error (:class:`LocalMemoryError`) or works inside the root,
or the bad file is skipped with a log event. After each attempt, a sibling folder of the root
and everything outside the root are unchanged, and nothing in the root resolves outside it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import reliability_support as rs

from local_ai_memory import InvalidInputError, LocalMemoryError, UnsupportedFormatError, close_shared_stores
from local_ai_memory._knowledge.retriever import MemoryRetriever
from local_ai_memory._knowledge.store import MemoryStore
from local_ai_memory._runtime.messages import SessionMessageStore
from local_ai_memory._runtime.scope import MemoryManager
from local_ai_memory._runtime.tool_results import ToolResultStore
from local_ai_memory._shared.config import MemoryConfig
from local_ai_memory._shared.naming import DirectoryGuard
from local_ai_memory.backends import FileKnowledgeBackend, FileRuntimeBackend

CONFIG = MemoryConfig(fsync=False, auto_watch=False)  # files change behind the store's back, then a search

HOSTILE_NAMES = [
    "..",
    ".",
    "../outside",
    "../../etc/passwd",
    "a/../../b",
    "/abs/path",
    "\\\\server\\share",
    "a\\..\\b",
    "x\x00y",
    "nul\x00",
    "line\nbreak",
    "tab\tname",
    "esc\x1b[31m",
    "\u202eexe.md",  # right-to-left override
    "a\u200bb",  # zero-width space
    "\u2066isolate\u2069",
    "\ufeffbom",
    "\uff0e\uff0e",  # fullwidth dots: NFKC ".."
    "\uff0e\uff0e\uff0fetc",  # fullwidth "../etc"
    "\u2024\u2024",  # one dot leaders
    "\ufe52\ufe52",  # small full stops
    "CON",
    "nul",
    "com1",
    "LPT9.md",
    "aux.txt",
    "x" * 129,
    "é" * 100,
    "\U0001f600" * 60,
    "",
    " ",
    "...",
    "~",
    "$HOME",
    "%2e%2e",
    "%2F",
    "a_b",
]


@pytest.fixture
def world(tmp_path: Path) -> tuple[Path, Path]:
    """A root and a sibling folder with a secret, to check nothing outside the root changes."""
    root = tmp_path / "root"
    sibling = tmp_path / "sibling"
    sibling.mkdir()
    (sibling / "secret.md").write_text("# Secret\n\nsiblingsecret token\n")
    (sibling / "alice_secret.md").write_text("# Secret\n\nsiblingsecret token\n")
    return root, sibling


def _attempt(root: Path, sibling: Path, action: Callable[[], Any]) -> str:
    """Run ``action``; return 'error' or 'ok'. Anything but a library error fails the test."""
    before_sibling = rs.snapshot(sibling)
    before_parent = sorted(p.name for p in root.parent.iterdir())
    rs.COUNTS["hostile_inputs"] += 1
    try:
        result = action()
    except LocalMemoryError:
        outcome = "error"
    else:
        outcome = "ok"
        assert "siblingsecret" not in repr(result)
    assert rs.snapshot(sibling) == before_sibling, "something outside the root changed"
    assert sorted(p.name for p in root.parent.iterdir()) == before_parent
    assert rs.everything_inside(root) == []
    return outcome


def test_hostile_ids_and_names_everywhere(world: tuple[Path, Path]) -> None:
    root, sibling = world
    guard = DirectoryGuard(root)
    base = MemoryManager(FileRuntimeBackend.from_config(CONFIG, guard), CONFIG)
    alice = base.scoped("alice", "s1")
    store = MemoryStore(FileKnowledgeBackend(guard, CONFIG), CONFIG, categories=["knowledge"])
    retriever = MemoryRetriever(store)
    store.write_file("knowledge/alice_ok.md", "# Ok\n\nhello world\n")
    accepted: list[str] = []
    for name in HOSTILE_NAMES:
        actions: dict[str, Callable[[], Any]] = {
            "scoped user": lambda n=name: base.scoped(n, "s").update_state({"x": 1}),
            "scoped session": lambda n=name: base.scoped("u", n).update_working_memory("x"),
            "session store": lambda n=name: SessionMessageStore(
                FileRuntimeBackend.from_config(CONFIG, guard), CONFIG, user_id=n, session_id="s"
            ).append([{"role": "user", "content": "x"}]),
            "plan id": lambda n=name: alice.save_plan(n, {"x": 1}),
            "load plan": lambda n=name: alice.load_plan(n),
            "tool result id": lambda n=name: alice.save_tool_result(n, "x"),
            "load tool result": lambda n=name: alice.load_tool_result(n),
            "tool name": lambda n=name: ToolResultStore(alice).externalize(n, "y" * 7000),
            "category": lambda n=name: MemoryStore(FileKnowledgeBackend(guard, CONFIG), CONFIG, categories=[n]),
            "write_file name": lambda n=name: store.write_file(f"knowledge/{n}", "text"),
            "write_file path": lambda n=name: store.write_file(n, "text"),
            "read_file": lambda n=name: store.read_file(n),
            "read_file in category": lambda n=name: store.read_file(f"knowledge/{n}"),
            "search user": lambda n=name: store.bm25_search("hello", user_id=n),
            "retrieve user": lambda n=name: retriever.retrieve("hello", n),
            "retrieve category": lambda n=name: retriever.retrieve("hello", "alice", categories=[n]),
            "list_user_files": lambda n=name: store.list_user_files(n, "knowledge"),
        }
        for label, action in actions.items():
            if _attempt(root, sibling, action) == "ok":
                accepted.append(f"{label}: {name!r}")
    # What may pass: names that are encoded (user/session), free-text tool names, and ids that
    # are valid as they are. Nothing accepted may carry a separator or a dot-only name to disk.
    for path in root.rglob("*"):
        assert "\x00" not in path.name
        assert path.name not in (".", "..")
        assert path.name.split(".")[0].lower() not in {"con", "nul", "aux", "com1", "lpt9"}
    assert any(a.startswith("tool name") for a in accepted)  # free text that never reaches a path
    # Plan ids are keys inside plans/{scope}.json and categories are only checked when a folder is
    # used, so 'CON' may pass there; a tool result id becomes a file name and must not.
    odd = [a for a in accepted if a.startswith(("tool result id", "write_file name")) and "a_b" not in a]
    odd = [a for a in odd if a != "write_file name: '/abs/path'"]  # knowledge/abs/path: a nested file, inside
    assert odd == [], "\n".join(odd)


@pytest.mark.parametrize("call", ["resolve", "read_file", "write_file"])
def test_lone_surrogate_in_a_path_is_a_library_error(world: tuple[Path, Path], call: str) -> None:
    root, sibling = world
    guard = DirectoryGuard(root)
    store = MemoryStore(FileKnowledgeBackend(guard, CONFIG), CONFIG, categories=["knowledge"])
    actions: dict[str, Callable[[], Any]] = {
        "resolve": lambda: guard.resolve("memory_data", "knowledge", "alice_\ud800.md"),
        "read_file": lambda: store.read_file("knowledge/alice_\ud800.md"),
        "write_file": lambda: store.write_file("knowledge/alice_\ud800.md", "x"),
    }
    _attempt(root, sibling, actions[call])


CONTROL_NAMES = [
    "line\nbreak.md",
    "tab\tname.md",
    "esc\x1b[31m.md",
    "\u202eexe.md",
    "a\u200bb.md",
    "\ufeffbom.md",
    "knowledge/alice_\u202edm.exe.md",
    "knowledge/alice_x\x07.md",
]


@pytest.mark.parametrize("path", CONTROL_NAMES, ids=[repr(n) for n in CONTROL_NAMES])
def test_write_file_refuses_control_and_bidi_names(world: tuple[Path, Path], path: str) -> None:
    root, sibling = world
    store = MemoryStore(FileKnowledgeBackend(DirectoryGuard(root), CONFIG), CONFIG, categories=["knowledge"])
    assert _attempt(root, sibling, lambda: store.write_file(path, "# x\n")) == "error"


def test_symlinks_inside_the_root_pointing_outside(world: tuple[Path, Path]) -> None:
    root, sibling = world
    guard = DirectoryGuard(root)
    store = MemoryStore(FileKnowledgeBackend(guard, CONFIG), CONFIG, categories=["knowledge", "work"])
    manager = MemoryManager(FileRuntimeBackend.from_config(CONFIG, guard), CONFIG).scoped("alice", "s1")
    manager.update_state({"x": 1})
    knowledge = root / "memory_data/knowledge"
    knowledge.mkdir(parents=True, exist_ok=True)
    (knowledge / "alice_link.md").symlink_to(sibling / "alice_secret.md")
    (knowledge / "alice_dangling.md").symlink_to(sibling / "missing.md")
    (root / "memory_data/work").symlink_to(sibling, target_is_directory=True)  # a whole category
    (root / "memory/plans").symlink_to(sibling, target_is_directory=True)
    (root / "memory/state" / f"{manager.stem}.json").unlink()
    (root / "memory/state" / f"{manager.stem}.json").symlink_to(sibling / "secret.md")
    (root / "memory/tool_results").mkdir(parents=True, exist_ok=True)
    (root / "memory/tool_results/r1.json").symlink_to(sibling / "secret.md")
    retriever = MemoryRetriever(store)
    attempts: list[Callable[[], Any]] = [
        lambda: store.read_file("knowledge/alice_link.md"),
        lambda: store.write_file("knowledge/alice_link.md", "overwrite"),
        lambda: store.write_file("knowledge/alice_dangling.md", "create outside"),
        lambda: store.bm25_search("siblingsecret", user_id="alice", categories=["knowledge"]),
        lambda: store.bm25_search("siblingsecret", user_id="alice", categories=["work"]),
        lambda: store.read_file("work/alice_secret.md"),
        lambda: store.write_file("work/alice_new.md", "x"),
        lambda: store.list_user_files("alice", "work"),
        lambda: retriever.retrieve("siblingsecret token", "alice"),
        manager.get_state,
        lambda: manager.update_state({"y": 2}),
        lambda: manager.save_plan("p", {"x": 1}),
        manager.list_plans,
        lambda: manager.load_tool_result("r1"),
        lambda: manager.save_tool_result("r1", "x"),
        lambda: manager.load_tool_result_page("r1", 0, 10),
    ]
    for action in attempts:
        _attempt(root, sibling, action)
    assert (sibling / "alice_secret.md").read_text() == "# Secret\n\nsiblingsecret token\n"
    assert not (sibling / "missing.md").exists()


def _events(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [getattr(r, "event", "") for r in caplog.records]


def test_binary_invalid_and_huge_markdown_files(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="local_ai_memory")
    store = MemoryStore(FileKnowledgeBackend(DirectoryGuard(tmp_path), CONFIG), CONFIG, categories=["knowledge"])
    folder = tmp_path / "memory_data/knowledge"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "alice_binary.md").write_bytes(b"# B\n\x00\x01\x02 needle " * 100)
    (folder / "alice_latin1.md").write_bytes("# L\n\ncaf\xe9 needle".encode("latin-1"))
    (folder / "alice_huge.md").write_text("# Huge\n\nneedle " + "lorem ipsum dolor " * 1_200_000)  # ~21 MB
    (folder / "alice_fine.md").write_text("# Fine\n\nneedle in a small file\n")
    rs.COUNTS["hostile_inputs"] += 3
    found = store.bm25_search("needle", user_id="alice")
    assert "alice_binary.md" not in found
    assert "alice_latin1.md" not in found
    assert "alice_fine.md" in found
    skipped = [r.fields.get("path", "") for r in caplog.records if getattr(r, "event", "") == "FILE_SKIPPED"]
    assert any("alice_binary.md" in p for p in skipped)
    assert any("alice_latin1.md" in p for p in skipped)
    with pytest.raises(UnsupportedFormatError):
        store.read_file("knowledge/alice_latin1.md")
    text = MemoryRetriever(store).retrieve("needle", "alice", max_tokens=500)
    assert "\x00" not in text
    assert "caf" not in text  # the latin-1 file is never loaded
    from local_ai_memory._shared.tokens import TokenCounter

    assert TokenCounter().count(text) <= 500


@pytest.mark.parametrize(
    ("label", "data", "expect"),
    [
        ("truncated", None, "rebuilt"),
        ("not json", b"\x00\xff garbage", "rebuilt"),
        ("array", b"[1, 2, 3]", "rebuilt"),
        ("wrong shape", json.dumps({"index_version": 3, "files": "nope"}).encode(), "rebuilt"),
        ("entry wrong type", json.dumps({"index_version": 3, "files": [{"filename": 5}]}).encode(), "rebuilt"),
        ("version string", json.dumps({"index_version": "three", "files": []}).encode(), "rebuilt"),
        ("outdated", json.dumps({"index_version": 2, "files": []}).encode(), "rebuilt"),
        (
            "foreign entries",
            json.dumps(
                {
                    "index_version": 3,
                    "files": [
                        {"filename": "../../sibling/secret.md", "category": "knowledge"},
                        {"filename": "alice_x.md", "category": "../.."},
                        {"filename": "bob_secret.md", "category": "knowledge", "title": "alice needle"},
                    ],
                }
            ).encode(),
            "rebuilt",
        ),
        ("future", json.dumps({"index_version": 99, "files": []}).encode(), "refused"),
    ],
)
def test_hostile_index_files(
    world: tuple[Path, Path], caplog: pytest.LogCaptureFixture, label: str, data: bytes | None, expect: str
) -> None:
    root, sibling = world
    caplog.set_level(logging.DEBUG, logger="local_ai_memory")
    guard = DirectoryGuard(root)
    first = MemoryStore(FileKnowledgeBackend(guard, CONFIG), CONFIG, categories=["knowledge"])
    first.write_file("knowledge/alice_n.md", "# N\n\nneedle here\n")
    first.write_file("knowledge/bob_secret.md", "# Bob\n\nbob private needle\n")
    index = root / "memory_data/.index/alice_index.json"
    original = index.read_bytes()
    index.write_bytes(original[: len(original) // 2] if data is None else data)
    rs.COUNTS["hostile_inputs"] += 1
    close_shared_stores()  # the next store starts as a new process would, from the damaged file
    store = MemoryStore(FileKnowledgeBackend(guard, CONFIG), CONFIG, categories=["knowledge"])
    if expect == "refused":
        with pytest.raises(UnsupportedFormatError):
            store.bm25_search("needle", user_id="alice")
        assert index.read_bytes() == data  # never overwritten
        return
    assert _attempt(root, sibling, lambda: store.bm25_search("needle", user_id="alice")) == "ok"
    assert store.bm25_search("needle", user_id="alice") == ["alice_n.md"]
    text = MemoryRetriever(store).retrieve("needle", "alice")
    assert "bob private" not in text
    assert "siblingsecret" not in text
    assert set(_events(caplog)) & {"MEMORY_CORRUPT", "INDEX_REBUILT", "INDEX_REFRESHED"}


@pytest.mark.parametrize(
    ("folder", "suffix"), [("state", ".json"), ("plans", ".json"), ("working", ".md"), ("sessions", ".jsonl")]
)
@pytest.mark.parametrize("content", [b"", b"\x00\xff\xfe", b'{"format_version": 1, "state": [1]}', b"[]", b"{"])
def test_damaged_runtime_files_are_quarantined_not_fatal(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, folder: str, suffix: str, content: bytes
) -> None:
    caplog.set_level(logging.DEBUG, logger="local_ai_memory")
    manager = MemoryManager(FileRuntimeBackend.from_config(CONFIG, DirectoryGuard(tmp_path)), CONFIG).scoped(
        "alice", "s1"
    )
    path = tmp_path / "memory" / folder / f"{manager.stem}{suffix}"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    rs.COUNTS["hostile_inputs"] += 1
    if folder == "state":
        assert manager.get_state() == {}
        assert manager.update_state({"a": 1}) == {"a": 1}
    elif folder == "plans":
        assert manager.list_plans() == {}
        manager.save_plan("p", 1)
        assert manager.load_plan("p") == 1
    elif folder == "working":
        text = manager.get_working_memory()
        assert isinstance(text, str)
    else:
        messages = SessionMessageStore.for_manager(manager)
        assert isinstance(messages.messages(), list)
        messages.append([{"role": "user", "content": "after"}])
        assert messages.messages()[-1].content == "after"
    # Damaged JSON is moved aside, never silently overwritten without a copy.
    if folder in ("state", "plans") and content and not (folder == "plans" and b"state" in content):
        assert list(path.parent.glob("*.corrupt.bak")), "damaged file was not kept aside"


@pytest.mark.parametrize("damage", ["truncate", "garbage", "pickle", "empty"])
def test_damaged_bm25_snapshot_is_ignored(tmp_path: Path, damage: str) -> None:
    import pickle

    guard = DirectoryGuard(tmp_path)
    store = MemoryStore(FileKnowledgeBackend(guard, CONFIG), CONFIG, categories=["knowledge"])
    store.write_file("knowledge/alice_a.md", "# A\n\nneedle alpha\n")
    store.write_file("knowledge/alice_b.md", "# B\n\nbeta only\n")
    store.bm25_search("needle", user_id="alice")
    store.save_rankers()
    snapshots = list((tmp_path / "memory_data").rglob("*.npz"))
    assert snapshots
    for path in snapshots:
        data = path.read_bytes()
        path.write_bytes(
            {
                "truncate": data[: len(data) // 2],
                "garbage": b"PK\x03\x04" + b"\xff" * 200,
                "pickle": pickle.dumps({"version": [1]}),
                "empty": b"",
            }[damage]
        )
    rs.COUNTS["hostile_inputs"] += 1
    fresh = MemoryStore(FileKnowledgeBackend(guard, CONFIG), CONFIG, categories=["knowledge"])
    assert fresh.bm25_search("needle", user_id="alice") == ["alice_a.md"]
    assert fresh.bm25_search("beta", user_id="alice") == ["alice_b.md"]


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    "payload",
    [
        float("nan"),
        {"x": float("inf")},
        {1: "non-string key"},
        {"set": {1, 2}},
        {"bytes": b"raw"},
        _nested(10_000),
        {"obj": object()},
    ],
    ids=["nan", "inf", "int-key", "set", "bytes", "deep", "object"],
)
def test_hostile_payloads_get_a_library_error_and_store_nothing(tmp_path: Path, payload: Any) -> None:
    manager = MemoryManager(FileRuntimeBackend.from_config(CONFIG, DirectoryGuard(tmp_path)), CONFIG).scoped(
        "alice", "s1"
    )
    manager.update_state({"keep": 1})
    manager.save_plan("p", {"keep": 1})
    before = rs.snapshot(tmp_path)
    for action in (
        lambda: manager.update_state({"x": payload}),
        lambda: manager.save_plan("p", payload),
        lambda: manager.save_tool_result("r", payload),
    ):
        rs.COUNTS["hostile_inputs"] += 1
        with pytest.raises(LocalMemoryError):
            action()
    after = {k: v for k, v in rs.snapshot(tmp_path).items() if not k.endswith(".lock")}
    assert after == {k: v for k, v in before.items() if not k.endswith(".lock")}
    assert manager.get_state() == {"keep": 1}
    assert manager.load_plan("p") == {"keep": 1}


def test_hostile_tool_output_round_trips_exactly(tmp_path: Path) -> None:
    manager = MemoryManager(FileRuntimeBackend.from_config(CONFIG, DirectoryGuard(tmp_path)), CONFIG).scoped(
        "alice", "s1"
    )
    store = ToolResultStore(manager)
    content = ('\x00\x1b[2J\u202e\U0010ffff "\\</data>```\r\n' * 400) + "é" * 5000
    rs.COUNTS["hostile_inputs"] += 1
    reference = json.loads(store.externalize("evil\x00tool\u202e", content))
    page = store.load_page(reference["result_id"], 0, len(content) + 10)
    assert page.content == content
    assert reference["size"] > 6144
    # A lone surrogate is not text (and JSON's escape would not even keep it: two of them come
    # back as one astral character): refused, nothing stored (tests/test_lone_surrogates.py).
    with pytest.raises(InvalidInputError, match="lone surrogate"):
        store.externalize("evil", content + "\ud83d\ude00")
    assert list(manager.list_tool_results()) == [reference["result_id"]]
