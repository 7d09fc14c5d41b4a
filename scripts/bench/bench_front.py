"""The HTTP front's CPU a request, without sockets: the host's `HttpFront` (h11 under it)
reading kept-alive requests and writing their replies, one request a read.

    python scripts/bench/bench_front.py [--requests 20000]

A real host (`host.app.Host`, not started: no port, no store traffic) gives the front its
routes and gates; a transport that keeps what the front writes stands in for the socket, so
the figure is the front's own work: parsing, the gates, the route, the reply's bytes. Cases:
`GET /healthz` (the smallest route), and `POST /send` of a 60-byte ping to an HTTP + SSE
session (the SDK's message; the session's reply goes to its buffer, no stream reads it).
Only the front's call is timed (the request core answers between requests, outside it).
Prints microseconds a request and the load average (a figure taken above 2 is not a result).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from host.app import Host  # noqa: E402
from host.config import load_config  # noqa: E402
from host.net.front import HttpFront  # noqa: E402


class _Kept:
    """The socket's side of an asyncio transport: what is written is kept, nothing is sent."""

    def __init__(self) -> None:
        self.out = bytearray()
        self.closed = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 40000) if name == "peername" else default

    def write(self, data: bytes) -> None:
        self.out += data

    def close(self) -> None:
        self.closed = True

    abort = close

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def is_closing(self) -> bool:
        return self.closed


def _attach(*args: Any) -> None:
    raise RuntimeError("no upgrade in this benchmark")


async def _run(host: Host, request: bytes, n: int) -> float:
    kept = _Kept()
    front = HttpFront(host.server, _attach)
    front.connection_made(kept)
    spent = 0.0
    for _ in range(n):
        t0 = time.perf_counter()
        front.data_received(request)
        spent += time.perf_counter() - t0
        await asyncio.sleep(0)  # the request core answers (outside the figure)
    us = spent / n * 1e6
    assert not kept.closed and kept.out.count(b"HTTP/1.1 ") == n, kept.out[-300:]
    front.connection_lost(None)
    return us


async def main(n: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        config = load_config(None, {"store": {"db": str(Path(tmp) / "a.db")},
                                    "search": {"embedder": "none"},
                                    "limits": {"requests_per_second": 0,
                                               "max_unsent_bytes": 1 << 30}})
        host = Host(config)
        await host.server.start(listen=False)
        healthz = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:8765\r\nUser-Agent: bench\r\n\r\n"
        await _run(host, healthz, 500)  # warm up
        h = await _run(host, healthz, n)
        kept = _Kept()
        front = HttpFront(host.server, _attach)
        front.connection_made(kept)
        front.data_received(b"POST /session HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n")
        sid = json.loads(bytes(kept.out).split(b"\r\n\r\n", 1)[1])["session_id"].encode()
        ping = json.dumps({"type": "ping", "id": "p1", "version": "1.0"}).encode()
        send = (b"POST /send HTTP/1.1\r\nHost: 127.0.0.1:8765\r\nContent-Type: text/plain\r\n"
                b"Accept: text/event-stream\r\nX-Session-Id: " + sid
                + b"\r\nContent-Length: %d\r\n\r\n" % len(ping) + ping)
        await _run(host, send, 500)
        s = await _run(host, send, n)
        await host.server.stop(0)
        await host.store.close()
    print(f"GET /healthz: {h:.1f} us a request; POST /send: {s:.1f} us a request"
          f" ({n} each); load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=20_000)
    asyncio.run(main(ap.parse_args().requests))
