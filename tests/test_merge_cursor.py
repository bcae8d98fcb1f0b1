"""The merge cursor: which messages of a framework's view are not in L1 yet, whatever the view did."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from local_ai_memory import MemoryConfig
from local_ai_memory._runtime.compressor import WorkingMemoryCompressor
from local_ai_memory._runtime.merge_cursor import TAIL_LENGTH, MergeCursor, MergePlan, message_key, plan_merge
from local_ai_memory._runtime.messages import Message, to_message
from local_ai_memory._runtime.scope import MemoryManager
from local_ai_memory._shared.errors import InvalidInputError, UnsupportedFormatError
from local_ai_memory._shared.naming import DirectoryGuard
from local_ai_memory.backends import FileRuntimeBackend


def msg(content: str, role: str = "user", **extra: Any) -> dict[str, Any]:
    return {"role": role, "content": content, **extra}


def turns(start: int, stop: int) -> list[dict[str, Any]]:
    return [msg(f"message {i}", "user" if i % 2 == 0 else "assistant") for i in range(start, stop)]


def contents(plan: MergePlan) -> list[str]:
    return [m.content for m in plan.messages]


def merge(conversation: list[Any], cursor: MergeCursor | None) -> tuple[list[str], MergeCursor]:
    """One successful merge, with the cursor stored as JSON and read back as an integration would."""
    plan = plan_merge(conversation, cursor)
    stored = json.dumps(plan.cursor.to_json())
    return contents(plan), MergeCursor.from_json(json.loads(stored))


@dataclass
class LangChainLike:
    """A framework message with ``.type`` and ``.id``, as LangChain's are."""

    type: str
    content: str
    id: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)


# --------------------------------------------------------------------------- basics


def test_empty_view_and_empty_cursor() -> None:
    plan = plan_merge([], None)
    assert plan.messages == []
    assert plan.start == 0
    assert plan.cursor == MergeCursor()
    cursor = plan_merge(turns(0, 3)).cursor
    again = plan_merge([], cursor)
    assert again.messages == []
    assert again.cursor == cursor


def test_first_view_is_all_new_and_the_plan_is_normalized() -> None:
    view = [msg("hi"), LangChainLike("ai", "hello", id="a1"), Message("tool", "42", name="calc")]
    plan = plan_merge(view)
    assert plan.start == 0
    assert plan.messages == [to_message(m) for m in view]
    assert plan.cursor.position == 3
    assert len(plan.cursor.tail) == 3


def test_grown_view_yields_only_the_new_messages_and_an_unchanged_view_nothing() -> None:
    merged, cursor = merge(turns(0, 4), None)
    assert merged == [f"message {i}" for i in range(4)]
    new, cursor = merge(turns(0, 7), cursor)
    assert new == ["message 4", "message 5", "message 6"]
    again, cursor = merge(turns(0, 7), cursor)
    assert again == []
    new, _ = merge(turns(0, 8), cursor)
    assert new == ["message 7"]


def test_failed_merge_keeps_the_old_cursor_so_the_messages_come_again() -> None:
    _, cursor = merge(turns(0, 3), None)
    first = plan_merge(turns(0, 5), cursor)  # merge fails: the caller does not store first.cursor
    second = plan_merge(turns(0, 6), cursor)
    assert contents(first) == ["message 3", "message 4"]
    assert contents(second) == ["message 3", "message 4", "message 5"]


# --------------------------------------------------------------------------- trimmed, compacted, windowed


def test_trimmed_front_without_ids() -> None:
    _, cursor = merge(turns(0, 10), None)
    new, cursor = merge(turns(6, 13), cursor)  # a session log compacted to its last messages, then grown
    assert new == ["message 10", "message 11", "message 12"]
    nothing, cursor = merge(turns(9, 13), cursor)  # trimmed again, nothing new
    assert nothing == []
    new, _ = merge(turns(12, 14), cursor)  # only the last merged message is left
    assert new == ["message 13"]


