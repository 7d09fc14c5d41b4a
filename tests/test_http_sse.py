"""HTTP + SSE on the host's port, as the A2E SDK's `HTTPTransport` speaks it, over real
sockets: the session call, sends, the event stream and its resumption, expiry, the same
authentication and limits as WebSocket; and the general HTTP path routes use."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from authkit import issue, running

from host.app import Host
from host.client import MemoryClient
from host.net.clients import HttpChannel, HttpStatusError
from host.net.http import HttpReply, HttpRequest, HttpStream


async def http(host: Host, method: str, path: str, body: bytes = b"",
               headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    """One request on a fresh connection, as any HTTP client sends it."""
    ch = HttpChannel(f"http://127.0.0.1:{host.port}")
    try:
        return await ch.request(method, path, body, headers, session=False)
    finally:
        if ch._conn is not None:
            ch._conn[1].close()


def msg(kind: str, req_id: str, **fields: Any) -> str:
    return json.dumps({"type": kind, "id": req_id, "version": "1.0", **fields})


async def test_the_sdk_exchange_byte_for_byte(db_path: Path) -> None:
    """POST /session without headers answers {"session_id"}; POST /send with X-Session-Id and
    a text/plain JSON body answers 2xx; GET /stream is text/event-stream whose events carry an
    `id:` line and one `data:` line a reply."""
    async with running(db_path, search={"embedder": "none"}) as host:
        status, headers, body = await http(host, "POST", "/session")
        assert status == 200 and headers["content-type"] == "application/json"
        sid = json.loads(body)["session_id"]
        session = {"X-Session-Id": sid, "Content-Type": "text/plain",
                   "Accept": "text/event-stream"}
        status, _, body = await http(host, "POST", "/send", msg("ping", "p1").encode(), session)
        assert 200 <= status < 300 and json.loads(body) == {"ok": True}
        reader, writer = await asyncio.open_connection("127.0.0.1", host.port)
        writer.write(f"GET /stream HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Session-Id: {sid}\r\n"
                     "Accept: text/event-stream\r\n\r\n".encode())
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        assert head.startswith("HTTP/1.1 200") and "text/event-stream" in head
        text = b""
        while b"data:" not in text or not text.endswith(b"\n\n\r\n"):
            text += await reader.read(4096)
        event = [part for part in text.split(b"\r\n") if b"data:" in part][0].decode()
        lines = [x for x in event.split("\n") if x]
        assert lines[0] == "id: 1" and lines[1].startswith("data: ")
        assert json.loads(lines[1][len("data: "):])["req_id"] == "p1"
        writer.close()


async def test_ndjson_of_several_messages_in_one_send(db_path: Path) -> None:
    """One POST /send with several JSON lines is several requests, answered in order."""
    async with running(db_path, search={"embedder": "none"}) as host:
        c = await MemoryClient.connect_http(f"http://127.0.0.1:{host.port}")
        ch = c.channel
        assert isinstance(ch, HttpChannel)
        c._reader.cancel()
        await ch.send("\n".join(msg("ping", f"p{i}") for i in range(5)) + "\n")
        it = ch.__aiter__()
        got = [json.loads(await it.__anext__())["req_id"] for _ in range(5)]
        assert got == [f"p{i}" for i in range(5)]
        await ch.close()


async def test_a_dropped_stream_resumed_with_last_event_id_loses_no_reply(db_path: Path) -> None:
    """Replies made while the stream is down are kept; a stream that comes back with
    Last-Event-ID gets every reply after it, once, in order."""
    async with running(db_path, search={"embedder": "none"}) as host:
        c = await MemoryClient.connect_http(f"http://127.0.0.1:{host.port}")
        ch = c.channel
        assert isinstance(ch, HttpChannel)
        await c.init("ns", {"agent": "a"})
        await asyncio.gather(*(c.ping() for _ in range(3)))
        await ch.drop_stream()  # as a network failure: the host is not told
        c._reader.cancel()
        for i in range(10):  # answered while no stream is open
            await ch.send(msg("memory/store/req", f"s{i}", memory_id=c.memory_id, entries=[
                {"key": {"i": i}, "content": i, "tier": "episodic"}]))
        await ch.open_stream(last_event_id=True)
        it = ch.__aiter__()
        got = [json.loads(await it.__anext__())["req_id"] for _ in range(10)]
        assert got == [f"s{i}" for i in range(10)]
        await ch.drop_stream()
        await ch.send(msg("ping", "last"))
        assert ch.last_id == "14"  # init, three pings, ten stores
        ch.last_id = "4"  # a client that saw only up to event 4: everything after comes again
        await ch.open_stream(last_event_id=True)
        again = [json.loads(await it.__anext__())["req_id"] for _ in range(11)]
        assert again == [f"s{i}" for i in range(10)] + ["last"]
        await ch.close()


async def test_an_idle_session_expires_and_its_working_tier_is_gone(db_path: Path) -> None:
    """A session with no stream and no send for server.session_idle_timeout ends: its working
    entries are gone and its id is unknown (404)."""
    async with running(db_path, search={"embedder": "none"},
                       server={"session_idle_timeout": 0.3}) as host:
        c = await MemoryClient.connect_http(f"http://127.0.0.1:{host.port}")
        ch = c.channel
        assert isinstance(ch, HttpChannel)
        await c.init("ns", {"agent": "a"})
        await c.store([{"key": {"w": 1}, "content": "scratch", "tier": "working"}])
        (session,) = host.server.sessions.open.values()
        assert session.ctx.capabilities
        await ch.drop_stream()
        async with asyncio.timeout(30):
            while host.server.sessions.open:
                await asyncio.sleep(0.05)
        assert session.ctx.capabilities == {} and session not in host.server.connections
        with pytest.raises(HttpStatusError) as err:
            await ch.send(msg("ping", "late"))
        assert err.value.status == 404
        await ch.close()


async def test_replies_nobody_reads_are_bounded_then_the_session_ends(db_path: Path) -> None:
    """With no stream open, replies wait in the session's buffer up to limits.max_unsent_bytes;
    the reply that passes it ends the session (its id is then 404), so a client that never opens its stream
    cannot grow the host's memory. Another session is untouched."""
    limit = 64 * 1024
    async with running(db_path, search={"embedder": "none"},
                       limits={"max_unsent_bytes": limit}) as host:
        other = await MemoryClient.connect_http(f"http://127.0.0.1:{host.port}")
        await other.init("ns", {"agent": "b"})
        c = await MemoryClient.connect_http(f"http://127.0.0.1:{host.port}")
        ch = c.channel
        assert isinstance(ch, HttpChannel)
        await c.init("ns", {"agent": "a"})
        await c.store([{"key": {"big": 1}, "content": "x" * 8000, "tier": "episodic"}])
        (session,) = [s for s in host.server.sessions.open.values()
                      if s.session_id == ch.session_id]
        await ch.drop_stream()
        c._reader.cancel()
        kept = []
        with pytest.raises(HttpStatusError) as err:
            for i in range(100):  # ~8 KB a reply: the buffer is full after about eight
                await ch.send(msg("memory/retrieve/req", f"r{i}", memory_id=c.memory_id,
                                  keys=[{"big": 1}]))
                kept.append(session.unsent_bytes)
        assert err.value.status == 404
        assert 5 <= len(kept) < 20 and max(kept) <= limit + 9000  # the limit and one reply
        assert ch.session_id not in host.server.sessions.open
        assert (await other.retrieve()).total == 0  # the other session still answers
        await ch.close()
        await other.close()


