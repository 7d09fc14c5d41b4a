"""What a retrieve by client vector costs: the budgeted in-memory index against the SQL scan.

    python scripts/bench/bench_client_vectors.py [--entries 20000] [--dims 384] [--queries 50]
                                           [--vectors 1] [--filtered]

On a fresh SQLite file in a temporary folder it stores `--entries` entries of one namespace,
each with `--vectors` random unit vectors of `--dims` values in one space (as the LangGraph
store writes them), 10 % of them another agent's episodic entries. Then, for the same
`--queries` query vectors, top 10:

- the baseline, in the same run: the former path, every readable row of the space read back
  from SQL (`client_vectors`) and scanned in numpy (`nearest`), then the page fetched;
- the index (`ClientSpaces.search`, the host's path on SQLite): its first retrieve (the space's
  load), then each query.

Printed: p50/p99 of each, the load's seconds, the index's bytes, whether both return the same
pages, and the load average (a timing taken above 2 is not a result). `--filtered` adds a tag
filter (1 % of the entries) to every query. An approximate index's (`--ann-min-rows` below
`--entries`) best entries are scored again on float32 (`--no-rescore`: not).

`--host-vectors N` measures a start over N stored vectors of the host's embedder instead (random
unit vectors of `--dims` written as the worker writes them, in `--namespaces` namespaces of
consecutive batches of 500): the
former start, every vector read into memory (the baseline, in the same run), against the start
now (no vector read) and the first query's load of one namespace.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from host.config import load_config  # noqa: E402
from host.search.client_vectors import nearest  # noqa: E402
from host.search.engine import SearchEngine  # noqa: E402
from host.search.index import VectorIndexes  # noqa: E402
from host.search.worker import LocalWorker  # noqa: E402
from host.store.records import NewEntry, Query, Scope  # noqa: E402
from host.store.sqlite.store import SQLiteEntryStore  # noqa: E402

SPACE = "bench"


def _ms(xs: list[float]) -> str:
    xs = sorted(xs)
    p99 = xs[min(len(xs) - 1, int(len(xs) * 0.99))]
    return f"p50 {statistics.median(xs) * 1e3:8.2f} ms   p99 {p99 * 1e3:8.2f} ms"


async def _fill(store: SQLiteEntryStore, n: int, dims: int, per: int, rng: np.random.Generator
                ) -> None:
    for first in range(0, n, 500):
        by_agent: dict[str, list[NewEntry]] = {}
        for i in range(first, min(first + 500, n)):
            m = rng.standard_normal((per, dims)).astype(np.float32)
            m /= np.linalg.norm(m, axis=1, keepdims=True)
            other = i % 10 == 9
            e = NewEntry(tier="episodic", key=b'{"k":%d}' % i, content=b'{"i":%d}' % i,
                         tags=["rare"] if i % 100 == 0 else [], vectors=m.tobytes(),
                         vector_space=SPACE, dims=dims)
            by_agent.setdefault("other" if other else "bench", []).append(e)
        for agent, entries in by_agent.items():
            got = await store.put(Scope("ns", agent), entries, time.time())
            assert all(x is None for x in got), got


class _Model:
    """The name and dimension the worker records and reads (no text is embedded here)."""

    def __init__(self, dim: int) -> None:
        self.name = f"bench-random-{dim}"
        self.dim = dim


async def _host_vectors(store: SQLiteEntryStore, n: int, dims: int, namespaces: int,
                        rng: np.random.Generator) -> None:
    cfg = load_config(None, {"search": {"embedder": "none"}}).search
    model = _Model(dims)
    await store.set_vector_model(model.name, dims)
    t0 = time.perf_counter()
    for first in range(0, n, 500):
        ns = f"ns{first * namespaces // n}"
        await store.put(Scope(ns, "bench"), [
            NewEntry(tier="semantic", key=b'{"k":%d}' % i, content=b'"text %d"' % i)
            for i in range(first, min(first + 500, n))], time.time())
        rows = []
        for p, _digest in await store.pending_vectors(500):
            v = rng.standard_normal(dims).astype(np.float32)
            rows.append((p.id, p.text, (v / np.linalg.norm(v)).tobytes()))
        await store.write_vectors(rows)
    print(f"stored {n} host vectors of {dims} in {namespaces} namespaces"
          f" in {time.perf_counter() - t0:.1f} s")
    # the baseline: the former start, every stored vector read into memory
    eager = LocalWorker(store, model, cfg, VectorIndexes(dims))  # type: ignore[arg-type]
    t = time.perf_counter()
    await asyncio.to_thread(eager.load)
    before = time.perf_counter() - t
    # now: the start reads no vector; a namespace loads on its first query
    engine = SearchEngine(store, None, cfg)
    assert engine.vectors is not None
    lazy = LocalWorker(store, model, cfg, engine.vectors, lazy=True)  # type: ignore[arg-type]
    t = time.perf_counter()
    await asyncio.to_thread(lazy.load)
    now = time.perf_counter() - t
    engine.embedder = model  # type: ignore[assignment]  # the loader reads its dimension
    t = time.perf_counter()
    await engine.vectors.open("no such namespace")  # the first open imports the ANN library
    warm = time.perf_counter() - t
    t = time.perf_counter()
    index = await engine.vectors.open("ns0")
    first = time.perf_counter() - t
    print(f"former start (every vector read)   {before:8.3f} s  ({len(eager.index)} vectors,"
          f" {sum(ix.nbytes for ix in eager.index._indexes.values()) / 2**20:.0f} MiB)")
    print(f"start now (no vector read)         {now:8.3f} s")
    print(f"first query's load of ns0          {first:8.3f} s  ({len(index or [])} vectors;"
          f" the process's first open, of an empty namespace, {warm:.3f} s)")


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--entries", type=int, default=20_000)
    ap.add_argument("--dims", type=int, default=384)
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument("--vectors", type=int, default=1, help="vectors an entry")
    ap.add_argument("--filtered", action="store_true", help="a tag filter on every query")
    ap.add_argument("--ann-min-rows", type=int, default=50_000,
                    help="search.ann_min_rows (rows from which a space is approximate)")
    ap.add_argument("--no-rescore", action="store_true",
                    help="an approximate index's 8-bit ranking as it is (no float32 rescore)")
    ap.add_argument("--host-vectors", type=int, default=0,
                    help="measure a start over this many host vectors instead")
    ap.add_argument("--namespaces", type=int, default=10, help="with --host-vectors")
    args = ap.parse_args()
    rng = np.random.default_rng(1)
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteEntryStore(Path(tmp) / "bench.db")
        await store.open()
        if args.host_vectors:
            try:
                await _host_vectors(store, args.host_vectors, args.dims, args.namespaces, rng)
            finally:
                await store.close()
            _print_load()
            return 0
        cfg = load_config(None, {"search": {"embedder": "none",
                                            "ann_min_rows": args.ann_min_rows}}).search
        engine = SearchEngine(store, None, cfg)
        try:
            t0 = time.perf_counter()
            await _fill(store, args.entries, args.dims, args.vectors, rng)
            print(f"stored {args.entries} entries x {args.vectors} vectors of {args.dims}"
                  f" in {time.perf_counter() - t0:.1f} s")
            scope = Scope("ns", "bench")
            q = Query(tiers=("episodic", "semantic"), limit=10,
                      tags=("rare",) if args.filtered else ())
            queries = [rng.standard_normal(args.dims) for _ in range(args.queries)]
            queries = [(v / np.linalg.norm(v)).astype(np.float32) for v in queries]
            # the baseline: the former path (every readable row from SQL, scanned)
            scan, pages_scan = [], []
            for v in queries:
                t = time.perf_counter()
                now = time.time()
                _dims, rows = await store.client_vectors(scope, q, SPACE, now)
                page = nearest(v, rows, 0.0)[:10]
                found = await store.fetch(scope, q, [i for _, i in page], now)
                scan.append(time.perf_counter() - t)
                assert len(found) == len(page)
                pages_scan.append([i for _, i in page])
            # the index
            spaces = engine.spaces
            assert spaces is not None and engine.vectors is not None
            spaces.rescore = not args.no_rescore
            t = time.perf_counter()
            await spaces.search(scope, q, SPACE, queries[0], time.time())
            first = time.perf_counter() - t
            wait = getattr(engine.vectors, "wait_idle", None)
            if wait is not None:  # a load promoted in the background: timed once it is done
                await wait()
            index, pages_index = [], []
            for v in queries:
                t = time.perf_counter()
                got, _total = await spaces.search(scope, q, SPACE, v, time.time())
                index.append(time.perf_counter() - t)
                pages_index.append([e.id for _, e in got])
            same = sum(a == b for a, b in zip(pages_scan, pages_index, strict=True))
            recall = (sum(len(set(a) & set(b)) for a, b in zip(pages_scan, pages_index,
                                                               strict=True))
                      / max(1, sum(len(a) for a in pages_scan)))
            print(f"baseline (SQL read + numpy scan)   {_ms(scan)}")
            print(f"index (ClientSpaces.search)        {_ms(index)}")
            print(f"index's first retrieve (the load)  {first:.2f} s;"
                  f" index {engine.vectors.nbytes / 2**20:.1f} MiB")
            kind = engine.vectors.stats()["ann_keys"] and "approximate" or "exact"
            print(f"same top 10: {same} of {len(queries)} queries; recall@10 {recall:.3f}"
                  f" ({kind} index)")
            _print_load()
        finally:
            await engine.stop()
            await store.close()
    return 0


def _print_load() -> None:
    load = os.getloadavg()[0]
    print(f"load average {load:.2f}" + ("  (above 2: timings are not a result)"
                                        if load > 2 else ""))


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