def test_trimmed_past_everything_merged_gives_the_whole_view() -> None:
    _, cursor = merge(turns(0, 5), None)
    new, _ = merge(turns(8, 11), cursor)
    assert new == ["message 8", "message 9", "message 10"]


def test_trim_longer_than_the_tail_the_cursor_remembers() -> None:
    total = TAIL_LENGTH + 168
    _, cursor = merge(turns(0, total), None)
    assert len(cursor.tail) == TAIL_LENGTH
    new, _ = merge(turns(total - TAIL_LENGTH - 68, total + 3), cursor)  # 68 kept messages are older than the tail
    assert new == [f"message {total}", f"message {total + 1}", f"message {total + 2}"]


@pytest.mark.parametrize("with_ids", [False, True])
def test_compacted_front_replaced_by_a_summary_message(with_ids: bool) -> None:
    def view(start: int, stop: int, summary: str | None = None) -> list[Any]:
        out: list[Any] = [LangChainLike("human", summary, id="summary-1" if with_ids else None)] if summary else []
        for i in range(start, stop):
            out.append(LangChainLike("human" if i % 2 == 0 else "ai", f"message {i}", id=f"m{i}" if with_ids else None))
        return out

    _, cursor = merge(view(0, 10), None)
    new, cursor = merge(view(7, 12, "Summary of the conversation so far: ..."), cursor)
    assert new == ["message 10", "message 11"]
    new, cursor = merge(view(7, 13, "Summary of the conversation so far: ..."), cursor)
    assert new == ["message 12"]  # the summary message is not merged later either
    new, _ = merge(view(12, 14, "A newer summary"), cursor)  # compacted again
    assert new == ["message 13"]


def test_windows_of_merged_messages_are_not_merged_again() -> None:
    """LlamaIndex: the end of a run merges the queue, later flushes hand over its front."""
    window = turns(0, 12)
    first, cursor = merge(window[0:5], None)  # a flush
    run_end, cursor = merge(window[5:10], cursor)  # the queue at the end of the run
    flush, cursor = merge(window[5:8], cursor)  # those messages overflow later
    next_end, _ = merge(window[8:12], cursor)
    assert first == [f"message {i}" for i in range(5)]
    assert run_end == [f"message {i}" for i in range(5, 10)]
    assert flush == []
    assert merge(window[1:4], cursor)[0] == []  # a flush of messages from before the last run
    assert next_end == ["message 10", "message 11"]


def test_a_new_view_that_happens_to_repeat_a_merged_message_is_all_new() -> None:
    _, cursor = merge([*turns(0, 6), msg("thanks"), msg("you are welcome", "assistant")], None)
    # Everything merged was trimmed; the new exchange contains "thanks" again, not at the end.
    new, _ = merge([msg("hi"), msg("hello", "assistant"), msg("thanks")], cursor)
    assert new == ["hi", "hello", "thanks"]


def test_a_window_older_than_the_current_view_is_still_recognized() -> None:
    _, cursor = merge(turns(0, 10), None)
    new, cursor = merge(turns(5, 13), cursor)
    assert new == ["message 10", "message 11", "message 12"]
    assert merge(turns(2, 5), cursor)[0] == []  # trimmed earlier, remembered by the cursor


# --------------------------------------------------------------------------- identical messages and ids


def test_identical_repeated_messages_in_a_growing_view() -> None:
    ok = [msg("ok"), msg("ok", "assistant")]
    merged, cursor = merge(ok, None)
    assert len(merged) == 2
    new, cursor = merge(ok * 2, cursor)
    assert new == ["ok", "ok"]  # the same text again is a new message, not the merged one
    new, cursor = merge(ok * 3 + [msg("ok")], cursor)
    assert new == ["ok", "ok", "ok"]
    assert merge(ok * 3 + [msg("ok")], cursor)[0] == []


