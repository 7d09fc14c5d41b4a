"""The PostgreSQL store's writes: puts, forgets and touches group-committed
(`host.store.postgres.batch`, one `a2e_put_group_logged` / `a2e_forget_batch_logged` /
`a2e_touch_batch` statement a batch, functions/puts.sql, forgets.sql, touches.sql), TTL
refreshes and sweeps, and the hosts' TTL collection (one host at a time,
`pg_try_advisory_lock`).

A put's entries travel as `PutRow`s (one column array each in `a2e_put_group`'s arguments) and
come back as one `PutOutcome` an entry: stored, stored after evicting (`limits.on_full`
"evict": the eviction runs in the database, in the put's transaction and under the namespace's
lock, `a2e_evict` in functions/evict.sql, so two hosts never evict for the same quota at once),
refused, or failed with its request (the request raised in the database and was rolled back
alone).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, NamedTuple

from host.store.growth import PutOutcomes
from host.store.postgres import extensions as pg_ext
from host.store.postgres.batch import BatchError, PendingWrite
from host.store.postgres.schema import LOCK_CLASS, LOCK_GC
from host.store.postgres.sql import (
    DISK_FULL,
    Params,
    StoreState,
    addresses,
    json_encode,
    lexemes_and_length,
    log,
    read_where,
    stored_size,
    text_array,
)
from host.store.records import NewEntry, Query, Refusal, Scope, StorageFull, StoreOutcome, owner_for
from host.text.searchable import stored_text

__all__ = ["PutOutcome", "PutRow", "PutStatus", "Writes", "request_outcomes"]


class PutRow(NamedTuple):
    """One entry of a put as `a2e_put_group` takes it: after the request's number, round,
    namespace, agent and time, one column array a field, in this order."""

    tier: str
    owner: str
    key: str
    content: str
    tags: str  # a PostgreSQL array literal (`text_array`)
    source: str
    score: float
    ttl: int
    created_at: float | None  # None: the time of the put
    updated_at: float | None
    lexemes: str  # a tsvector literal (`lexemes_and_length`)
    size: int
    doc_len: int
    valid_from: float | None  # when the fact holds (None: open on that side)
    valid_until: float | None


# a2e_put_group_logged's arguments: the quotas, then (request, round, namespace, agent, time)
# and a `PutRow`'s fields, one array each
_PUT_GROUP = ("WITH op AS (SELECT set_config('a2e.change_op', 'expired', true))"
              " SELECT a2e_put_group_logged("
              + ", ".join(f"${i}" for i in range(1, len(PutRow._fields) + 7)) + ") FROM op")


class PutStatus(Enum):
    """What became of one entry of a put."""

    STORED = "stored"
    EVICTED = "evicted"  # stored, after evicting `PutOutcome.evicted` entries to make room
    REFUSED = "refused"  # left as it was: `PutOutcome.refusal`
    FAILED = "failed"  # its request raised in the database (rolled back): `PutOutcome.error`


@dataclass(frozen=True, slots=True)
class PutOutcome:
    """The outcome of one entry of a put."""

    status: PutStatus
    evicted: int = 0
    refusal: Refusal | None = None
    error: str = ""

    @classmethod
    def parse(cls, raw: str | None) -> PutOutcome:
        """The outcome `a2e_put_group_logged` returns for an entry (functions/puts.sql): NULL
        stored, 'evicted:<n>', 'error: <message>' for each entry of a request that raised, else
        the code of the refusal."""
        if raw is None:
            return _STORED
        if raw.startswith("evicted:"):
            return cls(PutStatus.EVICTED, evicted=int(raw[8:]))
        if raw.startswith("error: "):
            return cls(PutStatus.FAILED, error=raw[7:])
        return cls(PutStatus.REFUSED, refusal=Refusal(raw))


_STORED = PutOutcome(PutStatus.STORED)


def request_outcomes(outcomes: Sequence[PutOutcome]) -> list[StoreOutcome] | BatchError:
    """What `put` answers for one request from its entries' outcomes: None an entry stored, the
    refusal of one refused (`PutOutcomes` with the entries evicted, when any); a `BatchError`
    when the request failed."""
    evicted = 0
    out: list[StoreOutcome] = []
    for o in outcomes:
        if o.status is PutStatus.FAILED:
            return BatchError(o.error)
        evicted += o.evicted
        out.append(o.refusal)
    return PutOutcomes(out, evicted) if evicted else out


def _batch_result(raw: str) -> int | BatchError:
    """One forget's result as `a2e_forget_batch_logged` returns it: the number deleted, or
    'error: <message>' for a forget that raised (rolled back alone)."""
    return BatchError(raw[7:]) if raw.startswith("error: ") else int(raw)


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
        rows: list[PutRow] = []
        for e in entries:
            if any("\x00" in t for t in e.tags) or "\x00" in e.source:
                raise ValueError("PostgreSQL text cannot hold a NUL character (in a tag or source)")
            text = e.text or stored_text(e.content, e.tags, e.key)
            lexemes, doc_len = lexemes_and_length(scope.namespace, text)
            rows.append(PutRow(
                e.tier, owner_for(e.tier, scope.agent), e.key.decode(), e.content.decode(),
                text_array(list(dict.fromkeys(e.tags))), e.source, float(e.score),
                int(e.ttl), e.created_at, e.updated_at, lexemes, stored_size(e), doc_len,
                e.valid_from, e.valid_until,
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
        cols: list[list[Any]] = [[] for _ in range(5 + len(PutRow._fields))]
        seen: dict[tuple[str, str, str, str], int] = {}
        for j, put in enumerate(batch, start=1):
            ns, agent = put.scope.namespace, put.scope.agent
            row: PutRow
            for row in put.args:
                address = (ns, row.tier, row.owner, row.key)
                k = seen[address] = seen.get(address, 0) + 1
                for col, v in zip(cols, (j, k, ns, agent, put.now, *row), strict=True):
                    col.append(v)
        q = self.quotas
        # The only rows a put deletes are expired ones (an expired entry it replaces, the
        # expired entries it collects to fit a quota): the change log records them as
        # `expired`, before the put's `stored` change, as on SQLite. The CTE (volatile, so
        # evaluated first) names the op for the statement's transaction.
        outcomes = await self.pool.fetchval(
            _PUT_GROUP,
            [q.max_entries_per_namespace, q.max_entries_per_agent, q.max_bytes_per_namespace,
             q.max_bytes_per_agent, int(q.evict),  # 5th: limits.on_full "evict"
             round(q.importance_half_life * 1000)],  # 6th: eviction's half-life, ms
            *cols,
        )
        parsed = [PutOutcome.parse(o) for o in outcomes]
        results: list[list[StoreOutcome] | BatchError] = []
        first = 0
        for put in batch:
            results.append(request_outcomes(parsed[first:first + put.size]))
            first += put.size
        return results

    async def forget(
        self, scope: Scope, tiers: Sequence[str], keys: Sequence[bytes], tags: Sequence[str],
        now: float,
    ) -> int:
        """Delete the live entries matching keys AND tags in `tiers`; returns after COMMIT
        (forgets queued together share a transaction: group commit)."""
        if self._forgets is None:
            raise RuntimeError("store is not open")
        args = {**addresses(scope, tiers, keys), "tags": list(dict.fromkeys(tags)), "now": now}
        return await self._forgets.submit(scope, now, args)  # type: ignore[no-any-return]

    async def _forget_batch(self, batch: list[PendingWrite]) -> list[int | BatchError]:
        """Run queued forgets (sorted by namespace) as one `a2e_forget_batch` statement."""
        out = await self.pool.fetchval("SELECT a2e_forget_batch_logged($1::text::jsonb)",
                                       json_encode([w.args for w in batch]).decode())
        return [_batch_result(r) for r in out]

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
        args = {**addresses(scope, tiers, keys), "when": when}
        return await self._touches.submit(scope, when, args, len(keys))  # type: ignore[no-any-return]

    async def _touch_batch(self, batch: list[PendingWrite]) -> list[int]:
        """Run queued touches (sorted by namespace) as one `a2e_touch_batch` statement."""
        out = await self.pool.fetchval("SELECT a2e_touch_batch($1::text::jsonb)",
                                       json_encode([w.args for w in batch]).decode())
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
        p = Params()
        where = read_where(scope, Query(tiers=tuple(tiers), keys=tuple(keys)), now, p)
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
        p = Params()
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

