#!/usr/bin/env python3
"""A simulated year of one agent under an entry quota with `limits.on_full = "evict"`, against
the same year with no quota (docs/growth.md).

    python scripts/bench/bench_growth.py                          # 200,000 stores, quota 20,000
    python scripts/bench/bench_growth.py --stores 40000 --quota 4000 --queries 100
    python scripts/bench/bench_growth.py --backend postgres --json

The year, seeded (the same stores in both runs): `--stores` store requests of one entry by one
agent in one namespace, one at a time over a WebSocket to a host in this process (its clock
moved on a year over the run, so entries age; `search.embedder = "none"`: keyword queries), of
which
- 80 % a conversation turn under a key of its own (`{"turn": i}`), 8 made-up words, score 0.3
  (70 %), 0.6 (25 %) or 0.9 (5 %);
- 10 % an update of one of `--facts` facts (`{"fact": f}`, score 0.9, its content naming the
  fact's own word and its version: the current fact is the last one written);
- 10 % a fact repeated as a turn (a new key, score 0.3, the fact's word and an old version).
After each tenth of the run, once the host's collector has run (as it does every
`gc.interval`: expired entries, the change log pruned to `watch.retention_seconds` of the
simulated clock): the agent's entries, the database's size (SQLite: the file and its WAL;
PostgreSQL: `pg_database_size`), this process's RSS (the host and the client: VmRSS), the
store p50/p99 of that tenth, and `--queries` keyword queries (the word of a random written
fact; top 10) p50/p99; then, over every fact written so far, how often its current version is
still stored ("survives": read by key) and how often a query of its word has the current
version in its top 10 ("found").

Modes: `evict` (`limits.max_entries_per_agent = --quota`, `on_full = "evict"`) and `none` (no
quota: every entry stays). Prints a table a mode and the load average before and after; a
figure taken at load average above 2 is indicative only. `--json` prints the report as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))  # tests/support

from host.app import Host  # noqa: E402
from host.client import MemoryClient  # noqa: E402
from host.config import Config  # noqa: E402
from protocol.clock import ShiftedClock  # noqa: E402

YEAR = 365 * 86400.0
WORDS = [f"w{i:04d}" for i in range(4096)]


def rss_mib() -> float:
    """This process's resident set (VmRSS) in MiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def percentile(values: list[float], p: float) -> float:
    """The `p` quantile of `values` (ms), NaN for none."""
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(p * len(s)))]


def the_year(stores: int, facts: int, seed: int) -> list[tuple[dict[str, Any], int]]:
    """The stores of the year: (entry, fact number or -1)."""
    rng = random.Random(seed)
    versions = [0] * facts
    out = []
    for i in range(stores):
        r = rng.random()
        words = " ".join(rng.choices(WORDS, k=8))
        if r < 0.8:
            score = rng.choices((0.3, 0.6, 0.9), weights=(70, 25, 5))[0]
            out.append(({"key": {"turn": i}, "content": {"text": words}, "tier": "episodic",
                         "score": score}, -1))
        elif r < 0.9:
            f = rng.randrange(facts)
            versions[f] += 1
            out.append(({"key": {"fact": f}, "content": {
                "text": f"fact{f:04d} version v{versions[f]} {words}"}, "tier": "episodic",
                "score": 0.9}, f))
        else:
            f = rng.randrange(facts)
            out.append(({"key": {"turn": i}, "content": {
                "text": f"fact{f:04d} repeated v{max(0, versions[f] - 1)} {words}"},
                "tier": "episodic", "score": 0.3}, -1))
    return out


def config(db: str, quota: int | None) -> Config:
    limits: dict[str, Any] = {"max_entries_per_agent": quota or 10_000_000,
                              "max_entries_per_namespace": 10_000_000,
                              "max_bytes_per_agent": 1 << 40, "max_bytes_per_namespace": 1 << 40,
                              "on_full": "evict" if quota else "refuse"}
    return Config.model_validate({
        "store": {"db": db}, "server": {"host": "127.0.0.1", "port": 0},
        "search": {"embedder": "none"}, "limits": limits, "gc": {"interval": 3600},
        "ui": {"enabled": False}})


async def db_bytes(host: Host, db: str) -> int:
    """The database's size on disk."""
    pool = getattr(host.store, "pool", None)
    if pool is not None:
        return int(await pool.fetchval("SELECT pg_database_size(current_database())"))
    return sum(os.path.getsize(p) for p in (db, db + "-wal") if os.path.exists(p))


