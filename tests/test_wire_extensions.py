"""The store extensions over real sockets: value filters, key prefixes and offsets on retrieve,
client vectors, TTL refresh on read, the expired-entry sweep and key-path listing, with their
bad-input answers and tenancy."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from authkit import issue
from support.hosts import make_config, running_host, url_of

from host.app import Host
from host.client import MemoryClient, RemoteError
from protocol.clock import ShiftedClock

pytestmark = [pytest.mark.all_backends, pytest.mark.all_transports("websocket")]


async def connect_as(host: Host, token: str) -> MemoryClient:
    """A client of `host` with `token` as its bearer."""
    return await MemoryClient.connect(url_of(host),
                                      additional_headers={"Authorization": f"Bearer {token}"})


def entry(key: Any, content: Any, tier: str = "semantic", **kw: Any) -> dict[str, Any]:
    return {"key": key, "content": content, "tier": tier, **kw}


async def session(connect: Callable[..., Any], agent: str = "a1", ns: str = "ns") -> MemoryClient:
    """A client with a session in `ns` as `agent`."""
    c: MemoryClient = await connect()
    await c.init(ns, {"agent": agent})
    return c


async def keys_of(c: MemoryClient, **kw: Any) -> list[Any]:
    """The `k` of each entry a retrieve with `kw` returns, in order."""
    reply = await c.retrieve(**{"limit": 100, **kw})
    return [e["key"]["k"] for e in reply.entries]


async def bad(coro: Any) -> str:
    """The `detail.field` of the `invalid_message` that `coro` must raise."""
    with pytest.raises(RemoteError) as err:
        await coro
    assert err.value.code == "invalid_message", err.value
    return str(err.value.detail.get("field"))


async def test_filters_compare_values_by_type_before_the_limit(
    connect: Callable[..., Any],
) -> None:
    """Each operator compares a content field of the same JSON type (numbers, strings, booleans,
    null, arrays), nested paths and nested objects alike, before `limit` and `total`."""
    c = await session(connect)
    docs = [
        {"n": 1, "s": "a", "b": True, "meta": {"lvl": 3}, "arr": [1, 2]},
        {"n": 2, "s": "b", "b": False, "meta": {"lvl": 5}, "z": None},
        {"n": 3, "s": "c", "meta": {"lvl": 7}},
        {"n": "3", "s": 3},
    ]
    await c.store([entry({"k": i}, d) for i, d in enumerate(docs)])
    assert sorted(await keys_of(c, filter={"n": 2})) == [1]
    assert sorted(await keys_of(c, filter={"n": {"$gte": 2}})) == [1, 2]
    assert sorted(await keys_of(c, filter={"n": {"$gt": 1, "$lt": 3}})) == [1]
    assert sorted(await keys_of(c, filter={"n": {"$ne": 2}})) == [0, 2]
    assert sorted(await keys_of(c, filter={"s": {"$lte": "b"}})) == [0, 1]
    assert sorted(await keys_of(c, filter={"b": True})) == [0]
    assert sorted(await keys_of(c, filter={"b": {"$ne": True}})) == [1]
    assert sorted(await keys_of(c, filter={"z": None})) == [1]
    assert sorted(await keys_of(c, filter={"arr": [1, 2]})) == [0]
    assert sorted(await keys_of(c, filter={"meta.lvl": {"$gt": 4}})) == [1, 2]
    assert sorted(await keys_of(c, filter={"meta": {"lvl": 7}})) == [2]
    assert sorted(await keys_of(c, filter={"missing": {"$ne": 1}})) == []
    reply = await c.retrieve(filter={"n": {"$gte": 1}}, limit=1)
    assert len(reply.entries) == 1 and reply.total == 3


async def test_offset_pages_and_key_prefix_narrows(connect: Callable[..., Any]) -> None:
    """`offset` skips entries of the ordered result (with or without a query) and `key_prefix`
    keeps the entries whose key array starts with the given elements."""
    c = await session(connect)
    await c.store([entry({"ns": ["u", str(i % 2)], "k": i}, {"text": f"apple number {i}"},
                         score=1 - i / 10) for i in range(6)])
    assert await keys_of(c) == [0, 1, 2, 3, 4, 5]
    assert await keys_of(c, offset=2, limit=2) == [2, 3]
    assert await keys_of(c, offset=9) == []
    assert await keys_of(c, key_prefix={"ns": ["u", "1"]}) == [1, 3, 5]
    assert await keys_of(c, key_prefix={"ns": ["u"]}) == [0, 1, 2, 3, 4, 5]
    assert await keys_of(c, key_prefix={"ns": ["v"]}) == []
    ranked = await keys_of(c, query="apple")
    assert sorted(ranked) == [0, 1, 2, 3, 4, 5]
    assert await keys_of(c, query="apple", offset=4) == ranked[4:]
    assert await keys_of(c, query="apple", key_prefix={"ns": ["u", "0"]},
                         filter={"text": {"$ne": "apple number 2"}}) == [
        k for k in ranked if k in (0, 4)]


async def test_bad_extension_fields_name_their_field(connect: Callable[..., Any]) -> None:
    """Malformed filters, prefixes, offsets, vectors and paths requests are `invalid_message`
    naming the field, and the host answers the next request."""
    c = await session(connect)
    assert await bad(c.retrieve(filter={"a;drop": 1})) == "filter"
    assert await bad(c.retrieve(filter={"a": {"$regex": "x"}})) == "filter"
    assert await bad(c.retrieve(filter={"a": {"$gt": [1]}})) == "filter"
    assert await bad(c.retrieve(filter={f"f{i}": i for i in range(40)})) == "filter"
    assert await bad(c.retrieve(filter={".".join("a" * 9): 1})) == "filter"
    assert await bad(c.retrieve(key_prefix={"ns": ["x"] * 40})) == "key_prefix"
    assert await bad(c.retrieve(key_prefix={"n s": ["x"]})) == "key_prefix"
    assert await bad(c.retrieve(offset=10**6)) == "offset"
    assert await bad(c.retrieve(offset=-1)) == "offset"
    assert await bad(c.retrieve(vector=[1.0], query="x")) == "vector"
    assert await bad(c.retrieve(vector=[0.5] * 5000)) == "vector"
    assert await bad(c.retrieve(vector=[1.0], vector_space="a b")) == "vector_space"
    assert await bad(c.paths(field="a.b")) == "field"
    assert await bad(c.paths(prefix=["x"] * 40)) == "prefix"
    assert await bad(c.paths(offset=10**6)) == "offset"
    await c.ping()


async def test_client_vectors_rank_by_cosine_and_are_never_returned(
    connect: Callable[..., Any],
) -> None:
    """A retrieve by `vector` returns the entries with vectors in that space by their best
    cosine similarity (relevance, negative ones included), never the vectors themselves."""
    c = await session(connect)
    reply = await c.store([
        entry({"k": 0}, {"t": "x"}, vectors=[[1.0, 0.0, 0.0]], vector_space="s"),
        entry({"k": 1}, {"t": "y"}, vectors=[[0.0, 1.0, 0.0], [0.6, 0.8, 0.0]],
              vector_space="s"),
        entry({"k": 2}, {"t": "z"}, vectors=[[-1.0, 0.0, 0.0]], vector_space="s"),
        entry({"k": 3}, {"t": "w"}),
        entry({"k": 4}, {"t": "v"}, vectors=[[1.0, 0.0, 0.0]], vector_space="other"),
    ])
    assert reply.errors == []
    got = await c.retrieve(vector=[2.0, 0.0, 0.0], vector_space="s", limit=10)
    assert [e["key"]["k"] for e in got.entries] == [0, 1, 2]
    assert [round(e["relevance"], 6) for e in got.entries] == [1.0, 0.6, -1.0]
    assert got.total == 3
    assert all("vectors" not in e for e in got.entries)
    assert "vectors" not in (await c.retrieve(keys=[{"k": 0}])).entries[0]
    page = await c.retrieve(vector=[1.0, 0.0, 0.0], vector_space="s", offset=1, limit=1,
                            filter={"t": {"$ne": "z"}})
    assert [e["key"]["k"] for e in page.entries] == [1] and page.total == 2
    # an update without vectors leaves the entry without them
    await c.store([entry({"k": 0}, {"t": "x2"})])
    got = await c.retrieve(vector=[1.0, 0.0, 0.0], vector_space="s")
    assert [e["key"]["k"] for e in got.entries] == [1, 2]


async def test_bad_vectors_are_the_entries_errors(connect: Callable[..., Any]) -> None:
    """Vectors of the wrong dimension for their space, of mixed lengths, not finite, too many
    or in the working tier fail their entry alone; a query vector of another dimension than
    the space is `invalid_message`."""
    c = await session(connect)
    await c.store([entry({"k": 0}, 1, vectors=[[1.0, 0.0]], vector_space="s")])
    reply = await c.store([
        entry({"k": 1}, 1, vectors=[[1.0, 0.0, 0.0]], vector_space="s"),
        entry({"k": 2}, 1, vectors=[[1.0], [1.0, 2.0]], vector_space="s"),
        entry({"k": 3}, 1, vectors=[[1e39, 1.0]], vector_space="t"),
        entry({"k": 4}, 1, vectors=[[1.0, 0.0]] * 65, vector_space="s"),
        entry({"k": 5}, 1, tier="working", vectors=[[1.0, 0.0]], vector_space="s"),
        entry({"k": 6}, 1, vectors=[[0.0, 1.0]], vector_space="s"),
    ])
    assert [e.split(":")[0] for e in reply.errors] == [f"entries[{i}]" for i in range(5)]
    assert all("invalid_message" in e for e in reply.errors)
    assert reply.stored == [{"k": 6}]
    assert await bad(c.retrieve(vector=[1.0, 0.0, 0.0], vector_space="s")) == "vector"
    got = await c.retrieve(vector=[0.0, 1.0], vector_space="s")
    assert [e["key"]["k"] for e in got.entries] == [6, 0]
    assert not math.isnan(got.entries[1]["relevance"])


async def test_vectors_are_per_namespace_and_agent_as_entries(
    connect: Callable[..., Any],
) -> None:
    """Another namespace's space of the same name has its own dimension and its entries, and
    another agent's episodic entries are never found by vector."""
    a = await session(connect, "a1", "ns1")
    b = await session(connect, "a2", "ns1")
    other = await session(connect, "a1", "ns2")
    await a.store([entry({"k": 1}, 1, tier="episodic", vectors=[[1.0, 0.0]], vector_space="s")])
    assert (await other.store([entry({"k": 2}, 1, vectors=[[1.0, 0.0, 0.0]],
                                     vector_space="s")])).errors == []
    assert (await b.retrieve(vector=[1.0, 0.0], vector_space="s")).entries == []
    assert (await other.retrieve(vector=[1.0, 0.0, 0.0], vector_space="s")).total == 1
    assert (await a.retrieve(vector=[1.0, 0.0], vector_space="s")).total == 1


