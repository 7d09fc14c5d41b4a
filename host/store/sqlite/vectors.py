"""The SQL of similarity search on SQLite: stored vectors, the embedding queue, model identity.

Plain functions over one `sqlite3.Connection`, like `sqlite.reads`: the write functions run in the
store's writer thread (inside its transaction), the reads on the caller's connection. Vectors
are float32 BLOBs of unit length, one per entry, all of the model `search_meta` names, with a
digest of the text they were computed from (a re-stored entry whose text did not change keeps
its vector). The schema is migration 2 of `sqlite.schema`.

Several processes may search one file (a host, `a2e-host mcp`, the library's `SQLiteStore`),
each with its vectors in memory; whichever embeds a queued entry first writes its vector and
dequeues it. So every write of vectors takes the next number of the `vector_seq` counter
(migration 9), and each process reads what was written after the number it last saw
(`vectors_since`): its index gets the vectors the others computed.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Sequence

import numpy as np

from host.store.records import Pending, Query, Scope, StoredEntry, digest
from host.store.sqlite.reads import AFTER, COLUMNS, entry_of, read_where

__all__ = [
    "Pending",
    "allowed_ids",
    "clear_gone",
    "digest",
    "fetch_entries",
    "gone_ids",
    "load_vectors",
    "namespace_vectors",
    "pending",
    "queue_size",
    "requeue_all",
    "set_model",
    "stored_model",
    "vector_seq",
    "vectors_of",
    "vectors_since",
    "write_vectors",
]


# the entries the host embeds: all but those stored with client vectors (found in their space)
_EMBEDDED = ("SELECT id FROM entries e"
             " WHERE NOT EXISTS (SELECT 1 FROM client_vectors c WHERE c.entry_id = e.id)")


def stored_model(conn: sqlite3.Connection) -> tuple[str, int] | None:
    """(name, dim) of the model the stored vectors belong to, or None before the first."""
    rows = dict(conn.execute("SELECT name, value FROM search_meta WHERE name IN ('model', 'dim')"))
    if "model" not in rows:
        return None
    return rows["model"], int(rows.get("dim", 0))


def set_model(conn: sqlite3.Connection, name: str, dim: int) -> bool:
    """Record the current model (write). A different one drops every vector and queues every
    entry for re-embedding (but those with client vectors); returns True when that happened."""
    if stored_model(conn) == (name, dim):
        return False
    conn.execute("DELETE FROM vectors")
    conn.execute("DELETE FROM vectors_gone")
    conn.execute(f"INSERT OR IGNORE INTO embed_queue (entry_id) {_EMBEDDED}")
    conn.executemany(
        "INSERT OR REPLACE INTO search_meta (name, value) VALUES (?, ?)",
        [("model", name), ("dim", str(dim))],
    )
    return True


def requeue_all(conn: sqlite3.Connection) -> int:
    """Queue every entry (but those with client vectors) for re-embedding and forget the text
    digests (write); the count."""
    conn.execute("UPDATE vectors SET digest = x''")
    conn.execute(f"INSERT OR IGNORE INTO embed_queue (entry_id) {_EMBEDDED}")
    return int(conn.execute("SELECT count(*) FROM embed_queue").fetchone()[0])


def queue_size(conn: sqlite3.Connection) -> int:
    """Entries waiting for a vector."""
    return int(conn.execute("SELECT count(*) FROM embed_queue").fetchone()[0])


def pending(
    conn: sqlite3.Connection, limit: int, namespace: str | None = None
) -> list[tuple[Pending, bytes | None]]:
    """Up to `limit` queued entries (of `namespace` only, when given), newest first (what was
    just written is what its agent asks for next), each with the digest of its stored vector
    (None when it has none)."""
    where, args = ("", (limit,)) if namespace is None else (
        " WHERE e.namespace = ?", (namespace, limit))
    rows = conn.execute(
        "SELECT q.entry_id, e.namespace, e.tier, e.owner, e.expires_at, f.body, v.digest"
        " FROM embed_queue q JOIN entries e ON e.id = q.entry_id"
        " JOIN entries_fts f ON f.rowid = q.entry_id"
        " LEFT JOIN vectors v ON v.entry_id = q.entry_id" + where +
        " ORDER BY q.entry_id DESC LIMIT ?",
        args,
    ).fetchall()
    return [(Pending(r[0], r[1], r[2], r[3], r[4], r[5]), r[6]) for r in rows]


def write_vectors(
    conn: sqlite3.Connection, rows: Sequence[tuple[int, str, bytes | None]]
) -> list[int]:
    """Store `(id, text, vector bytes)` rows and dequeue them (write). A row whose entry's text
    changed since it was read is skipped (it stays queued); `None` bytes keep the stored vector
    (its text did not change). The vectors written take the next `vector_seq` number.
    Returns the ids dequeued."""
    done = []
    seq: int | None = None
    for entry_id, text, blob in rows:
        row = conn.execute(  # a deleted entry's keyword row may wait in fts_gone: not it
            "SELECT f.body FROM entries_fts f JOIN entries e ON e.id = f.rowid WHERE f.rowid = ?",
            (entry_id,)).fetchone()
        if row is None or row[0] != text:
            continue
        if blob is not None:
            if seq is None:
                seq = _next_seq(conn)
            conn.execute(
                "INSERT OR REPLACE INTO vectors (entry_id, digest, vec, seq) VALUES (?, ?, ?, ?)",
                (entry_id, digest(text), blob, seq),
            )
        conn.execute("DELETE FROM embed_queue WHERE entry_id = ?", (entry_id,))
        done.append(entry_id)
    return done


def load_vectors(
    conn: sqlite3.Connection, dim: int, batch: int = 10_000
) -> Iterator[tuple[list[Pending], np.ndarray]]:
    """Every stored vector with its entry's place, in batches: (entries, `(n, dim)` float32)."""
    cur = conn.execute(
        "SELECT e.id, e.namespace, e.tier, e.owner, e.expires_at, v.vec"
        " FROM vectors v JOIN entries e ON e.id = v.entry_id ORDER BY e.namespace"
    )
    while rows := cur.fetchmany(batch):
        good = [r for r in rows if len(r[5]) == 4 * dim]
        vecs = np.frombuffer(b"".join(r[5] for r in good), dtype=np.float32).reshape(-1, dim)
        yield [Pending(r[0], r[1], r[2], r[3], r[4], "") for r in good], vecs


