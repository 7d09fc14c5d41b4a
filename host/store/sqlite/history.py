"""An entry's history on SQLite (docs/protocol.md, "History"): its earlier contents, and the
entries consolidation on write retired in favour of a newer one.

`entry_history` holds one row a version that is no longer current. The rows are written by
triggers on `entries`, whoever writes (the wire path, the library, the CLI), so the store's
write path carries no call of its own:

- `entries_history_au`: an update that changes an entry's content (a store over a live key)
  copies the version it replaces (reason `updated`, replaced at the new version's
  `updated_at`), then keeps the key's newest `keep` versions and drops the namespace's
  versions older than the retention (`history_retention`, one row the host sets from its
  `history` settings at start: `set_retention`).
- `entries_history_ad`: deleting an entry (a forget, an expiry, an eviction, another tool)
  deletes its key's history with it: a forget forgets, as the change log does. Only
  consolidation's retire (`retire`) keeps it: it holds the row's id in `history_hold` while
  it deletes, after copying the version (reason `superseded`, with the key that superseded
  it and the similarity that decided).

A namespace so holds at most `keep` versions a live key, and of its retired keys at most
`max_retired` (the oldest go first), each for `seconds` at most (`host.store.history.Retention`).

A version keeps the bounds its entry had (the time extension's `valid_from` / `valid_until`,
columns of migration 17, `MIGRATION_VALIDITY`; a version kept before it has none).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Sequence
from typing import Any

import msgspec

from host.store.history import (
    CONSOLIDATED,
    HistoryVersion,
    Merges,
    Retention,
    consolidation_record,
)
from host.store.records import PERSISTENT_TIERS, Scope, owner_for
from host.store.sqlite.changes import log_change

__all__ = ["MIGRATION", "MIGRATION_VALIDITY", "SQLiteHistory", "log_skips", "read_history",
           "retire", "set_retention"]

_tags = msgspec.json.Decoder(list[str])

# the update trigger's retention, after it copies the replaced version (15, and 17 again)
_TRIM = """
    DELETE FROM entry_history WHERE namespace = old.namespace AND tier = old.tier
        AND owner = old.owner AND key = old.key AND id <= (SELECT h.id FROM entry_history h
            WHERE h.namespace = old.namespace AND h.tier = old.tier AND h.owner = old.owner
            AND h.key = old.key ORDER BY h.id DESC LIMIT 1
            OFFSET (SELECT keep FROM history_retention));
    DELETE FROM entry_history WHERE namespace = old.namespace
        AND replaced_at < new.updated_at - (SELECT seconds FROM history_retention);
"""

MIGRATION = """
CREATE TABLE entry_history (
    id INTEGER PRIMARY KEY,
    namespace TEXT NOT NULL,
    tier TEXT NOT NULL,
    owner TEXT NOT NULL,
    key TEXT NOT NULL,
    agent TEXT NOT NULL,
    content TEXT NOT NULL,
    tags TEXT NOT NULL,
    source TEXT NOT NULL,
    score REAL NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    replaced_at REAL NOT NULL,
    reason TEXT NOT NULL,
    by_key TEXT,
    similarity REAL
);
CREATE INDEX entry_history_key ON entry_history (namespace, tier, owner, key, id);
CREATE INDEX entry_history_age ON entry_history (namespace, replaced_at);
CREATE INDEX entry_history_retired ON entry_history (namespace, id) WHERE reason = 'superseded';
CREATE TABLE history_retention (
    one INTEGER PRIMARY KEY CHECK (one = 1),
    keep INTEGER NOT NULL,
    seconds REAL NOT NULL,
    max_retired INTEGER NOT NULL
);
INSERT INTO history_retention (one, keep, seconds, max_retired) VALUES (1, 10, 2592000, 10000);
CREATE TABLE history_hold (entry_id INTEGER PRIMARY KEY);
CREATE TRIGGER entries_history_au AFTER UPDATE OF content ON entries
WHEN old.content IS NOT new.content BEGIN
    INSERT INTO entry_history (namespace, tier, owner, key, agent, content, tags, source, score,
        created_at, updated_at, replaced_at, reason)
    VALUES (old.namespace, old.tier, old.owner, old.key, old.agent, old.content, old.tags,
        old.source, old.score, old.created_at, old.updated_at, new.updated_at, 'updated');""" + _TRIM + """END;
