"""The SQL of the store extensions on SQLite: client vectors, TTL refresh, sweep, key paths.

Plain functions over one `sqlite3.Connection`, like `host.store.sqlite.ops` (whose `_where`
gives every read here the same visibility, liveness and filters as a retrieve). Write
functions run in the writer's transaction.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence

import numpy as np

from host.store.base import Query, Scope, owner_for
from host.store.sqlite.changes import log_change
from host.store.sqlite.deferred import Deferred
from host.store.sqlite.filters import NO_NUL_KEY, json_path
from host.store.sqlite.ops import _removed, _where

__all__ = [
    "client_vectors",
    "key_paths",
    "refresh_entries",
    "sweep_expired",
]


def client_vectors(conn: sqlite3.Connection, scope: Scope, q: Query, space: str, now: float
                   ) -> tuple[int, list[tuple[int, np.ndarray]]]:
    """The dimension of `space` in the namespace (0: no such space) and the (row id, unit
    vectors) of every live entry `q` lets `scope` read that has vectors in it."""
    row = conn.execute("SELECT dims FROM client_spaces WHERE namespace = ? AND space = ?",
                       (scope.namespace, space)).fetchone()
    if row is None:
        return 0, []
    dims = int(row[0])
    where, params = _where(scope, q, now)
    rows = conn.execute(
        f"SELECT e.id, v.vecs FROM entries e JOIN client_vectors v ON v.entry_id = e.id"
        f" WHERE {where} AND v.space = ?", [*params, space]).fetchall()
    return dims, [(r[0], np.frombuffer(r[1], dtype=np.float32).reshape(-1, dims))
                  for r in rows]


def refresh_entries(conn: sqlite3.Connection, scope: Scope, tiers: Sequence[str],
                    keys: Sequence[bytes], now: float) -> int:
    """Restart the TTL of the live entries under `keys` in `tiers` that have one: they expire
    `ttl` seconds after `now`. Nothing else changes (`updated_at` included); the number moved.
    The entries are queued for the embedding worker, which finds their vectors current and
    only moves their expiry in the search's in-memory index."""
    if not keys or not tiers:
        return 0
    where, params = _where(scope, Query(tiers=tuple(tiers), keys=tuple(keys)), now)
    ids = conn.execute(
        f"UPDATE entries AS e SET expires_at = ? + e.ttl WHERE {where} AND e.ttl > 0"
        " RETURNING id", [now, *params]).fetchall()
    conn.executemany("INSERT OR IGNORE INTO embed_queue (entry_id) VALUES (?)", ids)
    return len(ids)


def sweep_expired(conn: sqlite3.Connection, scope: Scope, tiers: Sequence[str], now: float,
                  deferred: Deferred | None = None) -> int:
    """Delete the expired entries of `scope`'s namespace in `tiers` that `scope` may see (its
    own episodic ones, the semantic ones); the number deleted, logged as `expired`."""
    if not tiers:
        return 0
    vis = " OR ".join(["(tier = ? AND owner = ?)"] * len(tiers))
    params: list[object] = [scope.namespace]
    for t in tiers:
        params += (t, owner_for(t, scope.agent))
    gone = conn.execute(
        f"DELETE FROM entries WHERE namespace = ? AND ({vis}) AND expires_at IS NOT NULL"
        " AND expires_at <= ? RETURNING tier, owner, key, tags", [*params, now]).fetchall()
    if gone:
        log_change(conn, scope.namespace, "expired", _removed(gone), now)
        if deferred is None:
            Deferred().flush(conn)
    return len(gone)


def key_paths(conn: sqlite3.Connection, scope: Scope, q: Query, field: str,
              prefix: Sequence[str], now: float) -> Iterator[str]:
    """The distinct JSON texts of key member `field` (arrays) among the live entries `q` lets
    `scope` read, whose leading elements match `prefix` ("*" matches any)."""
    if any("\x00" in el for el in prefix):
        return  # no key read here holds U+0000 (sqlite/filters.py)
    member = json_path((field,))
    where, params = _where(scope, q, now)
    sql = [f"SELECT DISTINCT json_extract(e.key, '{member}') FROM entries e WHERE {where}"
           f" AND json_type(e.key, '{member}') = 'array' AND {NO_NUL_KEY}"]
    for i, element in enumerate(prefix):
        if element != "*":
            sql.append(f"json_extract(e.key, '{member}[{i}]') = ?")
            params.append(element)
    for (text,) in conn.execute(" AND ".join(sql), params):
        yield text
