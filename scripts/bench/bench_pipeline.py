"""The request core's own cost a message, without sockets, beside the codec's in the same run.

    python scripts/bench/bench_pipeline.py [--n 20000] [--rounds 5]

A `Pipeline` (stepping handlers at once, as on SQLite) with a sink that only counts answers
`--n` pings three ways: a ping answered at once (`at once`), a ping whose reply is a future
resolved after the next ping was taken up behind it (`waited`: the owed-reply queue, two
pings an iteration), and, as the baseline, the codec alone: decoding the ping and encoding its
pong, what any core must do. It prints the best of `--rounds` in microseconds an iteration and
the core's part over the codec's. Run it with the load average under 2 (`uptime`).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from typing import Any

from host.config import LimitsConfig
from host.core.context import ConnectionContext
from host.core.router import Router
from host.net.pipeline import Pipeline
from protocol.codec import decode_request, encode
from protocol.messages import VERSION, Ping, Pong

PING = '{"type":"ping","id":"p1","version":"1.0"}'
HELD = '{"type":"ping","id":"w1","version":"1.0"}'  # answered with a future


class CountingSink:
    """A transport adapter that only counts what it is given."""

    def __init__(self) -> None:
        self.sent = 0

    def send(self, data: bytes) -> None:
        self.sent += 1

    def set_reading(self, reading: bool) -> None:
        pass

    def end(self) -> None:
        pass


def pong(req_id: str) -> Pong:
    return Pong(id="x", version=VERSION, ts=0.0, req_id=req_id, uptime_seconds=0.0)


async def run(n: int, rounds: int) -> dict[str, float]:
    loop = asyncio.get_running_loop()
    held: list[tuple[asyncio.Future[Any], Pong]] = []
    router = Router()

    async def handler(msg: Ping, ctx: ConnectionContext) -> Any:
        if msg.id[0] == "w":
            fut: asyncio.Future[Any] = loop.create_future()
            held.append((fut, pong(msg.id)))
            return fut
        return pong(msg.id)

    router.register(Ping, handler)
    limits = LimitsConfig(requests_per_second=0)
    best: dict[str, float] = {}
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(n):
            msg = decode_request(PING)
            encode(pong(msg.id))
        best["codec"] = min(best.get("codec", 1e9), (time.perf_counter() - t) / n * 1e6)
        for case in ("at once", "waited"):
            sink = CountingSink()
            p = Pipeline(router, ConnectionContext(conn_id="bench"), limits, sink, step=True)
            t = time.perf_counter()
            for i in range(n):
                if case == "waited":
                    p.receive(HELD)
                    p.receive(PING)  # its reply waits behind the held one
                    fut, reply = held.pop()
                    fut.set_result(reply)
                    await asyncio.sleep(0)  # the future's callback sends both
                else:
                    p.receive(PING)
                    if i % 500 == 0:
                        await asyncio.sleep(0)  # a new turn: the turn's budget starts again
            best[case] = min(best.get(case, 1e9), (time.perf_counter() - t) / n * 1e6)
            assert sink.sent >= n, (case, sink.sent)
            p.close()
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--n", type=int, default=20_000, help="iterations a round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds; the best is printed")
    args = parser.parse_args()
    best = asyncio.run(run(args.n, args.rounds))
    print(f"load average {os.getloadavg()[0]:.2f}; best of {args.rounds} rounds of {args.n}")
    codec = best["codec"]
    for case in ("codec", "at once", "waited"):
        extra = "" if case == "codec" else f"  (core {best[case] - codec:5.2f} us over the codec)"
        print(f"{case:8} {best[case]:6.2f} us an iteration{extra}")


if __name__ == "__main__":
    main()
