"""The SQL of the entry store on SQLite: plain functions over one `sqlite3.Connection`.

The async `SQLiteEntryStore` runs the writes in its writer thread and the reads on the event
loop; the library's synchronous `SQLiteStore` and the CLI call the same functions, so there is
one engine. Write functions expect to run inside a transaction the caller opened.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass

import msgspec

from host.search.keyword import coverage, fts_match_expression
from host.search.text import searchable_text
from host.store.base import NewEntry, Query, Scope, StoredEntry, StoreOutcome, owner_for

__all__ = [
    "Quotas",
    "collect_expired",
    "find_entries",
    "forget_entries",
    "put_entries",
    "scope_token",
    "search_entries",
]

_decode = msgspec.json.decode
_encode_tags = msgspec.json.Encoder().encode
_tags_decoder = msgspec.json.Decoder(list[str])

_COLUMNS = "e.tier, e.owner, e.key, e.content, e.tags, e.source, e.score, e.ttl, e.created_at, e.updated_at"


@dataclass(frozen=True, slots=True)
class Quotas:
    """Persisted-entry limits; a new entry beyond one is refused with `memory_full`."""

    max_entries_per_namespace: int = 1_000_000
    max_entries_per_agent: int = 100_000


def scope_token(namespace: str) -> str:
    """The FTS token that confines a keyword search to one namespace."""
    return "n" + hashlib.blake2b(namespace.encode(), digest_size=10).hexdigest()


def _row(r: tuple) -> StoredEntry:
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
    )


def _where(scope: Scope, q: Query, now: float) -> tuple[str, list[object]]:
    """The WHERE clause of a read: namespace, visibility, liveness, keys, tags, min score."""
    vis = []
    params: list[object] = [scope.namespace]
    for tier in q.tiers:
        vis.append("(e.tier = ? AND e.owner = ?)")
        params += [tier, owner_for(tier, scope.agent)]
    if not vis:
        vis.append("0")
    sql = f"e.namespace = ? AND ({' OR '.join(vis)}) AND (e.expires_at IS NULL OR e.expires_at > ?)"
    params.append(now)
    if q.keys:
        sql += f" AND e.key IN ({','.join('?' * len(q.keys))})"
        params += [k.decode() for k in q.keys]
    if q.tags:
        tags = list(dict.fromkeys(q.tags))
        sql += (
            " AND e.id IN (SELECT entry_id FROM entry_tags WHERE tag IN"
            f" ({','.join('?' * len(tags))}) GROUP BY entry_id HAVING count(*) = ?)"
        )
        params += tags
        params.append(len(tags))
    return sql, params


def find_entries(
    conn: sqlite3.Connection, scope: Scope, q: Query, now: float
) -> tuple[list[StoredEntry], int]:
    """Entries matching `q` by score desc, updated_at desc: (the first `q.limit`, total)."""
    where, params = _where(scope, q, now)
    if q.min_score > 0:
        where += " AND e.score >= ?"
        params.append(q.min_score)
    rows = conn.execute(
        f"SELECT {_COLUMNS}, count(*) OVER () FROM entries e WHERE {where}"
        " ORDER BY e.score DESC, e.updated_at DESC LIMIT ?",
        [*params, q.limit],
    ).fetchall()
    total = rows[0][10] if rows else 0
    return [_row(r) for r in rows], total


def search_entries(
    conn: sqlite3.Connection,
    scope: Scope,
    q: Query,
    terms: tuple[str, ...],
    now: float,
    candidates: int,
) -> list[StoredEntry]:
    """Keyword candidates sharing a term with `terms`, best BM25 first, `relevance` set."""
    if not terms:
        return []
    where, params = _where(scope, q, now)
    match = f'scope : "{scope_token(scope.namespace)}" AND body : ({fts_match_expression(terms)})'
    rows = conn.execute(
        f"SELECT {_COLUMNS}, f.body FROM entries_fts f JOIN entries e ON e.id = f.rowid"
        f" WHERE entries_fts MATCH ? AND {where} ORDER BY bm25(entries_fts, 0.0, 1.0) LIMIT ?",
        [match, *params, candidates],
    ).fetchall()
    out = []
    for r in rows:
        entry = _row(r)
        entry.relevance = coverage(terms, r[10])
        out.append(entry)
    return out


def forget_entries(
    conn: sqlite3.Connection,
    scope: Scope,
    tiers: Sequence[str],
    keys: Sequence[bytes],
    tags: Sequence[str],
    now: float,
) -> int:
    """Delete the live entries matching keys AND tags within `tiers`; the number deleted."""
    where, params = _where(scope, Query(tiers=tuple(tiers), keys=tuple(keys), tags=tuple(tags)), now)
    cur = conn.execute(f"DELETE FROM entries AS e WHERE {where}", params)
    return cur.rowcount


def collect_expired(conn: sqlite3.Connection, now: float, batch: int = 1000) -> int:
    """Delete up to `batch` expired entries; the number deleted (call again while == batch)."""
    cur = conn.execute(
        "DELETE FROM entries WHERE id IN"
        " (SELECT id FROM entries WHERE expires_at IS NOT NULL AND expires_at <= ? LIMIT ?)",
        (now, batch),
    )
    return cur.rowcount


def _usage(conn: sqlite3.Connection, namespace: str, agent: str) -> int:
    row = conn.execute(
        "SELECT entries FROM usage WHERE namespace = ? AND agent = ?", (namespace, agent)
    ).fetchone()
    return row[0] if row else 0


def put_entries(
    conn: sqlite3.Connection,
    scope: Scope,
    entries: Sequence[NewEntry],
    now: float,
    quotas: Quotas,
) -> list[StoreOutcome]:
    """Upsert `entries` (inside the caller's transaction); one outcome per entry.

    An existing live key keeps its `created_at`; an expired one is replaced by a new entry.
    A new entry past a quota is `memory_full` (expired rows of the namespace are collected
    first, once, to make room).
    """
    ns, agent = scope.namespace, scope.agent
    token = scope_token(ns)
    ns_count = _usage(conn, ns, "")
    agent_count = _usage(conn, ns, agent)
    collected = False
    outcomes: list[StoreOutcome] = []
    for e in entries:
        owner = owner_for(e.tier, agent)
        key = e.key.decode()
        updated = e.updated_at if e.updated_at is not None else now
        created = e.created_at if e.created_at is not None else updated
        expires = updated + e.ttl if e.ttl > 0 else None
        content = e.content.decode()
        text = e.text or searchable_text(_decode(e.content), e.tags, _decode(e.key))
        tags = list(dict.fromkeys(e.tags))
        row = conn.execute(
            "SELECT id, expires_at, agent FROM entries"
            " WHERE namespace = ? AND tier = ? AND owner = ? AND key = ?",
            (ns, e.tier, owner, key),
        ).fetchone()
        if row is not None and row[1] is not None and row[1] <= now:
            conn.execute("DELETE FROM entries WHERE id = ?", (row[0],))
            ns_count -= 1
            if row[2] == agent:
                agent_count -= 1
            row = None
        if row is None:
            if (
                ns_count >= quotas.max_entries_per_namespace
                or agent_count >= quotas.max_entries_per_agent
            ) and not collected:
                collected = True
                conn.execute(
                    "DELETE FROM entries WHERE namespace = ? AND expires_at IS NOT NULL"
                    " AND expires_at <= ?",
                    (ns, now),
                )
                ns_count, agent_count = _usage(conn, ns, ""), _usage(conn, ns, agent)
            if (
                ns_count >= quotas.max_entries_per_namespace
                or agent_count >= quotas.max_entries_per_agent
            ):
                outcomes.append("memory_full")
                continue
            entry_id = conn.execute(
                "INSERT INTO entries (namespace, tier, owner, key, agent, content, tags, source,"
                " score, ttl, created_at, updated_at, expires_at, size)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?) RETURNING id",
                (ns, e.tier, owner, key, agent, content, _encode_tags(tags).decode(), e.source,
                 e.score, e.ttl, created, updated, expires, len(e.content)),
            ).fetchone()[0]
            ns_count += 1
            agent_count += 1
        else:
            entry_id = row[0]
            if row[2] != agent:
                agent_count += 1
            conn.execute(
                "UPDATE entries SET agent = ?, content = ?, tags = ?, source = ?, score = ?,"
                " ttl = ?, updated_at = ?, expires_at = ?, size = ? WHERE id = ?",
                (agent, content, _encode_tags(tags).decode(), e.source, e.score, e.ttl, updated,
                 expires, len(e.content), entry_id),
            )
            conn.execute("DELETE FROM entry_tags WHERE entry_id = ?", (entry_id,))
            conn.execute("DELETE FROM entries_fts WHERE rowid = ?", (entry_id,))
        if tags:
            conn.executemany(
                "INSERT INTO entry_tags (tag, entry_id) VALUES (?, ?)",
                [(t, entry_id) for t in tags],
            )
        conn.execute(
            "INSERT INTO entries_fts (rowid, scope, body) VALUES (?, ?, ?)", (entry_id, token, text)
        )
        outcomes.append(None)
    return outcomes