async def run(db: str, year: list[tuple[dict[str, Any], int]], quota: int | None,
              queries: int, seed: int, echo: bool = False) -> list[dict[str, Any]]:
    """One mode over `year`: a row of figures a tenth (each printed as it comes with
    `echo`, so a run cut short keeps what it measured)."""
    rng = random.Random(seed + 1)
    clock = ShiftedClock()
    step = YEAR / len(year)
    host = Host(config(db, quota), clock=clock)
    await host.start()
    rows: list[dict[str, Any]] = []
    current: dict[int, str] = {}  # fact -> the text of its current version
    try:
        async with await MemoryClient.connect(f"ws://127.0.0.1:{host.port}") as c:
            await c.init("year", {"agent": "agent"})
            tenth = max(1, len(year) // 10)
            store_ms: list[float] = []
            evicted = 0
            for i, (e, fact) in enumerate(year, start=1):
                t = time.perf_counter()
                reply = await c.store([e])
                store_ms.append(1000 * (time.perf_counter() - t))
                evicted += reply.evicted or 0
                if fact >= 0:
                    current[fact] = e["content"]["text"]
                clock.advance(step)
                if i % tenth and i != len(year):
                    continue
                await host.gc.collect_once()  # its periodic run: expiry, the change log pruned
                query_ms: list[float] = []
                found = 0
                asked = rng.sample(sorted(current), min(queries, len(current)))
                for f in asked:
                    t = time.perf_counter()
                    hits = (await c.retrieve(query=f"fact{f:04d}", limit=10)).entries
                    query_ms.append(1000 * (time.perf_counter() - t))
                    found += any(h["content"].get("text") == current[f] for h in hits)
                survived = 0
                for f, text in current.items():
                    got = (await c.retrieve(keys=[{"fact": f}], limit=1)).entries
                    survived += bool(got) and got[0]["content"]["text"] == text
                total = (await c.retrieve(tier="episodic", limit=1)).total
                rows.append({
                    "stores": i, "entries": total, "evicted": evicted,
                    "db_mib": round(await db_bytes(host, db) / 2**20, 1),
                    "rss_mib": round(rss_mib(), 1),
                    "store_p50_ms": round(percentile(store_ms, 0.5), 2),
                    "store_p99_ms": round(percentile(store_ms, 0.99), 2),
                    "query_p50_ms": round(percentile(query_ms, 0.5), 2),
                    "query_p99_ms": round(percentile(query_ms, 0.99), 2),
                    "facts": len(current),
                    "survives": round(survived / len(current), 3) if current else None,
                    "found": round(found / len(asked), 3) if asked else None,
                })
                if echo:
                    print(table(rows[-1:], header=len(rows) == 1), flush=True)
                store_ms = []
    finally:
        await host.stop()
    return rows


def table(rows: list[dict[str, Any]], header: bool = True) -> str:
    cols = list(rows[0]) if rows else []
    lines = ["  ".join(f"{c:>12}" for c in cols)] if header else []
    lines += ["  ".join(f"{r[c]!s:>12}" for c in cols) for r in rows]
    return "\n".join(lines)


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stores", type=int, default=200_000)
    ap.add_argument("--quota", type=int, default=0, help="entries (default: stores / 10)")
    ap.add_argument("--facts", type=int, default=200)
    ap.add_argument("--queries", type=int, default=200, help="keyword queries a tenth")
    ap.add_argument("--modes", default="evict,none")
    ap.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    quota = args.quota or max(1, args.stores // 10)
    year = the_year(args.stores, args.facts, args.seed)
    load_before = os.getloadavg()[0]
    report: dict[str, Any] = {"stores": args.stores, "quota": quota, "backend": args.backend,
                              "load_before": round(load_before, 2), "modes": {}}
    with tempfile.TemporaryDirectory(prefix="bench_growth_") as work:
        pg = None
        if args.backend == "postgres":
            from support.postgres import EmbeddedPostgres
            pg = EmbeddedPostgres(Path(work) / "pg")
            pg.start()
        try:
            for mode in args.modes.split(","):
                if pg is not None:
                    db = pg.create_database(f"growth_{mode}")
                else:
                    db = str(Path(work) / f"{mode}.db")
                started = time.perf_counter()
                if not args.json:
                    print(f"mode {mode}", flush=True)
                rows = await run(db, year, quota if mode == "evict" else None, args.queries,
                                 args.seed, echo=not args.json)
                report["modes"][mode] = {"seconds": round(time.perf_counter() - started, 1),
                                         "tenths": rows}
                if not args.json:
                    print(f"  ({report['modes'][mode]['seconds']} s)", flush=True)
        finally:
            if pg is not None:
                pg.stop()
    report["load_after"] = round(os.getloadavg()[0], 2)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"{args.stores} stores, quota {quota}, {args.backend}; load average"
              f" {report['load_before']} before, {report['load_after']} after"
              + (" (above 2: indicative only)" if max(load_before, report["load_after"]) > 2
                 else ""))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
