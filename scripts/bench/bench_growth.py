#!/usr/bin/env python3
"""A simulated year of one agent under an entry quota with `limits.on_full = "evict"`, against
the same year with no quota (docs/growth.md).

    python scripts/bench/bench_growth.py                          # 200,000 stores, quota 20,000
    python scripts/bench/bench_growth.py --stores 40000 --quota 4000 --queries 100
    python scripts/bench/bench_growth.py --backend postgres --pg-detail --json
    python scripts/bench/bench_growth.py --modes fade --half-life 30   # evict, importance fading

The year, seeded (the same stores in both runs): `--stores` store requests of one entry by one
agent in one namespace, one at a time over a WebSocket to a host in this process (its clock
moved on a year over the run, so entries age; `search.embedder = "none"`: keyword queries), of
which
- 80 % a conversation turn under a key of its own (`{"turn": i}`), 8 made-up words, score 0.3
  (70 %), 0.6 (25 %) or 0.9 (5 %);
- 10 % an update of one of `--facts` facts (`{"fact": f}`, score 0.9, its content naming the
  fact's own word and its version: the current fact is the last one written);
- 10 % a fact repeated as a turn (a new key, score 0.3, the fact's word and an old version);
- `--hot` turns of score 0.6 written first (`{"hot": h}`) and read by key over the wire, one
  every `--read-every` stores in turn: a few entries read often;
- the judgement families of `scripts/bench/eval_judgement.py` (`scripts/bench/data/
  judgement.json`: updates and silent updates, the older said in the first 40 % of the year and
  the newer in the next 20 %; similar pairs; paraphrase clusters and distinct facts in the first
  half), each a turn of score 0.6 at a position of its own.
After each tenth of the run, once the host's collector has run (as it does every
`gc.interval`: expired entries, the change log pruned to `watch.retention_seconds` of the
simulated clock): the agent's entries, the database's size (SQLite: the file and its WAL;
PostgreSQL: `pg_database_size`), this process's RSS (the host and the client: VmRSS), the
store p50/p99 of that tenth, and `--queries` keyword queries (the word of a random written
fact; top 10) p50/p99 (over the wire: they are reads, and refresh what they return); then,
over every fact written so far, how often its current version is still stored ("survives")
and how often a query of its word has the current version in its top 10 ("found"); the share
of hot entries still stored; for the judgement families, once their newer texts are written,
the share of newer texts stored ("fam_kept") and of questions with the newer text in their
top 10 ("fam_found"), and of similar pairs with both members stored ("sim_kept"). These checks
read in the process (the store's `find`, the plugin's ranking), not over the wire, so they
refresh nothing.

Modes: `evict` (`limits.max_entries_per_agent = --quota`, `on_full = "evict"`), `fade` (the
same with `ranking.importance_half_life = --half-life` days) and `none` (no quota: every entry
stays). The year is generated as it is stored (the benchmark holds no list of it), so the RSS
is the host's and a client's. Prints a table a mode, the one-minute load average beside each
tenth, before and after; a figure taken at load average above 2 is indicative only.
`--pg-detail` adds, on PostgreSQL, each tenth's largest relations (heap, indexes, TOAST), their
dead rows and autovacuum runs, and at the end the size once the entries' indexes are rebuilt
(`REINDEX TABLE a2e_entries`, then `VACUUM`); `--vacuum` runs `VACUUM` after each tenth: a year stored in
minutes outruns autovacuum, whose runs are minutes apart (`autovacuum_naptime`), where a real
year gives it hours between a few stores. `--json` prints the report as JSON.
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
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # tests/support

from host.app import Host  # noqa: E402
from host.client import MemoryClient  # noqa: E402
from host.config import Config  # noqa: E402
from host.store.records import PERSISTENT_TIERS, Query, Scope  # noqa: E402
from protocol.clock import ShiftedClock  # noqa: E402
from protocol.keys import canonical_key  # noqa: E402

YEAR = 365 * 86400.0
WORDS = [f"w{i:04d}" for i in range(4096)]
FAMILIES = ROOT / "scripts" / "bench" / "data" / "judgement.json"
SCOPE = Scope("year", "agent")
FAMILY_SCORE = 0.6
HOT_SCORE = 0.6  # as a quarter of the turns: among those, reads decide which stay


@dataclass
class Families:
    """The judgement families placed in the year: store position -> text, and what to check."""

    at: dict[int, str] = field(default_factory=dict)
    newer: list[tuple[int, str, str]] = field(default_factory=list)  # (position, text, question)
    pairs: list[tuple[str, str]] = field(default_factory=list)  # similar pairs
    written_by: int = 0  # the position after which every newer text is written


def families(stores: int, seed: int) -> Families:
    """Where each family text goes: an update's older text in the first 40 % of the year and its
    newer in the next 20 %, similar pairs likewise, clusters and distinct facts in the first half
    (positions after the hot entries)."""
    data = json.loads(FAMILIES.read_text())
    rng = random.Random(seed + 7)
    fam = Families()
    free = list(range(stores // 100, stores))
    used: set[int] = set()

    def place(lo: float, hi: float, text: str) -> int:
        while True:
            i = rng.randrange(int(lo * stores), max(int(lo * stores) + 1, int(hi * stores)))
            if i not in used and i >= free[0]:
                used.add(i)
                fam.at[i] = text
                return i

    for case in data["updates"] + data["silent_updates"]:
        place(0.0, 0.4, case["old"])
        fam.newer.append((place(0.4, 0.6, case["new"]), case["new"], case["question"]))
    for case in data["similar"]:
        place(0.2, 0.4, case["first"])
        place(0.4, 0.6, case["second"])
        fam.pairs.append((case["first"], case["second"]))
    for text in [t for c in data["clusters"] for t in c] + data["distinct"]:
        place(0.0, 0.5, text)
    fam.written_by = max(i for i, _, _ in fam.newer)
    return fam


def the_year(stores: int, facts: int, hot: int, fam: Families, seed: int
             ) -> Iterator[tuple[dict[str, Any], int]]:
    """The stores of the year, generated as they are stored: (entry, fact number or -1)."""
    rng = random.Random(seed)
    versions = [0] * facts
    for i in range(stores):
        r = rng.random()
        words = " ".join(rng.choices(WORDS, k=8))
        if i < hot:
            yield ({"key": {"hot": i}, "content": {"text": f"hot{i:02d} {words}"},
                    "tier": "episodic", "score": HOT_SCORE}, -1)
        elif i in fam.at:
            yield ({"key": {"turn": i}, "content": {"text": fam.at[i]}, "tier": "episodic",
                    "score": FAMILY_SCORE}, -1)
        elif r < 0.8:
            score = rng.choices((0.3, 0.6, 0.9), weights=(70, 25, 5))[0]
            yield ({"key": {"turn": i}, "content": {"text": words}, "tier": "episodic",
                    "score": score}, -1)
        elif r < 0.9:
            f = rng.randrange(facts)
            versions[f] += 1
            yield ({"key": {"fact": f}, "content": {
                "text": f"fact{f:04d} version v{versions[f]} {words}"}, "tier": "episodic",
                "score": 0.9}, f)
        else:
            f = rng.randrange(facts)
            yield ({"key": {"turn": i}, "content": {
                "text": f"fact{f:04d} repeated v{max(0, versions[f] - 1)} {words}"},
                "tier": "episodic", "score": 0.3}, -1)


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


def config(db: str, quota: int | None, half_life_days: float = 0.0) -> Config:
    limits: dict[str, Any] = {"max_entries_per_agent": quota or 10_000_000,
                              "max_entries_per_namespace": 10_000_000,
                              "max_bytes_per_agent": 1 << 40, "max_bytes_per_namespace": 1 << 40,
                              "on_full": "evict" if quota else "refuse"}
    return Config.model_validate({
        "store": {"db": db}, "server": {"host": "127.0.0.1", "port": 0},
        "search": {"embedder": "none"}, "limits": limits, "gc": {"interval": 3600},
        "ranking": {"importance_half_life": half_life_days * 86400.0},
        "ui": {"enabled": False}})


def _pool(host: Host) -> Any:
    return getattr(host.store, "pool", None) if "Postgres" in type(host.store).__name__ \
        else None


async def db_bytes(host: Host, db: str) -> int:
    """The database's size on disk."""
    pool = _pool(host)
    if pool is not None:
        return int(await pool.fetchval("SELECT pg_database_size(current_database())"))
    return sum(os.path.getsize(p) for p in (db, db + "-wal") if os.path.exists(p))


