"""Entry writes on SQLite: put (upsert under the quotas, with eviction when asked), forget,
touch, and the collection of expired entries.

Plain functions over one `sqlite3.Connection`, run in the writer thread by `SQLiteEntryStore`
(and called directly by the library's `SQLiteStore`, the CLI's import and the tests). Each
expects the transaction its caller opened, and records what it changed in the change log
(`host.store.sqlite.changes.log_change`) in that same transaction. The keyword-index rows and the
quota counters' changes of a commit group are held in a `Deferred` and written before its COMMIT.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass

import msgspec

from host.store.changes import removed_record, stored_record
from host.store.growth import PutOutcomes
from host.store.records import (
    NewEntry,
    Query,
    Quotas,
    Refusal,
    Scope,
    StoreOutcome,
    owner_for,
    scope_token,
    stored_bytes,
)
from host.store.sqlite.changes import log_change
from host.store.sqlite.client_vectors import space_fits, write_client_vectors
from host.store.sqlite.deferred import Deferred
from host.store.sqlite.evict import make_room
from host.store.sqlite.reads import read_where
from host.text.searchable import stored_text

__all__ = [
    "GC_BATCH",
    "Usage",
    "collect_expired",
    "forget_entries",
    "put_entries",
    "removed_records",
    "touch_entries",
]

_encode_tags = msgspec.json.Encoder().encode
_tags_decoder = msgspec.json.Decoder(list[str])

GC_BATCH = 1000  # expired entries `collect_expired` deletes at most a call (one transaction)


@dataclass(slots=True)
class Usage:
    """Entries and bytes of one namespace and of one agent in it, kept up to date in a put."""

    ns_entries: int
    ns_bytes: int
    agent_entries: int
    agent_bytes: int

    def over(self, q: Quotas, ns: tuple[int, int], agent: tuple[int, int]) -> bool:
        """True when growing by (entries, bytes) in the namespace and for the agent would pass
        a quota (shrinking never does)."""
        return (
            (ns[0] > 0 and self.ns_entries + ns[0] > q.max_entries_per_namespace)
            or (agent[0] > 0 and self.agent_entries + agent[0] > q.max_entries_per_agent)
            or (ns[1] > 0 and self.ns_bytes + ns[1] > q.max_bytes_per_namespace)
            or (agent[1] > 0 and self.agent_bytes + agent[1] > q.max_bytes_per_agent)
        )

    def add(self, ns: tuple[int, int], agent: tuple[int, int]) -> None:
        """Count (entries, bytes) more in the namespace and for the agent."""
        self.ns_entries += ns[0]
        self.ns_bytes += ns[1]
        self.agent_entries += agent[0]
        self.agent_bytes += agent[1]


def forget_entries(
    conn: sqlite3.Connection,
    scope: Scope,
    tiers: Sequence[str],
    keys: Sequence[bytes],
    tags: Sequence[str],
    now: float,
    deferred: Deferred | None = None,
) -> int:
    """Delete the live entries matching keys AND tags within `tiers`; the number deleted.

    Their keyword rows are deleted when `deferred` is flushed (without one, before this
    call returns)."""
    where, params = read_where(
        scope, Query(tiers=tuple(tiers), keys=tuple(keys), tags=tuple(tags)), now)
    gone = conn.execute(f"DELETE FROM entries AS e WHERE {where} RETURNING tier, owner, key, tags",
                        params).fetchall()
    if gone:
        log_change(conn, scope.namespace, "forgotten", removed_records(gone), now)
        if deferred is None:
            Deferred().flush(conn)
    return len(gone)


def removed_records(rows: Sequence[tuple]) -> list[tuple]:
    """Change-log records of deleted rows (tier, owner, key, tags)."""
    return [removed_record(r[0], r[1], r[2].encode(), _tags_decoder.decode(r[3])) for r in rows]


def _log_expired(conn: sqlite3.Connection, rows: Sequence[tuple], now: float) -> None:
    """Log deleted expired rows (namespace, tier, owner, key, tags): one change a namespace."""
    by_ns: dict[str, list[tuple]] = {}
    for r in rows:
        by_ns.setdefault(r[0], []).append(r[1:])
    for ns, mine in by_ns.items():
        log_change(conn, ns, "expired", removed_records(mine), now)


def touch_entries(
    conn: sqlite3.Connection,
    scope: Scope,
    tiers: Sequence[str],
    touches: Sequence[tuple[bytes, float]],
) -> int:
    """Record reads: move `updated_at` of each live (key, when) forward to `when`, if later.

    The library's `SQLiteStore` keeps `Memory.last_accessed` there; `SQLiteEntryStore.touch`
    runs it for `EntryStore.touch`. Expiry (`expires_at`: a touch never extends a TTL, and an
    entry expired at `when` is not matched), tags, content and the keyword index are unchanged.
    The number of rows updated.
    """
    n = 0
    for key, when in touches:
        where, params = read_where(scope, Query(tiers=tuple(tiers), keys=(key,)), when)
        cur = conn.execute(
            f"UPDATE entries AS e SET updated_at = ? WHERE {where} AND e.updated_at < ?",
            [when, *params, when],
        )
        n += cur.rowcount
    return n


def collect_expired(
    conn: sqlite3.Connection, now: float, batch: int = GC_BATCH, deferred: Deferred | None = None
) -> int:
    """Delete up to `batch` expired entries; the number deleted (call again while == batch).
    Their keyword rows go as in `forget_entries`."""
    rows = conn.execute(
        "DELETE FROM entries WHERE id IN"
        " (SELECT id FROM entries WHERE expires_at IS NOT NULL AND expires_at <= ? LIMIT ?)"
        " RETURNING namespace, tier, owner, key, tags",
        (now, batch),
    ).fetchall()
    if rows:
        _log_expired(conn, rows, now)
        if deferred is None:
            Deferred().flush(conn)
    return len(rows)


_INSERT = (
    "INSERT INTO entries (namespace, tier, owner, key, agent, content, tags, source,"
    " score, ttl, created_at, updated_at, expires_at, size, valid_from, valid_until)"
    " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
)
_INSERT_NEW = _INSERT + " ON CONFLICT DO NOTHING RETURNING id"  # a key already there: no row
_INSERT_ID = _INSERT + " RETURNING id"
_INSERT_TAGS = "INSERT INTO entry_tags (namespace, tier, owner, tag, entry_id) VALUES (?, ?, ?, ?, ?)"


def put_entries(
    conn: sqlite3.Connection,
    scope: Scope,
    entries: Sequence[NewEntry],
    now: float,
    quotas: Quotas,
    deferred: Deferred | None = None,
) -> list[StoreOutcome]:
    """Upsert `entries` (inside the caller's transaction); one outcome per entry.

    An existing live key keeps its `created_at`; an expired one is replaced by a new entry.
    A write past a quota is `memory_full` and leaves the entry as it was (expired rows of the
    namespace are collected first, once, to make room).

    The keyword-index rows and the quota counters' changes go to `deferred` (see
    `host.store.sqlite.deferred`), which the caller flushes before its COMMIT (the writer
    thread: once a commit group); without one they are written when this call ends.
    """
    if deferred is None:
        own = Deferred()
        done = put_entries(conn, scope, entries, now, quotas, own)
        own.flush(conn)
        return done
    ns, agent = scope.namespace, scope.agent
    token = scope_token(ns)
    usage = Usage(*deferred.usage(conn, ns, agent))
    deleted = collected = False
    evicted = 0  # entries evicted to make room (host.store.sqlite.evict)
    outcomes: list[StoreOutcome] = []
    changed: list[tuple] = []  # the change-log records of the entries stored
    changed_ids: list[int] = []  # ... and their rows
    inserted: set[int] = set()  # ... those of them inserted here (no earlier change has them)
    for e in entries:
        owner = owner_for(e.tier, agent)
        key = e.key.decode()
        updated = e.updated_at if e.updated_at is not None else now
        created = e.created_at if e.created_at is not None else updated
        expires = updated + e.ttl if e.ttl > 0 else None
        content = e.content.decode()
        text = e.text or stored_text(e.content, e.tags, e.key)
        tags = list(dict.fromkeys(e.tags))
        size = stored_bytes(e.key, e.content, tags) + len(e.vectors)
        if not space_fits(conn, ns, e):
            outcomes.append(Refusal.VECTOR_DIMS)
            continue
        tags_json = _encode_tags(tags).decode()
        values = (ns, e.tier, owner, key, agent, content, tags_json, e.source, e.score, e.ttl,
                  created, updated, expires, size, e.valid_from, e.valid_until)
        entry_id = None
        replaced = False
        if not usage.over(quotas, (1, size), (1, size)):
            # the common case, a new key, in one statement (a key already there inserts nothing)
            got = conn.execute(_INSERT_NEW, values).fetchone()
            if got is not None:
                entry_id = got[0]
                usage.add((1, size), (1, size))
                deferred.count(ns, agent, 1, size)
        if entry_id is None:
            row = conn.execute(
                "SELECT id, expires_at, agent, size, created_at FROM entries"
                " WHERE namespace = ? AND tier = ? AND owner = ? AND key = ?",
                (ns, e.tier, owner, key),
            ).fetchone()
            if row is not None and row[1] is not None and row[1] <= now:
                _log_expired(conn, conn.execute(
                    "DELETE FROM entries WHERE id = ? RETURNING namespace, tier, owner, key, tags",
                    (row[0],)).fetchall(), now)
                deleted = True  # the delete trigger counted it in the table
                usage.add((-1, -row[3]), (-1, -row[3]) if row[2] == agent else (0, 0))
                row = None
            growth: tuple[tuple[int, int], tuple[int, int]]
            if row is None:
                growth = (1, size), (1, size)
            else:  # an update: the namespace grows by the size change, a new writer by the size
                growth = (0, size - row[3]), ((0, size - row[3]) if row[2] == agent else (1, size))
            if usage.over(quotas, *growth) and not collected:
                collected = True
                # through the expiry index (the unary +): by the namespace's rank index each
                # put at a quota walked every entry of the namespace
                _log_expired(conn, conn.execute(
                    "DELETE FROM entries WHERE +namespace = ? AND expires_at IS NOT NULL"
                    " AND expires_at <= ? RETURNING namespace, tier, owner, key, tags",
                    (ns, now),
                ).fetchall(), now)
                deleted = True
                usage = Usage(*deferred.usage(conn, ns, agent))
            if quotas.evict and usage.over(quotas, *growth):  # limits.on_full "evict"
                gone = make_room(conn, ns, agent, usage, quotas, growth, row, changed_ids, now)
                if gone:
                    evicted, deleted = evicted + gone, True
                    usage = Usage(*deferred.usage(conn, ns, agent))
            if usage.over(quotas, *growth):
                outcomes.append(Refusal.MEMORY_FULL)
                continue
            usage.add(*growth)
            if row is None:
                entry_id = conn.execute(_INSERT_ID, values).fetchone()[0]
                deferred.count(ns, agent, 1, size)
            else:
                entry_id = row[0]
                created = row[4]
                deferred.count(ns, row[2], -1, -row[3])
                deferred.count(ns, agent, 1, size)
                conn.execute(
                    "UPDATE entries SET agent = ?, content = ?, tags = ?, source = ?, score = ?,"
                    " ttl = ?, updated_at = ?, expires_at = ?, size = ?, valid_from = ?,"
                    " valid_until = ? WHERE id = ?",
                    (agent, content, tags_json, e.source, e.score, e.ttl, updated, expires,
                     size, e.valid_from, e.valid_until, entry_id),
                )
                conn.execute("DELETE FROM entry_tags WHERE entry_id = ?", (entry_id,))
                deferred.replace(entry_id)
                replaced = True
        if tags:
            conn.executemany(_INSERT_TAGS, [(ns, e.tier, owner, t, entry_id) for t in tags])
        if e.vectors or replaced:
            write_client_vectors(conn, entry_id, e, replaced)
        deferred.index(entry_id, token, text)
        outcomes.append(None)
        changed.append(stored_record(e.tier, owner, e.key, e.content, tags, e.source, e.score,
                                     e.ttl, created, updated, e.valid_from, e.valid_until))
        changed_ids.append(entry_id)
        if not replaced:
            inserted.add(entry_id)
    if changed:
        log_change(conn, ns, "stored", changed, now, changed_ids, inserted)
    if not deleted:  # the usage table is as read: the next put of the group need not read it
        deferred.settled(conn)
    return PutOutcomes(outcomes, evicted) if evicted else outcomes
