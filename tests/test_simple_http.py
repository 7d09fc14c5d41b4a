"""The front's fast path for plain requests reads and writes exactly what h11 does: a request
it takes is one h11 parses to the same method, target, headers and body; a head it writes is
h11's bytes; whatever it leaves is h11's to answer (its errors included); and over a real
socket, plain requests, h11's requests and a stream share one kept-alive connection."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path

import h11
from authkit import running
from hypothesis import given, settings
from hypothesis import strategies as st

from host.net.simple_http import head_bytes, read_simple

HEAD_MAX = 15 * 1024
BODY_MAX = 1000

_TOKEN = st.text("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-!#$%&'*+.^_`|~",
                 min_size=1, max_size=12)
# values mostly plain, sometimes with what h11 reads differently or refuses
_VALUE = st.one_of(
    st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=20),
    st.sampled_from(["a b", " a ", "a\tb", "", "a\x01b", "caf\xe9", "a\rb", "a\nb", " ",
                     "close", "keep-alive", "Keep-Alive", "chunked", "100-continue", "5",
                     "05", "99999999999999999999", "1, 1", "-1"]))
_NAME = st.one_of(_TOKEN, st.sampled_from(["Host", "host", "Content-Length", "content-length",
                                           "Transfer-Encoding", "Expect", "Upgrade",
                                           "Connection", "X Bad", "", "a:b"]))


@st.composite
def requests(draw: st.DrawFn) -> bytes:
    """A request head and body as a client might send them, plain or not."""
    method = draw(st.sampled_from(["GET", "POST", "HEAD", "DELETE", "get", "PO ST", "PUT"]))
    target = draw(st.sampled_from(["/", "/send", "/healthz?x=1", "/a%20b", "*", "/a b", "//x"]))
    version = draw(st.sampled_from(["HTTP/1.1", "HTTP/1.1", "HTTP/1.1", "HTTP/1.0", "HTTP/2"]))
    lines = [f"{method} {target} {version}"]
    if draw(st.booleans()):
        lines.append(f"Host: {draw(st.sampled_from(['127.0.0.1', 'x', '']))}")
    for name, value in draw(st.lists(st.tuples(_NAME, _VALUE), max_size=5)):
        lines.append(f"{name}:{draw(st.sampled_from(['', ' ', '  ', chr(9)]))}{value}")
    if draw(st.booleans()):
        lines.insert(draw(st.integers(1, len(lines))), " folded")
    body = draw(st.binary(max_size=30))
    if draw(st.booleans()):
        lines.append(f"Content-Length: {len(body) + draw(st.sampled_from([0, 0, 0, 1, -1]))}")
    end = draw(st.sampled_from(["\r\n", "\r\n", "\r\n", "\n"]))
    head = end.join(lines) + end + end
    return head.encode("latin-1") + body + draw(st.sampled_from([b"", b"GET / HTTP/1.1\r\n"]))


def _h11_reads(data: bytes) -> tuple[h11.Request, bytes, int] | None:
    """What h11 reads of the first request in `data` (None: it refuses it or needs more)."""
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=HEAD_MAX)
    conn.receive_data(data)
    body = b""
    request = None
    try:
        while True:
            event = conn.next_event()
            if isinstance(event, h11.Request):
                request = event
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                break
            else:
                return None
    except h11.RemoteProtocolError:
        return None
    assert request is not None
    return request, body, len(data) - len(conn.trailing_data[0])


@settings(max_examples=1500, deadline=None)
@given(requests())
def test_a_request_the_fast_path_takes_is_one_h11_reads_the_same(data: bytes) -> None:
    """Whatever request the fast path takes, h11 reads without error to the same method,
    target, headers (raw names, trimmed values), body and length, and keeps the connection."""
    simple = read_simple(data, HEAD_MAX, BODY_MAX)
    if simple is None:
        return
    read = _h11_reads(data)
    assert read is not None, data
    request, body, size = read
    assert request.method.decode() == simple.method
    assert request.target.decode() == simple.target
    assert [(n.decode("latin-1"), v.decode("latin-1")) for n, v in request.headers.raw_items()] \
        == simple.headers
    assert body == simple.body and size == simple.size
    assert request.http_version == b"1.1"
    assert b"close" not in b",".join(v.lower() for n, v in request.headers.raw_items()
                                     if n.lower() == b"connection")


def test_the_fast_path_leaves_to_h11_what_needs_it() -> None:
    """Requests h11 must answer (errors, chunked or partial bodies, 100-continue, upgrades,
    a close, bodies over the bound, HTTP/1.0) are not taken by the fast path."""
    ok = b"POST /send HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\nab"
    assert read_simple(ok, HEAD_MAX, BODY_MAX) is not None
    for data in [
        b"POST /send HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\na",  # body not all here
        b"POST /send HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n0\r\n\r\n",
        b"POST /send HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nab",
        b"GET / HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
        b"GET / HTTP/1.0\r\nHost: h\r\n\r\n",
        b"GET / HTTP/1.1\r\n\r\n",  # no Host
        b"GET / HTTP/1.1\r\nHost: h\r\nHost: h\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 2000\r\n\r\n" + b"x" * 2000,
        b"GET / HTTP/1.1\r\nHost: h\r\nX-A: a\rb\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: h\r\n",  # head not ended
    ]:
        assert read_simple(data, HEAD_MAX, BODY_MAX) is None, data


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([200, 202, 204, 302, 404, 413, 500]),
       st.lists(st.tuples(_TOKEN, st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E),
                                          max_size=20)), max_size=4),
       st.booleans())
def test_a_head_the_fast_path_writes_is_h11s(status: int, extra: list[tuple[str, str]],
                                             host_header: bool) -> None:
    """For a kept-alive HTTP/1.1 request, the fast path writes a reply's head byte for byte
    as h11 does."""
    from http import HTTPStatus
    headers = [("Content-Type", "text/plain"), ("Content-Length", "3"), *extra]
    if host_header:
        headers.append(("Host", "x"))
    raw = [(n.encode(), v.strip(" ").encode()) for n, v in headers]
    try:
        response = h11.Response(status_code=status, headers=raw,
                                reason=HTTPStatus(status).phrase.encode())
    except h11.LocalProtocolError:
        return  # a header h11 will not write: the front answers 500 instead
    conn = h11.Connection(h11.SERVER)
    conn.receive_data(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n")
    while not isinstance(conn.next_event(), h11.EndOfMessage):
        pass
    assert head_bytes(response.status_code, response.reason,
                      list(response.headers.raw_items())) == conn.send(response)


def _talk(port: int, *steps: tuple[bytes, bytes]) -> bytes:
    """On one connection, for each step send its bytes and read until its mark has come;
    everything the host answered."""
    s = socket.create_connection(("127.0.0.1", port), timeout=15)
    out = b""
    try:
        for data, until in steps:
            s.sendall(data)
            while until not in out:
                chunk = s.recv(65536)
                if not chunk:
                    return out
                out += chunk
        return out
    finally:
        s.close()


async def _session(port: int) -> tuple[bytes, bytes]:
    """An HTTP + SSE session's id, and a ping of the SDK's for it."""
    opened = await asyncio.to_thread(
        _talk, port, (b"POST /session HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      b"Content-Length: 0\r\n\r\n", b"}"))
    sid = json.loads(opened.split(b"\r\n\r\n", 1)[1])["session_id"].encode()
    return sid, json.dumps({"type": "ping", "id": "p1", "version": "1.0"}).encode()


def _heads(answer: bytes) -> list[bytes]:
    return [part[:3] for part in answer.split(b"HTTP/1.1 ")[1:]]


async def test_plain_and_h11_requests_share_one_connection_in_order(db_path: Path) -> None:
    """On one kept-alive connection, a plain request, a chunked one (read by h11) and a plain
    one again, sent together, are answered in order."""
    async with running(db_path, search={"embedder": "none"}) as host:
        sid, ping = await _session(host.port)
        data = (b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                b"POST /send HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Session-Id: " + sid
                + b"\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n" % len(ping) + ping
                + b"\r\n0\r\n\r\n"
                b"GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        answer = await asyncio.to_thread(_talk, host.port, (data, b"ready\n"))
        assert _heads(answer) == [b"200", b"202", b"200"], answer
        assert answer.index(b"ok\n") < answer.index(b"ready\n")


async def test_a_stream_asked_plainly_is_written_chunked(db_path: Path) -> None:
    """An SSE stream asked by a plain request, on a connection h11 has read nothing of, is
    written as h11 writes a stream for HTTP/1.1 (chunked), with the session's events."""
    async with running(db_path, search={"embedder": "none"}) as host:
        sid, ping = await _session(host.port)
        send = (b"POST /send HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Session-Id: " + sid
                + b"\r\nContent-Length: %d\r\n\r\n" % len(ping) + ping)
        stream = (b"GET /stream HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Session-Id: " + sid
                  + b"\r\nAccept: text/event-stream\r\n\r\n")
        answer = await asyncio.to_thread(_talk, host.port, (send, b"true}"), (stream, b"pong"))
        assert _heads(answer) == [b"202", b"200"], answer
        head = answer.split(b"HTTP/1.1 ")[2].split(b"\r\n\r\n", 1)[0]
        assert b"Transfer-Encoding: chunked" in head and b"text/event-stream" in head
