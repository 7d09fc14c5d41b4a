"""Change streams against hostile clients: cursors the host never gave out, what a replay
shows after a forget or an expiry, the keys a watch may hold, and the bytes a watcher that
does not read makes the host hold."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from support.hosts import make_config, running_host, stalled_watcher, url_of
from support.pipeline import Recorder
from support.watch import changed, entry, session

from host.app import Host
from host.client import MemoryClient, RemoteError
from host.core.context import ConnectionContext
from host.core.router import Router
from host.net.pipeline import Pipeline
from protocol.codec import new_id, now
from protocol.messages import VERSION, MemoryChangedEvent, Ping

pytestmark = [pytest.mark.all_backends]


async def until_marker(c: MemoryClient, marker: dict[str, Any]) -> list[MemoryChangedEvent]:
    """The client's change events up to and including the one that stores `marker`."""
    got = []
    while True:
        ev = await changed(c)
        got.append(ev)
        if ev.op == "stored" and any(e["key"] == marker for e in ev.entries):
            return got


# -- cursors -------------------------------------------------------------------------------


@pytest.mark.all_transports
async def test_a_cursor_the_host_never_gave_out_is_invalid_message(
    connect: Callable[..., Any],
) -> None:
    """Every `since` that is not a cursor in the host's own form (digits beyond ASCII, a
    leading zero, a working part of 0 or not a number, two dots, signs, spaces) is answered
    `invalid_message` on the field `since`, never `internal_error`; the session goes on and a
    cursor it was given still resumes."""
    c = await session(connect)
    await c.store([entry({"k": 1})])
    w = await c.watch()
    for since in ("²", "١", "1.x", "1.2.3", "00", "01", "1.0", "1.", ".1", "+1", "-0", " 1",
                  "1 ", "1_0", "0x1", "1e3", "１", "9" * 19, "1." + "9" * 19):
        with pytest.raises(RemoteError) as err:
            await c.watch(since=since)
        assert (err.value.code, err.value.detail.get("field")) == ("invalid_message", "since"), \
            since
    await c.ping()
    again = await c.watch(since=w.cursor)
    assert again.cursor == w.cursor


@pytest.mark.all_transports
async def test_a_namespaces_cursors_count_only_its_own_commits(
    connect: Callable[..., Any],
) -> None:
    """Commits in another namespace do not move a namespace's cursors: a fresh namespace's
    first cursor is "0" and each of its own commits moves it by one, whatever others write
    between them."""
    other = await session(connect, "x", ns="other")
    for i in range(5):
        await other.store([entry({"o": i})])
    c = await session(connect, "a1", ns="mine")
    w = await c.watch()
    assert w.cursor == "0"
    cursors = []
    for i in range(3):
        await c.store([entry({"m": i})])
        cursors.append((await changed(c)).cursor)
        await other.store([entry({"o": 10 + i}), entry({"o": 20 + i})])
    assert cursors == ["1", "2", "3"]


# -- a forget forgets ----------------------------------------------------------------------


@pytest.mark.all_transports
async def test_a_replay_after_a_forget_or_an_expiry_shows_none_of_their_content(
    host: Host, connect: Callable[..., Any],
) -> None:
    """An agent that watches from cursor "0" after entries were forgotten or expired replays
    their `forgotten` / `expired` changes but never their content (nor their `stored`
    records); what is still stored replays as stored, and the store's own log holds none of
    the forgotten content either (what `/ui/live.json?after=0` reads)."""
    writer = await session(connect, "w")
    await writer.store([entry({"k": "gone"}, "SECRET-1"), entry({"k": "kept"}, "visible")])
    await writer.store([entry({"k": "gone"}, "SECRET-2")])  # an overwrite: both must go
    await writer.store([entry({"k": "short"}, "SECRET-3", ttl=1)])
    assert await writer.forget(keys=[{"k": "gone"}], tier="semantic") == 1
    t = host.clock() + 5
    assert await host.store.collect_garbage(t) == 1
    await host.memory.watches.collected(t)
    late = await session(connect, "late")
    await late.watch(since="0")
    await writer.store([entry({"k": "marker"})])
    events = await until_marker(late, {"k": "marker"})
    text = json.dumps([ev.entries for ev in events])
    assert "SECRET" not in text
    ops = [(ev.op, sorted(e["key"]["k"] for e in ev.entries)) for ev in events]
    assert ("forgotten", ["gone"]) in ops and ("expired", ["short"]) in ops
    assert ("stored", ["kept"]) in ops and ("stored", ["marker"]) in ops
    logged = await host.store.changes_after("ns", 0, 1000)
    assert all(b"SECRET" not in bytes(c.entries) for c in logged)


