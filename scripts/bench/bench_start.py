#!/usr/bin/env python3
"""How long `a2e-host serve` takes to start, and how big the virtual environment it runs from is.

Starts `a2e-host serve` (the console script of the running interpreter's environment) `--runs`
times on a new SQLite file and a free port, and times each from the spawn until `GET /readyz`
answers 200 (the embedder loaded, the store open, the port accepting); then stops it with
SIGTERM and checks it exits 0. The baseline, measured in the same run: the same interpreter
started and stopped with nothing imported (`python -c pass`). Prints the median and the worst
of both, the load average, and the size of the environment (`sys.prefix`, as `du -s` counts it).

    python scripts/bench/bench_start.py              # 5 starts
    python scripts/bench/bench_start.py --runs 1 --json

Bounded: a few seconds a start; a start that takes over `--timeout` seconds stops the script.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # tests/support

from support.procs import free_port  # noqa: E402


def serve_once(timeout: float) -> float:
    """Seconds from spawning `a2e-host serve` until /readyz answers 200; the host is then
    stopped with SIGTERM and must exit 0."""
    exe = Path(sys.executable).with_name("a2e-host")
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="a2e-bench-start-") as tmp:
        t0 = time.perf_counter()
        proc = subprocess.Popen([str(exe), "serve", "--port", str(port), "--db", f"{tmp}/a.db"],
                                cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            while True:
                if proc.poll() is not None:
                    raise SystemExit(f"a2e-host serve exited with {proc.returncode} at start")
                if time.perf_counter() - t0 > timeout:
                    raise SystemExit(f"a2e-host serve not ready after {timeout} s")
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as r:
                        if r.status == 200:
                            took = time.perf_counter() - t0
                            break
                except (urllib.error.URLError, ConnectionError, TimeoutError):
                    time.sleep(0.02)
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=60)
    if code != 0:
        raise SystemExit(f"a2e-host serve exited with {code} after SIGTERM")
    return took


def bare_once() -> float:
    """Seconds to start and stop the interpreter with nothing imported (the baseline)."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return time.perf_counter() - t0


def env_bytes() -> int:
    """The size of the running environment (`sys.prefix`), as `du -s` counts it."""
    out = subprocess.run(["du", "-sk", sys.prefix], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[0]) * 1024


def main(argv: list[str] | None = None) -> dict[str, float]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--timeout", type=float, default=60.0, help="most seconds one start may take")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args(argv)
    load = os.getloadavg()[0]
    serve = [serve_once(args.timeout) for _ in range(args.runs)]
    bare = [bare_once() for _ in range(args.runs)]
    figures = {"serve_ready_s": statistics.median(serve), "serve_ready_max_s": max(serve),
               "python_bare_s": statistics.median(bare), "env_mb": env_bytes() / 2**20,
               "load_before": load, "load_after": os.getloadavg()[0]}
    if args.json:
        print(json.dumps(figures))
    else:
        print(f"environment {sys.prefix}: {figures['env_mb']:.0f} MB")
        print(f"a2e-host serve until /readyz 200: median {figures['serve_ready_s']:.2f} s, "
              f"worst {figures['serve_ready_max_s']:.2f} s ({args.runs} starts)")
        print(f"baseline, python -c pass: median {figures['python_bare_s']:.3f} s")
        print(f"load average {load:.2f} before, {figures['load_after']:.2f} after")
    return figures


if __name__ == "__main__":
    main()
