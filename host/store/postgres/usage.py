"""How full each tenant is, on PostgreSQL (`host.store.growth.usage_sql` over `a2e_usage`)."""

from __future__ import annotations

from typing import Any

from host.store.base import Quotas
from host.store.growth import UsageSummary, summary_of, usage_sql

__all__ = ["quota_usage"]

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
