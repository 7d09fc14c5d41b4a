"""`EntryStoreMemories`: the library's `AsyncStore` contract over the host's SQLite store, for one
scope, and what it adds (working tier, ids of foreign keys, touch on get, quotas)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from support.hosts import make_config

from host.app import make_store
from host.client import MemoryClient
from host.config import Config
from host.library.entry_store import EntryStoreMemories
from host.library.models import Memory, MemoryImportance, MemoryType
from host.library.protocol import AsyncStore
from host.library.sqlite_store import StoreFullError
from host.store.interface import EntryStore
from host.store.records import NewEntry, Query, Scope
from protocol.keys import canonical_key

SCOPE = Scope("ns", "a1")


pytestmark = pytest.mark.all_backends


@pytest.fixture
def config(store_db: str) -> Config:
    """The default config on the test's database (a SQLite file or a PostgreSQL database)."""
    return make_config(store_db)


@pytest.fixture
async def store(config: Config) -> AsyncIterator[EntryStore]:
    """The configured entry store, open."""
    s = make_store(config)
    await s.open()
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
def memories(store: EntryStore, config: Config) -> EntryStoreMemories:
    """The memories of agent "a1" in namespace "ns"."""
    return EntryStoreMemories(store, SCOPE, config)


def _ago(**kwargs: float) -> datetime:
    return datetime.now(UTC) - timedelta(**kwargs)


def test_is_an_async_store(memories: EntryStoreMemories) -> None:
    """It satisfies the runtime-checkable `AsyncStore` protocol."""
    assert isinstance(memories, AsyncStore)


async def test_set_get_keeps_every_field_but_access(memories: EntryStoreMemories) -> None:
    """A memory comes back equal but for `last_accessed`, which is the time of the get."""
    m = Memory(content="the build uses uv", memory_type=MemoryType.PROCEDURAL,
               importance=MemoryImportance.CRITICAL, created_at=_ago(days=3),
               last_accessed=_ago(days=2), metadata={"source": "README", "n": [1, 2.5]})
    await memories.set(m.id, m)
    before = datetime.now(UTC)
    got = await memories.get(m.id)
    assert got is not None
    assert got.model_dump(exclude={"last_accessed"}) == m.model_dump(exclude={"last_accessed"})
    assert got.last_accessed >= before - timedelta(seconds=1)


async def test_get_records_the_access_in_the_store(
    memories: EntryStoreMemories, store: EntryStore
) -> None:
    """After a get the stored entry's `updated_at` is the time of the get; created_at stays."""
    m = Memory(content="x", created_at=_ago(days=5), last_accessed=_ago(days=5))
    await memories.set(m.id, m)
    got = await memories.get(m.id)
    assert got is not None
    (e,), _ = await store.find(SCOPE, Query(tiers=("episodic",), keys=(canonical_key({"id": m.id}),)),
                               got.last_accessed.timestamp() + 1)
    assert e.updated_at == pytest.approx(got.last_accessed.timestamp(), abs=1e-3)
    assert e.created_at == pytest.approx(m.created_at.timestamp(), abs=1e-3)


async def test_get_does_not_extend_a_ttl(
    memories: EntryStoreMemories, store: EntryStore
) -> None:
    """An entry with a TTL (written over the wire) is read but not rewritten, so it still expires."""
    key = canonical_key({"id": "temp"})
    written = time.time() - 10
    await store.put(SCOPE, [NewEntry(tier="episodic", key=key, content=b'"short-lived"', ttl=60)],
                    now=written)
    got = await memories.get("temp")
    assert got is not None and got.content == "short-lived"
    found, _ = await store.find(SCOPE, Query(tiers=("episodic",), keys=(key,)), now=written)
    assert found[0].updated_at == written


class _GatedWrites:
    """The real store, whose writes (`put`, `touch`) first wait for `gate`: the test runs
    another client's write between a get's read and the write that records the access."""

    def __init__(self, store: EntryStore) -> None:
        self.store = store
        self.reached = asyncio.Event()
        self.gate = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    async def _wait(self) -> None:
        self.reached.set()
        await self.gate.wait()

    async def put(self, *args: Any) -> Any:
        await self._wait()
        return await self.store.put(*args)

    async def touch(self, *args: Any) -> Any:
        await self._wait()
        return await self.store.touch(*args)