_RELATIONS = """
SELECT c.relname, c.relkind, pg_relation_size(c.oid) AS bytes, s.n_live_tup, s.n_dead_tup,
       s.autovacuum_count, s.autoanalyze_count
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
  LEFT JOIN pg_stat_all_tables s ON s.relid = c.oid
 WHERE n.nspname IN ('public', 'pg_toast') AND c.relkind IN ('r', 'i', 't')
 ORDER BY pg_relation_size(c.oid) DESC LIMIT 10
"""


async def pg_detail(host: Host) -> list[dict[str, Any]]:
    """The largest relations (KiB), with dead rows and autovacuum runs of tables."""
    pool = _pool(host)
    if pool is None:
        return []
    return [{"rel": r["relname"], "kind": r["relkind"], "kib": r["bytes"] // 1024,
             "live": r["n_live_tup"], "dead": r["n_dead_tup"],
             "autovacuum": r["autovacuum_count"]} for r in await pool.fetch(_RELATIONS)]


async def kept(host: Host, keys: list[dict[str, Any]], t: float) -> dict[bytes, str]:
    """The stored texts of `keys`, by canonical key, read in the process (no read recorded)."""
    out: dict[bytes, str] = {}
    for i in range(0, len(keys), 500):
        batch = tuple(canonical_key(k) for k in keys[i:i + 500])
        found, _ = await host.store.find(
            SCOPE, Query(tiers=PERSISTENT_TIERS, keys=batch, limit=len(batch)), t)
        for e in found:
            out[e.key] = json.loads(e.content)["text"]
    return out


