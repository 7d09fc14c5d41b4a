"""Bounded growth over real sockets, on both backends: with `limits.on_full` "evict" a store
that would pass a quota removes the storing agent's own entries worth least (expired first,
then lowest score, then longest since written or read), as few as it must, logs each as an
`evicted` change that watches see, and says in its reply how many went; "refuse" (the
default) answers `memory_full` as before."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from msgspec import UNSET
from support.growth import growing
from support.hosts import make_config, running_host, url_of

from host.client import MemoryClient, RemoteError
from host.store.records import Scope
from protocol.clock import ShiftedClock
from protocol.messages import MemoryChangedEvent

pytestmark = pytest.mark.all_backends  # tests taking `store_db` run on SQLite and PostgreSQL


def entry(k: int, content: Any = "x", tier: str = "episodic", **kw: Any) -> dict[str, Any]:
    """A store entry with key {"k": k}."""
    return {"key": {"k": k}, "content": content, "tier": tier, **kw}


async def keys(c: MemoryClient, tier: str = "") -> list[int]:
    """The k of every entry the client's session reads, sorted."""
    reply = await c.retrieve(tier=tier, limit=100)
    return sorted(e["key"]["k"] for e in reply.entries)


async def stored_one_by_one(c: MemoryClient, clock: ShiftedClock, ks: range,
                            **kw: Any) -> None:
    """Store `entry(k)` for each k, a second apart (each written later than the one before)."""
    for k in ks:
        await c.store([entry(k, **kw)])
        clock.advance(1)


async def test_a_full_agent_evicts_its_oldest_entry_and_stays_at_its_quota(store_db: str) -> None:
    """At its entry quota each new store removes the agent's oldest entry (all of one score),
    one a store, and the reply says so; the agent stays at its quota."""
    async with growing(store_db, max_entries_per_agent=3) as (_host, clock, session):
        c = await session()
        await stored_one_by_one(c, clock, range(3))
        for k in range(3, 6):
            reply = await c.store([entry(k)])
            clock.advance(1)
            assert (reply.stored, reply.evicted, reply.errors) == ([{"k": k}], 1, [])
            assert await keys(c) == [k - 2, k - 1, k]


async def test_a_store_that_fits_says_nothing_of_eviction(store_db: str) -> None:
    """Under the quota nothing is evicted and the reply carries no `evicted` field."""
    async with growing(store_db, max_entries_per_agent=3) as (_host, _clock, session):
        c = await session()
        reply = await c.store([entry(1), entry(2)])
        assert reply.evicted is UNSET
        assert await keys(c) == [1, 2]


async def test_eviction_order_is_expired_then_lowest_score_then_least_recent(
    store_db: str,
) -> None:
    """Expired entries go first (collected, not counted as evicted), then the lowest score,
    then, among equal scores, the one longest since written or read (a recorded read moves
    an entry back)."""
    async with growing(store_db, max_entries_per_agent=4) as (host, clock, session):
        c = await session()
        await c.store([entry(1, score=0.9)])
        clock.advance(1)
        await c.store([entry(2, score=0.2)])
        clock.advance(1)
        await c.store([entry(3, score=0.9)])
        clock.advance(1)
        await c.store([entry(4, score=0.9, ttl=5)])
        clock.advance(10)  # 4 has expired
        reply = await c.store([entry(5)])
        assert reply.evicted is UNSET and await keys(c) == [1, 2, 3, 5]
        clock.advance(1)
        assert (await c.store([entry(6)])).evicted == 1
        assert await keys(c) == [1, 3, 5, 6]  # the lowest score went, though not the oldest
        clock.advance(1)
        # a read of 1 recorded (the library's `touch`): 3 is now the longest untouched
        assert await host.store.touch(Scope("ns", "a1"), ["episodic"], [b'{"k":1}'],
                                      clock()) == 1
        clock.advance(1)
        assert (await c.store([entry(7)])).evicted == 1
        assert await keys(c) == [1, 5, 6, 7]


async def test_a_byte_quota_evicts_as_few_as_make_room(store_db: str) -> None:
    """A large entry under a byte quota evicts the fewest of the oldest entries that make
    room for it, and no more."""
    key = len('{"k":1}')
    small = 2 + 10 + key  # a content of 10 characters, its quotes, the key
    async with growing(store_db, max_bytes_per_agent=5 * small) as (_host, clock, session):
        c = await session()
        await stored_one_by_one(c, clock, range(1, 6), content="y" * 10)
        big = 2 * small + 5  # needs three small ones out
        reply = await c.store([entry(7, content="z" * (big - 2 - key))])
        assert (reply.stored, reply.evicted) == ([{"k": 7}], 3)
        assert await keys(c) == [4, 5, 7]


async def test_nothing_is_evicted_for_an_entry_that_could_never_fit(store_db: str) -> None:
    """An entry larger than the agent's whole byte quota is `memory_full` and evicts nothing."""
    async with growing(store_db, max_bytes_per_agent=100) as (_host, clock, session):
        c = await session()
        await stored_one_by_one(c, clock, range(1, 4))
        with pytest.raises(RemoteError) as err:
            await c.store([entry(9, content="z" * 200)])
        assert err.value.code == "memory_full"
        assert await keys(c) == [1, 2, 3]


