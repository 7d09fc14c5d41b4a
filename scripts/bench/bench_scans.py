"""What a scan or a sweep of one tenant costs the others: the bystanders' waits beside it.

    python scripts/bench/bench_scans.py [SIZE ...] [--expired 50000] [--reps 3] [--tree PATH]
                                  [--cache DIR]

For each SIZE (default 100000) a SQLite file holds SIZE entries in namespace `big` (keys
`{"ns": ["users", "u<i % 100>", "docs"], "k": i}`, content `{"text": ..., "kind": "note",
"n": i}`) and `--expired` expired entries in namespace `old`; it is built once (in process,
through the store) and kept in `--cache` (a copy is served, so the sweep starts from the same
file every run; `--key-index` creates the key index on the copy). `a2e-host serve` runs on it in a subprocess (no embedder, no collection during
the run), from the tree at `--tree` (default: this one; a worktree of another commit measures
that commit on the same file). While one connection sends each request below, a second one
pings the host and a third stores one entry at a time in a third namespace, each waiting ~2 ms
between its requests; printed for each request: its own time (median of `--reps`), and the
round trips of the pings and of the stores sent during it (p50 / p99 / max, all reps), and its
time alone (median of `--reps` with the bystanders paused; not for the sweep), beside
the same round trips over an idle second before the requests (the baseline, same run), with
the load average (a figure taken above 2 is not a result).

Requests: a `filter` that matches nothing, a `key_prefix` matching 1 % of the entries,
`memory/paths` (100 distinct paths), a plain retrieve (no filter: the total counts the
namespace), 20 filter requests pipelined on one connection (their time: the last reply), and
`memory/sweep` of the `old` namespace (once: it deletes).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import closing
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))  # tests/support
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from support.procs import HostProcess  # noqa: E402

from host.client import MemoryClient  # noqa: E402
from host.store.records import NewEntry, Quotas, Scope  # noqa: E402
from host.store.sqlite import scan_index  # noqa: E402
from host.store.sqlite.store import SQLiteEntryStore  # noqa: E402
from protocol.codec import new_id, now  # noqa: E402
from protocol.keys import canonical_key  # noqa: E402
from protocol.messages import VERSION, MemoryRetrieveRequest  # noqa: E402

AGENT = "bench"
GAP = 0.002  # seconds a bystander waits between two of its requests
# the clients send no keepalive pings: a connection with 20 scans queued is not read until they
# are answered (its pending requests are bounded), so a ping of it would time out
Window = tuple[float, float]


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


async def _build(path: Path, size: int, expired: int) -> None:
    """`size` live entries in `big`, `expired` expired ones in `old`, through the store."""
    t0 = time.time()
    quotas = Quotas(max_entries_per_namespace=size + expired, max_entries_per_agent=size + expired,
                    max_bytes_per_namespace=1 << 40, max_bytes_per_agent=1 << 40)
    async with SQLiteEntryStore(path, quotas=quotas) as store:
        big, old = Scope("big", AGENT), Scope("old", AGENT)
        for lo in range(0, size, 5000):
            done = await store.put(big, [NewEntry(
                "semantic", canonical_key({"ns": ["users", f"u{i % 100}", "docs"], "k": i}),
                f'{{"text":"note {i} about topic {i % 977}","kind":"note","n":{i}}}'.encode())
                for i in range(lo, min(size, lo + 5000))], time.time())
            assert not any(done), "a quota refused the build"
        for lo in range(0, expired, 5000):
            await store.put(old, [NewEntry(
                "semantic", canonical_key({"k": i}), f'{{"n":{i}}}'.encode(), ttl=60,
                updated_at=t0 - 3600) for i in range(lo, min(expired, lo + 5000))], time.time())


async def _bystander(c: MemoryClient, act: Callable[[], Awaitable[Any]],
                     out: list[tuple[float, float]], stop: asyncio.Event,
                     go: asyncio.Event) -> None:
    """`act()` again and again until `stop` (while `go` is set), each round trip recorded as
    (sent, answered)."""
    while not stop.is_set():
        await go.wait()
        t = time.perf_counter()
        await act()
        out.append((t, time.perf_counter()))
        await asyncio.sleep(GAP)


async def _settled(*samples: list[tuple[float, float]]) -> None:
    """Wait until each bystander has a round trip sent after now: a request that waited
    behind the one measured may be answered after it (30 s at most)."""
    t = time.perf_counter()
    deadline = t + 30
    while any(not s or s[-1][0] <= t for s in samples) and time.perf_counter() < deadline:
        await asyncio.sleep(0.005)


def _waits(samples: list[tuple[float, float]], windows: list[Window]) -> list[float]:
    """The round trips (ms) of the samples that overlap one of `windows`."""
    return [(b - a) * 1000 for a, b in samples
            if any(a < w1 and b > w0 for w0, w1 in windows)]


def _stats(ms: list[float]) -> str:
    if not ms:
        return "     -      -      -"
    ms = sorted(ms)
    p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
    return f"{statistics.median(ms):6.1f} {p99:6.1f} {ms[-1]:6.1f}"


async def _measure(url: str, reps: int) -> None:
    req = await MemoryClient.connect(url, ping_interval=None)
    await req.init("big", {"agent": AGENT})
    pinger = await MemoryClient.connect(url, ping_interval=None)
    storer = await MemoryClient.connect(url, ping_interval=None)
    await storer.init("bystander", {"agent": "other"})
    pings: list[tuple[float, float]] = []
    stores: list[tuple[float, float]] = []
    n = [0]

    async def store_one() -> None:
        n[0] += 1
        await storer.store([{"key": {"k": n[0]}, "content": {"n": n[0]}, "tier": "semantic"}])

    stop, go = asyncio.Event(), asyncio.Event()
    go.set()
    tasks = [asyncio.create_task(_bystander(pinger, pinger.ping, pings, stop, go)),
             asyncio.create_task(_bystander(storer, store_one, stores, stop, go))]
    await asyncio.sleep(0.5)  # warm up
    t = time.perf_counter()
    await asyncio.sleep(1.0)
    idle = [(t, time.perf_counter())]
    await _settled(pings, stores)

    async def pipelined() -> None:
        replies = [await req.submit(MemoryRetrieveRequest(
            id=new_id(), version=VERSION, ts=now(), memory_id=req.memory_id or "",
            filter={"kind": "nothing"}, limit=10)) for _ in range(20)]
        await asyncio.gather(*replies)

    async def sweep() -> None:
        old = await MemoryClient.connect(url, ping_interval=None)
        try:
            await old.init("old", {"agent": AGENT})
            t = time.perf_counter()
            deleted = await old.sweep()
            own.append(time.perf_counter() - t)
            windows.append((t, time.perf_counter()))
            print(f"  (the sweep deleted {deleted})")
        finally:
            await old.close()

    ops: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
        ("filter matching nothing", lambda: req.retrieve(filter={"kind": "nothing"})),
        ("key_prefix (1 %)", lambda: req.retrieve(key_prefix={"ns": ["users", "u7"]})),
        ("paths", lambda: req.paths(field="ns")),
        ("plain retrieve", lambda: req.retrieve()),
        ("20 pipelined filters", pipelined),
    ]
    print(f"{'request':<26} {'alone ms':>8} {'own ms':>8}   {'ping p50/p99/max ms':>20}   "
          f"{'store p50/p99/max ms':>20}   load")
    print(f"{'(idle baseline, 1 s)':<26} {'':>8} {'':>8}   {_stats(_waits(pings, idle)):>20}   "
          f"{_stats(_waits(stores, idle)):>20}   {_load()}")
    for name, op in ops:
        go.clear()  # the request alone first, the bystanders paused
        await asyncio.sleep(0.1)  # (their requests under way answered)
        alone: list[float] = []
        for _ in range(reps):
            t = time.perf_counter()
            await op()
            alone.append(time.perf_counter() - t)
        go.set()
        own: list[float] = []
        windows: list[Window] = []
        for _ in range(reps):
            await asyncio.sleep(0.3)
            t = time.perf_counter()
            await op()
            own.append(time.perf_counter() - t)
            windows.append((t, time.perf_counter()))
            await _settled(pings, stores)
        print(f"{name:<26} {statistics.median(alone) * 1000:8.1f}"
              f" {statistics.median(own) * 1000:8.1f}   "
              f"{_stats(_waits(pings, windows)):>20}   {_stats(_waits(stores, windows)):>20}"
              f"   {_load()}")
    own, windows = [], []
    await asyncio.sleep(0.3)
    await sweep()
    await _settled(pings, stores)
    print(f"{'sweep of old':<26} {'':>8} {own[0] * 1000:8.1f}   {_stats(_waits(pings, windows)):>20}   "
          f"{_stats(_waits(stores, windows)):>20}   {_load()}")
    stop.set()
    await asyncio.gather(*tasks)
    for c in (req, pinger, storer):
        await c.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("sizes", nargs="*", type=int, default=[100_000])
    ap.add_argument("--expired", type=int, default=50_000, help="expired entries swept")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--tree", default=str(Path(__file__).resolve().parents[2]),
                    help="the source tree whose host is measured")
    ap.add_argument("--key-index", action="store_true",
                    help="create the key index (host/store/sqlite/scan_index.py) on the copy")
    ap.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "a2e-bench-scans"),
                    help="where the built files are kept")
    args = ap.parse_args()
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    env = {"A2E_HOST_SEARCH_EMBEDDER": "none", "A2E_HOST_GC_INTERVAL": "86400",
           "A2E_HOST_LIMITS_REQUESTS_PER_SECOND": "0"}
    for size in args.sizes:
        built = cache / f"scans-{size}-{args.expired}.db"
        if not built.exists():
            t = time.perf_counter()
            partial = built.with_suffix(".part")
            for p in cache.glob(partial.name + "*"):
                p.unlink()
            asyncio.run(_build(partial, size, args.expired))
            partial.rename(built)
            print(f"built {built} in {time.perf_counter() - t:.0f} s")
        with tempfile.TemporaryDirectory() as tmp:
            db = Path(tmp) / "bench.db"
            shutil.copyfile(built, db)
            if args.key_index:  # until the schema's list has the migration
                with closing(sqlite3.connect(db)) as conn:
                    conn.executescript(scan_index.MIGRATION)
            print(f"\n{size:,} entries in `big`, {args.expired:,} expired in `old`;"
                  f" tree {args.tree}{'; key index' if args.key_index else ''}; load {_load()}")
            host = HostProcess(db, cwd=args.tree, env=env)
            try:
                asyncio.run(_measure(host.url, args.reps))
            finally:
                host.terminate()


if __name__ == "__main__":
    main()
