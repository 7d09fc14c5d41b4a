#!/usr/bin/env python3
"""The semantic path of a fresh default host, with the embedder's own ceiling from the same run.

Starts `a2e-host serve` (default settings: the default embedder) on a new database and prints:

1. **embedding rate**: LoCoMo turns (`--conv`, each one episodic entry) stored over WebSocket,
   then entries embedded a second until the backlog (`/readyz`'s `embed_backlog`) is empty;
2. **the ceiling**, measured first: the same embedder in this process, its batched rate on the
   same texts (32 a call, two threads: both cores, nothing else to do), and the host's ratio to
   it; the same for queries (batched, one thread: the host's query thread);
3. **similarity queries** a second and their p50/p99 at 1, 10 and 100 connections, each asking
   the conversations' questions made distinct (a number appended, so the host's query cache
   does not answer them) for `--seconds` each;
4. **stores while embedding**: single-entry stores a second at `--writers` connections for
   `--seconds` while the host embeds a backlog, against a host with `embedder = "none"`.

    python scripts/bench/bench_semantic.py --data DIR                 # conversations 26 30 41 42 43
    python scripts/bench/bench_semantic.py --data DIR --conv 26 --seconds 5
    python scripts/bench/bench_semantic.py --data DIR --conv 26 --seconds 5 \
        --baseline /tmp/before --rounds 3       # the queries alternated with the tree before

`--data`: the LoCoMo conversations (see scripts/bench/bench_retrieval.py).

Bounded: about two minutes on 2 cores (the embedding of 3,122 turns is most of it).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # tests/support

from support.procs import HostProcess  # noqa: E402

from host.client import MemoryClient  # noqa: E402
from host.config import load_config  # noqa: E402
from host.search.embed import make_embedder  # noqa: E402
from scripts.bench.bench_embedding import on_two_threads  # noqa: E402
from scripts.bench.bench_retrieval import add_data_arg, load, pct  # noqa: E402


class Served(HostProcess):
    """`a2e-host serve` on a free port with `env` settings, and its embedding backlog."""

    def __init__(self, db: Path, env: dict[str, str] | None = None, tree: Path = ROOT) -> None:
        super().__init__(db, log_level="WARNING", cwd=tree, env=env,
                         stdout=subprocess.DEVNULL, timeout=60)

    def backlog(self) -> int:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=30) as r:
            m = re.search(r"^embed_backlog (\d+)$", r.read().decode(), re.M)
        return int(m.group(1)) if m else 0


async def store_turns(url: str, convs: dict[str, list[tuple[str, str]]]) -> tuple[int, float]:
    """Every turn stored in its conversation's namespace, 100 an entry request; (n, seconds)."""
    t = time.perf_counter()
    n = 0
    for name, turns in convs.items():
        async with await MemoryClient.connect(url) as c:
            await c.init(f"locomo-{name}", {"agent": "bench"})
            for i in range(0, len(turns), 100):
                await c.store([{"key": {"turn": d}, "content": text, "tier": "episodic"}
                               for d, text in turns[i:i + 100]])
                n += len(turns[i:i + 100])
    return n, time.perf_counter() - t


async def wait_backlog(host: Served, limit: float) -> float:
    """Seconds until the host's embedding backlog is 0 (or `limit`)."""
    t = time.perf_counter()
    while await asyncio.to_thread(host.backlog) and time.perf_counter() - t < limit:
        await asyncio.sleep(0.1)
    return time.perf_counter() - t


def ceiling(texts: list[str], queries: list[str]) -> tuple[float, float]:
    """(stored texts a second, queries a second) of the default embedder in this process:
    texts in calls of 32 on two threads at once, queries in calls of 32 on one thread."""
    emb = make_embedder(load_config().search)
    assert emb is not None
    emb.embed(texts[:32])  # warm up
    text_rate = on_two_threads(emb, [texts[i:i + 32] for i in range(0, len(texts), 32)])
    t = time.perf_counter()
    for i in range(0, len(queries), 32):
        emb.embed_queries(queries[i:i + 32])
    return text_rate, len(queries) / (time.perf_counter() - t)


