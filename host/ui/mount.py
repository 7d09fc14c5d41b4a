"""The memory browser on the host's HTTP path: `route(app)` is the `host.net` route of `/ui`.

    server.add_route("/ui", route(app, secure=tls), prefix=True)

It turns the transport's `HttpRequest` into the app's `Request` and the app's `Response` into
an `HttpReply` (`Set-Cookie` headers as the reply's cookies), or an `HttpStream` for a
streamed download; nothing else.
"""

from __future__ import annotations

from urllib.parse import parse_qs

from host.net.http import HttpReply, HttpRequest, HttpStream, Route
from host.ui.app import UiApp
from host.ui.web import Request

__all__ = ["route"]


def route(app: UiApp, secure: bool = False) -> Route:
    """The `host.net` route serving `app` (`secure`: the port speaks TLS)."""

    async def serve(request: HttpRequest) -> HttpReply | HttpStream:
        req = Request(
            method=request.method.upper(), path=request.path, query=parse_qs(request.query),
            headers={n.lower(): v for n, v in reversed(request.headers.raw)},
            body=request.body, remote=request.remote[0] if request.remote else None,
            secure=secure,
        )
        response = await app.handle(req)
        headers: dict[str, str] = {}
        cookies: list[str] = []
        for name, value in response.headers:
            if name.lower() == "set-cookie":
                cookies.append(value)
            else:
                headers[name] = value
        if response.stream is not None:  # a download: chunked, page by page
            return HttpStream(response.status, response.stream, headers, cookies)
        return HttpReply(response.status, response.body, headers, cookies)

    return serve
