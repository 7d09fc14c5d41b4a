"""The WebSocket server: accept, upgrade, HTTP health endpoints, graceful drain.

Plain HTTP GETs on the same port answer `/healthz` (the process is up) and `/readyz` (the store
answers), and any route added to `http_routes` (the host adds `/metrics`); every other path is
upgraded to WebSocket, after the `gates` (Origin allow-list, authentication, connection limits)
let it through. Each connection answers its frames through the router; `on_open` hooks see it
first. A `DeadlineWatch` answers requests past `limits.request_timeout`.

The framing library is `config.server.transport`: `websockets` (the default,
`host.net.transport_websockets`) or `picows` (`host.net.transport_picows`, a Cython implementation that
costs a fraction of the CPU a frame). Both serve the same routes, gates, limits and replies;
the wire tests run over both. TLS comes from `config.server` (see `host.net.tls`).
"""

from __future__ import annotations

import asyncio
import importlib
import itertools
import logging
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Protocol

from host.config import Config
from host.core.context import ConnectionContext
from host.core.router import Router
from host.net.connection import RequestHook
from host.net.http import Gate, HttpReply, Route, Upgrade, origin_gate
from host.net.limits import DeadlineWatch

__all__ = ["TRANSPORTS", "HostServer", "Listening", "ServedConnection"]

# The transports by `server.transport` name, each a module with `async listen(server)`. They are
# imported by name when chosen: a transport imports this module, never the other way round.
TRANSPORTS: dict[str, str] = {
    "websockets": "host.net.transport_websockets",
    "picows": "host.net.transport_picows",
}

log = logging.getLogger("a2e_host.server")


class ServedConnection(Protocol):
    """What the server needs of a connection, whichever transport carries it."""

    ctx: ConnectionContext
    upgrade: Upgrade

    @property
    def in_flight(self) -> int:
        """Requests taken up and not yet answered."""

    @property
    def owes(self) -> bool:
        """True while a request read from the client is not answered yet."""

    def expire(self, now: float, timeout: float) -> None:
        """Answer the requests waiting longer than `timeout` s with the deadline error."""

    async def drain(self, timeout: float) -> None:
        """Wait up to `timeout` s until every request read is answered."""

    async def close(self, code: int, reason: str) -> None:
        """Close the WebSocket with `code` and `reason`."""


class Listening(Protocol):
    """A bound listener of a transport."""

    def port(self) -> int:
        """The bound TCP port."""

    def stop_accepting(self) -> None:
        """Close the listening socket; open connections stay."""

    async def wait_closed(self) -> None:
        """Return when the listener and its connections are gone."""


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
        self._listening: Listening | None = None
        self._deadlines = DeadlineWatch(lambda: self.connections, config.limits)
        self._ids = itertools.count(1)
        self.connections: set[ServedConnection] = set()
        self.http_routes: dict[str, Route] = {
            "/healthz": self._healthz,
            "/readyz": self._readyz,
        }
        # checks of an upgrade request, in order; the first refusal is sent
        self.gates: list[Gate] = []
        if config.server.allowed_origins:
            self.gates.append(origin_gate(config.server.allowed_origins))
        self.on_open: list[Callable[[ServedConnection], None]] = []
        # True when a handler may be stepped outside a task (the store reads on the loop and
        # nothing in a handler needs `asyncio.current_task()`): see host.net.transport_picows
        self.step_in_callback = False

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        assert self._listening is not None
        return self._listening.port()

    async def start(self) -> None:
        """Bind and start accepting connections."""
        module = TRANSPORTS.get(self.config.server.transport, TRANSPORTS["websockets"])
        listen: Callable[[HostServer], Awaitable[Listening]] = importlib.import_module(module).listen
        self._listening = await listen(self)
        self._deadlines.start()

    # -- what the transports call ------------------------------------------------------------

    def next_conn_id(self) -> str:
        """A new connection id (`c1`, `c2`, ...)."""
        return f"c{next(self._ids)}"

    def route(self, path: str) -> Route | None:
        """The HTTP route serving `path` (query string ignored), or None for an upgrade."""
        return self.http_routes.get(path.split("?", 1)[0])

    async def answer(self, route: Route, up: Upgrade) -> HttpReply:
        """Run an HTTP route."""
        result = route(up)
        if asyncio.iscoroutine(result):
            result = await result
        assert isinstance(result, HttpReply)
        return result

    def refusal(self, up: Upgrade) -> HttpReply | None:
        """Run the gates over an upgrade request: the first refusal, or None to upgrade."""
        for gate in self.gates:
            reply = gate(up)
            if reply is not None:
                return reply
        return None

    def opened(self, conn: ServedConnection) -> None:
        """A connection was upgraded: count it and run the `on_open` hooks."""
        self.accepted += 1
        for hook in self.on_open:
            hook(conn)
        self.connections.add(conn)
        log.debug("connection %s opened from %s", conn.ctx.conn_id, conn.ctx.remote)

    def closed(self, conn: ServedConnection) -> None:
        """A connection ended."""
        self.connections.discard(conn)
        log.debug("connection %s closed", conn.ctx.conn_id)

    # -- routes ----------------------------------------------------------------------------

    def _healthz(self, up: Upgrade) -> HttpReply:
        return HttpReply(HTTPStatus.OK, "ok\n")

    async def _readyz(self, up: Upgrade) -> HttpReply:
        if await self._ready():
            return HttpReply(HTTPStatus.OK, "ready\n")
        return HttpReply(HTTPStatus.SERVICE_UNAVAILABLE, "store not ready\n")

    async def stop(self, drain_timeout: float | None = None) -> None:
        """Stop accepting, let in-flight requests finish (up to the drain timeout), close."""
        if self._listening is None:
            return
        timeout = self.config.server.drain_timeout if drain_timeout is None else drain_timeout
        self._listening.stop_accepting()
        conns = list(self.connections)
        if conns:
            await asyncio.gather(*(c.drain(timeout) for c in conns))
        await asyncio.gather(*(c.close(1001, "host shutting down") for c in conns))
        await self._listening.wait_closed()
        await self._deadlines.stop()
        self._listening = None
