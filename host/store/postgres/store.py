"""`PostgresEntryStore`: the persistent tiers on PostgreSQL, shared by any number of hosts.

Selected by a `store.db` (or `--db`) starting with `postgresql://` or `postgres://`. Needs the
`postgres` extra (`pip install -e '.[postgres]'`, which brings asyncpg).

The same `EntryStore` contract as `SQLiteEntryStore`, over an asyncpg pool:
- Puts, forgets and touches are group-committed (`host.store.postgres.batch`): those queued
  while earlier batches run go as one statement (`a2e_put_group_logged` /
  `a2e_forget_batch_logged` / `a2e_touch_batch`, see `host.store.postgres.schema`) in
  autocommit; the server writes each under its namespace's
  advisory lock and commits before the reply comes back, so a write is acknowledged only once
  it is committed, and a retrieve through any other host sees it at once (reads run at READ
  COMMITTED on the primary).
- Quotas are counted from `a2e_usage` inside that transaction; the namespace lock serialises the
  writers of one namespace across hosts, so concurrent writers can never overshoot a quota.
- Keyword search matches the `lexemes` tsvector (GIN index) within the namespace's scope
  lexeme and scores candidates with SQLite FTS5's BM25 over the namespace's statistics
  (`keyword`); `relevance` is `host.text.keyword.coverage`, as in the SQLite store, so the
  search engine ranks both backends alike.
- TTL: reads hide expired rows; `collect_garbage` deletes them on one host at a time
  (`pg_try_advisory_lock`), namespace by namespace under each namespace's lock.
- Vectors (`host.store.interface.VectorSearch`): the hosts' embedding workers claim queued entries
  (`claim_vectors`, `FOR UPDATE SKIP LOCKED` and a lease; `claim_namespace_vectors` those of
  a namespace a query waits for) and write their vectors
  (`put_vectors`) into `a2e_vectors`; the search engine asks `nearest_vectors` for a query's
  neighbours within the reader's visibility (an HNSW index per dimension when pgvector is
  present: `vectors_available`), so every host searches every vector at once.

The class is made of one part a concern, each a module of this package over the shared state
(`sql.StoreState`): `writes` (puts, forgets, touches, TTL), `reads` (finds, fetches,
neighbours), `keyword` (keyword search), `vectors` (the embedding queue, nearest neighbours),
`changes` (the change log), `client_space` (the client spaces the host searches in memory);
here are only the pool's life and the memory browser's reads (`browse`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from host.extras import require
from host.store.growth import UsageSummary
from host.store.interface import ChangeNotices, EntryStore, NearSearch, VectorSearch
from host.store.postgres import browse as pg_browse
from host.store.postgres import usage as pg_usage
from host.store.postgres.batch import WriteBatcher
from host.store.postgres.changes import Changes
from host.store.postgres.client_space import ClientSpace
from host.store.postgres.history import PostgresHistory
from host.store.postgres.keyword import Keyword
from host.store.postgres.read_times import ReadTimes
from host.store.postgres.reads import Reads
from host.store.postgres.schema import enable_vectors, migrate
from host.store.postgres.sql import (
    GC_BATCH,
    is_postgres_url,
    keep_session,
    lexemes_of,
)
from host.store.postgres.usage import OwnUsage
from host.store.postgres.vectors import Vectors
from host.store.postgres.writes import Writes
from host.store.records import BrowsedEntry, BrowseFilter, NamespaceOverview, Quotas

__all__ = ["PostgresEntryStore", "is_postgres_url", "lexemes_of"]


class PostgresEntryStore(ReadTimes, OwnUsage, Writes, Reads, Keyword, Vectors, Changes,
                         ClientSpace, PostgresHistory, VectorSearch, ChangeNotices, NearSearch,
                         EntryStore):
    """The `EntryStore` on one PostgreSQL database. Use `async with` or `open()`/`close()`."""

    reads_on_loop = False  # asyncpg awaits under asyncio.timeout, which needs a task

    def __init__(
        self,
        url: str,
        quotas: Quotas | None = None,
        pool_min: int = 1,
        pool_max: int = 10,
        gc_batch: int = GC_BATCH,
        batch_max: int = 512,
        max_term_docs: int = 0,
        max_matches: int = 0,
    ) -> None:
        self.url = url
        self.batch_max = batch_max
        self.max_term_docs = max_term_docs  # see search
        self.max_matches = max_matches
        self._puts = self._forgets = self._touches = None
        self.quotas = quotas or Quotas()
        self.pool_min = pool_min
        self.pool_max = max(pool_max, pool_min)
        self.gc_batch = gc_batch
        self.vectors_available = False
        self._pool = None
        self._listener = None  # the LISTEN connection of `listen_changes`
        self._indexed_dims = set()

    async def open(self) -> None:
        """Connect the pool, apply pending migrations (under an advisory lock), enable pgvector
        when available. Raises `MissingExtra` if asyncpg is missing, asyncpg/OS errors if the
        database cannot be reached."""
        asyncpg = require("asyncpg", "postgres", "a postgresql:// store.db")  # an extra
        pool = await asyncpg.create_pool(
            self.url, min_size=self.pool_min, max_size=self.pool_max,
            # hnsw.iterative_scan: pgvector's HNSW scans go on past filtered-out rows (the
            # visibility WHERE of nearest_vectors); a placeholder where pgvector is absent
            server_settings={"application_name": "a2e-host",
                             "hnsw.iterative_scan": "relaxed_order"},
            reset=keep_session,
        )
        try:
            async with pool.acquire() as conn:
                await migrate(conn)
                self.vectors_available = await enable_vectors(conn)
        except BaseException:
            await pool.close()
            raise
        self._pool = pool
        self._loop = asyncio.get_running_loop()  # the client spaces' loader threads use it
        self._puts = WriteBatcher(self._put_batch, self.batch_max)
        self._forgets = WriteBatcher(self._forget_batch, self.batch_max)
        self._touches = WriteBatcher(self._touch_batch, self.batch_max)

    async def close(self) -> None:
        """Commit the queued puts, wait for in-flight queries, close every connection.
        Idempotent."""
        for batcher in (self._puts, self._forgets, self._touches):
            if batcher is not None:
                await batcher.close()
        self._puts = self._forgets = self._touches = None
        if self._listener is not None:
            listener, self._listener = self._listener, None
            await listener.close()
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.close()

    # -- the memory browser (host/ui; `host.store.interface.EntryStore`, the SQL is in postgres/browse.py) --------

    async def overview(self, namespaces: Sequence[str] | None, now: float
                       ) -> list[NamespaceOverview]:
        """The namespaces with live entries, by name (`EntryStore.overview`)."""
        return await pg_browse.overview(self.pool, namespaces, now)

    async def browse(self, namespace: str, f: BrowseFilter, now: float
                     ) -> tuple[list[BrowsedEntry], int]:
        """Live entries of `namespace` matching `f`, newest first (`EntryStore.browse`)."""
        return await pg_browse.browse(self.pool, namespace, f, now)

    async def browse_entry(self, namespace: str, id: int, now: float) -> BrowsedEntry | None:
        """The live entry `id` of `namespace`, or None."""
        return await pg_browse.browse_entry(self.pool, namespace, id, now)

    async def export_namespace(self, namespace: str, now: float, after: int = 0,
                               limit: int = 1000) -> list[BrowsedEntry]:
        """A page of the live entries of `namespace`: row ids above `after`, in order."""
        return await pg_browse.export_namespace(self.pool, namespace, now, after, limit)

    async def quota_usage(self, quotas: Quotas, top: int) -> UsageSummary | None:
        """How full the tenants are (`host.store.growth.QuotaReport`), one snapshot."""
        return await pg_usage.quota_usage(self.pool, quotas, top)

    async def ready(self) -> bool:
        """True when the database answers."""
        try:
            async with asyncio.timeout(5.0):
                return bool(await self.pool.fetchval("SELECT 1") == 1)
        except Exception:  # unreachable, timed out, closed: not ready
            return False
