"""One tenant's embedding backlog does not stall another's queries on PostgreSQL
(`SharedWorker`, host/search/worker.py): a query waiting for its connection's vectors is
answered once its own namespace has nothing queued, and the worker claims that namespace's
entries first (`claim_namespace_vectors`, leased as any claim, so two hosts still never hold
one entry), as SQLite's worker serves the waiting namespaces first (tests/test_semantic.py)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import asyncpg
from support.hosts import make_config, running_host, url_of

from host.client import MemoryClient
from host.config import Config
from host.search.worker import SharedWorker
from host.store.postgres.store import PostgresEntryStore
from host.store.records import NewEntry, Scope

FACT = "Caroline adopted a puppy from the animal shelter last weekend."
PARAPHRASE = "Who got a new dog recently?"


async def _put(store: PostgresEntryStore, namespace: str, n: int, words: int = 12) -> list[int]:
    """Store `n` episodic entries in `namespace` (500 a request); their ids, oldest first."""
    for start in range(0, n, 500):
        await store.put(Scope(namespace, "bulk"), [
            NewEntry(tier="episodic", key=b'{"i":%d}' % i, content=(
                '"' + " ".join(f"word{(i * 7 + j) % 997}" for j in range(words)) + '"').encode())
            for i in range(start, min(n, start + 500))], time.time())
    rows = await store.pool.fetch(
        "SELECT id FROM a2e_entries WHERE namespace = $1 ORDER BY id", namespace)
    return [int(r[0]) for r in rows]


async def _queued(store: PostgresEntryStore, namespace: str) -> int:
    return int(await store.pool.fetchval(
        "SELECT count(*) FROM a2e_embed_queue q JOIN a2e_entries e ON e.id = q.entry_id"
        " WHERE e.namespace = $1", namespace))


async def _embedded(store: PostgresEntryStore, namespace: str) -> int:
    return int(await store.pool.fetchval(
        "SELECT count(*) FROM a2e_vectors v JOIN a2e_entries e ON e.id = v.entry_id"
        " WHERE e.namespace = $1", namespace))


async def test_a_claim_of_one_namespace_is_leased_and_counts_what_it_left(
    pg_stores: list[PostgresEntryStore],
) -> None:
    """A claim by namespace takes that namespace's entries alone, oldest first, and says how
    many it left (past its limit, or held by another host); what one host claims, by
    namespace or not, the other skips until it is released."""
    a, b = pg_stores
    bulk = await _put(a, "bulk", 40)
    mine = await _put(a, "mine", 3)
    got, left = await b.claim_namespace_vectors("mine", 2, 60.0)
    assert [p.id for p, _seq in got] == mine[:2] and left == 1
    assert {p.namespace for p, _seq in got} == {"mine"}
    got_a, left = await a.claim_namespace_vectors("mine", 10, 60.0)
    assert [p.id for p, _seq in got_a] == mine[2:] and left == 2  # B's two
    assert sorted(p.id for p, _seq in await a.claim_vectors(100, 60.0)) == bulk
    assert await a.claim_namespace_vectors("mine", 10, 60.0) == ([], 3)
    assert await a.claim_namespace_vectors("mine", 10, 60.0, skip=mine[2:]) == ([], 2)
    await b.release_vectors([(p.id, seq) for p, seq in got])
    again, left = await a.claim_namespace_vectors("mine", 10, 60.0, skip=mine[2:])
    assert [p.id for p, _seq in again] == mine[:2] and left == 0
    assert await a.claim_namespace_vectors("bulk", 10, 60.0) == ([], 40)
    assert await b.claim_vectors(100, 60.0) == []


async def test_claims_by_namespace_and_oldest_first_at_once_are_disjoint(
    pg_stores: list[PostgresEntryStore],
) -> None:
    """Two hosts claiming at once, one by namespace, the other oldest first, in small claims:
    every queued entry goes to exactly one of them."""
    a, b = pg_stores
    ids = await _put(a, "bulk", 30) + await _put(a, "mine", 30)
    got = await asyncio.gather(*(
        s.claim_namespace_vectors("mine", 4, 60.0) if k % 2 else s.claim_vectors(4, 60.0)
        for k in range(16) for s in (a, b)))
    claimed = [p.id for batch in got
               for p, _seq in (batch[0] if isinstance(batch, tuple) else batch)]
    assert len(claimed) == len(set(claimed)) == len(ids)
    assert set(claimed) == set(ids)


async def test_a_namespace_another_host_holds_is_not_caught_up_until_written(
    pg_stores: list[PostgresEntryStore], embedder: Any,
) -> None:
    """The worker's window of a waiting namespace embeds that namespace's entries alone, and
    is not complete while another host holds one of them: once that claim is released (or
    written), the next window takes it and is complete; the other namespace's backlog is
    left queued throughout."""
    a, b = pg_stores
    await a.set_vector_model(embedder.name, embedder.dim)  # (a new model re-queues: first)
    await _put(a, "bulk", 20)
    mine = await _put(a, "mine", 2)
    held, _left = await b.claim_namespace_vectors("mine", 1, 60.0)
    assert [p.id for p, _seq in held] == mine[:1]
    worker = SharedWorker(a, embedder, Config().search)
    assert await worker.embed_pending("mine") == (1, False)
    assert await _embedded(a, "mine") == 1 and await _queued(a, "bulk") == 20
    await b.release_vectors([(p.id, seq) for p, seq in held])
    assert await worker.embed_pending("mine") == (1, True)
    assert await _embedded(a, "mine") == 2 and await _queued(a, "mine") == 0
    assert await _queued(a, "bulk") == 20


async def test_a_queue_of_migration_23_gets_its_namespaces(pg_url: str) -> None:
    """A database whose queue was filled before migration 24 (no namespace column): at the
    next start each queued row takes its entry's namespace, and a claim by namespace finds
    them; a row queued without it (a host of an earlier version beside this one) takes its
    entry's too."""
    async with PostgresEntryStore(pg_url, pool_max=2) as store:
        bulk = await _put(store, "bulk", 5)
        mine = await _put(store, "mine", 3)
    conn = await asyncpg.connect(pg_url)
    try:  # as migration 23 and functions version 15 left it
        await conn.execute("DROP TRIGGER a2e_embed_queue_namespace_bi ON a2e_embed_queue;"
                           " DROP FUNCTION a2e_embed_queue_namespace();"
                           " ALTER TABLE a2e_embed_queue DROP COLUMN namespace;"
                           " DELETE FROM a2e_migrations WHERE version = 24;"
                           " UPDATE a2e_functions SET version = 15, digest = 'older'")
        async with PostgresEntryStore(pg_url, pool_max=2) as store:
            got, left = await store.claim_namespace_vectors("mine", 10, 60.0)
            assert [p.id for p, _seq in got] == mine and left == 0
            await conn.execute("DELETE FROM a2e_embed_queue WHERE entry_id = $1", bulk[0])
            await conn.execute("INSERT INTO a2e_embed_queue (entry_id) VALUES ($1)", bulk[0])
            got, left = await store.claim_namespace_vectors("bulk", 10, 60.0)
            assert [p.id for p, _seq in got] == bulk and left == 0
        assert await conn.fetchval("SELECT max(version) FROM a2e_migrations") == 24
    finally:
        await conn.close()


