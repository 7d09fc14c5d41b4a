"""A delay line: a TCP proxy that holds every chunk `--delay-ms` before passing it on.

    python scripts/delay_proxy.py --target 127.0.0.1:5432 [--listen 127.0.0.1:0] [--delay-ms 1]

Put it between a host and PostgreSQL on one machine and each round trip to the database costs
twice the delay, as it would with the server on another machine (1 ms each way: a 2 ms round
trip, a nearby data centre). Each direction of each connection is a FIFO: a chunk read at t is
written at t + delay, in order, so bandwidth is not limited, only latency added. It prints
`listening HOST:PORT` on stdout once it accepts connections (the port chosen when 0), and runs
until SIGTERM or SIGINT. Loopback addresses only: it is a measuring tool, not a relay.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import signal
import sys
import time
from collections import deque
from collections.abc import Sequence

__all__ = ["DelayLine", "main"]

_CHUNK = 256 * 1024


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _host_port(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT")
    if not _loopback(host.strip("[]")):
        raise argparse.ArgumentTypeError(f"{host!r} is not a loopback address")
    return host.strip("[]"), int(port)


class DelayLine:
    """Accepts on `listen`, connects each client to `target`, delays both directions."""

    def __init__(self, target: tuple[str, int], delay: float,
                 listen: tuple[str, int] = ("127.0.0.1", 0)) -> None:
        self.target = target
        self.delay = delay
        self.listen = listen
        self.port = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        """Listen; `port` is then the port accepting connections."""
        self._server = await asyncio.start_server(self._accept, *self.listen)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        """Stop accepting and drop every connection."""
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_r, up_w = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        for task in (asyncio.create_task(self._pipe(reader, up_w)),
                     asyncio.create_task(self._pipe(up_r, writer))):
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Copy `reader` to `writer`, each chunk `delay` seconds after it was read."""
        line: deque[tuple[float, bytes]] = deque()
        ready = asyncio.Event()
        done = False

        async def send() -> None:
            while line or not done:
                if not line:
                    ready.clear()
                    await ready.wait()
                    continue
                due, data = line[0]
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                line.popleft()
                writer.write(data)
                await writer.drain()

        sender = asyncio.create_task(send())
        try:
            while data := await reader.read(_CHUNK):
                line.append((time.monotonic() + self.delay, data))
                ready.set()
            done = True
            ready.set()
            await sender
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            sender.cancel()
            writer.close()


async def _serve(args: argparse.Namespace) -> None:
    line = DelayLine(args.target, args.delay_ms / 1000.0, args.listen)
    await line.start()
    print(f"listening {args.listen[0]}:{line.port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await line.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the delay line until SIGTERM or SIGINT."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", type=_host_port, required=True, help="HOST:PORT to forward to")
    p.add_argument("--listen", type=_host_port, default=("127.0.0.1", 0),
                   help="HOST:PORT to accept on (port 0: any free port; the default)")
    p.add_argument("--delay-ms", type=float, default=1.0,
                   help="milliseconds each chunk waits, each way (default 1)")
    args = p.parse_args(argv)
    asyncio.run(_serve(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