def namespace_vectors(
    conn: sqlite3.Connection, namespace: str, dim: int, batch: int = 10_000
) -> Iterator[tuple[list[int], np.ndarray, list[tuple[str, str]], list[float | None]]]:
    """The stored vectors of `namespace`, in batches of `batch` rows, as the search's index
    loads a namespace on its first query: (entry ids, `(n, dim)` float32, (tier, owner) of
    each, expiry of each). A vector of another dimension (a model change half done) is left
    out. One statement read a batch at a time: one snapshot, so what is written meanwhile
    comes with `vectors_since`."""
    cur = conn.execute(
        "SELECT e.id, e.tier, e.owner, e.expires_at, v.vec FROM entries e"
        " INDEXED BY entries_order JOIN vectors v ON v.entry_id = e.id WHERE e.namespace = ?",
        (namespace,))
    size = 4 * dim
    while rows := cur.fetchmany(batch):
        good = [r for r in rows if len(r[4]) == size]
        if not good:
            continue
        vecs = np.frombuffer(b"".join(r[4] for r in good), dtype=np.float32).reshape(-1, dim)
        yield ([r[0] for r in good], vecs, [(r[1], r[2]) for r in good],
               [r[3] for r in good])


def vectors_of(conn: sqlite3.Connection, ids: Sequence[int], dim: int
               ) -> tuple[list[int], np.ndarray]:
    """The stored vectors of entry `ids` (those that have one of `dim` values): (ids, `(n, dim)`
    float32), in no particular order."""
    rows = conn.execute(
        "SELECT v.entry_id, v.vec FROM json_each(?) AS ids CROSS JOIN vectors v"
        " ON v.entry_id = ids.value", (json.dumps([int(i) for i in ids]),)).fetchall()
    good = [r for r in rows if len(r[1]) == 4 * dim]
    vecs = np.frombuffer(b"".join(r[1] for r in good), dtype=np.float32).reshape(-1, dim)
    return [int(r[0]) for r in good], vecs


def _next_seq(conn: sqlite3.Connection) -> int:
    """Take the next `vector_seq` number (write: in the caller's transaction, so the number
    never goes back, whoever deletes vectors)."""
    row = conn.execute(
        "INSERT INTO search_meta (name, value) VALUES ('vector_seq', '1')"
        " ON CONFLICT (name) DO UPDATE SET value = CAST(value AS INTEGER) + 1"
        " RETURNING CAST(value AS INTEGER)").fetchone()
    return int(row[0])


def vector_seq(conn: sqlite3.Connection) -> int:
    """The number of the newest write of vectors (0 before the first)."""
    row = conn.execute("SELECT value FROM search_meta WHERE name = 'vector_seq'").fetchone()
    return int(row[0]) if row is not None else 0


