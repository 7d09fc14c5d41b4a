"""`InMemoryStore`: the volatile backend (FR-3), and the in-process table other backends build on.

get/set/delete are O(1) (a dict operation, plus copying the memory, tokenising its content and
updating the token index on set); search ranks only the memories sharing a term with the query
(`host.library.table`): O(n) at worst, when every memory matches. Every method is thread-safe.
"""

from __future__ import annotations

import threading
import time

from host.library.models import Memory, RetrievalResult, utc_now
from host.library.protocol import Closing
from host.library.search import Row, make_row, search_rows, touched_row
from host.library.table import Table
from host.search.rank import RankWeights
from host.text.keyword import query_terms

__all__ = ["InMemoryStore", "default_weights"]


def default_weights() -> RankWeights:
    """The ranking weights of the default configuration (`host.config.RankingConfig`)."""
    from host.config import RankingConfig

    return RankWeights.from_config(RankingConfig())


class InMemoryStore(Closing):
    """A `Store` held in this process only; its contents are gone when it is.

    `weights` are the ranking weights (default: the configuration's defaults).
    """

    def __init__(self, *, weights: RankWeights | None = None) -> None:
        self.weights = weights if weights is not None else default_weights()
        self._table = Table()
        self._lock = threading.Lock()

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
        """Store a copy of `memory` under `key` (an upsert)."""
        row = make_row(memory.copy_for_store())
        with self._lock:
            self._check_open()
            self._table.put(key, row)
            self._changed(key, row)

    def delete(self, key: str) -> bool:
        """Remove the memory under `key`; True when there was one."""
        with self._lock:
            self._check_open()
            found = self._table.pop(key) is not None
            if found:
                self._changed(key, None)
            return found

    def search(self, query: str, k: int = 5) -> list[RetrievalResult]:
        """The best `k` matches of `query`, best first; `ValueError` when `k` < 1."""
        if k < 1:
            raise ValueError(f"k must be at least 1, not {k}")
        with self._lock:
            self._check_open()
            rows = self._table.candidates(query_terms(query))
        return search_rows(rows, query, k, self.weights, time.time())

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