def test_identical_repeated_messages_with_a_trimmed_front() -> None:
    a, b = msg("ok"), msg("ok", "assistant")
    _, cursor = merge([msg("start"), a, b], None)
    new, _ = merge([a, b, a, b], cursor)  # "start" was trimmed, one new exchange came
    assert new == ["ok", "ok"]


def test_identical_messages_the_longest_agreement_wins_over_a_lone_repeat() -> None:
    ok = msg("ok")
    _, cursor = merge([msg("x"), ok, msg("y"), ok], None)
    # "x" trimmed, one message added. The lone first "ok" could also be the last merged one;
    # the three messages agreeing with the cursor's tail decide.
    new, _ = merge([ok, msg("y"), ok, msg("next")], cursor)
    assert new == ["next"]


def test_ids_tell_identical_messages_apart() -> None:
    view = [LangChainLike("human", "ok", id="1"), LangChainLike("ai", "ok", id="2")]
    _, cursor = merge(view, None)
    # Trimmed and grown by an identical exchange: only ids can tell, and they do.
    new, _ = merge([*view[1:], LangChainLike("human", "ok", id="3"), LangChainLike("ai", "ok", id="4")], cursor)
    assert new == ["ok", "ok"]
    assert message_key(msg("ok", id="3")) == message_key(LangChainLike("ai", "edited", id="3"))  # the id decides


def test_message_key_uses_the_id_or_the_normalized_content() -> None:
    assert message_key(msg("a")) == message_key(Message("user", "a")) == message_key(LangChainLike("human", "a"))
    assert message_key(msg("a")) != message_key(msg("a", "assistant"))
    assert message_key(msg("a")) != message_key(msg("a", tool_call_id="c1"))
    assert message_key(msg("a", id="x")) != message_key(msg("a"))
    assert message_key(msg("a", id="x")).startswith("i")
    assert message_key(msg("a")).startswith("f")
    assert len(message_key(msg("a" * 100_000))) == 17


# --------------------------------------------------------------------------- the stored value


def test_cursor_round_trips_as_json_and_stays_small() -> None:
    cursor = plan_merge([msg("x" * 10_000 + str(i)) for i in range(100)]).cursor
    data = cursor.to_json()
    assert set(data) == {"format_version", "tail", "position"}
    assert MergeCursor.from_json(json.dumps(data)) == cursor
    assert MergeCursor.from_json(data) == cursor
    assert len(json.dumps(data)) < 24 * TAIL_LENGTH  # a short hash a message, whatever its size
    assert MergeCursor.from_json(None) == MergeCursor()


@pytest.mark.parametrize(
    "bad",
    ["not json", [1, 2], 3, {"tail": "abc", "position": 1}, {"tail": [], "position": -1}, {"tail": [1]}],
)
def test_bad_cursor_values_raise_the_library_error(bad: object) -> None:
    with pytest.raises(InvalidInputError):
        MergeCursor.from_json(bad)


def test_newer_cursor_format_is_refused() -> None:
    with pytest.raises(UnsupportedFormatError):
        MergeCursor.from_json({"format_version": 2, "tail": [], "position": 0})


def test_a_bare_message_instead_of_a_list_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="single dict"):
        plan_merge(msg("hi"))
    with pytest.raises(InvalidInputError, match="needs a 'role'"):
        plan_merge([{"content": "no role"}])


# --------------------------------------------------------------------------- simulated conversations


