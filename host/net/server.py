"""The server: accept, HTTP routes, WebSocket upgrades, bounded shutdown.

Every TCP connection is read first by the front (`host.net.front`), which counts it against
the connection caps at the accept, answers HTTP requests through the routes, and hands
WebSocket upgrades that pass the `gates` (Origin allow-list, then the host's authentication)
to the framing library's adapter. The routes are given in one place, the constructor: the
server's own (`/healthz`, `/readyz`), the HTTP + SSE session endpoints (`HttpSessions.routes`)
and the caller's (the host's `/metrics`, its `/readyz` with the store's reason and the
embedding backlog, the memory browser's `/ui`), a later one replacing an earlier on the same
path; `add_route` is for a test's extra route. A plain `GET /` (a browser's: no upgrade) is
redirected to `/ui` when the memory browser is served, else answered 426 (the path speaks
WebSocket). Each connection's requests go through its
own request core (`host.net.pipeline.Pipeline`); `on_open` hooks see a connection first. A
`DeadlineWatch` answers requests past `limits.request_timeout`.

The framing library is `config.server.transport`: `websockets` (the default,
`host.net.transport_websockets`, over websockets' sans-I/O protocol) or `picows`
(`host.net.transport_picows`, Cython framing: a fraction of the CPU a frame). Both serve the
same routes, gates, limits and replies; the wire tests run over both. TLS comes from
`config.server` (see `host.net.tls`).

`stop()` is bounded by `server.drain_timeout`, whatever the clients do: it stops accepting,
lets in-flight requests finish for most of it, sends each connection a close (1001), and drops
the sockets still open at the deadline (a client that does not read cannot hold it up).
"""

from __future__ import annotations

import asyncio
import importlib
import itertools
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from http import HTTPStatus
from typing import Any

from host.config import Config
from host.core.context import ConnectionContext
from host.core.router import Router
from host.net.front import Attach, HttpFront
from host.net.gates import SessionCheck, browser_gate
from host.net.http import Gate, HttpReply, HttpRequest, HttpStream, Route, get_only
from host.net.limits import ConnectionLimiter, DeadlineWatch, no_release
from host.net.pipeline import Pipeline, RequestHook, Sink
from host.net.serving import ServedConnection
from host.net.tls import ssl_context
from host.net.transport_http import BODY_REQUIRED, HttpSessions

__all__ = ["CLOSE_WAIT", "TRANSPORTS", "HostServer", "ServedConnection"]

# The WebSocket transports by `server.transport` name, each a module with `attach` (the front's
# hand-off of an upgrade). Imported by name when chosen: a transport never imports this module.
TRANSPORTS: dict[str, str] = {
    "websockets": "host.net.transport_websockets",
    "picows": "host.net.transport_picows",
}

log = logging.getLogger("a2e_host.server")
BROWSER = "/ui"  # the memory browser's prefix route (host.ui), where a GET / goes

CLOSE_WAIT = 1.0  # seconds of the drain timeout kept for the close handshakes


