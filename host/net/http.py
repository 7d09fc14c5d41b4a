"""The HTTP side of a connection, the same under every WebSocket transport.

Before a WebSocket upgrade the server sees an `Upgrade`: the path, the request headers, the
peer's address. HTTP routes (`/healthz`, `/metrics`) and gates (authentication, connection
limits, the Origin allow-list) read it and answer with an `HttpReply`, which the transport
(`host.net.transport_websockets` or `host.net.transport_picows`) writes in its own way. So auth and
limits are written once, whichever library frames the WebSocket.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from http import HTTPStatus

__all__ = ["Gate", "Headers", "HttpReply", "Route", "Upgrade", "origin_gate"]


class Headers:
    """Request headers with case-insensitive names; `get` returns the first value."""

    __slots__ = ("_items",)

    def __init__(self, items: Iterable[tuple[str, str]]) -> None:
        self._items: dict[str, str] = {}
        for name, value in items:
            self._items.setdefault(name.lower(), value)

    def get(self, name: str, default: str | None = None) -> str | None:
        """The value of header `name`, or `default` when the request has none."""
        return self._items.get(name.lower(), default)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._items


@dataclass(eq=False)
class Upgrade:
    """One HTTP request that asked for a route or a WebSocket upgrade."""

    path: str
    headers: Headers
    remote: tuple[str, int] | None  # (host, port) of the peer; None if the socket has none
    _closers: list[Callable[[], None]] = field(default_factory=list, repr=False)
    closed: bool = False

    @property
    def remote_text(self) -> str:
        """`host:port` of the peer, for logs."""
        return f"{self.remote[0]}:{self.remote[1]}" if self.remote else "?"

    def on_close(self, callback: Callable[[], None]) -> None:
        """Call `callback` once when this connection ends (refused, failed or closed)."""
        if self.closed:
            callback()
        else:
            self._closers.append(callback)

    def close(self) -> None:
        """The transport's signal that the connection ended; runs the `on_close` callbacks."""
        if self.closed:
            return
        self.closed = True
        for callback in self._closers:
            callback()
        self._closers.clear()


@dataclass
class HttpReply:
    """A plain-text HTTP response: a route's answer, or a gate's refusal of an upgrade."""

    status: HTTPStatus
    body: str
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def content_type(self) -> str:
        """The Content-Type to send: the one in `headers`, else UTF-8 plain text."""
        return self.headers.get("Content-Type", "text/plain; charset=utf-8")


# A route answers a GET on its path; a gate returns None to let an upgrade through.
Route = Callable[[Upgrade], Awaitable[HttpReply] | HttpReply]
Gate = Callable[[Upgrade], HttpReply | None]


def origin_gate(allowed: list[str]) -> Gate:
    """A gate refusing (HTTP 403) a browser whose `Origin` is not in `allowed`; requests
    without an Origin header (agents that are not browsers) always pass."""
    allowed_set = frozenset(allowed)

    def gate(up: Upgrade) -> HttpReply | None:
        origin = up.headers.get("Origin")
        if origin is None or origin in allowed_set:
            return None
        return HttpReply(HTTPStatus.FORBIDDEN, "origin not allowed\n")

    return gate
