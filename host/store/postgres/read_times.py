"""When each entry was last read, on PostgreSQL (docs/growth.md, "Importance that fades").

Migration 20 adds `a2e_entries.read_at` and `a2e_entries_value`, the index of eviction's order.
The host coalesces reads in memory (`host.store.growth.ReadLog`) and writes them here in
batches, `a2e_record_reads` (functions/evict.sql): one statement a batch, under the locks of
its namespaces taken in order, as every write of a namespace's rows, so a batch never
deadlocks with a put that evicts. A crash loses the read times not yet flushed, never an
entry."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["ReadTimes"]

_TIMES = ("SELECT id, read_at FROM a2e_entries WHERE id = ANY($1::bigint[])"
          " AND read_at IS NOT NULL")


class ReadTimes:
    """The read times of the PostgreSQL store (`host.store.growth.ReadTimes`)."""

    pool: Any

    async def record_reads(self, reads: Sequence[tuple[str, str, str, bytes, float]]) -> int:
        """Move the read time of each read entry forward to its `when` (never back); entries
        gone meanwhile are skipped. How many moved."""
        if not reads:
            return 0
        ns, tiers, owners, keys, when = zip(*reads, strict=True)
        return int(await self.pool.fetchval(
            "SELECT a2e_record_reads($1, $2, $3, $4, $5)", list(ns), list(tiers),
            list(owners), [k.decode() for k in keys], list(when)))

    async def read_times(self, ids: Sequence[int]) -> dict[int, float]:
        """The last read time of each of `ids` that was ever read."""
        if not ids:
            return {}
        return {r[0]: r[1] for r in await self.pool.fetch(_TIMES, list(ids))}