async def test_refresh_ttl_restarts_the_clock_of_what_is_returned(
    host: Host, connect: Callable[..., Any],
) -> None:
    """A retrieve with `refresh_ttl` makes the entries it returns expire `ttl` seconds after it,
    without moving `updated_at`; a retrieve without it leaves the expiry alone."""
    c = await session(connect)
    await c.store([entry({"k": 1}, 1, ttl=100), entry({"k": 2}, 2, ttl=100)])
    before = (await c.retrieve(keys=[{"k": 1}])).entries[0]["updated_at"]
    host.clock.advance(80)  # type: ignore[attr-defined]
    got = await c.retrieve(keys=[{"k": 1}], refresh_ttl=True)
    assert got.entries[0]["updated_at"] == before
    await c.retrieve(keys=[{"k": 2}])
    host.clock.advance(40)  # type: ignore[attr-defined]
    assert await keys_of(c) == [1]
    host.clock.advance(70)  # type: ignore[attr-defined]
    assert await keys_of(c) == []


async def test_sweep_deletes_the_expired_entries_it_may_see(
    host: Host, connect: Callable[..., Any],
) -> None:
    """`memory/sweep` deletes the session's namespace's expired entries it may see and counts
    them; another agent's episodic and another namespace's entries stay."""
    a = await session(connect, "a1", "ns1")
    b = await session(connect, "a2", "ns1")
    other = await session(connect, "a1", "ns2")
    await a.store([entry({"k": 1}, 1, ttl=10), entry({"k": 2}, 2, ttl=10, tier="episodic"),
                   entry({"k": 3}, 3)])
    await b.store([entry({"k": 4}, 4, ttl=10, tier="episodic")])
    await other.store([entry({"k": 5}, 5, ttl=10)])
    assert await a.sweep() == 0
    host.clock.advance(20)  # type: ignore[attr-defined]
    assert await a.sweep() == 2
    assert await a.sweep() == 0
    assert await b.sweep() == 1
    assert await other.sweep() == 1


