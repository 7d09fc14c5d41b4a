"""The working tier: one session's scratch pad, in process memory, gone with the session.

It answers the same reads as a persistent store (`find`, `search`, `forget`) with the same
semantics: keys and tags ANDed, TTL from `updated_at`, an entry's validity (the time
extension) kept on it for a read's `as_of` (the memory plugin keeps the entries valid then). A query scores working entries on the
persistent store's keyword scale (`scored`: the BM25 each would have as a row of the store's
index, `host.text.bm25`), so the search engine fuses them with stored candidates into one
relevance and every tier ranks together; `search` (the share of query terms present) is for a
store without BM25.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from host.store.records import NewEntry, StoredEntry, stored_bytes
from host.text.bm25 import Analysis
from host.text.keyword import coverage

__all__ = ["ByteBudget", "WorkingTier"]


def _size(e: StoredEntry) -> int:
    """The bytes a working entry counts against the connection's budget (key, content, tags)."""
    return stored_bytes(e.key, e.content, e.tags)


@dataclass(slots=True)
class ByteBudget:
    """Key, content and tag bytes that the working tiers of one connection may hold together."""

    limit: int
    used: int = 0


@dataclass(slots=True)
class _Item:
    entry: StoredEntry
    text: str
    expires_at: float | None
    analysis: Analysis | None = None  # the store's analysis of `text`, made at the first query


class WorkingTier:
    """Entries of one session, keyed by canonical key bytes. Not thread-safe (event loop only)."""

    def __init__(self, max_entries: int, budget: ByteBudget | None = None) -> None:
        self.max_entries = max_entries
        self.budget = budget if budget is not None else ByteBudget(1 << 62)
        self._items: dict[bytes, _Item] = {}

    def __len__(self) -> int:
        return len(self._items)

    def _live(self, item: _Item, now: float) -> bool:
        return item.expires_at is None or item.expires_at > now

    def put(self, e: NewEntry, text: str, now: float) -> str | None:
        """Upsert one entry; None when stored, "memory_full" past the session's entry limit
        or the connection's byte budget (the old entry then stays as it was)."""
        old = self._items.get(e.key)
        if old is not None and not self._live(old, now):
            self._drop(e.key)
            old = None
        if old is None and len(self._items) >= self.max_entries:
            self._purge(now)
            if len(self._items) >= self.max_entries:
                return "memory_full"
        growth = stored_bytes(e.key, e.content, e.tags) - (_size(old.entry) if old is not None else 0)
        if growth > 0 and self.budget.used + growth > self.budget.limit:
            self._purge(now)
            if self.budget.used + growth > self.budget.limit:
                return "memory_full"
        self.budget.used += growth
        created = old.entry.created_at if old is not None else now
        entry = StoredEntry(
            tier="working", owner="", key=e.key, content=e.content, tags=list(dict.fromkeys(e.tags)),
            source=e.source, score=e.score, ttl=e.ttl, created_at=created, updated_at=now,
            valid_from=e.valid_from, valid_until=e.valid_until,
        )
        self._items[e.key] = _Item(entry, text, now + e.ttl if e.ttl > 0 else None)
        return None

    def _drop(self, key: bytes) -> None:
        self.budget.used -= _size(self._items.pop(key).entry)

    def _purge(self, now: float) -> None:
        for k in [k for k, it in self._items.items() if not self._live(it, now)]:
            self._drop(k)

    def _matching(
        self, keys: Sequence[bytes], tags: Sequence[str], now: float
    ) -> list[_Item]:
        if keys:
            items = [self._items[k] for k in dict.fromkeys(keys) if k in self._items]
        else:
            items = list(self._items.values())
        want = set(tags)
        return [
            it for it in items
            if self._live(it, now) and (not want or want.issubset(it.entry.tags))
        ]

    def find(
        self, keys: Sequence[bytes], tags: Sequence[str], min_score: float, now: float
    ) -> list[StoredEntry]:
        """Live entries matching keys AND tags with score >= min_score (unordered)."""
        if not self._items:  # the common case of a session that keeps nothing here
            return []
        return [
            it.entry for it in self._matching(keys, tags, now) if it.entry.score >= min_score
        ]

    def search(
        self, terms: tuple[str, ...], keys: Sequence[bytes], tags: Sequence[str], now: float
    ) -> list[StoredEntry]:
        """Live entries sharing a term with `terms`, as copies with `relevance` set."""
        out = []
        for it in self._matching(keys, tags, now):
            rel = coverage(terms, it.text)
            if rel > 0:
                out.append(replace(it.entry, relevance=rel))
        return out

    def scored(
        self, keys: Sequence[bytes], tags: Sequence[str], now: float,
        analyse: Callable[[str], Analysis], keyword: Callable[[Analysis], float],
    ) -> list[StoredEntry]:
        """Live entries matching keys AND tags whose `keyword(analysis)` (their BM25 for the
        query) is above 0, as copies with `keyword` set. `analyse` is the store's analysis of a
        text; it is kept per entry (one store per host) until the entry is replaced."""
        out = []
        for it in self._matching(keys, tags, now):
            if it.analysis is None:
                it.analysis = analyse(it.text)
            score = keyword(it.analysis)
            if score > 0:
                out.append(replace(it.entry, keyword=score))
        return out

    def touch(self, keys: Sequence[bytes], when: float) -> int:
        """Record a read, as `EntryStore.touch`: move `updated_at` of the live entries under
        `keys` forward to `when`; content, text and expiry stay. The number moved."""
        moved = 0
        for it in self._matching(keys, (), when):
            if it.entry.updated_at < when:
                it.entry.updated_at = when
                moved += 1
        return moved

    def get(self, key: bytes) -> StoredEntry | None:
        """The entry under `key` as held (live or not), None when absent."""
        item = self._items.get(key)
        return item.entry if item is not None else None

    def forget(self, keys: Sequence[bytes], tags: Sequence[str], now: float) -> int:
        """Delete live entries matching keys AND tags; the number deleted."""
        return len(self.forget_entries(keys, tags, now))

    def forget_entries(
        self, keys: Sequence[bytes], tags: Sequence[str], now: float
    ) -> list[StoredEntry]:
        """Delete live entries matching keys AND tags; the entries deleted."""
        doomed = [it.entry for it in self._matching(keys, tags, now)]
        for e in doomed:
            self._drop(e.key)
        return doomed
