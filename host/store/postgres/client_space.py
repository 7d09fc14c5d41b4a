"""`ClientSpaceReads` on PostgreSQL: the host searches the client spaces in its own in-memory
indexes (`host.search.client_vectors.ClientSpaces`), as on SQLite, instead of reading every
vector of a space from SQL on each retrieve.

Each host holds its own copy of a space: loaded on its first retrieve (`client_space`, in the
indexes' loader thread), caught up on the database's change log before each retrieve
(`client_changes`, the entry rows of the `stored` changes since, from `a2e_change_keys`), so a
write through any host on the database is seen by the next retrieve of every host; what the
index finds is read back through `fetch` (visibility and TTL again).

A load is one snapshot: one connection in a REPEATABLE READ READ ONLY transaction reads the
change number and the space's rows, a page at a time through a cursor. The loader runs in a
thread and asyncpg on the host's loop (captured when the store opens): each page is fetched
with `asyncio.run_coroutine_threadsafe` (the loop takes the records off the wire, the loader's
thread makes them rows and vectors: `client_page_rows` bounds the loop's part). The connection
goes back to the pool when the pages end, when the iterator is closed, or when it is dropped
unread.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Coroutine, Iterator, Sequence
from typing import Any, TypeVar

import numpy as np

from host.store.postgres import extensions as pg_ext
from host.store.postgres.sql import Params, StoreState, read_where
from host.store.records import ClientRows, Query, Scope

__all__ = ["ClientSpace", "SpacePages"]

T = TypeVar("T")
_RELEASE_SECONDS = 30.0  # longest a thread waits for the loop to take a connection back


class _Snapshot:
    """One connection of the pool in a read-only REPEATABLE READ transaction, and its cursor."""

    def __init__(self, pool: Any, page_rows: int) -> None:
        self.pool = pool
        self.page_rows = page_rows
        self.conn: Any = None
        self.tx: Any = None
        self.cursor: Any = None

    async def begin(self, namespace: str, space: str) -> tuple[int, int]:
        self.conn = await self.pool.acquire()
        self.tx = self.conn.transaction(isolation="repeatable_read", readonly=True)
        await self.tx.start()
        head = await pg_ext.space_head(self.conn, namespace)
        dims = await pg_ext.space_dims(self.conn, namespace, space)
        if dims:
            self.cursor = await self.conn.cursor(pg_ext.SPACE_ROWS, namespace, space)
        return head, dims

    async def page(self) -> list[Any]:
        """The next page's records (empty: the end), decoded by the caller's thread."""
        return list(await self.cursor.fetch(self.page_rows))

    async def release(self) -> None:
        conn, self.conn = self.conn, None
        tx, self.tx = self.tx, None
        self.cursor = None
        if conn is None:
            return
        try:
            if tx is not None and not conn.is_closed():
                await tx.rollback()
        finally:
            await self.pool.release(conn)


def _release(loop: asyncio.AbstractEventLoop, snap: _Snapshot) -> None:
    """Give the snapshot's connection back from any thread (on the loop's own thread, as a
    task: it cannot wait there for the loop)."""
    if snap.conn is None or loop.is_closed():
        return
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        loop.create_task(snap.release())
        return
    try:
        asyncio.run_coroutine_threadsafe(snap.release(), loop).result(_RELEASE_SECONDS)
    except RuntimeError:  # the loop stopped: the pool's close takes the connection
        pass


class SpacePages:
    """The pages of one space's rows on a snapshot (an iterator for the loader's thread)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, snap: _Snapshot, dims: int) -> None:
        self._loop = loop
        self._snap = snap
        self._dims = dims
        self._done = weakref.finalize(self, _release, loop, snap)  # also when dropped unread
        self._done.atexit = False

    def __iter__(self) -> SpacePages:
        return self

    def __next__(self) -> ClientRows:
        if not self._done.alive or self._snap.cursor is None:
            self.close()
            raise StopIteration
        try:
            rows = asyncio.run_coroutine_threadsafe(self._snap.page(), self._loop).result()
        except BaseException:
            self.close()
            raise
        if not rows:
            self.close()
            raise StopIteration
        return pg_ext.client_rows(rows, self._dims)  # here, in the loader's thread

    def close(self) -> None:
        """Give the connection back (idempotent)."""
        self._done()


class ClientSpace(StoreState):
    """`ClientSpaceReads` on the store's pool (see the module's docstring)."""

    _loop: asyncio.AbstractEventLoop | None = None  # the loop the pool runs on (`open`)
    client_page_rows = 2_000  # entries a page of a load reads (taken off the wire on the loop)

    def _on_loop(self, coro: Coroutine[Any, Any, T]) -> T:
        assert self._loop is not None, "the store is not open"
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def client_space(self, namespace: str, space: str
                     ) -> tuple[int, int, Iterator[ClientRows]]:
        """(the change number the rows are current to, the space's dimension, its rows in
        pages), all of one snapshot on a connection of its own, given back when the pages are
        read or dropped (blocking, from a thread other than the loop's)."""
        assert self._loop is not None, "the store is not open"
        snap = _Snapshot(self.pool, self.client_page_rows)
        try:
            head, dims = self._on_loop(snap.begin(namespace, space))
        except BaseException:
            _release(self._loop, snap)
            raise
        return head, dims, SpacePages(self._loop, snap, dims)

    async def client_changes(self, namespace: str, after: int, limit: int
                             ) -> tuple[int, list[int] | None]:
        """A page of the entry rows stored in `namespace` after change `after`, with the change
        number read up to (None: reload; `postgres.extensions.client_changes`)."""
        return await pg_ext.client_changes(self.pool, namespace, after, limit)

    async def client_rows_of(self, ids: Sequence[int], space: str, dims: int) -> ClientRows:
        """The entries among `ids` with vectors in `space` now, with them (ascending ids), read
        `client_page_rows` at a time (the loop takes each off the wire, free between two) and
        made rows in a thread past that many (a catch-up's page of 10,000)."""
        step = self.client_page_rows
        if len(ids) <= step:
            return await pg_ext.client_rows_of(self.pool, ids, space, dims)
        order = sorted({int(i) for i in ids})
        records: list[Any] = []
        for i in range(0, len(order), step):
            records += await self.pool.fetch(pg_ext.ROWS_OF, order[i:i + step], space)
        return await asyncio.to_thread(pg_ext.client_rows, records, dims)

    async def allowed_ids(self, scope: Scope, q: Query, now: float) -> np.ndarray:
        """Row ids of the live entries `q` (keys, tags, filters, tiers) lets `scope` read."""
        p = Params()
        where = read_where(scope, q, now, p)
        rows = await self.pool.fetch(f"SELECT e.id FROM a2e_entries e WHERE {where}", *p.values)
        return np.fromiter((int(r[0]) for r in rows), dtype=np.int64, count=len(rows))
