"""How full each tenant is, on SQLite (`host.store.growth.usage_sql` over the `usage` table)."""

from __future__ import annotations

import sqlite3

from host.store.base import Quotas
from host.store.growth import UsageSummary, summary_of, usage_sql

__all__ = ["quota_usage"]

_HISTOGRAM, _TOP = (sql.format(table="usage") for sql in usage_sql(lambda i: f"?{i}", "max"))


def quota_usage(conn: sqlite3.Connection, quotas: Quotas, top: int) -> UsageSummary:
    """Tenants by usage fraction and the `top` fullest (one read of the quota counters)."""
    q = (quotas.max_entries_per_namespace, quotas.max_bytes_per_namespace,
         quotas.max_entries_per_agent, quotas.max_bytes_per_agent)
    return summary_of(quotas, conn.execute(_HISTOGRAM, q).fetchall(),
                      conn.execute(_TOP, (*q, top)).fetchall())
