"""Client-vector retrieves from the host's in-memory indexes on both backends (run on SQLite and
on PostgreSQL, so the two cannot drift): the same pages and similarities as a brute-force numpy
computation and as the store's SQL scan (`client_vectors`, what a host without the indexes
answers), through updates, forgets, plain re-stores and new entries, including those written
through another host on the same database. On PostgreSQL also the store's side of the loader:
a load's connection goes back to the pool however its pages end, and a put's vectors, written
after its entries' commit, are never skipped by a reader in between."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy as np
import pytest
from support.client_vectors import (
    DIMS,
    SPACE,
    Model,
    check_retrieves,
    put_vectors,
    random_vectors,
    vector_config,
    vector_sessions,
)
from support.hosts import make_config, running_host

from host.app import Host, make_store
from host.search.client_vectors import nearest, space_key, unit_rows
from host.store.postgres import extensions as pg_ext
from host.store.records import NewEntry, Query, Scope

pytestmark = pytest.mark.all_backends




async def _same_as_the_scan(host: Host, rng: np.random.Generator, agent: str = "a1") -> None:
    """The indexes' pages equal the SQL scan's (`store.client_vectors` + `nearest`): the same
    entries in the same order, similarities within 1e-6."""
    store: Any = host.store
    spaces = host.search.spaces
    assert spaces is not None
    scope = Scope("ns", agent)
    for _ in range(3):
        v = unit_rows([rng.standard_normal(DIMS).tolist()])[0]
        q = Query(tiers=("episodic", "semantic"), limit=25)
        page, _total = await spaces.search(scope, q, SPACE, v, host.clock())
        _dims, rows = await store.client_vectors(scope, q, SPACE, host.clock())
        want = nearest(v, rows, 0.0)[:25]
        assert [e.id for _, e in page] == [i for _, i in want]
        assert np.allclose([s for s, _ in page], [s for s, _ in want], atol=1e-6, rtol=0)


async def test_retrieves_by_vector_follow_every_write_on_both_backends(store_db: str) -> None:
    """Served from the host's indexes (the space is loaded), answering as numpy and as the SQL
    scan do; then forgets, re-stores with new vectors and without, new entries, and entries
    stored through a second host on the same database: the next retrieve of each host sees
    them."""
    rng = np.random.default_rng(21)
    model = Model()
    async with running_host(vector_config(store_db)) as host, vector_sessions(host) as cs:
        t = host.clock()
        await put_vectors(cs["a1"], model, "a1", rng, range(0, 80), "semantic", t)
        await put_vectors(cs["a1"], model, "a1", rng, range(80, 120), "episodic", t)
        await put_vectors(cs["a2"], model, "a2", rng, range(120, 160), "episodic", t)
        await put_vectors(cs["a1"], model, "a1", rng, range(160, 170), "semantic", t, vectors=False)
        await check_retrieves(host, cs, model, rng)
        spaces = host.search.spaces
        assert spaces is not None and space_key("ns", SPACE) in spaces.indexes.keys()
        await _same_as_the_scan(host, rng)

        assert await cs["a1"].forget(keys=[{"k": k} for k in range(10)], tier="semantic") == 10
        for k in range(10):
            del model.entries[k]
        await put_vectors(cs["a1"], model, "a1", rng, range(10, 20), "semantic", host.clock())
        await put_vectors(cs["a1"], model, "a1", rng, range(20, 25), "semantic", host.clock(),
                          vectors=False)
        await put_vectors(cs["a2"], model, "a2", rng, range(120, 125), "episodic", host.clock())
        await put_vectors(cs["a1"], model, "a1", rng, range(170, 190), "semantic", host.clock())
        await check_retrieves(host, cs, model, rng)
        await _same_as_the_scan(host, rng)
        await _same_as_the_scan(host, rng, "a2")

        # a second host on the same database: each writes, the other's next retrieve sees it
        async with running_host(vector_config(store_db)) as other, vector_sessions(other) as os_:
            await check_retrieves(other, os_, model, rng, queries=2)
            await put_vectors(os_["a1"], model, "a1", rng, range(30, 40), "semantic", other.clock())
            await put_vectors(os_["a2"], model, "a2", rng, range(200, 210), "episodic",
                              other.clock())
            assert await os_["a1"].forget(keys=[{"k": k} for k in range(40, 45)],
                                          tier="semantic") == 5
            for k in range(40, 45):
                del model.entries[k]
            await check_retrieves(host, cs, model, rng, queries=2)
            await put_vectors(cs["a1"], model, "a1", rng, range(45, 50), "semantic", host.clock(),
                              vectors=False)
            await put_vectors(cs["a1"], model, "a1", rng, range(210, 220), "semantic", host.clock())
            await check_retrieves(other, os_, model, rng, queries=2)
            await check_retrieves(host, cs, model, rng, queries=2)
        await _same_as_the_scan(host, rng)


async def test_an_approximate_space_rescored_equals_the_scan(store_db: str) -> None:
    """A space past `ann_min_rows` (8-bit codes, its best entries scored again on float32)
    gives the SQL scan's similarities within 1e-6 for every entry it returns, and sees a
    forget."""
    rng = np.random.default_rng(4)
    model = Model()
    async with running_host(vector_config(store_db, ann_min_rows=300)) as host, \
            vector_sessions(host, ("a1",)) as cs:
        for first in range(0, 600, 200):
            await put_vectors(cs["a1"], model, "a1", rng, range(first, first + 200), "semantic",
                              host.clock())
        spaces = host.search.spaces
        assert spaces is not None
        for round_ in range(2):
            for _ in range(5):
                q = rng.standard_normal(DIMS).tolist()
                got = (await cs["a1"].retrieve(vector=q, vector_space=SPACE, limit=10)).entries
                want = dict((k, s) for k, s in model.expected("a1", q, host.clock(),
                                                              limit=10_000))
                assert got and all(abs(e["relevance"] - want[e["key"]["k"]]) < 1e-6
                                   for e in got)
            await spaces.indexes.wait_idle()  # the load promotes the space in the background
            assert spaces.indexes.stats()["ann_keys"] == 1
            if round_ == 0:
                assert await cs["a1"].forget(keys=[{"k": k} for k in range(0, 600, 3)],
                                             tier="semantic") == 200
                for k in range(0, 600, 3):
                    del model.entries[k]


# -- the PostgreSQL store's side (`host.store.postgres.client_space`) -------------------------

def _entry(k: int, vecs: np.ndarray | None = None) -> NewEntry:
    return NewEntry(tier="semantic", key=b'{"k":%d}' % k, content=b'{"t":%d}' % k,
                    vectors=vecs.tobytes() if vecs is not None else b"",
                    vector_space=SPACE if vecs is not None else "",
                    dims=DIMS if vecs is not None else 0)


async def test_a_loads_connection_goes_back_however_its_pages_end(pg_url: str) -> None:
    """Read to the end, closed after one page, dropped unread, or its snapshot refused: the
    pool gets its connection back each time; the pages are one snapshot of the rows."""
    store: Any = make_store(make_config(pg_url))
    await store.open()
    try:
        scope = Scope("ns", "a1")
        rng = np.random.default_rng(1)
        entries = [_entry(k, unit_rows(random_vectors(rng))) for k in range(25)]
        assert await store.put(scope, entries, time.time()) == [None] * 25

        def in_use() -> int:
            return int(store.pool.get_size() - store.pool.get_idle_size())

        def read_all() -> tuple[int, int, list[int]]:
            head, dims, pages = store.client_space("ns", SPACE)
            ids = [i for page in pages for i in page[0]]
            return head, dims, ids

        store.client_page_rows = 10
        head, dims, ids = await asyncio.to_thread(read_all)
        assert (head, dims, len(ids)) == (await store.change_head("ns"), DIMS, 25)
        assert in_use() == 0

        def one_page_then_close() -> int:
            _h, _d, pages = store.client_space("ns", SPACE)
            first = next(pages)
            pages.close()
            return len(first[0])

        assert await asyncio.to_thread(one_page_then_close) == 10
        assert in_use() == 0

        def dropped_unread() -> int:
            return store.client_space("ns", SPACE)[0]

        assert await asyncio.to_thread(dropped_unread) == head
        await asyncio.sleep(0.1)
        assert in_use() == 0

        def snapshot() -> tuple[list[int], Any]:
            _h, _d, pages = store.client_space("ns", SPACE)
            first = next(pages)[0]
            return first, pages

        first, pages = await asyncio.to_thread(snapshot)
        # a write between two pages: the load's pages are still of its snapshot
        assert await store.put(scope, [_entry(k, unit_rows(random_vectors(rng)))
                                       for k in range(100, 110)], time.time()) \
            == [None] * 10
        rest = await asyncio.to_thread(lambda: [i for p in pages for i in p[0]])
        assert len(first) + len(rest) == 25
        assert in_use() == 0
        store.client_page_rows = 10_000
        _h, dims, none = await asyncio.to_thread(
            lambda: (lambda r: (r[0], r[1], list(r[2])))(store.client_space("ns", "nothing")))
        assert (dims, none) == (0, [])
        assert in_use() == 0
    finally:
        await store.close()


async def test_vectors_written_after_their_entries_commit_are_not_skipped(pg_url: str) -> None:
    """A put writes its client vectors in a transaction after its entries' commit: a load or a
    catch-up between the two stops before that change, so the next catch-up reads the vectors
    once written. A plain entry older than `PENDING_SECONDS` holds nothing back."""
    store: Any = make_store(make_config(pg_url))
    await store.open()
    try:
        scope = Scope("ns", "a1")
        rng = np.random.default_rng(2)
        assert await store.put(scope, [_entry(1, unit_rows(random_vectors(rng)))],
                               time.time()) == [None]
        old = time.time() - 2 * pg_ext.PENDING_SECONDS
        assert await store.put(scope, [_entry(2)], old) == [None]  # plain, long ago
        two = await store.change_head("ns")
        assert await store.put(scope, [_entry(3)], time.time()) == [None]  # its vectors lag
        head, dims, pages = await asyncio.to_thread(store.client_space, "ns", SPACE)
        loaded = await asyncio.to_thread(lambda: [i for p in pages for i in p[0]])
        assert head == two and dims == DIMS and len(loaded) == 1
        three = await store.pool.fetchval("SELECT id FROM a2e_entries WHERE key = $1",
                                          '{"k":3}')
        assert await store.client_changes("ns", head, 100) == (head, [three])
        vecs = unit_rows(random_vectors(rng))
        await pg_ext.write_vectors(store.pool, scope, [_entry(3, vecs)])  # the lagging write
        upto, stored = await store.client_changes("ns", head, 100)
        assert upto == head + 1 and stored is not None
        ids, counts, got, _places, _expires = await store.client_rows_of(stored, SPACE, DIMS)
        assert ids == stored and np.array_equal(got, vecs)
        assert await store.client_changes("ns", upto, 100) == (upto, [])
    finally:
        await store.close()
