"""The isolation matrix of `test_isolation` applied to change streams: a watch receives the
changes of exactly the cells a retrieve of its session may read (working: its own session;
episodic: its agent in its namespace; semantic: its namespace), stores and forgets alike, with
authentication on (identity and rights from tokens) and off."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from authkit import connect, issue, running, write_config
from support.isolation import LAYOUT, TIERS, Session, key, visible

from host.client import MemoryClient, RemoteError
from protocol.messages import MemoryChangedEvent, MemoryWatchEndedEvent

pytestmark = [pytest.mark.all_backends, pytest.mark.all_transports("websocket")]


@pytest.fixture(params=["tokens", "open"])
async def watchers(
    request: pytest.FixtureRequest, store_db: str, transport: str
) -> AsyncIterator[tuple[list[Session], dict[str, str]]]:
    """The five sessions of the matrix, nothing written yet, each watching every tier it may
    read; with the watch id of each session."""
    tokens = {a: issue(a) for a in ("a1", "a2")}
    specs = [spec for _, spec in tokens.values()] if request.param == "tokens" else []
    async with running(store_db, specs, transport=transport) as host:  # type: ignore[arg-type]
        sessions, ids = [], {}
        for name, agent, ns in LAYOUT:
            c = await connect(host, tokens[agent][0] if specs else "")
            s = Session(name, agent, ns, c)
            s.memory_id = await c.init(ns, {"agent": agent})
            ids[name] = (await c.watch()).watch_id
            sessions.append(s)
        yield sessions, ids
        for s in sessions:
            await s.client.close()


async def events_until(c: MemoryClient, sentinel: dict[str, Any]) -> list[MemoryChangedEvent]:
    """The client's change events up to the one holding `sentinel` (excluded)."""
    out = []
    while True:
        ev = await c.next_event(timeout=60)  # a bound, not a speed: it failed once at load 13
        assert isinstance(ev, MemoryChangedEvent), ev
        if any(e["key"] == sentinel for e in ev.entries):
            return out
        out.append(ev)


async def write_sentinels(world: list[Session], name: str) -> None:
    """One semantic write a namespace, after everything else: every watch of it sees it."""
    for ns in sorted({s.ns for s in world}):
        writer = next(s for s in world if s.ns == ns)
        await writer.client.store([{"key": {"sentinel": name}, "content": 0, "tier": "semantic"}])


def cells(events: list[MemoryChangedEvent], op: str) -> set[tuple[str, str]]:
    """(writer, tier) of every entry of the events; each event is `op`, one request's
    entries, and a stored content belongs to its key."""
    out = set()
    for ev in events:
        assert ev.op == op
        assert len({e["key"]["by"] for e in ev.entries}) == 1  # one request, one writer
        for e in ev.entries:
            assert e["tier"] == e["key"]["tier"]
            if op == "stored":
                assert e["content"] == f"zebra {e['key']['by']} {e['key']['tier']}"
            out.add((e["key"]["by"], e["key"]["tier"]))
    return out


async def test_every_watch_sees_exactly_the_visible_changes(
    watchers: tuple[list[Session], dict[str, str]],
) -> None:
    """Each session stores one entry a tier, then forgets them all: each watch receives the
    stored and the forgotten entries of exactly the cells its session may read, never
    another agent's episodic or working entries, never another namespace's."""
    world, ids = watchers
    for s in world:
        reply = await s.client.store([
            {"key": key(s, t), "content": f"zebra {s.name} {t}", "tier": t,
             "tags": ["shared", f"by-{s.name}"]} for t in TIERS])
        assert reply.errors == []
    await write_sentinels(world, "stored")
    for s in world:
        await s.client.forget(tags=[f"by-{s.name}"], tier="")
    await write_sentinels(world, "forgotten")
    for o in world:
        want = {(w.name, t) for w in world for t in TIERS if visible(o, w, t)}
        # working-tier events go out at once, durable ones after a read of the log: the two
        # interleave, so all are read up to the last sentinel, then sorted by op
        events = [ev for ev in await events_until(o.client, {"sentinel": "forgotten"})
                  if all("sentinel" not in e["key"] for e in ev.entries)]
        stored = [ev for ev in events if ev.op == "stored"]
        forgotten = [ev for ev in events if ev.op == "forgotten"]
        assert len(stored) + len(forgotten) == len(events), o.name
        assert cells(stored, "stored") == want, o.name
        # one event a visible writer's request; the own request's working entry, which is
        # not in the durable log, comes as an event of its own
        assert len(stored) == len({w for w, _ in want}) + 1, o.name
        assert cells(forgotten, "forgotten") == want, o.name
        assert {ev.watch_id for ev in events} == {ids[o.name]}


async def test_a_watch_needs_the_rights_a_retrieve_needs(tmp_path: Path, transport: str) -> None:
    """A token without `read_semantic` watches its own tiers but no semantic change, and a
    watch of the semantic tier is unauthorized; a token for another namespace cannot open a
    session to watch there."""
    reader, r_spec = issue("r1", ["n1"], rights=["forget"])
    writer, w_spec = issue("w1", ["n1"])
    async with running(tmp_path / "a2e.db", [r_spec, w_spec], transport=transport) as host:
        r = await connect(host, reader)
        w = await connect(host, writer)
        try:
            await r.init("n1")
            await w.init("n1")
            with pytest.raises(RemoteError) as err:
                await r.watch(tier="semantic")
            assert err.value.code == "unauthorized"
            watch = await r.watch()
            await w.store([{"key": {"s": 1}, "content": 1, "tier": "semantic"}])
            await r.store([{"key": {"e": 1}, "content": 1, "tier": "episodic"},
                           {"key": {"s": 2}, "content": 1, "tier": "semantic"}])
            ev = await r.next_event()
            assert isinstance(ev, MemoryChangedEvent) and ev.watch_id == watch.watch_id
            assert [e["key"] for e in ev.entries] == [{"e": 1}]  # its semantic store refused
            assert r.events.empty()
            with pytest.raises(RemoteError) as err:
                await r.init("n2")
            assert err.value.code == "unauthorized"
        finally:
            await r.close()
            await w.close()


async def test_a_revoked_token_ends_its_watch(tmp_path: Path, transport: str) -> None:
    """Once a reload drops the watcher's token, the next change ends its watch with reason
    `unauthorized` instead of delivering the change; another token's watch goes on."""
    t1, s1 = issue("a1")
    t2, s2 = issue("a2")
    db = tmp_path / "a2e.db"
    cfg = write_config(tmp_path / "host.toml", db, [s1, s2])
    async with running(db, transport=transport, config_path=cfg) as host:
        c1, c2 = await connect(host, t1), await connect(host, t2)
        try:
            await c1.init("ns")
            await c2.init("ns")
            w1 = await c1.watch()
            w2 = await c2.watch()
            write_config(cfg, db, [s2])
            assert host.auth.reload() == 1
            await c2.store([{"key": {"k": 1}, "content": 1, "tier": "semantic"}])
            ended = await c1.next_event()
            assert isinstance(ended, MemoryWatchEndedEvent)
            assert (ended.watch_id, ended.reason) == (w1.watch_id, "unauthorized")
            assert ended.cursor == w1.cursor  # nothing was delivered
            got = await c2.next_event()
            assert isinstance(got, MemoryChangedEvent) and got.watch_id == w2.watch_id
        finally:
            await c1.close()
            await c2.close()
