"""HTTP + SSE on the host's port, as the A2E SDK's `HTTPTransport` speaks it: a session is the
equivalent of a WebSocket connection (its working tier, its `memory_id`s, its reply order),
served by the same request core (`host.net.pipeline`).

    POST   /session   -> 200 {"session_id": "..."}            open a session
    POST   /send      X-Session-Id; body: one JSON message (text/plain), or NDJSON of several
                      -> 202 {"ok": true} at once; the replies go to the stream
    GET    /stream    X-Session-Id (or ?session_id=); Accept: text/event-stream
                      -> the SSE stream of every reply and event: `id: N` and one `data:` line
                      a message; `Last-Event-ID: N` on a reconnect resends what followed N
    DELETE /session   X-Session-Id -> 204; the session ends

The same rules as on WebSocket: a bad `Authorization: Bearer` token is 401 on every endpoint
(a valid one binds the session's agent, as at a WebSocket upgrade; one of another agent than
the session's is 403), the Origin allow-list (403), the limits, rate and deadlines of the
request core; a body over `limits.max_frame_bytes` is 413 (the front, before it is read).
A session id is a secret like a bearer token: whoever holds it speaks for the session.

Replies wait in the session's buffer until a stream takes them; the ones a stream sent are
kept (up to `limits.max_unsent_bytes`) until a reconnect's `Last-Event-ID` shows them
received, so a stream that drops and comes back loses nothing. A reconnect without
`Last-Event-ID` (the SDK's) goes on after the last event written to a stream. While no stream
is open, more than `limits.max_unsent_bytes` of unsent replies closes the session; while one
is open and slow, the request core holds further replies (backpressure: `POST /send` then
waits, up to `limits.request_timeout`, and answers 503 if the session still cannot take more).
A session with no stream open and no send for `server.session_idle_timeout` seconds ends, and
its working tier is gone, as on a WebSocket disconnect.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable
from http import HTTPStatus
from typing import TYPE_CHECKING

from host.core.context import ConnectionContext
from host.net.http import HttpReply, HttpRequest, HttpStream
from host.net.pipeline import Pipeline, Served

if TYPE_CHECKING:
    from host.net.serving import Server as HostServer

__all__ = ["HttpSession", "HttpSessions"]

log = logging.getLogger("a2e_host.http_sessions")
_perf = time.perf_counter
HEARTBEAT = 15.0  # seconds between SSE comments on an idle stream (proxies drop silent ones)
_JSON = {"Content-Type": "application/json"}


def _json(status: HTTPStatus, body: object) -> HttpReply:
    return HttpReply(status, json.dumps(body), dict(_JSON))


_ACCEPTED = HttpReply(HTTPStatus.ACCEPTED, '{"ok": true}', dict(_JSON))


class HttpSession(Served):
    """One HTTP + SSE session: a pipeline whose replies go to a buffer that streams read."""

    kind = "http"

    def __init__(self, sessions: HttpSessions, session_id: str, request: HttpRequest) -> None:
        server = sessions.server
        self.sessions = sessions
        self.session_id = session_id
        self.upgrade = request
        self.limits = server.config.limits
        self.ctx = ConnectionContext(conn_id=server.next_conn_id("h"),
                                     remote=request.remote_text)
        self.pipeline = Pipeline(server.router, self.ctx, self.limits, self,
                                 on_request=server.on_request, step=server.step_in_callback)
        self._events: deque[tuple[int, bytes]] = deque()  # not yet known to be received
        self._kept = 0  # bytes of `_events`
        self._next = 1  # the id of the next event
        self._written = 0  # the last id written to a stream
        self._wake = asyncio.Event()
        self._readable = asyncio.Event()
        self._readable.set()
        self._stream = 0  # the generation of the open stream (0: none)
        self._streams = 0
        self._gone = asyncio.Event()
        self._beating = False  # the heartbeat woke the stream
        self.closed = False
        self.touched = _perf()

    # -- the pipeline's sink --------------------------------------------------------------------

    def send(self, data: bytes) -> None:
        """Buffer one reply for the stream."""
        if self.closed:
            return
        self._events.append((self._next, data))
        self._next += 1
        self._kept += len(data)
        self._wake.set()
        self._trim()

    def set_reading(self, reading: bool) -> None:
        """The request core can take more (True) or not (False)."""
        if reading:
            self._readable.set()
        else:
            self._readable.clear()

    def _unsent(self) -> int:
        return sum(len(d) for i, d in self._events if i > self._written)

    def _trim(self) -> None:
        """Keep the buffer within `max_unsent_bytes`: drop the oldest events already written
        to a stream, then (no stream open) close the session, or (a stream is slow) hold the
        request core's replies."""
        most = self.limits.max_unsent_bytes
        events = self._events
        while self._kept > most and events and events[0][0] <= self._written:
            self._kept -= len(events.popleft()[1])
        if self._kept <= most:
            return
        if not self._stream:
            log.warning("session %s: %d bytes of replies and no stream to read them; closed",
                        self.ctx.conn_id, self._kept)
            self.end()
        else:
            self.pipeline.pause_writing()

    # -- the stream -----------------------------------------------------------------------------

    async def events(self, last_id: int | None) -> AsyncIterator[bytes]:
        """The SSE stream: events after `last_id` (None: after the last one written)."""
        self._streams += 1
        me = self._stream = self._streams
        self._wake.set()  # a stream before this one ends
        if last_id is not None:
            self._ack(last_id)
            pos = last_id
        else:
            pos = self._written
        try:
            yield b"retry: 1000\n\n"
            while not self.closed and self._stream == me:
                sent = False
                for i, data in list(self._events):
                    if i <= pos:
                        continue
                    yield b"id: %d\ndata: %b\n\n" % (i, data)
                    pos = i
                    self._written = max(self._written, i)
                    sent = True
                    if self._stream != me:
                        return
                if sent:
                    self._trim()
                    if self._unsent() <= self.limits.max_unsent_bytes // 2:
                        self.pipeline.resume_writing()
                    continue
                self._wake.clear()
                if self.closed:
                    break
                beat = asyncio.get_running_loop().call_later(HEARTBEAT, self._beat)
                await self._wake.wait()
                beat.cancel()
                if self._beating:
                    self._beating = False
                    yield b": keepalive\n\n"
        finally:
            if self._stream == me:
                self._stream = 0
                self.touched = _perf()
            if self.closed and not self._stream:
                self._gone.set()

    def _beat(self) -> None:
        self._beating = True
        self._wake.set()

    def _ack(self, last_id: int) -> None:
        """The client has every event up to `last_id`: they need not be kept."""
        events = self._events
        if events and events[0][0] > last_id + 1:
            log.warning("session %s: Last-Event-ID %d is older than the kept events (%d on)",
                        self.ctx.conn_id, last_id, events[0][0])
        while events and events[0][0] <= last_id:
            self._kept -= len(events.popleft()[1])
        self._written = max(self._written, min(last_id, self._next - 1))

    # -- messages in ----------------------------------------------------------------------------

    def receive(self, body: bytes) -> HttpReply | Awaitable[HttpReply]:
        """The messages of one POST /send: the reply at once, or (the session owes too much)
        an awaitable of it."""
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            return HttpReply(HTTPStatus.BAD_REQUEST, "the body is not UTF-8\n")
        lines = [line for line in text.split("\n") if line.strip()] if "\n" in text else [text]
        if not self._readable.is_set():
            return self._receive_later(lines)
        return self._take(lines)

    async def _receive_later(self, lines: list[str]) -> HttpReply:
        try:  # wait for room, as a WebSocket's reads wait
            async with asyncio.timeout(self.limits.request_timeout):
                await self._readable.wait()
        except TimeoutError:
            return HttpReply(HTTPStatus.SERVICE_UNAVAILABLE,
                             "the session owes too many replies; read the stream\n",
                             {"Retry-After": "1"})
        return self._take(lines)

    def _take(self, lines: list[str]) -> HttpReply:
        if self.closed:
            return HttpReply(HTTPStatus.NOT_FOUND, "no such session\n")
        self.touched = _perf()
        for line in lines:
            self.pipeline.receive(line)
        return _ACCEPTED

    # -- the server's side ----------------------------------------------------------------------

    def expire(self, now: float, timeout: float) -> None:
        """The request deadline, and the end of an idle session."""
        self.pipeline.expire(now, timeout)
        idle = self.sessions.server.config.server.session_idle_timeout
        if not self._stream and now - self.touched > idle and not self.closed:
            log.info("session %s idle for %.0f s; closed", self.ctx.conn_id, now - self.touched)
            self.end()

    def end(self) -> None:
        """End the session: its working tier is gone; an open stream ends after what it has."""
        if self.closed:
            return
        self.closed = True
        self.pipeline.close()
        self._readable.set()
        self._wake.set()
        if not self._stream:
            self._gone.set()
        self.sessions.ended(self)

    async def close(self, code: int = 1001, reason: str = "", wait: float = 1.0) -> None:
        """End (the server's shutdown), and wait up to `wait` s for the open stream to send
        what it has."""
        self.end()
        try:
            async with asyncio.timeout(wait):
                await self._gone.wait()
        except TimeoutError:
            pass

    def abort(self) -> None:
        """End now."""
        self.end()