async def query_load(url: str, namespace: str, questions: list[str], conns: int,
                     seconds: float, start: int = 0) -> tuple[int, list[float]]:
    """`conns` connections asking distinct questions back to back for `seconds`, numbered from
    `start` (a host asked again starts past the numbers it was asked: its query cache holds the
    last 1,024 texts); (answered, latencies in ms)."""
    clients = []
    for _ in range(conns):
        c = await MemoryClient.connect(url)
        await c.init(namespace, {"agent": "bench"})
        clients.append(c)
    serial = itertools.count(start)
    lat: list[float] = []
    stop = time.perf_counter() + seconds

    async def one(c: MemoryClient) -> None:
        while time.perf_counter() < stop:
            n = next(serial)
            q = f"{questions[n % len(questions)]} {n}"
            t = time.perf_counter()
            await c.retrieve(query=q, limit=10)
            lat.append((time.perf_counter() - t) * 1000)

    await asyncio.gather(*(one(c) for c in clients))
    for c in clients:
        await c.close()
    return len(lat), lat


async def store_load(url: str, writers: int, seconds: float) -> float:
    """Single-entry stores a second at `writers` connections for `seconds`."""
    clients = []
    for w in range(writers):
        c = await MemoryClient.connect(url)
        await c.init("writes", {"agent": f"w{w}"})
        clients.append(c)
    done = 0
    stop = time.perf_counter() + seconds
    serial = itertools.count()

    async def one(c: MemoryClient) -> None:
        nonlocal done
        while time.perf_counter() < stop:
            n = next(serial)
            await c.store([{"key": {"n": n}, "tier": "episodic",
                            "content": f"note {n}: the meeting about budget item {n % 97}"}])
            done += 1

    t = time.perf_counter()
    await asyncio.gather(*(one(c) for c in clients))
    rate = done / (time.perf_counter() - t)
    for c in clients:
        await c.close()
    return rate


async def query_levels(args: argparse.Namespace, hosts: dict[str, Served],
                       questions: list[str]) -> float:
    """The similarity queries at each level, `args.rounds` rounds over every host in turn
    (the order reversed every other round), each round and their sum printed; the best rate
    of the first host."""
    best = 0.0
    ns = f"locomo-{args.conv[0]}"
    asked = dict.fromkeys(hosts, 0)  # each host's questions so far: the next are new to it
    for conns in args.levels:
        lats: dict[str, list[float]] = {name: [] for name in hosts}
        for r in range(args.rounds):
            for name in (list(hosts) if r % 2 == 0 else list(hosts)[::-1]):
                done, lat = await query_load(hosts[name].url, ns, questions, conns, args.seconds,
                                             asked[name])
                asked[name] += done
                lats[name] += lat
                if args.rounds > 1:
                    print(f"  {name}round {r + 1}, {conns:>3} connections: "
                          f"{done / args.seconds:6.0f}/s  p50 {pct(lat, 50):6.1f} ms  p99 "
                          f"{pct(lat, 99):6.1f} ms  (load {os.getloadavg()[0]:.2f})")
        for name, lat in lats.items():
            rate = len(lat) / (args.seconds * args.rounds)
            print(f"{name}similarity queries, {conns:>3} connections: {rate:6.0f}/s"
                  f"  p50 {pct(lat, 50):6.1f} ms  p99 {pct(lat, 99):6.1f} ms")
            if name == next(iter(hosts)):
                best = max(best, rate)
    return best


