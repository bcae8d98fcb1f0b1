"""The runtime-backend conformance suite: what every :class:`RuntimeBackend` must do.

Use it from your own test module::

    import pytest
    from local_ai_memory.testing import RuntimeBackendTests

    class TestMyBackend(RuntimeBackendTests):
        @pytest.fixture
        def backend(self, tmp_path):
            return MyBackend(...)

Each test gets a fresh backend from the fixture. The suite drives the backend directly and
through the engines (``MemoryManager``, ``ToolResultStore``, ``SessionMessageStore``), with
real threads for the races.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest

from local_ai_memory._contracts.runtime import Erasure, RuntimeBackend, Scope
from local_ai_memory._runtime.messages import SessionMessageStore
from local_ai_memory._runtime.scope import MemoryManager
from local_ai_memory._runtime.tool_results import ToolResultStore, parse_reference
from local_ai_memory._shared.config import MemoryConfig
from local_ai_memory._shared.errors import InvalidInputError, RecordNotFoundError
from local_ai_memory._shared.records import StoredMessage

__all__ = ["RuntimeBackendTests"]

_TEXTS = {
    "empty": "",
    "emoji": "snake 🐍, flag 🇺🇦, family 👩‍👩‍👧 and é composed e\u0301",
    "crlf": "line one\r\nline two\r\n\r\nend\r",
    "nul": "before\x00after",
}
_TRICKY_USERS = ["bob", "bob_admin", "bo", "b_ob", "50%", "a.b", ".hidden", "x%5Fy"]


def _parallel(count: int, work: Callable[[int], None]) -> None:
    errors: list[BaseException] = []

    def run(index: int) -> None:
        try:
            work(index)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(index,)) for index in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


class RuntimeBackendTests:
    """Subclass and provide a ``backend`` fixture returning a fresh, empty backend."""

    @pytest.fixture
    def backend(self) -> RuntimeBackend:
        raise NotImplementedError("give the suite a `backend` fixture that returns a fresh backend")

    @pytest.fixture
    def config(self) -> MemoryConfig:
        return MemoryConfig(fsync=False, tool_result_inline_limit=64)

    def manager(
        self, backend: RuntimeBackend, config: MemoryConfig, user: str = "alice", session: str = "s1"
    ) -> MemoryManager:
        return MemoryManager(config=config, user_id=user, session_id=session, backend=backend)

    # -- L0 -----------------------------------------------------------------------------

    def test_state_starts_empty_and_round_trips(self, backend: RuntimeBackend) -> None:
        scope = Scope.of("alice", "s1")
        assert backend.get_state(scope) == {}
        value = {"text": _TEXTS["emoji"], "nested": {"list": [1, 2.5, None, True]}, "crlf": _TEXTS["crlf"]}
        assert backend.update_state(scope, lambda state: {**state, **value}) == value
        assert backend.get_state(scope) == value

    def test_values_handed_out_cannot_change_what_is_stored(self, backend: RuntimeBackend) -> None:
        scope = Scope.of("alice", "s1")
        backend.update_state(scope, lambda state: {"list": [1]})
        backend.get_state(scope)["list"].append(2)
        assert backend.get_state(scope) == {"list": [1]}

    def test_concurrent_state_updates_lose_nothing(self, backend: RuntimeBackend, config: MemoryConfig) -> None:
        manager = self.manager(backend, config)

        def bump(index: int) -> None:
            for _ in range(50):
                backend.update_state(manager.scope_info, lambda state: {**state, "n": state.get("n", 0) + 1})

        _parallel(4, bump)
        assert manager.get_state() == {"n": 200}

    # -- L1 -----------------------------------------------------------------------------

    @pytest.mark.parametrize("kind", sorted(_TEXTS))
    def test_working_memory_round_trips_exactly(self, backend: RuntimeBackend, config: MemoryConfig, kind: str) -> None:
        manager = self.manager(backend, config)
        manager.update_working_memory(_TEXTS[kind])
        assert manager.get_working_memory() == _TEXTS[kind]

    def test_compare_and_swap_has_exactly_one_winner(self, backend: RuntimeBackend, config: MemoryConfig) -> None:
        manager = self.manager(backend, config)
        manager.update_working_memory("v0")
        outcomes: dict[int, str | None] = {}
        start = threading.Barrier(8)

        def swap(index: int) -> None:
            start.wait()
            outcomes[index] = manager.swap_working_memory("v0", f"v1 by {index}")

        _parallel(8, swap)
        winners = [index for index, found in outcomes.items() if found is None]
        assert len(winners) == 1
        assert manager.get_working_memory() == f"v1 by {winners[0]}"
        assert all(found == f"v1 by {winners[0]}" for index, found in outcomes.items() if index != winners[0])

    def test_compare_and_swap_retries_lose_no_update(self, backend: RuntimeBackend, config: MemoryConfig) -> None:
        manager = self.manager(backend, config)

        def add_lines(index: int) -> None:
            for line in range(20):
                current = manager.get_working_memory()
                while (found := manager.swap_working_memory(current, current + f"{index}.{line}\n")) is not None:
                    current = found

        _parallel(4, add_lines)
        lines = manager.get_working_memory().splitlines()
        assert sorted(lines) == sorted(f"{index}.{line}" for index in range(4) for line in range(20))

    # -- L2 -----------------------------------------------------------------------------

    def test_plans_round_trip_and_delete_is_idempotent(self, backend: RuntimeBackend, config: MemoryConfig) -> None:
        manager = self.manager(backend, config)
        with pytest.raises(RecordNotFoundError):
            manager.load_plan("p1")
        manager.save_plan("p1", {"steps": ["a", _TEXTS["emoji"]]})
        manager.save_plan("p2", None)
        assert manager.list_plans() == {"p1": {"steps": ["a", _TEXTS["emoji"]]}, "p2": None}
        assert manager.delete_plan("p2") is True
        assert manager.delete_plan("p2") is False
        assert manager.list_plans() == {"p1": {"steps": ["a", _TEXTS["emoji"]]}}

    def test_step_logs_keep_order_and_go_with_their_plan(self, backend: RuntimeBackend, config: MemoryConfig) -> None:
        manager = self.manager(backend, config)
        manager.save_plan("p1", {})
        for number in range(5):
            manager.append_plan_steps("p1", [{"seq": number, "text": _TEXTS["crlf"]}])
        assert [step["seq"] for step in manager.plan_steps("p1")] == [0, 1, 2, 3, 4]
        assert manager.plan_steps("p1")[0]["text"] == _TEXTS["crlf"]
        manager.delete_plan("p1")
        assert manager.plan_steps("p1") == []

    def test_step_logs_are_read_on_from_a_cursor(self, backend: RuntimeBackend, config: MemoryConfig) -> None:
        scope = self.manager(backend, config).scope_info

        def numbers(steps: list[dict[str, Any]]) -> list[int]:
            return [step["n"] for step in steps]

        assert backend.append_plan_steps(scope, "p1", [{"n": 0}, {"n": 1, "text": _TEXTS["crlf"]}]) is True
        assert backend.append_plan_steps(scope, "p1", [{"n": 2, "text": _TEXTS["emoji"]}]) is False
        first = backend.read_plan_steps(scope, "p1")
        assert (numbers(first.steps), first.restarted) == ([0, 1, 2], True)
        assert first.steps[2]["text"] == _TEXTS["emoji"]
        backend.append_plan_steps(scope, "p1", [{"n": 3}, {"n": 4}])
        second = backend.read_plan_steps(scope, "p1", first.cursor)
        assert (numbers(second.steps), second.restarted) == ([3, 4], False)
        third = backend.read_plan_steps(scope, "p1", second.cursor)
        assert (third.steps, third.restarted) == ([], False)
        assert numbers(backend.read_plan_steps(scope, "p1", "not a cursor").steps) == [0, 1, 2, 3, 4]
        assert asyncio.run(backend.aread_plan_steps(scope, "p1", first.cursor)) == second

        # Emptied and written anew, longer than before: the old cursor reads the new log whole.
        backend.clear_plan_steps(scope, "p1")
        gone = backend.read_plan_steps(scope, "p1", third.cursor)
        assert (gone.steps, gone.restarted) == ([], True)
        assert backend.append_plan_steps(scope, "p1", [{"n": 10 + n} for n in range(8)]) is True
        again = backend.read_plan_steps(scope, "p1", third.cursor)
        assert (numbers(again.steps), again.restarted) == (list(range(10, 18)), True)
        assert backend.read_plan_steps(scope, "other").steps == []

    def test_concurrent_step_appends_are_all_kept_in_order(self, backend: RuntimeBackend, config: MemoryConfig) -> None:
        manager = self.manager(backend, config)

        def append(index: int) -> None:
            for number in range(25):
                manager.append_plan_steps("p1", [{"writer": index, "n": number}])

        _parallel(4, append)
        steps = manager.plan_steps("p1")
        assert len(steps) == 100
        for writer in range(4):
            assert [step["n"] for step in steps if step["writer"] == writer] == list(range(25))

    # -- L3 -----------------------------------------------------------------------------

    def test_tool_results_round_trip_large_and_exact(self, backend: RuntimeBackend, config: MemoryConfig) -> None:
        manager = self.manager(backend, config)
        big = "0123456789abcdef\r\n🐍" * (50 * 1024 * 1024 // 22 + 1)  # 22 UTF-8 bytes a repeat: over 50 MB
        store = ToolResultStore(manager)
        reference = parse_reference(store.externalize("dump", big))
        assert reference is not None
        assert reference.size == len(big.encode("utf-8"))
        page = store.load_page(reference.result_id, 0, len(big) + 10)
        assert page.content == big
        assert page.next_offset is None

    def test_pages_split_by_characters_not_bytes(self, backend: RuntimeBackend, config: MemoryConfig) -> None:
        manager = self.manager(backend, config)
        text = "é🐍x" * 100
        manager.save_tool_result("r1", {"id": "r1", "tool": "t", "created_at": "", "content": text})
        pieces = []
        offset: int | None = 0
        while offset is not None:
            page = manager.load_tool_result_page("r1", offset, 7)
            pieces.append(page.content)
            offset = page.next_offset
        assert "".join(pieces) == text
        assert all(len(piece) == 7 for piece in pieces[:-1])
        assert manager.load_tool_result_page("r1", 10_000, 5).content == ""

    def test_another_scope_cannot_load_a_result(self, backend: RuntimeBackend, config: MemoryConfig) -> None:
        alice = self.manager(backend, config, "alice", "s1")
        bob = self.manager(backend, config, "bob", "s1")
        alice_again = self.manager(backend, config, "alice", "s2")
        alice.save_tool_result("r1", {"secret": "alice's"})
        for other in (bob, alice_again):
            with pytest.raises(RecordNotFoundError) as denied:
                other.load_tool_result("r1")
            with pytest.raises(RecordNotFoundError) as missing:
                other.load_tool_result("nosuchid")
            assert type(denied.value) is type(missing.value)
            with pytest.raises(RecordNotFoundError):
                other.load_tool_result_page("r1", 0, 10)
            assert other.delete_tool_results(["r1"]) == []
            assert other.list_tool_results() == {}
            with pytest.raises(InvalidInputError):
                other.save_tool_result("r1", {"overwrite": True})
        assert alice.load_tool_result("r1") == {"secret": "alice's"}

    def test_tool_result_listing_and_idempotent_delete(self, backend: RuntimeBackend, config: MemoryConfig) -> None:
        manager = self.manager(backend, config)
        for number in range(3):
            manager.save_tool_result(f"r{number}", {"n": number})
        assert sorted(manager.list_tool_results()) == ["r0", "r1", "r2"]
        assert manager.count_tool_results() == 3
        assert all(entry.size > 0 for entry in manager.list_tool_results().values())
        assert manager.delete_tool_results(["r1", "r1", "nope"]) == ["r1"]
        assert manager.delete_tool_results(["r1"]) == []
        assert sorted(manager.list_tool_results()) == ["r0", "r2"]
        assert backend.tool_result_exists("r0")
        assert not backend.tool_result_exists("r1")

    # -- messages -----------------------------------------------------------------------

    def test_messages_round_trip_with_gap_free_numbers(self, backend: RuntimeBackend, config: MemoryConfig) -> None:
        store = SessionMessageStore(config=config, user_id="alice", session_id="s1", backend=backend)
        store.append([{"role": "user", "content": text} for text in _TEXTS.values()])
        records = store.records()
        assert [record.content for record in records] == list(_TEXTS.values())
        assert [record.seq for record in records] == list(range(len(_TEXTS)))
        assert store.compact(2) == len(_TEXTS) - 2
        store.append([{"role": "assistant", "content": "after"}])
        assert [record.seq for record in store.records()] == [len(_TEXTS) - 2, len(_TEXTS) - 1, len(_TEXTS)]
        assert store.compact(0) == 3
        store.append([{"role": "user", "content": "later"}])
        assert [record.seq for record in store.records()] == [len(_TEXTS) + 1]
        assert store.clear() is True

    def test_concurrent_appends_are_ordered_and_gap_free(self, backend: RuntimeBackend) -> None:
        scope = Scope.of("alice", "s1")

        def append(index: int) -> None:
            for number in range(25):
                backend.append_messages(scope, [StoredMessage(role="user", content=f"{index}:{number}")])

        _parallel(4, append)
        records = backend.get_messages(scope)
        assert [record.seq for record in records] == list(range(100))
        for writer in range(4):
            mine = [record.content for record in records if record.content.startswith(f"{writer}:")]
            assert mine == [f"{writer}:{number}" for number in range(25)]

    # -- isolation and listing ------------------------------------------------------------

    def test_scopes_with_tricky_ids_never_see_each_other(self, backend: RuntimeBackend, config: MemoryConfig) -> None:
        pairs = [(user, session) for user in _TRICKY_USERS for session in ("s", "s_1", "1")]
        pairs += [("a_b", "c"), ("a", "b_c")]
        for user, session in pairs:
            manager = self.manager(backend, config, user, session)
            manager.update_state({"owner": [user, session]})
            manager.update_working_memory(f"{user}/{session}")
            manager.save_plan("p", [user, session])
        for user, session in pairs:
            manager = self.manager(backend, config, user, session)
            assert manager.get_state() == {"owner": [user, session]}
            assert manager.get_working_memory() == f"{user}/{session}"
            assert manager.list_plans() == {"p": [user, session]}
        listed = {(info.scope.user_id, info.scope.session_id) for info in backend.list_scopes()}
        assert listed == set(pairs)

    def test_hostile_ids_are_refused_before_storage(self, backend: RuntimeBackend, config: MemoryConfig) -> None:
        for user in ("../x", "", "a/b", "nul\x00", "..", "x" * 10_000):
            with pytest.raises(InvalidInputError):
                self.manager(backend, config, user, "s")
        manager = self.manager(backend, config)
        for bad in ("../r", "a/b", "", "x" * 200):
            with pytest.raises(InvalidInputError):
                manager.load_tool_result(bad)
        assert backend.list_scopes() == []

    # -- lifecycle ----------------------------------------------------------------------

    def fill(self, backend: RuntimeBackend, config: MemoryConfig, user: str, session: str) -> MemoryManager:
        """A scope holding something at every level."""
        manager = self.manager(backend, config, user, session)
        manager.update_state({"owner": user})
        manager.update_working_memory(f"notes of {user}")
        manager.save_plan("p", {"step": 1})
        backend.append_plan_steps(manager.scope_info, "p", [{"n": 1}])
        manager.save_tool_result(f"r-{session}-{len(user)}", {"content": "x" * 100})
        backend.append_messages(manager.scope_info, [StoredMessage(role="user", content="hi")])
        return manager

    def assert_empty(self, backend: RuntimeBackend, scope: Scope) -> None:
        assert backend.get_state(scope) == {}
        assert backend.get_working_memory(scope) == ""
        assert backend.get_plans(scope) == {}
        assert backend.get_plan_steps(scope, "p") == []
        hidden = backend.read_plan_steps(scope, "p")
        assert (hidden.steps, hidden.restarted) == ([], True)
        assert backend.list_tool_results(scope) == {}
        assert backend.count_tool_results(scope) == 0
        assert backend.get_messages(scope) == []

    def test_delete_scope_removes_every_level_and_nothing_else(
        self, backend: RuntimeBackend, config: MemoryConfig
    ) -> None:
        gone = self.fill(backend, config, "bob", "s1")
        kept = [self.fill(backend, config, user, session) for user, session in [("bob", "s2"), ("bob_admin", "s1")]]
        result_id = f"r-s1-{len('bob')}"
        assert backend.delete_scope(gone.scope_info) > 100
        self.assert_empty(backend, gone.scope_info)
        assert not backend.tool_result_exists(result_id)
        with pytest.raises(RecordNotFoundError):
            backend.load_tool_result(gone.scope_info, result_id)
        assert backend.delete_scope(gone.scope_info) == 0
        for manager in kept:
            assert manager.get_state() == {"owner": manager.user_id}
            assert manager.count_tool_results() == 1
        listed = {(info.scope.user_id, info.scope.session_id) for info in backend.list_scopes()}
        assert listed == {("bob", "s2"), ("bob_admin", "s1")}
        gone.update_state({"back": True})  # a deleted scope can be used again, from scratch
        assert gone.get_state() == {"back": True}

    def test_pending_erasure_hides_what_it_covers(self, backend: RuntimeBackend, config: MemoryConfig) -> None:
        for user, session in [("bob", "s1"), ("bob", "s2"), ("bob_admin", "s1")]:
            self.fill(backend, config, user, session)
        whole_user = Erasure("bob")
        backend.begin_erasure(whole_user)
        assert backend.pending_erasures() == [whole_user]
        for session in ("s1", "s2"):
            scope = Scope.of("bob", session)
            self.assert_empty(backend, scope)
            with pytest.raises(RecordNotFoundError):
                backend.load_tool_result(scope, f"r-{session}-3")
        assert {info.scope.user_id for info in backend.list_scopes()} == {"bob_admin"}
        assert backend.get_state(Scope.of("bob_admin", "s1")) == {"owner": "bob_admin"}
        backend.end_erasure(whole_user)
        backend.end_erasure(whole_user)  # ending twice is harmless
        assert backend.pending_erasures() == []
        assert backend.get_state(Scope.of("bob", "s1")) == {"owner": "bob"}  # nothing was deleted yet

        one_session = Erasure("bob", "s2")
        backend.begin_erasure(one_session)
        self.assert_empty(backend, Scope.of("bob", "s2"))
        assert backend.get_state(Scope.of("bob", "s1")) == {"owner": "bob"}
        backend.end_erasure(one_session)

    def test_erasure_of_hostile_ids_is_refused(self, backend: RuntimeBackend) -> None:
        for user in ("../x", "", "a/b", "nul\x00"):
            with pytest.raises(InvalidInputError):
                Erasure(user)
        assert backend.pending_erasures() == []

    # -- async --------------------------------------------------------------------------

    def test_async_twins_see_what_sync_wrote(self, backend: RuntimeBackend, config: MemoryConfig) -> None:
        manager = self.manager(backend, config)

        async def scenario() -> dict[str, Any]:
            await manager.aupdate_state({"a": 1})
            await manager.aupdate_working_memory("async text")
            await manager.asave_plan("p", [1])
            await manager.asave_tool_result("r1", {"id": "r1", "tool": "t", "created_at": "", "content": "abc"})
            page = await manager.aload_tool_result_page("r1", 1, 5)
            return {
                "state": await manager.aget_state(),
                "working": await manager.aget_working_memory(),
                "plans": await manager.alist_plans(),
                "page": page.content,
            }

        seen = asyncio.run(scenario())
        assert seen == {"state": {"a": 1}, "working": "async text", "plans": {"p": [1]}, "page": "bc"}
        assert manager.get_state() == {"a": 1}