async def test_paths_lists_distinct_key_arrays(connect: Callable[..., Any]) -> None:
    """`memory/paths` lists the distinct arrays under a key member among readable entries,
    filtered by prefix and suffix with `*` wildcards, cut to `max_depth`, sorted and paged."""
    c = await session(connect)
    other = await session(connect, "a2", "ns")
    elsewhere = await session(connect, "a1", "ns2")
    paths = [["a", "b", "c"], ["a", "b", "d"], ["a", "e"], ["f"], ["x", "b", "c"]]
    await c.store([entry({"ns": p, "k": i}, i) for i, p in enumerate(paths)]
                  + [entry({"ns": ["a", "b", "c"], "k": 9}, 9), entry({"k": 10}, 10)])
    await other.store([entry({"ns": ["private"], "k": 0}, 0, tier="episodic")])
    await elsewhere.store([entry({"ns": ["gone"], "k": 0}, 0)])
    assert await c.paths() == sorted(paths)
    assert await c.paths(prefix=["a"]) == [["a", "b", "c"], ["a", "b", "d"], ["a", "e"]]
    assert await c.paths(prefix=["*", "b"]) == [["a", "b", "c"], ["a", "b", "d"],
                                               ["x", "b", "c"]]
    assert await c.paths(suffix=["c"]) == [["a", "b", "c"], ["x", "b", "c"]]
    assert await c.paths(suffix=["*", "c"], prefix=["x"]) == [["x", "b", "c"]]
    assert await c.paths(max_depth=1) == [["a"], ["f"], ["x"]]
    assert await c.paths(max_depth=2, prefix=["a"]) == [["a", "b"], ["a", "e"]]
    assert await c.paths(limit=2, offset=1) == [["a", "b", "d"], ["a", "e"]]
    assert await other.paths() == sorted(paths + [["private"]])