async def test_a_watch_from_a_cursor_does_not_replay_forgotten_content_the_host_still_had(
    host: Host, connect: Callable[..., Any],
) -> None:
    """A change a live watcher already received (so the host holds it in memory) and that is
    then forgotten is not shown to a later watch that resumes from before it."""
    writer = await session(connect, "w")
    live = await session(connect, "live")
    start = (await live.watch()).cursor
    await writer.store([entry({"k": "gone"}, "SECRET-LIVE")])
    assert (await changed(live)).entries[0]["content"] == "SECRET-LIVE"  # live: as it happens
    assert await writer.forget(keys=[{"k": "gone"}], tier="semantic") == 1
    assert (await changed(live)).op == "forgotten"
    late = await session(connect, "late")
    await late.watch(since=start)
    await writer.store([entry({"k": "marker"})])
    events = await until_marker(late, {"k": "marker"})
    assert "SECRET" not in json.dumps([ev.entries for ev in events])
    assert [ev.op for ev in events] == ["forgotten", "stored"]


# -- what a watch may hold -----------------------------------------------------------------


@pytest.mark.all_transports
async def test_a_watch_names_at_most_max_keys_per_request_keys_and_tags(
    connect: Callable[..., Any],
) -> None:
    """A watch of more keys (or tags) than `limits.max_keys_per_request` is refused
    `invalid_message` on that field, as a retrieve or forget of that many keys is; at the
    limit it is accepted."""
    c = await session(connect)
    with pytest.raises(RemoteError) as err:
        await c.watch(keys=[{"i": i} for i in range(1001)])
    assert (err.value.code, err.value.detail.get("field")) == ("invalid_message", "keys")
    with pytest.raises(RemoteError) as err:
        await c.watch(tags=[f"t{i}" for i in range(1001)])
    assert (err.value.code, err.value.detail.get("field")) == ("invalid_message", "tags")
    with pytest.raises(RemoteError) as err:
        await c.retrieve(keys=[{"i": i} for i in range(1001)])
    assert err.value.detail.get("field") == "keys"  # the same limit as a retrieve
    w = await c.watch(keys=[{"i": i} for i in range(1000)])
    assert w.watch_id


# -- bytes held for a client that does not read --------------------------------------------


async def test_pushed_events_wait_within_max_unsent_bytes() -> None:
    """With the client's output paused, keyed events queue only while the bytes waiting stay
    within `limits.max_unsent_bytes` (whatever their count limit); an unkeyed notice still
    queues, and once the client reads everything queued is sent in order."""
    config = make_config("unused.db", limits={"max_unsent_bytes": 64 * 1024}).limits
    rec = Recorder()
    p = Pipeline(Router(), ConnectionContext(conn_id="t"), config, rec)
    p.pause_writing()
    event = json.dumps({"type": "ping", "id": "e", "version": "1.0", "pad": "x" * 10_000})
    accepted = 0
    while p.push(event.encode(), key="w", limit=1000):
        accepted += 1
        assert accepted < 1000, "keyed pushes were never refused"
    assert 4 <= accepted <= 7  # 64 KiB of 10 KB events, not 1000 of them
    assert p.push(Ping(id="notice", version=VERSION, ts=now()))  # unkeyed: one frame past
    p.resume_writing()
    assert len(rec.sent) == accepted + 1 and rec.sent[-1]["id"] == "notice"
    assert p.push(Ping(id=new_id(), version=VERSION, ts=now()), key="w", limit=1000)


@pytest.mark.all_transports("websocket")
async def test_a_connection_that_does_not_read_is_held_to_max_unsent_bytes(
    store_db: str, transport: str,
) -> None:
    """A connection with 16 watches that stops reading gets every watch ended `lagging` once
    its waiting events pass `limits.max_unsent_bytes`, long before `watch.max_pending_events`
    of them; a bystander watcher receives every event meanwhile, and when the stalled
    connection goes its watches and what it held go with it."""
    config = make_config(store_db, server={"transport": transport},
                         limits={"max_unsent_bytes": 512 * 1024},
                         watch={"max_pending_events": 1000}, search={"embedder": "none"})
    big = "x" * 60_000
    async with running_host(config) as host:
        url = url_of(host)
        async with await MemoryClient.connect(url) as writer, \
                await MemoryClient.connect(url) as bystander:
            await writer.init("ns", {"agent": "w"})
            await bystander.init("ns", {"agent": "b"})
            await bystander.watch()
            stalled, sock, _ = await stalled_watcher(host, url)
            hub = host.memory.watches
            n = 0
            while hub.ended.get("lagging", 0) < 16:
                assert n < 200, f"after {n} writes of 60 KB only {hub.ended} ended"
                await writer.store([entry({"i": n}, big)])
                assert (await changed(bystander)).entries[0]["key"] == {"i": n}
                n += 1
            assert hub.count == 1  # the bystander's
            await stalled.close()
            sock.close()
            deadline = time.monotonic() + 30
            while len(host.server.connections) > 2:
                assert time.monotonic() < deadline, "the stalled connection stayed"
                await asyncio.sleep(0.05)
            await writer.store([entry({"i": n}, big)])
            assert (await changed(bystander)).entries[0]["key"] == {"i": n}


