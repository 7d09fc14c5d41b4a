"""The eight memory messages over a real WebSocket to a host with a real SQLite file."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed

from host.client import MemoryClient, RemoteError
from host.net.clients import HttpStatusError

pytestmark = [pytest.mark.all_backends, pytest.mark.all_transports]

SPEC_MEMORY_ID = "a1b2c3d4-e5f6-7890-abcd-ef1234567890"
INIT = ('{"type":"memory/init/req","id":"m0a","version":"1.0","ts":1716123456.500,'
        '"namespace":"agent-session-1","scope":{"agent":"assistant"},"metadata":{"version":"1.0"}}')
STORE = ('{"type":"memory/store/req","id":"m1","version":"1.0","ts":1716123456.789,'
         '"memory_id":"a1b2c3d4-e5f6-7890-abcd-ef1234567890","entries":[{"key":{"agent":"a1",'
         '"topic":"prefs"},"content":{"language":"python","style":"concise"},"tier":"episodic",'
         '"tags":["preferences"],"source":"turn-1","score":0.9,"ttl":0}]}')
RETRIEVE = ('{"type":"memory/retrieve/req","id":"m3","version":"1.0","ts":1716123457.100,'
            '"memory_id":"a1b2c3d4-e5f6-7890-abcd-ef1234567890","keys":[],'
            '"query":"user coding preferences","tags":[],"tier":"","limit":5,"min_score":0.5}')
FORGET = ('{"type":"memory/forget/req","id":"m4","version":"1.0","ts":1716123458.100,'
          '"memory_id":"a1b2c3d4-e5f6-7890-abcd-ef1234567890","keys":[],"tags":["temp"],'
          '"tier":"working"}')


async def exchange(ws: Any, frame: str) -> dict[str, Any]:
    """Send one raw frame and read one raw reply."""
    await ws.send(frame)
    return json.loads(await ws.recv())


def entry(key: Any, content: Any = "x", tier: str = "episodic", **kw: Any) -> dict[str, Any]:
    return {"key": key, "content": content, "tier": tier, **kw}


async def test_spec_wire_examples_verbatim(raw_ws: Any) -> None:
    """The spec's init, store, retrieve and forget frames get the spec's replies."""
    ws = raw_ws
    init = await exchange(ws, INIT)
    assert init["type"] == "memory/init/resp" and init["req_id"] == "m0a"
    assert init["namespace"] == "agent-session-1" and init["success"] is True
    assert init["version"] == "1.0" and init["id"] and isinstance(init["ts"], float)
    mid = init["memory_id"]
    store = await exchange(ws, STORE.replace(SPEC_MEMORY_ID, mid))
    assert store == {**store, "type": "memory/store/resp", "req_id": "m1",
                     "stored": [{"agent": "a1", "topic": "prefs"}], "errors": []}
    await ws.send(json.dumps({"type": "memory/store/req", "id": "tmp", "version": "1.0",
                              "memory_id": mid, "entries": [
                                  entry({"n": i}, "scratch", "working", tags=["temp"])
                                  for i in range(3)]}))
    await ws.recv()
    retrieve = await exchange(ws, RETRIEVE.replace(SPEC_MEMORY_ID, mid))
    assert retrieve["type"] == "memory/retrieve/resp" and retrieve["req_id"] == "m3"
    assert retrieve["total"] == len(retrieve["entries"])
    forget = await exchange(ws, FORGET.replace(SPEC_MEMORY_ID, mid))
    assert forget["type"] == "memory/forget/resp" and forget["req_id"] == "m4"
    assert forget["deleted"] == 3


async def test_handshake_and_ping(connect: Callable[..., Any]) -> None:
    """handshake/resp accepts the memory capability; ping gets pong with uptime."""
    c: MemoryClient = await connect()
    hs = await c.handshake("agent-x", ["memory", "telepathy"])
    assert hs.ok and hs.accepted_caps == [{"capability": "memory", "enabled": True, "metadata": {}}]
    assert hs.session_id and hs.max_parallel >= 1
    pong = await c.ping()
    assert pong.uptime_seconds >= 0


async def test_upsert_keeps_created_at(client: MemoryClient) -> None:
    """Storing an existing key replaces content and keeps created_at; updated_at moves."""
    await client.store([entry({"k": 1}, "v1", tags=["a"], score=0.2)])
    first = (await client.retrieve(keys=[{"k": 1}])).entries[0]
    await asyncio.sleep(0.01)
    await client.store([entry({"k": 1.0}, "v2", tags=["b"], score=0.7)])
    got = await client.retrieve(keys=[{"k": 1}])
    assert got.total == 1
    second = got.entries[0]
    assert second["content"] == "v2" and second["tags"] == ["b"] and second["score"] == 0.7
    assert second["created_at"] == first["created_at"]
    assert second["updated_at"] > first["updated_at"]


async def test_client_timestamps_ignored(client: MemoryClient) -> None:
    """created_at/updated_at sent by a client are ignored; the host sets them."""
    await client.store([entry({"k": "t"}, created_at=1.0, updated_at=2.0)])
    e = (await client.retrieve(keys=[{"k": "t"}])).entries[0]
    assert e["created_at"] > 1e9 and e["updated_at"] > 1e9


async def test_key_canonical_form(client: MemoryClient) -> None:
    """Keys equal under RFC 8785 name one entry, whatever the member order."""
    await client.store([entry({"a": 1, "b": 2}, "first")])
    await client.store([entry({"b": 2, "a": 1.0}, "second")])
    got = await client.retrieve(keys=[{"b": 2, "a": 1}])
    assert got.total == 1 and got.entries[0]["content"] == "second"


@pytest.mark.parametrize("tier", ["working", "episodic", "semantic"])
async def test_ttl_expiry(host: Any, client: MemoryClient, tier: str) -> None:
    """An entry is not returned once updated_at + ttl has passed; re-storing makes a new one."""
    await client.store([entry({"k": "ttl"}, "soon gone", tier, ttl=1),
                        entry({"k": "keep"}, "stays", tier)])
    assert (await client.retrieve(tier=tier)).total == 2
    host.clock.advance(1.2)
    got = await client.retrieve(tier=tier)
    assert [e["key"] for e in got.entries] == [{"k": "keep"}] and got.total == 1
    by_query = await client.retrieve(tier=tier, query="soon gone")
    assert {"k": "ttl"} not in [e["key"] for e in by_query.entries]
    await client.store([entry({"k": "ttl"}, "again", tier)])
    again = (await client.retrieve(keys=[{"k": "ttl"}], tier=tier)).entries[0]
    assert again["created_at"] == again["updated_at"]


async def test_gc_deletes_expired_rows(host: Any, client: MemoryClient) -> None:
    """The garbage collector physically deletes expired persisted entries."""
    await client.store([entry({"k": i}, ttl=1) for i in range(5)] + [entry({"k": "x"})])
    assert await host.gc.collect_once() == 0  # not yet expired
    host.clock.advance(1.1)
    assert await host.gc.collect_once() == 5
    assert await host.gc.collect_once() == 0


async def test_tags_are_anded(client: MemoryClient) -> None:
    """Retrieve by several tags returns only entries carrying all of them, in every tier."""
    for tier in ("working", "episodic", "semantic"):
        await client.store([
            entry({"t": 1}, tier=tier, tags=["red", "big"]),
            entry({"t": 2}, tier=tier, tags=["red"]),
            entry({"t": 3}, tier=tier, tags=["big", "red", "old"]),
        ])
    got = await client.retrieve(tags=["red", "big"])
    assert got.total == 6
    assert sorted(e["key"]["t"] for e in got.entries) == [1, 1, 1, 3, 3, 3]
    assert (await client.retrieve(tags=["red", "big"], keys=[{"t": 3}], tier="semantic")).total == 1


async def test_limit_total_and_order(client: MemoryClient) -> None:
    """`total` counts all matches; `limit` cuts; order is score desc then updated_at desc."""
    await client.store([entry({"i": i}, score=i / 10, tier=("episodic", "semantic", "working")[i % 3])
                        for i in range(10)])
    got = await client.retrieve(limit=4)
    assert got.total == 10
    assert [e["key"]["i"] for e in got.entries] == [9, 8, 7, 6]
    assert (await client.retrieve(min_score=0.5)).total == 5


async def test_limit_clamped(client: MemoryClient, host: Any) -> None:
    """A limit above the configured maximum is clamped, not refused."""
    host.config.limits.max_limit = 3
    await client.store([entry({"i": i}) for i in range(5)])
    got = await client.retrieve(limit=100)
    assert len(got.entries) == 3 and got.total == 5


async def test_query_relevance_and_combined(client: MemoryClient) -> None:
    """A query matches entries sharing a term; each carries relevance and combined."""
    await client.store([
        entry({"n": 1}, "the cat sat on the mat"),
        entry({"n": 2}, {"animal": "cat", "color": "black"}, "semantic", score=0.5),
        entry({"n": 3}, "dogs bark loudly", "working"),
    ])
    got = await client.retrieve(query="black cat")
    assert got.total == 2
    keys = [e["key"]["n"] for e in got.entries]
    assert keys[0] == 2  # both terms match
    for e in got.entries:
        assert 0 < e["relevance"] <= 1 and 0 < e["combined"] <= 1
    between = (got.entries[0]["relevance"] + got.entries[1]["relevance"]) / 2
    assert (await client.retrieve(query="black cat", min_score=between)).total == 1
    assert (await client.retrieve(query="unicorn")).total == 0
    plain = await client.retrieve(keys=[{"n": 1}])
    assert "relevance" not in plain.entries[0]


async def test_forget_by_key_and_tag_per_tier(client: MemoryClient) -> None:
    """Forget deletes by key or tag within the tier (default episodic), "" = every tier."""
    for tier in ("working", "episodic", "semantic"):
        await client.store([entry({"f": 1}, tier=tier, tags=["old"]),
                            entry({"f": 2}, tier=tier, tags=["old", "x"]),
                            entry({"f": 3}, tier=tier)])
    assert await client.forget(keys=[{"f": 1}]) == 1  # default tier episodic
    assert (await client.retrieve(keys=[{"f": 1}])).total == 2
    assert await client.forget(tags=["old"], tier="semantic") == 2
    assert await client.forget(tags=["old", "x"], keys=[{"f": 2}], tier="") == 2
    assert await client.forget(keys=[{"f": 1}], tier="working") == 1
    left = await client.retrieve()
    assert sorted((e["tier"], e["key"]["f"]) for e in left.entries) == [
        ("episodic", 3), ("semantic", 3), ("working", 3)]


async def test_forget_needs_keys_or_tags(client: MemoryClient) -> None:
    """A forget with neither keys nor tags is invalid_message and deletes nothing."""
    await client.store([entry({"k": 1})])
    with pytest.raises(RemoteError) as err:
        await client.forget()
    assert err.value.code == "invalid_message"
    assert (await client.retrieve()).total == 1


async def test_pipelined_requests_answered_in_order(raw_ws: Any) -> None:
    """Many requests sent before reading: replies come in request order, reads see writes."""
    ws = raw_ws
    mid = (await exchange(ws, INIT))["memory_id"]
    frames = []
    for i in range(30):
        frames.append({"type": "memory/store/req", "id": f"s{i}", "version": "1.0",
                       "memory_id": mid, "entries": [entry({"p": i}, f"v{i}")]})
        frames.append({"type": "memory/retrieve/req", "id": f"r{i}", "version": "1.0",
                       "memory_id": mid, "keys": [{"p": i}]})
    frames.append({"type": "ping", "id": "end", "version": "1.0"})
    for f in frames:
        await ws.send(json.dumps(f))
    replies = [json.loads(await ws.recv()) for _ in frames]
    assert [r["req_id"] for r in replies] == [f["id"] for f in frames]
    for i in range(30):
        assert replies[2 * i + 1]["entries"][0]["content"] == f"v{i}"


async def test_sdk_shutdown_answers_what_came_before_then_ends(
        raw_ws: Any, connect: Callable[..., Any], transport: str) -> None:
    """The A2E SDK's `shutdown` (sent at disconnect): no reply, the requests before it are
    answered and committed, what follows it is dropped, then the connection or session ends
    (a WebSocket closes with 1000), and nothing is an error."""
    ws = raw_ws
    mid = (await exchange(ws, INIT))["memory_id"]
    for f in ({"type": "memory/store/req", "id": "s1", "version": "1.0", "memory_id": mid,
               "entries": [entry({"z": 1}, "kept")]},
              {"type": "shutdown", "id": "bye", "version": "1.0", "timeout": 10}):
        await ws.send(json.dumps(f))
    after = json.dumps({"type": "memory/store/req", "id": "s2", "version": "1.0",
                        "memory_id": mid, "entries": [entry({"z": 2}, "after")]})
    try:
        await ws.send(after)
    except HttpStatusError as refused:
        # over HTTP a message after `shutdown` is a request of its own: the session may have
        # ended before it came (404), or take and drop it (202); either way it is not stored
        assert transport == "http" and refused.status == 404, refused
    reply = json.loads(await ws.recv())
    assert (reply["type"], reply["req_id"]) == ("memory/store/resp", "s1")
    with pytest.raises((ConnectionClosed, ConnectionError, StopAsyncIteration)) as ended:
        async with asyncio.timeout(10):
            await ws.recv()
    if isinstance(ended.value, ConnectionClosed):
        assert ended.value.rcvd is not None and ended.value.rcvd.code == 1000
    c: MemoryClient = await connect()
    await c.init("agent-session-1", {"agent": "assistant"})
    assert (await c.retrieve(keys=[{"z": 1}])).total == 1
    assert (await c.retrieve(keys=[{"z": 2}])).total == 0


async def test_working_tier_gone_after_disconnect(connect: Callable[..., Any]) -> None:
    """Working entries vanish with their connection; episodic ones stay."""
    c1: MemoryClient = await connect()
    await c1.init("ns", {"agent": "a1"})
    await c1.store([entry({"w": 1}, tier="working"), entry({"e": 1})])
    await c1.close()
    c2: MemoryClient = await connect()
    await c2.init("ns", {"agent": "a1"})
    got = await c2.retrieve()
    assert [e["tier"] for e in got.entries] == ["episodic"]


async def test_each_session_has_its_own_working_tier(connect: Callable[..., Any]) -> None:
    """Two inits on one connection do not share working entries."""
    c: MemoryClient = await connect()
    m1 = await c.init("ns", {"agent": "a1"})
    m2 = await c.init("ns", {"agent": "a1"})
    await c.store([entry({"w": 1}, tier="working")], memory_id=m1)
    assert (await c.retrieve(memory_id=m2, tier="working")).total == 0
    assert (await c.retrieve(memory_id=m1, tier="working")).total == 1


async def test_episodic_private_semantic_shared(connect: Callable[..., Any]) -> None:
    """Episodic entries are private to their agent; semantic ones are shared in the namespace."""
    a: MemoryClient = await connect()
    await a.init("ns", {"agent": "alice"})
    b: MemoryClient = await connect()
    await b.init("ns", {"agent": "bob"})
    await a.store([entry({"k": 1}, "alice private", tags=["t"]),
                   entry({"k": 2}, "shared fact", "semantic", tags=["t"])])
    got = await b.retrieve(tags=["t"])
    assert [e["content"] for e in got.entries] == ["shared fact"] and got.total == 1
    assert (await b.retrieve(keys=[{"k": 1}], tier="episodic")).total == 0
    assert (await b.retrieve(query="alice private")).total == 0
    assert await b.forget(keys=[{"k": 1}]) == 0
    assert (await a.retrieve(keys=[{"k": 1}])).total == 1
    # same key, other agent: a separate entry
    await b.store([entry({"k": 1}, "bob private")])
    assert (await a.retrieve(keys=[{"k": 1}], tier="episodic")).entries[0]["content"] == "alice private"


async def test_nothing_crosses_namespaces(connect: Callable[..., Any]) -> None:
    """The same agent in two namespaces sees two disjoint memories, in every tier and query."""
    a: MemoryClient = await connect()
    await a.init("ns-one", {"agent": "a"})
    b: MemoryClient = await connect()
    await b.init("ns-two", {"agent": "a"})
    await a.store([entry({"k": 1}, "zebra", t, tags=["z"]) for t in ("episodic", "semantic")])
    assert (await b.retrieve()).total == 0
    assert (await b.retrieve(query="zebra")).total == 0
    assert (await b.retrieve(tags=["z"])).total == 0
    assert await b.forget(tags=["z"], tier="") == 0
    assert (await a.retrieve()).total == 2


async def test_memory_id_refused_from_other_connection(connect: Callable[..., Any]) -> None:
    """A memory_id from another connection, or after its connection closed, is memory_not_found."""
    a: MemoryClient = await connect()
    mid = await a.init("ns", {"agent": "a"})
    b: MemoryClient = await connect()
    for call in (lambda: b.retrieve(memory_id=mid),
                 lambda: b.store([entry({"k": 1})], memory_id=mid),
                 lambda: b.forget(keys=[{"k": 1}], memory_id=mid)):
        with pytest.raises(RemoteError) as err:
            await call()
        assert err.value.code == "memory_not_found"
    await a.close()
    c: MemoryClient = await connect()
    with pytest.raises(RemoteError) as err:
        await c.retrieve(memory_id=mid)
    assert err.value.code == "memory_not_found"


async def test_bad_entries_reported_others_stored(client: MemoryClient) -> None:
    """Each bad entry is reported as entries[i]: invalid_message; the good ones are stored."""
    reply = await client.store([
        entry({"k": 1}),
        {"key": {"k": 2}, "content": 1, "tier": "cosmic"},
        entry({"k": 3}, score=1.5),
        entry({}, "empty key"),
        entry({"k": 5}, ttl=-1),
        "not an object",
        {"content": 1, "tier": "episodic"},
        entry({"k": 8}, "ok", "semantic", unknown_field=True),
    ])
    assert reply.stored == [{"k": 1}, {"k": 8}]
    assert [e.split(":")[0] for e in reply.errors] == [
        f"entries[{i}]" for i in (1, 2, 3, 4, 5, 6)]
    assert all(": invalid_message: " in e for e in reply.errors)


async def test_entry_content_size_limit(client: MemoryClient, host: Any) -> None:
    """Content over the per-entry limit is refused for that entry only."""
    host.config.limits.max_entry_bytes = 100
    reply = await client.store([entry({"k": 1}, "x" * 200), entry({"k": 2}, "small")])
    assert reply.stored == [{"k": 2}]
    assert reply.errors[0].startswith("entries[0]: invalid_message: content is")


async def test_memory_full(connect: Callable[..., Any], host: Any) -> None:
    """Past the per-agent quota new entries are memory_full; updates of existing keys still work."""
    host.store.quotas = type(host.store.quotas)(max_entries_per_namespace=100,
                                               max_entries_per_agent=3)
    c: MemoryClient = await connect()
    await c.init("ns", {"agent": "q"})
    reply = await c.store([entry({"k": i}) for i in range(5)])
    assert reply.stored == [{"k": 0}, {"k": 1}, {"k": 2}]
    assert reply.errors == [f"entries[{i}]: memory_full: storage quota reached" for i in (3, 4)]
    with pytest.raises(RemoteError) as err:
        await c.store([entry({"k": 9})])
    assert err.value.code == "memory_full"
    assert (await c.store([entry({"k": 0}, "updated")])).stored == [{"k": 0}]
    assert (await c.retrieve()).total == 3


async def test_working_tier_quota(client: MemoryClient, host: Any) -> None:
    """A session's working tier past its limit answers memory_full for the extra entries."""
    host.config.limits.max_working_entries = 2
    c = client
    await c.init("ns", {"agent": "w"})  # a new session picks up the limit
    reply = await c.store([entry({"k": i}, tier="working") for i in range(3)])
    assert len(reply.stored) == 2 and reply.errors[0].startswith("entries[2]: memory_full")
