"""The `picows` transport (`server.transport = "picows"`): the server's routes, gates and
replies over picows, whose Cython framing costs a fraction of `websockets`' CPU a frame.

picows calls back with each frame; there is no task a connection. A frame is decoded and its
handler's coroutine is stepped at once, in the callback: a reply that needs no waiting (most
reads) is encoded and written before the callback returns. A handler that has to wait (a
query's embedding, a read behind this connection's pending write) goes on in a task, and
frames that arrive meanwhile wait their turn, so requests run in order as on `websockets`.
Stepping outside a task is done only when the store reads on the loop (`reads_on_loop`:
SQLite); on PostgreSQL (asyncpg needs a task) every handler runs in a task.
Replies that wait for a commit (futures) are written in request order as they resolve.
The replies to the frames of one socket read (a pipelining client) go out in one write. While
the socket's send buffer is over its high-water mark (a client that does not read), replies
wait here, counted by `max_pipelined` and `max_unsent_bytes`, and no frame is read.

The same rules as `host.net.connection` hold: a frame over `limits.max_frame_bytes` closes the
connection with 1009 (picows does it), a text message that is not UTF-8 with 1007; a binary
message is answered `parse_error`; pings are answered, and an idle peer is pinged every 20 s
and dropped 20 s later without a pong; `limits.requests_per_second`, `max_pipelined`,
`max_unsent_bytes` (no further frame is read while this much is owed) and the request
deadline (`expire()`) apply.

HTTP routes (`/healthz`, `/readyz`, `/metrics`) are answered before picows sees the request:
the protocol reads the request line itself, because a route may await (the store's readiness,
the entry counts) and picows asks for its HTTP answer synchronously.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
import types
from collections import deque
from collections.abc import Generator
from functools import partial
from typing import TYPE_CHECKING, Any

from picows import (
    WSAutoPingStrategy,
    WSCloseCode,
    WSFrame,
    WSListener,
    WSMsgType,
    WSTransport,
    WSUpgradeRequest,
    WSUpgradeResponse,
    WSUpgradeResponseWithListener,
)
from picows.picows import WSProtocol  # type: ignore[attr-defined]

from host.core.context import ConnectionContext
from host.net.connection import TYPE_OF, binary_refused, error_for, past_deadline, rate_limited
from host.net.http import Headers, HttpReply, Upgrade
from host.net.limits import RequestRate
from host.net.tls import ssl_context
from protocol.codec import decode_request, encode
from protocol.messages import Error

if TYPE_CHECKING:
    from host.net.server import HostServer

__all__ = ["PicowsConnection", "listen"]

log = logging.getLogger("a2e_host.picows")
# picows logs every connection and disconnection at INFO: keep its own lines to warnings
_wire_log = logging.getLogger("a2e_host.picows.wire")
_wire_log.setLevel(logging.WARNING)
# given an adapter (not a Logger), picows makes no child logger a connection
_wire = logging.LoggerAdapter(_wire_log, {})
_READ_BUFFER = 4096  # bytes a connection starts with; picows doubles it when a frame needs it
_perf = time.perf_counter

_TEXT = WSMsgType.TEXT
_BINARY = WSMsgType.BINARY
_CONTINUATION = WSMsgType.CONTINUATION
_CLOSE = WSMsgType.CLOSE
_PING_SECONDS = 20.0
_CLOSE_WAIT = 2.0  # seconds to wait for the peer's answer to our close frame
_HEAD_MAX = 16 * 1024
_SHORT = struct.Struct("!BBH")
_LONG = struct.Struct("!BBQ")  # bytes of an HTTP request line picows would accept


@types.coroutine
def _resume(coro: Any, waiting: Any) -> Generator[Any, Any, Any]:
    """Go on with `coro`, already stepped once and now waiting on `waiting`, as a task would."""
    while True:
        try:
            sent = yield waiting
        except BaseException as exc:  # a cancel (the deadline), thrown into the handler
            try:
                waiting = coro.throw(exc)
            except StopIteration as stop:
                return stop.value
        else:
            try:
                waiting = coro.send(sent)
            except StopIteration as stop:
                return stop.value


def _consume(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled():
        fut.exception()  # an abandoned write's error is not "never retrieved"


class PicowsConnection(WSListener):  # type: ignore[misc]
    """Serves one WebSocket from picows' frame callbacks."""

    def __init__(self, host: HostServer, upgrade: Upgrade) -> None:
        super().__init__()
        self.host = host
        self.router = host.router
        self.limits = host.config.limits
        self.on_request = host.on_request
        self.upgrade = upgrade
        self.ctx = ConnectionContext(
            conn_id=host.next_conn_id(), remote=upgrade.remote_text if upgrade.remote else ""
        )
        self._rate = RequestRate(self.limits)
        self._step = host.step_in_callback
        self._transport: WSTransport | None = None
        self._send: Any = None
        self._raw: Any = None  # the socket's asyncio transport
        self._out: list[bytes] | None = None  # frames of one socket read's replies
        # owed replies in request order: [req_id, reply or future, type, started, data]
        self._replies: deque[list[Any]] = deque()
        self._unsent = 0  # bytes encoded and not yet written (replies behind a pending one)
        self._frames: deque[str | bytes] = deque()  # read while a handler waits
        self._task: asyncio.Task[Any] | None = None  # the handler that waits
        self._dispatch_since = 0.0
        self._expired = False
        self._fragments: bytearray | None = None
        self._fragment_text = True
        self._reading_paused = False
        self._writing_paused = False
        self._closed = False
        self._idle: asyncio.Event | None = None
        self._flush_cb = self._flush_done
        self._pushed: dict[object, int] = {}  # events queued unsent, by push key
        self.ctx.push = self.push

    # -- picows callbacks ------------------------------------------------------------------

    def on_ws_connected(self, transport: WSTransport) -> None:
        self._transport = transport
        self._send = transport.send
        self._raw = transport.underlying_transport
        self.host.opened(self)

    def on_ws_disconnected(self, transport: WSTransport) -> None:
        self._closed = True
        if self._task is not None:
            self._task.cancel()
        for item in self._replies:
            if item[4] is None:
                item[1].add_done_callback(_consume)
        self._replies.clear()
        self._pushed.clear()
        self._frames.clear()
        self._unsent = 0
        self.ctx.close()
        self.host.closed(self)
        self._maybe_idle()

    def pause_writing(self) -> None:
        self._writing_paused = True
        self._pressure()

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._flush()

    def on_ws_frame(self, transport: WSTransport, frame: WSFrame) -> None:
        last = frame.last_in_buffer
        if not last and self._out is None:
            # more frames came in this read: gather their replies into one socket write
            self._out = []
            asyncio.get_running_loop().call_soon(self._write_out)  # in case no last frame
        self._frame(transport, frame)
        if last and self._out is not None:
            self._write_out()

    def _write_out(self) -> None:
        out, self._out = self._out, None
        if out and not self._closed:
            self._raw.write(b"".join(out))

    def _write(self, data: bytes) -> None:
        out = self._out
        if out is None:
            self._send(_TEXT, data)
            return
        n = len(data)  # a server's frame: FIN + text, no mask
        if n < 126:
            out.append(bytes((0x81, n)))
        elif n < 65536:
            out.append(_SHORT.pack(0x81, 126, n))
        else:
            out.append(_LONG.pack(0x81, 127, n))
        out.append(data)

    def _frame(self, transport: WSTransport, frame: WSFrame) -> None:
        kind = frame.msg_type
        if kind is _TEXT and frame.fin and self._fragments is None:
            try:
                text = frame.get_payload_as_utf8_text()
            except UnicodeDecodeError:
                self._fail(WSCloseCode.INVALID_TEXT, "invalid UTF-8 in a text frame")
                return
            self._message(text)
        elif kind is _TEXT or kind is _BINARY:
            if self._fragments is not None:
                self._fail(WSCloseCode.PROTOCOL_ERROR, "a new message inside a fragmented one")
                return
            if frame.fin:  # a whole binary message: refused whatever it holds, so not copied
                self._message(b"")
                return
            self._fragments = bytearray(frame.get_payload_as_memoryview())
            self._fragment_text = kind is _TEXT
        elif kind is _CONTINUATION:
            self._continuation(frame)
        elif kind is _CLOSE:
            self._write_out()
            if not transport.is_close_frame_sent:
                transport.send_close(frame.get_close_code(), frame.get_close_message())
            transport.disconnect()
        # PING is answered by picows; PONG needs nothing

    def _continuation(self, frame: WSFrame) -> None:
        parts = self._fragments
        if parts is None:
            self._fail(WSCloseCode.PROTOCOL_ERROR, "a continuation frame without a message")
            return
        parts += frame.get_payload_as_memoryview()
        if len(parts) > self.limits.max_frame_bytes:
            self._fail(WSCloseCode.MESSAGE_TOO_BIG, "message too big")
            return
        if not frame.fin:
            return
        self._fragments = None
        if not self._fragment_text:
            self._message(b"")  # binary: refused whatever it holds
            return
        try:
            text = parts.decode("utf-8")
        except UnicodeDecodeError:
            self._fail(WSCloseCode.INVALID_TEXT, "invalid UTF-8 in a text message")
            return
        self._message(text)

    def _fail(self, code: WSCloseCode, reason: str) -> None:
        transport = self._transport
        if transport is None:
            return
        self._write_out()
        self._fragments = None
        if not transport.is_close_frame_sent:
            transport.send_close(code, reason.encode())
        asyncio.get_running_loop().call_later(_CLOSE_WAIT, transport.disconnect)

    # -- requests ----------------------------------------------------------------------------

    def _message(self, data: str | bytes) -> None:
        if self._task is not None or self._frames or self._reading_paused:
            self._frames.append(data)  # taken up in turn by `_pump`
            if not self._reading_paused:
                self._pressure()
            return
        self._answer(data)
        if self._replies:
            self._pressure()

    def _pump(self) -> None:
        """Take up the frames read while a handler waited or while too much was owed."""
        frames = self._frames
        while frames and self._task is None and not self._closed and not self._over():
            self._answer(frames.popleft())
        self._pressure()
        self._maybe_idle()

    def _answer(self, data: str | bytes) -> None:
        started = _perf()
        req_id = ""
        msg_type = "invalid"
        allowed = self._rate.allow()
        reply: Any
        if type(data) is bytes:
            reply = binary_refused()
        else:
            try:
                msg = decode_request(data)
                req_id, msg_type = msg.id, TYPE_OF.get(type(msg), "invalid")
                if not allowed:
                    raise rate_limited(req_id)
                coro = self.router.dispatch(msg, self.ctx)
                if not self._step:
                    self._wait(coro, None, req_id, msg_type, started)
                    return
                try:
                    waiting = coro.send(None)
                except StopIteration as done:
                    reply = done.value
                else:
                    self._wait(coro, waiting, req_id, msg_type, started)
                    return
            except Exception as exc:
                reply = error_for(exc, req_id)
        self._reply(req_id, msg_type, started, reply)

    def _wait(self, coro: Any, waiting: Any, req_id: str, msg_type: str, started: float) -> None:
        """Run the handler in a task (`waiting`: what it awaits after its first step, None
        when not stepped yet); later frames wait for it."""
        run = coro if waiting is None else _resume(coro, waiting)
        task = asyncio.get_running_loop().create_task(run)
        self._task = task
        self._dispatch_since = started
        task.add_done_callback(partial(self._handled, req_id, msg_type, started))

    def _handled(self, req_id: str, msg_type: str, started: float,
                 task: asyncio.Task[Any]) -> None:
        self._task = None
        self._dispatch_since = 0.0
        if self._closed:
            return
        if task.cancelled():
            expired, self._expired = self._expired, False
            reply = past_deadline(req_id, self.limits.request_timeout) if expired else \
                error_for(RuntimeError("request cancelled"), req_id)
        else:
            exc = task.exception()
            reply = error_for(exc, req_id) if exc is not None else task.result()
        self._reply(req_id, msg_type, started, reply)
        self._pump()

    def _reply(self, req_id: str, msg_type: str, started: float, reply: Any) -> None:
        if isinstance(reply, asyncio.Future):
            self._replies.append([req_id, reply, msg_type, started, None])
            reply.add_done_callback(self._flush_cb)
            return
        data = encode(reply)
        if not self._replies and not self._writing_paused:
            if not self._closed:
                self._write(data)
            self._done(req_id, msg_type, reply, started)
            return
        self._replies.append([req_id, reply, msg_type, started, data])
        self._unsent += len(data)

    def push(self, message: Any, key: object = None, limit: int = 0) -> bool:
        """Queue a server-initiated message (an event) after the replies owed; False (nothing
        queued) when closed or `limit` messages of `key` wait unsent."""
        if self._closed:
            return False
        if key is not None and limit > 0 and self._pushed.get(key, 0) >= limit:
            return False
        data = message if isinstance(message, bytes) else encode(message)
        if not self._replies and not self._writing_paused:
            self._write(data)
            return True
        self._replies.append(["", key, "", _perf(), data])  # type "": an event, no request
        self._unsent += len(data)
        self._pushed[key] = self._pushed.get(key, 0) + 1
        return True

    def _flush_done(self, _: object) -> None:
        self._flush()

    def _flush(self) -> None:
        """Write the owed replies that are ready, in request order."""
        replies = self._replies
        while replies and not self._writing_paused:
            item = replies[0]
            data = item[4]
            if data is None:
                fut = item[1]
                if not fut.done():
                    break
                if fut.cancelled():
                    reply = error_for(RuntimeError("write cancelled"), item[0])
                else:
                    exc = fut.exception()
                    reply = error_for(exc, item[0]) if exc is not None else fut.result()
                item[1] = reply
                data = encode(reply)
            else:
                self._unsent -= len(data)
            replies.popleft()
            if not self._closed:
                self._write(data)
            if item[2]:
                self._done(item[0], item[2], item[1], item[3])
            else:  # a pushed event
                left = self._pushed.pop(item[1], 1) - 1
                if left:
                    self._pushed[item[1]] = left
        self._pump()

    def _done(self, req_id: str, msg_type: str, reply: Any, started: float) -> None:
        if self.on_request is not None:
            code = reply.code if type(reply) is Error else "ok"
            self.on_request(self.ctx.conn_id, req_id, msg_type, code, _perf() - started)

    def _over(self) -> bool:
        """Too much owed to the client: take up no further frame."""
        limits = self.limits
        return self._writing_paused or len(self._replies) >= limits.max_pipelined or \
            self._unsent >= limits.max_unsent_bytes

    def _pressure(self) -> None:
        """Read from the socket only while nothing holds back the frames already read."""
        transport = self._transport
        if transport is None or self._closed:
            return
        over = bool(self._frames) or self._over()
        if over != self._reading_paused:
            self._reading_paused = over
            raw = transport.underlying_transport
            if over:
                raw.pause_reading()
            else:
                raw.resume_reading()

    # -- the server's side ------------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        """Requests taken up and not yet answered (frames read and held back, at most one
        socket read's worth, are not counted: like the frames `websockets` has buffered)."""
        return len(self._replies) + (self._task is not None)

    def expire(self, now: float, timeout: float) -> None:
        """Answer the requests that arrived more than `timeout` s before `now`
        (`time.perf_counter` seconds) with the deadline error; a write they started may still
        commit."""
        if self._dispatch_since and now - self._dispatch_since > timeout and self._task:
            self._dispatch_since = 0.0
            self._expired = True
            self._task.cancel()
        late = False
        for item in self._replies:
            if now - item[3] <= timeout:
                break
            if item[4] is None and not item[1].done():
                item[1].add_done_callback(_consume)
                item[1] = past_deadline(item[0], timeout)
                data = encode(item[1])
                item[4] = data
                self._unsent += len(data)
                late = True
        if late:
            self._flush()

    @property
    def owes(self) -> bool:
        """True while a request read from the client is not answered yet (taken up or held)."""
        return bool(self._replies or self._frames) or self._task is not None

    def _maybe_idle(self) -> None:
        if self._idle is not None and (self._closed or not self.owes):
            self._idle.set()

    async def drain(self, timeout: float) -> None:
        """Wait up to `timeout` s until every request read is answered (frames that arrive
        meanwhile are answered too: the client sent them before it knew of the shutdown)."""
        if self._closed or not self.owes:
            return
        self._idle = asyncio.Event()
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            return

    async def close(self, code: int, reason: str) -> None:
        """Send a close frame, wait briefly for the peer's, then drop the socket."""
        transport = self._transport
        if transport is None or self._closed:
            return
        if not transport.is_close_frame_sent:
            transport.send_close(WSCloseCode(code), reason.encode())
        try:
            await asyncio.wait_for(transport.wait_disconnected(), _CLOSE_WAIT)
        except TimeoutError:
            transport.disconnect()


