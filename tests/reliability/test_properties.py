"""Stateful property tests: MemoryManager against a dict model, the index against a file model.

Hypothesis drives random sequences of operations; after every step the library, read back
through a *fresh* object (as another process would), must agree with the model.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import reliability_support as rs
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, rule

from local_ai_memory import InvalidInputError, RecordNotFoundError
from local_ai_memory._knowledge.store import MemoryStore
from local_ai_memory._runtime.scope import MemoryManager, merge_patch
from local_ai_memory._shared.config import MemoryConfig
from local_ai_memory._shared.fs import RACY_WINDOW_NS
from local_ai_memory._shared.naming import DirectoryGuard
from local_ai_memory.backends import FileKnowledgeBackend, FileRuntimeBackend

# Edits behind the store's back must be seen by the very next search here: that is the listing
# comparison (a watcher, on by default, sees them within a second; see tests/test_auto_watch.py).
CONFIG = MemoryConfig(fsync=False, auto_watch=False)
# Pairs that a naive "{user}_{session}" naming would confuse, and names that need encoding.
SCOPES = [("a_b", "c"), ("a", "b_c"), ("bob", "admin"), ("bob_admin", "x"), ("ünï cødé", "s 1"), (".hidden", "..x")]
KEYS = st.text(min_size=1, max_size=8)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(KEYS, children, max_size=3),
    max_leaves=8,
)
IDS = st.sampled_from(["p1", "p2", "plan-3", "A_b-9"])


class ManagerModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="lam-model-"))
        self.guard = DirectoryGuard(self.root)
        self.managers = {
            scope: MemoryManager(FileRuntimeBackend.from_config(CONFIG, self.guard), CONFIG).scoped(*scope)
            for scope in SCOPES
        }
        self.state: dict[tuple[str, str], dict[str, Any]] = {s: {} for s in SCOPES}
        self.working: dict[tuple[str, str], str] = dict.fromkeys(SCOPES, "")
        self.plans: dict[tuple[str, str], dict[str, Any]] = {s: {} for s in SCOPES}
        self.results: dict[str, Any] = {}

    def teardown(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def _step(self) -> None:
        rs.COUNTS["model_steps"] += 1

    @rule(scope=st.sampled_from(SCOPES), patch=st.dictionaries(KEYS, JSON, max_size=4))
    def update_state(self, scope: tuple[str, str], patch: dict[str, Any]) -> None:
        self._step()
        self.state[scope] = merge_patch(self.state[scope], patch)  # RFC 7396, checked on its own in test_manager
        assert self.managers[scope].update_state(patch) == self.state[scope]

    @rule(scope=st.sampled_from(SCOPES), text=st.text(max_size=200))
    def update_working_memory(self, scope: tuple[str, str], text: str) -> None:
        self._step()
        self.working[scope] = text
        self.managers[scope].update_working_memory(text)

    @rule(scope=st.sampled_from(SCOPES), plan_id=IDS, payload=JSON)
    def save_plan(self, scope: tuple[str, str], plan_id: str, payload: Any) -> None:
        self._step()
        self.plans[scope][plan_id] = payload
        self.managers[scope].save_plan(plan_id, payload)

    @rule(scope=st.sampled_from(SCOPES), plan_id=IDS)
    def delete_plan(self, scope: tuple[str, str], plan_id: str) -> None:
        self._step()
        existed = plan_id in self.plans[scope]  # a plan whose payload is null exists too
        self.plans[scope].pop(plan_id, None)
        assert self.managers[scope].delete_plan(plan_id) == existed

    @rule(scope=st.sampled_from(SCOPES), result_id=st.sampled_from(["r1", "r2", "r3"]), payload=JSON)
    def save_tool_result(self, scope: tuple[str, str], result_id: str, payload: Any) -> None:
        self._step()
        owner = self.results.get(result_id, (scope, None))[0]
        if owner != scope:  # ids are unique across scopes: another scope's id is refused
            try:
                self.managers[scope].save_tool_result(result_id, payload)
            except InvalidInputError:
                return
            raise AssertionError(f"{scope} overwrote {owner}'s result {result_id}")
        self.results[result_id] = (scope, payload)
        self.managers[scope].save_tool_result(result_id, payload)

    @rule(scope=st.sampled_from(SCOPES), plan_id=IDS)
    def load_plan(self, scope: tuple[str, str], plan_id: str) -> None:
        self._step()
        if plan_id in self.plans[scope]:
            assert self.managers[scope].load_plan(plan_id) == self.plans[scope][plan_id]
        else:
            try:
                self.managers[scope].load_plan(plan_id)
            except RecordNotFoundError:
                pass
            else:
                raise AssertionError(f"plan {plan_id} of {scope} should not exist")

    @rule()
    def reopen(self) -> None:
        """A new process: fresh guard and managers on the same folder."""
        self._step()
        self.guard = DirectoryGuard(self.root)
        self.managers = {
            scope: MemoryManager(FileRuntimeBackend.from_config(CONFIG, self.guard), CONFIG).scoped(*scope)
            for scope in SCOPES
        }

    @invariant()
    def fresh_reader_agrees(self) -> None:
        guard = DirectoryGuard(self.root)
        for scope in SCOPES:
            fresh = MemoryManager(FileRuntimeBackend.from_config(CONFIG, guard), CONFIG).scoped(*scope)
            assert fresh.get_state() == self.state[scope]
            assert fresh.get_working_memory() == self.working[scope]
            assert fresh.list_plans() == self.plans[scope]
        for result_id, (owner, payload) in self.results.items():
            assert (
                MemoryManager(FileRuntimeBackend.from_config(CONFIG, guard), CONFIG)
                .scoped(*owner)
                .load_tool_result(result_id)
                == payload
            )
            for other in SCOPES:
                if other != owner:
                    try:
                        MemoryManager(FileRuntimeBackend.from_config(CONFIG, guard), CONFIG).scoped(
                            *other
                        ).load_tool_result(result_id)
                    except RecordNotFoundError:
                        continue
                    raise AssertionError(f"{other} loaded {owner}'s result {result_id}")
        assert rs.temp_files(self.root) == []
        assert not list(self.root.rglob("*.corrupt.bak"))


TestManagerModel = ManagerModel.TestCase
TestManagerModel.settings = settings(
    max_examples=25, stateful_step_count=20, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)


WORDS = [f"w{n}" for n in range(12)]
USERS = ["alice", "bob", "bob_admin"]


class IndexModel(RuleBasedStateMachine):
    """Files created, modified, deleted and renamed behind the store's back (as a user's editor
    does), or through ``write_file``; search must see exactly the model's files."""

    files = Bundle("files")

    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="lam-index-"))
        self.folder = self.root / "memory_data" / "knowledge"
        self.store = MemoryStore(
            FileKnowledgeBackend(DirectoryGuard(self.root), CONFIG), CONFIG, categories=["knowledge"]
        )
        self.model: dict[str, str] = {}  # filename -> unique token of its current version
        self.gone: list[str] = []  # tokens of deleted or overwritten versions
        self.version = 0

    def teardown(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def _content(self, name: str, word: str) -> tuple[str, str]:
        self.version += 1
        token = f"tok{self.version}x"
        # Length grows with the version, so every change also changes the size; same-size edits
        # in one timestamp tick have their own test (test_same_size_edit_in_one_tick_is_seen).
        return token, f"# {name}\n\n{token} {word} " + "pad " * self.version

    @rule(
        target=files,
        user=st.sampled_from(USERS),
        stem=st.sampled_from(["a", "b", "c", "d"]),
        word=st.sampled_from(WORDS),
        api=st.booleans(),
    )
    def create(self, user: str, stem: str, word: str, api: bool) -> str:
        rs.COUNTS["model_steps"] += 1
        name = f"{user.replace('_', '%5F')}_{stem}.md"
        token, text = self._content(name, word)
        if name in self.model:
            self.gone.append(self.model[name])
        if api:
            self.store.write_file(f"knowledge/{name}", text)
        else:
            self.folder.mkdir(parents=True, exist_ok=True)
            (self.folder / name).write_text(text)
        self.model[name] = token
        return name

    @rule(name=files, word=st.sampled_from(WORDS))
    def modify(self, name: str, word: str) -> None:
        rs.COUNTS["model_steps"] += 1
        if name not in self.model:
            return
        token, text = self._content(name, word)
        (self.folder / name).write_text(text)
        self.gone.append(self.model[name])
        self.model[name] = token

    @rule(name=files)
    def delete(self, name: str) -> None:
        rs.COUNTS["model_steps"] += 1
        if name in self.model:
            os.unlink(self.folder / name)
            self.gone.append(self.model.pop(name))

    @rule(name=files, stem=st.sampled_from(["e", "f"]))
    def rename(self, name: str, stem: str) -> None:
        rs.COUNTS["model_steps"] += 1
        if name not in self.model:
            return
        new = name.rsplit("_", 1)[0] + f"_{stem}.md"
        if new in self.model:
            return
        os.rename(self.folder / name, self.folder / new)
        self.model[new] = self.model.pop(name)

    @rule()
    def restart(self) -> None:
        rs.COUNTS["model_steps"] += 1
        self.store.flush()
        self.store = MemoryStore(
            FileKnowledgeBackend(DirectoryGuard(self.root), CONFIG), CONFIG, categories=["knowledge"]
        )

    @invariant()
    def search_sees_the_model(self) -> None:
        for name, token in self.model.items():
            owner = "bob_admin" if name.startswith("bob%5Fadmin_") else name.split("_", 1)[0]
            assert self.store.bm25_search(token, user_id=owner) == [name]
            for other in USERS:
                if other != owner:
                    assert self.store.bm25_search(token, user_id=other) == []  # never another user's file
        for token in self.gone[-8:]:
            for user in USERS:
                assert self.store.bm25_search(token, user_id=user) == [], f"{token} was deleted or replaced"
        self.store.refresh_stale_entries()  # read_index is the cached view; searches refresh per user
        indexed = {e.filename for e in self.store.read_index().files}
        assert indexed == set(self.model)


TestIndexModel = IndexModel.TestCase
TestIndexModel.settings = settings(
    max_examples=20, stateful_step_count=15, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)


class _CoarseClockBackend(FileKnowledgeBackend):
    """Files on a file system whose timestamps tick coarsely (FAT, some network shares): the
    measured window cannot be shorter than the fixed one. On a fine clock a change made after
    a search that verified the note gets a later mtime, so only a coarse clock can keep it."""

    @property
    def racy_window_ns(self) -> int:
        return RACY_WINDOW_NS


def test_same_size_edit_in_one_tick_is_seen(tmp_path: Path) -> None:
    """An editor saves a same-size change within the filesystem's timestamp granularity."""
    store = MemoryStore(_CoarseClockBackend(DirectoryGuard(tmp_path), CONFIG), CONFIG, categories=["knowledge"])
    path = tmp_path / "memory_data/knowledge/alice_n.md"
    store.write_file("knowledge/alice_n.md", "# N\n\ntokaaaax\n")
    assert store.bm25_search("tokaaaax", user_id="alice") == ["alice_n.md"]
    before = path.stat()
    path.write_text("# N\n\ntokbbbbx\n")
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))  # same tick: same mtime, same size
    time.sleep(0.01)
    found = store.bm25_search("tokbbbbx", user_id="alice")
    # Like git's "racily clean" files: entries indexed within a tick of their mtime keep a hash.
    assert found == ["alice_n.md"]
