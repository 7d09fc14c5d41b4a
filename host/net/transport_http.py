"""HTTP + SSE on the host's port, as the A2E SDK's `HTTPTransport` speaks it: a session is the
equivalent of a WebSocket connection (its working tier, its `memory_id`s, its reply order),
served by the same request core (`host.net.pipeline`).

    POST   /session   -> 200 {"session_id": "..."}            open a session
    POST   /send      X-Session-Id; body: one JSON message (text/plain; one JSON value, on one
                      line or pretty-printed over several), or NDJSON (a body that is not one
                      JSON value: each non-blank line a message)
                      -> 202 {"ok": true} at once; the replies go to the stream
    GET    /stream    X-Session-Id (or ?session_id=); Accept: text/event-stream
                      -> the SSE stream of every reply and event: `id: N` and one `data:` line
                      a message; `Last-Event-ID: N` on a reconnect resends what followed N
    DELETE /session   X-Session-Id -> 204; the session ends

The same rules as on WebSocket: the gates (`host.net.gates`: a foreign Origin or Host is 403,
a bad `Authorization: Bearer` token 401) on every endpoint; a valid token binds the session's
agent, as at a WebSocket upgrade (one of another agent than the session's is 403); the limits,
rate and deadlines of the request core; a body over `limits.max_frame_bytes` is 413 (the
front, before it is read). A `shutdown` message ends the session once the replies owed before
it are sent: a `POST /send` after it is a request of its own, taken and dropped (202) while the
session is ending, 404 once it has ended (which of the two depends on when it comes). A
session id is a secret like a bearer token: whoever holds it speaks for the session. Sessions
are capped per IP, and with authentication on, sessions no token has bound yet are capped
apart and short-lived (see `HttpSessions`).

Replies wait in the session's buffer until a stream takes them (at most
`limits.max_unsent_bytes`); the ones a stream sent are kept (at most
`limits.max_replay_bytes`, oldest dropped first) until a reconnect's `Last-Event-ID` shows them
received, so a stream that drops and comes back loses nothing it could not have read. A
reconnect without `Last-Event-ID` (the SDK's) goes on after the last event written to a
stream. While no stream is open, more than `limits.max_unsent_bytes` of unsent replies closes
the session; while one is open and slow, the request core holds further replies
(backpressure: `POST /send` then waits, up to `limits.request_timeout`, and answers 503 if the
session still cannot take more). A session with no stream open and no send for
`server.session_idle_timeout` seconds ends, and its working tier is gone, as on a WebSocket
disconnect.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from collections import Counter, deque
from collections.abc import AsyncIterator, Awaitable
from http import HTTPStatus
from typing import TYPE_CHECKING

from host.core.context import ConnectionContext
from host.lifecycle import waited
from host.net.http import HttpReply, HttpRequest, HttpStream, Route
from host.net.serving import Served

if TYPE_CHECKING:
    from host.net.serving import Server

__all__ = ["BODY_REQUIRED", "HttpSession", "HttpSessions", "messages_of"]

log = logging.getLogger("a2e_host.http_sessions")
_perf = time.perf_counter
HEARTBEAT = 15.0  # seconds between SSE comments on an idle stream (proxies drop silent ones)
_JSON = {"Content-Type": "application/json"}


def _json(status: HTTPStatus, body: object) -> HttpReply:
    return HttpReply(status, json.dumps(body), dict(_JSON))


_ACCEPTED = HttpReply(HTTPStatus.ACCEPTED, '{"ok": true}', dict(_JSON))
# the paths whose POST needs a body: one without Content-Length (or chunked) is 411 there, an
# empty body elsewhere (`POST /session` has none)
BODY_REQUIRED = frozenset({"/send"})
_BATCH = 64 * 1024  # bytes of events a stream writes in one chunk


def messages_of(body: str) -> list[str]:
    """The messages of one `POST /send` body: the whole body when it is one JSON value (even
    over several lines, pretty-printed), else each non-blank line (NDJSON)."""
    if "\n" not in body:
        return [body]
    try:
        json.loads(body)
    except ValueError:
        return [line for line in body.split("\n") if line.strip()]
    return [body.strip()]


class HttpSession(Served):
    """One HTTP + SSE session: a pipeline whose replies go to a buffer that streams read.

    Two queues of events, each with a running byte total, so an event costs the same however
    many are kept: `_unsent` (not yet written to a stream, at most `limits.max_unsent_bytes`)
    and `_sent` (written, kept for a reconnect's `Last-Event-ID`, at most
    `limits.max_replay_bytes`, the oldest dropped first). Event ids are consecutive, so an id
    is found by its position in `_sent`, never by a scan."""

    kind = "http"

    def __init__(self, sessions: HttpSessions, session_id: str, request: HttpRequest) -> None:
        server = sessions.server
        self.sessions = sessions
        self.session_id = session_id
        self.upgrade = request
        self.ip = request.remote[0] if request.remote else ""
        self.limits = server.config.limits
        self.ctx = ConnectionContext(conn_id=server.next_conn_id("h"),
                                     remote=request.remote_text)
        self.pipeline = server.new_pipeline(self.ctx, self)
        self._unsent: deque[tuple[int, bytes]] = deque()  # not yet written to a stream
        self._unsent_bytes = 0
        self._sent: deque[tuple[int, bytes]] = deque()  # written; kept for a Last-Event-ID
        self._sent_bytes = 0
        self._next = 1  # the id of the next event
        self._wake = asyncio.Event()
        self._readable = asyncio.Event()
        self._readable.set()
        self._stream = 0  # the generation of the open stream (0: none)
        self._streams = 0
        self._gone = asyncio.Event()
        self._beating = False  # the heartbeat woke the stream
        self.closed = False
        self.unbound = False  # authentication on and no token has bound the session yet
        self.opened_at = self.touched = _perf()

    # -- the pipeline's sink --------------------------------------------------------------------

    def send(self, data: bytes) -> None:
        """Buffer one reply for the stream."""
        if self.closed:
            return
        if self.unbound and self.ctx.identity is not None:  # the handshake's token bound it
            self.sessions.bound(self)
        self._unsent.append((self._next, data))
        self._next += 1
        self._unsent_bytes += len(data)
        self._wake.set()
        if self._unsent_bytes > self.limits.max_unsent_bytes:
            if not self._stream:
                log.warning("session %s: %d bytes of replies and no stream to read them;"
                            " closed", self.ctx.conn_id, self._unsent_bytes)
                self.end()
            else:
                self.pipeline.pause_writing()

    def set_reading(self, reading: bool) -> None:
        """The request core can take more (True) or not (False)."""
        if reading:
            self._readable.set()
        else:
            self._readable.clear()

    def _keep(self, event: tuple[int, bytes]) -> None:
        """`event` was written to a stream: keep it for a reconnect, within the bound."""
        sent = self._sent
        sent.append(event)
        self._sent_bytes += len(event[1])
        most = self.limits.max_replay_bytes
        while self._sent_bytes > most and sent:
            self._sent_bytes -= len(sent.popleft()[1])

    @property
    def unsent_bytes(self) -> int:
        """Bytes of events no stream has written yet."""
        return self._unsent_bytes

    @property
    def kept_bytes(self) -> int:
        """Bytes of events held: unsent, and sent but kept for a reconnect."""
        return self._unsent_bytes + self._sent_bytes

    # -- the stream -----------------------------------------------------------------------------

    async def events(self, last_id: int | None) -> AsyncIterator[bytes]:
        """The SSE stream: events after `last_id` (None: after the last one written)."""
        self._streams += 1
        me = self._stream = self._streams
        self._wake.set()  # a stream before this one ends
        if last_id is not None:
            self._replay(last_id)
        unsent = self._unsent
        try:
            yield b"retry: 1000\n\n"
            while not self.closed and self._stream == me:
                if unsent:
                    parts: list[bytes] = []
                    size = 0
                    while unsent and size < _BATCH:
                        event = unsent.popleft()
                        self._unsent_bytes -= len(event[1])
                        parts.append(b"id: %d\ndata: %b\n\n" % event)
                        size += len(event[1])
                        self._keep(event)
                    if self._unsent_bytes <= self.limits.max_unsent_bytes // 2:
                        self.pipeline.resume_writing()
                    yield b"".join(parts)
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

    def _replay(self, last_id: int) -> None:
        """A reconnect with `Last-Event-ID: last_id`: the client has every event up to it; the
        kept ones after it are sent again (before the unsent ones)."""
        sent = self._sent
        first = sent[0][0] if sent else (self._unsent[0][0] if self._unsent else self._next)
        if last_id + 1 < first:
            log.warning("session %s: Last-Event-ID %d is older than the kept events (%d on)",
                        self.ctx.conn_id, last_id, first)
        while sent and sent[-1][0] > last_id:  # newest first, to the front of the unsent
            event = sent.pop()
            self._sent_bytes -= len(event[1])
            self._unsent.appendleft(event)
            self._unsent_bytes += len(event[1])
        while sent:  # acknowledged: not kept
            self._sent_bytes -= len(sent.popleft()[1])
        if self._unsent_bytes > self.limits.max_unsent_bytes:
            self.pipeline.pause_writing()

    # -- messages in ----------------------------------------------------------------------------

    def receive(self, body: bytes) -> HttpReply | Awaitable[HttpReply]:
        """The messages of one POST /send: the reply at once, or (the session owes too much)
        an awaitable of it."""
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            return HttpReply(HTTPStatus.BAD_REQUEST, "the body is not UTF-8\n")
        lines = messages_of(text)
        if not self._readable.is_set():
            return self._receive_later(lines)
        return self._take(lines)

    async def _receive_later(self, lines: list[str]) -> HttpReply:
        # wait for room, as a WebSocket's reads wait
        if not await waited(self._readable.wait(), self.limits.request_timeout):
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
        """The request deadline, the end of an idle session, and of one no token bound in
        time."""
        self.pipeline.expire(now, timeout)
        if self.closed:
            return
        srv = self.sessions.server.config.server
        if self.unbound:
            if self.ctx.identity is not None:
                self.sessions.bound(self)
            elif now - self.opened_at > srv.unbound_session_timeout:
                log.info("session %s: no token within %.0f s; closed", self.ctx.conn_id,
                         srv.unbound_session_timeout)
                self.end()
                return
        if not self._stream and now - self.touched > srv.session_idle_timeout:
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
        await waited(self._gone.wait(), wait)

    def abort(self) -> None:
        """End now."""
        self.end()


class HttpSessions:
    """The HTTP + SSE endpoints of a server and its open sessions.

    Sessions are counted per IP (at most `limits.max_connections_per_ip`, as TCP connections
    are). With authentication on, a session opened without a valid token (the SDK's
    `POST /session` carries none) is *unbound* until a token binds it, at `POST /session`
    (`Authorization`), at a later request's `Authorization` or by the handshake's
    `auth_token`: unbound sessions are capped per IP (`limits.max_unbound_sessions_per_ip`)
    and end after `server.unbound_session_timeout`; when every session slot
    (`limits.max_connections`) is taken, a `POST /session` with a valid token ends the oldest
    unbound session to make room, so a flood of sessions without tokens cannot lock out an
    agent that has one."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.auth_on = bool(server.config.auth.tokens)  # fixed for the host's life
        self.open: dict[str, HttpSession] = {}
        self.per_ip: Counter[str] = Counter()
        self.unbound: dict[str, HttpSession] = {}  # oldest first
        self.unbound_per_ip: Counter[str] = Counter()
        self.refused = 0
        # the server's routes of the sessions (`HostServer` takes them up)
        self.routes: dict[str, Route] = {
            "/session": self._session, "/send": self._send, "/stream": self._stream}

    def ended(self, session: HttpSession) -> None:
        """A session closed: forget it."""
        if self.open.get(session.session_id) is session:
            del self.open[session.session_id]
            _drop(self.per_ip, session.ip)
        self.bound(session)
        self.server.closed(session)

    def bound(self, session: HttpSession) -> None:
        """`session` is no longer unbound (a token bound it, or it ended)."""
        if session.unbound:
            session.unbound = False
            if self.unbound.pop(session.session_id, None) is session:
                _drop(self.unbound_per_ip, session.ip)

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
        if session.unbound and session.ctx.identity is not None:
            self.bound(session)
        return session

    def _refused(self, status: HTTPStatus, text: str, ip: str) -> HttpReply:
        self.refused += 1
        if self.refused % 1000 == 1:  # a flood logs a line a thousand refusals
            log.warning("refused a session from %s: %s (%d open, %d refused)", ip,
                        text.strip(), len(self.open), self.refused)
        return HttpReply(status, text)

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
        limits = self.server.config.limits
        ip = request.remote[0] if request.remote else ""
        # the bearer gate passed: an Authorization header here holds a valid token
        bound = self.auth_on and request.headers.get("Authorization") is not None
        unbound = self.auth_on and not bound
        if self.per_ip[ip] >= limits.max_connections_per_ip:
            return self._refused(HTTPStatus.TOO_MANY_REQUESTS, "too many sessions from here\n", ip)
        if unbound and self.unbound_per_ip[ip] >= limits.max_unbound_sessions_per_ip:
            return self._refused(HTTPStatus.TOO_MANY_REQUESTS,
                                 "too many sessions without a token from here\n", ip)
        if len(self.open) >= limits.max_connections:
            if not (bound and self.unbound):
                return self._refused(HTTPStatus.SERVICE_UNAVAILABLE, "too many sessions\n", ip)
            oldest = next(iter(self.unbound.values()))
            log.info("session %s without a token ended to make room for one with a token",
                     oldest.ctx.conn_id)
            oldest.end()
        sid = secrets.token_urlsafe(24)
        session = HttpSession(self, sid, request)
        self.open[sid] = session
        self.per_ip[ip] += 1
        self.server.opened(session)  # binds the token of an Authorization header
        if self.auth_on and session.ctx.identity is None:
            session.unbound = True
            self.unbound[sid] = session
            self.unbound_per_ip[ip] += 1
        return _json(HTTPStatus.OK, {"session_id": sid})

    def _send(self, request: HttpRequest) -> HttpReply | Awaitable[HttpReply]:
        found = self._check(request, "POST")
        return found.receive(request.body) if isinstance(found, HttpSession) else found

    def _stream(self, request: HttpRequest) -> HttpReply | HttpStream:
        found = self._check(request, "GET")
        if not isinstance(found, HttpSession):
            return found
        last = request.headers.get("Last-Event-ID")
        if last and not (last.isascii() and last.isdigit() and len(last) < 20):
            return HttpReply(HTTPStatus.BAD_REQUEST, "Last-Event-ID is not an event id\n")
        return HttpStream(HTTPStatus.OK, found.events(int(last) if last else None),
                          {"Content-Type": "text/event-stream; charset=utf-8"})


def _drop(counter: Counter[str], key: str) -> None:
    counter[key] -= 1
    if counter[key] <= 0:
        del counter[key]