async def run(args: argparse.Namespace) -> dict[str, float]:
    convs = {c: load(args.data, c) for c in args.conv}
    turns = {c: t[: args.turns] if args.turns else t for c, (t, _q) in convs.items()}
    questions = [q for _t, qs in convs.values() for q, _e, _c in qs]
    texts = [text for t in turns.values() for _d, text in t]
    print(f"embedder {load_config().search.embedder}, {len(texts)} turns of LoCoMo "
          f"{' '.join(args.conv)}; load average before: {os.getloadavg()[0]:.2f}")
    # the ceiling first, right before the host runs the same work (the load of the machine
    # changes during a run: measuring it at the end compared it with another machine)
    text_ceiling, query_ceiling = ceiling(texts, [f"{q} {i}" for i, q in enumerate(questions)])
    print(f"ceiling (the embedder alone, this process): {text_ceiling:.0f} texts a second "
          f"(batches of 32, two threads), {query_ceiling:.0f} queries a second (batches of 32, "
          f"one thread)")
    best_queries = 0.0
    with tempfile.TemporaryDirectory(prefix="a2e-bench-sem-") as tmp:
        host = Served(Path(tmp) / "a.db")
        try:
            n, secs = await store_turns(host.url, turns)
            embed_secs = await wait_backlog(host, args.embed_timeout)
            rate = n / embed_secs
            print(f"stored {n} turns in {secs:.1f} s ({n / secs:.0f}/s); embedded in "
                  f"{embed_secs:.1f} s after: {rate:.0f} entries a second")
            hosts = {"": host}
            if args.baseline is not None:  # the same turns in a host of the tree before
                hosts = {"this tree ": host, "baseline  ": Served(Path(tmp) / "base.db",
                                                                  tree=args.baseline)}
                await store_turns(hosts["baseline  "].url, turns)
                await wait_backlog(hosts["baseline  "], args.embed_timeout)
            try:
                best_queries = await query_levels(args, hosts, questions)
            finally:
                if args.baseline is not None:
                    hosts["baseline  "].terminate(grace=60)
            # stores while a backlog is embedded: the turns queued again
            async with await MemoryClient.connect(host.url) as c:
                await c.init("backlog", {"agent": "bench"})
                for i in range(0, len(texts), 100):
                    await c.store([{"key": {"i": i + j}, "content": t, "tier": "episodic"}
                                   for j, t in enumerate(texts[i:i + 100])])
            busy_rate = await store_load(host.url, args.writers, args.seconds)
            left = await asyncio.to_thread(host.backlog)
        finally:
            host.terminate(grace=60)
        plain = Served(Path(tmp) / "b.db", {"A2E_HOST_SEARCH_EMBEDDER": "none"})
        try:
            plain_rate = await store_load(plain.url, args.writers, args.seconds)
        finally:
            plain.terminate(grace=60)
    print(f"stores at {args.writers} connections: {busy_rate:.0f}/s while embedding "
          f"(backlog {left} left), {plain_rate:.0f}/s without an embedder: "
          f"ratio {busy_rate / plain_rate:.2f}")
    print(f"host / ceiling, entries embedded: {rate / text_ceiling:.2f}; similarity queries "
          f"(best level) / query embeddings alone: {best_queries / query_ceiling:.2f}")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return {"embedded_per_s": rate, "text_ceiling": text_ceiling, "query_ceiling": query_ceiling,
            "queries_per_s": best_queries, "stores_busy": busy_rate, "stores_plain": plain_rate}


def main(argv: list[str] | None = None) -> dict[str, float]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--conv", nargs="+", default=["26", "30", "41", "42", "43"])
    ap.add_argument("--turns", type=int, default=0, help="first turns of each conversation (0: all)")
    ap.add_argument("--levels", type=int, nargs="+", default=[1, 10, 100],
                    help="connections asking similarity queries")
    add_data_arg(ap)
    ap.add_argument("--seconds", type=float, default=8.0, help="each load phase")
    ap.add_argument("--writers", type=int, default=50, help="connections storing")
    ap.add_argument("--embed-timeout", type=float, default=600.0)
    ap.add_argument("--baseline", type=Path, metavar="TREE",
                    help="a checkout of another commit (e.g. a git worktree of the one before):"
                    " the query phase alternates between a host of each tree, the same turns")
    ap.add_argument("--rounds", type=int, default=1, help="query phase rounds at each level")
    return asyncio.run(run(ap.parse_args(argv)))


if __name__ == "__main__":
    main()
