"""Client-supplied vectors on PostgreSQL (the store extension; the baseline's `a2e_client_vectors`).

A put with vectors checks each entry's space first (`spaces_fit`: a space's first vectors fix
its dimension, across hosts), then writes its entries through the group commit, then their
vectors (`write_vectors`), keyed by the entry's address and the digest of the content they
came with; `read_vectors` joins them only to entries whose content still has that digest.
Every put of an address deletes its client vectors in the put's transaction (queueing the entry
for the host's embedder when it had some: `a2e_put_group`), so a plain put replacing an entry
with vectors is embedded again, whatever its text. The vectors' transaction follows the
entries' commit and takes the entry out of the embedding queue, dropping a host vector of an
earlier text: an entry with client vectors is not embedded by the host (as on SQLite). A crash
between the two leaves the entry as a plain one (found by a retrieve and embedded by the host,
not found by a vector search) until it is stored again.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from host.store.changes import whole_changes
from host.store.records import ClientRows, NewEntry, Scope, owner_for

__all__ = ["PENDING_SECONDS", "ROWS_OF", "SPACE_ROWS", "client_changes", "client_rows",
           "client_rows_of", "digest", "pending_before", "read_vectors", "space_dims",
           "space_head", "spaces_fit", "write_vectors"]


def digest(content: bytes) -> bytes:
    """The digest of an entry's content as the database computes it (`sha256` of its UTF-8)."""
    return hashlib.sha256(content).digest()


async def spaces_fit(pool: Any, namespace: str, entries: Sequence[NewEntry]) -> list[bool]:
    """For each entry, True when it has no vectors or they have its space's dimension; the
    spaces new to the namespace are recorded with the dimension of their first entry."""
    first: dict[str, int] = {}
    for e in entries:
        if e.vectors:
            first.setdefault(e.vector_space, e.dims)
    if not first:
        return [True] * len(entries)
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(
            "INSERT INTO a2e_client_spaces (namespace, space, dims)"
            " SELECT $1, s, d FROM unnest($2::text[], $3::int[]) AS x(s, d)"
            " ON CONFLICT (namespace, space) DO NOTHING",
            namespace, list(first), list(first.values()))
        rows = await conn.fetch("SELECT space, dims FROM a2e_client_spaces WHERE namespace = $1"
                                " AND space = ANY($2::text[])", namespace, list(first))
    dims = {r[0]: int(r[1]) for r in rows}
    return [not e.vectors or dims.get(e.vector_space) == e.dims for e in entries]


async def write_vectors(pool: Any, scope: Scope, entries: Sequence[NewEntry]) -> None:
    """The vectors of `entries` (stored ones; the last entry of an address wins, as in the
    put), under the namespace's lock, for the entries that still hold the content they came
    with (a later put of the address removed the put's client vectors and would be undone).

    Those entries are not embedded by the host (as on SQLite,
    `host.store.sqlite.client_vectors`): in the same transaction they leave the embedding queue
    (the put's trigger queued them) and a vector the host computed for an earlier text goes. In
    two statements, so the second sees a vector an embedding worker committed while the first
    waited for its queue row (the worker's own write finds the row gone and writes nothing)."""
    last: dict[tuple[str, str, bytes], NewEntry] = {}
    for e in entries:
        address = (e.tier, owner_for(e.tier, scope.agent), e.key)
        last.pop(address, None)
        last[address] = e
    given = {a: e for a, e in last.items() if e.vectors}
    if not given:
        return
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("SELECT a2e_lock_namespace($1)", scope.namespace)
        rows = await conn.fetch(
            "WITH t AS (SELECT e.id, e.tier, e.owner, a2e_key_hash(e.key) AS key_hash, t.digest,"
            "  t.space, t.vecs"
            "  FROM unnest($2::text[], $3::text[], $4::text[], $5::bytea[], $6::text[],"
            "  $7::bytea[]) AS t(tier, owner, key, digest, space, vecs)"
            "  JOIN a2e_entries e ON e.namespace = $1 AND e.tier = t.tier AND e.owner = t.owner"
            "  AND a2e_key_hash(e.key) = a2e_key_hash(t.key) AND e.key = t.key"
            "  AND sha256(convert_to(e.content, 'UTF8')) = t.digest),"
            " i AS (INSERT INTO a2e_client_vectors"
            "  (namespace, tier, owner, key_hash, digest, space, vecs)"
            "  SELECT $1, tier, owner, key_hash, digest, space, vecs FROM t"
            "  ON CONFLICT (namespace, tier, owner, key_hash) DO UPDATE SET"
            "  digest = excluded.digest, space = excluded.space, vecs = excluded.vecs)"
            " SELECT id FROM t ORDER BY id",
            scope.namespace, [a[0] for a in given], [a[1] for a in given],
            [a[2].decode() for a in given], [digest(e.content) for e in given.values()],
            [e.vector_space for e in given.values()], [e.vectors for e in given.values()])
        ids = [int(r[0]) for r in rows]
        await conn.execute("DELETE FROM a2e_embed_queue WHERE entry_id = ANY($1::bigint[])", ids)
        await conn.execute("DELETE FROM a2e_vectors WHERE entry_id = ANY($1::bigint[])", ids)


