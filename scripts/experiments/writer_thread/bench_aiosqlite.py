"""aiosqlite (a hop to its thread per call) against the host's own writer thread (one hop per
commit group), on the same table, the same statements and the same durability.

    python scripts/experiments/writer_thread/bench_aiosqlite.py [--puts 2000] [--clients 1,32] [--runs 3] [--dir DIR]

Each case opens a fresh database (WAL, synchronous=FULL, as `host.store.sqlite.schema.connect`)
in a temporary folder (under `--dir` if given: put it on the disk the host would use) and has
`clients` tasks do `puts` upserts in all, one row of about 100 bytes a put, each awaited before
the task's next (a client waiting for its acknowledgement). A put is durable when it returns.

- `writer`: `host.store.sqlite.writer.Writer`, the host's path: the put is a function run on the
  writer thread; everything queued while a commit runs goes into the next `BEGIN IMMEDIATE ...
  COMMIT` (group commit), one hop to the thread and one back per group.
- `aiosqlite`: one `aiosqlite` connection, as the library is used: `BEGIN IMMEDIATE`, the
  upsert and `COMMIT` are three awaited calls, each a hop to aiosqlite's thread and back; puts
  of concurrent clients take turns (a lock: one transaction at a time on a connection), so each
  put has its own commit and fsync.
- `aiosqlite-grouped`: aiosqlite with the host's group commit built on top (a task takes every
  queued put, runs one transaction for them): as few commits as `writer`, but still a hop for
  every statement.

It prints, per case and client count, puts a second (wall clock), process CPU microseconds a put
(`time.process_time`: event loop and threads together), and commits. The median of `--runs`
runs. No thresholds: it measures, it does not judge; docs/durability.md says what it showed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

import aiosqlite  # noqa: E402

from host.store.sqlite.schema import connect  # noqa: E402
from host.store.sqlite.writer import Writer  # noqa: E402

__all__ = ["CASES", "run_case"]

SCHEMA = "CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, k TEXT UNIQUE, body TEXT)"
UPSERT = ("INSERT INTO t (k, body) VALUES (?, ?)"
          " ON CONFLICT(k) DO UPDATE SET body = excluded.body")
BODY = "x" * 100

Put = Callable[[str], Awaitable[None]]


class Counts:
    """Commits made during one run."""

    def __init__(self) -> None:
        self.commits = 0


def _upsert(conn: sqlite3.Connection, k: str) -> None:
    conn.execute(UPSERT, (k, BODY))


async def _writer_case(path: str, counts: Counts) -> tuple[Put, Callable[[], Awaitable[None]]]:
    writer = Writer(lambda: connect(path), observer=lambda n, s: _count(counts))
    writer.start()

    async def put(k: str) -> None:
        await writer.submit(_upsert, k)

    async def close() -> None:
        writer.stop()

    return put, close


def _count(counts: Counts) -> None:
    counts.commits += 1


async def _open_aiosqlite(path: str) -> aiosqlite.Connection:
    db = await aiosqlite.connect(path, isolation_level=None)
    for pragma in ("journal_mode=WAL", "synchronous=FULL", "busy_timeout=30000"):
        await db.execute(f"PRAGMA {pragma}")
    return db


async def _aiosqlite_case(path: str, counts: Counts) -> tuple[Put, Callable[[], Awaitable[None]]]:
    db = await _open_aiosqlite(path)
    lock = asyncio.Lock()

    async def put(k: str) -> None:
        async with lock:
            await db.execute("BEGIN IMMEDIATE")
            await db.execute(UPSERT, (k, BODY))
            await db.execute("COMMIT")
            counts.commits += 1

    return put, db.close


async def _grouped_case(path: str, counts: Counts) -> tuple[Put, Callable[[], Awaitable[None]]]:
    db = await _open_aiosqlite(path)
    queued: list[tuple[str, asyncio.Future[None]]] = []
    wake = asyncio.Event()

    async def commit_loop() -> None:
        while True:
            await wake.wait()
            wake.clear()
            group = queued[:]
            del queued[:]
            await db.execute("BEGIN IMMEDIATE")
            for k, _f in group:
                await db.execute(UPSERT, (k, BODY))
            await db.execute("COMMIT")
            counts.commits += 1
            for _k, f in group:
                f.set_result(None)

    task = asyncio.ensure_future(commit_loop())

    async def put(k: str) -> None:
        f: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queued.append((k, f))
        wake.set()
        await f

    async def close() -> None:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await db.close()

    return put, close


CASES = {"writer": _writer_case, "aiosqlite": _aiosqlite_case, "aiosqlite-grouped": _grouped_case}


async def run_case(case: str, folder: str, puts: int, clients: int) -> dict[str, float]:
    """One run of `case`: `puts` upserts by `clients` concurrent clients on a fresh file."""
    path = os.path.join(folder, f"{case}-{clients}-{time.monotonic_ns()}.db")
    conn = connect(path)
    conn.execute(SCHEMA)
    conn.close()
    counts = Counts()
    put, close = await CASES[case](path, counts)
    per_client = puts // clients

    async def client(c: int) -> None:
        for n in range(per_client):
            await put(f"{c}:{n % 500}")

    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.gather(*(client(c) for c in range(clients)))
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    await close()
    done = per_client * clients
    return {"puts_per_s": done / wall, "cpu_us_per_put": cpu / done * 1e6,
            "commits": counts.commits}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--puts", type=int, default=2000, help="puts a run, all clients together")
    ap.add_argument("--clients", default="1,32", help="comma-separated client counts")
    ap.add_argument("--runs", type=int, default=3, help="runs a case; the median is shown")
    ap.add_argument("--dir", default=None, help="folder for the database files")
    args = ap.parse_args()
    print(f"# aiosqlite {aiosqlite.__version__}, sqlite {sqlite3.sqlite_version}, "
          f"{args.puts} puts a run, median of {args.runs}, load {os.getloadavg()[0]:.2f}")
    print(f"{'case':<18} {'clients':>7} {'puts/s':>9} {'CPU us/put':>11} {'commits':>8}")
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        for clients in (int(c) for c in args.clients.split(",")):
            for case in CASES:
                runs = [asyncio.run(run_case(case, folder, args.puts, clients))
                        for _ in range(args.runs)]
                med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
                print(f"{case:<18} {clients:>7} {med['puts_per_s']:>9.0f} "
                      f"{med['cpu_us_per_put']:>11.1f} {med['commits']:>8.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
