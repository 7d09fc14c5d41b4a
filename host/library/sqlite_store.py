"""`SQLiteStore`: the library's `Store` on the host's SQLite engine (same file, schema and SQL).

A memory is written as the wire entry `host.library.mapping.memory_to_entry` makes, through the
host's own functions (`host.store.sqlite.writes`), into one namespace as one agent. So a host
serving the same file shows these memories to that agent over WebSocket (episodic ones) and to
every agent of the namespace (semantic and procedural ones), and what wire clients store there
is found by `get` and `search` here.

- The wire's `working` tier lives only inside a session, so a persistent store keeps working
  memories in the agent's episodic tier; their `type:working` tag keeps their type.
- A key names one memory across the agent's tiers: `set` replaces the key wherever it is; over
  a key already in the memory's tier it is an upsert that keeps the entry's first `created_at`,
  as on the wire and in `EntryStoreMemories` (both write through `host.library.host_db`).
- Every `set` and `delete` is one durable transaction (WAL, `synchronous=FULL`). Accesses
  recorded by `get` are kept in memory and written with the next write, `flush()` or `close()`,
  as in `JSONFileStore`; until then this store shows them itself.
- `search` is the host's own search (`host.library.searcher`): a `SearchEngine` with the
  embedder of `search` (default: the shipped MiniLM; keywords and vectors, the calibrated
  `relevance` of `memory/retrieve`) on a thread of its own, its candidates ranked as the wire
  ranks and judges them (`host.library.host_db`), memories built for the best `k` only.
  Each write wakes its embedding worker, and a search waits (at most `search.vector_wait`) for
  the vectors of this store's writes. `SearchConfig(embedder="none")`, or an embedder that
  cannot be loaded, searches by keywords alone (BM25, the keyword-only calibration).
- Other processes (a host, the CLI, another store) may use the file at the same time: SQLite
  serialises the writers (busy timeout 30 s) and readers see committed data.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from host.config import LimitsConfig, RankingConfig, SearchConfig
from host.library.host_db import new_entry, ranked, results
from host.library.mapping import (
    stored_to_memory,
)
from host.library.memory_store import default_weights
from host.library.models import Memory, RetrievalResult, as_of_seconds, utc_now
from host.library.protocol import Closing
from host.library.searcher import EngineSearcher
from host.memory.session import DEFAULT_AGENT
from host.search.rank import RankWeights
from host.store.records import PERSISTENT_TIERS, Query, Quotas, Scope, StoredEntry
from host.store.sqlite import reads, writes
from host.store.sqlite.schema import connect, migrate, write_transaction
from host.text.keyword import query_terms
from protocol.keys import canonical_key

__all__ = ["DEFAULT_AGENT", "DEFAULT_NAMESPACE", "SQLiteStore", "StoreFullError"]

DEFAULT_NAMESPACE = "default"


class StoreFullError(RuntimeError):
    """The write would pass a quota of the namespace or agent (`memory_full` on the wire)."""


def _key(key: str) -> bytes:
    return canonical_key({"id": key})


class SQLiteStore(Closing):
    """A `Store` in the SQLite file `path`, as agent `agent` of namespace `namespace`.

    Opening creates or migrates the schema and starts the search engine (`search`: its
    settings, default `SearchConfig()`). Unset quotas and the candidate count come from the
    configuration's defaults (`LimitsConfig`, `RankingConfig`). Close it (`close()`, `with`,
    `async with`) to write pending accesses and release the file.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        namespace: str = DEFAULT_NAMESPACE,
        agent: str = DEFAULT_AGENT,
        weights: RankWeights | None = None,
        quotas: Quotas | None = None,
        candidates: int | None = None,
        search: SearchConfig | None = None,
    ) -> None:
        limits = LimitsConfig()
        self.path = str(path)
        self.scope = Scope(namespace=namespace, agent=agent)
        self.weights = weights if weights is not None else default_weights()
        self.quotas = quotas or Quotas(
            max_entries_per_namespace=limits.max_entries_per_namespace,
            max_entries_per_agent=limits.max_entries_per_agent,
        )
        self.candidates = candidates or RankingConfig().search_candidates
        self._lock = threading.Lock()
        self._touched: dict[str, float] = {}
        self._ticket = 0  # the engine's ticket of the newest write (read-your-writes)
        self._conn = connect(self.path)
        try:
            migrate(self._conn)
            self._searcher = EngineSearcher(self.path, search or SearchConfig())
        except BaseException:
            self._conn.close()
            raise

    def _write(self, fn: Callable[..., Any] | None, *args: Any) -> Any:
        """Run `fn(conn, *args)` with the pending accesses in one durable transaction."""
        conn = self._conn
        with write_transaction(conn):
            result = fn(conn, *args) if fn is not None else None
            if self._touched:
                touches = [(_key(k), when) for k, when in self._touched.items()]
                writes.touch_entries(conn, self.scope, PERSISTENT_TIERS, touches)
        self._touched.clear()
        if fn is not None:
            self._ticket = self._searcher.notify()  # its worker embeds what was queued
        return result

    def _row(self, key: str, now: float) -> StoredEntry | None:
        q = Query(tiers=PERSISTENT_TIERS, keys=(_key(key),), limit=1)
        rows, _total = reads.find_entries(self._conn, self.scope, q, now)
        return rows[0] if rows else None

    def get(self, key: str) -> Memory | None:
        """The memory under `key` (its access recorded), or None."""
        with self._lock:
            self._check_open()
            row = self._row(key, time.time())
            if row is None:
                return None
            when = utc_now()
            self._touched[key] = when.timestamp()
        return stored_to_memory(row).model_copy(update={"last_accessed": when})

    def _replace(self, conn: sqlite3.Connection, key: str, memory: Memory, now: float) -> None:
        new = new_entry(key, memory, working_tier="episodic")
        others = [t for t in PERSISTENT_TIERS if t != new.tier]
        writes.forget_entries(conn, self.scope, others, [new.key], [], now)
        outcome = writes.put_entries(conn, self.scope, [new], now, self.quotas)  # an upsert
        if outcome[0] is not None:
            raise StoreFullError(f"{outcome[0]}: no room for {key!r} in {self.scope.namespace!r}")

    def set(self, key: str, memory: Memory) -> None:
        """Store `memory` under `key`, replacing what was there, durably.

        Raises `StoreFullError` past a quota, `ValueError` for a bad window
        (`Memory.window`); nothing is changed then."""
        memory.window()
        with self._lock:
            self._check_open()
            self._touched.pop(key, None)
            self._write(self._replace, key, memory, time.time())

    def set_many(self, items: Iterable[tuple[str, Memory]]) -> None:
        """`set` each (key, memory) in one durable transaction: all or none (a bulk load).

        Raises `StoreFullError` past a quota, `ValueError` for a bad window; then nothing is
        changed."""
        items = list(items)
        for _, memory in items:
            memory.window()
        now = time.time()

        def replace_all(conn: sqlite3.Connection) -> None:
            for key, memory in items:
                self._touched.pop(key, None)
                self._replace(conn, key, memory, now)

        with self._lock:
            self._check_open()
            self._write(replace_all)

    def delete(self, key: str) -> bool:
        """Remove the memory under `key`, durably; True when there was one."""
        with self._lock:
            self._check_open()
            self._touched.pop(key, None)
            n = self._write(writes.forget_entries, self.scope, PERSISTENT_TIERS, [_key(key)], [],
                            time.time())
        return bool(n)

    def search(self, query: str, k: int = 5, *, supersede: bool = True,
               collapse: bool = False, as_of: datetime | float | str | None = None,
               ) -> list[RetrievalResult]:
        """The best `k` matches of `query`, best first, judged as a `memory/retrieve` judges
        its reply (`supersede`, `collapse`: see `host.library.entry_store`); with `as_of`,
        among the memories valid then only (as a retrieve's `as_of`). `ValueError` when `k`
        < 1 or `as_of` is malformed."""
        if k < 1:
            raise ValueError(f"k must be at least 1, not {k}")
        at = as_of_seconds(as_of)
        if not query_terms(query):
            return []  # no searchable word: nothing matches, as in every library store
        now = time.time()
        with self._lock:
            self._check_open()
            q = Query(tiers=PERSISTENT_TIERS, limit=self.candidates, as_of=at)
            found = self._searcher.search(self.scope, q, query, now, self.candidates,
                                          self._ticket)
            touched = dict(self._touched)
        return results(self._searcher.judge(ranked(found, self.weights, now, touched),
                                            supersede, collapse, now if at is None else at), k)

    def embed_pending(self) -> int:
        """Embed now every memory of the file still waiting for its vector (say after a bulk
        `set_many`: otherwise the background worker does it, newest first, and a search waits
        at most `search.vector_wait` for them); the number embedded (0 keyword-only)."""
        with self._lock:
            self._check_open()
        return self._searcher.drain()

    def flush(self) -> None:
        """Write the pending accesses now (sets and deletes are durable already)."""
        with self._lock:
            self._check_open()
            if self._touched:
                self._write(None)

    def close(self) -> None:
        """Write pending accesses and close the connection; later calls raise
        `StoreClosedError`. Closing twice is harmless."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                if self._touched:
                    self._write(None)
            finally:
                try:
                    self._searcher.close()
                finally:
                    self._conn.close()
