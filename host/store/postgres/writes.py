"""The PostgreSQL store's writes: puts, forgets and touches group-committed
(`host.store.postgres.batch`, one `a2e_put_group_logged` / `a2e_forget_batch_logged` /
`a2e_touch_batch` statement a batch, see `host.store.postgres.schema`), TTL refreshes and
sweeps, and the hosts' TTL collection (one host at a time, `pg_try_advisory_lock`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from host.store.postgres import extensions as pg_ext
from host.store.postgres.batch import BatchError, PendingWrite
from host.store.postgres.evict import put_outcomes
from host.store.postgres.schema import LOCK_CLASS, LOCK_GC
from host.store.postgres.sql import (
    DISK_FULL,
    StoreState,
    _addresses,
    _encode,
    _lexemes,
    _Params,
    _text_array,
    _where,
    log,
    stored_size,
)
from host.store.records import NewEntry, Query, Refusal, Scope, StorageFull, StoreOutcome, owner_for
from host.text.searchable import stored_text

__all__ = ["Writes"]


class Writes(StoreState):
    """`EntryStore`'s writes and the store extensions' (`refresh`, `sweep`)."""

    async def put(self, scope: Scope, entries: Sequence[NewEntry], now: float) -> list[StoreOutcome]:
        """Upsert `entries` in one transaction (with other puts of this host: group commit);
        returns after COMMIT. Raises `ValueError` for a NUL character in a tag or source
        (PostgreSQL text cannot hold one), `BatchError` if the database refused the put.
        Entries with client vectors (`host.store.postgres.extensions`): those of another
        dimension than their space are `Refusal.VECTOR_DIMS`; the others' vectors are written
        after the entries' commit."""
        if not any(e.vectors for e in entries):
            return await self._put(scope, entries, now)
        fits = await pg_ext.spaces_fit(self.pool, scope.namespace, entries)
        kept = [e for e, ok in zip(entries, fits) if ok]
        done = iter(await self._put(scope, kept, now) if kept else [])
        outcomes: list[StoreOutcome] = [next(done) if ok else Refusal.VECTOR_DIMS for ok in fits]
        await pg_ext.write_vectors(self.pool, scope, [
            e for e, ok, o in zip(entries, fits, outcomes) if ok and o is None])
        return outcomes

    async def _put(self, scope: Scope, entries: Sequence[NewEntry], now: float
                   ) -> list[StoreOutcome]:
        if not entries:
            return []
        rows: list[tuple[Any, ...]] = []
        for e in entries:
            if any("\x00" in t for t in e.tags) or "\x00" in e.source:
                raise ValueError("PostgreSQL text cannot hold a NUL character (in a tag or source)")
            text = e.text or stored_text(e.content, e.tags, e.key)
            lexemes, doc_len = _lexemes(scope.namespace, text)
            rows.append((
                e.tier, owner_for(e.tier, scope.agent), e.key.decode(), e.content.decode(),
                _text_array(list(dict.fromkeys(e.tags))), e.source, float(e.score),
                int(e.ttl), e.created_at, e.updated_at, lexemes, stored_size(e), doc_len,
            ))
        if self._puts is None:
            raise RuntimeError("store is not open")
        try:
            return await self._puts.submit(scope, now, rows, len(entries))  # type: ignore[no-any-return]
        except Exception as exc:
            if getattr(exc, "sqlstate", None) != DISK_FULL:
                raise
            # the server's disk: the same answer as SQLite's
            raise StorageFull(f"the PostgreSQL server's disk is full: {exc}") from exc

    async def _put_batch(self, batch: list[PendingWrite]) -> list[list[StoreOutcome] | BatchError]:
        """Run queued puts (sorted by namespace) as one `a2e_put_group` statement: entry by
        entry columns, each entry with its request's number, namespace, agent and time, and
        its round (k for the k-th entry of the batch at its address)."""
        cols: list[list[Any]] = [[] for _ in range(18)]
        seen: dict[tuple[str, str, str, str], int] = {}
        for j, put in enumerate(batch, start=1):
            ns, agent = put.scope.namespace, put.scope.agent
            for row in put.args:
                address = (ns, row[0], row[1], row[2])
                k = seen[address] = seen.get(address, 0) + 1
                for col, v in zip(cols, (j, k, ns, agent, put.now, *row), strict=True):
                    col.append(v)
        q = self.quotas
        # The only rows a put deletes are expired ones (an expired entry it replaces, the
        # expired entries it collects to fit a quota): the change log records them as
        # `expired`, before the put's `stored` change, as on SQLite. The CTE (volatile, so
        # evaluated first) names the op for the statement's transaction.
        outcomes = await self.pool.fetchval(
            "WITH op AS (SELECT set_config('a2e.change_op', 'expired', true))"
            " SELECT a2e_put_group_logged($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12,"
            " $13, $14, $15, $16, $17, $18, $19) FROM op",
            [q.max_entries_per_namespace, q.max_entries_per_agent, q.max_bytes_per_namespace,
             q.max_bytes_per_agent, int(q.evict),  # 5th: limits.on_full "evict"
             round(q.importance_half_life * 1000)],  # 6th: eviction's half-life, ms
            *cols,
        )
        results: list[list[StoreOutcome] | BatchError] = []
        first = 0
        for put in batch:
            mine = list(outcomes[first:first + put.size])
            first += put.size
            failed = next((o for o in mine if o and o.startswith("error: ")), None)
            results.append(BatchError(failed[7:]) if failed else put_outcomes(mine))
        return results

    async def forget(
        self, scope: Scope, tiers: Sequence[str], keys: Sequence[bytes], tags: Sequence[str],
        now: float,
    ) -> int:
        """Delete the live entries matching keys AND tags in `tiers`; returns after COMMIT
        (forgets queued together share a transaction: group commit)."""
        if self._forgets is None:
            raise RuntimeError("store is not open")
        args = {**_addresses(scope, tiers, keys), "tags": list(dict.fromkeys(tags)), "now": now}
        return await self._forgets.submit(scope, now, args)  # type: ignore[no-any-return]

    async def _forget_batch(self, batch: list[PendingWrite]) -> list[int | BatchError]:
        """Run queued forgets (sorted by namespace) as one `a2e_forget_batch` statement."""
        out = await self.pool.fetchval("SELECT a2e_forget_batch_logged($1::text::jsonb)",
                                       _encode([w.args for w in batch]).decode())
        return [BatchError(r[7:]) if r.startswith("error: ") else int(r) for r in out]

    async def touch(
        self, scope: Scope, tiers: Sequence[str], keys: Sequence[bytes], when: float
    ) -> int:
        """Record a read (`EntryStore.touch`): move `updated_at` of the live entries under
        `keys` forward to `when`, nothing else (expiry included), under the namespace's lock;
        the number moved. Returns after COMMIT (touches queued together share a transaction:
        group commit)."""
        if self._touches is None:
            raise RuntimeError("store is not open")
        if not keys or not tiers:
            return 0
        args = {**_addresses(scope, tiers, keys), "when": when}
        return await self._touches.submit(scope, when, args, len(keys))  # type: ignore[no-any-return]

    async def _touch_batch(self, batch: list[PendingWrite]) -> list[int]:
        """Run queued touches (sorted by namespace) as one `a2e_touch_batch` statement."""
        out = await self.pool.fetchval("SELECT a2e_touch_batch($1::text::jsonb)",
                                       _encode([w.args for w in batch]).decode())
        return [int(n) for n in out]

    async def collect_garbage(self, now: float) -> int:
        """Delete expired entries if no other host is collecting (`pg_try_advisory_lock`);
        the number deleted (0 when another host holds the lock)."""
        async with self.pool.acquire() as conn:
            if not await conn.fetchval("SELECT pg_try_advisory_lock($1, $2)", LOCK_CLASS, LOCK_GC):
                log.debug("gc skipped: another host is collecting")
                return 0
            try:
                return await self._collect(conn, now)
            finally:
                await conn.execute("SELECT pg_advisory_unlock($1, $2)", LOCK_CLASS, LOCK_GC)

    async def _collect(self, conn: Any, now: float) -> int:
        namespaces = await conn.fetch(
            "SELECT DISTINCT namespace FROM a2e_entries"
            " WHERE expires_at IS NOT NULL AND expires_at <= $1", now)
        total = 0
        for (ns,) in namespaces:
            while True:
                async with conn.transaction():
                    await conn.execute("SELECT a2e_lock_namespace($1),"
                                       " set_config('a2e.change_op', 'expired', true)", ns)
                    status = await conn.execute(
                        "DELETE FROM a2e_entries WHERE id IN (SELECT id FROM a2e_entries"
                        " WHERE namespace = $1 AND expires_at IS NOT NULL AND expires_at <= $2"
                        " LIMIT $3)", ns, now, self.gc_batch)
                n = int(status.split()[-1])
                total += n
                if n < self.gc_batch:
                    break
        return total

    # -- the store extensions (host.store.interface.EntryStore) ------------------------------

    async def refresh(self, scope: Scope, tiers: Sequence[str], keys: Sequence[bytes],
                      now: float) -> int:
        """Restart the TTL of the live entries under `keys` that have one (they expire `ttl`
        seconds after `now`); how many. Returns after COMMIT."""
        if not keys or not tiers:
            return 0
        p = _Params()
        where = _where(scope, Query(tiers=tuple(tiers), keys=tuple(keys)), now, p)
        status = await self.pool.execute(
            f"UPDATE a2e_entries e SET expires_at = {p(now)}::float8 + e.ttl WHERE {where}"
            " AND e.ttl > 0", *p.values)
        return int(status.split()[-1])

    async def sweep(self, scope: Scope, tiers: Sequence[str], now: float) -> int:
        """Delete the expired entries of `scope`'s namespace it may see in `tiers` (logged as
        `expired`), `gc_batch` a transaction under the namespace's lock (as `collect_garbage`:
        the namespace's writers, and the put batches holding one of them, go between two);
        how many. Returns after the last COMMIT."""
        if not tiers:
            return 0
        p = _Params()
        vis = " OR ".join(f"(tier = {p(t)} AND owner = {p(owner_for(t, scope.agent))})"
                          for t in tiers)
        sql = (f"DELETE FROM a2e_entries WHERE id IN (SELECT id FROM a2e_entries"
               f" WHERE namespace = {p(scope.namespace)} AND ({vis}) AND expires_at IS NOT NULL"
               f" AND expires_at <= {p(now)} LIMIT {p(self.gc_batch)})")
        total = 0
        async with self.pool.acquire() as conn:
            while True:
                async with conn.transaction():
                    await conn.execute("SELECT a2e_lock_namespace($1),"
                                       " set_config('a2e.change_op', 'expired', true)",
                                       scope.namespace)
                    status = await conn.execute(sql, *p.values)
                n = int(status.split()[-1])
                total += n
                if n < self.gc_batch:
                    return total

