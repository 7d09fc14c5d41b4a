"""The durable store path in one process: entries through the real `SQLiteEntryStore` writer.

    python scripts/bench/bench_writer.py [--entries 8000] [--groups 1,32] [--per-put 1]
                                   [--prefill 0] [--runs 3] [--forget] [--json]

For each group size g it opens a fresh database (WAL, synchronous=FULL, in a temporary folder),
optionally fills it with `--prefill` entries, then submits puts of `--per-put` entries g at a
time (the writer's `batch_max` is g, so each commit group holds g puts) and awaits them. The
entries are those of `bench_host.py`'s store cases (episodic, two tags, a sentence of text), with
the searchable text derived before the put, as the memory plugin does on the event loop.
With `--forget` it measures forgets instead: the entries are stored first (500 a commit), then
forgotten one key a `memory/forget`, g forgets a commit group.

It prints, per group size, the writer thread's CPU microseconds an entry (`time.thread_time`
between the ends of successive commit groups, the first group left out: SQL, Python, the
COMMIT's fsync system time and the hand-back of the results), the wall-clock entries a second,
and the mean group size the writer reported. The median of `--runs` runs is shown. To compare
two versions, run the same command on each checkout (`PYTHONPATH=<checkout>` selects the code:
the header prints which `host` was imported). No thresholds: it measures, it does not judge.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # bench_client's sentences

from bench_client import sentence  # noqa: E402

import host  # noqa: E402
from host.store.records import NewEntry, Scope  # noqa: E402
from host.store.sqlite.store import SQLiteEntryStore  # noqa: E402
from host.text.searchable import searchable_text  # noqa: E402

__all__ = ["make_entries", "run_once"]

_SCOPE = Scope("bench-writer", "agent-1")


def make_entries(first: int, count: int) -> list[NewEntry]:
    """`count` entries shaped like bench_host's store frames, numbered from `first`."""
    out = []
    for n in range(first, first + count):
        key = json.dumps({"c": 0, "n": n}, separators=(",", ":")).encode()
        content = json.dumps({"text": sentence(n % 4096), "turn": n}).encode()
        tags = ["bench", f"t{n % 10}"]
        text = searchable_text(json.loads(content), tags, json.loads(key))
        out.append(NewEntry(tier="episodic", key=key, content=content, tags=tags, text=text))
    return out


class _GroupClock:
    """A commit observer (called in the writer thread): CPU time and size of each group."""

    def __init__(self) -> None:
        self.cpu: list[float] = []
        self.sizes: list[int] = []
        self._last: float | None = None
        self._lock = threading.Lock()

    def __call__(self, n: int, _seconds: float) -> None:
        now = time.thread_time()
        with self._lock:
            if self._last is not None:
                self.cpu.append(now - self._last)
                self.sizes.append(n)
            self._last = now

    def reset(self) -> None:
        """Forget what was measured (the next group starts the clock again)."""
        with self._lock:
            self.cpu, self.sizes, self._last = [], [], None


async def run_once(db: Path, entries: int, group: int, per_put: int, prefill: int,
                   forget: bool = False) -> dict:
    """One measurement on a fresh database `db`: a dict of the figures."""
    clock = _GroupClock()
    store = SQLiteEntryStore(db, batch_max=group, observer=clock)
    await store.open()
    try:
        for i in range(0, prefill, 500):
            await store.put(_SCOPE, make_entries(1_000_000 + i, min(500, prefill - i)), 0.0)
        puts = [make_entries(i * per_put, per_put) for i in range(entries // per_put)]
        if forget:
            for i in range(0, len(puts), 500):
                await asyncio.gather(*(store.put(_SCOPE, p, 0.0) for p in puts[i:i + 500]))
        clock.reset()
        started = time.perf_counter()
        for i in range(0, len(puts), group):
            now = time.time()
            if forget:
                futs = [store.forget(_SCOPE, ["episodic"], [e.key for e in p], [], now)
                        for p in puts[i:i + group]]
                for n, p in zip(await asyncio.gather(*futs), puts[i:i + group], strict=True):
                    assert n == len(p), n
                continue
            futs = [store.put(_SCOPE, p, now) for p in puts[i:i + group]]
            for outcomes in await asyncio.gather(*futs):
                assert all(o is None for o in outcomes), outcomes
        wall = time.perf_counter() - started
    finally:
        await store.close()
    stored = len(puts) * per_put
    measured = sum(clock.sizes) * per_put
    return {
        "writer_cpu_us_per_entry": 1e6 * sum(clock.cpu) / measured if measured else float("nan"),
        "entries_per_s": stored / wall,
        "mean_group": statistics.fmean(clock.sizes) if clock.sizes else 0.0,
    }


def main() -> None:
    """Parse the arguments, run, print a table (or JSON)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--entries", type=int, default=8000)
    ap.add_argument("--groups", default="1,32", help="puts a commit group, comma-separated")
    ap.add_argument("--per-put", type=int, default=1, help="entries a put (store20: 20)")
    ap.add_argument("--prefill", type=int, default=0, help="entries stored before measuring")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--forget", action="store_true", help="measure forgets of stored entries")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    results = []
    for group in (int(g) for g in args.groups.split(",")):
        runs = []
        for r in range(args.runs):
            with tempfile.TemporaryDirectory() as tmp:
                n = args.entries if group > 1 else max(args.per_put, args.entries // 8)
                runs.append(asyncio.run(run_once(Path(tmp) / f"w{r}.db", n, group,
                                                 args.per_put, args.prefill, args.forget)))
        row = {"op": "forget" if args.forget else "put", "group": group,
               "per_put": args.per_put, "prefill": args.prefill, "runs": runs}
        for k in ("writer_cpu_us_per_entry", "entries_per_s", "mean_group"):
            row[k] = statistics.median(x[k] for x in runs)
        results.append(row)
    if args.json:
        print(json.dumps({"host": host.__file__, "results": results}, indent=1))
        return
    print(f"host: {Path(host.__file__).parent.parent}")
    print("| op | ops a group | entries an op | writer CPU us/entry | entries/s | mean group |"
          " runs (us/entry) |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for row in results:
        each = ", ".join(f"{x['writer_cpu_us_per_entry']:.1f}" for x in row["runs"])
        print(f"| {row['op']} | {row['group']} | {row['per_put']} |"
              f" {row['writer_cpu_us_per_entry']:.1f} |"
              f" {row['entries_per_s']:,.0f} | {row['mean_group']:.1f} | {each} |")


if __name__ == "__main__":
    main()
