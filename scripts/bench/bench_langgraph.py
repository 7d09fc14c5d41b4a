"""Benchmark LangGraph's store API on the host (A2EStore) against LangGraph's own stores.

    python scripts/bench/bench_langgraph.py                 # 1 client and 20 concurrent, every store
    python scripts/bench/bench_langgraph.py --ops 200 --items 500 --clients 1 20

Operations a second of `put`, `get`, a filtered `search` (`filter={"kind": ...}`, 10 results)
and a query `search` (`query=...`, 10 results), and items a second of a `batch` of 100 puts,
for each store in the same run:

- `a2e`: `A2EStore` over WebSocket to an `a2e-host serve` subprocess on a fresh SQLite file
  (every write durable: committed, fsync'd, before its reply); a query is the host's hybrid
  search (keywords and its offline embedder); 20 concurrent = 20 threads, each with its own
  store (its own connection, as 20 processes would have);
- `sqlite`: LangGraph's `SqliteStore` on a fresh file, in process (its default: autocommit,
  no fsync per write configured), 20 threads sharing it (it serialises them);
- `memory`: LangGraph's `InMemoryStore`, in process, 20 threads sharing it.

Without an embedding index LangGraph's stores do not rank by the query: their query search
lists the namespace (what is timed). Each figure is the best of `--rounds` rounds (the machine
is shared). Prints the load average before and after: a figure taken at a load above 2 is not
a result. Needs the `bench` extra (langgraph, langgraph-checkpoint-sqlite).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))  # tests/support

from langgraph.store.base import BaseStore, PutOp  # noqa: E402
from langgraph.store.memory import InMemoryStore  # noqa: E402
from langgraph.store.sqlite import SqliteStore  # noqa: E402
from support.procs import HostProcess  # noqa: E402

from host.langgraph import A2EStore  # noqa: E402

TOPICS = ["python", "travel", "cooking", "music", "finance", "garden", "football", "cinema"]
WORDS = [f"w{i:03d}" for i in range(500)]
NS = ("users", "u1", "memories")


def value(i: int, rng: random.Random) -> dict[str, Any]:
    topic = TOPICS[i % len(TOPICS)]
    return {"text": f"a note about {topic}: " + " ".join(rng.choices(WORDS, k=10)),
            "kind": topic, "n": i}


def fill(store: BaseStore, items: int) -> None:
    """`items` items under NS, put in batches of 100."""
    rng = random.Random(7)
    for start in range(0, items, 100):
        store.batch([PutOp(NS, f"k{i}", value(i, rng)) for i in range(start, min(items, start + 100))])


def ops_of(items: int) -> dict[str, Callable[[BaseStore, int], Any]]:
    """The timed operations: each called with a store and the op's number."""
    rng = random.Random(11)
    # puts last: a query of the host waits (up to 1 s) for the vectors of its connection's
    # writes, which would time the embedding of the puts, not the query
    return {
        "get": lambda s, i: s.get(NS, f"k{i % items}"),
        "search_filter": lambda s, i: s.search(NS, filter={"kind": TOPICS[i % len(TOPICS)]},
                                               limit=10),
        "search_query": lambda s, i: s.search(NS, query=f"notes on {TOPICS[i % len(TOPICS)]}",
                                              limit=10),
        "put": lambda s, i: s.put(NS, f"p{i}", value(i, rng)),
    }


def timed(stores: list[BaseStore], op: Callable[[BaseStore, int], Any], n: int) -> float:
    """Operations a second of `n` calls of `op` on each of `stores` at once (one thread a
    store; the same store may appear several times)."""
    barrier = threading.Barrier(len(stores) + 1)
    errors: list[BaseException] = []

    def run(k: int, store: BaseStore) -> None:
        barrier.wait()
        try:
            for i in range(n):
                op(store, k * n + i)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(k, s)) for k, s in enumerate(stores)]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return len(stores) * n / elapsed


def batch_rate(store: BaseStore, rounds: int) -> float:
    """Items a second of `batch`es of 100 puts."""
    rng = random.Random(3)
    t0 = time.perf_counter()
    for r in range(rounds):
        store.batch([PutOp(NS, f"b{r}-{i}", value(i, rng)) for i in range(100)])
    return rounds * 100 / (time.perf_counter() - t0)


@contextmanager
def stores_of(kind: str, clients: int, host: HostProcess | None, folder: str
              ) -> Iterator[list[BaseStore]]:
    """`clients` handles on one fresh store of `kind` (a2e: one connection each)."""
    if kind == "a2e":
        assert host is not None
        ns = f"bench-{time.time_ns()}"
        opened = [A2EStore(host.url, namespace=ns) for _ in range(clients)]
        try:
            yield list(opened)
        finally:
            for s in opened:
                s.close()
    elif kind == "sqlite":
        path = os.path.join(folder, f"lg-{time.time_ns()}.db")
        with SqliteStore.from_conn_string(path) as s:
            s.setup()
            yield [s] * clients
    else:
        yield [InMemoryStore()] * clients


def embedded(port: int, timeout: float = 300.0) -> None:
    """Wait until the host at `port` has embedded every stored entry (`/metrics`)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            text = r.read().decode()
        backlog = [line for line in text.splitlines() if line.startswith("a2e_embed_backlog ")]
        if backlog and float(backlog[0].split()[1]) == 0:
            return
        time.sleep(0.2)
    raise TimeoutError("the host did not embed the fill in time")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=2000, help="items in the store before timing")
    ap.add_argument("--ops", type=int, default=300, help="operations a client a round")
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 20])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--stores", nargs="+", default=["a2e", "sqlite", "memory"])
    args = ap.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    folder = tempfile.mkdtemp(prefix="bench-langgraph-")
    host = HostProcess(os.path.join(folder, "a2e.db"), stdout=None,
                       stderr=open(os.path.join(folder, "host.log"), "w")) \
        if "a2e" in args.stores else None
    rows: list[tuple[str, int, str, float]] = []
    try:
        for kind in args.stores:
            for clients in args.clients:
                with stores_of(kind, clients, host, folder) as stores:
                    fill(stores[0], args.items)
                    if kind == "a2e":
                        assert host is not None
                        embedded(host.port)  # a query would wait (up to 1 s) for the fill
                    n = max(1, args.ops // clients) if clients > 1 else args.ops
                    for name, op in ops_of(args.items).items():
                        best = max(timed(stores, op, n) for _ in range(args.rounds))
                        rows.append((kind, clients, name, best))
                    if clients == 1:
                        best = max(batch_rate(stores[0], 5) for _ in range(args.rounds))
                        rows.append((kind, 1, "batch100_items", best))
    finally:
        if host is not None:
            host.terminate()
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    print("| store | clients | operation | per second |")
    print("|---|---:|---|---:|")
    for kind, clients, name, rate in rows:
        print(f"| {kind} | {clients} | {name} | {rate:,.0f} |")


if __name__ == "__main__":
    main()