class HostServer:
    """Listens for agents. `start()`, then `stop()` drains and closes."""

    def __init__(
        self,
        config: Config,
        router: Router,
        ready: Callable[[], Awaitable[bool]],
        on_request: RequestHook | None = None,
        *,
        routes: Mapping[str, Route] | None = None,
        prefix_routes: Mapping[str, Route] | None = None,
        gates: Sequence[Gate] = (),
        session_checks: Sequence[SessionCheck] = (),
        on_open: Sequence[Callable[[ServedConnection], None]] = (),
        step: bool = False,
    ) -> None:
        """`routes` answer exactly their path, `prefix_routes` their path and every path
        under it; `gates` run after the Origin and Host checks; `session_checks` run over each
        request of an open HTTP + SSE session; `on_open` hooks see each connection first;
        `step` is True when a handler may be stepped outside a task (see `new_pipeline`)."""
        self.config = config
        self.router = router
        self._ready = ready
        self.on_request = on_request
        self.accepted = 0  # connections accepted since start
        self._server: asyncio.Server | None = None
        self._running = False
        self._deadlines = DeadlineWatch(lambda: self.connections, config.limits)
        self._ids = itertools.count(1)
        self.connections: set[ServedConnection] = set()
        self.fronts: set[HttpFront] = set()  # TCP connections still speaking HTTP
        self.limiter = ConnectionLimiter(config.limits)
        self.stopping = False
        self.sessions = HttpSessions(self)  # POST /session, /send, GET /stream, DELETE
        self.http_routes: dict[str, Route] = {
            "/healthz": get_only(self._healthz),
            "/readyz": get_only(self.readyz),
            **self.sessions.routes,
            **(routes or {}),
        }
        self._prefixes: dict[str, Route] = {
            path.rstrip("/"): route for path, route in (prefix_routes or {}).items()}
        self.body_required = BODY_REQUIRED  # POST paths where no body is 411, not empty
        # a browser's GET / (no upgrade) goes to the memory browser when it is served
        self.home: str | None = BROWSER if BROWSER in self._prefixes else None
        # checks of an upgrade request (and of each HTTP + SSE request), in order; the first
        # refusal is sent. The Origin and Host checks first (authentication is on when tokens
        # are configured, fixed for the host's life), then the caller's (the bearer gate).
        self.gates: list[Gate] = [browser_gate(config.server, bool(config.auth.tokens)), *gates]
        self.on_open: list[Callable[[ServedConnection], None]] = list(on_open)
        # checks of each request of an open HTTP + SSE session after the gates: None lets it
        # through (and may bind the session's identity), else the refusal
        self.session_checks: list[SessionCheck] = list(session_checks)
        # True when a handler may be stepped outside a task (the store reads on the loop and
        # nothing in a handler needs `asyncio.current_task()`): see host.net.pipeline. Only
        # `new_pipeline` reads it: no transport knows of it.
        self.step_in_callback = step

    def new_pipeline(self, ctx: ConnectionContext, sink: Sink) -> Pipeline:
        """The request core of a new connection (or HTTP + SSE session, or stdio) whose
        transport adapter is `sink`."""
        return Pipeline(self.router, ctx, self.config.limits, sink, on_request=self.on_request,
                        step=self.step_in_callback)

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self, listen: bool = True) -> None:
        """Bind and start accepting connections (`listen=False`: serve no port, only the
        connections given to the server, as `a2e-host stdio` does)."""
        self._running = True
        self._deadlines.start()
        if not listen:
            return
        module = TRANSPORTS.get(self.config.server.transport, TRANSPORTS["websockets"])
        attach: Attach = importlib.import_module(module).attach
        srv = self.config.server
        self._server = await asyncio.get_running_loop().create_server(
            lambda: HttpFront(self, attach), srv.host, srv.port, ssl=ssl_context(srv))

    # -- routes ---------------------------------------------------------------------------------

    def add_route(self, path: str, route: Route, prefix: bool = False) -> None:
        """Answer HTTP requests on `path` (with `prefix`, also on every path under `path/`)
        with `route` (see `host.net.http`)."""
        if prefix:
            self._prefixes[path.rstrip("/")] = route
        else:
            self.http_routes[path] = route

    def route(self, path: str) -> Route | None:
        """The HTTP route serving `path` (no query string), or None (a WebSocket path)."""
        route = self.http_routes.get(path)
        if route is not None or not self._prefixes:
            return route
        for prefix, r in self._prefixes.items():
            if path == prefix or path.startswith(prefix + "/"):
                return r
        return None

    async def answer(self, route: Route, request: HttpRequest) -> HttpReply | HttpStream:
        """Run an HTTP route."""
        result: Any = route(request)
        if asyncio.iscoroutine(result):
            result = await result
        assert isinstance(result, HttpReply | HttpStream)
        return result

    def refusal(self, request: HttpRequest) -> HttpReply | None:
        """Run the gates over a request: the first refusal, or None to let it through."""
        for gate in self.gates:
            reply = gate(request)
            if reply is not None:
                return reply
        return None

    # -- what the transports call ---------------------------------------------------------------

    def admit(self, remote: tuple[str, int] | None) -> tuple[HttpReply | None, Callable[[], None]]:
        """At a TCP accept: the connection caps (see `ConnectionLimiter.admit`)."""
        if self.stopping:
            return HttpReply(HTTPStatus.SERVICE_UNAVAILABLE, "host shutting down\n"), no_release
        return self.limiter.admit(remote)

    def next_conn_id(self, kind: str = "c") -> str:
        """A new connection id: `c1`, `c2`, ... for WebSocket connections, `h3` for an HTTP +
        SSE session, `s4` for stdio (the logs' `conn` shows the transport)."""
        return f"{kind}{next(self._ids)}"

    def opened(self, conn: ServedConnection) -> None:
        """A connection was upgraded (or a session opened): count it, run the `on_open`
        hooks."""
        self.accepted += 1
        for hook in self.on_open:
            hook(conn)
        self.connections.add(conn)
        log.debug("connection %s opened from %s", conn.ctx.conn_id, conn.ctx.remote)

    def closed(self, conn: ServedConnection) -> None:
        """A connection ended."""
        self.connections.discard(conn)
        log.debug("connection %s closed", conn.ctx.conn_id)

    # -- built-in routes ------------------------------------------------------------------------

    def _healthz(self, request: HttpRequest) -> HttpReply:
        return HttpReply(HTTPStatus.OK, "ok\n")

    async def readyz(self, request: HttpRequest) -> HttpReply:
        """The server's own readiness answer (the store's `ready()`)."""
        if await self._ready():
            return HttpReply(HTTPStatus.OK, "ready\n")
        return HttpReply(HTTPStatus.SERVICE_UNAVAILABLE, "store not ready\n")

    async def stop(self, drain_timeout: float | None = None) -> None:
        """Stop accepting; let in-flight requests finish, close every connection and drop the
        ones still open, all within the drain timeout."""
        if not self._running:
            return
        timeout = self.config.server.drain_timeout if drain_timeout is None else drain_timeout
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        self.stopping = True
        if self._server is not None:
            self._server.close()
        conns = list(self.connections)
        closing = min(CLOSE_WAIT, timeout / 4)
        if conns:
            await asyncio.gather(*(c.drain(timeout - closing) for c in conns))
        wait = max(0.0, deadline - loop.time())
        await asyncio.gather(*(c.close(1001, "host shutting down", wait) for c in conns))
        for conn in list(self.connections):
            conn.abort()
        for front in list(self.fronts):
            front.abort()
        await self._deadlines.stop()
        self._server = None
        self._running = False
        self.stopping = False

