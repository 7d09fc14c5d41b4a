"""The request core without a socket: literal frames in, replies out, as websockets'
`test_protocol.py` drives its sans-I/O protocol (no network, no sleep)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from support.hosts import make_config
from support.pipeline import Recorder

from host.app import Host
from host.core.context import ConnectionContext
from host.core.router import Router
from host.net.pipeline import TURN_BUDGET, Pipeline
from protocol.codec import new_id, now
from protocol.messages import VERSION, Ping, Pong


def ping(req_id: str, pad: int = 0) -> str:
    extra = f',"metadata":"{"x" * pad}"' if pad else ""
    return f'{{"type":"ping","id":"{req_id}","version":"1.0"{extra}}}'


def req(kind: str, req_id: str, **fields: Any) -> str:
    return json.dumps({"type": f"memory/{kind}/req", "id": req_id, "version": "1.0", **fields})


@pytest.fixture
async def host(db_path: Path) -> AsyncIterator[Host]:
    """A host's engine (router, memory plugin, SQLite store) with no server started."""
    h = Host(make_config(db_path, search={"embedder": "none"}))
    await h.store.open()
    try:
        yield h
    finally:
        await h.store.close()


def pipe(host: Host, **limits: Any) -> tuple[Pipeline, Recorder]:
    config = host.config.limits.model_copy(update=limits)
    rec = Recorder()
    return Pipeline(host.router, ConnectionContext(conn_id="t"), config, rec,
                    step=host.store.reads_on_loop), rec


async def settle(p: Pipeline, rec: Recorder, n: int) -> None:
    """Wait (on events, not time) until `n` messages were sent."""
    while len(rec.sent) < n:
        await asyncio.sleep(0)


async def test_a_reply_that_needs_no_wait_is_sent_in_the_receive_call(host: Host) -> None:
    """A ping's pong is encoded and handed to the adapter before `receive` returns."""
    p, rec = pipe(host)
    p.receive(ping("p1"))
    assert rec.ids() == ["p1"] and rec.sent[0]["type"] == "pong"
    assert not p.owes and p.in_flight == 0


async def test_replies_keep_request_order_behind_a_pending_write(host: Host) -> None:
    """A ping after a store waits for the store's commit; replies go out in request order."""
    p, rec = pipe(host)
    p.receive(req("init", "i", namespace="ns"))
    mid = rec.sent[0]["memory_id"]
    p.receive(req("store", "s", memory_id=mid,
                  entries=[{"key": {"k": 1}, "content": 1, "tier": "episodic"}]))
    p.receive(ping("p"))
    p.receive(req("retrieve", "r", memory_id=mid, keys=[{"k": 1}]))
    assert rec.ids() == ["i"]  # the store's reply waits for its commit, and so the rest
    await settle(p, rec, 4)
    assert rec.ids() == ["i", "s", "p", "r"]
    assert rec.sent[3]["entries"][0]["content"] == 1  # the read saw the write before it


async def test_bad_frames_get_errors_with_their_req_id(host: Host) -> None:
    """Binary, not-JSON and unknown-session frames are answered with errors, in order."""
    p, rec = pipe(host)
    p.receive(b"\x00\x01")
    p.receive("{not json")
    p.receive(req("retrieve", "r", memory_id="nope"))
    await settle(p, rec, 3)  # (a loaded machine may leave some to the next loop turn)
    assert [m["code"] for m in rec.sent] == ["parse_error", "parse_error", "memory_not_found"]
    assert rec.sent[2]["req_id"] == "r"


async def test_paused_writing_holds_replies_and_stops_reading(host: Host) -> None:
    """While the adapter cannot write, replies wait in order and, past max_pipelined, the
    adapter is told to stop reading; resumed, everything goes out and reading resumes."""
    p, rec = pipe(host, max_pipelined=2)
    p.pause_writing()
    assert rec.reading == [False]  # nothing may be taken up while nothing can be sent
    for i in range(3):
        p.receive(ping(f"p{i}"))
    assert rec.sent == [] and p.owes
    p.resume_writing()
    await settle(p, rec, 3)
    assert rec.ids() == ["p0", "p1", "p2"] and rec.reading == [False, True]


def held_router(held: asyncio.Future[Pong]) -> Router:
    """Ping answered at once, except id "w": its reply is `held` (as a write's waits for
    its commit)."""
    router = Router()

    async def handler(msg: Ping, ctx: ConnectionContext) -> Any:
        if msg.id == "w":
            return held
        return Pong(id=new_id(), version=VERSION, ts=now(), req_id=msg.id, uptime_seconds=0.0)

    router.register(Ping, handler)
    return router


def pong(req_id: str) -> Pong:
    return Pong(id=new_id(), version=VERSION, ts=now(), req_id=req_id, uptime_seconds=0.0)


async def test_request_bytes_in_flight_bound_what_is_taken_up(db_path: Path) -> None:
    """Past max_request_bytes_in_flight of unanswered requests, a further frame waits (and
    reading stops) until replies go out; one frame is always taken up."""
    held: asyncio.Future[Pong] = asyncio.get_running_loop().create_future()
    limits = make_config(db_path).limits.model_copy(update={"max_request_bytes_in_flight": 2048})
    rec = Recorder()
    p = Pipeline(held_router(held), ConnectionContext(conn_id="t"), limits, rec, step=True)
    p.receive(ping("w", pad=1500))  # taken up alone, whatever its size; its reply waits
    p.receive(ping("b", pad=1500))  # 1.6 KB more would be over 2 KiB in flight: it waits
    assert p.in_flight == 1 and p.request_bytes > 2048 and rec.reading == [False]
    held.set_result(pong("w"))
    await settle(p, rec, 2)
    assert rec.ids() == ["w", "b"] and rec.reading == [False, True]
    assert p.request_bytes == 0


