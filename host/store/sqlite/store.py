"""`SQLiteEntryStore`: the default persistent backend (episodic and semantic tiers).

Writes go through one `Writer` thread that commits in groups (WAL, `synchronous=FULL`); a
write's coroutine returns only after its group committed. Reads run on the event-loop thread
with their own connection (a WAL snapshot; point reads cost ~20 us here, less than a thread hop),
except those that may walk a large namespace (filters, key prefixes, key paths, the total of a
large namespace, a keyword search of terms in many rows): they run on the `ScanReader`'s threads
(`host/store/sqlite/scans.py`).
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from host.store.growth import UsageSummary
from host.store.interface import EntryStore, NotReadyReason, VectorStore
from host.store.records import (
    BrowsedEntry,
    BrowseFilter,
    Change,
    NamespaceOverview,
    NewEntry,
    Query,
    Quotas,
    Scope,
    StoredEntry,
    StoreOutcome,
)
from host.store.sqlite import bm25 as sqlite_bm25
from host.store.sqlite import browse as sqlite_browse
from host.store.sqlite import changes, keyword, reads, writes
from host.store.sqlite import extensions as ext
from host.store.sqlite import read_times as sqlite_reads
from host.store.sqlite import usage as sqlite_usage
from host.store.sqlite import vectors as vec
from host.store.sqlite.admin import count_by_tier
from host.store.sqlite.deferred import Deferred
from host.store.sqlite.files import FileState, check_file, explain, remove_files
from host.store.sqlite.history import SQLiteHistory
from host.store.sqlite.scans import SCAN_ON_LOOP, ScanReader
from host.store.sqlite.schema import connect, migrate
from host.store.sqlite.space import DiskSpace
from host.store.sqlite.writer import CommitObserver, Writer
from host.text.bm25 import Analysis, Bm25Stats
from host.text.keyword import query_terms

__all__ = ["SQLiteEntryStore"]

_T = TypeVar("_T")


class SQLiteEntryStore(SQLiteHistory, VectorStore, NotReadyReason, EntryStore):
    """The `EntryStore` on one SQLite file. Use `async with` or `open()`/`close()`."""

    reads_on_loop = True  # reads run on the loop's own WAL connection

    def __init__(
        self,
        path: str | Path,
        quotas: Quotas | None = None,
        batch_max: int = 512,
        observer: CommitObserver | None = None,
        max_term_docs: int = 0,
        max_matches: int = 0,
        disk_reserve_bytes: int = 0,
        create: bool = True,
        adopt: bool = False,
    ) -> None:
        self.path = str(path)
        self.create = create  # False: a missing file is an error, not a new database
        self.adopt = adopt  # True: another application's SQLite file is joined, not refused
        self.found: FileState | None = None  # what `open()` found at the path
        memory = self.path == ":memory:" or self.path.startswith("file::memory:")
        self.space = DiskSpace(self.path, 0 if memory else disk_reserve_bytes)
        self.quotas = quotas or Quotas()
        self.max_term_docs = max_term_docs  # see sqlite.keyword.search_entries
        self.max_matches = max_matches
        self._batch_max = batch_max
        self._observer = observer
        self._writer: Writer | None = None
        self._deferred = Deferred()  # the writes a commit group holds for its end (writer thread)
        self._read: sqlite3.Connection | None = None
        # reads that may scan a namespace of more entries than this run off the loop
        self.scan_on_loop = SCAN_ON_LOOP
        # keyword searches whose terms are in more rows than this run off the loop
        self.keyword_on_loop = keyword.KEYWORD_ON_LOOP
        # client vectors of more entries than this are read back off the loop
        self.client_rows_on_loop = ext.CLIENT_ROWS_ON_LOOP
        self._scans = ScanReader(lambda: connect(self.path))

    async def open(self) -> None:
        """Check the path (`files.check_file`: `UnusableDatabase` for a folder, a file not
        SQLite, another application's database unless `adopt`, a missing one unless `create`),
        create or migrate the schema, start the writer, open the read connection. An error
        while opening is an `UnusableDatabase` naming the path and the fix; a database this
        call created is removed again (`discard`)."""
        self.found = await asyncio.to_thread(
            check_file, self.path, create=self.create, adopt=self.adopt)

        def _open() -> None:
            with closing(connect(self.path)) as conn:
                migrate(conn)

        try:
            await asyncio.to_thread(_open)
            await asyncio.to_thread(self.space.claim)  # a full disk at start: stores refused
            self._writer = Writer(lambda: connect(self.path), self._batch_max, self._observer,
                                  self._deferred, self.space)
            await asyncio.to_thread(self._writer.start)
            self._read = connect(self.path)
        except (sqlite3.Error, OSError) as exc:
            await self.close()
            await self.discard()
            raise explain(self.path, exc) from None
        except BaseException:
            await self.close()
            await self.discard()
            raise

    async def discard(self) -> None:
        """After a failed start, close and delete the database if `open()` created it (with
        its -wal, -shm and -reserve files), so a start that failed leaves nothing behind;
        a database that existed before is left as it was."""
        if self.found is FileState.ABSENT:
            await self.close()
            await asyncio.to_thread(remove_files, self.path)
            self.found = None

    async def close(self) -> None:
        """Commit what is queued, stop the writer, close the connections. Idempotent."""
        await asyncio.to_thread(self._scans.close)
        if self._writer is not None:
            await asyncio.to_thread(self._writer.stop)
            self._writer = None
        if self._read is not None:
            self._read.close()
            self._read = None

    def _conn(self) -> sqlite3.Connection:
        if self._read is None:
            raise RuntimeError("store is not open")
        return self._read

    def _submit(self, fn, *args, grows=True):  # type: ignore[no-untyped-def]
        if self._writer is None:
            raise RuntimeError("store is not open")
        return self._writer.submit(fn, *args, grows=grows)

    def put(
        self, scope: Scope, entries: Sequence[NewEntry], now: float
    ) -> asyncio.Future[list[StoreOutcome]]:
        """Upsert entries in one group-committed transaction: the writer's future, resolved
        after the commit (awaiting it needs no task)."""
        return self._submit(writes.put_entries, scope, list(entries), now, self.quotas,
                            self._deferred)

    def _scans_many(self, scope: Scope, q: Query) -> bool:
        """True when reading `q` may walk more than `scan_on_loop` rows of the namespace (no
        keys: the read counts or filters the visible rows of a large namespace). A read by tags
        alone walks its tags' postings, not the namespace: it stays on the loop while they are
        few (a thread hop cost such a read as much again)."""
        if q.keys:
            return False
        conn = self._conn()
        if reads.namespace_entries(conn, scope.namespace) <= self.scan_on_loop:
            return False
        if q.tags and not q.where and not q.key_prefix:
            return reads.tag_postings(conn, scope, q, self.scan_on_loop) > self.scan_on_loop
        return True

    async def find(self, scope: Scope, q: Query, now: float) -> tuple[list[StoredEntry], int]:
        """Entries matching `q`, best stored score first; (page, total). Off the loop when it
        may walk a large namespace."""
        if self._scans_many(scope, q):
            return await self._scans.submit(  # type: ignore[no-any-return]
                scope.namespace, reads.find_entries, scope, q, now)
        return reads.find_entries(self._conn(), scope, q, now)

    def _keyword_scans_many(self, scope: Scope, terms: tuple[str, ...]) -> bool:
        """True when a keyword search of `terms` may read more than `keyword_on_loop` rows:
        the namespace holds more entries than that and the terms are in more rows of the index
        (`keyword.postings`, counted up to the bound). At a million rows a cluster word's
        ~1,000 matches held the loop 25-59 ms (their pages spread over the file)."""
        if not terms:
            return False
        conn = self._conn()
        most = self.keyword_on_loop
        if reads.namespace_entries(conn, scope.namespace) <= most:
            return False
        return keyword.postings(conn, terms, most) > most

    async def search(
        self, scope: Scope, q: Query, text: str, now: float, candidates: int, *,
        relevance: bool = True,
    ) -> list[StoredEntry]:
        """Keyword candidates for `text` with `relevance` set (see `host.text.keyword`; None
        with `relevance` False: `EntryStore.search`)."""
        found, _ = await self.search_stats(scope, q, text, now, candidates, relevance=relevance)
        return found

    async def search_stats(
        self, scope: Scope, q: Query, text: str, now: float, candidates: int, *,
        relevance: bool = True,
    ) -> tuple[list[StoredEntry], Bm25Stats]:
        """`search`, and the statistics it scored its candidates with (the terms it kept for
        `q`, the namespace's counts): what scores a text outside the index on the index's
        scale (see `host.text.bm25`), of the same snapshot (`EntryStore.search_stats`). On a
        scan thread when its terms are in many rows (`_keyword_scans_many`): the same
        function on a connection of its own, so the same answer."""
        terms = query_terms(text)
        args = (scope, q, terms, now, candidates, self.max_term_docs, self.max_matches,
                keyword.INDEX_BUDGET, relevance)
        if self._keyword_scans_many(scope, terms):
            return await self._scans.submit(  # type: ignore[no-any-return]
                scope.namespace, keyword.search_with_stats, *args)
        return keyword.search_with_stats(self._conn(), *args)

    def analyse(self, text: str) -> Analysis:
        """`text` as the keyword index would hold it (stemmed terms and length)."""
        return sqlite_bm25.analyse(text)

    def forget(
        self, scope: Scope, tiers: Sequence[str], keys: Sequence[bytes], tags: Sequence[str],
        now: float,
    ) -> asyncio.Future[int]:
        """Delete matching live entries: the writer's future, resolved after the commit."""
        return self._submit(writes.forget_entries, scope, list(tiers), list(keys), list(tags), now,
                            self._deferred, grows=False)

    def touch(
        self, scope: Scope, tiers: Sequence[str], keys: Sequence[bytes], when: float
    ) -> asyncio.Future[int]:
        """Record a read (`EntryStore.touch`: `updated_at` moves forward to `when`, nothing
        else, expiry included): the writer's future, resolved after the group's commit."""
        return self._submit(writes.touch_entries, scope, list(tiers), [(k, when) for k in keys],
                            grows=False)

    async def collect_garbage(self, now: float) -> int:
        """Delete every expired entry, in batches so other writes interleave."""
        total = 0
        while True:
            n = await self._submit(writes.collect_expired, now, writes.GC_BATCH, self._deferred,
                                   grows=False)
            total += n
            if n < writes.GC_BATCH:
                return total

    async def count_by_tier(self, now: float) -> dict[str, int]:
        """Live entries by tier, counted on a worker thread with its own connection (a scan:
        the metrics endpoint calls it at most every few seconds)."""
        def _count() -> dict[str, int]:
            with closing(connect(self.path)) as conn:
                return count_by_tier(conn, now)

        return await asyncio.to_thread(_count)

    # -- the memory browser (host/ui; `host.store.interface.EntryStore`, the SQL is in sqlite_browse) ------------

    async def _on_thread(self, fn: Callable[..., _T], *args: Any) -> _T:
        """`fn(conn, *args)` on a worker thread with a connection of its own (a WAL snapshot):
        the browser's reads are not indexed for and must not hold up the loop."""
        def run() -> _T:
            with closing(connect(self.path)) as conn:
                return fn(conn, *args)

        return await asyncio.to_thread(run)

    async def overview(self, namespaces: Sequence[str] | None, now: float
                       ) -> list[NamespaceOverview]:
        """The namespaces with live entries, by name (`EntryStore.overview`)."""
        return await self._on_thread(sqlite_browse.overview, namespaces, now)

    async def browse(self, namespace: str, f: BrowseFilter, now: float
                     ) -> tuple[list[BrowsedEntry], int]:
        """Live entries of `namespace` matching `f`, newest first (`EntryStore.browse`)."""
        return await self._on_thread(sqlite_browse.browse, namespace, f, now)

    async def browse_entry(self, namespace: str, id: int, now: float) -> BrowsedEntry | None:
        """The live entry `id` of `namespace`, or None."""
        return await self._on_thread(sqlite_browse.browse_entry, namespace, id, now)

    async def export_namespace(self, namespace: str, now: float, after: int = 0,
                               limit: int = 1000) -> list[BrowsedEntry]:
        """A page of the live entries of `namespace`: row ids above `after`, in order."""
        return await self._on_thread(sqlite_browse.export_namespace, namespace, now, after,
                                     limit)

    # -- the change log (host.store.changes.ChangeLog; the SQL is in sqlite/changes.py) -------

    async def change_head(self, namespace: str) -> int:
        """The newest change of `namespace` (at least its floor)."""
        return changes.head(self._conn(), namespace)

    async def change_heads(self, namespaces: Sequence[str]) -> dict[str, int]:
        """`change_head` of each namespace."""
        return changes.heads(self._conn(), namespaces)

    async def change_floor(self, namespace: str) -> int:
        """The highest change pruned from `namespace`."""
        return changes.floor(self._conn(), namespace)

    async def changes_after(self, namespace: str, after: int, limit: int,
                            max_bytes: int = 0) -> list[Change]:
        """Up to `limit` changes of `namespace` after `after`, in order (within `max_bytes`)."""
        return changes.changes_after(self._conn(), namespace, after, limit, max_bytes)

    async def prune_changes(self, before: float, max_rows: int) -> int:
        """Delete changes older than `before` or past `max_rows` a namespace (writer thread)."""
        return await self._submit(  # type: ignore[no-any-return]
            changes.prune, before, max_rows, grows=False)

    # -- the store extensions (host.store.interface.EntryStore; sqlite/extensions.py) ---------

    async def client_vectors(self, scope: Scope, q: Query, space: str, now: float
                             ) -> tuple[int, list[tuple[int, np.ndarray]]]:
        """The dimension of `space` (0: none) and the readable entries' vectors in it."""
        return ext.client_vectors(self._conn(), scope, q, space, now)

    def refresh(self, scope: Scope, tiers: Sequence[str], keys: Sequence[bytes], now: float
                ) -> asyncio.Future[int]:
        """Restart the TTL of the entries under `keys`: after the commit, how many."""
        return self._submit(ext.refresh_entries, scope, list(tiers), list(keys), now,
                            grows=False)

    async def sweep(self, scope: Scope, tiers: Sequence[str], now: float) -> int:
        """Delete the expired entries `scope` may see in `tiers`, `ops.GC_BATCH` a transaction
        (as the collector: other writes go between two); after the last commit, how many."""
        total = 0
        while True:
            n = await self._submit(ext.sweep_expired, scope, list(tiers), now, self._deferred,
                                   writes.GC_BATCH, grows=False)
            total += n
            if n < writes.GC_BATCH:
                return total

    async def key_paths(self, scope: Scope, q: Query, field: str, prefix: Sequence[str],
                        now: float) -> list[bytes]:
        """The distinct JSON arrays under key member `field` that `q` lets `scope` read (off
        the loop in a large namespace)."""
        if self._scans_many(scope, q):
            return await self._scans.submit(  # type: ignore[no-any-return]
                scope.namespace, ext.key_path_texts, scope, q, field, prefix, now)
        return ext.key_path_texts(self._conn(), scope, q, field, prefix, now)

    # -- similarity search (host/search/engine.py; the SQL is in sqlite.vectors) -------------

    async def fetch(
        self, scope: Scope, q: Query, ids: Sequence[int], now: float
    ) -> list[StoredEntry]:
        """The entries among row `ids` that `q` lets `scope` read, with `id` set."""
        return vec.fetch_entries(self._conn(), scope, q, ids, now)

    async def neighbours(
        self, scope: Scope, q: Query, hits: Sequence[tuple[int, str, str]], span: int,
        now: float,
    ) -> list[tuple[StoredEntry, int, int]]:
        """The up to `span` entries `q` lets `scope` read right before and after each hit
        `(id, tier, owner)` in its own (namespace, tier, owner): `(entry, hit id, distance)`."""
        return vec.neighbour_entries(self._conn(), scope, q, hits, span, now)

    async def allowed_ids(self, scope: Scope, q: Query, now: float) -> np.ndarray:
        """Row ids of the live entries `q` (keys, tags, tiers, filters) lets `scope` read (off
        the loop in a large namespace)."""
        if self._scans_many(scope, q):
            return await self._scans.submit(  # type: ignore[no-any-return]
                scope.namespace, vec.allowed_ids, scope, q, now)
        return vec.allowed_ids(self._conn(), scope, q, now)

    async def pending_vectors(
        self, limit: int, namespace: str | None = None
    ) -> list[tuple[vec.Pending, bytes | None]]:
        """Entries waiting for a vector, newest first (see `sqlite.vectors.pending`)."""
        return vec.pending(self._conn(), limit, namespace)

    async def write_vectors(self, rows: Sequence[tuple[int, str, bytes | None]]) -> list[int]:
        """Store vectors and dequeue their entries; returns after the commit."""
        return await self._submit(vec.write_vectors, list(rows))

    async def set_vector_model(self, name: str, dim: int) -> bool:
        """Record the embedder; a different one drops every vector and queues re-embedding."""
        return await self._submit(vec.set_model, name, dim)

    async def requeue_vectors(self) -> int:
        """Queue every entry for re-embedding; the queue's length."""
        return await self._submit(vec.requeue_all)

    async def vector_queue(self) -> int:
        """Entries waiting for a vector."""
        return vec.queue_size(self._conn())

    async def vectors_gone(self) -> list[int]:
        """Ids whose vectors deletes removed since the last `clear_vectors_gone`."""
        return vec.gone_ids(self._conn())

    async def clear_vectors_gone(self, ids: Sequence[int]) -> None:
        """Acknowledge `vectors_gone` ids."""
        await self._submit(vec.clear_gone, list(ids), grows=False)

    def load_vectors(self, dim: int) -> Iterator[tuple[list[vec.Pending], np.ndarray]]:
        """Every stored vector in batches, on a connection of its own (run it in a thread)."""
        with closing(connect(self.path)) as conn:
            yield from vec.load_vectors(conn, dim)

    def namespace_vectors(self, namespace: str, dim: int) -> Iterator[
            tuple[list[int], np.ndarray, list[tuple[str, str]], list[float | None]]]:
        """The stored vectors of `namespace` in batches, on a connection of its own (run it in
        a thread: the search loads a namespace on its first query; see
        `sqlite.vectors.namespace_vectors`)."""
        with closing(connect(self.path)) as conn:
            yield from vec.namespace_vectors(conn, namespace, dim)

    async def vectors_of(self, ids: Sequence[int], dim: int) -> tuple[list[int], np.ndarray]:
        """The stored float32 vectors of entry `ids` (`sqlite.vectors.vectors_of`): what an
        approximate index found, scored again exactly."""
        return vec.vectors_of(self._conn(), ids, dim)

    def client_space(self, namespace: str, space: str
                     ) -> tuple[int, int, Iterator[ext.ClientRows]]:
        """(the namespace's newest change number, the space's dimension, its rows in
        batches), all of one snapshot on a connection of its own, closed when the rows are
        read (blocking: run it in a thread; `sqlite.extensions.client_space_rows`)."""
        conn = connect(self.path)
        try:
            conn.execute("BEGIN")  # one snapshot: the change number is that of the rows
            head = changes.head(conn, namespace)
            dims = ext.client_space_dims(conn, namespace, space)
        except BaseException:
            conn.close()
            raise

        def rows() -> Iterator[ext.ClientRows]:
            try:
                if dims:
                    yield from ext.client_space_rows(conn, namespace, space, dims)
            finally:
                conn.close()

        return head, dims, rows()

    async def client_changes(self, namespace: str, after: int, limit: int
                             ) -> tuple[int, list[int] | None]:
        """A page of the entry rows stored in `namespace` after change `after`, with the change
        number read up to (None: reload; `sqlite.extensions.client_changes`)."""
        return ext.client_changes(self._conn(), namespace, after, limit)

    async def client_rows_of(self, ids: Sequence[int], space: str, dims: int
                             ) -> ext.ClientRows:
        """The entries among `ids` with vectors in `space` now, with them. More than
        `client_rows_on_loop` of them are read in a thread on a connection of its own (the same
        function: the same rows): a catch-up's page of 10,000 entries of 384 numbers (15 MB),
        read on the loop, was in its steps of 85-98 ms at a million rows (py-spy)."""
        if len(ids) > self.client_rows_on_loop:
            def read() -> ext.ClientRows:
                with closing(connect(self.path)) as conn:
                    return ext.client_rows_of(conn, ids, space, dims)

            return await asyncio.to_thread(read)
        return ext.client_rows_of(self._conn(), ids, space, dims)

    def vector_seq(self) -> int:
        """The number of the newest write of vectors, on a connection of its own (read it
        before `load_vectors`: what is written meanwhile comes with `vectors_since`)."""
        with closing(connect(self.path)) as conn:
            return vec.vector_seq(conn)

    async def vectors_since(self, after: int, dim: int, limit: int = 10_000
                            ) -> tuple[list[vec.Pending], np.ndarray, int]:
        """The vectors written after number `after` (by any process on the file; see
        `sqlite.vectors.vectors_since`)."""
        return vec.vectors_since(self._conn(), after, dim, limit)

    async def quota_usage(self, quotas: Quotas, top: int) -> UsageSummary | None:
        """How full the tenants are (`host.store.growth.QuotaReport`), read in a thread on a
        connection of its own (never on the loop); None for an in-memory database."""
        if self.path == ":memory:" or self.path.startswith("file::memory:"):
            return None

        def read() -> UsageSummary:
            with closing(connect(self.path)) as conn:
                return sqlite_usage.quota_usage(conn, quotas, top)
        return await asyncio.to_thread(read)

    def record_reads(self, reads: Sequence[tuple[str, str, str, bytes, float]]
                     ) -> asyncio.Future[int]:
        """Write entries' last read times (`host.store.growth.ReadTimes`): the writer's future,
        resolved after the group's commit."""
        return self._submit(sqlite_reads.record, list(reads), grows=False)

    async def read_times(self, ids: Sequence[int]) -> dict[int, float]:
        """The last read time of each of `ids` ever read (`host.store.growth.ReadTimes`)."""
        return sqlite_reads.read_times(self._conn(), ids)

    async def usage_of(self, namespace: str, agent: str
                       ) -> tuple[tuple[int, int], tuple[int, int]]:
        """What a namespace and an agent in it hold (`host.store.growth.UsageOf`): two rows
        of the quota counters, on the loop's connection."""
        return sqlite_usage.usage_of(self._conn(), namespace, agent)

    async def agents_usage(self, namespaces: Sequence[str]
                           ) -> dict[str, dict[str, tuple[int, int]]]:
        """Each agent's (entries, bytes) in `namespaces` (`host.store.growth.UsageOf`)."""
        return sqlite_usage.agents_usage(self._conn(), namespaces)

    async def ready(self) -> bool:
        """True when the database answers and its disk has room for writes."""
        try:
            self._conn().execute("SELECT 1").fetchone()
        except Exception:
            return False
        return self._writer is not None and self.space.recover()

    def not_ready_reason(self) -> str:
        """Why `ready()` is False, for `/readyz` ("" when it is not the disk)."""
        if not self.space.full:
            return ""
        return (f"disk full since {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(self.space.since))}"
                f" ({self.space.free_bytes()} bytes free; stores refused, forgets run)")