async def test_a_filtered_query_finds_by_meaning_beyond_the_unfiltered_nearest(
    store_db: str,
) -> None:
    """With a filter, the vector candidates are the nearest among the entries the filter
    keeps, not the nearest of all then filtered: a paraphrase is found though closer entries
    that the filter drops fill the pool."""
    config = make_config(store_db, search={"fusion_pool": 2})
    async with running_host(config) as host, \
            await MemoryClient.connect(url_of(host)) as c:
        await c.init("ns", {"agent": "a1"})
        near = [entry({"k": i}, {"text": "the cat sat on the mat", "kind": "other"})
                for i in range(4)]
        await c.store(near + [entry({"k": 9}, {"text": "a kitten resting on a rug",
                                                "kind": "target"})])
        got = await c.retrieve(query="feline lying on carpet", filter={"kind": "target"})
        assert [e["key"]["k"] for e in got.entries] == [9]


async def test_nul_characters_never_fail_a_filtered_read(connect: Callable[..., Any]) -> None:
    """A content or key holding U+0000 (another agent's, in the same namespace) and filter
    values, prefixes or path elements holding it leave every filtered read answered."""
    a = await session(connect, "a1")
    b = await session(connect, "a2")
    await b.store([entry({"ns": ["x\u0000"], "k": 1}, {"s": "bad\u0000", "n": 1}),
                   entry({"k": 2}, {"s": "bad\u0000", "n": 1}, tier="episodic")])
    await a.store([entry({"ns": ["x"], "k": 3}, {"s": "good", "n": 1})])
    assert 3 in await keys_of(a, filter={"n": 1})
    assert await keys_of(a, filter={"s": "good"}) == [3]
    assert await keys_of(a, filter={"s": "bad\u0000"}) in ([], [1])
    assert 3 in await keys_of(a, filter={"s": {"$ne": "x\u0000"}})
    assert 3 in await keys_of(a, filter={"s": {"$gt": "a\u0000"}})
    assert await keys_of(a, key_prefix={"ns": ["x"]}) == [3]
    assert await keys_of(a, key_prefix={"ns": ["y\u0000"]}) == []
    assert await a.paths(prefix=["y\u0000"]) == []
    assert ["x"] in await a.paths()


