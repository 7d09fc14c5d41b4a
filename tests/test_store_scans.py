"""Scans and sweeps hold no other tenant: a read that may walk a large namespace (a filter, a
key prefix, a key-path listing) leaves the event loop to the others while it runs, and a sweep
deletes in batches, each its own transaction, with other writes between them."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from host.store.filters import parse_filter, parse_key_prefix
from host.store.interface import EntryStore
from host.store.postgres import scan_index as pg_scan_index
from host.store.postgres.sql import Params, read_where
from host.store.postgres.store import PostgresEntryStore
from host.store.records import NewEntry, Query, Scope
from host.store.sqlite import reads, scan_index
from host.store.sqlite.scans import SCAN_ON_LOOP, ScanReader
from host.store.sqlite.schema import connect
from host.store.sqlite.store import SQLiteEntryStore
from protocol.keys import canonical_key

pytestmark = pytest.mark.all_backends

A = Scope("ns", "alice")
T0 = 1_800_000_000.0
BOTH = ("episodic", "semantic")


@pytest.fixture
async def store(store_db: str) -> AsyncIterator[EntryStore]:
    """An open store of the parametrised backend."""
    s: EntryStore
    if store_db.startswith("postgresql"):
        s = PostgresEntryStore(store_db, pool_max=4)
    else:
        s = SQLiteEntryStore(store_db)
    async with s:  # type: ignore[attr-defined]
        yield s


def entry(i: int, **kw: Any) -> NewEntry:
    return NewEntry(tier="semantic", key=canonical_key({"ns": ["u", str(i % 3)], "k": i}),
                    content=b'{"kind": "note"}', **kw)


async def expired_changes(store: EntryStore, namespace: str) -> list[int]:
    """The sequence numbers of the namespace's `expired` changes."""
    return [c.seq for c in await store.changes_after(namespace, 0, 1000) if c.op == "expired"]


async def test_a_sweep_of_more_than_a_batch_commits_batch_by_batch(store: EntryStore) -> None:
    """A sweep of 2,500 expired entries deletes them all in transactions of at most 1,000,
    each logged as its own `expired` change (one transaction held the writer ~1 s at 50,000)."""
    await store.put(A, [entry(i, ttl=60, updated_at=T0 - 3600) for i in range(2500)], T0)
    await store.put(A, [entry(9999)], T0)  # live: stays
    assert await store.sweep(A, ("semantic",), T0) == 2500
    assert len(await expired_changes(store, "ns")) == 3
    found, total = await store.find(A, Query(tiers=BOTH), T0)
    assert total == 1 and [e.key for e in found] == [entry(9999).key]


async def test_a_write_lands_between_the_batches_of_a_sweep(tmp_path: Path) -> None:
    """On SQLite's single writer, a store sent while a sweep runs commits between two of the
    sweep's transactions, not after all of them."""
    async with SQLiteEntryStore(tmp_path / "db.sqlite") as store:
        await store.put(A, [entry(i, ttl=60, updated_at=T0 - 3600) for i in range(2500)], T0)
        sweep = asyncio.ensure_future(store.sweep(A, ("semantic",), T0))
        await asyncio.sleep(0)  # the sweep's first batch is queued
        await store.put(A, [entry(9999)], T0)
        assert await sweep == 2500
        stored = [c.seq for c in await store.changes_after("ns", 0, 1000) if c.op == "stored"]
        assert min(await expired_changes(store, "ns")) < stored[-1] < max(
            await expired_changes(store, "ns"))


Read = Callable[[EntryStore], Awaitable[Any]]
READS: dict[str, Read] = {
    "filter": lambda s: s.find(A, Query(tiers=BOTH, where=parse_filter({"kind": "none"})), T0),
    "key_prefix": lambda s: s.find(
        A, Query(tiers=BOTH, key_prefix=parse_key_prefix({"ns": ["u", "1"]})), T0),
    "paths": lambda s: s.key_paths(A, Query(tiers=BOTH), "ns", [], T0),  # type: ignore[attr-defined]
}


