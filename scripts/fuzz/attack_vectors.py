"""Hostile tenants of the vector indexes, against a real host (SQLite, no embedder).

    python scripts/fuzz/attack_vectors.py [--tree DIR] [--victim-rows 2000] [--spaces 40]
                                     [--budget-mib 512] [--wide-budget-mib 32] [--json]

It starts `a2e-host serve` in a subprocess (a fresh SQLite file in a temporary folder; with
`--tree`, the `host` package of that source tree, e.g. an older commit's `git archive`, so a
before and an after run the same script). A victim namespace stores `--victim-rows` entries
with one 384-dimension vector each in a client space and retrieves by vector: its p50 is the
baseline, measured in the same run. Then an attacker namespace runs each attack, and the
victim retrieves again:

1. narrow spaces: `--spaces` spaces of one 4,096-dimension vector each (a store and a
   retrieve a space), within the default budget (`--budget-mib`).
2. wide spaces: `--spaces` spaces of one entry with 64 vectors of 4,096 dimensions each
   (~1 MB of index a space), on a host whose budget (`--wide-budget-mib`) they pass together.

Printed for each: the attack's requests and seconds, `a2e_vector_index_bytes` and the
evictions and loads counted by `/metrics` after it, whether the victim's space was loaded
again (evicted), the victim's first retrieve after the attack and its p50 (ms), and the load
average (a timing taken above 2 is not a result). Exit 0 when the victim was never evicted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # tests/support
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
from support.procs import HostProcess  # noqa: E402

from host.client import MemoryClient  # noqa: E402

__all__ = ["attack"]

VICTIM_DIMS = 384
WIDE_DIMS = 4096
ROWS_PER_ENTRY = 64


def _metrics(port: int) -> dict[str, float]:
    """The vector index figures of `/metrics` (name without `a2e_vector_index_` -> value)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    return {m[1]: float(m[2]) for m in re.finditer(
        r"(?m)^a2e_vector_index_(\w+?)(?:_total)? ([0-9.e+-]+)$", text)}


async def _client(port: int, ns: str) -> MemoryClient:
    c = await MemoryClient.connect(f"ws://127.0.0.1:{port}")
    await c.init(ns, {"agent": "a1"})
    return c


async def _timed_ms(op: Any) -> float:
    t0 = time.perf_counter()
    await op()
    return (time.perf_counter() - t0) * 1000


async def _victim(port: int, rows: int, rng: np.random.Generator) -> tuple[MemoryClient, Any]:
    """The victim's client, its space filled, and its retrieve (a coroutine function)."""
    c = await _client(port, "victim")
    for first in range(0, rows, 250):
        vecs = rng.standard_normal((min(250, rows - first), VICTIM_DIMS)).round(4)
        reply = await c.store([{"key": {"k": first + i}, "content": {"i": first + i},
                                "tier": "semantic", "vectors": [v.tolist()],
                                "vector_space": "v"} for i, v in enumerate(vecs)])
        assert reply.errors == [], reply.errors[:1]
    q = rng.standard_normal(VICTIM_DIMS).round(4).tolist()

    async def retrieve() -> None:
        got = await c.retrieve(vector=q, vector_space="v", limit=10)
        assert len(got.entries) == 10
    return c, retrieve


async def _spaces(port: int, spaces: int, per_space: int, rng: np.random.Generator) -> int:
    """The attacker's spaces, each a store of one entry with `per_space` vectors and a
    retrieve; the requests made."""
    c = await _client(port, "attacker")
    try:
        for i in range(spaces):
            vecs = np.where(rng.random((per_space, WIDE_DIMS)) < 0.5, -1, 1).tolist()
            reply = await c.store([{"key": {"k": i}, "content": {"i": i}, "tier": "semantic",
                                    "vectors": vecs, "vector_space": f"s{i}"}])
            assert reply.errors == [], reply.errors[:1]
            got = await c.retrieve(vector=vecs[0], vector_space=f"s{i}")
            assert len(got.entries) == 1
        return 2 * spaces
    finally:
        await c.close()


async def attack(port: int, name: str, victim_rows: int, spaces: int, per_space: int
                 ) -> dict[str, Any]:
    """One attack on a fresh host: the victim's baseline, the attacker's spaces, the figures."""
    rng = np.random.default_rng(7)
    victim, retrieve = await _victim(port, victim_rows, rng)
    try:
        await retrieve()  # loads the space
        base = statistics.median([await _timed_ms(retrieve) for _ in range(30)])
        loads = _metrics(port).get("loads", 0)
        t0 = time.perf_counter()
        requests = await _spaces(port, spaces, per_space, rng)
        seconds = time.perf_counter() - t0
        figures = _metrics(port)
        first = await _timed_ms(retrieve)
        after = statistics.median([await _timed_ms(retrieve) for _ in range(30)])
        reloaded = _metrics(port).get("loads", 0) - loads - spaces
    finally:
        await victim.close()
    return {"attack": name, "requests": requests, "seconds": round(seconds, 2),
            "index_mib": round(figures.get("bytes", 0) / 2**20, 1),
            "budget_mib": round(figures.get("budget_bytes", 0) / 2**20, 1),
            "evictions": int(figures.get("evictions", 0)),
            "victim_evicted": reloaded > 0,
            "victim_p50_before_ms": round(base, 2), "victim_first_after_ms": round(first, 2),
            "victim_p50_after_ms": round(after, 2), "load": round(os.getloadavg()[0], 2)}


def _run(args: argparse.Namespace, tmp: Path, name: str, budget_mib: int, per_space: int
         ) -> dict[str, Any]:
    env = {"A2E_HOST_SEARCH_EMBEDDER": "none",
           "A2E_HOST_SEARCH_VECTOR_MEMORY_BYTES": str(budget_mib << 20)}
    cwd = args.tree or ROOT
    env["PYTHONPATH"] = str(cwd)
    host = HostProcess(tmp / f"{name}.db", cwd=cwd, env=env)
    try:
        return asyncio.run(attack(host.port, name, args.victim_rows, args.spaces, per_space))
    finally:
        host.terminate()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", type=Path, default=None,
                    help="a source tree whose host package serves (default: this one)")
    ap.add_argument("--victim-rows", type=int, default=2000)
    ap.add_argument("--spaces", type=int, default=40)
    ap.add_argument("--budget-mib", type=int, default=512)
    ap.add_argument("--wide-budget-mib", type=int, default=32)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="a2e-attack-vectors-") as d:
        results = [
            _run(args, Path(d), "narrow spaces (1 x 4096-d each)", args.budget_mib, 1),
            _run(args, Path(d), "wide spaces (64 x 4096-d each)", args.wide_budget_mib,
                 ROWS_PER_ENTRY),
        ]
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for r in results:
            print("; ".join(f"{k}: {v}" for k, v in r.items()))
    return 0 if not any(r["victim_evicted"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