def vectors_since(
    conn: sqlite3.Connection, after: int, dim: int, limit: int = 10_000
) -> tuple[list[Pending], np.ndarray, int]:
    """The stored vectors written after number `after`, oldest write first, whole writes only
    (the vectors of one write share its number): about `limit` rows, fewer when the limit
    falls inside a write (that write comes whole with the next read), more when a single write
    is larger than `limit`. (entries, `(n, dim)` float32, the newest number read, `after` when
    none)."""
    select = ("SELECT e.id, e.namespace, e.tier, e.owner, e.expires_at, v.vec, v.seq"
              " FROM vectors v JOIN entries e ON e.id = v.entry_id")
    rows = conn.execute(f"{select} WHERE v.seq > ? ORDER BY v.seq LIMIT ?",
                        (after, limit)).fetchall()
    if len(rows) >= limit and rows:
        top = int(rows[-1][6])
        if int(rows[0][6]) != top:  # the last write may be cut: it comes whole next time
            rows = [r for r in rows if int(r[6]) < top]
        else:  # one write larger than the limit: read it whole
            rows = conn.execute(f"{select} WHERE v.seq = ?", (top,)).fetchall()
    last = max((int(r[6]) for r in rows), default=after)
    good = [r for r in rows if len(r[5]) == 4 * dim]
    vecs = np.frombuffer(b"".join(r[5] for r in good), dtype=np.float32).reshape(-1, dim)
    return [Pending(r[0], r[1], r[2], r[3], r[4], "") for r in good], vecs, last


def gone_ids(conn: sqlite3.Connection, limit: int = 10_000) -> list[int]:
    """Ids whose vector a delete removed, for the in-memory index to drop."""
    return [r[0] for r in conn.execute("SELECT entry_id FROM vectors_gone LIMIT ?", (limit,))]


def clear_gone(conn: sqlite3.Connection, ids: Sequence[int]) -> None:
    """Forget that `ids` were dropped (write)."""
    conn.executemany("DELETE FROM vectors_gone WHERE entry_id = ?", [(i,) for i in ids])


def neighbour_entries(
    conn: sqlite3.Connection, scope: Scope, q: Query, hits: Sequence[tuple[int, str, str]],
    span: int, now: float,
) -> list[tuple[StoredEntry, int, int]]:
    """For each `(id, tier, owner)` of `hits`, the up to `span` readable entries right before
    and after it in its own (namespace, tier, owner) by row id: `(entry, hit id, distance)`.
    Two reads of the `entries_order` index a hit; other groups' rows are never walked."""
    if span <= 0 or not hits:
        return []
    where, params = read_where(scope, q, now)
    group = "e.namespace = ? AND e.tier = ? AND e.owner = ?"
    out: list[tuple[StoredEntry, int, int]] = []
    for hit, tier, owner in hits:
        for op, order in (("<", "DESC"), (">", "ASC")):
            rows = conn.execute(
                f"SELECT {COLUMNS}, e.id FROM entries e INDEXED BY entries_order"
                f" WHERE {group} AND e.id {op} ? AND {where} ORDER BY e.id {order} LIMIT ?",
                [scope.namespace, tier, owner, int(hit), *params, int(span)],
            ).fetchall()
            out += [(entry_of(r, r[AFTER]), int(hit), d) for d, r in enumerate(rows, start=1)]
    return out


def allowed_ids(conn: sqlite3.Connection, scope: Scope, q: Query, now: float) -> np.ndarray:
    """Row ids of the live entries `q` lets `scope` read (visibility, TTL, keys, tags, the
    validity at `as_of`, the extensions' filters)."""
    where, params = read_where(scope, q, now)
    rows = conn.execute(f"SELECT e.id FROM entries e WHERE {where}", params).fetchall()
    return np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))


def fetch_entries(
    conn: sqlite3.Connection, scope: Scope, q: Query, ids: Sequence[int], now: float
) -> list[StoredEntry]:
    """The entries among `ids` that `q` lets `scope` read (visibility is checked again here),
    each with its `id` set; order unspecified."""
    if not ids:
        return []
    where, params = read_where(scope, q, now)
    # CROSS JOIN keeps the ids loop outside: row-id lookups, never a scan of the namespace
    rows = conn.execute(
        f"SELECT {COLUMNS}, e.id FROM json_each(?) AS ids CROSS JOIN entries e"
        f" ON e.id = ids.value WHERE {where}",
        [json.dumps([int(i) for i in ids]), *params],
    ).fetchall()
    return [entry_of(r, r[AFTER]) for r in rows]
