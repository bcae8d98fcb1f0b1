"""``LocalMemoryStore``: LangGraph's ``BaseStore`` over the knowledge notes, on real files.

Checked here: the operations sync and async, the note each item becomes (readable, value kept
exactly, hand edits honoured, nothing lost), namespaces (exact isolation of prefix-like user
ids, categories), ``filter`` against LangGraph's own ``InMemoryStore`` on the same items,
search quality against the core's knowledge search on the sample corpus, and the store where
users use it: a LangGraph node, ``create_agent`` tools and langmem's memory tools.
"""

from __future__ import annotations

import asyncio
import doctest
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain.agents import create_agent
from langchain.tools import ToolRuntime, tool
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_local_ai_memory import LocalMemoryStore
from langchain_local_ai_memory._store_items import key_to_name, name_to_key, parse_note, render_note
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore, GetOp, InvalidNamespaceError, PutOp, SearchOp
from langgraph.store.memory import InMemoryStore
from lc_fakes import ScriptedChatModel
from typing_extensions import TypedDict

from local_ai_memory import InvalidInputError, Memory, MemoryConfig
from local_ai_memory.samples import build_corpus, write_corpus

EXACT_VALUE: dict[str, Any] = {
    "content": "Bob drinks green tea, no sugar.\n\nLine two — ünïcödé, emoji 🍵, CRLF\r\nend  ",
    "int": 12345678901234567890,
    "negative": -3,
    "float": 0.1,
    "tiny": 5e-324,
    "zero": -0.0,
    "flag": False,
    "nothing": None,
    "nested": {"list": [1, "two", [3.5, {"deep": "é"}]], "empty": {}, "none": []},
    "tags": ["a", "b"],
    "markdown": "# not a heading of the note\n```json\n{}\n```\n<!-- langgraph-store-item {} -->",
}


@pytest.fixture
def memory(config: MemoryConfig) -> Memory:
    return Memory(config.replace(categories=("knowledge", "work")))


@pytest.fixture
def store(memory: Memory) -> LocalMemoryStore:
    return LocalMemoryStore(memory)


def _note_file(memory: Memory, name: str, category: str = "knowledge") -> Path:
    assert memory.root is not None
    return memory.root / "memory_data" / category / name


# -- items and notes ---------------------------------------------------------------------------------
def test_put_get_round_trip_keeps_the_value_exactly_across_processes(store: LocalMemoryStore, memory: Memory) -> None:
    store.put(("bob",), "tea", EXACT_VALUE)
    item = store.get(("bob",), "tea")
    assert item is not None
    assert item.value == EXACT_VALUE
    assert list(item.value) == list(EXACT_VALUE)  # key order too
    assert repr(item.value["zero"]) == "-0.0"
    assert item.value["int"] == 12345678901234567890
    assert item.namespace == ("bob",)
    assert item.key == "tea"
    # A fresh Memory on the same folder (what another process sees) reads the same item.
    again = LocalMemoryStore(Memory(memory.config)).get(("bob",), "tea")
    assert again == item


def test_the_note_is_readable_markdown_with_the_value_in_a_json_block(store: LocalMemoryStore, memory: Memory) -> None:
    value = {"content": "Bob drinks green tea.", "confidence": 0.9, "tags": ["drinks"]}
    store.put(("bob",), "tea-preference", value)
    text = _note_file(memory, "bob_tea-preference.md").read_text(encoding="utf-8")
    assert text.startswith("# tea-preference\n\nBob drinks green tea.\n\n```json\n")
    block = json.loads(text.split("```json\n")[1].split("\n```")[0])
    assert block == {"content": "↑ above", "confidence": 0.9, "tags": ["drinks"]}
    assert text.count("Bob drinks green tea") == 1  # the words are written (and ranked) once
    assert memory.knowledge.read_note("bob", "tea-preference") == text


def test_timestamps_created_kept_updated_advances(store: LocalMemoryStore, memory: Memory) -> None:
    store.put(("bob",), "k", {"v": 1})
    first = store.get(("bob",), "k")
    time.sleep(0.01)
    store.put(("bob",), "k", {"v": 2})
    second = LocalMemoryStore(Memory(memory.config)).get(("bob",), "k")
    assert first is not None
    assert second is not None
    assert second.value == {"v": 2}
    assert second.created_at == first.created_at
    assert second.updated_at > first.updated_at
    assert second.created_at.tzinfo is not None


