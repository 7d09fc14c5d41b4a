"""The `websockets` transport (the default): the server's routes and gates over
`websockets.asyncio.server`, each connection served by `host.net.connection.Connection`.

`websockets` closes a connection itself with 1009 for a frame over `limits.max_frame_bytes`
and with 1007 for a text frame that is not UTF-8, answers pings, and pings an idle peer every
20 s (closing it after 20 s without a pong).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.http11 import Request, Response

from host.net.connection import Connection
from host.net.http import Headers, HttpReply, Upgrade
from host.net.tls import ssl_context

if TYPE_CHECKING:
    from host.net.server import HostServer

__all__ = ["listen"]


class _Listening:
    def __init__(self, server: Server) -> None:
        self.server = server

    def port(self) -> int:
        return int(self.server.sockets[0].getsockname()[1])

    def stop_accepting(self) -> None:
        self.server.close(close_connections=False)

    async def wait_closed(self) -> None:
        await self.server.wait_closed()


def _response(conn: ServerConnection, reply: HttpReply) -> Response:
    response = conn.respond(reply.status, reply.body)
    for name, value in reply.headers.items():
        if name in response.headers:
            del response.headers[name]
        response.headers[name] = value
    return response


async def listen(host: HostServer) -> _Listening:
    """Bind `host.config.server`'s address and serve until the listener is stopped."""
    upgrades: dict[ServerConnection, Upgrade] = {}

    async def process_request(conn: ServerConnection, request: Request) -> Any:
        addr = conn.remote_address
        up = Upgrade(request.path, Headers(request.headers.raw_items()),
                     (str(addr[0]), int(addr[1])) if addr else None)
        route = host.route(request.path)
        if route is not None:
            return _response(conn, await host.answer(route, up))
        upgrades[conn] = up

        def ended(_: object) -> None:
            upgrades.pop(conn, None)
            up.close()

        conn.connection_lost_waiter.add_done_callback(ended)
        refusal = host.refusal(up)
        return None if refusal is None else _response(conn, refusal)

    async def handle(ws: ServerConnection) -> None:
        conn = Connection(ws, host.router, host.next_conn_id(), upgrades[ws],
                          limits=host.config.limits, on_request=host.on_request)
        host.opened(conn)
        try:
            await conn.run()
        finally:
            host.closed(conn)

    srv = host.config.server
    server = await serve(
        handle,
        srv.host,
        srv.port,
        max_size=host.config.limits.max_frame_bytes,
        compression="deflate" if srv.compression else None,
        process_request=process_request,
        ssl=ssl_context(srv),
        ping_interval=20,
        ping_timeout=20,
    )
    return _Listening(server)