@dataclass
class Simulation:
    """A framework's view under random growth, trims and compactions; each message knows its serial."""

    with_ids: bool
    alphabet: int  # distinct contents; small means many identical messages
    view: list[dict[str, Any]] = field(default_factory=list)
    merged: dict[int, int] = field(default_factory=dict)
    cursor: MergeCursor = field(default_factory=MergeCursor)
    serial: int = 0

    def add(self, count: int, pick: int) -> None:
        for _ in range(count):
            content = f"text {(pick + self.serial) % self.alphabet}" if self.alphabet else f"text {self.serial}"
            item = msg(content, "user" if self.serial % 2 == 0 else "assistant", serial=self.serial)
            if self.with_ids:
                item["id"] = f"id-{self.serial}"
            self.view.append(item)
            self.serial += 1

    def trim(self, count: int) -> None:
        del self.view[:count]

    def compact(self, count: int) -> None:
        summary = msg(f"summary {self.serial}", "system", serial=-1)
        if self.with_ids:
            summary["id"] = f"summary-{self.serial}"
        self.serial += 1
        self.view[:count] = [summary]

    def merge(self) -> None:
        plan = plan_merge(self.view, self.cursor)
        for item in self.view[plan.start :]:
            if item["serial"] >= 0:
                self.merged[item["serial"]] = self.merged.get(item["serial"], 0) + 1
        self.cursor = MergeCursor.from_json(json.loads(json.dumps(plan.cursor.to_json())))
        assert all(times == 1 for times in self.merged.values()), "a message was merged twice"
        present = [item["serial"] for item in self.view if item["serial"] >= 0]
        assert all(serial in self.merged for serial in present), "a message was skipped"


operations = st.lists(
    st.tuples(st.sampled_from(["add", "trim", "compact", "merge"]), st.integers(0, 40), st.integers(0, 5)),
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(ops=operations, with_ids=st.booleans())
def test_any_history_with_unique_keys_merges_each_message_exactly_once(
    ops: list[tuple[str, int, int]], with_ids: bool
) -> None:
    # With ids, contents repeat freely; without, every message is distinct.
    sim = Simulation(with_ids=with_ids, alphabet=3 if with_ids else 0)
    for op, count, pick in ops:
        if op == "add":
            sim.add(count, pick)
        elif op == "trim":
            sim.trim(count)
        elif op == "compact":
            sim.compact(count)
        else:
            sim.merge()
    sim.merge()


@settings(max_examples=300, deadline=None)
@given(ops=st.lists(st.tuples(st.booleans(), st.integers(0, 40), st.integers(0, 5)), max_size=30))
def test_growing_history_of_identical_messages_merges_each_exactly_once(ops: list[tuple[bool, int, int]]) -> None:
    sim = Simulation(with_ids=False, alphabet=2)
    for add, count, pick in ops:
        if add:
            sim.add(count, pick)
        else:
            sim.merge()
    sim.merge()


# --------------------------------------------------------------------------- as an integration calls it


class RecordingLLM:
    """A fake model that answers a fixed summary and keeps the prompts it was sent."""

    def __init__(self) -> None:
        self.prompts: list[str] = []

    def complete(self, prompt: str) -> str:
        self.prompts.append(prompt)
        return "# Current Goal\nKeep going\n\n# Completed\n* a step\n"

    async def acomplete(self, prompt: str) -> str:
        return self.complete(prompt)


def test_with_the_compressor_and_the_cursor_in_l0(tmp_path: Path) -> None:
    manager = MemoryManager(FileRuntimeBackend.from_config(MemoryConfig(), DirectoryGuard(tmp_path))).scoped(
        "alice", "s1"
    )
    llm = RecordingLLM()
    compressor = WorkingMemoryCompressor(manager, llm)

    def after_run(view: list[dict[str, Any]]) -> None:
        plan = plan_merge(view, MergeCursor.from_json(manager.get_state().get("merge_cursor")))
        if not plan.messages or compressor.update_summary(plan.messages).ok:
            manager.update_state({"merge_cursor": plan.cursor.to_json()})

    after_run(turns(0, 6))
    after_run(turns(3, 9))  # the framework trimmed its front and three messages came
    after_run(turns(3, 9))  # nothing new: no model call
    assert len(llm.prompts) == 2
    second = llm.prompts[1].split("New messages:", 1)[1]
    assert [f"message {i}" in second for i in range(9)] == [False] * 6 + [True] * 3
    assert (
        MemoryManager(FileRuntimeBackend.from_config(MemoryConfig(), DirectoryGuard(tmp_path)))
        .scoped("alice", "s1")
        .get_state()["merge_cursor"]["position"]
        == 6
    )
