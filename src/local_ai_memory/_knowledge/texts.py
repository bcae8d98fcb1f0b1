"""The texts of small notes as Stage 3 last read them, so a note that answers query after
query is read from storage once per version instead of once per query.

Each text is kept with the index entry it was read under and is only given back for that
very entry (entries are immutable and replaced whenever the index sees a note change), so a
kept text is never older than what the index says about the note: an edit by another
process is seen as soon as the watcher or a listing comparison has indexed it. A note that
leaves the index (deleted, forgotten) is never answered from here again.

>>> from local_ai_memory._knowledge.index_file import IndexEntry
>>> texts = NoteTexts(1024)
>>> entry = IndexEntry(filename="alice_a.md", category="knowledge", size=5)
>>> texts.put(("knowledge", "alice_a.md"), entry, "hello")
>>> texts.get(("knowledge", "alice_a.md"), entry)
'hello'
>>> texts.get(("knowledge", "alice_a.md"), IndexEntry(filename="alice_a.md", category="knowledge", size=5))
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from local_ai_memory._knowledge.index_file import IndexEntry

__all__ = ["NOTE_TEXTS_KEPT", "NoteTexts"]

NOTE_TEXTS_KEPT = 16 << 20
"""Characters of note texts kept per data folder."""


class NoteTexts:
    """Whole note texts keyed by ``(category, name)``, each valid for one index entry; least
    recently used out past ``limit`` characters. Notes over a 64th of the limit are not kept."""

    def __init__(self, limit: int = NOTE_TEXTS_KEPT) -> None:
        self.limit = limit
        self._items: OrderedDict[tuple[str, str], tuple[IndexEntry, str, int]] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    @property
    def size(self) -> int:
        """Characters kept."""
        return self._chars

    def get(self, key: tuple[str, str], entry: IndexEntry) -> str | None:
        """The text kept for ``key`` if it was read under ``entry`` itself, else ``None``."""
        with self._lock:
            kept = self._items.get(key)
            if kept is None or kept[0] is not entry:
                return None
            self._items.move_to_end(key)
            return kept[1]

    def put(self, key: tuple[str, str], entry: IndexEntry, text: str) -> None:
        """Keep ``text``, read whole while the index held ``entry`` for ``key``."""
        size = len(text)
        if size > self.limit // 64:
            return
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._chars -= old[2]
            self._items[key] = (entry, text, size)
            self._chars += size
            while self._chars > self.limit:
                self._chars -= self._items.popitem(last=False)[1][2]

    def discard(self, key: tuple[str, str]) -> None:
        """Forget the text of ``key`` (its note is deleted: no copy of it stays in memory)."""
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._chars -= old[2]
