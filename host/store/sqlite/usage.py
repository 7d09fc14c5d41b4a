"""How full each tenant is, on SQLite (`host.store.growth.usage_sql` over the `usage` table)."""

from __future__ import annotations

import sqlite3

from host.store.growth import UsageSummary, summary_of, usage_sql
from host.store.records import Quotas

__all__ = ["quota_usage", "usage_of"]

_HISTOGRAM, _TOP = (sql.format(table="usage") for sql in usage_sql(lambda i: f"?{i}", "max"))


def quota_usage(conn: sqlite3.Connection, quotas: Quotas, top: int) -> UsageSummary:
    """Tenants by usage fraction and the `top` fullest (one read of the quota counters)."""
    q = (quotas.max_entries_per_namespace, quotas.max_bytes_per_namespace,
         quotas.max_entries_per_agent, quotas.max_bytes_per_agent)
    return summary_of(quotas, conn.execute(_HISTOGRAM, q).fetchall(),
                      conn.execute(_TOP, (*q, top)).fetchall())


def usage_of(conn: sqlite3.Connection, namespace: str, agent: str
             ) -> tuple[tuple[int, int], tuple[int, int]]:
    """((entries, bytes) of `namespace`, (entries, bytes) of `agent` in it): two rows of the
    quota counters."""
    rows = {a: (int(n), int(b)) for a, n, b in conn.execute(
        "SELECT agent, entries, bytes FROM usage WHERE namespace = ? AND agent IN ('', ?)",
        (namespace, agent))}
    return rows.get("", (0, 0)), rows.get(agent, (0, 0))
