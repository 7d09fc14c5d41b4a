"""A delay line: a TCP proxy that holds every chunk `--delay-ms` before passing it on.

    python scripts/tools/delay_proxy.py --target 127.0.0.1:5432 [--listen 127.0.0.1:0] [--delay-ms 1]

Put it between a host and PostgreSQL on one machine and each round trip to the database costs
twice the delay, as it would with the server on another machine (1 ms each way: a 2 ms round
trip, a nearby data centre). Each direction of each connection is a FIFO: a chunk read at t is
written at t + delay, in order, so bandwidth is not limited, only latency added. It prints
`listening HOST:PORT` on stdout once it accepts connections (the port chosen when 0), and runs
until SIGTERM or SIGINT. Loopback addresses only: it is a measuring tool, not a relay.

Each direction is a reader thread and a writer thread (blocking sockets, `TCP_NODELAY`): the
writer sleeps until a chunk is due with `time.sleep` (~0.1 ms late here). Measured against the
asyncio version it replaces (the same server, alternated, load ~1): `SELECT 1` p50/p99 through
asyncpg 2.35/3.39 ms against 2.42/4.06 (direct 0.04/0.18), a 40 kB reply 2.38/3.85 against
2.54/4.04: what the line adds beyond its nominal 2 ms is ~0.3 ms a round trip, not the ~3 ms
once read from the store case (a store is one round trip plus its commit's wait).
`scripts/bench/bench_postgres.py` measures and prints it beside its results.
"""

from __future__ import annotations

import argparse
import ipaddress
import queue
import signal
import socket
import sys
import threading
import time
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
        self._server: socket.socket | None = None
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()

    def start(self) -> None:
        """Listen; `port` is then the port accepting connections (accepted on a thread)."""
        srv = socket.create_server(self.listen)
        self._server = srv
        self.port = srv.getsockname()[1]
        threading.Thread(target=self._accept, args=(srv,), daemon=True).start()

    def close(self) -> None:
        """Stop accepting and drop every connection."""
        if self._server is not None:
            self._server.close()
        with self._lock:
            socks = list(self._open)
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _accept(self, srv: socket.socket) -> None:
        while True:
            try:
                down, _ = srv.accept()
            except OSError:
                return  # closed
            try:
                up = socket.create_connection(self.target)
            except OSError:
                down.close()
                continue
            for s in (down, up):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._open.update((down, up))
            ends = [2]  # both directions done: the sockets close
            for src, dst in ((down, up), (up, down)):
                threading.Thread(target=self._pipe, args=(src, dst, down, up, ends),
                                 daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, down: socket.socket,
              up: socket.socket, ends: list[int]) -> None:
        """Copy `src` to `dst`, each chunk `delay` seconds after it was read (the writing on a
        thread of its own, in order)."""
        line: queue.SimpleQueue[tuple[float, bytes] | None] = queue.SimpleQueue()
        writer = threading.Thread(target=self._send, args=(dst, line), daemon=True)
        writer.start()
        try:
            while data := src.recv(_CHUNK):
                line.put((time.monotonic() + self.delay, data))
        except OSError:
            pass
        line.put(None)
        writer.join()
        with self._lock:
            ends[0] -= 1
            last = ends[0] == 0
            if last:
                self._open.difference_update((down, up))
        if last:
            down.close()
            up.close()

    @staticmethod
    def _send(dst: socket.socket, line: queue.SimpleQueue[tuple[float, bytes] | None]) -> None:
        while (item := line.get()) is not None:
            due, data = item
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            try:
                dst.sendall(data)
            except OSError:
                break
        try:
            dst.shutdown(socket.SHUT_WR)  # the other side's end passed on
        except OSError:
            pass


def main(argv: Sequence[str] | None = None) -> int:
    """Run the delay line until SIGTERM or SIGINT."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", type=_host_port, required=True, help="HOST:PORT to forward to")
    p.add_argument("--listen", type=_host_port, default=("127.0.0.1", 0),
                   help="HOST:PORT to accept on (port 0: any free port; the default)")
    p.add_argument("--delay-ms", type=float, default=1.0,
                   help="milliseconds each chunk waits, each way (default 1)")
    args = p.parse_args(argv)
    sys.setswitchinterval(0.0005)  # a thread woken by its socket gets the GIL soon
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    line = DelayLine(args.target, args.delay_ms / 1000.0, args.listen)
    line.start()
    print(f"listening {args.listen[0]}:{line.port}", flush=True)
    while not stop.wait(1.0):
        pass
    line.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
