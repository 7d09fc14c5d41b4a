"""The PostgreSQL store's reads: finds, fetches by id, neighbours, key paths, counts by tier,
client vectors' reads (the keyword search is `keyword`'s)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from host.store.key_index import leading
from host.store.postgres import extensions as pg_ext
from host.store.postgres import filters as pg_filters
from host.store.postgres.scan_index import prefix_range
from host.store.postgres.sql import (
    AFTER,
    COLUMNS,
    Params,
    StoreState,
    entry_of,
    read_where,
)
from host.store.records import Query, Scope, StoredEntry

__all__ = ["Reads"]


class Reads(StoreState):
    """`EntryStore`'s reads and the store extensions' (`key_paths`, `client_vectors`)."""

    async def find(self, scope: Scope, q: Query, now: float) -> tuple[list[StoredEntry], int]:
        """Entries matching `q`, best stored score first, then newest; (page, total)."""
        p = Params()
        where = read_where(scope, q, now, p) + prefix_range(q.key_prefix, p)  # (an index range)
        if q.min_score > 0:
            where += f" AND e.score >= {p(q.min_score)}"
        rows = await self.pool.fetch(
            f"SELECT {COLUMNS}, count(*) OVER () FROM a2e_entries e WHERE {where}"
            f" ORDER BY e.score DESC, e.updated_at DESC LIMIT {p(q.limit)}"
            f" OFFSET {p(q.offset)}",
            *p.values,
        )
        if not rows and q.offset:  # a page past the end still counts the matches
            total = await self.pool.fetchval(
                f"SELECT count(*) FROM a2e_entries e WHERE {where}", *p.values[:-2])
            return [], int(total)
        total = rows[0][AFTER] if rows else 0
        return [entry_of(r) for r in rows], total

    async def key_paths(self, scope: Scope, q: Query, field: str, prefix: Sequence[str],
                        now: float) -> list[bytes]:
        """The distinct JSON arrays under key member `field` that `q` lets `scope` read, with
        `prefix`'s elements ("*": any) leading."""
        if any("\x00" in el for el in prefix):
            return []  # no key read here holds U+0000 (postgres/filters.py)
        p = Params()
        where = read_where(scope, q, now, p) + prefix_range([leading(field, prefix)], p)
        member = f"({pg_filters.KEY} -> {p(field)}::text)"
        extra = "".join(f" AND ({member} -> {i}) = to_jsonb({p(el)}::text)"
                        for i, el in enumerate(prefix) if el != "*")
        rows = await self.pool.fetch(
            f"SELECT DISTINCT {member}::text FROM a2e_entries e WHERE {where}"
            f" AND jsonb_typeof({member}) = 'array'{extra}", *p.values)
        return [r[0].encode() for r in rows]

    async def count_by_tier(self, now: float) -> dict[str, int]:
        """Live entries by tier (a scan: the metrics endpoint calls it at most every few
        seconds)."""
        rows = await self.pool.fetch(
            "SELECT tier, count(*) FROM a2e_entries"
            " WHERE expires_at IS NULL OR expires_at > $1 GROUP BY tier", now)
        return {r[0]: int(r[1]) for r in rows}

    async def client_vectors(self, scope: Scope, q: Query, space: str, now: float
                             ) -> tuple[int, list[tuple[int, np.ndarray]]]:
        """The dimension of `space` (0: none) and the readable entries' vectors in it."""
        p = Params()
        where = read_where(scope, q, now, p)
        return await pg_ext.read_vectors(self.pool, scope.namespace, space, where, p, p.values)

    async def fetch(
        self, scope: Scope, q: Query, ids: Sequence[int], now: float
    ) -> list[StoredEntry]:
        """The entries among row `ids` that `q` lets `scope` read (visibility checked again),
        with `id` set; any order."""
        if not len(ids):
            return []
        p = Params()
        where = read_where(scope, q, now, p)
        rows = await self.pool.fetch(
            f"SELECT {COLUMNS}, e.id FROM a2e_entries e"
            f" WHERE e.id = ANY({p([int(i) for i in ids])}::bigint[]) AND {where}", *p.values)
        return [entry_of(r, r[AFTER]) for r in rows]

    async def neighbours(
        self, scope: Scope, q: Query, hits: Sequence[tuple[int, str, str]], span: int,
        now: float,
    ) -> list[tuple[StoredEntry, int, int]]:
        """For each `(id, tier, owner)` of `hits`, the up to `span` entries `q` lets `scope`
        read right before and after it in its own (namespace, tier, owner) by row id: `(entry,
        hit id, distance)`. One round trip; each side is a walk of `a2e_entries_newest` from
        the hit (other groups' rows are never read)."""
        if span <= 0 or not hits:
            return []
        p = Params()
        ids = p([int(h[0]) for h in hits])
        tiers = p([h[1] for h in hits])
        owners = p([h[2] for h in hits])
        where = read_where(scope, q, now, p)
        limit = p(int(span))
        ns = p(scope.namespace)

        def side(after: str, order: str) -> str:
            return (f"SELECT {COLUMNS}, e.id FROM a2e_entries e WHERE e.namespace = {ns}"
                    f" AND e.tier = h.tier AND e.owner = h.owner AND {after} AND {where}"
                    f" ORDER BY {order} LIMIT {limit}")

        rows = await self.pool.fetch(
            f"SELECT n.*, h.hit FROM unnest({ids}::bigint[], {tiers}::text[], {owners}::text[])"
            " AS h(hit, tier, owner) CROSS JOIN LATERAL ("
            " SELECT x.*, row_number() OVER (ORDER BY x.id DESC) AS d FROM ("
            f"{side('-e.id > -h.hit', '-e.id')}) x UNION ALL"
            " SELECT y.*, row_number() OVER (ORDER BY y.id) AS d FROM ("
            f"{side('-e.id < -h.hit', '-e.id DESC')}) y) n", *p.values)
        return [(entry_of(r, r[AFTER]), int(r[AFTER + 2]), int(r[AFTER + 1])) for r in rows]