async def read_vectors(pool: Any, namespace: str, space: str, where: str,
                       p: Callable[[Any], str], values: list[Any]
                       ) -> tuple[int, list[tuple[int, np.ndarray]]]:
    """The dimension of `space` (0: none) and the vectors of the entries `where` selects."""
    dims = await pool.fetchval("SELECT dims FROM a2e_client_spaces WHERE namespace = $1"
                               " AND space = $2", namespace, space)
    if dims is None:
        return 0, []
    sql = (f"SELECT e.id, v.vecs FROM a2e_entries e JOIN a2e_client_vectors v"
           f" ON v.namespace = e.namespace AND v.tier = e.tier AND v.owner = e.owner"
           f" AND v.key_hash = a2e_key_hash(e.key)"
           f" AND v.digest = sha256(convert_to(e.content, 'UTF8'))"
           f" WHERE {where} AND v.space = {p(space)}")
    rows = await pool.fetch(sql, *values)
    d = int(dims)
    return d, [(int(r[0]), np.frombuffer(r[1], dtype=np.float32).reshape(-1, d)) for r in rows]


# -- the reads of the host's in-memory client spaces (`host.search.client_vectors`) -----------
# The entry rows with client vectors of the content they hold now (the join `read_vectors`
# makes), as (id, tier, owner, expires_at, vecs): live or not, the reader checks liveness.
_JOINED = ("FROM a2e_entries e JOIN a2e_client_vectors v ON v.namespace = e.namespace"
           " AND v.tier = e.tier AND v.owner = e.owner AND v.key_hash = a2e_key_hash(e.key)"
           " AND v.digest = sha256(convert_to(e.content, 'UTF8'))")
SPACE_ROWS = (f"SELECT e.id, e.tier, e.owner, e.expires_at, v.vecs {_JOINED}"
              " WHERE e.namespace = $1 AND v.space = $2 ORDER BY e.id")
ROWS_OF = (f"SELECT e.id, e.tier, e.owner, e.expires_at, v.vecs {_JOINED}"
           " WHERE e.id = ANY($1::bigint[]) AND v.space = $2 ORDER BY e.id")
# How long after its `stored` change an entry without client vectors may still get them: a
# put writes them in a transaction of its own right after the entries' commit, so a reader
# between the two would take the change as applied and never read them. A catch-up or a load
# stops before such a change that recent (each catch-up reads it again till it has vectors or
# is older), so plain puts of the namespace are read again for that long.
PENDING_SECONDS = 30.0
_PENDING = ("SELECT min(k.seq) FROM a2e_change_keys k JOIN a2e_changes c"
            " ON c.namespace = k.namespace AND c.seq = k.seq"
            " JOIN a2e_entries e ON e.id = k.entry_id"
            " WHERE k.namespace = $1 AND k.seq > $2 AND k.seq <= $3 AND c.at > $4"
            " AND NOT EXISTS (SELECT 1 FROM a2e_client_vectors v WHERE v.namespace = e.namespace"
            " AND v.tier = e.tier AND v.owner = e.owner AND v.key_hash = a2e_key_hash(e.key)"
            " AND v.digest = sha256(convert_to(e.content, 'UTF8')))")