async def test_eviction_never_takes_another_agents_entries(store_db: str) -> None:
    """Under a namespace quota an agent evicts only entries it wrote (episodic or semantic);
    one with none of its own to give gets `memory_full`, and the others' entries stay."""
    async with growing(store_db, max_entries_per_namespace=4) as (_host, clock, session):
        a1, a2 = await session("a1"), await session("a2")
        await stored_one_by_one(a2, clock, range(1, 3))  # a2's private entries, the oldest
        await stored_one_by_one(a2, clock, range(10, 11), tier="semantic")  # a2's shared one
        await stored_one_by_one(a1, clock, range(20, 21), tier="semantic")
        reply = await a1.store([entry(30)])
        assert reply.evicted == 1
        assert await keys(a1) == [10, 30]  # a1's semantic 20 went, not a2's older ones
        assert await keys(a2) == [1, 2, 10]
        a3 = await session("a3")
        with pytest.raises(RemoteError) as err:  # a3 has nothing of its own to give
            await a3.store([entry(40)])
        assert err.value.code == "memory_full"
        assert await keys(a2) == [1, 2, 10] and await keys(a1) == [10, 30]
        other = await session("a1", "other")  # another namespace: a quota of its own
        assert (await other.store([entry(1)])).evicted is UNSET


async def test_a_store_never_evicts_what_it_stores_itself(store_db: str) -> None:
    """A request of more new entries than the quota stores what fits after evicting the
    agent's older entries, never one of its own: the rest are `memory_full`."""
    async with growing(store_db, max_entries_per_agent=3) as (_host, clock, session):
        c = await session()
        await stored_one_by_one(c, clock, range(1, 3))
        reply = await c.store([entry(k) for k in range(10, 15)])
        assert reply.stored == [{"k": 10}, {"k": 11}, {"k": 12}]
        assert reply.evicted == 2
        assert [e.split(":")[1].strip() for e in reply.errors] == ["memory_full"] * 2
        assert await keys(c) == [10, 11, 12]


async def test_the_working_tier_is_never_evicted(store_db: str) -> None:
    """Working-tier entries are not persisted entries: eviction never removes them."""
    async with growing(store_db, max_entries_per_agent=2) as (_host, clock, session):
        c = await session()
        await c.store([entry(100, tier="working"), entry(101, tier="working")])
        await stored_one_by_one(c, clock, range(1, 6))
        assert await keys(c, "working") == [100, 101]
        assert await keys(c, "episodic") == [4, 5]


async def test_evictions_are_changes_a_watch_sees_and_replays(store_db: str) -> None:
    """Each eviction is an `evicted` change before the store's `stored` one, seen live by a
    watch and again by a replay from an earlier cursor; it carries key, tier and tags only."""
    async with growing(store_db, max_entries_per_agent=2) as (_host, clock, session):
        writer = await session("a1")
        watcher = await session("a1")
        w = await watcher.watch()
        await stored_one_by_one(writer, clock, range(1, 3), tags=["t"])
        seen = []

        async def read_until(n: int) -> None:
            while len(seen) < n:
                ev = await watcher.next_event()
                assert isinstance(ev, MemoryChangedEvent)
                seen.append((ev.op, ev.entries))
        # both stores seen before the eviction: a live watch that had not yet read a `stored`
        # change when its entry went would find it emptied (a removal removes the content)
        await read_until(2)
        await writer.store([entry(3)])
        await read_until(4)
        assert [op for op, _ in seen] == ["stored", "stored", "evicted", "stored"]
        assert seen[2][1] == [{"key": {"k": 1}, "tier": "episodic", "tags": ["t"]}]
        again = await session("a1")
        await again.watch(since=w.cursor)
        replay = []
        while len(replay) < 3:
            ev = await again.next_event()
            assert isinstance(ev, MemoryChangedEvent)
            replay.append(ev.op)
        # the evicted entry's own `stored` change lost its content (a forget forgets): only
        # the non-empty changes are replayed
        assert replay == ["stored", "evicted", "stored"]


async def test_refuse_is_the_default_and_unchanged(store_db: str) -> None:
    """Without `on_full` a full agent's store is `memory_full` and nothing is removed."""
    async with growing(store_db, max_entries_per_agent=2, on_full="refuse") as (
            _host, clock, session):
        c = await session()
        await stored_one_by_one(c, clock, range(1, 3))
        with pytest.raises(RemoteError) as err:
            await c.store([entry(3)])
        assert err.value.code == "memory_full"
        assert await keys(c) == [1, 2]
    config = make_config(store_db)
    assert config.limits.on_full == "refuse"


async def test_two_hosts_on_one_postgres_database_keep_the_agent_at_its_quota(
    pg_url: str,
) -> None:
    """Two hosts storing for one agent at once, on one PostgreSQL database, evict under the
    namespace's lock: every store succeeds, the agent ends at its quota exactly, and the
    evictions the replies count are the entries stored beyond it."""
    limits = {"max_entries_per_agent": 10, "on_full": "evict"}
    async with running_host(make_config(pg_url, limits=limits)) as h1, \
            running_host(make_config(pg_url, limits=limits)) as h2:
        clients = []
        for h in (h1, h2, h1, h2):
            c = await MemoryClient.connect(url_of(h))
            await c.init("ns", {"agent": "a1"})
            clients.append(c)
        try:
            replies = await asyncio.gather(*(
                c.store([entry(100 * n + k)]) for k in range(15)
                for n, c in enumerate(clients)))
            assert all(r.errors == [] and len(r.stored) == 1 for r in replies)
            assert sum(r.evicted or 0 for r in replies) == 60 - 10
            assert (await clients[0].retrieve(limit=100)).total == 10
        finally:
            for c in clients:
                await c.close()
