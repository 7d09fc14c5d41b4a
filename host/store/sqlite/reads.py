"""Entry reads on SQLite: the WHERE of every read (namespace, visibility, liveness, keys, tags,
the store extensions' filters), the entries of `find`, and a read's snapshot.

Plain functions over one `sqlite3.Connection`, as every module of this package: the async
`SQLiteEntryStore` runs them on the event loop (or on the scan readers' threads), the library's
synchronous `SQLiteStore` and the CLI call the same functions, so there is one engine. The
writes are in `host.store.sqlite.writes`, the keyword search in `host.store.sqlite.keyword`.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

import msgspec

from host.store.records import Query, Scope, StoredEntry, owner_for
from host.store.sqlite import filters, scan_index

__all__ = [
    "AFTER",
    "COLUMNS",
    "VALID_AT",
    "entry_of",
    "find_entries",
    "namespace_entries",
    "read_where",
    "snapshot",
    "tag_postings",
]

_tags_decoder = msgspec.json.Decoder(list[str])

# the columns `entry_of` reads, in its order
COLUMNS = ("e.tier, e.owner, e.key, e.content, e.tags, e.source, e.score, e.ttl, e.created_at,"
           " e.updated_at, e.valid_from, e.valid_until")
# the columns after `COLUMNS` start here (a read's `e.id`, ...)
AFTER = 12
# the time extension: only the entries valid at a read's `as_of` ([valid_from, valid_until))
VALID_AT = (" AND (e.valid_from IS NULL OR e.valid_from <= ?)"
            " AND (e.valid_until IS NULL OR e.valid_until > ?)")


def entry_of(r: tuple, id: int | None = None) -> StoredEntry:
    """The entry of a row of `COLUMNS`, with the row id `id` when given."""
    return StoredEntry(
        tier=r[0],
        owner=r[1],
        key=r[2].encode(),
        content=r[3].encode(),
        tags=_tags_decoder.decode(r[4]),
        source=r[5],
        score=r[6],
        ttl=r[7],
        created_at=r[8],
        updated_at=r[9],
        id=id,
        valid_from=r[10],
        valid_until=r[11],
    )


@functools.lru_cache(maxsize=512)
def _where_sql(tiers: int, keys: int, tags: int) -> str:
    """The WHERE text for `tiers` visibility ranges, `keys` keys and `tags` distinct tags (the
    same few shapes come back on every request, so the text is built once a shape)."""
    vis = " OR ".join(["(e.tier = ? AND e.owner = ?)"] * tiers) or "0"
    # with tags (and no keys) the tag postings drive the read: the unary + keeps SQLite from
    # walking the whole visible range of the rank index instead
    ns = "+e.namespace" if tags and not keys else "e.namespace"
    sql = f"{ns} = ? AND ({vis}) AND (e.expires_at IS NULL OR e.expires_at > ?)"
    if keys:
        sql += f" AND e.key IN ({','.join('?' * keys)})"
    if tags:
        # the tag postings of exactly the (namespace, tier, owner) ranges the reader may see:
        # one index range a tier (an OR of the tiers would scan the namespace's postings)
        marks = ",".join("?" * tags)
        per_tier = " UNION ALL ".join(
            ["SELECT t.entry_id FROM entry_tags t WHERE t.namespace = ? AND t.tier = ?"
             f" AND t.owner = ? AND t.tag IN ({marks})"] * tiers
        ) or "SELECT NULL WHERE 0"
        if tags == 1:
            sql += f" AND e.id IN ({per_tier})"
        else:
            sql += (f" AND e.id IN (SELECT entry_id FROM ({per_tier})"
                    " GROUP BY entry_id HAVING count(*) = ?)")
    return sql


def tag_postings(conn: sqlite3.Connection, scope: Scope, q: Query, most: int) -> int:
    """The tag postings a read by `q.tags` walks (each visible range's postings of each of its
    tags), counted up to `most` + 1 through the postings index alone: what such a read costs,
    whatever the size of the namespace."""
    tags = list(dict.fromkeys(q.tags))
    one = ("SELECT 1 FROM entry_tags t WHERE t.namespace = ? AND t.tier = ? AND t.owner = ?"
           f" AND t.tag IN ({','.join('?' * len(tags))})")
    params: list[object] = []
    for tier in q.tiers:
        params += [scope.namespace, tier, owner_for(tier, scope.agent), *tags]
    if not params:
        return 0
    ranges = " UNION ALL ".join([one] * len(q.tiers))
    return int(conn.execute(f"SELECT count(*) FROM (SELECT 1 FROM ({ranges}) LIMIT ?)",
                            [*params, most + 1]).fetchone()[0])


def read_where(scope: Scope, q: Query, now: float) -> tuple[str, list[object]]:
    """The WHERE clause of a read: namespace, visibility, liveness, keys, tags, the validity
    at `as_of`, the extensions' filters."""
    ns = scope.namespace
    owners: list[object] = []
    for tier in q.tiers:
        owners += (tier, owner_for(tier, scope.agent))
    params: list[object] = [ns, *owners, now]
    if q.keys:
        params += [k.decode() for k in q.keys]
    tags = list(dict.fromkeys(q.tags)) if q.tags else []
    if tags:
        for i in range(0, len(owners), 2):
            params += [ns, owners[i], owners[i + 1], *tags]
        if len(tags) > 1:
            params.append(len(tags))
    sql = _where_sql(len(q.tiers), len(q.keys), len(tags))
    if q.as_of is not None:
        sql += VALID_AT
        params += [q.as_of, q.as_of]
    if q.where or q.key_prefix:  # the store extensions' filters (host/store/sqlite/filters.py)
        more, more_params = filters.where_sql(q.where, q.key_prefix)
        # and the index range of a key prefix, where it has one (host/store/sqlite/scan_index.py)
        span, span_params = scan_index.prefix_range(q.key_prefix)
        return sql + more + span, params + more_params + span_params
    return sql, params