async def test_get_never_undoes_a_concurrent_websocket_store(
    store: EntryStore, config: Config, client: MemoryClient
) -> None:
    """A WebSocket store of new content that lands between a get's read and the recording of
    that access stays: the get records it without writing the entry back."""
    m = Memory(content="old note")
    await EntryStoreMemories(store, SCOPE, config).set(m.id, m)
    gated = _GatedWrites(store)
    reader = EntryStoreMemories(gated, SCOPE, config)  # type: ignore[arg-type]
    get = asyncio.create_task(reader.get(m.id))
    await gated.reached.wait()
    new = {"text": "new note", "metadata": {}}
    await client.store([{"key": {"id": m.id}, "content": new, "tier": "episodic",
                         "tags": ["type:episodic"], "score": 0.5}])
    gated.gate.set()
    got = await get
    assert got is not None and got.content == "old note"  # what was read, before the store
    reply = await client.retrieve(keys=[{"id": m.id}])
    assert [e["content"] for e in reply.entries] == [new]
    again = await EntryStoreMemories(store, SCOPE, config).get(m.id)
    assert again is not None and again.content == "new note"


async def test_get_of_a_working_memory_records_the_access(memories: EntryStoreMemories) -> None:
    """A working memory's get moves its `last_accessed` and keeps its content."""
    m = Memory(content="scratch", memory_type=MemoryType.WORKING, last_accessed=_ago(days=1))
    await memories.set(m.id, m)
    before = datetime.now(UTC)
    first = await memories.get(m.id)
    (e,) = memories.working.find([canonical_key({"id": m.id})], (), 0.0, time.time())
    assert first is not None and first.content == "scratch"
    assert e.updated_at >= before.timestamp() - 1
    assert e.updated_at == pytest.approx(first.last_accessed.timestamp(), abs=1e-3)


async def test_missing_and_delete(memories: EntryStoreMemories) -> None:
    """Get of an unknown id is None; delete is True once, then False."""
    m = Memory(content="to be deleted")
    await memories.set(m.id, m)
    assert await memories.get("nope") is None
    assert await memories.delete(m.id) is True
    assert await memories.delete(m.id) is False
    assert await memories.get(m.id) is None


async def test_changing_the_type_moves_the_memory(memories: EntryStoreMemories) -> None:
    """Setting a key again with another type leaves one memory, of the new type, in every path."""
    m = Memory(content="kept once", memory_type=MemoryType.EPISODIC)
    await memories.set(m.id, m)
    await memories.set(m.id, m.model_copy(update={"memory_type": MemoryType.SEMANTIC}))
    await memories.set(m.id, m.model_copy(update={"memory_type": MemoryType.WORKING}))
    hits = await memories.search("kept once", k=10)
    assert [(h.memory.id, h.memory.memory_type) for h in hits] == [(m.id, MemoryType.WORKING)]
    assert await memories.delete(m.id) is True
    assert await memories.search("kept", k=10) == []


async def test_search_orders_by_combined_score(memories: EntryStoreMemories) -> None:
    """The memory holding every query term is the most relevant, a critical one ranks above a
    low one of the same text, the list is in combined order and k takes its head;
    non-matching memories are left out."""
    both = Memory(content="python packaging with uv", importance=MemoryImportance.LOW)
    crit = Memory(content="python version", importance=MemoryImportance.CRITICAL)
    low = Memory(content="python version", importance=MemoryImportance.LOW)
    other = Memory(content="unrelated")
    for m in (both, crit, low, other):
        await memories.set(m.id, m)
    hits = await memories.search("python packaging", k=5)
    ids = [h.memory.id for h in hits]
    assert sorted(ids) == sorted([both.id, crit.id, low.id])
    assert ids.index(crit.id) < ids.index(low.id)
    rel = {h.memory.id: h.relevance_score for h in hits}
    assert rel[both.id] > max(rel[crit.id], rel[low.id])
    assert [h.combined_score for h in hits] == sorted((h.combined_score for h in hits),
                                                      reverse=True)
    assert all(0 <= h.combined_score <= 1 for h in hits)
    assert [h.memory.id for h in await memories.search("python packaging", k=1)] == ids[:1]
    with pytest.raises(ValueError):
        await memories.search("python", k=0)


async def test_search_matches_content_not_metadata(memories: EntryStoreMemories) -> None:
    """The searchable text of a memory is its content: metadata and the type tag do not match."""
    m = Memory(content="deploy on fridays", metadata={"author": "zed"})
    await memories.set(m.id, m)
    assert await memories.search("zed", k=5) == []
    assert await memories.search("episodic", k=5) == []
    assert [h.memory.id for h in await memories.search("fridays", k=5)] == [m.id]


async def test_scopes_are_isolated(store: EntryStore, config: Config) -> None:
    """Another agent sees semantic and procedural memories but not episodic ones; another
    namespace sees nothing."""
    a1 = EntryStoreMemories(store, SCOPE, config)
    ep, fact = Memory(content="mine"), Memory(content="shared", memory_type=MemoryType.SEMANTIC)
    await a1.set(ep.id, ep)
    await a1.set(fact.id, fact)
    a2 = EntryStoreMemories(store, Scope("ns", "a2"), config)
    assert await a2.get(ep.id) is None and await a2.get(fact.id) is not None
    other = EntryStoreMemories(store, Scope("other", "a1"), config)
    assert await other.get(fact.id) is None and await other.search("shared", k=5) == []


