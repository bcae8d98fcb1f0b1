"""``LocalMemoryStore``: LangGraph's ``BaseStore`` over the knowledge memory of a ``Memory``.

Pass it where LangGraph takes a store (``create_agent(..., store=...)``,
``graph.compile(store=...)``, langmem's memory tools): long-term memory then lives in the
user's Markdown notes, readable on disk (or in any knowledge backend), and ``search(query=...)``
ranks with the core's Stage 1 (BM25, or hybrid when ``search_mode="hybrid"``).

Every operation is carried out in order by :meth:`LocalMemoryStore.batch`; ``abatch`` runs the
same in a worker thread. The mapping (namespaces, notes, filters) lives in pure modules:
:mod:`._store_namespaces`, :mod:`._store_items`, :mod:`._store_filter`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
)

from local_ai_memory import InvalidInputError, Memory, MemoryConfig, RecordNotFoundError, UnsupportedFormatError
from local_ai_memory.types import Candidate

from ._scope import memory_of
from ._store_filter import check_filter, matches
from ._store_items import StoredItem, check_value, key_to_name, name_to_key, parse_note, plain_item, render_note
from ._store_namespaces import Place, check_labels, namespace_of, place_of, places_under, select_namespaces

__all__ = ["LocalMemoryStore"]


class LocalMemoryStore(BaseStore):
    """A LangGraph store whose items are knowledge notes of a :class:`~local_ai_memory.Memory`.

    **Namespaces.** ``("bob",)`` is user ``bob``'s notes in the default (first configured)
    category; ``("bob", "work")`` his notes in category ``work``, which must be listed in
    ``MemoryConfig.categories`` (a category is an id: ``[A-Za-z0-9_-]``). Writing to
    ``("bob", <default category>)`` or to a namespace of three or more labels raises
    :class:`~local_ai_memory.InvalidInputError`; reading one finds nothing. The core's naming
    rule keeps users apart exactly: ``("bob",)`` never sees ``("bob_admin",)`` or ``("b_ob",)``.

    **Items.** One item is one note, named after its key (``%``, ``/``, ``\\``, invisible
    characters and a trailing dot or space are percent-encoded). The note holds the key as a
    heading, the value's strings as text (what BM25 and embeddings rank), the value itself in
    a ```` ```json ```` block, kept exactly, and ``created_at``/``updated_at`` on its last line.
    Values must be JSON: mappings with string keys, lists (tuples come back as lists), strings,
    finite numbers, booleans, ``None``. Notes written by other means (``Knowledge.write_note``,
    a text editor) appear as items with value ``{"text": <note text>}``.

    **Search.** With ``query``, items come in Stage 1 order with its score (BM25, or the fused
    score in hybrid mode); notes sharing no word with a BM25 query are not returned. Without
    ``query``, items come newest ``updated_at`` first (as in LangGraph's ``PostgresStore``;
    ``InMemoryStore`` keeps insertion order). ``filter`` follows LangGraph's semantics (see
    :mod:`._store_filter`). A search under ``()`` or a user's namespace spans several
    categories and users; scores of different users come from different BM25 corpora.

    **TTL.** ``put(..., ttl=minutes)`` (or ``ttl={"default_ttl": minutes}`` here) gives an item an
    expiry kept on its note's metadata line; an expired item reads as absent, a read with
    ``refresh_ttl`` (LangGraph's default) moves the expiry on, and :meth:`sweep_ttl` deletes the
    expired notes.

    **Limits.** ``put``'s ``index`` argument is ignored: every item's text is indexed. Keys that differ only
    in letter case are two files that a case-insensitive file system (macOS, Windows) keeps as
    one. A key must fit a file name (about 200 bytes once encoded).

    >>> store = LocalMemoryStore(Memory.in_memory())
    >>> store.put(("bob",), "tea", {"content": "Bob drinks green tea"})
    >>> store.get(("bob",), "tea").value
    {'content': 'Bob drinks green tea'}
    >>> [item.key for item in store.search(("bob",), query="green tea")]
    ['tea']
    >>> store.search(("bob_admin",), query="green tea")
    []
    """

    supports_ttl = True

    def __init__(
        self, memory: Memory | None = None, *, config: MemoryConfig | None = None, ttl: TTLConfig | None = None
    ) -> None:
        """The notes of ``memory`` (``config=`` is a shortcut that builds ``Memory(config)``);
        ``ttl`` is LangGraph's ``TTLConfig`` (``default_ttl`` minutes, ``refresh_on_read``)."""
        self.ttl_config = ttl
        self.memory = memory_of(memory, config)
        self.knowledge = self.memory.knowledge
        # The configured categories: the conversation logs beside them are the library's, not items.
        self.categories: tuple[str, ...] = self.knowledge.store.searched

    def __repr__(self) -> str:
        return f"LocalMemoryStore({self.memory!r})"

    # -- batches -----------------------------------------------------------------------------
    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Carry out ``ops`` in order; one result per operation (``None`` for a put or delete)."""
        results: list[Result] = []
        for op in ops:
            check_labels(op)
            results.append(self._run(op))
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Async twin of :meth:`batch` (runs it in a worker thread)."""
        return await asyncio.to_thread(self.batch, list(ops))

    def _run(self, op: Op) -> Result:
        if isinstance(op, GetOp):
            return self._get(op.namespace, op.key, refresh=op.refresh_ttl)
        if isinstance(op, PutOp):
            if op.value is None:
                self._delete(op.namespace, op.key)
            else:
                if op.ttl is not None and not (isinstance(op.ttl, (int, float)) and op.ttl > 0):
                    raise InvalidInputError(f"ttl must be a positive number of minutes, got {op.ttl!r}")
                self._put(op.namespace, op.key, op.value, op.ttl)
            return None
        if isinstance(op, SearchOp):
            page = self._search(op)
            if op.refresh_ttl:
                for item in page:
                    self._refresh(item.namespace, item.key)
            return page
        if isinstance(op, ListNamespacesOp):
            return select_namespaces(self._namespaces(), op.match_conditions, op.max_depth, op.limit, op.offset)
        raise InvalidInputError(f"unknown store operation {type(op).__name__}")

    # -- notes -------------------------------------------------------------------------------
    @staticmethod
    def _name(key: str) -> str:
        """The note name of an item key (the user's prefix is the naming rule's, added by ``Knowledge``)."""
        return key_to_name(key) + ".md"

    @staticmethod
    def _name_of(filename: str) -> str:
        """The note name of a user's note file (what follows the encoded user id and ``_``)."""
        return filename.partition("_")[2]

    def _read(self, user_id: str, category: str, name: str) -> StoredItem | None:
        """The item of ``user_id``'s note ``name``, ``None`` if there is none (or it is not UTF-8 text)."""
        try:
            text = self.knowledge.read_note(user_id, name, category=category)
        except (RecordNotFoundError, UnsupportedFormatError):
            return None
        except InvalidInputError:  # a hand-made file that no note name maps to (``alice_.md``)
            return None
        key = name_to_key(name.removesuffix(".md"))
        stored = parse_note(text, key)
        if stored is not None:
            return None if stored.expired(datetime.now(timezone.utc)) else stored
        info = self.knowledge.note_info(user_id, name, category=category)
        return plain_item(text, key, info.modified if info is not None else 0.0)

    def _item(self, user_id: str, category: str, stored: StoredItem, score: float | None = None) -> SearchItem:
        namespace = namespace_of(user_id, category, self.categories)
        return SearchItem(namespace, stored.key, stored.value, stored.created_at, stored.updated_at, score)

    def _get(self, namespace: tuple[str, ...], key: str, refresh: bool = False) -> Item | None:
        try:
            place = place_of(namespace, self.categories)
        except InvalidInputError:
            return None  # nothing can be stored there
        category = place.categories[0]
        stored = self._read(place.user_id, category, self._name(key))
        if stored is None:
            return None
        if refresh:
            self._refresh(namespace, key, stored)
        return Item(
            value=stored.value,
            key=stored.key,
            namespace=namespace_of(place.user_id, category, self.categories),
            created_at=stored.created_at,
            updated_at=stored.updated_at,
        )

    def _put(self, namespace: tuple[str, ...], key: str, value: Any, ttl: float | None = None) -> None:
        place = place_of(namespace, self.categories)
        checked = check_value(value)
        category = place.categories[0]
        name = self._name(key)
        previous = self._read(place.user_id, category, name)  # its created_at is kept
        now = datetime.now(timezone.utc)
        expires = None if ttl is None else now + timedelta(minutes=ttl)
        created = previous.created_at if previous is not None else now
        text = render_note(key, checked, created, now, ttl, expires)
        self.knowledge.write_note(place.user_id, name, text, category=category)

    def _refresh(self, namespace: tuple[str, ...], key: str, stored: StoredItem | None = None) -> None:
        """Move an item's expiry on by its TTL (a read counts as use); at most once a minute."""
        place = place_of(namespace, self.categories)
        category = place.categories[0]
        name = self._name(key)
        stored = stored or self._read(place.user_id, category, name)
        if stored is None or stored.ttl is None or stored.expires_at is None:
            return
        expires = datetime.now(timezone.utc) + timedelta(minutes=stored.ttl)
        if expires - stored.expires_at < timedelta(minutes=min(1.0, stored.ttl / 10)):
            return
        text = render_note(key, stored.value, stored.created_at, stored.updated_at, stored.ttl, expires)
        self.knowledge.write_note(place.user_id, name, text, category=category)

    def sweep_ttl(self) -> int:
        """Delete every expired item (of every user and category); return how many went."""
        now = datetime.now(timezone.utc)
        swept = 0
        for user_id in self._users():
            for category in self.categories:
                for note in self.knowledge.notes(user_id, category=category):
                    try:
                        text = self.knowledge.read_note(user_id, note.name, category=category)
                    except (RecordNotFoundError, UnsupportedFormatError, InvalidInputError):
                        continue
                    stored = parse_note(text, name_to_key(note.name.removesuffix(".md")))
                    if stored is not None and stored.expired(now):
                        self.knowledge.delete_note(user_id, note.name, category=category)
                        swept += 1
        return swept

    async def asweep_ttl(self) -> int:
        """:meth:`sweep_ttl` in a worker thread."""
        return await asyncio.to_thread(self.sweep_ttl)

    def _delete(self, namespace: tuple[str, ...], key: str) -> None:
        try:
            place = place_of(namespace, self.categories)
        except InvalidInputError:
            return
        self.knowledge.delete_note(place.user_id, self._name(key), category=place.categories[0])

    # -- search ------------------------------------------------------------------------------
    def _users(self) -> list[str]:
        return [info.user_id for info in self.memory.users() if info.notes]

    def _namespaces(self) -> Iterator[tuple[str, ...]]:
        for user_id in self._users():
            for category in self.categories:
                if self.knowledge.notes(user_id, category=category):
                    yield namespace_of(user_id, category, self.categories)

    def _search(self, op: SearchOp) -> list[SearchItem]:
        check_filter(op.filter)
        if op.limit < 0 or op.offset < 0:
            raise InvalidInputError(f"limit and offset must not be negative, got {op.limit} and {op.offset}")
        places = places_under(op.namespace_prefix, self._users() if not op.namespace_prefix else (), self.categories)
        if op.query:
            # Without a filter each user's best offset + limit suffice; a filter may reject any of them.
            found = self._ranked(op.query, places, None if op.filter else op.offset + op.limit)
        else:
            found = iter(self._newest_first(places))
        page: list[SearchItem] = []
        skipped = 0
        for item in found:
            if not matches(item.value, op.filter):
                continue
            if skipped < op.offset:
                skipped += 1
                continue
            if len(page) == op.limit:
                break
            page.append(item)
        return page

    def _all_items(self, place: Place) -> Iterator[SearchItem]:
        for category in place.categories:
            for note in self.knowledge.notes(place.user_id, category=category):
                stored = self._read(place.user_id, category, note.name)
                if stored is not None:
                    yield self._item(place.user_id, category, stored)

    def _newest_first(self, places: list[Place]) -> list[SearchItem]:
        items = [item for place in places for item in self._all_items(place)]
        items.sort(key=lambda item: (item.namespace, item.key))
        items.sort(key=lambda item: item.updated_at, reverse=True)
        return items

    def _stage1(self, query: str, user_id: str, categories: tuple[str, ...], wanted: int | None) -> list[Candidate]:
        """The user's ``wanted`` best Stage 1 candidates in ``categories`` (``None``: every one)."""
        if wanted is None:
            wanted = sum(len(self.knowledge.notes(user_id, category=c)) for c in categories)
        if wanted == 0:
            return []
        return self.knowledge.search(query, user_id, k=wanted, categories=categories)  # follows search_mode

    def _ranked(self, query: str, places: list[Place], wanted: int | None) -> Iterator[SearchItem]:
        hits = [(p.user_id, hit) for p in places for hit in self._stage1(query, p.user_id, p.categories, wanted)]
        hits.sort(key=lambda pair: -pair[1].score)  # stable: one user's order is kept on ties
        for user_id, hit in hits:
            stored = self._read(user_id, hit.category, self._name_of(hit.filename))
            if stored is not None:
                yield self._item(user_id, hit.category, stored, hit.score)
