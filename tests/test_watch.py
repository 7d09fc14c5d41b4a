"""Change streams (`memory/watch`) over real sockets: events after the commit, one a request,
filters, resume by cursor, retention, unwatch, limits and backpressure."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from support.hosts import make_config, running_host, stalled_watcher, url_of
from support.http import get, metric_value
from support.watch import changed, entry, session

from host.app import Host
from host.client import MemoryClient, RemoteError
from protocol.clock import ShiftedClock
from protocol.messages import MemoryWatchEndedEvent

pytestmark = [pytest.mark.all_backends, pytest.mark.all_transports("websocket")]


async def test_a_store_is_one_event_with_the_entries_as_retrieved(
    connect: Callable[..., Any],
) -> None:
    """A store of three entries through another connection is one `stored` event holding the
    three entries exactly as a retrieve returns them, its cursor after the watch's."""
    watcher, writer = await session(connect, "a1"), await session(connect, "a2")
    w = await watcher.watch()
    assert w.watch_id and w.cursor
    await writer.store([entry({"k": i}, {"n": i}, tags=["t"], score=0.5) for i in range(3)])
    ev = await changed(watcher)
    assert ev.watch_id == w.watch_id and ev.op == "stored" and ev.cursor != w.cursor
    got = await writer.retrieve(keys=[{"k": i} for i in range(3)], tier="semantic")
    by_key = {json.dumps(e["key"]): e for e in got.entries}
    assert len(ev.entries) == 3
    for e in ev.entries:
        assert e == by_key[json.dumps(e["key"])]


async def test_forgotten_and_expired_events(host: Host, connect: Callable[..., Any]) -> None:
    """A forget is one `forgotten` event with key and tier; entries collected after their TTL
    are one `expired` event."""
    watcher, writer = await session(connect, "a1"), await session(connect, "a2")
    await watcher.watch()
    await writer.store([entry({"k": 1}, tags=["t"]), entry({"k": 2}, ttl=1),
                        entry({"k": 3}, ttl=1)])
    assert (await changed(watcher)).op == "stored"
    assert await writer.forget(keys=[{"k": 1}], tier="semantic") == 1
    ev = await changed(watcher)
    assert ev.op == "forgotten" and ev.entries == [{"key": {"k": 1}, "tier": "semantic",
                                                    "tags": ["t"]}]
    t = time.time() + 5  # as a collection 5 s from now would see them
    assert await host.store.collect_garbage(t) == 2
    await host.memory.watches.collected(t)
    ev = await changed(watcher)
    assert ev.op == "expired"
    assert sorted(e["key"]["k"] for e in ev.entries) == [2, 3]
    assert all(e["tier"] == "semantic" for e in ev.entries)


async def test_expired_entries_a_store_removes_are_expired_events(store_db: str) -> None:
    """An expired entry that a store replaces, and the expired entries a store collects to fit
    a quota, are `expired` events before that store's `stored` one, on both backends: a
    watcher's copy of the memory never keeps an entry the host deleted."""
    clock = ShiftedClock()
    config = make_config(store_db, limits={"max_entries_per_namespace": 3},
                         search={"embedder": "none"})
    async with running_host(config, clock=clock) as host:
        url = url_of(host)
        async with await MemoryClient.connect(url) as watcher, \
                await MemoryClient.connect(url) as writer:
            await watcher.init("ns", {"agent": "w"})
            await writer.init("ns", {"agent": "a"})
            await watcher.watch()
            await writer.store([entry({"k": 1}, ttl=10), entry({"k": 2}, ttl=10),
                                entry({"k": 3})])
            assert (await changed(watcher)).op == "stored"
            clock.advance(60)  # k1 and k2 expired, not yet collected
            await writer.store([entry({"k": 1}, "again")])  # replaces the expired k1
            ev = await changed(watcher)
            assert (ev.op, [e["key"] for e in ev.entries]) == ("expired", [{"k": 1}])
            ev = await changed(watcher)
            assert (ev.op, [e["key"] for e in ev.entries]) == ("stored", [{"k": 1}])
            await writer.store([entry({"k": 4})])  # over the quota of 3: k2 is collected
            ev = await changed(watcher)
            assert (ev.op, [e["key"] for e in ev.entries]) == ("expired", [{"k": 2}])
            ev = await changed(watcher)
            assert (ev.op, [e["key"] for e in ev.entries]) == ("stored", [{"k": 4}])