async def test_foreign_keys_are_addressed_by_their_json(
    memories: EntryStoreMemories, store: EntryStore
) -> None:
    """An entry whose key is not `{"id": ...}` has its key's JSON as id, and that id finds it."""
    await store.put(SCOPE, [NewEntry(tier="episodic", key=canonical_key({"user": "u1", "n": 2}),
                                     content=b'{"likes":"dark mode"}', tags=["prefs"])], now=1.0)
    (hit,) = await memories.search("dark mode", k=5)
    assert hit.memory.id == '{"n":2,"user":"u1"}'
    got = await memories.get(hit.memory.id)
    assert got is not None and got.content == '{"likes":"dark mode"}'
    assert await memories.delete(hit.memory.id) is True


async def test_quota_raises_memory_full(store_db: str) -> None:
    """A new memory past the agent's quota (or the working tier's) raises `StoreFullError`;
    updating a stored memory still works."""
    config = make_config(store_db, limits={"max_entries_per_agent": 3, "max_working_entries": 1})
    s = make_store(config)
    await s.open()
    try:
        memories = EntryStoreMemories(s, SCOPE, config)
        ms = [Memory(content=f"m{i}") for i in range(3)]
        for m in ms:
            await memories.set(m.id, m)
        with pytest.raises(StoreFullError):
            await memories.set("one-too-many", Memory(content="x"))
        await memories.set(ms[0].id, ms[0].model_copy(update={"content": "updated"}))
        got = await memories.get(ms[0].id)
        assert got is not None and got.content == "updated"
        await memories.set("w1", Memory(content="w", memory_type=MemoryType.WORKING))
        with pytest.raises(StoreFullError):
            await memories.set("w2", Memory(content="w", memory_type=MemoryType.WORKING))
    finally:
        await s.close()


async def test_concurrent_sets_all_land(memories: EntryStoreMemories) -> None:
    """Concurrent sets from one event loop are all stored (group commit)."""
    ms = [Memory(content=f"parallel note {i}") for i in range(20)]
    await asyncio.gather(*(memories.set(m.id, m) for m in ms))
    assert len(await memories.search("parallel note", k=50)) == 20


async def test_a_window_is_an_entry_window_and_as_of_filters_every_tier(
        memories: EntryStoreMemories, store: EntryStore) -> None:
    """On either backend: a memory's bounds are its entry's `valid_from` / `valid_until` (what
    a wire client reads), and a search's `as_of` keeps the memories valid then, in the
    persistent tiers and the working one alike; a bad window stores nothing anywhere."""
    mar = 1_772_323_200.0  # 2026-03-01T00:00:00Z
    boston = Memory(content="I live in Boston.", memory_type=MemoryType.SEMANTIC,
                    valid_until="2026-03-01T00:00:00Z")
    denver = Memory(content="I live in Denver.", valid_from=mar)
    note = Memory(content="I live out of boxes while I move.", memory_type=MemoryType.WORKING,
                  valid_from=mar - 86_400, valid_until=mar + 86_400)
    for m in (boston, denver, note):
        await memories.set(m.id, m)
    q = Query(tiers=("semantic",), keys=(canonical_key({"id": boston.id}),))
    (e,), _ = await store.find(SCOPE, q, time.time())
    assert (e.valid_from, e.valid_until) == (None, mar)
    got = await memories.get(note.id)
    assert got is not None and got.valid_from == note.valid_from

    async def at(as_of: Any) -> set[str]:
        return {h.memory.id for h in await memories.search("where do I live", 10,
                                                           as_of=as_of)}

    assert await at(None) == {boston.id, denver.id, note.id}
    assert await at(mar - 2 * 86_400) == {boston.id}
    assert await at("2026-02-28T12:00:00Z") == {boston.id, note.id}
    assert await at(mar) == {denver.id, note.id}
    assert await at(mar + 86_400) == {denver.id}
    with pytest.raises(ValueError, match="as_of"):
        await at("2026-03-01")
    for tier in (MemoryType.SEMANTIC, MemoryType.WORKING):
        bad = Memory(content="I live nowhere.", memory_type=tier).model_copy(
            update={"valid_from": datetime(2026, 3, 1, tzinfo=UTC),
                    "valid_until": datetime(2026, 1, 1, tzinfo=UTC)})
        with pytest.raises(ValueError, match="valid_until must be after valid_from"):
            await memories.set(bad.id, bad)
        assert await memories.get(bad.id) is None
