"""How full each tenant is, on SQLite (`host.store.growth.usage_sql` over the `usage` table)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

from host.store.growth import UsageSummary, summary_of, usage_sql
from host.store.records import Quotas

__all__ = ["agents_usage", "quota_usage", "usage_of"]

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


def agents_usage(conn: sqlite3.Connection, namespaces: Sequence[str]
                 ) -> dict[str, dict[str, tuple[int, int]]]:
    """(entries, bytes) of each agent holding entries in `namespaces`, by namespace."""
    out: dict[str, dict[str, tuple[int, int]]] = {}
    for ns, agent, n, b in conn.execute(
            "SELECT namespace, agent, entries, bytes FROM usage WHERE namespace IN"
            " (SELECT value FROM json_each(?)) AND agent <> '' AND entries > 0",
            (json.dumps(list(namespaces)),)):
        out.setdefault(ns, {})[agent] = (int(n), int(b))
    return out
