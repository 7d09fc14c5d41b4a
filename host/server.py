"""The WebSocket server: accept, upgrade, HTTP health endpoints, graceful drain.

Plain HTTP GETs on the same port answer `/healthz` (the process is up) and `/readyz` (the store
answers), and any route added to `http_routes` (the host adds `/metrics`); every other path is
upgraded to WebSocket, after the `gates` (authentication, connection limits) let it through.
Each connection runs a `Connection`; `on_open` hooks see it first. A `DeadlineWatch` answers
requests past `limits.request_timeout`. TLS and the Origin allow-list come from `config.server`
(see `host.tls`).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.http11 import Request, Response

from host.config import Config
from host.connection import Connection, RequestHook
from host.limits import DeadlineWatch
from host.router import Router
from host.tls import origins_for, ssl_context

__all__ = ["HostServer"]

log = logging.getLogger("a2e_host.server")

HttpHandler = Callable[[ServerConnection, Request], Awaitable[Response | None] | Response | None]
Gate = Callable[[ServerConnection, Request], Response | None]


class HostServer:
    """Listens for agents. `start()`, then `stop()` drains and closes."""

    def __init__(
        self,
        config: Config,
        router: Router,
        ready: Callable[[], Awaitable[bool]],
        on_request: RequestHook | None = None,
    ) -> None:
        self.config = config
        self.router = router
        self._ready = ready
        self.on_request = on_request
        self.accepted = 0  # connections accepted since start
        self._server: Server | None = None
        self._deadlines = DeadlineWatch(lambda: self.connections, config.limits)
        self._ids = itertools.count(1)
        self.connections: set[Connection] = set()
        self.http_routes: dict[str, HttpHandler] = {
            "/healthz": self._healthz,
            "/readyz": self._readyz,
        }
        # checks of an upgrade request, in order; the first response (a refusal) is sent
        self.gates: list[Gate] = []
        self.on_open: list[Callable[[Connection], None]] = []

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        """Bind and start accepting connections."""
        srv = self.config.server
        self._server = await serve(
            self._handle,
            srv.host,
            srv.port,
            max_size=self.config.limits.max_frame_bytes,
            compression="deflate" if srv.compression else None,
            process_request=self._process_request,
            ssl=ssl_context(srv),
            origins=origins_for(srv),
            ping_interval=20,
            ping_timeout=20,
        )
        self._deadlines.start()

    async def _process_request(self, conn: ServerConnection, request: Request) -> Any:
        route = self.http_routes.get(request.path.split("?", 1)[0])
        if route is None:
            for gate in self.gates:
                refusal = gate(conn, request)
                if refusal is not None:
                    return refusal
            return None
        result = route(conn, request)
        if asyncio.iscoroutine(result):
            result = await result
        return result

    def _healthz(self, conn: ServerConnection, request: Request) -> Response:
        return conn.respond(HTTPStatus.OK, "ok\n")

    async def _readyz(self, conn: ServerConnection, request: Request) -> Response:
        if await self._ready():
            return conn.respond(HTTPStatus.OK, "ready\n")
        return conn.respond(HTTPStatus.SERVICE_UNAVAILABLE, "store not ready\n")

    async def _handle(self, ws: ServerConnection) -> None:
        conn = Connection(ws, self.router, f"c{next(self._ids)}", limits=self.config.limits,
                          on_request=self.on_request)
        self.accepted += 1
        for hook in self.on_open:
            hook(conn)
        self.connections.add(conn)
        log.debug("connection %s opened from %s", conn.ctx.conn_id, conn.ctx.remote)
        try:
            await conn.run()
        finally:
            self.connections.discard(conn)
            log.debug("connection %s closed", conn.ctx.conn_id)

    async def stop(self, drain_timeout: float | None = None) -> None:
        """Stop accepting, let in-flight requests finish (up to the drain timeout), close."""
        if self._server is None:
            return
        timeout = self.config.server.drain_timeout if drain_timeout is None else drain_timeout
        self._server.close(close_connections=False)
        conns = list(self.connections)
        if conns:
            await asyncio.gather(*(c.drain(timeout) for c in conns))
        for c in conns:
            await c.ws.close(1001, "host shutting down")
        await self._server.wait_closed()
        await self._deadlines.stop()
        self._server = None
