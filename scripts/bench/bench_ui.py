"""Benchmark the memory browser's reads on SQLite as a namespace grows.

    python scripts/bench/bench_ui.py                  # 10k and 100k entries in the namespace
    python scripts/bench/bench_ui.py --sizes 1000 10000

The Entries page lists a namespace newest first across its agents (no index is made for it:
the rows are sorted); the wire's retrieve without a query reads one agent's page in the rank
index's order. For each size this prints milliseconds per call (median of a few) of: the wire's
`find` (the baseline, same store, same data), the browser's first page, a page deep in the list,
a tag filter, a key-text filter, an `as of` filter (a quarter of the entries have bounds, half
of those over by now: the first page of the entries valid now), the namespace overview and the
Live page's poll. Every browser read runs on a worker thread with its own connection (the
figures include that hop), so none of them holds the event loop. Bounded: well under a minute
at 100k on 2 cores. `--no-as-of` leaves the `as of` read out (to run this script against a
tree from before the browser had it).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from host.store.records import BrowseFilter, NewEntry, Query, Scope  # noqa: E402
from host.store.sqlite.store import SQLiteEntryStore  # noqa: E402
from protocol.keys import canonical_key  # noqa: E402

AGENTS = 10
BATCH = 2000


async def _fill(store: SQLiteEntryStore, n: int, t0: float) -> None:
    for start in range(0, n, BATCH):
        by_agent: dict[int, list[NewEntry]] = {}
        for i in range(start, min(start + BATCH, n)):
            tier = "semantic" if i % 4 == 0 else "episodic"
            # a quarter bounded: valid until its own write plus 0 or n seconds (half over now)
            until = t0 + start + (n if i % 8 == 1 else 0) if i % 4 == 1 else None
            by_agent.setdefault(i % AGENTS, []).append(NewEntry(
                tier=tier, key=canonical_key({"id": i}),
                content=f'"entry {i}: some remembered text about topic {i % 97}"'.encode(),
                tags=[f"t{i % 13}", f"g{i % 7}"], score=(i % 10) / 10, valid_until=until))
        for agent, entries in by_agent.items():
            await store.put(Scope("ns", f"agent{agent}"), entries, t0 + start)


async def _time(fn: Callable[[], Awaitable[object]], runs: int = 5) -> float:
    await fn()  # warm the page cache
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        await fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


async def bench(n: int, as_of: bool = True) -> dict[str, float]:
    """Milliseconds per call of each read at `n` entries (`as_of`: with the `as of` read)."""
    with tempfile.TemporaryDirectory() as folder:
        store = SQLiteEntryStore(Path(folder) / "bench.db", max_term_docs=0)
        await store.open()
        try:
            t0 = time.time() - n
            await _fill(store, n, t0)
            now = time.time()
            scope = Scope("ns", "agent3")
            q = Query(tiers=("episodic", "semantic"), limit=25)
            reads = {
                "wire find, one agent, 25 (baseline)": await _time(
                    lambda: store.find(scope, q, now)),
                "browse, first page of 25": await _time(
                    lambda: store.browse("ns", BrowseFilter(limit=25), now)),
                "browse, page 200": await _time(
                    lambda: store.browse("ns", BrowseFilter(limit=25, offset=25 * 199), now)),
                "browse, tag filter": await _time(
                    lambda: store.browse("ns", BrowseFilter(tags=("t5",), limit=25), now)),
                "browse, key text": await _time(
                    lambda: store.browse("ns", BrowseFilter(key_text="77", limit=25), now)),
                "overview (Namespaces page)": await _time(
                    lambda: store.overview(None, now)),
                "change log after the head (Live poll)": await _time(
                    lambda: store.changes_after("ns", 10**12, 100)),
            }
            if as_of:
                reads["browse, as of now"] = await _time(
                    lambda: store.browse("ns", BrowseFilter(limit=25, as_of=now), now))
            return reads
        finally:
            await store.close()


def main() -> int:
    """Run and print a Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--no-as-of", action="store_true", help="leave the as-of read out")
    args = parser.parse_args()
    results = {n: asyncio.run(bench(n, not args.no_as_of)) for n in args.sizes}
    names = list(next(iter(results.values())))
    print("| read | " + " | ".join(f"{n:,} entries" for n in args.sizes) + " |")
    print("|---|" + "---:|" * len(args.sizes))
    for name in names:
        print(f"| {name} | " + " | ".join(f"{results[n][name]:.3f} ms" for n in args.sizes)
              + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