CREATE TRIGGER entries_history_ad AFTER DELETE ON entries
WHEN NOT EXISTS (SELECT 1 FROM history_hold WHERE entry_id = old.id) BEGIN
    DELETE FROM entry_history WHERE namespace = old.namespace AND tier = old.tier
        AND owner = old.owner AND key = old.key;
END;
"""

# 17: a version keeps its entry's bounds (the time extension): the columns, and the update
# trigger of 15 again, copying them
MIGRATION_VALIDITY = """
ALTER TABLE entry_history ADD COLUMN valid_from REAL;
ALTER TABLE entry_history ADD COLUMN valid_until REAL;
DROP TRIGGER entries_history_au;
CREATE TRIGGER entries_history_au AFTER UPDATE OF content ON entries
WHEN old.content IS NOT new.content BEGIN
    INSERT INTO entry_history (namespace, tier, owner, key, agent, content, tags, source, score,
        created_at, updated_at, replaced_at, reason, valid_from, valid_until)
    VALUES (old.namespace, old.tier, old.owner, old.key, old.agent, old.content, old.tags,
        old.source, old.score, old.created_at, old.updated_at, new.updated_at, 'updated',
        old.valid_from, old.valid_until);""" + _TRIM + "END;\n"

_COLUMNS = "tier, key, content, tags, source, score, created_at, updated_at, valid_from, valid_until"
_PRUNE_KEY = (
    "DELETE FROM entry_history WHERE namespace = ?1 AND tier = ?2 AND owner = ?3 AND key = ?4"
    " AND id <= (SELECT h.id FROM entry_history h WHERE h.namespace = ?1 AND h.tier = ?2"
    " AND h.owner = ?3 AND h.key = ?4 ORDER BY h.id DESC LIMIT 1 OFFSET ?5)")


def set_retention(conn: sqlite3.Connection, r: Retention) -> None:
    """Set the retention the triggers and `retire` apply (inside the caller's transaction)."""
    conn.execute("UPDATE history_retention SET keep = ?, seconds = ?, max_retired = ?",
                 (r.keep, r.seconds, r.max_retired))


def _readable(scope: Scope, tiers: Sequence[str]) -> tuple[str, list[Any]]:
    parts: list[str] = []
    params: list[Any] = []
    for t in tiers:
        if t in PERSISTENT_TIERS:
            parts.append("(tier = ? AND owner = ?)")
            params += [t, owner_for(t, scope.agent)]
    return " OR ".join(parts) or "0", params


def _version(r: Sequence[Any], replaced: float | None = None, reason: str = "current",
             by: str | None = None, sim: float | None = None) -> HistoryVersion:
    return HistoryVersion(r[0], r[1].encode(), r[2].encode(), _tags.decode(r[3]), r[4], r[5],
                          r[6], r[7], replaced, reason, by.encode() if by is not None else None,
                          sim, r[8], r[9])


def read_history(conn: sqlite3.Connection, scope: Scope, tiers: Sequence[str], key: bytes,
                 now: float, limit: int) -> list[HistoryVersion]:
    """The versions of `key` that `scope` may read in `tiers`, newest first, at most `limit`:
    the live entries (if any) then the kept earlier ones within the retention."""
    which, params = _readable(scope, tiers)
    k = key.decode()
    seconds = conn.execute("SELECT seconds FROM history_retention").fetchone()[0]
    out = [_version(r) for r in conn.execute(
        f"SELECT {_COLUMNS} FROM entries WHERE namespace = ? AND key = ? AND ({which})"
        " AND (expires_at IS NULL OR expires_at > ?) ORDER BY updated_at DESC",
        [scope.namespace, k, *params, now])]
    rows = conn.execute(
        f"SELECT {_COLUMNS}, replaced_at, reason, by_key, similarity FROM entry_history"
        f" WHERE namespace = ? AND key = ? AND ({which}) AND replaced_at >= ?"
        " ORDER BY replaced_at DESC, id DESC LIMIT ?",
        [scope.namespace, k, *params, now - seconds, max(0, limit - len(out))])
    out += [_version(r, r[10], r[11], r[12], r[13]) for r in rows]
    return out[:limit]


def log_skips(conn: sqlite3.Connection, scope: Scope, skips: Merges, now: float) -> None:
    """Log skipped stores ((tier, existing key, new key, similarity): the new entry was not
    stored) as one `consolidated` change, each record the existing entry's."""
    records = []
    for tier, old, new, sim in skips:
        owner = owner_for(tier, scope.agent)
        row = conn.execute(
            "SELECT tags FROM entries WHERE namespace = ? AND tier = ? AND owner = ? AND key = ?",
            (scope.namespace, tier, owner, old.decode())).fetchone()
        records.append(consolidation_record(tier, owner, old, _tags.decode(row[0]) if row
                                            else [], "skipped", new, sim))
    if records:
        log_change(conn, scope.namespace, CONSOLIDATED, records, now)


def retire(conn: sqlite3.Connection, scope: Scope, merges: Merges, now: float) -> int:
    """Retire the live entries of `merges` ((tier, old key, new key, similarity)): each is
    copied into the history (reason `superseded`, by the new key), then deleted with its key's
    history kept; the lot is logged as one `consolidated` change. How many were retired (an
    entry already gone or expired is passed over)."""
    records = []
    keep, seconds, most = conn.execute(
        "SELECT keep, seconds, max_retired FROM history_retention").fetchone()
    for tier, old, new, sim in merges:
        owner = owner_for(tier, scope.agent)
        row = conn.execute(
            "SELECT id, tags FROM entries WHERE namespace = ? AND tier = ? AND owner = ?"
            " AND key = ? AND (expires_at IS NULL OR expires_at > ?)",
            (scope.namespace, tier, owner, old.decode(), now)).fetchone()
        if row is None:
            continue
        conn.execute("INSERT INTO history_hold (entry_id) VALUES (?)", (row[0],))
        conn.execute(
            "INSERT INTO entry_history (namespace, tier, owner, key, agent, content, tags,"
            " source, score, created_at, updated_at, replaced_at, reason, by_key, similarity,"
            " valid_from, valid_until)"
            " SELECT namespace, tier, owner, key, agent, content, tags, source, score,"
            " created_at, updated_at, ?, 'superseded', ?, ?, valid_from, valid_until"
            " FROM entries WHERE id = ?",
            (now, new.decode(), sim, row[0]))
        conn.execute("DELETE FROM entries WHERE id = ?", (row[0],))
        conn.execute("DELETE FROM history_hold WHERE entry_id = ?", (row[0],))
        conn.execute(_PRUNE_KEY, (scope.namespace, tier, owner, old.decode(), keep))
        records.append(consolidation_record(tier, owner, old, _tags.decode(row[1]),
                                            "superseded", new, sim))
    if not records:
        return 0
    conn.execute("DELETE FROM entry_history WHERE namespace = ? AND replaced_at < ?",
                 (scope.namespace, now - seconds))
    cut = conn.execute(
        "SELECT id FROM entry_history WHERE namespace = ? AND reason = 'superseded'"
        " ORDER BY id DESC LIMIT 1 OFFSET ?", (scope.namespace, most)).fetchone()
    if cut is not None:  # the namespace's oldest retired entries past `max_retired`
        conn.execute("DELETE FROM entry_history WHERE namespace = ? AND reason = 'superseded'"
                     " AND id <= ?", (scope.namespace, cut[0]))
    log_change(conn, scope.namespace, CONSOLIDATED, records, now)
    return len(records)


class SQLiteHistory:
    """The history methods of `SQLiteEntryStore` (mixed into its class, before `EntryStore`):
    reads on the loop's connection, writes through the store's writer."""

    def _conn(self) -> sqlite3.Connection:
        raise NotImplementedError

    def _submit(self, fn: Any, *args: Any, grows: bool = True) -> asyncio.Future[Any]:
        raise NotImplementedError

    async def set_history_retention(self, retention: Retention) -> None:
        """Apply `retention` (the `history` settings) from now on, for every writer."""
        await self._submit(set_retention, retention, grows=False)

    async def history(self, scope: Scope, tiers: Sequence[str], key: bytes, now: float,
                      limit: int) -> list[HistoryVersion]:
        """`read_history` on the loop's connection (an index range of one key)."""
        return read_history(self._conn(), scope, tiers, key, now, limit)

    def retire(self, scope: Scope, merges: Merges, now: float) -> asyncio.Future[int]:
        """`retire` in one group-committed transaction: the writer's future."""
        return self._submit(retire, scope, list(merges), now)

    def log_skips(self, scope: Scope, skips: Merges, now: float) -> asyncio.Future[None]:
        """`log_skips` in one group-committed transaction: the writer's future."""
        return self._submit(log_skips, scope, list(skips), now)
