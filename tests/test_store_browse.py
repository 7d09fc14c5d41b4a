"""The memory browser's reads (`EntryStore.overview`, `browse`, ...), run against every backend."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from host.store.interface import EntryStore
from host.store.postgres.store import PostgresEntryStore
from host.store.records import BrowseFilter, NewEntry, Scope, stored_bytes
from host.store.sqlite.store import SQLiteEntryStore
from protocol.keys import canonical_key

pytestmark = pytest.mark.all_backends

T0 = 1_800_000_000.0


@pytest.fixture
async def store(store_db: str) -> AsyncIterator[EntryStore]:
    """One open store of the parametrised backend, with entries of two agents in "ns" and
    one entry in "other", written at T0, T0 + 1, ... in this order."""
    s: EntryStore = (PostgresEntryStore(store_db, pool_max=4) if store_db.startswith("postgresql")
                     else SQLiteEntryStore(store_db))
    await s.open()
    rows = [
        (Scope("ns", "alice"), "episodic", {"k": "a1"}, ["x"], 0),
        (Scope("ns", "bob"), "episodic", {"k": "b1"}, ["x", "y"], 0),
        (Scope("ns", "alice"), "semantic", {"k": "s_1"}, ["y"], 0),
        (Scope("ns", "bob"), "semantic", {"k": "gone"}, [], 5),
        (Scope("other", "alice"), "semantic", {"k": "o1"}, ["x"], 0),
    ]
    for i, (scope, tier, key, tags, ttl) in enumerate(rows):
        await s.put(scope, [NewEntry(tier=tier, key=canonical_key(key), content=b'"c"', tags=tags,
                                     ttl=ttl)], T0 + i)
    yield s
    await s.close()


def _keys(entries: list) -> list[str]:  # type: ignore[type-arg]
    return [e.key.decode() for e in entries]


async def test_browse_lists_every_agents_entries_newest_first(store: EntryStore) -> None:
    """A browse sees every agent's live entries of one namespace, newest first, paged."""
    now = T0 + 10  # "gone" has expired
    page, total = await store.browse("ns", BrowseFilter(limit=2), now)
    assert total == 3 and _keys(page) == ['{"k":"s_1"}', '{"k":"b1"}']
    page, _ = await store.browse("ns", BrowseFilter(limit=2, offset=2), now)
    assert _keys(page) == ['{"k":"a1"}']
    every, _ = await store.browse("ns", BrowseFilter(), now)
    assert {e.agent for e in every} == {"alice", "bob"}


async def test_browse_filters_by_tier_agent_tags_and_key_text(store: EntryStore) -> None:
    """Tier, writing agent, every tag and text within the key narrow a browse; LIKE wildcards
    in the key text are literal."""
    now = T0 + 10

    async def keys(**f: object) -> list[str]:
        return _keys((await store.browse("ns", BrowseFilter(**f), now))[0])  # type: ignore[arg-type]

    assert await keys(tiers=("semantic",)) == ['{"k":"s_1"}']
    assert await keys(agent="bob") == ['{"k":"b1"}']
    assert await keys(tags=("x",)) == ['{"k":"b1"}', '{"k":"a1"}']
    assert await keys(tags=("x", "y")) == ['{"k":"b1"}']
    assert await keys(key_text="s_") == ['{"k":"s_1"}']
    assert await keys(key_text="_") == ['{"k":"s_1"}']
    assert await keys(key_text="%") == []


async def test_overview_entry_changes_and_export(store: EntryStore) -> None:
    """The overview counts live entries by tier and agent (only the namespaces asked for);
    one entry reads back by id; export holds the namespace."""
    now = T0 + 10
    rows = await store.overview(None, now)
    assert [r.namespace for r in rows] == ["ns", "other"]
    ns = rows[0]
    assert ns.tiers == {"episodic": 2, "semantic": 1}
    assert ns.agents == {"alice": {"episodic": 1, "semantic": 1}, "bob": {"episodic": 1}}
    # the live entries' counted bytes: key, content and tags (a1, b1, s_1)
    live = [({"k": "a1"}, ["x"]), ({"k": "b1"}, ["x", "y"]), ({"k": "s_1"}, ["y"])]
    assert ns.bytes == sum(stored_bytes(canonical_key(k), b'"c"', t) for k, t in live)
    assert ns.backlog == 3  # no embedder ran: every entry waits
    assert [r.namespace for r in await store.overview(["other"], now)] == ["other"]
    assert await store.overview([], now) == []
    page, _ = await store.browse("ns", BrowseFilter(), now)
    one = await store.browse_entry("ns", page[0].id, now)
    assert one is not None and one.key == page[0].key and one.vector == "queued"
    assert await store.browse_entry("other", page[0].id, now) is None
    every = await store.export_namespace("ns", now)
    assert sorted(_keys(every)) == ['{"k":"a1"}', '{"k":"b1"}', '{"k":"s_1"}']
    assert [e.id for e in every] == sorted(e.id for e in every)  # row order: pages follow on
    first = await store.export_namespace("ns", now, 0, 2)
    rest = await store.export_namespace("ns", now, first[-1].id, 2)
    assert _keys(first + rest) == _keys(every) and len(first) == 2


async def test_browse_reads_the_bounds_and_keeps_those_valid_as_of(store: EntryStore) -> None:
    """Every browse read returns an entry's `valid_from` / `valid_until` (None when open), and
    `as_of` keeps the entries valid then by the rule of a read's `as_of`: `valid_from`
    included, `valid_until` excluded, an entry without bounds always."""
    now, start, end = T0 + 10, T0 + 100, T0 + 200
    await store.put(Scope("ns", "alice"), [
        NewEntry(tier="semantic", key=canonical_key({"k": "t1"}), content=b'"c"',
                 valid_from=start, valid_until=end),
        NewEntry(tier="semantic", key=canonical_key({"k": "t2"}), content=b'"c"',
                 valid_until=start)], now)

    async def keys(at: float | None) -> set[str]:
        page, total = await store.browse("ns", BrowseFilter(as_of=at), now)
        assert total == len(page)
        return set(_keys(page))

    plain = {'{"k":"a1"}', '{"k":"b1"}', '{"k":"s_1"}'}
    assert await keys(None) == plain | {'{"k":"t1"}', '{"k":"t2"}'}
    assert await keys(start - 1) == plain | {'{"k":"t2"}'}
    assert await keys(start) == plain | {'{"k":"t1"}'}
    assert await keys(end - 0.5) == plain | {'{"k":"t1"}'}
    assert await keys(end) == plain
    page, _ = await store.browse("ns", BrowseFilter(key_text="t"), now)
    bounds = {e.key.decode(): (e.valid_from, e.valid_until) for e in page}
    assert bounds == {'{"k":"t1"}': (start, end), '{"k":"t2"}': (None, start)}
    one = await store.browse_entry("ns", page[0].id, now)
    assert one is not None and (one.valid_from, one.valid_until) == bounds[one.key.decode()]
    exported = {e.key.decode(): (e.valid_from, e.valid_until)
                for e in await store.export_namespace("ns", now)}
    assert exported['{"k":"t1"}'] == (start, end) and exported['{"k":"a1"}'] == (None, None)