async def test_filters_narrow_the_stream(connect: Callable[..., Any]) -> None:
    """`tier`, `tags` (all of them) and `keys` keep only the matching entries; a request with
    none of them sends that watch nothing, while a watch of everything sees it."""
    watcher, writer = await session(connect), await session(connect)
    by_tag = await watcher.watch(tags=["a", "b"])
    by_key = await watcher.watch(keys=[{"k": 2}])
    by_tier = await watcher.watch(tier="episodic")
    everything = await watcher.watch()
    await writer.store([entry({"k": 1}, tags=["a"]), entry({"k": 2}, tags=["a", "b", "c"]),
                        entry({"k": 3}, tier="episodic", tags=["b", "a"])])
    await writer.store([entry({"k": 9})])
    seen: dict[str, list[list[int]]] = {}
    while len(seen.get(everything.watch_id, [])) < 2:
        ev = await changed(watcher)
        seen.setdefault(ev.watch_id, []).append(sorted(e["key"]["k"] for e in ev.entries))
    assert seen[by_tag.watch_id] == [[2, 3]]
    assert seen[by_key.watch_id] == [[2]]
    assert seen[by_tier.watch_id] == [[3]]
    assert seen[everything.watch_id] == [[1, 2, 3], [9]]


async def test_working_tier_events_reach_only_the_own_session(
    connect: Callable[..., Any],
) -> None:
    """Working entries stored and forgotten are events of the writing session's own watches;
    another session of the same agent on the same connection sees none of them."""
    c = await session(connect)
    own = c.memory_id
    other = await c.init("ns", {"agent": "a1"})
    w_own = await c.watch(memory_id=own)
    w_other = await c.watch(memory_id=other)
    await c.store([entry({"w": 1}, "scratch", "working", tags=["tmp"])], memory_id=own)
    ev = await changed(c)
    assert ev.watch_id == w_own.watch_id and ev.op == "stored"
    assert ev.entries[0]["key"] == {"w": 1} and ev.entries[0]["tier"] == "working"
    assert await c.forget(keys=[{"w": 1}], tier="working", memory_id=own) == 1
    ev = await changed(c)
    assert (ev.watch_id, ev.op, ev.entries) == (
        w_own.watch_id, "forgotten", [{"key": {"w": 1}, "tier": "working", "tags": ["tmp"]}])
    await c.store([entry({"s": 1})], memory_id=own)  # both see this one, w_other included
    got = {(await changed(c)).watch_id, (await changed(c)).watch_id}
    assert got == {w_own.watch_id, w_other.watch_id}


async def test_resume_after_disconnect_loses_and_repeats_nothing(
    url: str, connect: Callable[..., Any],
) -> None:
    """A watcher that disconnects and watches again with the last cursor it received gets
    every change committed meanwhile, in order, exactly once, then live changes."""
    writer = await session(connect, "a2")
    first = await MemoryClient.connect(url)
    await first.init("ns", {"agent": "a1"})
    await first.watch()
    for i in range(3):
        await writer.store([entry({"i": i})])
    cursor = ""
    for i in range(3):
        ev = await changed(first)
        assert ev.entries[0]["key"] == {"i": i}
        cursor = ev.cursor
    await first.close()
    for i in range(3, 603):  # more than a page of the log and than the hub keeps in memory
        await writer.store([entry({"i": i})])
    again = await session(connect, "a1")
    w = await again.watch(since=cursor)
    assert w.cursor == cursor
    await writer.store([entry({"i": 603})])
    got = [(await changed(again)).entries[0]["key"]["i"] for _ in range(601)]
    assert got == list(range(3, 604))
    await writer.store([entry({"i": 604})])
    assert (await changed(again)).entries[0]["key"] == {"i": 604}
    assert again.events.empty()


async def test_unwatch_stops_the_events(connect: Callable[..., Any]) -> None:
    """After `memory/unwatch` replies, that watch sends nothing more; another watch of the
    connection goes on (and shows the write was delivered)."""
    watcher, writer = await session(connect), await session(connect)
    gone = await watcher.watch()
    stays = await watcher.watch()
    await watcher.unwatch(gone.watch_id)
    await writer.store([entry({"k": 1})])
    ev = await changed(watcher)
    assert ev.watch_id == stays.watch_id
    assert watcher.events.empty()
    with pytest.raises(RemoteError) as err:
        await watcher.unwatch(gone.watch_id)
    assert err.value.code == "invalid_message"


async def test_bad_watch_requests_are_refused(connect: Callable[..., Any]) -> None:
    """A cursor the host never gave out, one ahead of the log, an unknown memory_id, and one
    watch past `watch.max_watches_per_connection` are refused with their codes."""
    c = await session(connect)
    for since in ("nope", "-1", "99999999999"):
        with pytest.raises(RemoteError) as err:
            await c.watch(since=since)
        assert (err.value.code, err.value.detail.get("field")) == ("invalid_message", "since")
    with pytest.raises(RemoteError) as err:
        await c.watch(memory_id="not-a-session")
    assert err.value.code == "memory_not_found"
    for _ in range(16):
        await c.watch()
    with pytest.raises(RemoteError) as err:
        await c.watch()
    assert err.value.code == "memory_full"


