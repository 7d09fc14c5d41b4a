"""What the server and its transports know of each other, as interfaces: a transport's
connection (`ServedConnection`, and `Served`, the part of it every adapter shares) and the
server a transport serves for (`Server`, which `host.net.server.HostServer` is). The server
module imports the transports by name (`host.net.server.TRANSPORTS`); they type against these
interfaces, so neither imports the other."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

from host.config import Config
from host.core.context import ConnectionContext
from host.core.router import Router
from host.net.http import HttpReply, HttpRequest, HttpStream, Route
from host.net.pipeline import Pipeline, Sink

__all__ = ["Served", "ServedConnection", "Server"]


class ServedConnection(Protocol):
    """What the server needs of a connection (or HTTP session), whichever transport."""

    ctx: ConnectionContext
    upgrade: HttpRequest
    pipeline: Pipeline
    kind: str  # the transport: "websocket", "http" (an HTTP + SSE session) or "stdio"

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

    async def close(self, code: int, reason: str, wait: float = ...) -> None:
        """Close with `code` and `reason`; drop the socket if the peer has not closed within
        `wait` s."""

    def abort(self) -> None:
        """Drop the connection now."""


class Server(Protocol):
    """What a transport needs of the server (`host.net.server.HostServer`)."""

    config: Config
    router: Router
    stopping: bool
    fronts: set[Any]
    home: str | None  # where a plain GET / is redirected (the memory browser), if anywhere
    body_required: frozenset[str]  # paths whose POST without a body is 411
    session_checks: list[Callable[[ConnectionContext, HttpRequest], HttpReply | None]]

    def next_conn_id(self, kind: str = ...) -> str:
        """A new connection id."""

    def new_pipeline(self, ctx: ConnectionContext, sink: Sink) -> Pipeline:
        """The request core of a new connection (or session) whose adapter is `sink`."""

    def opened(self, conn: ServedConnection) -> None:
        """A connection was upgraded (or a session opened)."""

    def closed(self, conn: ServedConnection) -> None:
        """A connection ended."""

    def admit(self, remote: tuple[str, int] | None) -> tuple[HttpReply | None, Callable[[], None]]:
        """The connection caps at a TCP accept."""

    def route(self, path: str) -> Route | None:
        """The HTTP route serving `path`, or None."""

    async def answer(self, route: Route, request: HttpRequest) -> HttpReply | HttpStream:
        """Run an HTTP route."""

    def refusal(self, request: HttpRequest) -> HttpReply | None:
        """Run the gates over a request."""


class Served:
    """What every transport's connection (or session) shows the server: its `pipeline`'s
    counters, deadline and drain. An adapter sets `self.pipeline` and `self.ctx`."""

    pipeline: Pipeline
    ctx: ConnectionContext

    @property
    def in_flight(self) -> int:
        """Requests taken up and not yet answered."""
        return self.pipeline.in_flight

    @property
    def owes(self) -> bool:
        """True while a request read from the client is not answered yet."""
        return self.pipeline.owes

    def expire(self, now: float, timeout: float) -> None:
        """Answer the requests waiting longer than `timeout` s with the deadline error."""
        self.pipeline.expire(now, timeout)

    async def drain(self, timeout: float) -> None:
        """Wait up to `timeout` s until every request read is answered."""
        await self.pipeline.drain(timeout)

    async def close(self, code: int, reason: str, wait: float = 1.0) -> None:
        """Close the connection (the adapter's)."""
        raise NotImplementedError

    def end(self) -> None:
        """The pipeline's `Sink.end()` after a `shutdown`: close with 1000 (an adapter whose
        session ends otherwise, HTTP + SSE, has its own)."""
        task = asyncio.get_running_loop().create_task(self.close(1000, "shutdown"))
        _ending.add(task)
        task.add_done_callback(_ending.discard)


_ending: set[asyncio.Task[None]] = set()  # the closes `Served.end()` started (kept referenced)
