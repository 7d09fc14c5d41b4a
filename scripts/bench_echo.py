"""The yardstick of `bench_host.py`: a `websockets` echo server on the host's loop and settings.

It answers every text frame with the same frame, with the host's server settings (uvloop when
installed, no compression, the host's largest frame, the same keepalive pings), so the ratio
host / echo is what the host's own work costs over the raw WebSocket round trip.

    python scripts/bench_echo.py --port 8766     # prints "listening <port>" once bound
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import signal

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


async def _serve(port: int) -> None:
    cfg = Config()
    async with serve(_echo, "127.0.0.1", port, max_size=cfg.limits.max_frame_bytes,
                     compression=None, ping_interval=20, ping_timeout=20) as server:
        print(f"listening {server.sockets[0].getsockname()[1]}", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()


def main() -> None:
    """Serve until SIGTERM or SIGINT."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=0)
    args = p.parse_args()
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    try:
        import uvloop
    except ImportError:
        asyncio.run(_serve(args.port))
    else:
        uvloop.run(_serve(args.port))


if __name__ == "__main__":
    main()