async def test_a_cursor_older_than_retention_is_cursor_expired(store_db: str) -> None:
    """With `watch.retention_rows` = 2, once the log is pruned a cursor of an older change is
    answered `cursor_expired`; the newest cursors still resume."""
    config = make_config(store_db, watch={"retention_rows": 2})
    async with running_host(config) as host:
        async with await MemoryClient.connect(url_of(host)) as c:
            await c.init("ns", {"agent": "a1"})
            await c.watch()
            cursors = []
            for i in range(5):
                await c.store([entry({"i": i})])
                cursors.append((await changed(c)).cursor)
            await host.memory.watches.collected(time.time())
            with pytest.raises(RemoteError) as err:
                await c.watch(since=cursors[1])
            assert err.value.code == "cursor_expired" and not err.value.retryable
            w = await c.watch(since=cursors[2])
            assert w.cursor == cursors[2]
            got = [(await changed(c)) for _ in range(2)]
            assert [ev.entries[0]["key"]["i"] for ev in got] == [3, 4]
            assert {ev.watch_id for ev in got} == {w.watch_id}


async def test_a_watcher_that_does_not_read_is_ended_and_a_bystander_is_not(
    store_db: str, transport: str,
) -> None:
    """A watcher whose client reads nothing is ended past `watch.max_pending_events` with an
    `ended` event carrying the last cursor sent before it, while a bystander watcher receives
    every event; resuming from that cursor delivers the rest exactly once."""

    config = make_config(store_db, server={"transport": transport},
                         watch={"max_pending_events": 4}, search={"embedder": "none"})
    big = "x" * 60_000
    async with running_host(config) as host:
        url = url_of(host)
        writer = await MemoryClient.connect(url)
        bystander = await MemoryClient.connect(url)
        await writer.init("ns", {"agent": "w"})
        await bystander.init("ns", {"agent": "b"})
        await bystander.watch()
        # a client that stops reading: at most one frame buffered, a small receive window
        stalled, _, mid = await stalled_watcher(host, url, watches=1)
        n = 0
        while not host.memory.watches.ended.get("lagging"):
            assert n < 2000, "the stalled watch was never ended"
            await writer.store([entry({"i": n}, big)])
            ev = await changed(bystander)  # progress: the bystander has every event at once
            assert ev.entries[0]["key"] == {"i": n}
            n += 1
        for i in range(n, n + 3):
            await writer.store([entry({"i": i}, big)])
            assert (await changed(bystander)).entries[0]["key"] == {"i": i}
        got, last = [], None
        while True:
            msg = json.loads(await stalled.recv())
            if msg["type"] == "memory/watch/ended/event":
                last = msg
                break
            assert msg["type"] == "memory/changed/event"
            got.append(msg)
        assert last["reason"] == "lagging"
        assert got and last["cursor"] == got[-1]["cursor"]
        await stalled.send(json.dumps({"type": "memory/watch/req", "id": "w2", "version": "1.0",
                                       "memory_id": mid, "since": last["cursor"]}))
        assert json.loads(await stalled.recv())["type"] == "memory/watch/resp"  # then events
        rest = []
        while len(got) + len(rest) < n + 3:
            msg = json.loads(await stalled.recv())
            if msg["type"] == "memory/changed/event":
                rest.append(msg)
        keys = [m["entries"][0]["key"]["i"] for m in got + rest]
        assert keys == list(range(n + 3))
        status, _type, text = await get(host.port, "/metrics")  # what an operator sees
        assert status == 200
        assert metric_value(text, "a2e_watches_open") == 2  # the bystander's, the resumed one
        assert metric_value(text, "a2e_watches_ended_total", reason="lagging") == 1
        assert metric_value(text, "a2e_watch_events_total") >= 2 * (n + 3)  # both watchers had all
        await stalled.close()
        await writer.close()
        await bystander.close()


async def test_stopping_the_host_ends_watches_with_their_cursor(store_db: str) -> None:
    """A host that stops sends each watch an `ended` event (reason `shutdown`) with its last
    cursor, before it closes the connection."""
    async with running_host(make_config(store_db, search={"embedder": "none"})) as host:
        c = await MemoryClient.connect(url_of(host))
        await c.init("ns", {"agent": "a1"})
        w = await c.watch()
        await c.store([entry({"k": 1})])
        last = (await changed(c)).cursor
    ev = await c.next_event()
    assert isinstance(ev, MemoryWatchEndedEvent)
    assert (ev.watch_id, ev.reason, ev.cursor) == (w.watch_id, "shutdown", last)
    await c.close()
