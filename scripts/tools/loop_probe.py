#!/usr/bin/env python3
"""How long a running host's event loop stalls: poll its `/healthz` and `/metrics`, print the waits.

    python scripts/tools/loop_probe.py n1_vectors --out probe.log &    # beside a benchmark
    python scripts/bench/bench_scale.py --backend postgres ...         # hosts whose --db has n1_vectors

Finds the `a2e-host serve` processes (`python -m host.cli ... serve --port N --db DB`) whose
command line contains PATTERN, and while one runs GETs `/healthz` every `--interval` seconds
(its answer needs a turn of the loop and nothing else: the wait is how long the loop was held,
within the interval) and `/metrics` every second (it also reads the store). Every wait above
`--report` seconds is printed with the load average; while a `/healthz` request is outstanding
past `--dump-after` seconds, `py-spy dump` of the host is printed (about once a second: where
the loop is held; py-spy must be installed). When a host ends or is replaced (a restart), the
longest wait of each kind it had is printed. Runs until interrupted.

`Stalls` is the same `/healthz` poll for a script that runs the host itself (one port, the
longest wait since it last asked: `scripts/bench/bench_scale.py` prints it beside each phase).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import TextIO


def find(pattern: str) -> tuple[int, int] | None:
    """(pid, port) of a host serving with `pattern` in its command line, or None."""
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            raw = Path(f"/proc/{d}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        cmd = [c.decode(errors="replace") for c in raw]
        if "host.cli" in cmd and "serve" in cmd and "--port" in cmd \
                and any(pattern in c for c in cmd):
            return int(d), int(cmd[cmd.index("--port") + 1])
    return None


def wait_of(port: int, path: str, timeout: float = 120.0) -> tuple[float, bool]:
    """Seconds a GET of `path` on the host at `port` took, and whether it answered."""
    t = time.monotonic()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
            r.read()
        ok = True
    except OSError:
        ok = False
    return time.monotonic() - t, ok


class Stalls:
    """The host on `port`'s `/healthz` polled every `interval` seconds in a daemon thread
    (`start` to `stop`); `take(who)` is the longest wait since `who`'s last `take` (or the
    start), in ms: how long the host's loop was held at most meanwhile, within the interval
    (each `who` has its own span: a phase's, and its parts'). A wait still outstanding counts
    as far as it has gone (and whole in the next `take`)."""

    def __init__(self, port: int, interval: float = 0.05) -> None:
        self.port, self.interval = port, interval
        self.lock = threading.Lock()
        self.worst: dict[str, float] = {"": 0.0}
        self.since: float | None = None  # when the outstanding /healthz was sent
        self.failed = 0
        self.stopping = threading.Event()
        self.thread: threading.Thread | None = None

    def start(self) -> Stalls:
        self.thread = threading.Thread(target=self._run, name="loop-stalls", daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        if self.thread is not None:
            self.thread.join(timeout=130)

    def _run(self) -> None:
        while not self.stopping.is_set():
            self.since = time.monotonic()
            dt, ok = wait_of(self.port, "/healthz")
            with self.lock:
                self.since = None
                if ok:
                    for who, w in self.worst.items():
                        self.worst[who] = max(w, dt)
                else:
                    self.failed += 1
            self.stopping.wait(self.interval)

    def take(self, who: str = "") -> float:
        with self.lock:
            since = self.since
            worst = max(self.worst.get(who, 0.0),
                        0.0 if since is None else time.monotonic() - since)
            self.worst[who] = 0.0
        return worst * 1000


class Probe:
    def __init__(self, args: argparse.Namespace, out: TextIO) -> None:
        self.args = args
        self.out = out
        self.lock = threading.Lock()
        self.host: tuple[int, int] | None = None
        self.since: float | None = None  # when the outstanding /healthz was sent
        self.worst = self.worst_metrics = 0.0
        self.spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))

    def say(self, line: str) -> None:
        with self.lock:
            self.out.write(f"{time.strftime('%H:%M:%S')} {line}\n")
            self.out.flush()

    def get(self, port: int, path: str) -> tuple[float, bool]:
        return wait_of(port, path)

    def dumps(self) -> None:
        last = 0.0
        while True:
            time.sleep(0.05)
            since, host = self.since, self.host
            now = time.monotonic()
            if since is None or host is None or now - since < self.args.dump_after \
                    or now - last < 0.7:
                continue
            last = now
            r = subprocess.run([self.spy, "dump", "--pid", str(host[0])], capture_output=True,
                               text=True, check=False)
            self.say(f"dump, /healthz outstanding {now - since:.2f} s\n{r.stdout}{r.stderr}")

    def metrics(self) -> None:
        while True:
            time.sleep(1.0)
            host = self.host
            if host is None:
                continue
            dt, ok = self.get(host[1], "/metrics")
            if ok and self.host == host:
                self.worst_metrics = max(self.worst_metrics, dt)
            if dt > self.args.report or not ok:
                self.say(f"/metrics {dt * 1000:.0f} ms{'' if ok else ' (failed)'}, load "
                         f"{os.getloadavg()[0]:.2f}")

    def ended(self, why: str) -> None:
        if self.host is not None:
            self.say(f"host {self.host[0]} {why}: longest /healthz wait "
                     f"{self.worst * 1000:.0f} ms, /metrics {self.worst_metrics * 1000:.0f} ms")

    def run(self) -> None:
        threading.Thread(target=self.dumps, daemon=True).start()
        threading.Thread(target=self.metrics, daemon=True).start()
        while True:
            found = find(self.args.pattern)
            if found != self.host:
                self.ended("gone" if found is None else "replaced")
                self.host, self.worst, self.worst_metrics = found, 0.0, 0.0
                if found is not None:
                    self.say(f"host {found[0]} on port {found[1]}")
            if found is None:
                time.sleep(0.5)
                continue
            self.since = time.monotonic()
            dt, ok = self.get(found[1], "/healthz")
            self.since = None
            if ok:
                self.worst = max(self.worst, dt)
            if dt > self.args.report:
                self.say(f"/healthz {dt * 1000:.0f} ms{'' if ok else ' (failed)'}, load "
                         f"{os.getloadavg()[0]:.2f}")
            time.sleep(self.args.interval)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("pattern", help="a part of the host's command line (e.g. its database)")
    ap.add_argument("--out", type=Path, default=None, help="append here (default: stdout)")
    ap.add_argument("--interval", type=float, default=0.1, help="seconds between /healthz")
    ap.add_argument("--report", type=float, default=0.2, help="print waits longer than this")
    ap.add_argument("--dump-after", type=float, default=0.3,
                    help="py-spy dump while /healthz is outstanding this long")
    args = ap.parse_args(argv)
    out = open(args.out, "a") if args.out else sys.stdout  # noqa: SIM115 (held till exit)
    try:
        Probe(args, out).run()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