def _stored_where(scope: Scope, q: Query, now: float) -> tuple[str, list[object]]:
    """`read_where` plus `q.min_score` on the stored score (the filter of a no-query read)."""
    where, params = read_where(scope, q, now)
    if q.min_score > 0:
        where += " AND e.score >= ?"
        params.append(q.min_score)
    return where, params


def namespace_entries(conn: sqlite3.Connection, namespace: str) -> int:
    """The entries `namespace` holds, expired ones not yet collected included (its `usage`
    row: one point read)."""
    row = conn.execute("SELECT entries FROM usage WHERE namespace = ? AND agent = ''",
                       (namespace,)).fetchone()
    return int(row[0]) if row is not None else 0


def find_entries(
    conn: sqlite3.Connection, scope: Scope, q: Query, now: float
) -> tuple[list[StoredEntry], int]:
    """Entries matching `q` by score desc, updated_at desc: (the first `q.limit`, total).

    Each filter reads through the index that fits it (see EXPLAIN QUERY PLAN): keys through
    the unique key index (the few rows are sorted here), tags through the tag postings of each
    visible range (counted, then paged with a top-`limit` sort). Without either, `total` is counted
    on the rank index alone (it holds score and expires_at) and the page is read per tier in
    the rank index's order, so only `limit` rows a tier are read whole.
    """
    if q.keys or q.tags:
        where, params = _stored_where(scope, q, now)
        if q.keys:
            rows = conn.execute(f"SELECT {COLUMNS} FROM entries e WHERE {where}",
                                params).fetchall()
            rows.sort(key=lambda r: (-r[6], -r[9]))
            return [entry_of(r) for r in rows[q.offset: q.offset + q.limit]], len(rows)
        # a count, then a top-`limit` page (a window count would sort every match whole)
        total = conn.execute(f"SELECT count(*) FROM entries e WHERE {where}", params).fetchone()[0]
        if not total:
            return [], 0
        rows = conn.execute(
            f"SELECT {COLUMNS} FROM entries e WHERE {where}"
            " ORDER BY e.score DESC, e.updated_at DESC LIMIT ? OFFSET ?",
            [*params, q.limit, q.offset],
        ).fetchall()
        return [entry_of(r) for r in rows], total
    counts, pages, params, page_params = [], [], [], []
    for tier in q.tiers:
        where, p = _stored_where(scope, replace(q, tiers=(tier,)), now)
        counts.append(f"(SELECT count(*) FROM entries e WHERE {where})")
        params += p
        pages.append(f"SELECT * FROM (SELECT {COLUMNS} FROM entries e WHERE {where}"
                     " ORDER BY e.score DESC, e.updated_at DESC LIMIT ?)")
        page_params += [*p, q.limit + q.offset]
    if not pages:
        return [], 0
    total = conn.execute(f"SELECT {' + '.join(counts)}", params).fetchone()[0]
    if not total or q.offset >= total:
        return [], total
    sql = " UNION ALL ".join(pages)
    if len(pages) > 1 or q.offset:
        sql = f"SELECT * FROM ({sql}) ORDER BY 7 DESC, 10 DESC LIMIT ? OFFSET ?"
        page_params += [q.limit, q.offset]
    return [entry_of(r) for r in conn.execute(sql, page_params).fetchall()], total


@contextmanager
def snapshot(conn: sqlite3.Connection) -> Iterator[None]:
    """One read transaction around the body (unless the caller is in one): a search's
    statements see one snapshot. In autocommit each statement has its own, and a search
    decides its `keyword.Layout` (which namespaces exist) in one statement and counts a term's rows
    in the next: a namespace committed between them by another connection had its rows
    counted as the reader's (another namespace moving the scores; more holders than rows
    failed the query)."""
    if conn.in_transaction:
        yield
        return
    conn.execute("BEGIN")
    try:
        yield
    finally:
        if conn.in_transaction:
            conn.execute("COMMIT")
