"""HTTP on the host's port, the same under every transport: requests, replies, routes, gates.

The listener (`host.net.front`) reads each HTTP/1.1 request on the port itself (any method,
a body of at most `limits.max_frame_bytes`, else 413) and either upgrades it to a WebSocket
(`GET` with `Upgrade: websocket`, on no route's path) or answers it through a route:

    async def route(request: HttpRequest) -> HttpReply | HttpStream: ...
    HostServer(..., routes={"/metrics": route},   # exactly this path
               prefix_routes={"/ui": route})      # "/ui" and every path under "/ui/"

(the routes are given to `host.net.server.HostServer` in one place, `host.app.Host`).

- `HttpRequest`: `method`, `path` (without the query), `query` (the raw query string;
  `params()` decodes it), `headers` (case-insensitive `get`), `body` (bytes; `form()` decodes
  an `application/x-www-form-urlencoded` one), `remote` ((host, port) of the peer or None).
- `HttpReply(status, body, headers, cookies)`: `body` is str (sent as UTF-8) or bytes;
  `headers` a dict (Content-Type defaults to UTF-8 plain text); `cookies` a list of
  `Set-Cookie` values, one header each. Sent with Content-Length; the connection is kept
  alive (HTTP/1.1) unless the client asked to close. A header value with CR or LF is never
  written (h11 refuses it; the client gets a 500 instead).
- `HttpStream(status, body, headers, cookies)`: a streaming response (SSE): the head at once,
  then each bytes chunk of the async iterator `body` as it comes (chunked transfer encoding,
  written with the socket's flow control); the iterator is closed when the client goes.

Gates (`host.net.gates`: the Origin and Host checks, authentication) read a request before its
WebSocket upgrade and answer a refusal as an `HttpReply`; a route applies them itself
(`host.net.server.HostServer.refusal`), as the HTTP + SSE endpoints do. Connection limits are applied when the TCP connection
is accepted, before any request is read (`host.net.limits.ConnectionLimiter`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from http import HTTPStatus
from urllib.parse import parse_qsl

__all__ = ["Gate", "Headers", "HttpReply", "HttpRequest", "HttpStream", "Route",
           "first_values", "form_fields", "get_only"]


def first_values(query: str) -> dict[str, str]:
    """The parameters of a query string or urlencoded form (the first value of each)."""
    out: dict[str, str] = {}
    for k, v in parse_qsl(query, keep_blank_values=True):
        out.setdefault(k, v)
    return out


def form_fields(content_type: str | None, body: bytes) -> dict[str, str]:
    """An `application/x-www-form-urlencoded` body's fields (the first value of each); empty
    for a body of another type or not UTF-8."""
    kind = (content_type or "").split(";", 1)[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        return {}
    try:
        return first_values(body.decode())
    except UnicodeDecodeError:
        return {}


class Headers:
    """Request headers with case-insensitive names; `get` returns the first value."""

    __slots__ = ("_items", "raw")

    def __init__(self, items: Iterable[tuple[str, str]]) -> None:
        self.raw = list(items)
        self._items: dict[str, str] = {}
        for name, value in self.raw:
            self._items.setdefault(name.lower(), value)

    def get(self, name: str, default: str | None = None) -> str | None:
        """The value of header `name`, or `default` when the request has none."""
        return self._items.get(name.lower(), default)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._items


@dataclass(eq=False)
class HttpRequest:
    """One HTTP request on the host's port: a route's input, or a WebSocket upgrade."""

    path: str
    headers: Headers
    remote: tuple[str, int] | None  # (host, port) of the peer; None if the socket has none
    method: str = "GET"
    query: str = ""
    body: bytes = b""
    _closers: list[Callable[[], None]] = field(default_factory=list, repr=False)
    closed: bool = False

    @property
    def remote_text(self) -> str:
        """`host:port` of the peer, for logs."""
        return f"{self.remote[0]}:{self.remote[1]}" if self.remote else "?"

    def params(self) -> dict[str, str]:
        """The query string's parameters (the first value of each)."""
        return first_values(self.query)

    def form(self) -> dict[str, str]:
        """The body's fields when it is a urlencoded form (`form_fields`)."""
        return form_fields(self.headers.get("Content-Type"), self.body)

    def on_close(self, callback: Callable[[], None]) -> None:
        """Call `callback` once when this request's connection ends (refused, failed or
        closed)."""
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
    """An HTTP response with its whole body: a route's answer, or a gate's refusal."""

    status: HTTPStatus | int
    body: str | bytes = ""
    headers: dict[str, str] = field(default_factory=dict)
    cookies: list[str] = field(default_factory=list)

    @property
    def content_type(self) -> str:
        """The Content-Type to send: the one in `headers`, else UTF-8 plain text."""
        for name, value in self.headers.items():
            if name.lower() == "content-type":
                return value
        return "text/plain; charset=utf-8"

    def payload(self) -> bytes:
        """The body as bytes."""
        return self.body.encode() if isinstance(self.body, str) else self.body


@dataclass
class HttpStream:
    """A streaming HTTP response: the head at once, then each chunk of `body` as it comes."""

    status: HTTPStatus | int
    body: AsyncIterator[bytes]
    headers: dict[str, str] = field(default_factory=dict)
    cookies: list[str] = field(default_factory=list)


# A route answers the requests on its path; a gate returns None to let an upgrade through.
Route = Callable[[HttpRequest], Awaitable[HttpReply | HttpStream] | HttpReply | HttpStream]
Gate = Callable[[HttpRequest], HttpReply | None]


def get_only(route: Callable[[HttpRequest], Awaitable[HttpReply] | HttpReply]) -> Route:
    """`route` for GET and HEAD; any other method is answered 405."""

    def only(request: HttpRequest) -> Awaitable[HttpReply] | HttpReply:
        if request.method not in ("GET", "HEAD"):
            return HttpReply(HTTPStatus.METHOD_NOT_ALLOWED, "GET only\n", {"Allow": "GET, HEAD"})
        return route(request)

    return only