# -- the listener ----------------------------------------------------------------------------


def _http_bytes(reply: HttpReply) -> bytes:
    body = reply.body.encode()
    head = [f"HTTP/1.1 {reply.status.value} {reply.status.phrase}",
            f"Content-Type: {reply.content_type}", f"Content-Length: {len(body)}",
            "Connection: close"]
    head += [f"{k}: {v}" for k, v in reply.headers.items() if k.lower() != "content-type"]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


class _Protocol(WSProtocol):  # type: ignore[misc]
    """picows' server protocol with the peer's address at the upgrade and HTTP routes."""

    def __init__(self, host: HostServer) -> None:
        limits = host.config.limits
        super().__init__(
            None, None, False, self._listener, _wire, True, 10.0,
            True, _PING_SECONDS, _PING_SECONDS, WSAutoPingStrategy.PING_WHEN_IDLE,
            True, limits.max_frame_bytes, None, _READ_BUFFER,
        )
        self.host = host
        self.up: Upgrade | None = None
        self._head: bytes | None = b""  # the request line so far; None once decided
        self._view: memoryview | None = None
        self._raw: Any = None

    def connection_made(self, transport: Any) -> None:
        self._raw = transport
        super().connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        if self.up is not None:
            self.up.close()

    def get_buffer(self, size_hint: int) -> memoryview:
        view = super().get_buffer(size_hint)
        if self._head is not None:
            self._view = view
        return view  # type: ignore[no-any-return]

    def buffer_updated(self, nbytes: int) -> None:
        head = self._head
        if head is None:
            super().buffer_updated(nbytes)
            return
        assert self._view is not None
        head += bytes(self._view[:nbytes])
        end = head.find(b"\r\n")
        if end < 0 and len(head) < _HEAD_MAX:
            self._head = head
            super().buffer_updated(nbytes)  # picows waits for the whole head too
            return
        self._head = None
        self._view = None
        parts = head[:end].split(b" ") if end >= 0 else []
        path = parts[1].decode("latin-1") if len(parts) == 3 else ""
        route = self.host.route(path) if path else None
        if route is None:
            # from now on picows' own methods read the socket: no Python step a read
            self.get_buffer = WSProtocol.get_buffer.__get__(self)  # type: ignore[method-assign]
            self.buffer_updated = WSProtocol.buffer_updated.__get__(self)  # type: ignore[method-assign]
            self._raw.set_protocol(self)  # the loop looks the methods up again
            super().buffer_updated(nbytes)
            return
        self._raw.pause_reading()
        asyncio.get_running_loop().create_task(self._route(route, path))

    async def _route(self, route: Any, path: str) -> None:
        up = Upgrade(path, Headers(()), self._peer())
        try:
            reply = await self.host.answer(route, up)
        except Exception:
            log.exception("HTTP route %s failed", path)
            reply = HttpReply(500, "internal error\n")  # type: ignore[arg-type]
        if not self._raw.is_closing():
            self._raw.write(_http_bytes(reply))
            self._raw.close()

    def _peer(self) -> tuple[str, int] | None:
        peer = self._raw.get_extra_info("peername") if self._raw is not None else None
        return (str(peer[0]), int(peer[1])) if peer else None

    def _listener(self, request: WSUpgradeRequest) -> Any:
        up = Upgrade(request.path.decode("latin-1"), Headers(request.headers.items()),
                     self._peer())
        self.up = up
        refusal = self.host.refusal(up)
        if refusal is not None:
            response = WSUpgradeResponse.create_error_response(
                refusal.status, refusal.body.encode(),
                {"Content-Type": refusal.content_type, **refusal.headers})
            return WSUpgradeResponseWithListener(response, None)
        return PicowsConnection(self.host, up)


class _Listening:
    def __init__(self, server: asyncio.Server) -> None:
        self.server = server

    def port(self) -> int:
        return int(self.server.sockets[0].getsockname()[1])

    def stop_accepting(self) -> None:
        self.server.close()

    async def wait_closed(self) -> None:
        await self.server.wait_closed()


async def listen(host: HostServer) -> _Listening:
    """Bind `host.config.server`'s address and serve until the listener is stopped."""
    srv = host.config.server
    server = await asyncio.get_running_loop().create_server(
        lambda: _Protocol(host), srv.host, srv.port, ssl=ssl_context(srv))
    return _Listening(server)