async def test_a_query_behind_another_tenants_backlog_reads_its_writes(pg_url: str) -> None:
    """With 5,000 entries of another namespace queued for vectors (claimed oldest first, all
    before this one's), a connection that stores a fact and asks for it by a paraphrase
    sharing no keyword gets it: the worker embedded its entries while the backlog is still
    there. Order and state are asserted, not time: `vector_wait` is generous here (below the
    request deadline), so a worker that served the whole queue first (as before) answers
    without the fact, or only once the backlog is done."""
    store = PostgresEntryStore(pg_url, pool_max=2)
    await store.open()
    try:
        await _put(store, "bulk", 5000)
    finally:
        await store.close()
    cfg = make_config(pg_url, search={"vector_wait": 20.0})
    async with running_host(cfg) as h, await MemoryClient.connect(url_of(h)) as c:
        pg = h.store
        assert isinstance(pg, PostgresEntryStore)
        assert await _queued(pg, "bulk") > 4000
        await c.init("mine", {"agent": "a1"})
        await c.store([{"key": {"k": 1}, "content": FACT, "tier": "episodic"},
                       {"key": {"k": 2}, "content": "The lease ends in September.",
                        "tier": "episodic"}])
        found = await c.retrieve(query=PARAPHRASE, limit=1)
        assert [e["key"] for e in found.entries] == [{"k": 1}], found.entries
        assert await _embedded(pg, "mine") == 2 and await _queued(pg, "mine") == 0
        assert await _queued(pg, "bulk") > 1000  # the backlog is not done
