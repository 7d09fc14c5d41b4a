#!/usr/bin/env python3
"""What ranking working-tier entries on the store's BM25 scale costs a query.

Starts an in-process host without an embedder (the working tier's cost is keyword work only),
stores the turns of one LoCoMo conversation as episodic entries and `--working` of them again
as working entries of the same session, then asks each question of the conversation with
`tier` episodic only and with every tier, and prints the median and p99 of both.

    python scripts/bench/bench_working_search.py --data DIR --conv 26 --working 100 1000

`--data`: the LoCoMo conversations (see scripts/bench/bench_retrieval.py).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

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
                await c.init("bench", {"agent": "a"})
                await c.store([{"key": {"t": d}, "content": t, "tier": "episodic"}
                               for d, t in turns])
                work = [turns[i % len(turns)] for i in range(n)]
                for i in range(0, n, 500):
                    await c.store([{"key": {"w": i + j}, "content": t, "tier": "working"}
                                   for j, (_, t) in enumerate(work[i:i + 500])])
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--conv", default="26")
    ap.add_argument("--working", type=int, nargs="+", default=[100, 1000])
    add_data_arg(ap)
    args = ap.parse_args()
    asyncio.run(run(args.data, args.conv, args.working))


if __name__ == "__main__":
    main()
