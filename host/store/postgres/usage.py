"""How full each tenant is, on PostgreSQL (`host.store.growth.usage_sql` over `a2e_usage`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from host.store.growth import UsageSummary, summary_of, usage_sql
from host.store.records import Quotas

__all__ = ["OwnUsage", "quota_usage", "usage_of"]

_HISTOGRAM, _TOP = (sql.format(table="a2e_usage")
                    for sql in usage_sql(lambda i: f"${i}::bigint", "greatest"))


async def quota_usage(pool: Any, quotas: Quotas, top: int) -> UsageSummary:
    """Tenants by usage fraction and the `top` fullest (one snapshot of the quota counters)."""
    q = (quotas.max_entries_per_namespace, quotas.max_bytes_per_namespace,
         quotas.max_entries_per_agent, quotas.max_bytes_per_agent)
    async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read",
                                                         readonly=True):
        histogram = await conn.fetch(_HISTOGRAM, *q)
        rows = await conn.fetch(_TOP, *q, top)
    return summary_of(quotas, [tuple(r) for r in histogram], [tuple(r) for r in rows])


async def usage_of(pool: Any, namespace: str, agent: str
                   ) -> tuple[tuple[int, int], tuple[int, int]]:
    """((entries, bytes) of `namespace`, (entries, bytes) of `agent` in it): two rows of the
    quota counters, read in one statement."""
    rows = {r[0]: (int(r[1]), int(r[2])) for r in await pool.fetch(
        "SELECT agent, entries, bytes FROM a2e_usage WHERE namespace = $1 AND agent = ANY($2)",
        namespace, ["", agent])}
    return rows.get("", (0, 0)), rows.get(agent, (0, 0))


class OwnUsage:
    """What one tenant holds, on the PostgreSQL store (`host.store.growth.UsageOf`)."""

    pool: Any

    async def usage_of(self, namespace: str, agent: str
                       ) -> tuple[tuple[int, int], tuple[int, int]]:
        """((entries, bytes) of `namespace`, (entries, bytes) of `agent` in it)."""
        return await usage_of(self.pool, namespace, agent)

    async def agents_usage(self, namespaces: Sequence[str]
                           ) -> dict[str, dict[str, tuple[int, int]]]:
        """(entries, bytes) of each agent holding entries in `namespaces`, by namespace."""
        out: dict[str, dict[str, tuple[int, int]]] = {}
        for r in await self.pool.fetch(
                "SELECT namespace, agent, entries, bytes FROM a2e_usage"
                " WHERE namespace = ANY($1) AND agent <> '' AND entries > 0", list(namespaces)):
            out.setdefault(r[0], {})[r[1]] = (int(r[2]), int(r[3]))
        return out
