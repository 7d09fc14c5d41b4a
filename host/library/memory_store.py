"""`InMemoryStore`: the volatile backend (FR-3), and the in-process table other backends build on.

get/set/delete are O(1) (a dict operation, plus copying the memory, tokenising its content and
updating the token index on set). `search` is the host's own search: a `SearchEngine` over a
private copy of the memories (`host.library.mirror`, started at the first search; the changes
since the last search are written to it first), with the embedder of `search` (keywords and
vectors, the calibrated relevance a `memory/retrieve` reports), ranked as the wire ranks. With
`SearchConfig(embedder="none")` it is BM25 alone; with `search=False` the store keeps its own
keyword search instead (the share of the query's terms in a memory, `host.library.search`,
O(matches)), the fallback when no host database may be made. Every method is thread-safe.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime
from typing import TYPE_CHECKING, Literal

from host.library.host_db import results
from host.library.models import Memory, RetrievalResult, as_of_seconds, utc_now
from host.library.protocol import Closing
from host.library.search import Row, make_row, search_rows, touched_row
from host.library.table import Table
from host.search.rank import RankWeights, rank_matches
from host.text.keyword import query_terms

if TYPE_CHECKING:
    from host.config import SearchConfig
    from host.library.mirror import EngineMirror

__all__ = ["InMemoryStore", "default_weights"]


def default_weights() -> RankWeights:
    """The ranking weights of the default configuration (`host.config.RankingConfig`)."""
    from host.config import RankingConfig

    return RankWeights.from_config(RankingConfig())


class InMemoryStore(Closing):
    """A `Store` held in this process only; its contents are gone when it is.

    `weights` are the ranking weights (default: the configuration's defaults); `search` the
    search engine's settings (default `SearchConfig()`: the shipped embedder), or False for
    the store's own keyword search (see the module docstring).
    """

    def __init__(self, *, weights: RankWeights | None = None,
                 search: SearchConfig | Literal[False] | None = None) -> None:
        self.weights = weights if weights is not None else default_weights()
        self._table = Table()
        self._lock = threading.Lock()
        self._search = search
        self._mirror: EngineMirror | None = None  # started by the first search
        self._mirror_lock = threading.Lock()
        self._unsynced: dict[str, Row | None] = {}  # changes the mirror has not had yet

    # The hooks a persistent subclass uses; both are called with `_lock` held.
    def _changed(self, key: str, row: Row | None) -> None:
        """`key` was set to `row`, or deleted (None)."""

    def _accessed(self, key: str, row: Row) -> None:
        """`key` was read by `get`; `row` carries the new `last_accessed`."""

    def get(self, key: str) -> Memory | None:
        """The memory under `key` (a copy whose `last_accessed` is now), or None."""
        with self._lock:
            self._check_open()
            row = self._table.get(key)
            if row is None:
                return None
            touched = touched_row(row, utc_now())
            self._table.put(key, touched)
            self._accessed(key, touched)
        return touched.memory.copy_for_store()

    def set(self, key: str, memory: Memory) -> None:
        """Store a copy of `memory` under `key` (an upsert); ValueError for a bad window
        (`Memory.window`), nothing stored."""
        row = make_row(memory.copy_for_store())
        with self._lock:
            self._check_open()
            self._table.put(key, row)
            self._changed(key, row)
            if self._mirror is not None:
                self._unsynced[key] = row

    def delete(self, key: str) -> bool:
        """Remove the memory under `key`; True when there was one."""
        with self._lock:
            self._check_open()
            found = self._table.pop(key) is not None
            if found:
                self._changed(key, None)
                if self._mirror is not None:
                    self._unsynced[key] = None
            return found

    def search(self, query: str, k: int = 5, *, supersede: bool = True,
               collapse: bool = False, as_of: datetime | float | str | None = None,
               ) -> list[RetrievalResult]:
        """The best `k` matches of `query`, best first, judged as a `memory/retrieve` judges
        its reply (`supersede`, `collapse`: see `host.library.entry_store`; a store without
        the engine, `search=False`, judges nothing); with `as_of`, among the memories valid
        then only. `ValueError` when `k` < 1 or `as_of` is malformed."""
        if k < 1:
            raise ValueError(f"k must be at least 1, not {k}")
        at = as_of_seconds(as_of)
        terms = query_terms(query)
        if self._search is False or not terms:
            with self._lock:
                self._check_open()
                rows = self._table.candidates(terms)
            return search_rows(rows, query, k, self.weights, time.time(), at)
        mirror = self._synced_mirror()
        now = time.time()
        found = mirror.search(query, now, at)
        with self._lock:
            self._check_open()
            live = []
            for key, e in found:
                row = self._table.get(key)
                if row is not None:
                    e.updated_at = row.accessed  # recency: the memory's last access
                    live.append((e, row))
        row_of = {id(e): row for e, row in live}
        judged = mirror.judge(rank_matches([e for e, _ in live], 0.0, now, self.weights),
                              supersede, collapse, now if at is None else at)
        return results(judged, k, lambda e: row_of[id(e)].memory.copy_for_store())

    def _synced_mirror(self) -> EngineMirror:
        """The mirror, started if need be, holding every change made before this call."""
        from host.config import RankingConfig, SearchConfig
        from host.library.mirror import EngineMirror

        with self._mirror_lock:
            with self._lock:
                self._check_open()
                mirror = self._mirror
            if mirror is None:
                cfg = self._search if self._search else SearchConfig()
                mirror = EngineMirror(cfg, RankingConfig().search_candidates)
                with self._lock:
                    if self._closed:
                        mirror.close()
                        self._check_open()
                    self._mirror = mirror
            with self._lock:
                table, changes, self._unsynced = self._table, self._unsynced, {}
                rows = dict(table.rows) if mirror.table is not table else None
            mirror.sync(table, rows, changes)
            return mirror

    def embed_pending(self) -> int:
        """Embed now every memory still waiting for its vector (a search otherwise waits at
        most `search.vector_wait` for them); the number embedded (0 keyword-only)."""
        if self._search is False:
            return 0
        return self._synced_mirror().embed_pending()

    def _close_search(self) -> None:
        """Stop the search engine and remove its copy (call once `_closed` is set)."""
        with self._mirror_lock:
            mirror, self._mirror = self._mirror, None
        if mirror is not None:
            mirror.close()

    def __len__(self) -> int:
        return len(self._table)

    def keys(self) -> list[str]:
        """The keys stored now, in no particular order."""
        with self._lock:
            return list(self._table.rows)

    def close(self) -> None:
        """Close the store; later calls raise `StoreClosedError`. Closing twice is harmless."""
        with self._lock:
            self._closed = True
        self._close_search()