@pytest.mark.parametrize("read", sorted(READS))
async def test_a_read_that_scans_a_large_namespace_lets_the_loop_run(
        store: EntryStore, read: str) -> None:
    """A filter, key-prefix or key-path read of a namespace larger than `SCAN_ON_LOOP` entries
    gives the loop up at once: a task started after it runs before it ends (on the loop, the
    whole read ran in its first step, every other connection waiting)."""
    await store.put(A, [entry(i) for i in range(SCAN_ON_LOOP + 1)], T0)
    order: list[str] = []

    async def scan() -> None:
        await READS[read](store)
        order.append("scan")

    async def bystander() -> None:
        order.append("bystander")

    await asyncio.gather(asyncio.create_task(scan()), asyncio.create_task(bystander()))
    assert order == ["bystander", "scan"]


async def read_beside_a_bystander(store: EntryStore, q: Query) -> tuple[list[str], Any]:
    """`store.find(q)` started beside a task started after it: (which ended first, the page)."""
    order: list[str] = []
    got: list[Any] = []

    async def scan() -> None:
        got.append(await store.find(A, q, T0))
        order.append("scan")

    async def bystander() -> None:
        order.append("bystander")

    await asyncio.gather(asyncio.create_task(scan()), asyncio.create_task(bystander()))
    return order, got[0]