async def test_a_bad_token_is_401_on_every_endpoint(db_path: Path) -> None:
    """With authentication on, a bad bearer token is refused 401 on POST /session, POST
    /send, GET /stream and DELETE /session; a valid one opens a session that stores."""
    token, spec = issue("a1")
    async with running(db_path, [spec], search={"embedder": "none"}) as host:
        good = await MemoryClient.connect_http(f"http://127.0.0.1:{host.port}",
                                               {"Authorization": f"Bearer {token}"})
        await good.init("ns")
        assert (await good.store([{"key": {"k": 1}, "content": 1, "tier": "episodic"}])).stored
        sid = good.channel.session_id  # type: ignore[attr-defined]
        bad = {"Authorization": "Bearer a2e_wrong", "X-Session-Id": sid}
        for method, path in (("POST", "/session"), ("POST", "/send"), ("GET", "/stream"),
                             ("DELETE", "/session")):
            status, headers, _ = await http(host, method, path, msg("ping", "x").encode(), bad)
            assert status == 401, (method, path)
            assert headers["www-authenticate"].startswith("Bearer")
        await good.close()


async def test_a_body_over_the_frame_limit_is_413(db_path: Path) -> None:
    """A POST /send body over limits.max_frame_bytes is refused 413 before it is read; the
    session goes on."""
    async with running(db_path, limits={"max_frame_bytes": 4096},
                       search={"embedder": "none"}) as host:
        c = await MemoryClient.connect_http(f"http://127.0.0.1:{host.port}")
        with pytest.raises(HttpStatusError) as err:
            await c.channel.send(msg("ping", "big", metadata="x" * 5000))
        assert err.value.status == 413
        assert (await c.ping()).uptime_seconds >= 0
        await c.close()


async def test_a_route_reads_any_method_with_a_body_and_sets_cookies(db_path: Path) -> None:
    """A route added on the host's port gets the method, query, form body and headers, and
    its reply's headers and cookies reach the client; a streaming route's chunks arrive as it
    yields them; a GET-only built-in route answers 405 to a POST."""
    async with running(db_path, search={"embedder": "none"}) as host:
        seen: list[HttpRequest] = []

        def form(request: HttpRequest) -> HttpReply:
            seen.append(request)
            return HttpReply(201, f"hello {request.form().get('name')}", {"X-Test": "1"},
                             ["sid=abc; HttpOnly", "theme=dark"])

        async def ticks(request: HttpRequest) -> HttpStream:
            async def body() -> Any:
                for i in range(3):
                    yield f"tick {i}\n".encode()
            return HttpStream(200, body(), {"Content-Type": "text/plain"})

        host.server.add_route("/ui", form, prefix=True)
        host.server.add_route("/ticks", ticks)
        status, headers, body = await http(
            host, "POST", "/ui/login?next=%2Fui", b"name=ada+l&x=1",
            {"Content-Type": "application/x-www-form-urlencoded"})
        assert status == 201 and body == b"hello ada l" and headers["x-test"] == "1"
        assert seen[0].method == "POST" and seen[0].path == "/ui/login"
        assert seen[0].params() == {"next": "/ui"}
        reader, writer = await asyncio.open_connection("127.0.0.1", host.port)
        writer.write(b"POST /ui HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        assert head.count("Set-Cookie:") == 2 and "sid=abc; HttpOnly" in head
        writer.close()
        reader, writer = await asyncio.open_connection("127.0.0.1", host.port)
        writer.write(b"GET /ticks HTTP/1.1\r\nHost: x\r\n\r\n")
        data = await reader.read()
        assert b"tick 0\n" in data and b"tick 2\n" in data and data.endswith(b"0\r\n\r\n")
        writer.close()
        status, _, _ = await http(host, "POST", "/healthz")
        assert status == 405
        assert (await http(host, "GET", "/nowhere"))[0] == 426