async def top10(host: Host, query: str, t: float) -> list[str]:
    """The texts of a query's top 10, ranked in the process (no read recorded)."""
    ranked = await host.memory.ranked(SCOPE, Query(tiers=PERSISTENT_TIERS, limit=10), query, t)
    return [json.loads(e.content)["text"] for _, e in ranked[:10]]


async def run(db: str, stores: int, args: argparse.Namespace, quota: int | None,
              half_life: float, echo: bool = False) -> list[dict[str, Any]]:
    """One mode over the year: a row of figures a tenth (each printed as it comes with
    `echo`, so a run cut short keeps what it measured)."""
    rng = random.Random(args.seed + 1)
    clock = ShiftedClock()
    step = YEAR / stores
    fam = families(stores, args.seed)
    host = Host(config(db, quota, half_life), clock=clock)
    await host.start()
    rows: list[dict[str, Any]] = []
    current: dict[int, str] = {}  # fact -> the text of its current version
    family_keys = {text: {"turn": i} for i, text in fam.at.items()}
    try:
        async with await MemoryClient.connect(f"ws://127.0.0.1:{host.port}") as c:
            await c.init(SCOPE.namespace, {"agent": SCOPE.agent})
            tenth = max(1, stores // 10)
            store_ms: list[float] = []
            evicted = 0
            year = the_year(stores, args.facts, args.hot, fam, args.seed)
            for i, (e, fact) in enumerate(year, start=1):
                t = time.perf_counter()
                reply = await c.store([e])
                store_ms.append(1000 * (time.perf_counter() - t))
                evicted += reply.evicted or 0
                if fact >= 0:
                    current[fact] = e["content"]["text"]
                if args.hot and i > args.hot and i % args.read_every == 0:  # a hot entry read
                    await c.retrieve(keys=[{"hot": (i // args.read_every) % args.hot}])
                clock.advance(step)
                if i % tenth and i != stores:
                    continue
                await host.gc.collect_once()  # its periodic run: expiry, the change log pruned
                await host.memory.reads.flush()  # as its 2 s timer would have, many times over
                pool = _pool(host)
                if args.vacuum and pool is not None:  # what autovacuum does in a real year
                    await pool.execute("VACUUM")
                query_ms: list[float] = []
                asked = rng.sample(sorted(current), min(args.queries, len(current)))
                for f in asked:
                    t = time.perf_counter()
                    await c.retrieve(query=f"fact{f:04d}", limit=10)
                    query_ms.append(1000 * (time.perf_counter() - t))
                now = clock()
                found = sum([current[f] in await top10(host, f"fact{f:04d}", now)
                             for f in asked])
                facts_now = await kept(host, [{"fact": f} for f in current], now)
                survived = sum(facts_now.get(canonical_key({"fact": f})) == text
                               for f, text in current.items())
                hot_now = await kept(host, [{"hot": h} for h in range(args.hot)], now)
                row: dict[str, Any] = {
                    "stores": i, "entries": (await c.retrieve(tier="episodic", limit=1)).total,
                    "evicted": evicted,
                    "db_mib": round(await db_bytes(host, db) / 2**20, 1),
                    "rss_mib": round(rss_mib(), 1),
                    "store_p50_ms": round(percentile(store_ms, 0.5), 2),
                    "store_p99_ms": round(percentile(store_ms, 0.99), 2),
                    "query_p50_ms": round(percentile(query_ms, 0.5), 2),
                    "query_p99_ms": round(percentile(query_ms, 0.99), 2),
                    "survives": round(survived / len(current), 3) if current else None,
                    "found": round(found / len(asked), 3) if asked else None,
                    "hot_kept": round(len(hot_now) / args.hot, 3) if args.hot else None,
                    "fam_kept": None, "fam_found": None, "sim_kept": None,
                    "load": round(os.getloadavg()[0], 2),
                }
                if i > fam.written_by:
                    texts = await kept(host, list(family_keys.values()), now)
                    stored = set(texts.values())
                    row["fam_kept"] = round(sum(t in stored for _, t, _ in fam.newer)
                                            / len(fam.newer), 3)
                    hits = [t in await top10(host, q, now) for _, t, q in fam.newer]
                    row["fam_found"] = round(sum(hits) / len(hits), 3)
                    row["sim_kept"] = round(sum(a in stored and b in stored for a, b in fam.pairs)
                                            / len(fam.pairs), 3)
                if args.pg_detail:
                    row["pg"] = await pg_detail(host)
                rows.append(row)
                if echo:
                    print(table(rows[-1:], header=len(rows) == 1), flush=True)
                    for r in row.get("pg", []):
                        print(f"      {r}", flush=True)
                store_ms = []
            pool = _pool(host)
            if args.pg_detail and pool is not None:  # how much of the size is index pages
                await pool.execute("REINDEX TABLE a2e_entries")
                await pool.execute("VACUUM")
                rows[-1]["db_mib_reindexed"] = round(await db_bytes(host, db) / 2**20, 1)
                if echo:
                    print(f"      after REINDEX TABLE a2e_entries and VACUUM:"
                          f" {rows[-1]['db_mib_reindexed']} MiB", flush=True)
    finally:
        await host.stop()
    return rows


def table(rows: list[dict[str, Any]], header: bool = True) -> str:
    cols = [c for c in (rows[0] if rows else {}) if c not in ("pg", "db_mib_reindexed")]
    lines = [" ".join(f"{c:>12}" for c in cols)] if header else []
    lines += [" ".join(f"{r[c]!s:>12}" for c in cols) for r in rows]
    return "\n".join(lines)


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stores", type=int, default=200_000)
    ap.add_argument("--quota", type=int, default=0, help="entries (default: stores / 10)")
    ap.add_argument("--facts", type=int, default=200)
    ap.add_argument("--hot", type=int, default=20, help="entries read often")
    ap.add_argument("--read-every", type=int, default=500,
                    help="stores between two reads of a hot entry")
    ap.add_argument("--queries", type=int, default=200, help="keyword queries a tenth")
    ap.add_argument("--modes", default="evict,none", help="of evict, fade, none")
    ap.add_argument("--half-life", type=float, default=30.0,
                    help="days: ranking.importance_half_life of the fade mode")
    ap.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    ap.add_argument("--pg-detail", action="store_true")
    ap.add_argument("--vacuum", action="store_true",
                    help="PostgreSQL: VACUUM the database after each tenth (a year's pace)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    quota = args.quota or max(1, args.stores // 10)
    load_before = os.getloadavg()[0]
    report: dict[str, Any] = {"stores": args.stores, "quota": quota, "backend": args.backend,
                              "half_life_days": args.half_life,
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
                rows = await run(db, args.stores, args, None if mode == "none" else quota,
                                 args.half_life if mode == "fade" else 0.0, echo=not args.json)
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
