"""Cost of the per-request observability hook (metrics + request log), in microseconds.

    python scripts/bench/bench_request_hook.py [--n 200000]

Times `Host._on_request` as the connection calls it once per answered request: one counter
increment, one histogram observation and the request log's level check (DEBUG off, no
sampling, as by default), against a bare Python call for reference.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import timeit
from pathlib import Path

from host.app import Host
from host.config import load_config


def main() -> None:
    """Print microseconds a call for the hook and its parts."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200_000)
    n = ap.parse_args().n
    logging.getLogger().setLevel(logging.INFO)
    with tempfile.TemporaryDirectory() as tmp:
        host = Host(load_config(None, {"store": {"db": str(Path(tmp) / "b.db")}}))
        hook = host._on_request
        cases = {
            "empty function call": lambda: None,
            "metrics.request (ok)": lambda: host.metrics.request("memory/store/req", "ok", 3e-4),
            "request log (INFO, no sampling)": lambda: host._request_log(
                "c1", "r1", "memory/store/req", "ok", 3e-4),
            "whole hook (ok)": lambda: hook("c1", "r1", "memory/store/req", "ok", 3e-4),
            "whole hook (error reply)": lambda: hook(
                "c1", "r1", "memory/store/req", "memory_full", 3e-4),
        }
        for name, fn in cases.items():
            best = min(timeit.repeat(fn, number=n, repeat=5)) / n * 1e6
            print(f"{name:34s} {best:6.2f} us")


if __name__ == "__main__":
    main()
