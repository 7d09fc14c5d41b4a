"""The HTTP front of the host's port against hostile clients, over real sockets: malformed
requests get their status and change nothing, keep-alive, HEAD and `100-continue` work, no
client byte reaches a response header, browser pages of other origins and foreign Host names
are refused by default, a flood of sessions without tokens leaves room for an agent with one,
kept SSE events are bounded, and a pretty-printed JSON body to /send is one message."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import socket
from pathlib import Path
from typing import Any

import h11
import pytest
from authkit import issue, running

from host.client import MemoryClient
from host.net.clients import HttpChannel
from host.net.http import HttpReply, HttpRequest, HttpStream
from host.net.transport_http import HttpSession


def _exchange(port: int, data: bytes, until_close: bool = True, source: str = "") -> bytes:
    """Send `data` on a fresh socket; everything the host answers until it closes (or, with
    `until_close` False, the first answer's head and what came with it)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=15,
                                 source_address=(source, 0) if source else None)
    try:
        s.sendall(data)
        out = b""
        while True:
            try:
                chunk = s.recv(65536)
            except (ConnectionResetError, TimeoutError):
                break
            if not chunk:
                break
            out += chunk
            if not until_close and b"\r\n\r\n" in out:
                break
        return out
    finally:
        s.close()


async def raw(port: int, data: bytes, until_close: bool = True) -> bytes:
    """`_exchange` on a thread (the host runs on this loop)."""
    return await asyncio.to_thread(_exchange, port, data, until_close)


def status_of(answer: bytes) -> int:
    """The status code of the first response in `answer`."""
    return int(answer.split(b" ", 2)[1])


def _upgrade(port: int, headers: str) -> bytes:
    key = base64.b64encode(os.urandom(16)).decode()
    return _exchange(port, (
        f"GET / HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n{headers}\r\n").encode(),
        until_close=False)


async def upgrade(port: int, headers: str) -> int:
    """The status of a WebSocket upgrade with extra `headers` (lines ending CR LF)."""
    return status_of(await asyncio.to_thread(_upgrade, port, headers))


def msg(kind: str, req_id: str, **fields: Any) -> str:
    return json.dumps({"type": kind, "id": req_id, "version": "1.0", **fields})


# -- malformed requests --------------------------------------------------------------------------


@pytest.mark.parametrize("request_bytes", [
    b"GET /healthz\r\nHost: 127.0.0.1\r\n\r\n",  # no HTTP version
    b"GET /healthz HTTP/1.1\r\nHost 127.0.0.1\r\n\r\n",  # a header line without a colon
    b"POST /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\nContent-Length: 5\r\n\r\nab",
    b"POST /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: +2\r\n\r\nab",
    b"POST /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1_0\r\n\r\nab",
    b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: a\rSet-Cookie: evil=1\r\n\r\n",
    b"GET /healthz HTTP/1.1\r\nX-A: 1\r\n\r\n",  # HTTP/1.1 without Host
], ids=["request-line", "header-line", "conflicting-length", "plus-length", "underscore-length",
        "bare-cr", "no-host"])
async def test_a_malformed_request_is_400_and_closes(db_path: Path, request_bytes: bytes) -> None:
    """A request the HTTP/1.1 grammar refuses is answered 400 and its connection closed (a
    lenient parser would answer /healthz's 405 or 200)."""
    async with running(db_path, search={"embedder": "none"}) as host:
        answer = await raw(host.port, request_bytes)
        assert status_of(answer) == 400, answer
        assert answer.count(b"HTTP/1.1 ") == 1