def test_delete_removes_the_note_and_its_search_entry(store: LocalMemoryStore, memory: Memory) -> None:
    store.put(("bob",), "k", {"content": "quokka sightings"})
    assert [i.key for i in store.search(("bob",), query="quokka")] == ["k"]
    store.delete(("bob",), "k")
    assert store.get(("bob",), "k") is None
    assert store.search(("bob",), query="quokka") == []
    assert not _note_file(memory, "bob_k.md").exists()
    store.delete(("bob",), "k")  # deleting again is not an error
    store.delete(("nobody", "x", "y"), "k")  # nor deleting where nothing can be


@pytest.mark.parametrize(
    "key",
    ["plain", "with space", "a/b", "back\\slash", "100%", "x.md", "trailing.", "trailing ", "ünï 🍵", "tab\tnew\nline"],
)
def test_any_key_maps_to_one_note_and_back(store: LocalMemoryStore, key: str) -> None:
    store.put(("bob",), key, {"key": key})
    store.put(("bob",), "x", {"key": "x"})  # a neighbour that a careless encoding would collide with
    item = store.get(("bob",), key)
    assert item is not None
    assert item.key == key
    assert item.value == {"key": key}
    assert {i.key for i in store.search(("bob",), limit=50)} == {key, "x"}


def test_bad_values_and_keys_raise_and_write_nothing(store: LocalMemoryStore, memory: Memory) -> None:
    bad_values: list[Any] = [
        {1: "int key"},
        {"nan": float("nan")},
        {"inf": [float("inf")]},
        {"set": {1, 2}},
        {"bytes": b"x"},
        "not a mapping",
    ]
    for value in bad_values:
        with pytest.raises(InvalidInputError):
            store.put(("bob",), "k", value)
    with pytest.raises(InvalidInputError):
        store.put(("bob",), "", {"v": 1})
    with pytest.raises(InvalidInputError):
        store.put(("bob",), "k" * 300, {"v": 1})
    assert memory.knowledge.notes("bob") == []


def test_tuples_come_back_as_lists(store: LocalMemoryStore) -> None:
    store.put(("bob",), "k", {"pair": (1, 2)})
    item = store.get(("bob",), "k")
    assert item is not None
    assert item.value == {"pair": [1, 2]}