async def test_a_read_by_a_rare_tag_of_a_large_namespace_stays_on_the_loop(
        tmp_path: Path) -> None:
    """On SQLite a read by tags walks its tags' postings, not the namespace: in a namespace
    past `SCAN_ON_LOOP`, a tag held by a few entries is read on the loop (in its first step:
    a thread hop would cost it as much again), a tag held by more than `SCAN_ON_LOOP` visible
    entries off it; both answer what the loop's own read answers."""
    async with SQLiteEntryStore(tmp_path / "db.sqlite") as store:
        n = 2 * SCAN_ON_LOOP  # 1 % "rare", the rest "common" (more than SCAN_ON_LOOP)
        await store.put(A, [entry(i, tags=["rare"] if i % 100 == 0 else ["common"])
                            for i in range(n)], T0)
        for tag, order_wanted in (("rare", ["scan", "bystander"]),
                                  ("common", ["bystander", "scan"])):
            q = Query(tiers=BOTH, tags=(tag,), limit=5)
            order, got = await read_beside_a_bystander(store, q)
            assert order == order_wanted, tag
            with closing(connect(store.path)) as conn:
                assert got == reads.find_entries(conn, A, q, T0)
            assert got[1] == (n // 100 if tag == "rare" else n - n // 100)


async def test_a_read_off_the_loop_answers_what_the_loop_would(store: EntryStore) -> None:
    """The page, order and total of a filtered read of a large namespace are those of the same
    read on the loop's connection (SQLite), or of the same read (PostgreSQL)."""
    await store.put(A, [NewEntry(tier="semantic", key=canonical_key({"ns": ["u", str(i % 3)],
                                                                     "k": i}),
                                 content=b'{"n": %d}' % (i % 7), score=(i % 10) / 10)
                        for i in range(SCAN_ON_LOOP + 1)], T0)
    q = Query(tiers=BOTH, where=parse_filter({"n": {"$gte": 3}}),
              key_prefix=parse_key_prefix({"ns": ["u", "2"]}), limit=7, offset=5)
    page, total = await store.find(A, q, T0)
    paths = await store.key_paths(A, Query(tiers=BOTH), "ns", [], T0)  # type: ignore[attr-defined]
    assert sorted(json.loads(x) for x in paths) == [["u", "0"], ["u", "1"], ["u", "2"]]
    if isinstance(store, SQLiteEntryStore):
        with closing(connect(store.path)) as conn:  # the loop's way: a connection's own read
            want, want_total = reads.find_entries(conn, A, q, T0)
        assert (page, total) == (want, want_total)
    else:
        assert total == sum(1 for i in range(SCAN_ON_LOOP + 1) if i % 3 == 2 and i % 7 >= 3)
        assert len(page) == 7


async def test_the_scan_reader_takes_the_namespaces_in_turn(tmp_path: Path) -> None:
    """Three reads queued for one namespace and then one for another: the other namespace's
    read is not left behind all three (one reader thread)."""
    path = tmp_path / "db.sqlite"
    async with SQLiteEntryStore(path):
        pass  # the schema
    reader = ScanReader(lambda: connect(str(path)), threads=1)
    order: list[str] = []

    def job(conn: sqlite3.Connection, name: str) -> str:
        conn.execute("SELECT count(*) FROM entries").fetchone()
        order.append(name)
        return name

    try:
        futures = [reader.submit("x", job, "x1"), reader.submit("x", job, "x2"),
                   reader.submit("x", job, "x3"), reader.submit("y", job, "y1")]
        assert await asyncio.gather(*futures) == ["x1", "x2", "x3", "y1"]
    finally:
        reader.close()
    assert order.index("y1") < order.index("x3")


KEYS: list[Any] = [["u", "1"], ["u", "1", "x"], ["u", "1x"], ["u"], ["u", "2", "1"],
                   ["v", "1"], ['u"', "1"], ["u\\", "1"], ["ü", "1"], ["u", ""], [],
                   '["u","1"]', ["u", 1], {"0": "u"}]
PREFIXES = [["u"], ["u", "1"], ["u", "1", "x"], ["u", "1x"], ['u"'], ["u\\"], ["ü", "1"],
            ["u", ""], ["v"], ["w"]]


async def key_plan(store: EntryStore, q: Query) -> str:
    """The query plan of counting what `q` finds (PostgreSQL: sequential scans off, as on a
    table too large for one)."""
    if isinstance(store, SQLiteEntryStore):
        where, params = reads.read_where(A, q, T0)
        with closing(connect(store.path)) as conn:
            conn.executescript(scan_index.MIGRATION)  # (schema.py's list: already there)
            return str(conn.execute(f"EXPLAIN QUERY PLAN SELECT count(*) FROM entries e"
                                    f" WHERE {where}", params).fetchall())
    assert isinstance(store, PostgresEntryStore)
    p = Params()
    where = read_where(A, q, T0, p) + pg_scan_index.prefix_range(q.key_prefix, p)
    async with store.pool.acquire() as conn, conn.transaction():
        await conn.execute("SET LOCAL enable_seqscan = off")
        rows = await conn.fetch(f"EXPLAIN SELECT count(*) FROM a2e_entries e WHERE {where}",
                                *p.values)
    return str([r[0] for r in rows])


async def test_a_key_prefix_on_ns_reads_the_key_index_and_finds_the_same(
        store: EntryStore) -> None:
    """A `key_prefix` on `ns` of plain elements reads a range of the key index (the plan names
    it; a read without one does not use it), and every prefix (plain, escaped, beside look-alike keys: a string holding an array's
    text, a number, an object) finds what the prefix means, before and after the index."""

    async def found() -> list[Any]:
        out = []
        for pre in PREFIXES:
            q = Query(tiers=BOTH, key_prefix=parse_key_prefix({"ns": pre}))
            page, total = await store.find(A, q, T0)
            paths = await store.key_paths(A, Query(tiers=BOTH), "ns", pre, T0)  # type: ignore[attr-defined]
            out.append((sorted(e.key for e in page), total,
                        sorted(json.dumps(json.loads(x)) for x in paths)))
        return out

    await store.put(A, [NewEntry(tier="semantic", key=canonical_key({"ns": k, "k": i}),
                                 content=b"{}") for i, k in enumerate(KEYS)], T0)
    before = await found()
    q = Query(tiers=("semantic",), key_prefix=parse_key_prefix({"ns": ["u", "1"]}))
    assert "key_ns" in await key_plan(store, q)  # (SQLite: the index created here)
    # a read without such a prefix keeps its own index (walking this one reads rows unordered)
    assert "key_ns" not in await key_plan(store, Query(tiers=("semantic",),
                                                       where=parse_filter({"kind": "x"})))
    assert await found() == before
    for (keys, total, paths), pre in zip(before, PREFIXES, strict=True):
        want = [i for i, k in enumerate(KEYS) if isinstance(k, list) and k[:len(pre)] == pre]
        assert total == len(want) and keys == sorted(
            canonical_key({"ns": KEYS[i], "k": i}) for i in want)
        assert paths == sorted({json.dumps(KEYS[i]) for i in want})