class HttpSessions:
    """The HTTP + SSE endpoints of a server and its open sessions."""

    def __init__(self, server: HostServer) -> None:
        self.server = server
        self.open: dict[str, HttpSession] = {}
        server.add_route("/session", self._session)
        server.add_route("/send", self._send)
        server.add_route("/stream", self._stream)

    def ended(self, session: HttpSession) -> None:
        """A session closed: forget it."""
        if self.open.get(session.session_id) is session:
            del self.open[session.session_id]
        self.server.closed(session)

    def _check(self, request: HttpRequest, method: str) -> HttpSession | HttpReply:
        """The session of a request: the gates, the method, its `X-Session-Id`, its identity;
        else the refusal."""
        refusal = self.server.refusal(request)
        if refusal is not None:
            return refusal
        if request.method != method:
            return HttpReply(HTTPStatus.METHOD_NOT_ALLOWED, f"{method} here\n", {"Allow": method})
        sid = request.headers.get("X-Session-Id") or request.params().get("session_id")
        if not sid:
            return HttpReply(HTTPStatus.BAD_REQUEST, "X-Session-Id header missing\n")
        session = self.open.get(sid)
        if session is None:
            return HttpReply(HTTPStatus.NOT_FOUND, "no such session\n")
        for check in self.server.session_checks:
            refusal = check(session.ctx, request)
            if refusal is not None:
                return refusal
        return session

    def _session(self, request: HttpRequest) -> HttpReply:
        if request.method == "DELETE":
            found = self._check(request, "DELETE")
            if isinstance(found, HttpSession):
                found.end()
                return HttpReply(HTTPStatus.NO_CONTENT, "")
            return found
        refusal = self.server.refusal(request)
        if refusal is not None:
            return refusal
        if request.method != "POST":
            return HttpReply(HTTPStatus.METHOD_NOT_ALLOWED, "POST or DELETE here\n",
                             {"Allow": "POST, DELETE"})
        if self.server.stopping:
            return HttpReply(HTTPStatus.SERVICE_UNAVAILABLE, "host shutting down\n")
        if len(self.open) >= self.server.config.limits.max_connections:
            return HttpReply(HTTPStatus.SERVICE_UNAVAILABLE, "too many sessions\n")
        sid = secrets.token_urlsafe(24)
        session = HttpSession(self, sid, request)
        self.open[sid] = session
        self.server.opened(session)
        return _json(HTTPStatus.OK, {"session_id": sid})

    def _send(self, request: HttpRequest) -> HttpReply | Awaitable[HttpReply]:
        found = self._check(request, "POST")
        return found.receive(request.body) if isinstance(found, HttpSession) else found

    def _stream(self, request: HttpRequest) -> HttpReply | HttpStream:
        found = self._check(request, "GET")
        if not isinstance(found, HttpSession):
            return found
        last = request.headers.get("Last-Event-ID")
        try:
            last_id = int(last) if last else None
        except ValueError:
            return HttpReply(HTTPStatus.BAD_REQUEST, "Last-Event-ID is not an event id\n")
        return HttpStream(HTTPStatus.OK, found.events(last_id),
                          {"Content-Type": "text/event-stream; charset=utf-8"})