def test_ttl_expires_refreshes_on_read_and_is_swept(
    store: LocalMemoryStore, memory: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    from datetime import datetime as real_datetime
    from datetime import timedelta, timezone

    import langchain_local_ai_memory._store as store_module

    assert store.supports_ttl is True
    store.put(("bob",), "short", {"v": 1}, ttl=1)
    store.put(("bob",), "read", {"v": 2}, ttl=1)
    store.put(("bob",), "forever", {"v": 3})
    store.put(("bob",), "off", {"v": 4}, ttl=1)
    assert "expires_at" in _note_file(memory, "bob_short.md").read_text()
    start = real_datetime.now(timezone.utc)

    class Clock(real_datetime):
        offset = timedelta(0)

        @classmethod
        def now(cls, tz: object = None) -> real_datetime:  # type: ignore[override]
            return start + cls.offset

    monkeypatch.setattr(store_module, "datetime", Clock)
    Clock.offset = timedelta(seconds=45)
    assert store.get(("bob",), "read") is not None  # a read moves its expiry to 45 s + 1 min
    assert store.get(("bob",), "off", refresh_ttl=False) is not None  # a read that does not refresh
    Clock.offset = timedelta(seconds=75)
    assert store.get(("bob",), "short") is None  # expired: reads as absent
    assert store.get(("bob",), "off") is None
    assert store.get(("bob",), "read") is not None
    assert sorted(item.key for item in store.search(("bob",))) == ["forever", "read"]  # expired ones are not found
    import langchain_local_ai_memory._store_items as items_module

    monkeypatch.setattr(items_module, "datetime", Clock)
    assert store.sweep_ttl() == 2  # "short" and "off" are deleted
    assert not _note_file(memory, "bob_short.md").exists()
    assert store.get(("bob",), "forever") is not None
    with pytest.raises(InvalidInputError):
        store.put(("bob",), "k", {"v": 1}, ttl=-5)


def test_notes_written_otherwise_are_items_and_hand_edits_are_honoured(store: LocalMemoryStore, memory: Memory) -> None:
    memory.knowledge.write_note("bob", "deploy", "# Deploy\n\nWe deploy with the blue-green script.")
    item = store.get(("bob",), "deploy")
    assert item is not None
    assert item.value == {"text": "# Deploy\n\nWe deploy with the blue-green script."}
    assert [i.key for i in store.search(("bob",), query="blue-green deploy")] == ["deploy"]

    store.put(("bob",), "tea", {"content": "green tea", "cups": 2})
    path = _note_file(memory, "bob_tea.md")
    path.write_text(
        path.read_text(encoding="utf-8").replace("green tea", "black tea").replace('"cups": 2', '"cups": 3')
    )
    edited = store.get(("bob",), "tea")
    assert edited is not None
    assert edited.value == {"content": "black tea", "cups": 3}

    broken = path.read_text(encoding="utf-8").replace('"cups": 3', '"cups": ')
    path.write_text(broken, encoding="utf-8")
    kept = store.get(("bob",), "tea")
    assert kept is not None
    assert kept.value == {"text": broken}


_WRITER = """
import sys
from local_ai_memory import Memory, MemoryConfig
from langchain_local_ai_memory import LocalMemoryStore

root, writer = sys.argv[1], sys.argv[2]
store = LocalMemoryStore(Memory(MemoryConfig(runtime_data_dir=root, fsync=False)))
for n in range(15):
    store.put(("bob",), f"{writer}-{n}", {"content": f"note {n} of writer {writer}", "n": n})
    store.search(("bob",), query="writer", limit=3)
"""


def test_two_processes_write_one_users_items_at_once(config: MemoryConfig) -> None:
    writers = [
        subprocess.Popen([sys.executable, "-c", _WRITER, str(config.runtime_data_dir), name]) for name in ("a", "b")
    ]
    assert [w.wait(timeout=120) for w in writers] == [0, 0]
    store = LocalMemoryStore(Memory(config))
    items = store.search(("bob",), limit=100)
    assert sorted(i.key for i in items) == sorted(f"{w}-{n}" for w in "ab" for n in range(15))
    assert all(i.value == {"content": f"note {i.value['n']} of writer {i.key[0]}", "n": i.value["n"]} for i in items)
    assert len(store.search(("bob",), query="writer b", limit=100)) == 30


# -- namespaces ------------------------------------------------------------------------------------
PREFIX_LIKE = ["bob", "bob_admin", "b_ob", "b", "bob%5Fadmin", "bo", "Bob"]


def test_prefix_like_user_ids_never_see_each_other(store: LocalMemoryStore) -> None:
    users = [u for u in PREFIX_LIKE if u != "Bob"]  # "Bob" would share files with "bob" on macOS
    for user in users:
        store.put((user,), "secret", {"content": f"the launch code of {user} is swordfish", "owner": user})
        store.put((user, "work"), "task", {"content": "ship the swordfish release", "owner": user})
    for user in users:
        found = store.search((user,), query="swordfish launch code", limit=50)
        assert {(i.namespace, i.value["owner"]) for i in found} == {((user,), user), ((user, "work"), user)}
        listed = store.search((user,), limit=50)
        assert {i.value["owner"] for i in listed} == {user}
        assert store.get((user,), "secret").value["owner"] == user  # type: ignore[union-attr]
    assert sorted(store.list_namespaces()) == sorted([(u,) for u in users] + [(u, "work") for u in users])
    everywhere = store.search((), query="swordfish", limit=100)
    assert len(everywhere) == 2 * len(users)


def test_namespace_mapping_and_its_limits(store: LocalMemoryStore, memory: Memory) -> None:
    store.put(("bob",), "a", {"v": 1})
    store.put(("bob", "work"), "b", {"v": 2})
    assert _note_file(memory, "bob_a.md").exists()
    assert _note_file(memory, "bob_b.md", "work").exists()
    for namespace in [("bob", "knowledge"), ("bob", "unconfigured"), ("bob", "work", "deeper"), ("a/b",)]:
        with pytest.raises(InvalidInputError):
            store.put(namespace, "k", {"v": 1})
        assert store.get(namespace, "a") is None  # reading where nothing can be finds nothing
        assert store.search(namespace) == []
    with pytest.raises(InvalidNamespaceError):  # LangGraph's own rules still apply
        store.put(("bob.admin",), "k", {"v": 1})
    assert [i.key for i in store.search(("bob", "work"))] == ["b"]
    assert {i.key for i in store.search(("bob",))} == {"a", "b"}


def test_list_namespaces_conditions_depth_and_paging(store: LocalMemoryStore) -> None:
    reference = InMemoryStore()
    for target in (store, reference):
        for user in ("alice", "bob", "carol"):
            target.put((user,), "k", {"v": 1})
        target.put(("bob", "work"), "k", {"v": 1})
    for kwargs in [
        {},
        {"prefix": ("bob",)},
        {"suffix": ("work",)},
        {"prefix": ("*", "work")},
        {"max_depth": 1},
        {"limit": 2, "offset": 1},
    ]:
        assert store.list_namespaces(**kwargs) == reference.list_namespaces(**kwargs), kwargs


# -- search ----------------------------------------------------------------------------------------
FILTER_ITEMS: dict[str, dict[str, Any]] = {
    "a": {"kind": "note", "score": 1, "tags": ["x", "y"], "meta": {"lang": "en", "level": 2}, "done": True},
    "b": {"kind": "note", "score": 2.5, "tags": ["x"], "meta": {"lang": "fr", "level": 3}, "done": False},
    "c": {"kind": "fact", "score": 4, "tags": ["y", "x"], "meta": {"lang": "en", "level": 5}, "done": True},
    "d": {"kind": "fact", "score": -1, "tags": [], "meta": {"lang": "de", "level": 1}, "done": False},
}
FILTERS: list[dict[str, Any]] = [
    {"kind": "note"},
    {"kind": "nothing"},
    {"done": True},
    {"tags": ["x", "y"]},
    {"tags": []},
    {"meta": {"lang": "en"}},
    {"meta": {"lang": "en", "level": 5}},
    {"kind": {"$eq": "fact"}},
    {"kind": {"$ne": "fact"}},
    {"score": {"$gt": 1}},
    {"score": {"$gte": 1}},
    {"score": {"$lt": 2.5}},
    {"score": {"$lte": 2.5}},
    {"score": {"$gt": 0, "$lt": 4}},
    {"score": {"$gte": 1}, "kind": "note"},
    {"meta": {"level": {"$gt": 2}}},
    {"missing": None},
    {"missing": {"$ne": 1}},
]


@pytest.mark.parametrize("search_filter", FILTERS, ids=[json.dumps(f) for f in FILTERS])
def test_filter_matches_what_langgraphs_in_memory_store_returns(
    store: LocalMemoryStore, search_filter: dict[str, Any]
) -> None:
    reference = InMemoryStore()
    for key, value in FILTER_ITEMS.items():
        store.put(("bob",), key, value)
        reference.put(("bob",), key, value)
    ours = store.search(("bob",), filter=search_filter, limit=100)
    theirs = reference.search(("bob",), filter=search_filter, limit=100)
    assert sorted(i.key for i in ours) == sorted(i.key for i in theirs)
    assert all(i.value == FILTER_ITEMS[i.key] for i in ours)


def test_numeric_filters_skip_items_without_a_number_and_bad_filters_raise(store: LocalMemoryStore) -> None:
    store.put(("bob",), "n", {"score": 3})
    store.put(("bob",), "s", {"score": "high"})
    store.put(("bob",), "none", {"other": 1})
    assert [i.key for i in store.search(("bob",), filter={"score": {"$gt": 1}})] == ["n"]
    for bad in [{"score": {"$regex": "h"}}, {"score": {"$gt": "high"}}, {"score": {"$gt": None}}]:
        with pytest.raises(InvalidInputError):
            store.search(("bob",), filter=bad)
    with pytest.raises(InvalidInputError):
        store.search(("bob",), limit=-1)


def test_listing_is_newest_first_and_pages_cover_every_item_once(store: LocalMemoryStore) -> None:
    for n in range(7):
        store.put(("bob",), f"k{n}", {"n": n})
        time.sleep(0.002)
    store.put(("bob",), "k2", {"n": 2, "touched": True})
    listed = store.search(("bob",), limit=100)
    assert [i.key for i in listed] == ["k2", "k6", "k5", "k4", "k3", "k1", "k0"]
    assert all(i.score is None for i in listed)
    pages = [store.search(("bob",), limit=3, offset=offset) for offset in (0, 3, 6)]
    assert [i.key for page in pages for i in page] == [i.key for i in listed]
    filtered = store.search(("bob",), filter={"n": {"$gte": 3}}, limit=2, offset=1)
    assert [i.key for i in filtered] == ["k5", "k4"]


def test_query_search_ranks_like_the_knowledge_search_on_the_same_notes(
    store: LocalMemoryStore, memory: Memory
) -> None:
    corpus = build_corpus()
    for note in corpus.notes:
        store.put(("alice",), note.stem, {"text": note.text, "module": note.module})
    for query in corpus.queries[:40]:
        ours = store.search(("alice",), query=query.text, limit=5)
        core = memory.knowledge.search(query.text, "alice", k=5)
        assert [i.key for i in ours] == [c.filename.removeprefix("alice_").removesuffix(".md") for c in core]
        assert [i.score for i in ours] == [c.score for c in core]
        assert ours == sorted(ours, key=lambda i: -(i.score or 0.0))


def test_query_search_quality_matches_plain_notes_on_the_sample_corpus(config: MemoryConfig) -> None:
    """Items hold each note's text as a value; their notes rank as well as the original notes."""
    corpus = build_corpus()
    store = LocalMemoryStore(Memory.in_memory(config))
    for note in corpus.notes:
        store.put(("alice",), note.module, {"text": note.text})
    plain = Memory.in_memory(config)
    write_corpus(plain.knowledge.store, "alice", corpus=corpus)

    def hits_at_5(ranked: list[list[str]]) -> int:
        return sum(query.module in found[:5] for query, found in zip(corpus.queries, ranked, strict=True))

    ours = [[i.key for i in store.search(("alice",), query=q.text, limit=5)] for q in corpus.queries]
    core = [
        [c.filename.removeprefix("alice_").removesuffix(".md") for c in plain.knowledge.search(q.text, "alice", k=5)]
        for q in corpus.queries
    ]
    assert len(corpus.queries) > 100
    # An item's note differs from the plain note (its heading is the key, the JSON block adds a few
    # words), so the lead field Stage 1 weighs differs too: allow one query in a hundred either way.
    assert hits_at_5(ours) >= hits_at_5(core) - len(corpus.queries) // 100
    same_top = sum(a[:1] == b[:1] for a, b in zip(ours, core, strict=True))
    assert same_top >= 0.95 * len(corpus.queries)


def test_query_search_with_filter_and_paging(store: LocalMemoryStore) -> None:
    for n in range(6):
        store.put(("bob",), f"tea{n}", {"content": "green tea " * (n + 1) + "and biscuits", "n": n})
    store.put(("bob",), "coffee", {"content": "black coffee", "n": 9})
    ranked = store.search(("bob",), query="green tea", limit=10)
    assert len(ranked) == 6
    assert all(i.key.startswith("tea") for i in ranked)
    assert all(i.score is not None for i in ranked)
    even = store.search(("bob",), query="green tea", filter={"n": {"$lte": 4}})
    assert [i.key for i in even] == [i.key for i in ranked if i.value["n"] <= 4]
    page = store.search(("bob",), query="green tea", limit=2, offset=2)
    assert [i.key for i in page] == [i.key for i in ranked[2:4]]


def test_hybrid_mode_fuses_embeddings_into_the_ranking(config: MemoryConfig) -> None:
    class WordEmbedder:
        """A tiny real embedder: one dimension per word of a fixed vocabulary."""

        def embed(self, texts: Sequence[str]) -> list[list[float]]:
            words = ("tea", "coffee", "drink", "code", "compiler")
            return [[float(text.lower().count(w)) + 0.01 for w in words] for text in texts]

        async def aembed(self, texts: Sequence[str]) -> list[list[float]]:
            return self.embed(texts)

    memory = Memory(config.replace(search_mode="hybrid"), embedder=WordEmbedder())
    store = LocalMemoryStore(memory)
    store.put(("bob",), "tea", {"content": "Bob likes tea, a warm drink"})
    store.put(("bob",), "code", {"content": "Bob writes a compiler"})
    found = store.search(("bob",), query="tea drink", limit=2)
    assert next(i.key for i in found) == "tea"
    assert found[0].score is not None
    assert found[0].score > 0


# -- async -------------------------------------------------------------------------------------------
def test_async_twins(store: LocalMemoryStore, memory: Memory) -> None:
    async def run() -> None:
        await store.aput(("bob",), "tea", {"content": "green tea"})
        await store.aput(("bob", "work"), "task", {"content": "review the tea plugin"})
        item = await store.aget(("bob",), "tea")
        assert item is not None
        assert item.value == {"content": "green tea"}
        found = await store.asearch(("bob",), query="tea")
        assert {i.key for i in found} == {"tea", "task"}
        assert await store.alist_namespaces() == [("bob",), ("bob", "work")]
        both = await asyncio.gather(store.aget(("bob",), "tea"), store.aget(("bob", "work"), "task"))
        assert [i.key for i in both if i is not None] == ["tea", "task"]
        await store.adelete(("bob",), "tea")
        assert await store.aget(("bob",), "tea") is None

    asyncio.run(run())
    assert store.get(("bob", "work"), "task") is not None


def test_batch_runs_operations_in_order(store: LocalMemoryStore) -> None:
    results = store.batch(
        [
            PutOp(("bob",), "k", {"v": 1}),
            GetOp(("bob",), "k"),
            PutOp(("bob",), "k", None),
            GetOp(("bob",), "k"),
            SearchOp(("bob",)),
        ]
    )
    assert results[0] is None
    assert results[2] is None
    assert results[1] is not None
    assert results[1].value == {"v": 1}
    assert results[3] is None
    assert results[4] == []
    with pytest.raises(InvalidNamespaceError):  # ops given to batch directly are checked too
        store.batch([GetOp(("bob.admin",), "k")])
    with pytest.raises(InvalidInputError):
        store.batch(["not an op"])  # type: ignore[list-item]


# -- where users use it --------------------------------------------------------------------------------
def test_a_langgraph_node_reads_and_writes_through_the_store(store: LocalMemoryStore, memory: Memory) -> None:
    class State(TypedDict):
        user: str
        fact: str
        recalled: list[str]

    def remember(state: State, *, store: BaseStore) -> dict[str, Any]:
        store.put((state["user"],), "fact", {"content": state["fact"]})
        return {}

    def recall(state: State, *, store: BaseStore) -> dict[str, Any]:
        return {"recalled": [i.value["content"] for i in store.search((state["user"],), query="favourite colour")]}

    graph = StateGraph(State)
    graph.add_node("remember", remember)
    graph.add_node("recall", recall)
    graph.add_edge(START, "remember")
    graph.add_edge("remember", "recall")
    graph.add_edge("recall", END)
    app = graph.compile(store=store)
    out = app.invoke({"user": "bob", "fact": "Bob's favourite colour is teal", "recalled": []})
    assert out["recalled"] == ["Bob's favourite colour is teal"]
    assert "favourite colour is teal" in memory.knowledge.read_note("bob", "fact")


def test_create_agent_tools_use_the_store(store: LocalMemoryStore, memory: Memory) -> None:
    @tool
    def save_preference(key: str, text: str, runtime: ToolRuntime) -> str:
        """Save a user preference."""
        assert runtime.store is not None
        runtime.store.put(("bob",), key, {"content": text})
        return "saved"

    @tool
    def find_preference(query: str, runtime: ToolRuntime) -> str:
        """Find a saved preference."""
        assert runtime.store is not None
        return json.dumps([i.value["content"] for i in runtime.store.search(("bob",), query=query)])

    model = ScriptedChatModel(
        script=[
            AIMessage(
                content="",
                tool_calls=[{"name": "save_preference", "args": {"key": "tea", "text": "oolong, no milk"}, "id": "1"}],
            ),
            AIMessage(content="", tool_calls=[{"name": "find_preference", "args": {"query": "oolong"}, "id": "2"}]),
            AIMessage(content="You like oolong."),
        ]
    )
    agent = create_agent(model, tools=[save_preference, find_preference], store=store)
    result = agent.invoke({"messages": [HumanMessage("remember my tea")]})
    found = [m for m in result["messages"] if isinstance(m, ToolMessage) and m.name == "find_preference"]
    assert json.loads(str(found[0].content)) == ["oolong, no milk"]
    assert memory.knowledge.read_note("bob", "tea").startswith("# tea\n\noolong, no milk\n")


def test_langmem_memory_tools_write_and_find_memories_through_the_store(
    store: LocalMemoryStore, memory: Memory
) -> None:
    langmem = pytest.importorskip("langmem")

    namespace = ("{langgraph_user_id}",)
    manage = langmem.create_manage_memory_tool(namespace=namespace)
    search = langmem.create_search_memory_tool(namespace=namespace)

    def policy(messages: Sequence[BaseMessage]) -> AIMessage:
        done = [m for m in messages if isinstance(m, ToolMessage)]
        if not done:
            args = {"content": "The user's dog is called Biscuit", "action": "create"}
            return AIMessage(content="", tool_calls=[{"name": "manage_memory", "args": args, "id": "m1"}])
        if len(done) == 1:
            return AIMessage(
                content="", tool_calls=[{"name": "search_memory", "args": {"query": "dog name"}, "id": "s1"}]
            )
        return AIMessage(content="Your dog is Biscuit.")

    agent = create_agent(ScriptedChatModel(policy=policy), tools=[manage, search], store=store)
    config = {"configurable": {"langgraph_user_id": "carol"}}
    result = agent.invoke({"messages": [HumanMessage("My dog is Biscuit")]}, config=config)  # type: ignore[arg-type]
    tools = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    assert tools[0].content.startswith("created memory ")  # type: ignore[union-attr]
    memory_id = str(tools[0].content).split()[-1]
    found = json.loads(str(tools[1].content))
    assert [(f["key"], f["value"]) for f in found] == [(memory_id, {"content": "The user's dog is called Biscuit"})]
    assert found[0]["namespace"] == ["carol"]
    # The memory is carol's note on disk, and only hers.
    assert memory.knowledge.read_note("carol", memory_id).startswith(
        f"# {memory_id}\n\nThe user's dog is called Biscuit"
    )
    assert store.search(("carol_admin",), query="dog") == []
    # The async tools, given the store directly, go through abatch.
    amanage = langmem.create_manage_memory_tool(namespace=namespace, store=store)
    asearch = langmem.create_search_memory_tool(namespace=namespace, store=store)
    update = {"content": "The dog is Biscuit, a beagle", "action": "update", "id": memory_id}
    updated = asyncio.run(amanage.ainvoke(update, config=config))  # type: ignore[arg-type]
    assert updated == f"updated memory {memory_id}"
    again = json.loads(asyncio.run(asearch.ainvoke({"query": "beagle"}, config=config)))  # type: ignore[arg-type]
    assert [f["key"] for f in again] == [memory_id]
    item = store.get(("carol",), memory_id)
    assert item is not None
    assert item.value == {"content": "The dog is Biscuit, a beagle"}


# -- the pure parts ----------------------------------------------------------------------------------
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(value=st.dictionaries(st.text(max_size=8), _JSON, max_size=6), key=st.text(min_size=1, max_size=40))
def test_any_json_value_and_key_survive_the_note_exactly(value: dict[str, Any], key: str) -> None:
    when = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=timezone.utc)
    text = render_note(key, value, when, when)
    stored = parse_note(text, key)
    assert stored is not None
    assert json.dumps(stored.value) == json.dumps(value)  # equal, key order and -0.0 included
    assert stored.created_at == when
    name = key_to_name(key)
    assert name_to_key(name) == key
    assert "/" not in name
    assert not name.endswith((".", " "))


def test_the_module_examples_run() -> None:
    import langchain_local_ai_memory._store as module

    assert doctest.testmod(module).failed == 0
