"""The listener's front: each accepted TCP connection reads HTTP/1.1 here, for both WebSocket
transports, before any library sees it.

Why not let the WebSocket library read HTTP: `websockets`' server reads only a request's head
(its `process_request` hook cannot read a POST body), and picows answers HTTP synchronously
from its own parser. The host needs any method with a body (the HTTP + SSE transport, the
memory browser's forms), streaming responses (SSE) and the connection caps counted from the
TCP accept. So this plain `asyncio.Protocol` reads the request head itself (at most 16 KiB,
within 10 s) and then

- a `GET` with `Upgrade: websocket` on no route's path passes the gates (Origin, a bad bearer
  token: 401) and is handed, with the bytes read so far, to the transport's adapter
  (`transport.set_protocol`): from then on the adapter's own protocol reads the socket, so a
  frame costs nothing here;
- any other request reads its body (`Content-Length`, at most `limits.max_frame_bytes`, else
  413; `Expect: 100-continue` is answered) and is answered by its route
  (`host.net.http`), keeping the connection alive between requests (HTTP/1.1), or 426 (a GET
  on no route) / 404.

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

from host.net.http import Headers, HttpReply, HttpRequest, HttpStream

if TYPE_CHECKING:
    from host.net.serving import Server as HostServer

__all__ = ["Attach", "HttpFront", "reply_bytes"]

log = logging.getLogger("a2e_host.http")

HEAD_MAX = 16 * 1024  # bytes of a request head
HEAD_TIMEOUT = 10.0  # seconds for a whole request (head and body) to arrive
KEEPALIVE = 30.0  # seconds an idle kept-alive connection waits for its next request

# The WebSocket adapter's hand-off: (server, socket transport, the upgrade request, the bytes
# read so far (the head and anything after), release: call once when the connection ends).
Attach = Callable[["HostServer", Any, HttpRequest, bytes, Callable[[], None]], None]


def _head(status: HTTPStatus | int, headers: dict[str, str], cookies: list[str],
          fixed: list[tuple[str, str]]) -> bytes:
    st = HTTPStatus(status)
    lines = [f"HTTP/1.1 {st.value} {st.phrase}"]
    names = set()
    for name, value in fixed:
        lines.append(f"{name}: {value}")
        names.add(name.lower())
    for name, value in headers.items():
        if name.lower() not in names:
            lines.append(f"{name}: {value}")
    lines += [f"Set-Cookie: {c}" for c in cookies]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def reply_bytes(reply: HttpReply, keep_alive: bool = False, head_only: bool = False) -> bytes:
    """The bytes of `reply` as an HTTP/1.1 response."""
    body = reply.payload()
    head = _head(reply.status, reply.headers, reply.cookies, [
        ("Content-Type", reply.content_type), ("Content-Length", str(len(body))),
        ("Connection", "keep-alive" if keep_alive else "close")])
    return head if head_only else head + body


def _plain(status: HTTPStatus, text: str) -> HttpReply:
    return HttpReply(status, text)


class HttpFront(asyncio.Protocol):
    """One accepted TCP connection until it upgrades or closes."""

    def __init__(self, server: HostServer, attach: Attach) -> None:
        self.server = server
        self.attach = attach
        self.transport: Any = None
        self.remote: tuple[str, int] | None = None
        self._release: Callable[[], None] | None = None
        self._buf = bytearray()
        self._request: HttpRequest | None = None  # head read, body pending
        self._need = 0  # bytes of the buffer the pending request needs (head + body)
        self._body_len = 0
        self._keep = False  # keep the connection alive after this request
        self._route: Any = None
        self._task: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._closed = False
        self._handed = False
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
        self._buf += data
        if self._task is None:
            self._parse()
        elif len(self._buf) > HEAD_MAX:  # sending while its stream is open: not HTTP/1.1
            self.abort()

    def eof_received(self) -> bool | None:
        return None  # close our side too (a request still being answered is dropped)

    # -- requests -------------------------------------------------------------------------------

    def _end(self) -> None:
        release, self._release = self._release, None
        if release is not None:
            release()

    def _arm(self, seconds: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_later(seconds, self._timed_out)

    def _timed_out(self) -> None:
        self._timer = None
        if self._task is None and not self._closed:
            self.transport.abort()  # a slow or idle client: nothing to answer

    def _refuse(self, reply: HttpReply) -> None:
        """Answer `reply` and close (the rest of the request is not read)."""
        self._closed = True
        self.transport.write(reply_bytes(reply))
        self.transport.close()

    def _parse(self) -> None:
        buf = self._buf
        while not self._closed and self._task is None:
            if self._request is None:
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    if len(buf) > HEAD_MAX:
                        self._refuse(_plain(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE,
                                            "request head too large\n"))
                    return
                if not self._head(bytes(buf[:end]), end + 4):
                    return
            if len(buf) < self._need:
                return
            request, self._request = self._request, None
            assert request is not None
            request.body = bytes(buf[self._need - self._body_len:self._need])
            del buf[:self._need]
            self._need = 0
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._respond(request, self._route)

    def _head(self, head: bytes, size: int) -> bool:
        """Read one request head; False when the connection was refused or handed over."""
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ")
        if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
            self._refuse(_plain(HTTPStatus.BAD_REQUEST, "not an HTTP/1.1 request\n"))
            return False
        items: list[tuple[str, str]] = []
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if not sep or not name.strip():
                self._refuse(_plain(HTTPStatus.BAD_REQUEST, "malformed header line\n"))
                return False
            items.append((name.strip().decode("latin-1"), value.strip().decode("latin-1")))
        method = parts[0].decode("latin-1")
        target = parts[1].decode("latin-1")
        path, _, query = target.partition("?")
        headers = Headers(items)
        request = HttpRequest(path, headers, self.remote, method=method, query=query)
        self._keep = parts[2] == b"HTTP/1.1" and \
            (headers.get("Connection") or "").lower() != "close"
        route = self.server.route(path)
        upgrade = (headers.get("Upgrade") or "").lower() == "websocket"
        if route is None and upgrade and method == "GET":
            refusal = self.server.refusal(request)
            if refusal is not None:
                self._refuse(refusal)
                return False
            self._hand_over(request)
            return False
        if "Transfer-Encoding" in headers:
            self._refuse(_plain(HTTPStatus.LENGTH_REQUIRED, "send the body with Content-Length\n"))
            return False
        try:
            length = int(headers.get("Content-Length") or "0")
        except ValueError:
            length = -1
        if length < 0:
            self._refuse(_plain(HTTPStatus.BAD_REQUEST, "bad Content-Length\n"))
            return False
        limit = self.server.config.limits.max_frame_bytes
        if length > limit:
            self._refuse(_plain(HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                                f"body over the limit of {limit} bytes\n"))
            return False
        if length and (headers.get("Expect") or "").lower() == "100-continue":
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        self._request = request
        self._route = route
        self._body_len = length
        self._need = size + length
        return True

    def _hand_over(self, request: HttpRequest) -> None:
        self._handed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.server.fronts.discard(self)
        data = bytes(self._buf)
        self._buf.clear()
        release, self._release = self._release, None
        assert release is not None
        self.attach(self.server, self.transport, request, data, release)

    def _respond(self, request: HttpRequest, route: Any) -> None:
        """Answer one request: at once when its route answers at once (no task), else in a
        task, reading no further request meanwhile."""
        try:
            if route is None:
                if request.method == "GET":
                    result: Any = _plain(HTTPStatus.UPGRADE_REQUIRED,
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
            self.transport.resume_reading()  # to see the client go (its bytes are not read)
            try:
                await self._stream(reply)
            finally:
                request.close()
                if not self._closed:
                    self.transport.close()
            return
        self._task = None
        self.transport.resume_reading()
        self._reply(request, reply)
        if not self._closed:
            self._parse()

    def _reply(self, request: HttpRequest, reply: HttpReply) -> None:
        request.close()
        keep = self._keep and not self.server.stopping
        self.transport.write(reply_bytes(reply, keep, head_only=request.method == "HEAD"))
        if not keep:
            self._closed = True
            self.transport.close()
            return
        self._arm(KEEPALIVE)

    async def _stream(self, reply: HttpStream) -> None:
        write = self.transport.write
        write(_head(reply.status, reply.headers, reply.cookies, [
            ("Transfer-Encoding", "chunked"), ("Connection", "close"),
            ("Cache-Control", "no-cache"), ("X-Accel-Buffering", "no")]))
        body = reply.body
        try:
            async for chunk in body:
                if self._closed:
                    return
                if chunk:
                    write(b"%x\r\n%b\r\n" % (len(chunk), chunk))
                if not self._can_write.is_set():
                    await self._can_write.wait()
            if not self._closed:
                write(b"0\r\n\r\n")
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
