#!/usr/bin/env python3
"""What each step a client space's load, catch-up or build takes on the host's loop costs.

    python scripts/bench/bench_loop_steps.py [--rows 100000] [--dim 384]

Times, in this process, the host's own functions a turn of the loop may run while a space of
`--rows` rows grows (min / max of 5 unless said): a PostgreSQL page made rows
(`client_rows`, 10,000 and 2,000 rows), `ExactIndex.add` of 2,048 rows (a catch-up's step into
an exact index), `ExactIndex.remove` of 10,000 absent ids, a build's chunk
(`CodedIndex.rows_of`, 4,096 rows), `AnnIndex.add` of 16 / 64 rows into the graph of `--rows`
(a catch-up's or a swap's step; faiss's threads set to `--threads`, which an add of at most
`ann.SMALL_ADD` rows leaves for one) and an `AnnIndex.search` of 20.
Each should stay within a few tens of ms. Prints the load average before and after.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from host.search.client_vectors import row_ids  # noqa: E402
from host.search.index.ann import faiss  # noqa: E402
from host.search.index.builds import build_ann  # noqa: E402
from host.search.index.exact import CodedIndex, ExactIndex  # noqa: E402
from host.store.postgres import extensions as pg_ext  # noqa: E402


def timed(f: Callable[[], object], n: int = 5) -> str:
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    return f"{min(ts) * 1000:.1f} / {max(ts) * 1000:.1f} ms"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                    help="faiss threads set on this thread for the adds (an add of at most"
                         " ann.SMALL_ADD rows takes one)")
    args = ap.parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.2f}")
    rng = np.random.default_rng(0)
    d = args.dim

    def unit(n: int) -> np.ndarray:
        v = rng.standard_normal((n, d)).astype(np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    v = unit(args.rows)
    recs = [(i, "semantic", "", None, v[i % args.rows].tobytes()) for i in range(10_000)]
    print("client_rows, 10,000 rows:", timed(lambda: pg_ext.client_rows(recs, d)))
    print("client_rows, 2,000 rows:", timed(lambda: pg_ext.client_rows(recs[:2000], d)))
    n0 = min(10_000, args.rows)
    g = ["semantic/"] * args.rows
    e: list[None] = [None] * args.rows
    exact = ExactIndex(d)
    exact.add(list(range(n0)), v[:n0], g[:n0], e[:n0])
    extra = unit(2048)
    ids = list(range(args.rows, args.rows + 2048))

    def add_exact() -> None:
        exact.add(ids, extra, g[:2048], e[:2048])
        exact.remove(ids)
    print("ExactIndex.add, 2,048 rows (and removed):", timed(add_exact))
    absent = row_ids(list(range(10 * args.rows, 10 * args.rows + 10_000)), 1).tolist()
    print("ExactIndex.remove, 10,000 absent ids:", timed(lambda: exact.remove(absent)))
    coded = CodedIndex.of(exact)
    coded.add(list(range(n0, args.rows)), v[n0:], g[n0:], e[n0:])
    some = coded.ids()[:4096].tolist()
    print("CodedIndex.rows_of, 4,096 rows (a build's chunk):", timed(lambda: coded.rows_of(some)))
    t = time.perf_counter()
    ann = build_ann(d, coded.rows(), threads=1, ranges=coded.ranges, rows_hint=args.rows)
    print(f"(the graph of {args.rows:,} rows built in {time.perf_counter() - t:.1f} s)")
    faiss.omp_set_num_threads(args.threads)
    nxt = [20 * args.rows]
    for n in (16, 64):
        def add_ann(n: int = n) -> None:
            ann.add(list(range(nxt[0], nxt[0] + n)), unit(n), g[:n], e[:n])
            nxt[0] += n
        print(f"AnnIndex.add, {n} rows ({args.threads} threads):", timed(add_ann, 8))
    q = unit(1)[0]
    print("AnnIndex.search, 20:", timed(lambda: ann.search(q, 20, ["semantic/"])))
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
