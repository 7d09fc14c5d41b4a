"""The yardstick of `bench_host.py`: a `websockets` echo server on the host's loop and settings.

It answers every text frame with the same frame, with the host's server settings (uvloop when
installed, no compression, the host's largest frame, the same keepalive pings), so the ratio
host / echo is what the host's own work costs over the raw WebSocket round trip.
`--transport picows` serves the same echo with picows instead (for reference: the ceiling of
the host's picows transport).

    python scripts/bench/bench_echo.py --port 8766     # prints "listening <port>" once bound
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import signal
from typing import Any

from picows import WSFrame, WSListener, WSMsgType, WSTransport, ws_create_server
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from host.config import Config

__all__ = ["main"]


async def _echo(ws: ServerConnection) -> None:
    try:
        async for frame in ws:
            await ws.send(frame)
    except ConnectionClosed:
        pass


async def _until_signalled(server: Any) -> None:
    """Print the bound port, then wait for SIGTERM or SIGINT."""
    print(f"listening {server.sockets[0].getsockname()[1]}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()


class _PicowsEcho(WSListener):  # type: ignore[misc]
    def on_ws_frame(self, transport: WSTransport, frame: WSFrame) -> None:
        if frame.msg_type == WSMsgType.TEXT:
            transport.send(WSMsgType.TEXT, frame.get_payload_as_bytes())
        elif frame.msg_type == WSMsgType.CLOSE:
            transport.send_close(frame.get_close_code(), frame.get_close_message())
            transport.disconnect()


async def _serve_picows(port: int) -> None:
    cfg = Config()
    server = await ws_create_server(
        lambda _: _PicowsEcho(), "127.0.0.1", port, max_frame_size=cfg.limits.max_frame_bytes,
        enable_auto_ping=True, auto_ping_idle_timeout=20, auto_ping_reply_timeout=20)
    await _until_signalled(server)
    server.close()


async def _serve(port: int) -> None:
    cfg = Config()
    async with serve(_echo, "127.0.0.1", port, max_size=cfg.limits.max_frame_bytes,
                     compression=None, ping_interval=20, ping_timeout=20) as server:
        await _until_signalled(server)


def main() -> None:
    """Serve until SIGTERM or SIGINT."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--transport", choices=("websockets", "picows"), default="websockets")
    args = p.parse_args()
    serve_fn = _serve_picows if args.transport == "picows" else _serve
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    try:
        import uvloop
    except ImportError:
        asyncio.run(serve_fn(args.port))
    else:
        uvloop.run(serve_fn(args.port))


if __name__ == "__main__":
    main()