async def test_a_refreshed_entry_is_found_by_meaning_past_its_first_expiry(
    host: Host, connect: Callable[..., Any],
) -> None:
    """After a `refresh_ttl` read, a query that shares no word with the entry still finds it
    by meaning once its first expiry has passed (the search's vectors expire with it)."""
    c = await session(connect)
    await c.store([entry({"k": 1}, {"text": "a kitten resting on a rug"}, ttl=100)])
    assert [e["key"]["k"] for e in (await c.retrieve(query="feline lying on carpet")).entries
            ] == [1]
    host.clock.advance(80)  # type: ignore[attr-defined]
    await c.retrieve(keys=[{"k": 1}], refresh_ttl=True)
    host.clock.advance(40)  # type: ignore[attr-defined]
    got = await c.retrieve(query="feline lying on carpet")
    assert [e["key"]["k"] for e in got.entries] == [1]


async def test_extensions_keep_the_tokens_rights(tmp_path: Path) -> None:
    """A token without `read_semantic` lists no semantic paths and cannot ask for them, one
    without `forget` sweeps nothing, and one without `write_semantic` refreshes no semantic
    TTL: the extensions go through the rights of retrieve, forget and store."""
    full, full_spec = issue("writer")
    weak, weak_spec = issue("reader", rights=["read_semantic"])
    blind, blind_spec = issue("blind", rights=[])
    clock = ShiftedClock()
    config = make_config(tmp_path / "db", auth={"tokens": [full_spec, weak_spec, blind_spec]})
    async with running_host(config, clock=clock) as host:
        w, r, b = [await connect_as(host, t) for t in (full, weak, blind)]
        for c in (w, r, b):
            await c.init("ns")
        await w.store([entry({"ns": ["s"], "k": 1}, 1, ttl=100)])
        assert await b.paths() == []
        with pytest.raises(RemoteError) as err:
            await b.paths(tier="semantic")
        assert err.value.code == "unauthorized"
        assert await r.paths() == [["s"]]
        clock.advance(80)
        await r.retrieve(keys=[{"ns": ["s"], "k": 1}], refresh_ttl=True)
        clock.advance(40)
        assert await r.sweep() == 0
        assert await w.sweep() == 1
        await w.store([entry({"ns": ["s"], "k": 2}, 2, ttl=100)])
        clock.advance(80)
        await w.retrieve(keys=[{"ns": ["s"], "k": 2}], refresh_ttl=True)
        clock.advance(40)
        assert (await w.retrieve(keys=[{"ns": ["s"], "k": 2}])).total == 1
        for c in (w, r, b):
            await c.close()


async def test_refresh_ttl_keeps_the_fraction_of_a_second(
    host: Host, connect: Callable[..., Any],
) -> None:
    """A refresh at a time late in its second makes the entry expire `ttl` seconds after that
    time, not after the whole second before it."""
    c = await session(connect)
    await c.store([entry({"k": 1}, 1, ttl=100)])
    host.clock.advance((0.9 - host.clock() % 1) % 1)  # type: ignore[attr-defined]
    await c.retrieve(keys=[{"k": 1}], refresh_ttl=True)  # at x.9 s: expires at x.9 + 100
    host.clock.advance(99.5)  # type: ignore[attr-defined]
    assert await keys_of(c) == [1]
