"""The SQL of the store extensions on SQLite: client vectors, TTL refresh, sweep, key paths.

Plain functions over one `sqlite3.Connection`, like `host.store.sqlite.reads` (whose `read_where`
gives every read here the same visibility, liveness and filters as a retrieve). Write
functions run in the writer's transaction.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Sequence

import numpy as np

from host.store.changes import whole_changes
from host.store.key_index import leading
from host.store.records import Query, Scope, owner_for
from host.store.sqlite import changes
from host.store.sqlite.changes import log_change
from host.store.sqlite.deferred import Deferred
from host.store.sqlite.filters import NO_NUL_KEY, json_path
from host.store.sqlite.reads import read_where
from host.store.sqlite.scan_index import prefix_range
from host.store.sqlite.writes import removed_records

__all__ = [
    "CLIENT_ROWS_ON_LOOP",
    "client_changes",
    "client_rows_of",
    "client_space_dims",
    "client_space_rows",
    "client_vectors",
    "key_path_texts",
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
    where, params = read_where(scope, q, now)
    rows = conn.execute(
        f"SELECT e.id, v.vecs FROM entries e JOIN client_vectors v ON v.entry_id = e.id"
        f" WHERE {where} AND v.space = ?", [*params, space]).fetchall()
    return dims, [(r[0], np.frombuffer(r[1], dtype=np.float32).reshape(-1, dims))
                  for r in rows]


# entries whose client vectors `client_rows_of` reads on the loop (~2 ms for 512 of 384
# numbers: a rescoring's); more in a thread (`SQLiteEntryStore.client_rows_of`)
CLIENT_ROWS_ON_LOOP = 512

# A batch of a space's rows as the search's index loads them (`client_space_rows`): the entry
# ids, how many vectors each has, their vectors one after the other (float32, (sum, dims)),
# the (tier, owner) and the expiry of each entry
ClientRows = tuple[list[int], list[int], np.ndarray, list[tuple[str, str]], list[float | None]]


def client_space_dims(conn: sqlite3.Connection, namespace: str, space: str) -> int:
    """The dimension of `space` in `namespace` (0: no vector was stored in it yet)."""
    row = conn.execute("SELECT dims FROM client_spaces WHERE namespace = ? AND space = ?",
                       (namespace, space)).fetchone()
    return int(row[0]) if row is not None else 0


def _client_rows(rows: Sequence[tuple[int, str, str, float | None, bytes]], dims: int
                 ) -> ClientRows:
    size = 4 * dims
    good = [r for r in rows if r[4] and len(r[4]) % size == 0]
    vecs = np.frombuffer(b"".join(r[4] for r in good), dtype=np.float32).reshape(-1, dims)
    return ([r[0] for r in good], [len(r[4]) // size for r in good], vecs,
            [(r[1], r[2]) for r in good], [r[3] for r in good])


def client_space_rows(conn: sqlite3.Connection, namespace: str, space: str, dims: int,
                      batch: int = 10_000) -> Iterator[ClientRows]:
    """Every entry of `namespace` with vectors in `space` (live or not: the reader checks
    liveness), `batch` entries at a time, in one statement (one snapshot)."""
    cur = conn.execute(
        "SELECT e.id, e.tier, e.owner, e.expires_at, v.vecs FROM entries e"
        " INDEXED BY entries_order JOIN client_vectors v ON v.entry_id = e.id"
        " WHERE e.namespace = ? AND v.space = ?", (namespace, space))
    while rows := cur.fetchmany(batch):
        yield _client_rows(rows, dims)


def client_changes(conn: sqlite3.Connection, namespace: str, after: int, limit: int
                   ) -> tuple[int, list[int] | None]:
    """What changed the client vectors of `namespace` after its change number `after` (the
    change log, `host/store/sqlite/changes.py`: every put logs a `stored` change tied to the
    rows it wrote), a page at a time: (the change number read up to, the ids of the entry rows
    stored in the changes after `after` up to it). A page holds about `limit` rows and whole
    changes only (fewer when the limit falls inside a change; a single larger change comes
    whole); read from the number returned until it comes back unchanged. The ids are None when
    the log was pruned past `after` (they cannot be told: the reader reloads the space).
    Deletes are not listed (the rows are gone: the reader drops what it finds gone)."""
    head = changes.head(conn, namespace)
    if head <= after:
        return after, []
    if changes.floor(conn, namespace) > after:
        return head, None
    rows = conn.execute(
        "SELECT c.seq, k.entry_id FROM changes c JOIN change_keys k ON k.change_id = c.id"
        " WHERE c.namespace = ? AND c.seq > ? AND c.seq <= ? AND c.op = 'stored'"
        " ORDER BY c.seq LIMIT ?", (namespace, after, head, limit + 1)).fetchall()
    upto, rows, whole = whole_changes(rows, limit, head)
    if whole:  # one change larger than the limit: read it whole
        rows = conn.execute(
            "SELECT c.seq, k.entry_id FROM changes c JOIN change_keys k"
            " ON k.change_id = c.id WHERE c.namespace = ? AND c.seq = ?",
            (namespace, upto)).fetchall()
    return upto, list(dict.fromkeys(int(r[1]) for r in rows))


def client_rows_of(conn: sqlite3.Connection, ids: Sequence[int], space: str, dims: int
                   ) -> ClientRows:
    """The entries among row `ids` that have vectors in `space` now, with them."""
    rows = conn.execute(
        "SELECT e.id, e.tier, e.owner, e.expires_at, v.vecs FROM json_each(?) AS ids"
        " CROSS JOIN entries e ON e.id = ids.value JOIN client_vectors v ON v.entry_id = e.id"
        " WHERE v.space = ?", (json.dumps([int(i) for i in ids]), space)).fetchall()
    return _client_rows(rows, dims)


def refresh_entries(conn: sqlite3.Connection, scope: Scope, tiers: Sequence[str],
                    keys: Sequence[bytes], now: float) -> int:
    """Restart the TTL of the live entries under `keys` in `tiers` that have one: they expire
    `ttl` seconds after `now`. Nothing else changes (`updated_at` included); the number moved.
    The entries with a vector of the host's embedder are queued for the embedding worker,
    which finds their vectors current and only moves their expiry in the search's in-memory
    index (when their namespace is loaded); the others are queued already, or keep client
    vectors only (whose index rows carry no expiry: a read checks it)."""
    if not keys or not tiers:
        return 0
    where, params = read_where(scope, Query(tiers=tuple(tiers), keys=tuple(keys)), now)
    ids = conn.execute(
        f"UPDATE entries AS e SET expires_at = ? + e.ttl WHERE {where} AND e.ttl > 0"
        " RETURNING id", [now, *params]).fetchall()
    conn.executemany("INSERT OR IGNORE INTO embed_queue (entry_id) SELECT entry_id"
                     " FROM vectors WHERE entry_id = ?", ids)
    return len(ids)


def sweep_expired(conn: sqlite3.Connection, scope: Scope, tiers: Sequence[str], now: float,
                  deferred: Deferred | None = None, batch: int = 0) -> int:
    """Delete the expired entries of `scope`'s namespace in `tiers` that `scope` may see (its
    own episodic ones, the semantic ones), at most `batch` of them (0: all), soonest expired
    first (through the expiry index: a large namespace's live rows are not walked); the number
    deleted, logged as one `expired` change (call again while it is `batch`)."""
    if not tiers:
        return 0
    vis = " OR ".join(["(tier = ? AND owner = ?)"] * len(tiers))
    params: list[object] = [scope.namespace]
    for t in tiers:
        params += (t, owner_for(t, scope.agent))
    gone = conn.execute(
        "DELETE FROM entries WHERE id IN (SELECT id FROM entries INDEXED BY entries_expiry"
        f" WHERE expires_at IS NOT NULL AND expires_at <= ? AND namespace = ? AND ({vis})"
        " ORDER BY expires_at LIMIT ?) RETURNING tier, owner, key, tags",
        [now, *params, batch if batch > 0 else -1]).fetchall()
    if gone:
        log_change(conn, scope.namespace, "expired", removed_records(gone), now)
        if deferred is None:
            Deferred().flush(conn)
    return len(gone)


def key_path_texts(conn: sqlite3.Connection, scope: Scope, q: Query, field: str,
                   prefix: Sequence[str], now: float) -> list[bytes]:
    """`key_paths` read whole, as UTF-8."""
    return [t.encode() for t in key_paths(conn, scope, q, field, prefix, now)]


def key_paths(conn: sqlite3.Connection, scope: Scope, q: Query, field: str,
              prefix: Sequence[str], now: float) -> Iterator[str]:
    """The distinct JSON texts of key member `field` (arrays) among the live entries `q` lets
    `scope` read, whose leading elements match `prefix` ("*" matches any)."""
    if any("\x00" in el for el in prefix):
        return  # no key read here holds U+0000 (sqlite/filters.py)
    member = json_path((field,))
    where, params = read_where(scope, q, now)
    span, span_params = prefix_range([leading(field, prefix)])  # an index range, if any
    sql = [f"SELECT DISTINCT json_extract(e.key, '{member}') FROM entries e WHERE {where}{span}"
           f" AND json_type(e.key, '{member}') = 'array' AND {NO_NUL_KEY}"]
    params += span_params
    for i, element in enumerate(prefix):
        if element != "*":
            sql.append(f"json_extract(e.key, '{member}[{i}]') = ?")
            params.append(element)
    for (text,) in conn.execute(" AND ".join(sql), params):
        yield text