def client_rows(rows: Sequence[Any], dims: int) -> ClientRows:
    """Rows of `SPACE_ROWS` / `ROWS_OF` as a batch of `ClientRows` (vectors of another
    dimension than the space's are left out)."""
    size = 4 * dims
    good = [r for r in rows if r[4] and len(r[4]) % size == 0]
    vecs = np.frombuffer(b"".join(r[4] for r in good), dtype=np.float32).reshape(-1, dims)
    return ([int(r[0]) for r in good], [len(r[4]) // size for r in good], vecs,
            [(r[1], r[2]) for r in good], [r[3] for r in good])


async def space_dims(conn: Any, namespace: str, space: str) -> int:
    """The dimension of `space` in `namespace` (0: no vector was stored in it yet)."""
    dims = await conn.fetchval("SELECT dims FROM a2e_client_spaces WHERE namespace = $1"
                               " AND space = $2", namespace, space)
    return int(dims) if dims is not None else 0


async def pending_before(conn: Any, namespace: str, after: int, upto: int) -> int:
    """`upto`, or one less than the first change in (`after`, `upto`] stored less than
    `PENDING_SECONDS` ago whose entry has no client vectors of its content yet."""
    first = await conn.fetchval(_PENDING, namespace, after, upto,
                                time.time() - PENDING_SECONDS)
    return upto if first is None else int(first) - 1


async def space_head(conn: Any, namespace: str) -> int:
    """The change number a load of the namespace's client spaces is current to, on `conn`'s
    snapshot (`pending_before` the namespace's newest change)."""
    head = int(await conn.fetchval(
        "SELECT coalesce((SELECT seq FROM a2e_change_heads WHERE namespace = $1), 0)",
        namespace))
    return await pending_before(conn, namespace, 0, head)


async def client_changes(pool: Any, namespace: str, after: int, limit: int
                         ) -> tuple[int, list[int] | None]:
    """The entry rows stored in `namespace`'s changes after `after`, a page at a time, as
    `host.store.sqlite.extensions.client_changes` gives them (whole changes, about `limit`
    rows; None when the log was pruned past `after`), from `a2e_change_keys` (the entry rows
    of each `stored` change, current ids). The number read up to stops before a change whose
    entry may still get its vectors (`pending_before`); its rows come again."""
    async with pool.acquire() as conn:  # the head read first: what follows is up to it
        row = await conn.fetchrow("SELECT seq, floor FROM a2e_change_heads WHERE namespace = $1",
                                  namespace)
        head, floor = (int(row[0]), int(row[1])) if row is not None else (0, 0)
        if head <= after:
            return after, []
        if floor > after:
            return head, None
        rows = await conn.fetch(
            "SELECT seq, entry_id FROM a2e_change_keys WHERE namespace = $1 AND seq > $2"
            " AND seq <= $3 ORDER BY seq LIMIT $4", namespace, after, head, limit + 1)
        upto, rows, whole = whole_changes(list(rows), limit, head)
        if whole:  # one change larger than the limit: read it whole
            rows = await conn.fetch("SELECT seq, entry_id FROM a2e_change_keys"
                                    " WHERE namespace = $1 AND seq = $2", namespace, upto)
        upto = await pending_before(conn, namespace, after, upto)
        return upto, list(dict.fromkeys(int(r[1]) for r in rows))


async def client_rows_of(pool: Any, ids: Sequence[int], space: str, dims: int) -> ClientRows:
    """The entries among row `ids` that have vectors in `space` now, with them."""
    rows = await pool.fetch(ROWS_OF, [int(i) for i in ids], space)
    return client_rows(rows, dims)
