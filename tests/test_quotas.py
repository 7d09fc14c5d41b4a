"""Storage quotas over real sockets: entries and bytes per agent and per namespace, working
entries per session. At the limit a store answers memory_full for each entry that does not fit
(the whole request when none fits), stores nothing beyond it, and reports the rest of the batch."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from authkit import connect, running

from host.client import MemoryClient, RemoteError

pytestmark = pytest.mark.all_backends  # tests taking `store_db` run on SQLite and PostgreSQL


def entry(k: int, content: Any = "x", tier: str = "episodic") -> dict[str, Any]:
    """A store entry with key {"k": k}."""
    return {"key": {"k": k}, "content": content, "tier": tier}


def text_of(size: int) -> str:
    """A JSON string content that makes an entry of `entry(k)` (k one digit: a 7-byte key, no
    tags) count `size` bytes against a byte quota (content quotes included)."""
    return "x" * (size - 2 - len('{"k":1}'))


@asynccontextmanager
async def sessions(db: Path | str, **limits: Any) -> AsyncIterator[Callable[..., Any]]:
    """A host with `limits`, and a factory of clients with a session open on it:
    `await open_session(agent, namespace)`."""
    clients: list[MemoryClient] = []
    async with running(db, limits=limits) as host:

        async def _open(agent: str = "a1", ns: str = "ns") -> MemoryClient:
            c = await connect(host)
            await c.init(ns, {"agent": agent})
            clients.append(c)
            return c

        try:
            yield _open
        finally:
            for c in clients:
                await c.close()


async def _full(call: Any) -> None:
    with pytest.raises(RemoteError) as err:
        await call
    assert err.value.code == "memory_full"


async def test_entries_per_agent(store_db: str) -> None:
    """Past the agent's entry quota the extra entries are memory_full and not stored."""
    async with sessions(store_db, max_entries_per_agent=3) as session:
        c = await session()
        reply = await c.store([entry(i) for i in range(5)])
        assert reply.stored == [{"k": 0}, {"k": 1}, {"k": 2}]
        assert [e.split(":")[:2] for e in reply.errors] == [
            ["entries[3]", " memory_full"], ["entries[4]", " memory_full"]]
        assert (await c.retrieve(limit=100)).total == 3
        await _full(c.store([entry(9)]))
        assert (await c.store([entry(1, "updated")])).stored == [{"k": 1}]  # upserts still fit
        other = await session("a2")
        assert (await other.store([entry(9)])).stored == [{"k": 9}]  # a quota per agent


async def test_entries_per_namespace(store_db: str) -> None:
    """Two agents share the namespace quota; another namespace has its own."""
    async with sessions(store_db, max_entries_per_namespace=4) as session:
        a1, a2 = await session("a1"), await session("a2")
        assert len((await a1.store([entry(i) for i in range(3)])).stored) == 3
        reply = await a2.store([entry(i, tier="semantic") for i in range(3)])
        assert reply.stored == [{"k": 0}]
        assert len(reply.errors) == 2
        assert (await a2.retrieve(limit=100)).total == 1  # its semantic entry; a1's are private
        elsewhere = await session("a1", "ns2")
        assert len((await elsewhere.store([entry(i) for i in range(3)])).stored) == 3


async def test_bytes_per_agent(store_db: str) -> None:
    """Key and content bytes count against the agent: a new entry or a growing update past the quota is
    memory_full and the old content stays; shrinking and forgetting make room."""
    async with sessions(store_db, max_bytes_per_agent=100) as session:
        c = await session()
        reply = await c.store([entry(1, text_of(40)), entry(2, text_of(40)), entry(3, text_of(40))])
        assert reply.stored == [{"k": 1}, {"k": 2}] and len(reply.errors) == 1
        await _full(c.store([entry(1, text_of(61))]))  # 80 - 40 + 61 > 100
        got = await c.retrieve(keys=[{"k": 1}])
        assert got.entries[0]["content"] == text_of(40)
        assert (await c.store([entry(1, text_of(60))])).stored == [{"k": 1}]  # exactly 100
        assert (await c.store([entry(2, text_of(10))])).stored == [{"k": 2}]  # shrinks to 70
        assert (await c.store([entry(3, text_of(30))])).stored == [{"k": 3}]  # 100 again
        await _full(c.store([entry(4, text_of(2))]))
        assert await c.forget(keys=[{"k": 1}]) == 1
        assert (await c.store([entry(4, text_of(60))])).stored == [{"k": 4}]


