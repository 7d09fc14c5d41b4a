"""The change log on SQLite (`host.store.changes`): plain functions over one connection.

`changes` (schema migration 5) holds one row a committed request that changed entries; its
rowid `seq` (AUTOINCREMENT: never reused, even after pruning) is the cursor, strictly
increasing in commit order because one writer commits at a time. `change_floor` keeps the
highest `seq` pruned from each namespace. The write functions of `host.store.sqlite.ops` call `log_change`
inside their transaction, whoever runs them (the wire path, the library, the CLI).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from host.store.changes import Change, encode_records

__all__ = ["changes_after", "floor", "head", "heads", "log_change", "prune"]

_PRUNE_BATCH = 1000  # changes one DELETE removes at most


def log_change(conn: sqlite3.Connection, namespace: str, op: str, records: Sequence[tuple],
               now: float) -> int:
    """Append one change (inside the caller's transaction); its sequence number."""
    cur = conn.execute("INSERT INTO changes (namespace, at, op, entries) VALUES (?, ?, ?, ?)",
                       (namespace, now, op, encode_records(records)))
    return int(cur.lastrowid or 0)


def floor(conn: sqlite3.Connection, namespace: str) -> int:
    """The highest sequence pruned from `namespace` (0: none)."""
    row = conn.execute("SELECT seq FROM change_floor WHERE namespace = ?", (namespace,)).fetchone()
    return int(row[0]) if row else 0


def head(conn: sqlite3.Connection, namespace: str) -> int:
    """The newest sequence of `namespace`, or its floor when the log holds none of it."""
    row = conn.execute("SELECT max(seq) FROM changes WHERE namespace = ?", (namespace,)).fetchone()
    return max(int(row[0] or 0), floor(conn, namespace))


def heads(conn: sqlite3.Connection, namespaces: Sequence[str]) -> dict[str, int]:
    """`head` of each of `namespaces`."""
    return {ns: head(conn, ns) for ns in namespaces}


def changes_after(conn: sqlite3.Connection, namespace: str, after: int, limit: int) -> list[Change]:
    """Up to `limit` changes of `namespace` after `after`, in order."""
    return [Change(int(r[0]), r[1], r[2]) for r in conn.execute(
        "SELECT seq, op, entries FROM changes WHERE namespace = ? AND seq > ? ORDER BY seq LIMIT ?",
        (namespace, after, limit))]


def _raise_floors(conn: sqlite3.Connection, cut: dict[str, int]) -> None:
    conn.executemany(
        "INSERT INTO change_floor (namespace, seq) VALUES (?, ?) ON CONFLICT (namespace)"
        " DO UPDATE SET seq = max(seq, excluded.seq)", list(cut.items()))


def prune(conn: sqlite3.Connection, before: float, max_rows: int) -> int:
    """Delete changes older than `before` and those past the newest `max_rows` of their
    namespace (inside the caller's transaction), raising the floors; the number deleted."""
    cut: dict[str, int] = {}
    n = 0
    while True:
        rows = conn.execute(
            "DELETE FROM changes WHERE seq IN (SELECT seq FROM changes WHERE at < ?"
            " ORDER BY seq LIMIT ?) RETURNING namespace, seq", (before, _PRUNE_BATCH)).fetchall()
        for ns, seq in rows:
            cut[ns] = max(cut.get(ns, 0), seq)
        n += len(rows)
        if len(rows) < _PRUNE_BATCH:
            break
    over = conn.execute("SELECT namespace FROM changes GROUP BY namespace HAVING count(*) > ?",
                        (max_rows,)).fetchall()
    for (ns,) in over:
        (last,) = conn.execute("SELECT seq FROM changes WHERE namespace = ? ORDER BY seq DESC"
                               " LIMIT 1 OFFSET ?", (ns, max_rows)).fetchone()
        n += conn.execute("DELETE FROM changes WHERE namespace = ? AND seq <= ?",
                          (ns, last)).rowcount
        cut[ns] = max(cut.get(ns, 0), last)
    if cut:
        _raise_floors(conn, cut)
    return n
