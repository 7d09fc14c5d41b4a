"""`EntryStoreMemories`: the library's `AsyncStore` over the host's `EntryStore`, for one scope.

    memories = EntryStoreMemories(sqlite_store, Scope("ns", "agent-1"), config)
    await memories.set(m.id, m)          # an entry a WebSocket client of ("ns", "agent-1") reads

This is how the MCP tools (and any in-process user of the host's database) read and write the same
entries as the WebSocket host: every memory goes through `host.library.mapping` (type <-> tier and
`type:` tag, importance <-> score, id <-> key `{"id": id}`), into the namespace of the scope, with
the scope's agent as owner of episodic entries. The `EntryStore` is the caller's to open and close.

Beyond the `AsyncStore` contract (`host.library.protocol`):
- working memories live in this object (like a WebSocket session's working tier) and are gone
  with it;
- an id that is not the id of an `{"id": ...}` key but the JSON text of a key (what `key_to_id`
  gives for entries other wire clients wrote, e.g. `{"user":"u1"}`) finds that entry too;
- `get` records the access with `EntryStore.touch` (`updated_at` moves forward to the time of the
  read, nothing else changes), so a write of the entry by another client between the read and the
  touch is never undone. Entries with a TTL come back touched but are not touched in the store: a
  touch never moves the expiry, and wire clients read expiry as `updated_at + ttl`;
- the searchable text of a memory is its content alone (not its metadata or tags);
- `search` is the host's own query path: the `SearchEngine` it is given (keywords and vectors,
  the calibrated `relevance` a `memory/retrieve` reports) and `host.search.rank.rank_matches`
  (the combined score and order of the wire). Without one it searches with a keyword-only
  engine (BM25, the keyword-only calibration), as a host with `embedder = "none"` does. Every
  write takes a ticket of the engine, and a search waits (at most `search.vector_wait`) for the
  vectors of what this object wrote (read-your-writes, as on the wire);
- a write past a storage quota raises `host.library.StoreFullError`, as `SQLiteStore` does;
- setting an existing key keeps its stored `created_at` (an upsert, as on the wire);
- a memory is written as `SQLiteStore` writes it (`host.library.host_db`: the same entry bytes,
  the same `created_at` on overwrite) and ranked by the same engine; unlike
  `SQLiteStore`, working memories are not persisted (see above), and the store may be any
  `EntryStore` (SQLite or PostgreSQL).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from datetime import datetime

from host.config import Config
from host.library.host_db import judged, new_entry, ranked, results
from host.library.mapping import id_to_key, stored_to_memory
from host.library.models import Memory, RetrievalResult, as_of_seconds
from host.library.sqlite_store import StoreFullError
from host.memory.working import WorkingTier
from host.search.engine import SearchEngine
from host.search.rank import RankWeights
from host.store.interface import EntryStore
from host.store.records import PERSISTENT_TIERS, Query, Scope, StoredEntry
from host.text.keyword import query_terms
from protocol.keys import canonical_key
from protocol.validity import valid_at

__all__ = ["EntryStoreMemories"]

_ALL_TIERS = (*PERSISTENT_TIERS, "working")


class EntryStoreMemories:
    """An `AsyncStore` of the memories visible to `scope` in `store` (see the module docstring).

    `engine` is the host's `SearchEngine` over `store` (the caller starts and stops it); None:
    a keyword-only one. Not thread-safe: use it from one event loop.
    """

    def __init__(self, store: EntryStore, scope: Scope, config: Config,
                 engine: SearchEngine | None = None) -> None:
        self.store = store
        self.scope = scope
        self.working = WorkingTier(config.limits.max_working_entries)
        self.weights = RankWeights.from_config(config.ranking)
        self.candidates = config.ranking.search_candidates
        self.engine = engine if engine is not None else SearchEngine(store, None, config.search)
        self.conn = f"library:{id(self):x}"  # this object's fair share of query embedding
        self._ticket = 0  # the engine's ticket of the newest write (read-your-writes)

    @staticmethod
    def keys_for(memory_id: str) -> tuple[bytes, ...]:
        """The canonical keys an id may name: `{"id": memory_id}`, and the id itself when it is
        the JSON text of an object key."""
        keys = [canonical_key(id_to_key(memory_id))]
        if memory_id.startswith("{"):
            try:
                keys.append(canonical_key(json.loads(memory_id)))
            except (ValueError, TypeError):
                pass
        return tuple(dict.fromkeys(keys))

    async def _find(self, keys: Sequence[bytes], tiers: Sequence[str], now: float) -> list[
        StoredEntry
    ]:
        persistent = tuple(t for t in tiers if t in PERSISTENT_TIERS)
        found: list[StoredEntry] = []
        if persistent:
            q = Query(tiers=persistent, keys=tuple(keys), limit=len(keys) * len(persistent))
            found, _ = await self.store.find(self.scope, q, now)
        if "working" in tiers:
            found += self.working.find(keys, (), 0.0, now)
        return found

    async def set(self, key: str, memory: Memory) -> None:
        """Store `memory` under `key` (an upsert; a memory whose type moved it to another tier
        leaves no copy in the old one). Raises `StoreFullError` past a quota, `ValueError`
        for a bad window (`Memory.window`); nothing is changed then."""
        new = new_entry(key, memory)
        now = time.time()
        if new.tier == "working":
            if self.working.put(new, memory.content, now) is not None:
                raise StoreFullError("the working tier is full")
        else:
            (outcome,) = await self.store.put(self.scope, [new], now)
            if outcome is not None:
                raise StoreFullError("the storage quota of this namespace or agent is reached")
            self._ticket = self.engine.notify()
        others = [t for t in _ALL_TIERS if t != new.tier]
        if await self._find([new.key], others, now):
            await self._forget([new.key], others, now)

    async def get(self, key: str) -> Memory | None:
        """The memory stored under `key` (its access recorded), or None."""
        now = time.time()
        found = await self._find(self.keys_for(key), _ALL_TIERS, now)
        if not found:
            return None
        e = found[0]
        memory = stored_to_memory(e, now)
        if e.ttl == 0:
            # never a write-back of `e`: a store of this key since the read must stand
            if e.tier == "working":
                self.working.touch([e.key], now)
            else:
                await self.store.touch(self.scope, [e.tier], [e.key], now)
        return memory

    async def _forget(self, keys: Sequence[bytes], tiers: Sequence[str], now: float) -> int:
        n = self.working.forget(keys, (), now) if "working" in tiers else 0
        persistent = [t for t in tiers if t in PERSISTENT_TIERS]
        if persistent:
            gone = await self.store.forget(self.scope, persistent, keys, (), now)
            if gone:
                self.engine.notify()  # drop the deleted entries' vectors from memory
            n += gone
        return n

    async def delete(self, key: str) -> bool:
        """Remove the memory under `key` from every tier; True when there was one."""
        return await self._forget(self.keys_for(key), _ALL_TIERS, time.time()) > 0

    async def search(self, query: str, k: int = 5, *, supersede: bool = True,
                     collapse: bool = False, as_of: datetime | float | str | None = None,
                     ) -> list[RetrievalResult]:
        """The best `k` memories for `query` across the tiers, best first: the engine's
        candidates ranked and judged as a `memory/retrieve` of every tier ranks and judges
        them (`supersede`: an update above what it supersedes, by default; `collapse`:
        near-duplicates folded into one, when asked), `relevance_score` the `relevance`,
        `combined_score` the `combined`, `supersedes` and `collapsed` the ids the wire
        reports as keys. With `as_of`, among the memories valid then only (the working ones
        too), as a retrieve's `as_of`. Raises `ValueError` when `k` < 1 or `as_of` is
        malformed."""
        if k < 1:
            raise ValueError(f"k must be at least 1, not {k}")
        at = as_of_seconds(as_of)
        if not query_terms(query):
            return []  # no searchable word: nothing matches, as in every library store
        now = time.time()
        q = Query(tiers=PERSISTENT_TIERS, limit=self.candidates, as_of=at)
        found = await self.engine.search(self.scope, q, query, now, self.candidates,
                                         self.working, self._ticket, self.conn)
        if at is not None:  # the store filters its own tiers, the working one is ours
            found = [e for e in found if e.tier != "working"
                     or valid_at(e.valid_from, e.valid_until, at)]
        emb = self.engine.embedder
        return results(await judged(ranked(found, self.weights, now),
                                    self.store if emb is not None else None,
                                    emb.dim if emb is not None else 0, supersede, collapse,
                                    now if at is None else at), k)