async def test_bytes_per_namespace(store_db: str) -> None:
    """Key and content bytes of every agent add up in the namespace quota."""
    async with sessions(store_db, max_bytes_per_namespace=100) as session:
        a1, a2 = await session("a1"), await session("a2")
        assert (await a1.store([entry(1, text_of(70))])).stored == [{"k": 1}]
        await _full(a2.store([entry(1, text_of(31), "semantic")]))
        assert (await a2.store([entry(1, text_of(30), "semantic")])).stored == [{"k": 1}]


async def test_working_entries_per_session(db_path: Path) -> None:
    """The working tier of a session holds at most its quota; another session has its own."""
    async with sessions(db_path, max_working_entries=2) as session:
        c = await session()
        reply = await c.store([entry(i, tier="working") for i in range(3)])
        assert reply.stored == [{"k": 0}, {"k": 1}]
        assert reply.errors == ["entries[2]: memory_full: working tier is full"]
        await c.init("ns", {"agent": "a1"})  # a second session on the same connection
        assert len((await c.store([entry(i, tier="working") for i in range(2)])).stored) == 2


async def test_working_bytes_per_connection(db_path: Path) -> None:
    """The working tiers of one connection's sessions share its byte budget; forgetting frees
    it, and another connection has its own."""
    async with sessions(db_path, max_working_bytes=100) as session:
        c = await session()
        first = c.memory_id
        assert (await c.store([entry(1, text_of(60), "working")])).stored == [{"k": 1}]
        await c.init("ns", {"agent": "a1"})
        await _full(c.store([entry(2, text_of(41), "working")]))
        assert (await c.store([entry(2, text_of(40), "working")])).stored == [{"k": 2}]
        assert await c.forget(keys=[{"k": 1}], tier="working", memory_id=first) == 1
        assert (await c.store([entry(3, text_of(60), "working")])).stored == [{"k": 3}]
        other = await session()
        assert (await other.store([entry(1, text_of(100), "working")])).stored == [{"k": 1}]


async def test_the_rest_of_the_batch_is_reported(db_path: Path) -> None:
    """A batch mixing a malformed entry, an oversized one, fitting ones and one over quota
    stores the fitting ones and reports each other one with its code, in request order."""
    async with sessions(db_path, max_entries_per_agent=2, max_entry_bytes=100) as session:
        c = await session()
        reply = await c.store([
            {"key": {}, "content": 1, "tier": "episodic"},
            entry(1),
            entry(2, text_of(200)),
            entry(3),
            entry(4),
            entry(5, tier="working"),
        ])
        assert reply.stored == [{"k": 1}, {"k": 3}, {"k": 5}]
        assert [e.split(":")[0:2] for e in reply.errors] == [
            ["entries[0]", " invalid_message"], ["entries[2]", " invalid_message"],
            ["entries[4]", " memory_full"]]


async def test_keys_and_tags_count_against_byte_quotas(store_db: str, db_path: Path) -> None:
    """Under a 1 MiB byte quota, entries with 900 KB keys or 50 KB tags are memory_full once
    the key and tag bytes reach the quota: they are not free space (40 such entries once took
    118 MiB on disk while the quota counted 120 bytes); on SQLite the file stays within a few
    times the quota."""
    mib = 1 << 20
    async with sessions(store_db, max_bytes_per_agent=mib, max_frame_bytes=2 * mib) as session:
        c = await session()
        stored = 0
        for i in range(40):
            big = {"key": {"k": i, "pad": "k" * 900_000}, "content": 1, "tier": "episodic"}
            tagged = {"key": {"t": i}, "content": 1, "tier": "episodic",
                      "tags": [f"{j}-" + "t" * 50_000 for j in range(2)]}
            for e in (big, tagged):
                try:
                    stored += len((await c.store([e])).stored)
                except RemoteError as err:
                    assert err.code == "memory_full"
        assert 1 <= stored <= 10  # one 900 KB key, then the 100 KB tag pairs that fit
        assert (await c.store([entry(1)])).stored == [{"k": 1}]  # small entries still fit
        await _full(c.store([{"key": {"k": 2, "pad": "k" * 200_000}, "content": 1,
                              "tier": "episodic"}]))
    if store_db != str(db_path):
        return  # PostgreSQL: the server's files are not the test's to measure
    on_disk = sum(p.stat().st_size for p in db_path.parent.glob(db_path.name + "*")
                  if not p.name.endswith("-reserve"))  # the disk reserve is not data
    assert on_disk < 16 * mib, on_disk
