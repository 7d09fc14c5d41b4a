"""Connection and request limits over real sockets: the per-connection rate, the connection
caps from the accept, the request deadline, the cost bound of a request, fair turns between
connections and the bytes of pipelined requests."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import sqlite3
from pathlib import Path

import pytest
from authkit import connect, running, url_of
from rawws import TEXT, RawWebSocket, frame
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import InvalidStatus

from host.client import RemoteError
from host.net.limits import TokenBucket

pytestmark = pytest.mark.all_transports("websocket")


def test_token_bucket_spends_and_refills() -> None:
    """A bucket lets `burst` through at once, then one per 1/rate seconds."""
    b = TokenBucket(rate=2.0, burst=3)
    t = b.stamp
    assert [b.take(t) for _ in range(4)] == [True, True, True, False]
    assert b.take(t + 0.5) and not b.take(t + 0.5)
    assert [b.take(t + 100) for _ in range(4)] == [True, True, True, False]  # capped at burst


async def test_frames_past_the_rate_are_rate_limited(db_path: Path, transport: str) -> None:
    """Pipelined requests beyond the burst are answered rate_limited (retryable), in order,
    while another connection is served."""
    async with running(db_path, transport=transport, limits={"requests_per_second": 0.001, "request_burst": 3}) as host:
        c = await connect(host)
        replies = await asyncio.gather(*(c.ping() for _ in range(6)), return_exceptions=True)
        assert [type(r).__name__ for r in replies[:3]] == ["Pong"] * 3
        for r in replies[3:]:
            assert isinstance(r, RemoteError) and r.code == "rate_limited" and r.retryable
        other = await connect(host)
        await other.ping()
        for x in (c, other):
            await x.close()


async def test_a_reloaded_rate_applies_to_open_connections(db_path: Path, transport: str) -> None:
    """After `Host.reload` lowers the rate, an already open connection is limited by it."""
    async with running(db_path, transport=transport, limits={"requests_per_second": 0}) as host:
        c = await connect(host)
        await asyncio.gather(*(c.ping() for _ in range(20)))  # unlimited
        new = host.config.model_copy(deep=True)
        new.limits.requests_per_second = 0.001
        new.limits.request_burst = 2
        host.reload(new)
        replies = await asyncio.gather(*(c.ping() for _ in range(4)), return_exceptions=True)
        assert [isinstance(r, RemoteError) and r.code == "rate_limited" for r in replies] == [
            False, False, True, True]
        await c.close()


async def test_connections_past_the_cap_get_503(db_path: Path, transport: str) -> None:
    """Past max_connections an upgrade is refused with HTTP 503; a closed connection frees
    its place."""
    async with running(db_path, transport=transport, limits={"max_connections": 2}) as host:
        first, second = await connect(host), await connect(host)
        with pytest.raises(InvalidStatus) as err:
            await connect(host)
        assert err.value.response.status_code == 503
        await first.close()
        third = None
        for _ in range(200):  # the server sees the close a moment after the client
            try:
                third = await connect(host)
                break
            except InvalidStatus:
                await asyncio.sleep(0.01)
        assert third is not None
        await third.ping()
        for c in (second, third):
            await c.close()


async def test_connections_past_the_per_ip_cap_get_429(db_path: Path, transport: str) -> None:
    """Past max_connections_per_ip from one address an upgrade is refused with HTTP 429."""
    async with running(db_path, transport=transport, limits={"max_connections_per_ip": 1}) as host:
        first = await connect(host)
        with pytest.raises(InvalidStatus) as err:
            await connect(host)
        assert err.value.response.status_code == 429
        await first.ping()
        await first.close()


async def test_a_request_past_the_deadline_is_a_retryable_error(db_path: Path, transport: str) -> None:
    """While another process holds the database's write lock, a store and a read queued behind
    it are answered internal_error, retryable, detail.reason "deadline"; the connection stays
    open, and the store commits once the lock is released (so a retry is an upsert)."""
    async with running(db_path, transport=transport, limits={"request_timeout": 0.2}) as host:
        c = await connect(host)
        await c.init("ns", {"agent": "a1"})
        blocker = sqlite3.connect(db_path, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")  # the host's writer now waits for this lock
        try:
            replies = await asyncio.gather(
                c.store([{"key": {"k": 1}, "content": 1, "tier": "episodic"}]),
                c.retrieve(keys=[{"k": 1}]),  # waits for the connection's own write first
                return_exceptions=True)
            for err in replies:
                assert isinstance(err, RemoteError), err
                assert err.code == "internal_error" and err.retryable
                assert err.detail == {"reason": "deadline"}
            await c.ping()  # a request that needs no wait is still answered
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        for _ in range(200):  # the abandoned write commits once the lock is free
            try:  # a read waits for that write first: on a loaded machine it may pass 0.2 s too
                if (await c.retrieve(keys=[{"k": 1}])).entries:
                    break
            except RemoteError as err:
                assert err.detail == {"reason": "deadline"} and err.retryable
            await asyncio.sleep(0.05)
        assert (await c.retrieve(keys=[{"k": 1}])).total == 1
        await c.close()


@pytest.mark.parametrize("limits", [{"max_pipelined": 4}, {"max_unsent_bytes": 1}])
async def test_a_client_that_does_not_read_gets_backpressure(db_path: Path, transport: str, limits: dict) -> None:
    """A client that pipelines big retrieves without reading its replies makes the host stop
    reading its frames once max_pipelined replies (or max_unsent_bytes) are owed, instead of
    holding every reply in memory; once it reads, every reply comes, in order."""
    n, bound = 40, limits.get("max_pipelined", 1)
    async with running(db_path, transport=transport, limits=limits, search={"embedder": "none"}) as host:
        # the client's own receive queue stays tiny: what it does not read stays in TCP buffers
        async with ws_connect(url_of(host), max_size=None, max_queue=1) as ws:
            await ws.send(json.dumps({"type": "memory/init/req", "version": "1.0",
                                      "namespace": "n"}))
            mid = json.loads(await ws.recv())["memory_id"]
            await ws.send(json.dumps({"type": "memory/store/req", "id": "s", "version": "1.0",
                                      "memory_id": mid, "entries": [
                {"key": {"i": i}, "content": "x" * 2000, "tier": "episodic"} for i in range(500)]}))
            assert json.loads(await ws.recv())["stored"]
            retrieve = {"type": "memory/retrieve/req", "version": "1.0", "memory_id": mid,
                        "limit": 500}  # a reply of about 1 MB
            await ws.send(json.dumps({"type": "memory/store/req", "id": "w", "version": "1.0",
                                      "memory_id": mid, "entries": [
                {"key": {"w": 1}, "content": 1, "tier": "episodic"}]}))  # replies queue behind it
            for j in range(n):
                await ws.send(json.dumps({**retrieve, "id": f"r{j}"}))
            (conn,) = host.server.connections
            most, last, still = 0, -1, 0
            while still < 20:  # until the host stops reading (or has read everything)
                await asyncio.sleep(0.05)
                most = max(most, conn.in_flight)
                still = still + 1 if conn.in_flight == last else 0
                last = conn.in_flight
            assert most <= bound + 1, f"{most} requests owed to a client that does not read"
            ids = [json.loads(await ws.recv())["req_id"] for _ in range(n + 1)]
            assert ids == ["w"] + [f"r{j}" for j in range(n)]


async def test_a_client_that_leaves_while_backpressured_is_let_go(db_path: Path, transport: str) -> None:
    """A client that vanishes while the host is holding off its frames (backpressure) ends its
    connection on the host: nothing waits forever for a reader that is gone."""
    async with running(db_path, transport=transport, limits={"max_pipelined": 2}, search={"embedder": "none"}) as host:
        ws = await ws_connect(url_of(host), max_size=None, max_queue=1)
        await ws.send(json.dumps({"type": "memory/init/req", "version": "1.0", "namespace": "n"}))
        mid = json.loads(await ws.recv())["memory_id"]
        await ws.send(json.dumps({"type": "memory/store/req", "id": "s", "version": "1.0",
                                  "memory_id": mid, "entries": [
            {"key": {"i": i}, "content": "x" * 2000, "tier": "episodic"} for i in range(500)]}))
        await ws.recv()
        await ws.send(json.dumps({"type": "memory/store/req", "id": "w", "version": "1.0",
                                  "memory_id": mid, "entries": [
            {"key": {"w": 1}, "content": 1, "tier": "episodic"}]}))  # replies queue behind it
        for j in range(30):
            await ws.send(json.dumps({"type": "memory/retrieve/req", "id": f"r{j}",
                                      "version": "1.0", "memory_id": mid, "limit": 500}))
        (conn,) = host.server.connections
        async with asyncio.timeout(60):
            while not conn.owes:  # the host owes it replies it cannot send
                await asyncio.sleep(0.01)
        ws.transport.abort()
        async with asyncio.timeout(60):
            while host.server.connections:
                await asyncio.sleep(0.05)
        assert conn.ctx.capabilities == {}


def _retrieve(req_id: str, mid: str, keys: list[dict], limit: int = 10) -> bytes:
    return json.dumps({"type": "memory/retrieve/req", "id": req_id, "version": "1.0",
                       "memory_id": mid, "keys": keys, "limit": limit}).encode()


async def _raw_session(port: int) -> tuple[RawWebSocket, str]:
    ws = await asyncio.to_thread(RawWebSocket, port)
    await asyncio.to_thread(ws.send_raw, frame(TEXT, json.dumps({
        "type": "memory/init/req", "id": "i", "version": "1.0", "namespace": "ns",
        "scope": {"agent": "a"}}).encode()))
    return ws, json.loads((await asyncio.to_thread(ws.recv))[1])["memory_id"]


async def test_a_retrieve_over_the_key_bound_is_invalid_message(db_path: Path, transport: str) -> None:
    """A retrieve or forget naming more keys than limits.max_keys_per_request is answered
    invalid_message on field keys, and the connection goes on."""
    async with running(db_path, transport=transport, search={"embedder": "none"}) as host:
        c = await connect(host)
        await c.init("ns")
        most = host.config.limits.max_keys_per_request
        keys = [{"i": i} for i in range(50_000)]
        for call in (c.retrieve(keys=keys), c.forget(keys=keys)):
            with pytest.raises(RemoteError) as err:
                await call
            assert err.value.code == "invalid_message"
            assert err.value.detail == {"field": "keys"} and str(most) in str(err.value)
        assert (await c.retrieve(keys=keys[:most])).total == 0
        await c.close()


async def test_pipelined_heavy_reads_interleave_with_another_client(
    db_path: Path, transport: str, caplog: pytest.LogCaptureFixture
) -> None:
    """30 retrieves of the most keys a request may name, sent in one write on one connection,
    do not hold off another connection: its ping is answered before the last of them."""
    caplog.set_level(logging.DEBUG, logger="a2e_host.request")
    async with running(db_path, transport=transport, search={"embedder": "none"}) as host:
        most = host.config.limits.max_keys_per_request
        writer = await connect(host)
        await writer.init("ns", {"agent": "a"})
        await writer.store([{"key": {"i": i}, "content": "x" * 40, "tier": "semantic"}
                            for i in range(most)])
        heavy, mid = await _raw_session(host.port)
        keys = [{"i": i} for i in range(most)]
        batch = b"".join(frame(TEXT, _retrieve(f"h{j}", mid, keys, limit=most))
                         for j in range(30))
        other = await connect(host)
        await asyncio.to_thread(heavy.send_raw, batch)
        await other.ping()
        replies = [json.loads((await asyncio.to_thread(heavy.recv))[1]) for _ in range(30)]
        assert [r["req_id"] for r in replies] == [f"h{j}" for j in range(30)]
        assert all(r["total"] == most for r in replies)
        heavy.close()
        for c in (writer, other):
            await c.close()
    order = [(r.conn, r.type) for r in caplog.records if r.name == "a2e_host.request"]
    answered = [t for _, t in order if t in ("ping", "memory/retrieve/req")]
    assert answered.index("ping") < len(answered) - 1, "the ping waited for every heavy read"


async def test_pipelined_requests_are_bounded_by_their_bytes(db_path: Path, transport: str) -> None:
    """A client pipelining big stores without reading its replies gets no more of them taken
    up than limits.max_request_bytes_in_flight allows (one frame always); once it reads,
    every store is answered, in order."""
    bound = 256 * 1024
    async with running(db_path, transport=transport, search={"embedder": "none"},
                       limits={"max_request_bytes_in_flight": bound}) as host:
        ws, mid = await _raw_session(host.port)
        body = json.dumps({"type": "memory/store/req", "id": "s", "version": "1.0",
                           "memory_id": mid, "entries": [
            {"key": {"k": i}, "content": "x" * 60_000, "tier": "episodic"} for i in range(15)]})
        frames = [frame(TEXT, body.replace('"id": "s"', f'"id": "s{j}"').encode())
                  for j in range(40)]
        sender = asyncio.create_task(asyncio.to_thread(ws.send_raw, b"".join(frames)))
        (conn,) = host.server.connections
        most, last, still = 0, -1, 0
        for _ in range(500):  # while the client sends and does not read: until what is taken
            await asyncio.sleep(0.01)  # up has not moved for 20 looks, reading held off
            now = conn.pipeline.request_bytes - conn.pipeline._queued_bytes
            most = max(most, now)
            still = still + 1 if now == last and not conn.pipeline.reading else 0
            last = now
            if still == 20:
                break
        assert most <= bound + len(body) + 100, f"{most} request bytes taken up"
        ids = [json.loads((await asyncio.to_thread(ws.recv))[1])["req_id"] for _ in range(40)]
        await sender
        assert ids == [f"s{j}" for j in range(40)]
        ws.close()


async def test_half_open_upgrades_count_against_the_per_ip_cap(db_path: Path, transport: str) -> None:
    """Connections that never finish their upgrade request count from their accept: past
    max_connections_per_ip the next ones are answered 429 and closed; once they go, an agent
    connects again."""
    cap = 20
    async with running(db_path, transport=transport,
                       limits={"max_connections_per_ip": cap}) as host:
        def half_open() -> socket.socket:
            s = socket.create_connection(("127.0.0.1", host.port), timeout=10)
            s.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n")  # no end
            return s

        socks = [await asyncio.to_thread(half_open) for _ in range(cap)]
        extra = [await asyncio.to_thread(half_open) for _ in range(60)]
        for s in extra:  # each refused at once, before its request is read
            data = await asyncio.to_thread(s.recv, 4096)
            assert data.startswith(b"HTTP/1.1 429"), data
            s.close()
        with pytest.raises(InvalidStatus) as err:
            await connect(host)
        assert err.value.response.status_code == 429
        for s in socks:
            s.close()
        c = None
        for _ in range(200):  # the host sees the closes a moment later
            try:
                c = await connect(host)
                break
            except InvalidStatus:
                await asyncio.sleep(0.01)
        assert c is not None
        await c.ping()
        await c.close()
