"""An entry's history on PostgreSQL (docs/protocol.md, "History"), as on SQLite
(`host.store.sqlite.history`): `a2e_entry_history` holds one row a version no longer current,
written by triggers on `a2e_entries` (migration 21, bodies in functions/history.sql): a change
of content keeps the version it replaces (reason `updated`) within the retention
(`a2e_history_retention`, set from the host's `history` settings at start); a delete takes the
key's history with it, but for the rows consolidation retires (`retire`: held in
`a2e_history_hold` while deleted, copied first as `superseded`, with the new key and the
similarity). A retire runs under the namespace's lock, as a forget, and logs one
`consolidated` change through `a2e_log_change`. A version keeps the bounds its entry had (the
time extension, migration 23; a version kept before it has none).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from host.store.changes import encode_records
from host.store.history import (
    CONSOLIDATED,
    HistoryVersion,
    Merges,
    Retention,
    consolidation_record,
)
from host.store.postgres.sql import StoreState
from host.store.records import PERSISTENT_TIERS, Scope, owner_for

__all__ = ["PostgresHistory"]

_COLUMNS = "tier, key, content, tags, source, score, created_at, updated_at, valid_from, valid_until"
_ADDRESS = ("namespace = $1 AND tier = $2 AND owner = $3 AND a2e_key_hash(key) = a2e_key_hash($4)"
            " AND key = $4")


def _version(r: Any, replaced: float | None = None, reason: str = "current",
             by: str | None = None, sim: float | None = None) -> HistoryVersion:
    return HistoryVersion(r[0], r[1].encode(), r[2].encode(), list(r[3]), r[4], r[5], r[6],
                          r[7], replaced, reason, by.encode() if by is not None else None, sim,
                          r[8], r[9])


def _records_json(records: Sequence[tuple]) -> str:
    return encode_records(records).decode()


class PostgresHistory(StoreState):
    """The history methods of `PostgresEntryStore` (mixed into its class)."""

    async def set_history_retention(self, retention: Retention) -> None:
        """Apply `retention` (the `history` settings) from now on, for every host."""
        await self.pool.execute(
            "UPDATE a2e_history_retention SET keep = $1, seconds = $2, max_retired = $3",
            retention.keep, retention.seconds, retention.max_retired)

    async def history(self, scope: Scope, tiers: Sequence[str], key: bytes, now: float,
                      limit: int) -> list[HistoryVersion]:
        """The versions of `key` that `scope` may read in `tiers`, newest first, at most
        `limit`: the live entries, then the earlier ones kept within the retention."""
        readable = [(t, owner_for(t, scope.agent)) for t in tiers if t in PERSISTENT_TIERS]
        if not readable:
            return []
        k = key.decode()
        which = " OR ".join(f"(tier = ${2 * i + 4} AND owner = ${2 * i + 5})"
                            for i in range(len(readable)))
        params = [p for pair in readable for p in pair]
        async with self.pool.acquire() as conn:
            live = await conn.fetch(
                f"SELECT {_COLUMNS} FROM a2e_entries WHERE namespace = $1"
                " AND a2e_key_hash(key) = a2e_key_hash($2) AND key = $2"
                f" AND (expires_at IS NULL OR expires_at > $3) AND ({which})"
                " ORDER BY updated_at DESC", scope.namespace, k, now, *params)
            out = [_version(r) for r in live]
            n = len(params) + 4
            rows = await conn.fetch(
                f"SELECT {_COLUMNS}, replaced_at, reason, by_key, similarity"
                " FROM a2e_entry_history WHERE namespace = $1"
                " AND a2e_key_hash(key) = a2e_key_hash($2) AND key = $2"
                " AND replaced_at >= $3 - (SELECT seconds FROM a2e_history_retention)"
                f" AND ({which}) ORDER BY replaced_at DESC, id DESC LIMIT ${n}",
                scope.namespace, k, now, *params, max(0, limit - len(out)))
        out += [_version(r, r[10], r[11], r[12], r[13]) for r in rows]
        return out[:limit]

    async def retire(self, scope: Scope, merges: Merges, now: float) -> int:
        """Retire the live entries of `merges` ((tier, old key, new key, similarity)): each
        copied into the history as `superseded`, then deleted with its key's history kept;
        logged as one `consolidated` change. How many (an entry gone or expired is passed
        over)."""
        ns = scope.namespace
        records = []
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute("SELECT a2e_lock_namespace($1)", ns)
            keep = await conn.fetchval("SELECT keep FROM a2e_history_retention")
            for tier, old, new, sim in merges:
                owner = owner_for(tier, scope.agent)
                row = await conn.fetchrow(
                    f"SELECT id, tags FROM a2e_entries WHERE {_ADDRESS}"
                    " AND (expires_at IS NULL OR expires_at > $5)",
                    ns, tier, owner, old.decode(), now)
                if row is None:
                    continue
                await conn.execute(
                    "WITH hold AS (INSERT INTO a2e_history_hold (entry_id) VALUES ($1)),"
                    " kept AS (INSERT INTO a2e_entry_history (namespace, tier, owner, key, agent,"
                    " content, tags, source, score, created_at, updated_at, replaced_at, reason,"
                    " by_key, similarity, valid_from, valid_until) SELECT namespace, tier, owner,"
                    " key, agent, content, tags, source, score, created_at, updated_at, $2,"
                    " 'superseded', $3, $4, valid_from, valid_until"
                    " FROM a2e_entries WHERE id = $1)"
                    " SELECT 1", row[0], now, new.decode(), sim)
                await conn.execute("DELETE FROM a2e_entries WHERE id = $1", row[0])
                await conn.execute("DELETE FROM a2e_history_hold WHERE entry_id = $1", row[0])
                await conn.execute("SELECT a2e_history_prune_key($1, $2, $3, $4, $5)",
                                   ns, tier, owner, old.decode(), keep)
                records.append(consolidation_record(tier, owner, old, list(row[1]),
                                                    "superseded", new, sim))
            if not records:
                return 0
            await conn.execute(
                "DELETE FROM a2e_entry_history WHERE namespace = $1 AND replaced_at < $2"
                " - (SELECT seconds FROM a2e_history_retention)", ns, now)
            await conn.execute(
                "DELETE FROM a2e_entry_history WHERE namespace = $1 AND reason = 'superseded'"
                " AND id <= (SELECT id FROM a2e_entry_history WHERE namespace = $1"
                " AND reason = 'superseded' ORDER BY id DESC OFFSET"
                " (SELECT max_retired FROM a2e_history_retention) LIMIT 1)", ns)
            await conn.execute("SELECT a2e_log_change($1, $2, $3, $4)", ns, CONSOLIDATED, now,
                               _records_json(records))
        return len(records)

    async def log_skips(self, scope: Scope, skips: Merges, now: float) -> None:
        """Log skipped stores (the new entry not stored) as one `consolidated` change, each
        record the existing entry's."""
        ns = scope.namespace
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute("SELECT a2e_lock_namespace($1)", ns)
            records = []
            for tier, old, new, sim in skips:
                owner = owner_for(tier, scope.agent)
                tags = await conn.fetchval(f"SELECT tags FROM a2e_entries WHERE {_ADDRESS}",
                                           ns, tier, owner, old.decode())
                records.append(consolidation_record(tier, owner, old, list(tags or []),
                                                    "skipped", new, sim))
            if records:
                await conn.execute("SELECT a2e_log_change($1, $2, $3, $4)", ns, CONSOLIDATED,
                                   now, _records_json(records))
