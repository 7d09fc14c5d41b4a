"""Benchmark the library's stores: get/set/delete per operation and search per query, by size.

    python scripts/bench/bench_library.py                      # 1k, 10k, 100k; every store
    python scripts/bench/bench_library.py --sizes 1000 10000 --backends memory json

get/set/delete should stay flat as the store grows (O(1)); search follows the matches (the
in-process stores index tokens), O(n) at worst. The JSON file store also reports opening
(loading) the file and one full flush. The SQLite store (the host's engine) commits each set
and delete durably, so it runs fewer of them, and is filled with one `set_many` transaction;
every store's search is the host's `SearchEngine` (the in-process stores' over a private copy,
`host.library.mirror`): `memory`, `json` and `sqlite` with the default embedder (the fill is
embedded first, `embed_pending()`, timed as `embed_ms` a memory, and again after the timed
sets; sizes above `--max-embedded` are skipped: 100k memories take minutes to embed),
`sqlite-keywords` with `embedder = "none"` (BM25 alone), `memory-terms` the in-process
stores' own term-share search (`search=False`). Prints a Markdown table (the figures in
docs/benchmarks.md come from it). Bounded: a few minutes in all on 2 cores.

With the `bench` extra (`pip install -e '.[bench]'`) the same run adds LangGraph's
`InMemoryStore` and `SqliteStore` (langgraph-checkpoint-sqlite) for comparison, driven the same
way (put/get/delete of a dict holding the memory). Without an embedding index their
`search(query=...)` does not rank by the query: it lists the namespace (what is timed).
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from host.config import SearchConfig  # noqa: E402
from host.library import (  # noqa: E402
    InMemoryStore,
    JSONFileStore,
    Memory,
    MemoryImportance,
    SQLiteStore,
)

WORDS = [f"w{i:04d}" for i in range(5000)]  # a 5,000-word vocabulary: each word in ~0.16% of texts
OPS = 1000  # gets, sets and deletes per size (in ROUNDS rounds)
DURABLE_OPS = 100  # sets and deletes of the SQLite store: each one is a commit (an fsync)
QUERIES = 20
ROUNDS = 5  # each figure is the best round: the machine is shared, the best is the least disturbed


def _text(rng: random.Random) -> str:
    return " ".join(rng.choices(WORDS, k=8))


def _memories(n: int, rng: random.Random) -> list[Memory]:
    levels = list(MemoryImportance)
    return [Memory(content=_text(rng), importance=rng.choice(levels)) for _ in range(n)]


def _best_per_op_us(fn: Callable[[Any], object], args: list[Any]) -> float:
    """Run `fn` over `args` in ROUNDS equal slices; the fastest slice's time per call, in us."""
    size = max(1, len(args) // ROUNDS)
    best = float("inf")
    for r in range(ROUNDS):
        part = args[r * size:(r + 1) * size]
        start = time.perf_counter()
        for a in part:
            fn(a)
        best = min(best, (time.perf_counter() - start) / len(part))
    return best * 1e6


class LangGraphStore:
    """A LangGraph `BaseStore` behind the library's get/set/delete/search/set_many/close."""

    NS = ("memories",)

    def __init__(self, backend: str, path: Path) -> None:
        if backend == "lg-memory":
            from langgraph.store.memory import InMemoryStore as LGMemory

            self.store: Any = LGMemory()
            self.conn: sqlite3.Connection | None = None
        else:
            from langgraph.store.sqlite import SqliteStore

            self.conn = sqlite3.connect(path.with_suffix(".lg.db"), check_same_thread=False,
                                        isolation_level=None)
            self.store = SqliteStore(self.conn)
            self.store.setup()

    def get(self, key: str) -> Any:
        return self.store.get(self.NS, key)

    def set(self, key: str, memory: Memory) -> None:
        self.store.put(self.NS, key, memory.to_dict())

    def set_many(self, items: Any) -> None:
        from langgraph.store.base import PutOp

        ops = [PutOp(self.NS, key, m.to_dict()) for key, m in items]
        for i in range(0, len(ops), 2000):  # SQLite caps the variables of one statement
            self.store.batch(ops[i:i + 2000])

    def delete(self, key: str) -> None:
        self.store.delete(self.NS, key)

    def search(self, query: str, k: int) -> Any:
        return self.store.search(self.NS, query=query, limit=k)

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


EMBEDS = ("memory", "json", "sqlite")  # the backends whose search embeds (capped sizes)


def _open(backend: str, path: Path) -> Any:
    if backend == "memory":
        return InMemoryStore()
    if backend == "memory-terms":
        return InMemoryStore(search=False)
    if backend == "json":
        return JSONFileStore(path.with_suffix(".json"))
    if backend == "sqlite":
        return SQLiteStore(path.with_suffix(".db"))
    if backend == "sqlite-keywords":
        return SQLiteStore(path.with_suffix(".db"), search=SearchConfig(embedder="none"))
    return LangGraphStore(backend, path)


def bench(backend: str, n: int, folder: Path, seed: int = 7) -> dict[str, float]:
    """Fill a `backend` store with `n` memories, then time each operation; figures by name."""
    rng = random.Random(seed)
    path = folder / f"bench-{backend}-{n}"
    store = _open(backend, path)
    fill = _memories(n, rng)
    if hasattr(store, "set_many"):
        store.set_many((m.id, m) for m in fill)
    else:
        for m in fill:
            store.set(m.id, m)
    out: dict[str, float] = {}
    if backend in EMBEDS:
        t = time.perf_counter()
        embedded = store.embed_pending()
        out["embed_ms"] = (time.perf_counter() - t) * 1e3 / max(1, embedded)
    if backend == "json":
        t = time.perf_counter()
        store.flush()
        out["flush_all_ms"] = (time.perf_counter() - t) * 1e3
    keys = [m.id for m in rng.sample(fill, min(OPS, n // 2))]
    writes = DURABLE_OPS if backend in ("sqlite", "sqlite-keywords", "lg-sqlite") else len(keys)
    fresh = _memories(writes, rng)
    queries = [" ".join(rng.choices(WORDS, k=2)) for _ in range(QUERIES)]
    out["get_us"] = _best_per_op_us(store.get, keys)
    out["set_us"] = _best_per_op_us(lambda i: store.set(keys[i], fresh[i]), list(range(writes)))
    if backend in EMBEDS:
        store.embed_pending()  # the replaced memories' vectors, before searches are timed
    out["search_ms"] = _best_per_op_us(lambda q: store.search(q, k=10), queries) / 1e3
    out["delete_us"] = _best_per_op_us(store.delete, keys[:writes])
    store.close()
    if backend == "json":
        t = time.perf_counter()
        JSONFileStore(path.with_suffix(".json")).close()
        out["open_ms"] = (time.perf_counter() - t) * 1e3
        out["file_mb"] = path.with_suffix(".json").stat().st_size / 1e6
    return out


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and print one Markdown table row per backend and size."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--backends", nargs="+", default=None,
                        choices=["memory", "memory-terms", "json", "sqlite", "sqlite-keywords",
                                 "lg-memory", "lg-sqlite"],
                        help="default: the library's stores, and LangGraph's two when installed")
    parser.add_argument("--max-embedded", type=int, default=10_000,
                        help="the largest size the backends that embed run (memory, json, sqlite)")
    args = parser.parse_args(argv)
    if args.backends is None:
        args.backends = ["memory", "memory-terms", "json", "sqlite", "sqlite-keywords"]
        if importlib.util.find_spec("langgraph") is not None:
            args.backends += ["lg-memory", "lg-sqlite"]
        else:
            print("(LangGraph not installed: pip install -e '.[bench]' to compare)")
    cols = ["get_us", "set_us", "delete_us", "search_ms", "embed_ms", "flush_all_ms", "open_ms",
            "file_mb"]
    print("| backend | entries | " + " | ".join(cols) + " |")
    print("|---|---:|" + "---:|" * len(cols))
    with tempfile.TemporaryDirectory() as tmp:
        for backend in args.backends:
            for n in args.sizes:
                if backend in EMBEDS and n > args.max_embedded:
                    continue
                r = bench(backend, n, Path(tmp))
                cells = [f"{r[c]:.2f}" if c in r else "-" for c in cols]
                print(f"| {backend} | {n:,} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
