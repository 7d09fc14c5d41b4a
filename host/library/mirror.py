"""`EngineMirror`: the host's search engine for the in-process stores (`InMemoryStore`,
`JSONFileStore`), over a private copy of their memories.

    mirror = EngineMirror(SearchConfig(), candidates=100)   # a private database, the engine
    mirror.apply({"k1": row, "k2": None})                    # upsert k1, delete k2
    found = mirror.search("who got a dog?")                  # the engine's candidates

The engine searches a host store (keyword index, BM25 with its statistics, vectors written by
its worker). So an in-process store hands a copy of its memories to a host database of its own,
in a temporary folder removed at `close()`, written as `SQLiteStore` writes (each memory the
wire entry of `host.library.host_db.new_entry`) but without fsync (`synchronous=OFF`: the copy
is rebuilt from the store whenever needed, never read back after a crash), and searches it with
an `EngineSearcher` (`host.library.searcher`). The store's own table stays the truth: the
mirror is fed the changes since the last search, at the next search, so `set` and `delete` cost
what they did; a search first writes them (one transaction) and waits, at most
`search.vector_wait`, for their vectors.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import threading
import time
import weakref
from collections.abc import Mapping
from pathlib import Path

from host.config import SearchConfig
from host.library.host_db import Ranked, new_entry
from host.library.mapping import key_to_id
from host.library.search import Row
from host.library.searcher import EngineSearcher
from host.store.records import PERSISTENT_TIERS, Query, Quotas, Scope, StoredEntry
from host.store.sqlite import writes
from host.store.sqlite.schema import connect, migrate, write_transaction
from protocol.keys import canonical_key

__all__ = ["EngineMirror"]

_SCOPE = Scope(namespace="library", agent="library")
_UNBOUNDED = Quotas(max_entries_per_namespace=1 << 62, max_entries_per_agent=1 << 62,
                    max_bytes_per_namespace=1 << 62, max_bytes_per_agent=1 << 62)


def _same(a: Row, b: Row) -> bool:
    """True when two rows hold the same memory as far as the search sees it (an access, which
    only moves `last_accessed`, is no change: recency is read from the store's own row). The
    metadata counts: it is part of the entry's searchable text (its coverage of a query)."""
    x, y = a.memory, b.memory
    return (x.content, x.memory_type, x.importance, x.id, x.created_at, x.metadata,
            a.valid) == (y.content, y.memory_type, y.importance, y.id, y.created_at,
                         y.metadata, b.valid)


class EngineMirror:
    """A private host database holding a copy of one store's memories, and the engine over it.
    Thread-safe."""

    def __init__(self, cfg: SearchConfig, candidates: int) -> None:
        self.candidates = candidates
        self._folder = tempfile.mkdtemp(prefix="a2e-library-search-")
        # removed at close(), or at exit for a store never closed
        self._remove = weakref.finalize(self, shutil.rmtree, self._folder, True)
        path = str(Path(self._folder) / "search.db")
        self._lock = threading.Lock()
        self._rows: dict[str, Row] = {}  # what the copy holds, by key
        self.table: object = None  # the store's table the copy was last synced with
        self._ticket = 0
        try:
            self._conn = connect(path)
            self._conn.execute("PRAGMA synchronous=OFF")  # a copy: rebuilt, never recovered
            migrate(self._conn)
            self._searcher = EngineSearcher(path, cfg)
        except BaseException:
            self._remove()
            raise

    def sync(self, table: object, rows: Mapping[str, Row] | None,
             changes: Mapping[str, Row | None]) -> None:
        """Bring the copy up to date: with `rows` (the whole table `table`, after it was
        replaced or at the first search), to exactly those rows; else apply `changes` (key ->
        row, None for deleted)."""
        with self._lock:
            if rows is not None:
                todo: dict[str, Row | None] = {k: r for k, r in rows.items()
                                               if k not in self._rows
                                               or not _same(self._rows[k], r)}
                todo.update({k: None for k in self._rows if k not in rows})
                self.table = table
            else:
                todo = dict(changes)
            if todo:
                self._write(todo)
                self._ticket = self._searcher.notify()

    def _write(self, todo: Mapping[str, Row | None]) -> None:
        now = time.time()
        conn = self._conn
        with write_transaction(conn):
            for key, row in todo.items():
                canon = canonical_key({"id": key})
                if row is None:
                    writes.forget_entries(conn, _SCOPE, PERSISTENT_TIERS, [canon], [], now)
                    self._rows.pop(key, None)
                    continue
                new = new_entry(key, row.memory, working_tier="episodic")
                others = [t for t in PERSISTENT_TIERS if t != new.tier]
                writes.forget_entries(conn, _SCOPE, others, [new.key], [], now)
                writes.put_entries(conn, _SCOPE, [new], now, _UNBOUNDED)
                self._rows[key] = row

    def search(self, query: str, now: float, as_of: float | None = None
               ) -> list[tuple[str, StoredEntry]]:
        """The engine's candidates for `query` (their `relevance` and `fused` set), each with
        its store key, only those valid at `as_of` when given; waits, at most
        `search.vector_wait`, for the vectors of the copy."""
        q = Query(tiers=PERSISTENT_TIERS, limit=self.candidates, as_of=as_of)
        found = self._searcher.search(_SCOPE, q, query, now, self.candidates, self._ticket)
        return [(key_to_id(json.loads(e.key)), e) for e in found]

    def judge(self, matches: list[tuple[float, StoredEntry]], supersede: bool = True,
              collapse: bool = False, now: float | None = None) -> Ranked:
        """`matches` of `search` (ranked) judged over the copy's vectors, the bounds read at
        `now` (`EngineSearcher.judge`)."""
        return self._searcher.judge(matches, supersede, collapse, now)

    def embed_pending(self) -> int:
        """Embed everything the copy has queued now; the number embedded."""
        return self._searcher.drain()

    def close(self) -> None:
        """Stop the engine, close the copy and remove its folder."""
        with self._lock:
            try:
                self._searcher.close()
            finally:
                self._conn.close()
                self._remove()
