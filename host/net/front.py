"""The listener's front: each accepted TCP connection reads HTTP/1.1 here, for both WebSocket
transports, before any library sees it.

Why not let the WebSocket library read HTTP: `websockets`' server reads only a request's head
(its `process_request` hook cannot read a POST body), and picows answers HTTP synchronously
from its own parser. The host needs any method with a body (the HTTP + SSE transport, the
memory browser's forms), streaming responses (SSE, downloads) and the connection caps counted
from the TCP accept. So this plain `asyncio.Protocol` moves the socket's bytes through h11's
sans-I/O `Connection(SERVER)`, which parses every request and writes every response (it refuses
what the grammar refuses: a bad request line or header line, a bare CR or LF in a header,
conflicting or malformed `Content-Length`, and it will not write a header value holding CR LF),
and then

- a `GET` with `Upgrade: websocket` on no route's path passes the gates (`host.net.gates`:
  Origin and Host, a bad bearer token: 401) and is handed to the transport's adapter
  (`transport.set_protocol`) with its head (as h11 read it) and the bytes after it: from then
  on the adapter's own protocol reads the socket, so a frame costs nothing here;
- any other request reads its body (`Content-Length` or chunked, at most
  `limits.max_frame_bytes`, else 413; a POST without either has an empty body, except on a
  path that needs one (`POST /send`: 411); `Expect: 100-continue` is
  answered once the body is wanted) and is answered by its route (`host.net.http`), keeping
  the connection alive between requests (HTTP/1.1), or 426 (a GET on no route) / 404; a
  `GET /` without an upgrade (a browser's) is redirected (302) to the memory browser when the
  host serves it (`Server.home`).

Bad requests get h11's answer (400; a head over 16 KiB: 431) and the connection closes, as
after a 413, with a lingering close (`host.net.linger`: the client reads the answer). A
whole request (head and body) must arrive within 10 s, and an idle kept-alive connection is
dropped after 30 s.

The connection caps (`limits.max_connections`, `max_connections_per_ip`) are applied at the
accept: a connection past them is answered 503 / 429 and closed before anything is read, so
half-open upgrades count (see `host.net.limits.ConnectionLimiter`).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

import h11

from host.net.http import Headers, HttpReply, HttpRequest, HttpStream
from host.net.linger import Linger
from host.net.simple_http import Simple, read_simple, response_head

if TYPE_CHECKING:
    from host.net.serving import Server

__all__ = ["Attach", "HttpFront", "reply_bytes"]

log = logging.getLogger("a2e_host.http")

HEAD_MAX = 16 * 1024  # bytes of a request head
HEAD_TIMEOUT = 10.0  # seconds for a whole request (head and body) to arrive
KEEPALIVE = 30.0  # seconds an idle kept-alive connection waits for its next request
_SLICE = 1024  # bytes given to h11 at a time while it reads a head, so that h11's bound
# (HEAD_MAX - _SLICE, checked when it needs more) refuses any head over HEAD_MAX
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})

# The WebSocket adapter's hand-off: (server, socket transport, the upgrade request, the bytes
# of the connection from the request's head on, release: call once when the connection ends).
Attach = Callable[["Server", Any, HttpRequest, bytes, Callable[[], None]], None]


def reply_bytes(reply: HttpReply) -> bytes:
    """The bytes of a refusal sent before any request is read (the connection caps): only the
    host's own status and text, so written without h11 (it answers requests only)."""
    st = HTTPStatus(reply.status)
    body = reply.payload()
    return (f"HTTP/1.1 {st.value} {st.phrase}\r\nContent-Type: {reply.content_type}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode("latin-1") + body


def _plain(status: HTTPStatus, text: str) -> HttpReply:
    return HttpReply(status, text)


def _upgrade_head(event: h11.Request) -> bytes:
    """An upgrade request's head as h11 read it (validated), for the WebSocket adapter."""
    lines = [b"%s %s HTTP/%s" % (event.method, event.target, event.http_version)]
    lines += [b"%s: %s" % (name, value) for name, value in event.headers.raw_items()]
    return b"\r\n".join(lines) + b"\r\n\r\n"


class HttpFront(asyncio.Protocol):
    """One accepted TCP connection until it upgrades or closes."""

    def __init__(self, server: Server, attach: Attach) -> None:
        self.server = server
        self.attach = attach
        self.transport: Any = None
        self.remote: tuple[str, int] | None = None
        self._release: Callable[[], None] | None = None
        self.conn = h11.Connection(h11.SERVER, max_incomplete_event_size=HEAD_MAX - _SLICE)
        self._pending = bytearray()  # bytes received and not yet given to h11
        self._request: HttpRequest | None = None  # head read, body pending
        self._event: h11.Request | None = None
        self._upgrade = False  # the pending request is a WebSocket upgrade
        self._body = bytearray()
        self._route: Any = None
        self._task: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._deadline: float | None = None  # loop time by which the client must progress
        self._idle = False  # waiting for a kept-alive connection's next request
        self._closed = False
        self._handed = False
        self._simple: bytes | None = None  # the plain request being answered without h11
        self._can_write = asyncio.Event()
        self._can_write.set()

    # -- asyncio callbacks ---------------------------------------------------------------------

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.remote = (str(peer[0]), int(peer[1])) if peer else None
        refusal, release = self.server.admit(self.remote)
        if refusal is not None:
            self._closed = True
            transport.write(reply_bytes(refusal))
            transport.close()
            return
        self._release = release
        self.server.fronts.add(self)
        self._arm(HEAD_TIMEOUT)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._can_write.set()
        if self._timer is not None:
            self._timer.cancel()
        if self._task is not None:
            self._task.cancel()
        self.server.fronts.discard(self)
        if not self._handed:
            self._end()

    def pause_writing(self) -> None:
        self._can_write.clear()

    def resume_writing(self) -> None:
        self._can_write.set()

    def data_received(self, data: bytes) -> None:
        if self._closed:
            return
        self._pending += data
        if self._task is not None:
            if len(self._pending) > HEAD_MAX:  # sending while its answer streams: not HTTP/1.1
                self.abort()
            return
        if self._idle:
            self._idle = False
            self._arm(HEAD_TIMEOUT)
        self._pump()

    def eof_received(self) -> bool | None:
        return None  # close our side too (a request still being answered is dropped)

    # -- requests -------------------------------------------------------------------------------

    def _end(self) -> None:
        release, self._release = self._release, None
        if release is not None:
            release()

    def _arm(self, seconds: float) -> None:
        """The connection must progress within `seconds`. One timer a connection, moved only
        when the deadline comes sooner than it: a later one is checked when it fires, so a
        kept-alive connection's requests cost no timer each."""
        loop = asyncio.get_running_loop()
        self._deadline = deadline = loop.time() + seconds
        timer = self._timer
        if timer is not None:
            if timer.when() <= deadline:
                return
            timer.cancel()
        self._timer = loop.call_at(deadline, self._timed_out)

    def _disarm(self) -> None:
        """No deadline while a request is answered."""
        self._deadline = None

    def _timed_out(self) -> None:
        self._timer = None
        deadline = self._deadline
        if deadline is None or self._closed:
            return
        loop = asyncio.get_running_loop()
        if loop.time() < deadline:  # moved on since this timer was set
            self._timer = loop.call_at(deadline, self._timed_out)
        elif self._task is None:
            self.transport.abort()  # a slow or idle client: nothing to answer

    def _pump(self) -> None:
        """Give h11 the bytes received and act on its events, until it needs more, a request
        is being answered, or the connection was handed over or closed."""
        conn = self.conn
        while self._pending and self._task is None and not self._closed \
                and conn.their_state is h11.IDLE and conn.our_state is h11.IDLE \
                and not conn.trailing_data[0]:
            simple = read_simple(self._pending, HEAD_MAX - _SLICE,
                                 self.server.config.limits.max_frame_bytes)
            if simple is None or not self._plain(simple):
                break
        if self._task is not None or self._closed:
            return
        if self._pending and conn.their_state is not h11.DONE:
            self._feed()
        while not self._closed and self._task is None:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as exc:
                self._bad(exc)
                return
            if event is h11.NEED_DATA:
                if not self._pending:
                    return
                self._feed()
            elif event is h11.PAUSED:
                if self._upgrade:  # the upgrade's head is read (h11 waits for a 101)
                    self._hand_over()
                return
            elif isinstance(event, h11.Request):
                self._head(event)
            elif isinstance(event, h11.Data):
                self._body += event.data
                self._body_over(len(self._body))  # chunked: as it grows
            elif isinstance(event, h11.EndOfMessage):
                if self._upgrade:
                    continue  # h11 pauses next: the hand-over
                request, self._request = self._request, None
                assert request is not None
                request.body = bytes(self._body)
                self._body.clear()
                self._disarm()
                self._respond(request, self._route)
                if not self._pending and conn.their_state is h11.IDLE \
                        and not conn.trailing_data[0]:
                    return  # answered, and nothing more to read (h11 would say NEED_DATA)
            else:  # ConnectionClosed: h11 is never told of an EOF, so not seen
                return

    def _plain(self, simple: Simple) -> bool:
        """Answer a plain request without h11 (`host.net.simple_http`); False when the request
        needs h11 after all (a body required and none declared: h11's 411)."""
        path, _, query = simple.target.partition("?")
        headers = Headers(simple.headers)
        if simple.method in _BODY_METHODS and path in self.server.body_required \
                and "Content-Length" not in headers:
            return False
        request = HttpRequest(path, headers, self.remote, method=simple.method, query=query,
                              body=simple.body)
        self._simple = bytes(self._pending[:simple.size])
        del self._pending[:simple.size]
        self._disarm()
        self._respond(request, self.server.route(path))
        return True

    def _to_h11(self) -> None:
        """Give h11 the plain request being answered, so that h11 writes its answer (a stream,
        or a reply that closes): h11 reads it as the fast path did."""
        raw, self._simple = self._simple, None
        if raw is None:
            return
        conn = self.conn
        conn.receive_data(raw)
        while not isinstance(conn.next_event(), h11.EndOfMessage):
            pass

    def _feed(self) -> None:
        """Give h11 the pending bytes: a slice while it reads a head, else all of them."""
        pending = self._pending
        if self.conn.their_state is h11.IDLE and len(pending) > _SLICE:
            self.conn.receive_data(bytes(pending[:_SLICE]))
            del pending[:_SLICE]
        else:
            self.conn.receive_data(bytes(pending))
            pending.clear()

    def _bad(self, exc: h11.RemoteProtocolError) -> None:
        """Answer a request h11 refused (400, 431, ...) and close."""
        status = exc.error_status_hint
        text = f"bad request: {exc}\n" if status == 400 else f"{HTTPStatus(status).phrase}\n"
        if status == HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE:
            text = f"request head over {HEAD_MAX} bytes\n"
        self._refuse(_plain(HTTPStatus(status), text))

    def _body_over(self, size: int) -> bool:
        """A request body of `size` bytes (declared, or read so far) is over
        `limits.max_frame_bytes`: refused 413 (True). The one check of the limit on HTTP."""
        limit = self.server.config.limits.max_frame_bytes
        if size <= limit:
            return False
        self._refuse(_plain(HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                            f"body over the limit of {limit} bytes\n"))
        return True

    def _refuse(self, reply: HttpReply) -> None:
        """Answer `reply` and close (the rest of the request is not read: the socket lingers,
        `host.net.linger`, so the client reads the answer instead of a reset)."""
        if self._closed:
            return
        self._write_reply(reply, head_only=False, close=True)
        if not self._closed:
            self._closed = True
            Linger(self.transport, self.connection_lost)

    def _head(self, event: h11.Request) -> None:
        """A request head: refuse it, or note what its body and answer need."""
        method = event.method.decode("ascii")
        target = event.target.decode("ascii")
        path, _, query = target.partition("?")
        items = [(n.decode("latin-1"), v.decode("latin-1")) for n, v in event.headers.raw_items()]
        headers = Headers(items)
        request = HttpRequest(path, headers, self.remote, method=method, query=query)
        route = self.server.route(path)
        upgrade = (headers.get("Upgrade") or "").lower() == "websocket"
        if route is None and upgrade and method == "GET":
            refusal = self.server.refusal(request)
            if refusal is None and ((headers.get("Content-Length") or "0") != "0"
                                    or "Transfer-Encoding" in headers):
                refusal = _plain(HTTPStatus.BAD_REQUEST, "an upgrade request has no body\n")
            if refusal is not None:
                self._refuse(refusal)
                return
            self._upgrade = True
            self._request, self._event = request, event
            return
        if method in _BODY_METHODS and path in self.server.body_required \
                and "Content-Length" not in headers and "Transfer-Encoding" not in headers:
            self._refuse(_plain(HTTPStatus.LENGTH_REQUIRED,
                                "send the body with Content-Length (or chunked)\n"))
            return  # elsewhere a request with neither has an empty body (RFC 9112, 6.3)
        if self._body_over(int(headers.get("Content-Length") or "0")):  # h11 checked: digits
            return
        if self.conn.they_are_waiting_for_100_continue:
            self.transport.write(self._out(h11.InformationalResponse(
                status_code=100, headers=[], reason=b"Continue")))
        self._request = request
        self._route = route

    def _hand_over(self) -> None:
        request, event = self._request, self._event
        assert request is not None and event is not None
        self._handed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.server.fronts.discard(self)
        trailing, _ = self.conn.trailing_data
        data = _upgrade_head(event) + bytes(trailing) + bytes(self._pending)
        self._pending.clear()
        release, self._release = self._release, None
        assert release is not None
        self.attach(self.server, self.transport, request, data, release)

    def _respond(self, request: HttpRequest, route: Any) -> None:
        """Answer one request: at once when its route answers at once (no task), else in a
        task, reading no further request meanwhile."""
        try:
            if route is None:
                home = self.server.home
                if request.method in ("GET", "HEAD") and request.path == "/" and home:
                    result: Any = HttpReply(HTTPStatus.FOUND,
                                            f"the memory browser is at {home}\n",
                                            {"Location": home})
                elif request.method == "GET":
                    result = _plain(HTTPStatus.UPGRADE_REQUIRED,
                                    "this path speaks WebSocket: send an upgrade\n")
                else:
                    result = _plain(HTTPStatus.NOT_FOUND, "not found\n")
            else:
                result = route(request)
        except Exception:
            log.exception("HTTP %s %s failed", request.method, request.path)
            result = _plain(HTTPStatus.INTERNAL_SERVER_ERROR, "internal error\n")
        if isinstance(result, HttpReply):
            self._reply(request, result)
            return
        self.transport.pause_reading()
        self._task = asyncio.get_running_loop().create_task(self._finish(request, result))

    async def _finish(self, request: HttpRequest, result: Any) -> None:
        try:
            reply = await result if inspect.isawaitable(result) else result
            assert isinstance(reply, HttpReply | HttpStream)
        except asyncio.CancelledError:
            request.close()
            raise
        except Exception:
            log.exception("HTTP %s %s failed", request.method, request.path)
            reply = _plain(HTTPStatus.INTERNAL_SERVER_ERROR, "internal error\n")
        if self._closed:
            request.close()
            return
        if isinstance(reply, HttpStream):
            self._to_h11()
            self.transport.resume_reading()  # to see the client go (its bytes are not read)
            try:
                await self._stream(request, reply)
            finally:
                request.close()
                if not self._closed:
                    self._closed = True
                    self.transport.close()
            return
        self._task = None
        self.transport.resume_reading()
        self._reply(request, reply)
        if not self._closed:
            self._pump()

    def _write_reply(self, reply: HttpReply, head_only: bool, close: bool) -> None:
        """Write `reply` through h11 (a head h11 refuses is a bug of ours: 500 instead)."""
        body = reply.payload()
        fixed = [("Content-Type", reply.content_type), ("Content-Length", str(len(body)))]
        if close:
            fixed.append(("Connection", "close"))
        try:
            head = response_head(reply.status, reply.headers, reply.cookies, fixed)
        except h11.LocalProtocolError:
            log.exception("HTTP reply %s has a header h11 will not write", reply.status)
            body = b"internal error\n"
            head = response_head(HTTPStatus.INTERNAL_SERVER_ERROR, {}, [], [
                ("Content-Type", "text/plain; charset=utf-8"),
                ("Content-Length", str(len(body)))] + fixed[2:])
        if self._simple is not None:
            if not close:  # kept alive: h11 would write this head as it is
                self._simple = None
                self.transport.write(head.raw if head_only or not body else head.raw + body)
                return
            self._to_h11()
        try:
            out = self._out(head.event)
            if body and not head_only:
                out += self._out(h11.Data(data=body))
            out += self._out(h11.EndOfMessage())
        except h11.LocalProtocolError:  # h11 cannot answer in this state: just close
            self._closed = True
            self.transport.close()
            return
        self.transport.write(out)

    def _reply(self, request: HttpRequest, reply: HttpReply) -> None:
        request.close()
        close = self.server.stopping
        simple = self._simple is not None and not close
        self._write_reply(reply, head_only=request.method == "HEAD", close=close)
        if simple:
            if not self._closed:
                self._idle = True
                self._arm(KEEPALIVE)
            return
        conn = self.conn
        if self._closed or conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
            if not self._closed:
                self._closed = True
                self.transport.close()
            return
        conn.start_next_cycle()
        self._upgrade = False
        self._idle = True
        self._arm(KEEPALIVE)

    def _out(self, event: Any) -> bytes:
        """The bytes of one event h11 writes."""
        return self.conn.send(event) or b""

    async def _stream(self, request: HttpRequest, reply: HttpStream) -> None:
        body = reply.body
        write = self.transport.write
        out = self._out
        head_only = request.method == "HEAD"
        try:
            head = response_head(reply.status, reply.headers, reply.cookies, [
                ("Connection", "close"), ("Cache-Control", "no-cache"),
                ("X-Accel-Buffering", "no")])
        except h11.LocalProtocolError:
            log.exception("HTTP stream %s has a header h11 will not write", reply.status)
            head = response_head(HTTPStatus.INTERNAL_SERVER_ERROR, {}, [], [
                ("Content-Length", "0"), ("Connection", "close")])
            head_only = True
        try:
            write(out(head.event))
            if head_only:
                write(out(h11.EndOfMessage()))
                return
            async for chunk in body:
                if self._closed:
                    return
                if chunk:
                    write(out(h11.Data(data=chunk)))
                if not self._can_write.is_set():
                    await self._can_write.wait()
            if not self._closed:
                write(out(h11.EndOfMessage()))
        finally:
            close = getattr(body, "aclose", None)
            if close is not None:
                await close()

    # -- the server's side ---------------------------------------------------------------------

    def abort(self) -> None:
        """Drop the connection now (shutdown past its deadline)."""
        if not self._closed:
            self._closed = True
            self.transport.abort()

    @property
    def busy(self) -> bool:
        """True while a request is being answered (or a stream is open)."""
        return self._task is not None
