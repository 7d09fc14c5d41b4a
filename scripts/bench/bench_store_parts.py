"""Where the host CPU of a durable store goes on SQLite, part by part.

    python scripts/bench/bench_store_parts.py [--entries 20000] [--group 32] [--rounds 3]

Every figure is CPU time (`time.process_time`, all threads) per stored entry of one entry
a put, new keys, 200-byte contents with two tags, the way 100 connections storing at once reach
the writer (groups of `--group` operations a commit):

- `store.put (loop + writer)`: `SQLiteEntryStore.put` from `--group` tasks at once, awaited:
  the event loop's side, the hand-off to the writer thread and back, and the group's work;
- `group in one thread`: the writer's body alone, run here (BEGIN IMMEDIATE, `put_entries` of
  each operation with one `Deferred`, its flush, COMMIT), and inside it the flush (the keyword
  rows and quota counters of the group), the COMMIT, and `put_entries` itself;
- `without the embed-queue trigger`: the same group on a copy of the schema whose
  `entries_vec_ai` trigger is dropped (what the embed-queue row costs is the difference);
- `change-log row`: `log_change` of one stored record, alone, in groups as the puts make them;
- `JSON and text`: the Python part of a put that is not SQL (the searchable text, tags JSON,
  the change record's JSON);
- the hand-off is `store.put` less the group's work.
Rounds alternate the variants; the best round is printed, with the load average.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from host.store.changes import encode_records, stored_record  # noqa: E402
from host.store.records import NewEntry, Quotas, Scope  # noqa: E402
from host.store.sqlite import writes  # noqa: E402
from host.store.sqlite.changes import log_change  # noqa: E402
from host.store.sqlite.deferred import Deferred  # noqa: E402
from host.store.sqlite.schema import connect, migrate  # noqa: E402
from host.store.sqlite.store import SQLiteEntryStore  # noqa: E402
from host.text.searchable import stored_text  # noqa: E402

SCOPE = Scope("bench", "agent-1")
QUOTAS = Quotas(max_entries_per_namespace=10**9, max_entries_per_agent=10**9,
                max_bytes_per_namespace=1 << 50, max_bytes_per_agent=1 << 50)


def entry(i: int) -> NewEntry:
    text = f"note {i}: the deploy of service {i % 97} moved to region {i % 7}; " * 3
    return NewEntry(tier="semantic" if i % 2 else "episodic", key=b'{"k":%d}' % i,
                    content=b'{"text":"%s"}' % text[:180].encode(), tags=["ops", f"t{i % 13}"])


def fresh(folder: str, name: str, drop: tuple[str, ...] = ()) -> sqlite3.Connection:
    conn = connect(os.path.join(folder, name))
    migrate(conn)
    for trigger in drop:
        conn.execute(f"DROP TRIGGER {trigger}")
    return conn


def groups_in_thread(conn: sqlite3.Connection, n: int, group: int, start: int
                     ) -> dict[str, float]:
    """The writer's body, here: CPU seconds of the whole, of the flushes, of the commits."""
    spent = {"group": 0.0, "flush": 0.0, "commit": 0.0}
    for g in range(start, start + n, group):
        t0 = time.process_time()
        conn.execute("BEGIN IMMEDIATE")
        held = Deferred()
        for i in range(g, min(g + group, start + n)):
            writes.put_entries(conn, SCOPE, [entry(i)], 1000.0, QUOTAS, held)
        t1 = time.process_time()
        held.flush(conn)
        t2 = time.process_time()
        conn.execute("COMMIT")
        t3 = time.process_time()
        spent["group"] += t3 - t0
        spent["flush"] += t2 - t1
        spent["commit"] += t3 - t2
    return spent


def change_rows(conn: sqlite3.Connection, n: int, group: int) -> float:
    """CPU seconds of `log_change` of one stored record, `n` times in groups."""
    spent = 0.0
    for g in range(0, n, group):
        conn.execute("BEGIN IMMEDIATE")
        t0 = time.process_time()
        for i in range(g, min(g + group, n)):
            e = entry(i)
            log_change(conn, SCOPE.namespace, "stored",
                       [stored_record(e.tier, "", e.key, e.content, e.tags, "", 1.0, 0, 1.0, 1.0)],
                       1000.0, [i + 1])
        spent += time.process_time() - t0
        conn.execute("COMMIT")
    return spent


def json_and_text(n: int) -> float:
    """CPU seconds of a put's Python work that is not SQL, `n` entries."""
    t0 = time.process_time()
    for i in range(n):
        e = entry(i)
        stored_text(e.content, e.tags, e.key)
        writes._encode_tags(list(dict.fromkeys(e.tags)))
        encode_records([stored_record(e.tier, "", e.key, e.content, e.tags, "", 1.0, 0, 1.0, 1.0)])
    return time.process_time() - t0


async def through_store(path: str, n: int, group: int) -> float:
    """CPU seconds of `n` awaited `store.put`s from `group` tasks at once."""
    async with SQLiteEntryStore(path, quotas=QUOTAS, batch_max=512) as store:
        async def worker(k: int) -> None:
            for i in range(k, n, group):
                await store.put(SCOPE, [entry(i)], 1000.0)

        t0 = time.process_time()
        await asyncio.gather(*(worker(k) for k in range(group)))
        return time.process_time() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--entries", type=int, default=20_000)
    ap.add_argument("--group", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    n, group = args.entries, args.group
    best: dict[str, float] = {}

    def keep(name: str, seconds: float) -> None:
        us = seconds / n * 1e6
        best[name] = min(best.get(name, us), us)

    for r in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="a2e-store-parts-") as folder:
            keep("store.put (loop + writer)", asyncio.run(through_store(
                os.path.join(folder, "s.db"), n, group)))
            spent = groups_in_thread(fresh(folder, "a.db"), n, group, 0)
            keep("group in one thread", spent["group"])
            keep("  of which the flush (keyword rows, counters)", spent["flush"])
            keep("  of which COMMIT", spent["commit"])
            keep("  of which put_entries", spent["group"] - spent["flush"] - spent["commit"])
            without = groups_in_thread(fresh(folder, "b.db", ("entries_vec_ai",)), n, group, 0)
            keep("group without the embed-queue trigger", without["group"])
            keep("change-log row (log_change alone)", change_rows(fresh(folder, "c.db"), n, group))
            keep("JSON and text (no SQL)", json_and_text(n))
        print(f"round {r + 1} done", file=sys.stderr)
    print(f"SQLite {sqlite3.sqlite_version}, {n} entries, one a put, groups of {group};"
          f" CPU us an entry, best of {args.rounds}")
    for name, us in best.items():
        print(f"  {name:48s} {us:7.1f}")
    print(f"  {'embed-queue row (difference)':48s} "
          f"{best['group in one thread'] - best['group without the embed-queue trigger']:7.1f}")
    print(f"  {'hand-off and loop (store.put less the group)':48s} "
          f"{best['store.put (loop + writer)'] - best['group in one thread']:7.1f}")
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}"
          f" {os.getloadavg()[2]:.2f}")


if __name__ == "__main__":
    main()