async def test_an_entry_deleted_by_another_tool_leaves_the_change_log_too(
    store_db: str, host: Host, connect: Callable[..., Any],
) -> None:
    """An entry deleted with plain SQL by another process (not through the host) has its
    content taken out of the change log too: at once on PostgreSQL (the delete trigger), by
    the next pruning of the log on SQLite; the entry stored beside it keeps its record."""
    writer = await session(connect, "w")
    await writer.store([entry({"k": "gone"}, "SECRET-SQL"), entry({"k": "kept"}, "visible")])
    if store_db.startswith("postgresql://"):
        import asyncpg

        conn = await asyncpg.connect(store_db)
        try:
            assert await conn.execute("DELETE FROM a2e_entries WHERE key = $1",
                                      '{"k":"gone"}') == "DELETE 1"
        finally:
            await conn.close()
    else:
        import sqlite3

        other = sqlite3.connect(store_db)
        with other:
            assert other.execute("DELETE FROM entries WHERE key = ?",
                                 ('{"k":"gone"}',)).rowcount == 1
        other.close()
    await host.memory.watches.collected(host.clock())
    logged = b"".join(bytes(c.entries) for c in await host.store.changes_after("ns", 0, 100))
    assert b"SECRET-SQL" not in logged and b"visible" in logged


async def test_an_entry_deleted_by_another_tool_leaves_the_log_at_the_next_write(
    store_db: str, host: Host, connect: Callable[..., Any],
) -> None:
    """After a plain-SQL delete by another process, the host's next logged write (a store)
    takes the deleted entry's content out of the change log, so a replay from "0" after it
    shows none of it; no collection is needed."""
    writer = await session(connect, "w")
    await writer.store([entry({"k": "gone"}, "SECRET-TOOL")])
    if store_db.startswith("postgresql://"):
        import asyncpg

        conn = await asyncpg.connect(store_db)
        try:
            await conn.execute("DELETE FROM a2e_entries WHERE key = $1", '{"k":"gone"}')
        finally:
            await conn.close()
    else:
        import sqlite3

        other = sqlite3.connect(store_db)
        with other:
            assert other.execute("DELETE FROM entries WHERE key = ?",
                                 ('{"k":"gone"}',)).rowcount == 1
        other.close()
    await writer.store([entry({"k": "marker"})])
    logged = b"".join(bytes(c.entries) for c in await host.store.changes_after("ns", 0, 100))
    assert b"SECRET-TOOL" not in logged and b"marker" in logged
    late = await session(connect, "late")
    await late.watch(since="0")
    events = await until_marker(late, {"k": "marker"})
    assert "SECRET" not in json.dumps([ev.entries for ev in events])


async def test_a_page_of_the_change_log_is_bounded_in_bytes(
    host: Host, connect: Callable[..., Any],
) -> None:
    """`changes_after` with `max_bytes` stops after the change that takes the page to that
    many bytes (a replay holds one page), and the next page goes on from there."""
    writer = await session(connect, "w")
    for i in range(5):
        await writer.store([entry({"i": i}, "x" * 50_000)])
    first = await host.store.changes_after("ns", 0, 256, 120_000)
    assert [c.seq for c in first] == [1, 2, 3]
    rest = await host.store.changes_after("ns", first[-1].seq, 256, 120_000)
    assert [c.seq for c in rest] == [4, 5]
    assert len(await host.store.changes_after("ns", 0, 256)) == 5


@pytest.mark.all_transports("websocket")
async def test_the_watches_of_a_stalled_connection_hold_one_copy_of_a_change(
    store_db: str, transport: str,
) -> None:
    """Sixteen watches of one connection that does not read, waiting for the same changes,
    share one encoding of each change's entries instead of holding sixteen copies."""
    config = make_config(store_db, server={"transport": transport},
                         search={"embedder": "none"})
    async with running_host(config) as host:
        url = url_of(host)
        async with await MemoryClient.connect(url) as writer, \
                await MemoryClient.connect(url) as bystander:
            await writer.init("ns", {"agent": "w"})
            await bystander.init("ns", {"agent": "b"})
            await bystander.watch()
            stalled, sock, _ = await stalled_watcher(host, url)
            (conn_id,) = [k for k, ws in host.memory.watches._by_conn.items() if len(ws) == 16]
            (conn,) = [c for c in host.server.connections if c.ctx.conn_id == conn_id]
            pipe = conn.pipeline
            n = 0
            while len(pipe._replies) < 64:  # events wait in the request core, not the socket
                assert n < 200, "nothing waited"
                await writer.store([entry({"i": n}, "y" * 20_000)])
                await changed(bystander)
                n += 1
            waiting = [item.data for item in pipe._replies]
            assert all(hasattr(p, "parts") for p in waiting), "each event a copy of its own"
            bodies = {id(p.parts[1]) for p in waiting}
            assert len(bodies) <= len(waiting) // 16 + 2  # one a change, not one a watch
            await stalled.close()
            sock.close()



