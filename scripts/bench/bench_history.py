#!/usr/bin/env python3
"""What history costs a store that overwrites: SQLite puts that change an entry's content, with
the history triggers and without them, alternated in one run.

Every store that changes a live entry's content keeps the version it replaces
(`host/store/sqlite/history.py`: a trigger copies the old row into `entry_history`, then keeps
the key's newest `history.keep` versions). This drives `SQLiteEntryStore.put` directly (no
wire: the cost is the database's), `--concurrency` puts in flight (group commits), each
overwriting one of `--keys` keys with new content, on two databases filled alike: one as
the host keeps it, one with the two history triggers dropped (the store before history: the
baseline, measured in the same run). Rounds alternate the two; each prints puts a second and
the load average. New keys (a store's common case) write no history and are not measured.

    python scripts/bench/bench_history.py [--rounds 3] [--seconds 3] [--keys 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from host.store.records import NewEntry, Scope  # noqa: E402
from host.store.sqlite.store import SQLiteEntryStore  # noqa: E402

SCOPE = Scope("bench", "agent")


def entry(k: int, n: int) -> NewEntry:
    return NewEntry(tier="episodic", key=b'{"k":%d}' % k,
                    content=b'"version %d of the fact numbered %d, told in a short sentence."'
                    % (n, k))


async def fill(path: str, keys: int, history: bool) -> None:
    async with SQLiteEntryStore(path) as store:
        for i in range(0, keys, 500):
            await store.put(SCOPE, [entry(k, 0) for k in range(i, min(keys, i + 500))], 0.0)
    if not history:  # the store before history
        with sqlite3.connect(path) as conn:
            conn.execute("DROP TRIGGER entries_history_au")
            conn.execute("DROP TRIGGER entries_history_ad")


async def overwrite(path: str, keys: int, seconds: float, concurrency: int, start: int) -> float:
    """Puts a second over `seconds`, each a new content for the next key."""
    async with SQLiteEntryStore(path) as store:
        n = start
        done = 0
        end = time.perf_counter() + seconds
        t0 = time.perf_counter()
        while time.perf_counter() < end:
            batch = [store.put(SCOPE, [entry((n + j) % keys, n + j)], float(n + j))
                     for j in range(concurrency)]
            await asyncio.gather(*batch)
            n += concurrency
            done += concurrency
        return done / (time.perf_counter() - t0)


async def run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="a2e-history-") as tmp:
        paths = {"with history": f"{tmp}/on.db", "without (before)": f"{tmp}/off.db"}
        for name, path in paths.items():
            await fill(path, args.keys, name == "with history")
        print("| round | store | overwrites/s | load average |\n|---|---|---|---|")
        start = 1
        for r in range(1, args.rounds + 1):
            for name, path in paths.items():
                rate = await overwrite(path, args.keys, args.seconds, args.concurrency, start)
                print(f"| {r} | {name} | {rate:,.0f} | {os.getloadavg()[0]:.2f} |", flush=True)
            start += 1_000_000
        with sqlite3.connect(paths["with history"]) as conn:
            rows = conn.execute("SELECT count(*) FROM entry_history").fetchone()[0]
        print(f"\nhistory rows kept: {rows:,} ({args.keys:,} keys, at most 10 versions each)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3.0, help="measured seconds a round")
    ap.add_argument("--keys", type=int, default=1000, help="keys overwritten round robin")
    ap.add_argument("--concurrency", type=int, default=32, help="puts in flight")
    asyncio.run(run(ap.parse_args()))


if __name__ == "__main__":
    main()