async def test_a_post_without_a_length_has_an_empty_body_or_is_411_where_one_is_needed(
        db_path: Path) -> None:
    """A POST with neither Content-Length nor chunked encoding has an empty body (HTTP/1.1):
    `POST /session` (as curl -X POST sends it) opens a session; `POST /send`, which needs a
    body, is 411 and takes nothing."""
    async with running(db_path, search={"embedder": "none"}) as host:
        answer = await raw(host.port, b"POST /session HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                      b"Connection: close\r\n\r\n")
        assert status_of(answer) == 200, answer
        sid = json.loads(answer.split(b"\r\n\r\n", 1)[1])["session_id"]
        assert list(host.server.sessions.open) == [sid]
        answer = await raw(host.port, b"POST /send HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                      b"X-Session-Id: " + sid.encode() + b"\r\n\r\n")
        assert status_of(answer) == 411, answer
        session = host.server.sessions.open[sid]
        assert session.unsent_bytes == 0 and session.pipeline.in_flight == 0


async def test_a_head_over_16_kib_is_431(db_path: Path) -> None:
    """A request head over 16 KiB is answered 431, whether it arrives in one piece or never
    ends."""
    async with running(db_path, search={"embedder": "none"}) as host:
        start = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nX-Big: "
        for size in (16 * 1024 + 1, 20_000):
            big = start + b"a" * (size - len(start) - 4)
            assert status_of(await raw(host.port, big + b"\r\n\r\n")) == 431
            assert status_of(await raw(host.port, big)) == 431
        fits = start + b"a" * (12 * 1024) + b"\r\n\r\n"
        assert status_of(await raw(host.port, fits)) == 200


async def test_a_chunked_body_is_read_and_bounded(db_path: Path) -> None:
    """A chunked request body is one body; one over `limits.max_frame_bytes` is 413."""
    async with running(db_path, search={"embedder": "none"},
                       limits={"max_frame_bytes": 2048}) as host:
        seen: list[bytes] = []

        def echo(request: HttpRequest) -> HttpReply:
            seen.append(request.body)
            return HttpReply(200, request.body)

        host.server.add_route("/echo", echo)
        head = b"POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n"
        answer = await raw(host.port, head + b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n", False)
        assert status_of(answer) == 200 and answer.endswith(b"abcde") and seen == [b"abcde"]
        big = b"".join(b"400\r\n" + b"x" * 1024 + b"\r\n" for _ in range(4)) + b"0\r\n\r\n"
        assert status_of(await raw(host.port, head + big)) == 413
        assert len(seen) == 1


# -- what a good client gets ---------------------------------------------------------------------


async def test_expect_100_continue_is_answered_before_the_body(db_path: Path) -> None:
    """`Expect: 100-continue` gets `100 Continue` before the body is sent, then the answer."""
    async with running(db_path, search={"embedder": "none"}) as host:
        def go() -> bytes:
            s = socket.create_connection(("127.0.0.1", host.port), timeout=15)
            try:
                s.sendall(b"POST /session HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n"
                          b"Expect: 100-continue\r\nConnection: close\r\n\r\n")
                first = s.recv(65536)
                assert first.startswith(b"HTTP/1.1 100 "), first
                s.sendall(b"{}")
                out = b""
                while chunk := s.recv(65536):
                    out += chunk
                return first + out
            finally:
                s.close()

        answer = await asyncio.to_thread(go)
        assert b"HTTP/1.1 200 " in answer and b"session_id" in answer


async def test_two_requests_on_one_kept_alive_connection(db_path: Path) -> None:
    """Two requests on one connection (the second sent before the first is answered) get two
    answers, in order, and the connection stays open."""
    async with running(db_path, search={"embedder": "none"}) as host:
        one = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        two = b"GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        answer = await raw(host.port, one + two)
        assert answer.count(b"HTTP/1.1 200 ") == 2
        assert answer.index(b"ok\n") < answer.index(b"ready\n")


async def test_head_has_the_length_of_get_and_no_body(db_path: Path) -> None:
    """HEAD answers GET's Content-Length without a body; the connection then serves a GET."""
    async with running(db_path, search={"embedder": "none"}) as host:
        answer = await raw(host.port, b"HEAD /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                           b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        first, rest = answer.split(b"\r\n\r\n", 1)
        assert first.startswith(b"HTTP/1.1 200") and b"Content-Length: 3" in first
        assert rest.startswith(b"HTTP/1.1 200") and rest.endswith(b"\r\n\r\nok\n")


async def test_no_header_holds_a_cr_lf(db_path: Path) -> None:
    """A route whose header value holds CR LF is answered 500, the header never written."""
    async with running(db_path, search={"embedder": "none"}) as host:
        host.server.add_route("/bad", lambda r: HttpReply(200, "x", {"X-A": "a\r\nSet-Cookie: e=1"}))
        answer = await raw(host.port, b"GET /bad HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                           b"Connection: close\r\n\r\n")
        assert status_of(answer) == 500 and b"Set-Cookie" not in answer


async def test_a_cr_lf_in_the_browsers_back_address_is_not_a_header(db_path: Path) -> None:
    """The memory browser's `back` parameter with CR LF in it does not end the Location
    header: no injected cookie, no second response on the kept-alive connection."""
    async with running(db_path, search={"embedder": "none"}) as host:
        evil = ("/ui/entries%0D%0ASet-Cookie:%20evil=1%0D%0AContent-Length:%200%0D%0A%0D%0A"
                "HTTP/1.1%20200%20OK%0D%0AX-Smuggled:%201")
        answer = await raw(host.port, (
            f"GET /ui/forget?ns=n&id=424242&back={evil} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            "Connection: close\r\n\r\n").encode())
        assert status_of(answer) == 303, answer
        head = answer.split(b"\r\n\r\n", 1)[0]
        location = [x for x in head.split(b"\r\n") if x.lower().startswith(b"location:")]
        assert location == [b"Location: /ui/entries?ns=n&done=gone"]
        assert b"evil" not in answer and answer.count(b"HTTP/1.1") == 1


# -- browsers of other origins, foreign Host names -----------------------------------------------


@pytest.mark.all_transports("websocket")
async def test_a_foreign_origin_or_host_is_refused_on_websocket(db_path: Path,
                                                                transport: str) -> None:
    """Authentication off, by default: an upgrade with a foreign Origin or a foreign Host name
    (DNS rebinding) is 403; a loopback or IP Host without Origin (an agent) upgrades."""
    async with running(db_path, transport=transport, search={"embedder": "none"}) as host:
        port = host.port
        assert await upgrade(port, f"Host: 127.0.0.1:{port}\r\n") == 101
        assert await upgrade(port, f"Host: localhost:{port}\r\n") == 101
        assert await upgrade(port, f"Host: 127.0.0.1:{port}\r\n"
                                   "Origin: https://evil.example\r\n") == 403
        assert await upgrade(port, f"Host: evil.example:{port}\r\n") == 403
        assert await upgrade(port, f"Host: evil.example:{port}\r\n"
                                   f"Origin: http://evil.example:{port}\r\n") == 403
        assert not host.server.connections or all(
            c.kind == "websocket" for c in host.server.connections)


@pytest.mark.all_transports("websocket")
async def test_a_configured_origin_and_host_are_allowed_on_websocket(db_path: Path,
                                                                    transport: str) -> None:
    """An Origin in `server.allowed_origins` and a name in `server.allowed_hosts` upgrade; an
    Origin not listed is still 403."""
    async with running(db_path, transport=transport, search={"embedder": "none"},
                       server={"allowed_origins": ["https://app.example"],
                               "allowed_hosts": ["memory.example"]}) as host:
        port = host.port
        assert await upgrade(port, f"Host: memory.example:{port}\r\n"
                                   "Origin: https://app.example\r\n") == 101
        assert await upgrade(port, f"Host: memory.example:{port}\r\n"
                                   "Origin: https://evil.example\r\n") == 403
        assert await upgrade(port, f"Host: other.example:{port}\r\n") == 403


async def test_a_foreign_origin_or_host_is_refused_on_http_sse(db_path: Path) -> None:
    """Authentication off, by default: POST /session, /send and /stream with a foreign Origin
    or Host are 403 and open nothing; once configured they pass."""
    async with running(db_path, search={"embedder": "none"}) as host:
        port = host.port
        for extra in ("Origin: https://evil.example\r\n", ""):
            hostname = "127.0.0.1" if extra else "evil.example"
            answer = await raw(port, (f"POST /session HTTP/1.1\r\nHost: {hostname}\r\n{extra}"
                                      "Content-Length: 0\r\nConnection: close\r\n\r\n").encode())
            assert status_of(answer) == 403, answer
        assert not host.server.sessions.open
        c = await MemoryClient.connect_http(f"http://127.0.0.1:{port}")
        ch = c.channel
        assert isinstance(ch, HttpChannel)
        status, _, _ = await ch.request("POST", "/send", msg("ping", "p").encode(),
                                        {"Origin": "https://evil.example"})
        assert status == 403
        status, _, _ = await ch.request("POST", "/send", msg("ping", "p").encode(),
                                        {"Host": "evil.example"})
        assert status == 403
        await c.close()
    async with running(db_path, search={"embedder": "none"},
                       server={"allowed_origins": ["https://app.example"],
                               "allowed_hosts": ["memory.example"]}) as host:
        answer = await raw(host.port, (
            b"POST /session HTTP/1.1\r\nHost: memory.example\r\nOrigin: https://app.example\r\n"
            b"Content-Length: 0\r\nConnection: close\r\n\r\n"))
        assert status_of(answer) == 200 and len(host.server.sessions.open) == 1


# -- sessions: floods, binding, kept events, framing ---------------------------------------------


async def test_a_token_gets_a_session_during_a_flood_without_tokens(db_path: Path) -> None:
    """With tokens on, sessions opened without a token are capped per IP (429 past it); when
    every session slot is taken, POST /session with a valid token still gets one (the oldest
    unbound session makes room) and stores."""
    token, spec = issue("a1")
    async with running(db_path, [spec], search={"embedder": "none"},
                       limits={"max_connections": 40, "max_unbound_sessions_per_ip": 15}) as host:
        port = host.port
        opened = 0
        codes: list[int] = []
        for source in ("127.0.0.2", "127.0.0.3", "127.0.0.4"):
            for _ in range(20):
                answer = await asyncio.to_thread(
                    _exchange, port, b"POST /session HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                    b"Content-Length: 0\r\nConnection: close\r\n\r\n", True, source)
                codes.append(status_of(answer))
                opened += status_of(answer) == 200
        assert opened == 40 and codes.count(429) == 10 and codes.count(503) == 10
        good = await MemoryClient.connect_http(f"http://127.0.0.1:{port}",
                                               {"Authorization": f"Bearer {token}"})
        await good.init("ns")
        assert (await good.store([{"key": {"k": 1}, "content": "v", "tier": "episodic"}]))
        assert len(host.server.sessions.open) == 40
        await good.close()


async def test_a_session_no_token_binds_ends_soon(db_path: Path) -> None:
    """With tokens on, a session opened without a token ends after
    `server.unbound_session_timeout`; one a token binds later (the SDK's way: the token on
    the stream and sends) lives on."""
    token, spec = issue("a1")
    async with running(db_path, [spec], search={"embedder": "none"},
                       server={"unbound_session_timeout": 0.5}) as host:
        port = host.port
        answer = await raw(port, b"POST /session HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                           b"Content-Length: 0\r\nConnection: close\r\n\r\n")
        idle = json.loads(answer.split(b"\r\n\r\n", 1)[1])["session_id"]
        sdk = HttpChannel(f"http://127.0.0.1:{port}", {"Authorization": f"Bearer {token}"})
        status, _, body = await sdk.request("POST", "/session", b"", session=False)
        sdk.session_id = json.loads(body)["session_id"]
        await sdk.open_stream()  # the token comes with the stream: the session is bound
        for _ in range(200):
            if idle not in host.server.sessions.open:
                break
            await asyncio.sleep(0.05)
        assert idle not in host.server.sessions.open
        assert sdk.session_id in host.server.sessions.open
        await sdk.close()


async def test_kept_events_are_bounded_without_last_event_id(db_path: Path) -> None:
    """A stream that never reconnects with Last-Event-ID (the SDK's) keeps at most
    `limits.max_replay_bytes` of sent events, however many went out."""
    replay = 16 * 1024
    async with running(db_path, search={"embedder": "none"},
                       limits={"max_replay_bytes": replay}) as host:
        c = await MemoryClient.connect_http(f"http://127.0.0.1:{host.port}")
        ch = c.channel
        assert isinstance(ch, HttpChannel)
        (session,) = host.server.sessions.open.values()
        assert isinstance(session, HttpSession)
        c._reader.cancel()
        it = ch.__aiter__()
        for batch in range(6):  # 300 replies of over 200 bytes each, all read
            await ch.send("\n".join(msg("ping", f"p{batch}-{i}", metadata="x" * 200)
                                    for i in range(50)))
            for _ in range(50):
                await it.__anext__()
        assert 300 * 200 > 3 * replay
        assert 0 < session.kept_bytes <= replay
        await ch.close()


async def test_a_pretty_printed_json_body_is_one_message(db_path: Path) -> None:
    """A POST /send body that is one JSON value over several lines is one message (one reply,
    no parse_error); a body of JSON lines is still one message a line."""
    async with running(db_path, search={"embedder": "none"}) as host:
        c = await MemoryClient.connect_http(f"http://127.0.0.1:{host.port}")
        ch = c.channel
        assert isinstance(ch, HttpChannel)
        c._reader.cancel()
        pretty = json.dumps(json.loads(msg("ping", "pretty")), indent=2)
        assert pretty.count("\n") > 3
        await ch.send(pretty)
        await ch.send(msg("ping", "a") + "\n" + msg("ping", "b") + "\n")
        it = ch.__aiter__()
        got = [json.loads(await it.__anext__()) for _ in range(3)]
        assert [(g["type"], g.get("req_id")) for g in got] == [
            ("pong", "pretty"), ("pong", "a"), ("pong", "b")]
        await ch.close()


async def test_sessions_from_one_ip_are_capped(db_path: Path) -> None:
    """Authentication off, HTTP + SSE sessions from one IP are at most
    `limits.max_connections_per_ip` (429 past it), however many TCP connections they used;
    another IP still gets one."""
    async with running(db_path, search={"embedder": "none"},
                       limits={"max_connections_per_ip": 5}) as host:
        post = (b"POST /session HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n"
                b"Connection: close\r\n\r\n")
        codes = [status_of(await asyncio.to_thread(_exchange, host.port, post)) for _ in range(8)]
        assert codes == [200] * 5 + [429] * 3
        other = await asyncio.to_thread(_exchange, host.port, post, True, "127.0.0.2")
        assert status_of(other) == 200 and len(host.server.sessions.open) == 6


async def test_an_upgrade_with_a_body_is_400(db_path: Path) -> None:
    """A WebSocket upgrade request that carries a body is 400 (its bytes would be read as
    frames); one with `Content-Length: 0` upgrades."""
    async with running(db_path, search={"embedder": "none"}) as host:
        port = host.port
        assert await upgrade(port, f"Host: 127.0.0.1:{port}\r\nContent-Length: 0\r\n") == 101
        assert await upgrade(port, f"Host: 127.0.0.1:{port}\r\nContent-Length: 4\r\n") == 400


async def test_the_bundled_client_reads_chunked_replies_and_sends_no_cr_lf(db_path: Path) -> None:
    """The bundled client's HTTP reads a chunked reply whole on a kept-alive connection and
    refuses to send a header value with CR LF."""
    async with running(db_path, search={"embedder": "none"}) as host:
        async def parts() -> Any:
            for i in range(3):
                yield f"part {i}\n".encode()

        host.server.add_route("/parts", lambda r: HttpStream(200, parts()))
        ch = HttpChannel(f"http://127.0.0.1:{host.port}")
        status, headers, body = await ch.request("GET", "/parts", session=False)
        assert status == 200 and headers["transfer-encoding"] == "chunked"
        assert body == b"part 0\npart 1\npart 2\n"
        status, _, body = await ch.request("GET", "/healthz", session=False)
        assert (status, body) == (200, b"ok\n")
        with pytest.raises(h11.LocalProtocolError):
            await ch.request("GET", "/healthz", headers={"X-A": "a\r\nX-B: b"}, session=False)
        if ch._conn is not None:
            ch._conn[1].close()


async def test_a_reconnect_gets_the_kept_events_only(db_path: Path) -> None:
    """A reconnect with an old Last-Event-ID gets again the events still kept (the newest,
    within `limits.max_replay_bytes`), in order and without a gap, not every event since."""
    async with running(db_path, search={"embedder": "none"},
                       limits={"max_replay_bytes": 4096}) as host:
        c = await MemoryClient.connect_http(f"http://127.0.0.1:{host.port}")
        ch = c.channel
        assert isinstance(ch, HttpChannel)
        c._reader.cancel()
        it = ch.__aiter__()
        await ch.send("\n".join(msg("ping", f"p{i}", metadata="x" * 200) for i in range(100)))
        for _ in range(100):
            await it.__anext__()
        last = int(ch.last_id or 0)
        assert last >= 100
        await ch.drop_stream()
        reader, writer = await asyncio.open_connection("127.0.0.1", host.port)
        writer.write(f"GET /stream HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Session-Id: {ch.session_id}"
                     "\r\nLast-Event-ID: 5\r\n\r\n".encode())
        text = b""
        while f"id: {last}\n".encode() not in text:
            text += await reader.read(65536)
        lines = text.decode().split("\n")
        ids = [int(line[4:]) for line in lines if line.startswith("id: ")]
        kept = sum(len(line) - 6 for line in lines if line.startswith("data: "))
        assert ids == list(range(ids[0], last + 1))
        assert ids[0] > 6 and kept <= 4096
        writer.close()
        await ch.close()


async def test_a_browser_at_the_root_is_sent_to_the_memory_browser(db_path: Path) -> None:
    """A plain GET / (no upgrade) is redirected to /ui when the memory browser is on, and a
    WebSocket upgrade on / is still served; with the browser off, or on another path, a GET
    is 426 (the path speaks WebSocket)."""
    async with running(db_path) as host:
        answer = await raw(host.port, b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close"
                                      b"\r\n\r\n")
        assert status_of(answer) == 302 and b"\r\nlocation: /ui\r\n" in answer.lower()
        assert status_of(await raw(host.port, b"GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                              b"Connection: close\r\n\r\n")) == 426
        client = await MemoryClient.connect(f"ws://127.0.0.1:{host.port}/")
        assert (await client.ping()).uptime_seconds >= 0
        await client.close()
    async with running(db_path, ui={"enabled": False}) as host:
        assert status_of(await raw(host.port, b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                              b"Connection: close\r\n\r\n")) == 426
