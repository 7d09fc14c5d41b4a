"""Operator tasks on a PostgreSQL store: stats, export, import, GC (the CLI's sub-commands).

The counterparts of `host.store.sqlite.admin` for a `postgresql://` store, with the same rows
(`NamespaceStats`, `ExportRow`), so `a2e-host export | a2e-host import` moves entries between
the two backends in either direction. They run beside serving hosts: an export reads one
snapshot (REPEATABLE READ, read only) while hosts write; an import writes through
`PostgresEntryStore.put`, the wire path's statement, so quotas and locks apply as to any write.
Backup and vacuum are PostgreSQL's own business (pg_dump, autovacuum).
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import msgspec

from host.store.admin import ExportRow, NamespaceStats
from host.store.growth import UsageSummary
from host.store.postgres.store import PostgresEntryStore
from host.store.records import NewEntry, Quotas, Scope, StoreOutcome

__all__ = ["PostgresAdmin", "database_bytes", "export_rows", "import_batch", "stats"]

_tags = msgspec.json.Encoder().encode
_LIVE = "(expires_at IS NULL OR expires_at > $1)"


async def stats(store: PostgresEntryStore, now: float) -> list[NamespaceStats]:
    """Live entries and content bytes by namespace and tier, ordered by namespace then tier."""
    rows = await store.pool.fetch(
        f"SELECT namespace, tier, count(*), coalesce(sum(size), 0) FROM a2e_entries"
        f" WHERE {_LIVE} GROUP BY namespace, tier ORDER BY namespace, tier", now)
    return [NamespaceStats(r[0], r[1], int(r[2]), int(r[3])) for r in rows]


@asynccontextmanager
async def export_rows(
    store: PostgresEntryStore, now: float, namespace: str | None = None, batch: int = 1000,
) -> AsyncIterator[tuple[int, AsyncIterator[ExportRow]]]:
    """`async with export_rows(...) as (total, rows)`: how many live entries (of one namespace
    if given) and an async iterator of them in id order, all from one snapshot that lasts
    until the `async with` ends."""
    where, args = _LIVE, [now]
    if namespace is not None:
        where += " AND namespace = $2"
        args.append(namespace)  # type: ignore[arg-type]
    async with store.pool.acquire() as conn, conn.transaction(
            isolation="repeatable_read", readonly=True):
        total = int(await conn.fetchval(f"SELECT count(*) FROM a2e_entries WHERE {where}", *args))

        async def rows() -> AsyncIterator[ExportRow]:
            async for r in conn.cursor(
                    "SELECT namespace, tier, owner, agent, key, content, tags, source, score,"
                    f" ttl, created_at, updated_at, valid_from, valid_until FROM a2e_entries"
                    f" WHERE {where} ORDER BY id", *args, prefetch=batch):
                yield ExportRow(r[0], r[1], r[2], r[3], r[4], r[5], _tags(list(r[6])).decode(),
                                r[7], r[8], r[9], r[10], r[11], r[12], r[13])

        yield total, rows()


async def import_batch(
    store: PostgresEntryStore, batch: Sequence[tuple[Scope, NewEntry]], now: float,
) -> list[StoreOutcome]:
    """Upsert `batch`, keeping each entry's timestamps; one outcome per entry, in order.

    Consecutive entries of one scope go in one `put` (one transaction); a batch spanning
    several scopes commits scope by scope, and importing again is idempotent.
    """
    outcomes: list[StoreOutcome] = []
    for scope, run in itertools.groupby(batch, key=lambda item: item[0]):
        outcomes += await store.put(scope, [e for _s, e in run], now)
    return outcomes


async def database_bytes(store: PostgresEntryStore) -> int:
    """Bytes the store's tables take, with their indexes and TOAST data."""
    return int(await store.pool.fetchval(
        "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c"
        " JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE c.relkind = 'r' AND c.relname LIKE 'a2e\\_%' AND n.nspname = current_schema()"))


class PostgresAdmin:
    """`host.store.admin.StoreAdmin` on an open `PostgresEntryStore` (the caller's to close);
    `where` is how to show the database (its URL with the password masked)."""

    def __init__(self, store: PostgresEntryStore, where: str) -> None:
        self.store = store
        self.where = where

    async def stats(self, now: float) -> list[NamespaceStats]:
        return await stats(self.store, now)

    async def quota_usage(self, quotas: Quotas, top: int) -> UsageSummary | None:
        return await self.store.quota_usage(quotas, top)

    async def database_bytes(self) -> int:
        return await database_bytes(self.store)

    async def embed_backlog(self) -> int:
        return await self.store.vector_queue()

    async def collect_garbage(self, now: float) -> int:
        """One collection under the hosts' GC lock: nothing is deleted while a host collects."""
        return await self.store.collect_garbage(now)

    def export_rows(
        self, now: float, namespace: str | None = None
    ) -> AbstractAsyncContextManager[tuple[int, AsyncIterator[ExportRow]]]:
        return export_rows(self.store, now, namespace)

    async def import_batch(
        self, batch: Sequence[tuple[Scope, NewEntry]], now: float
    ) -> list[StoreOutcome]:
        return await import_batch(self.store, batch, now)