def test_the_attack_script_finds_every_attack_held(capsys: pytest.CaptureFixture[str]) -> None:
    """`scripts/fuzz/attack_streams.py` on a small run reports every attack held (exit 0) and prints
    a figure for each."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "scripts" / "fuzz" / "attack_streams.py"
    spec = importlib.util.spec_from_file_location("attack_streams", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    code = module.run_all(["--mib", "2", "--watches", "4", "--settle", "0", "--json"])
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [r["held"] for r in report["results"]] == [True] * 6, report
    assert code == 0


def test_the_changes_a_feed_keeps_in_memory_are_bounded_in_bytes() -> None:
    """A namespace's feed keeps its newest changes in memory within `RING_BYTES` (then half of
    them go, the older ones, which a watch behind them replays from the log), however few
    changes that is."""
    from host.memory.feed import RING_BYTES, Feed
    from host.store.changes import encode_records, stored_record
    from host.store.records import Change

    feed = Feed("ns", 0)
    big = b'"' + b"x" * 1_000_000 + b'"'
    for seq in range(1, 21):  # 20 MB of changes, far fewer than the 512 it keeps by count
        feed.add([Change(seq, "stored", encode_records([stored_record(
            "semantic", "", b'{"k":1}', big, [], "", 0.5, 0, 1.0, 1.0)]))])
        assert feed.bytes <= RING_BYTES + len(big) + 1000
    assert feed.last == 20 and feed.complete_after > 0
    assert [r.seq for r in feed.after(feed.complete_after)] == list(
        range(feed.complete_after + 1, 21))


async def test_the_change_log_links_an_entry_to_the_one_change_that_last_stored_it(
    store_db: str, host: Host, connect: Callable[..., Any],
) -> None:
    """Storing the same keys many times leaves one link an entry (the work a forget does does
    not grow with the entry's history): each store supersedes the earlier copies, a replay
    from "0" shows each key's newest value only, and a forget then leaves no content."""
    writer = await session(connect, "w")
    keys = [{"k": n} for n in range(5)]
    for round_ in range(30):
        await writer.store([entry(k, f"V{round_:02d}") for k in keys])
    await writer.store([entry({"k": "kept"}, "visible")])
    if store_db.startswith("postgresql://"):
        import asyncpg

        conn = await asyncpg.connect(store_db)
        try:
            links = await conn.fetchval("SELECT count(*) FROM a2e_change_keys")
        finally:
            await conn.close()
    else:
        import sqlite3

        other = sqlite3.connect(store_db)
        (links,) = other.execute("SELECT count(*) FROM change_keys").fetchone()
        other.close()
    assert links == len(keys) + 1
    logged = b"".join(bytes(c.entries) for c in await host.store.changes_after("ns", 0, 1000))
    assert b"V29" in logged and b"V28" not in logged and b"V00" not in logged
    assert await writer.forget(keys=keys, tier="semantic") == len(keys)
    logged = b"".join(bytes(c.entries) for c in await host.store.changes_after("ns", 0, 1000))
    assert b"V29" not in logged and b"visible" in logged


async def test_a_key_stored_again_over_a_large_batch_is_forgotten_from_both_stores(
    host: Host, connect: Callable[..., Any],
) -> None:
    """A key of a large batch (over 64 KiB of changes) stored again on its own, then forgotten,
    leaves neither value in the log, while the batch's other entries keep theirs."""
    writer = await session(connect, "w")
    pad = "p" * 2000
    await writer.store([entry({"k": "one"}, "SECRET-FIRST")]
                       + [entry({"k": n}, f"keep-{n}-{pad}") for n in range(60)])
    await writer.store([entry({"k": "one"}, "SECRET-AGAIN")])
    assert await writer.forget(keys=[{"k": "one"}], tier="semantic") == 1
    logged = b"".join(bytes(c.entries) for c in await host.store.changes_after("ns", 0, 1000))
    assert b"SECRET" not in logged and b"keep-59-" in logged