async def test_a_pushed_event_goes_after_the_replies_owed_before_it(db_path: Path) -> None:
    """push() queues an event behind the replies already owed; a key's limit refuses more
    events while that many wait unsent; a closed pipeline refuses every push."""
    held: asyncio.Future[Pong] = asyncio.get_running_loop().create_future()
    rec = Recorder()
    p = Pipeline(held_router(held), ConnectionContext(conn_id="t"), make_config(db_path).limits, rec,
                 step=True)
    p.receive(ping("w"))
    p.receive(ping("p1"))  # its reply waits behind w's
    while p.request_bytes > p._taken_bytes:  # p1 taken up (not left to the next turn)
        await asyncio.sleep(0)
    event = Pong(id=new_id(), version=VERSION, ts=now(), req_id="", uptime_seconds=1.0)
    assert p.ctx.push(event, key="k", limit=2)
    assert p.push(event, key="k", limit=2)
    assert not p.push(event, key="k", limit=2)  # two wait unsent under "k"
    assert p.push(event, key="other", limit=2)
    p.receive(ping("p2"))
    assert rec.sent == []
    held.set_result(pong("w"))
    await settle(p, rec, 6)
    assert [m.get("req_id") or "event" for m in rec.sent] == ["w", "p1", "event", "event",
                                                             "event", "p2"]
    assert p.push(event, key="k", limit=2)  # sent at once: nothing waits now
    p.close()
    assert not p.push(event)


@pytest.mark.parametrize("step", [True, False])
async def test_what_after_reply_pushes_goes_after_the_reply(db_path: Path, step: bool) -> None:
    """A callback a handler gives `ctx.after_reply` runs once its reply is queued, so an event
    it pushes follows the reply, whether the handler was stepped at once, waited or ran in a
    task."""
    router = Router()

    async def handler(msg: Ping, ctx: ConnectionContext) -> Pong:
        if msg.id == "waits":
            await asyncio.sleep(0)
        assert ctx.push is not None
        event = Pong(id=new_id(), version=VERSION, ts=now(), req_id="", uptime_seconds=1.0)
        ctx.after_reply(lambda: ctx.push(event) and None)
        return pong(msg.id)

    router.register(Ping, handler)
    rec = Recorder()
    p = Pipeline(router, ConnectionContext(conn_id="t"), make_config(db_path).limits, rec,
                 step=step)
    p.receive(ping("at-once"))
    p.receive(ping("waits"))
    await settle(p, rec, 4)
    assert [m.get("req_id") or "event" for m in rec.sent] == ["at-once", "event", "waits",
                                                             "event"]
    p.close()


async def test_a_request_past_its_deadline_is_answered_retryable(db_path: Path) -> None:
    """A handler still waiting at expire() is answered internal_error, reason deadline, and
    the next request is served."""
    release = asyncio.Event()
    router = Router()

    async def slow(msg: Ping, ctx: ConnectionContext) -> Pong:
        if msg.id == "slow":
            await release.wait()
        return Pong(id=new_id(), version=VERSION, ts=now(), req_id=msg.id, uptime_seconds=0.0)

    router.register(Ping, slow)
    limits = make_config(db_path).limits
    rec = Recorder()
    p = Pipeline(router, ConnectionContext(conn_id="t"), limits, rec, step=True)
    p.receive(ping("slow"))
    p.receive(ping("next"))
    assert rec.sent == []
    p.expire(time.perf_counter() + 10.0, 5.0)
    await settle(p, rec, 2)
    assert rec.sent[0]["code"] == "internal_error" and rec.sent[0]["detail"] == {
        "reason": "deadline"} and rec.sent[0]["retryable"]
    assert rec.ids() == ["slow", "next"]


async def test_heavy_frames_yield_the_loop_between_turns(db_path: Path) -> None:
    """Frames received together are taken up for at most TURN_BUDGET a loop turn: the rest
    wait for the next turn, so other connections' callbacks run in between."""
    router = Router()

    async def heavy(msg: Ping, ctx: ConnectionContext) -> Pong:
        end = time.perf_counter() + TURN_BUDGET * 1.5  # a handler that holds the loop
        while time.perf_counter() < end:
            pass
        return Pong(id=new_id(), version=VERSION, ts=now(), req_id=msg.id, uptime_seconds=0.0)

    router.register(Ping, heavy)
    rec = Recorder()
    p = Pipeline(router, ConnectionContext(conn_id="t"), make_config(db_path).limits, rec,
                 step=True)
    for i in range(3):
        p.receive(ping(f"h{i}"))
    assert rec.ids() == ["h0"]  # the turn's budget is spent: h1 and h2 wait
    others: list[int] = []
    asyncio.get_running_loop().call_soon(lambda: others.append(len(rec.sent)))
    await settle(p, rec, 3)
    assert rec.ids() == ["h0", "h1", "h2"]
    assert others == [2]  # a callback scheduled behind the next turn ran before the last frame


async def test_close_drops_what_is_owed_and_the_sessions(host: Host) -> None:
    """After close() nothing more is sent and the context's sessions are gone."""
    p, rec = pipe(host)
    p.receive(req("init", "i", namespace="ns"))
    p.pause_writing()
    p.receive(ping("p"))
    p.close()
    p.resume_writing()
    p.receive(ping("q"))
    await asyncio.sleep(0)
    assert rec.ids() == ["i"] and p.ctx.capabilities == {} and not p.owes
