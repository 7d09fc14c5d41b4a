#!/usr/bin/env python3
"""SQLite keyword search at scale, in process: the store's BM25 search against FTS5's own.

    python scripts/bench/bench_keyword.py --sizes 10000,100000,1000000 --queries 30
    python scripts/bench/bench_keyword.py --sizes 10000 --queries 5 --dir /some/dir   # reuse stores

A store a size (`--sizes`), built here through the store's own write path (`sqlite.writes.
put_entries` in transactions of 1,000 entries, the deferred keyword rows flushed before each
commit, as the writer thread does), all in one namespace, kept in `--dir` (a temporary
directory by default; a store already there with its size is reused, so the same script at
another commit measures the same rows). The texts are those of scripts/bench/bench_scale.py: 6 words
drawn (Zipf, s 1.1) from a fixed vocabulary of 4,096 made-up words plus the 2 words of the
entry's cluster (`--clusters`), so the most common words are in more than half the rows and a
cluster word in ~1/`clusters` of them; 10 % of the rows are another agent's episodic entries,
which the querying agent may not read.

The queries (seeded), `--queries` of each kind: `rare` (a cluster word), `mid` (a word of rank
100-1,000), `common` (a word of the 10 most common), and `mixed-N` (N = 2, 3, 4 words: a
cluster word, a mid word and common words), each read as `memory/retrieve` reads keyword
candidates: `keyword.search_entries` over the episodic and semantic tiers with the configured
`search.max_term_docs` and `search.max_keyword_matches` (`SearchConfig` defaults), the top
`search.fusion_pool`. For each kind: p50 and p99 of the CPU time (`time.process_time`, which
the other processes of a busy machine do not move) and of the wall time. The ceiling, same
run, same queries: FTS5's own `bm25()` (table-wide statistics, no visibility, highlight or
Python scoring), `SELECT rowid FROM entries_fts WHERE entries_fts MATCH ? ORDER BY rank
LIMIT pool` with the same MATCH the store builds.

`--engine` also times the whole ranked read of a `memory/retrieve` with a `query` in process
(`SearchEngine.search` with no embedder over a `SQLiteEntryStore` of the file, then
`rank_matches`, `ranking.search_candidates` candidates: the store's search, the fusion and
the ranking; no wire), p50 and p99 of CPU and wall per kind.

`--check` also runs each query with the store's caps off but for the newest-`max_matches`
cap (the exhaustive scoring of those matches) and reports whether the top `fusion_pool`
(entries, order, scores) is the same.

Prints a table and the load average; `--json` the figures as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from host.config import SearchConfig  # noqa: E402
from host.store.records import NewEntry, Query, Quotas, Scope  # noqa: E402
from host.store.sqlite import keyword, reads, writes  # noqa: E402
from host.store.sqlite.deferred import Deferred  # noqa: E402
from host.store.sqlite.schema import connect, migrate  # noqa: E402
from host.text.keyword import query_terms  # noqa: E402
from scripts.bench.bench_scale import words  # noqa: E402  (the same made-up words)

VOCAB = 4096
WORDS = 6
BLOCK = 1000
NAMESPACE = "bench"
AGENT, FOREIGN_AGENT = "bench", "other"
FOREIGN = 0.10
NOW = 1_800_000_000.0
TIERS = ("episodic", "semantic")


class Texts:
    """The rows' texts, block by block from the seed, and the queries."""

    def __init__(self, clusters: int, seed: int) -> None:
        self.seed = seed
        self.vocab = words(VOCAB, 3)
        pairs = words(2 * clusters, 4)
        self.cluster_words = list(zip(pairs[::2], pairs[1::2], strict=True))
        ranks = np.arange(1, VOCAB + 1, dtype=np.float64) ** -1.1
        self.zipf = ranks / ranks.sum()

    def block(self, a: int, b: int) -> list[tuple[str, bool]]:
        """(text, written by the foreign agent) of rows a..b."""
        rng = np.random.default_rng([self.seed, 2, a // BLOCK])
        c = rng.integers(0, len(self.cluster_words), b - a)
        foreign = rng.random(b - a) < FOREIGN
        words = rng.choice(VOCAB, size=(b - a, WORDS), p=self.zipf)
        out = []
        for ws, ci, f in zip(words, c, foreign, strict=True):
            own = self.cluster_words[ci]
            out.append((" ".join([self.vocab[w] for w in ws[:3]] + [own[0]]
                                 + [self.vocab[w] for w in ws[3:]] + [own[1]]), bool(f)))
        return out

    def queries(self, n: int) -> dict[str, list[str]]:
        rng = np.random.default_rng([self.seed, 1])
        cw = lambda: self.cluster_words[int(rng.integers(len(self.cluster_words)))][0]  # noqa: E731
        mid = lambda: self.vocab[int(rng.integers(100, 1000))]  # noqa: E731
        common = lambda: self.vocab[int(rng.integers(0, 10))]  # noqa: E731
        return {
            "rare": [cw() for _ in range(n)],
            "mid": [mid() for _ in range(n)],
            "common": [common() for _ in range(n)],
            "mixed-2": [f"{cw()} {common()}" for _ in range(n)],
            "mixed-3": [f"{cw()} {mid()} {common()}" for _ in range(n)],
            "mixed-4": [f"{cw()} {mid()} {common()} {common()}" for _ in range(n)],
        }


def build(path: Path, size: int, texts: Texts) -> float:
    """Fill a fresh store at `path` with rows 0..size; seconds taken."""
    t0 = time.perf_counter()
    conn = connect(str(path))
    migrate(conn)
    conn.execute("PRAGMA synchronous=OFF")
    quotas = Quotas(max_entries_per_namespace=10**9, max_entries_per_agent=10**9,
                    max_bytes_per_namespace=10**12, max_bytes_per_agent=10**12)
    for a in range(0, size, BLOCK):
        deferred = Deferred()
        conn.execute("BEGIN IMMEDIATE")
        mine: list[NewEntry] = []
        theirs: list[NewEntry] = []
        for i, (text, foreign) in enumerate(texts.block(a, min(size, a + BLOCK)), start=a):
            e = NewEntry(tier="episodic", key=f'"k{i}"'.encode(),
                         content=json.dumps({"text": text}).encode(), text=text,
                         created_at=NOW - size + i, updated_at=NOW - size + i)
            (theirs if foreign else mine).append(e)
        writes.put_entries(conn, Scope(NAMESPACE, AGENT), mine, NOW, quotas, deferred)
        writes.put_entries(conn, Scope(NAMESPACE, FOREIGN_AGENT), theirs, NOW, quotas, deferred)
        deferred.flush(conn)
        conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return time.perf_counter() - t0


def _store(path: Path, size: int, texts: Texts) -> tuple[Path, float | None]:
    db = path / f"keyword-{size}.db"
    if db.exists():
        with sqlite3.connect(db) as c:
            if c.execute("SELECT count(*) FROM entries").fetchone()[0] == size:
                return db, None
        db.unlink()
    return db, build(db, size, texts)


def _pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def _timed(fn: Callable[[], object]) -> tuple[float, float, object]:
    c0, w0 = time.process_time(), time.perf_counter()
    out = fn()
    return time.process_time() - c0, time.perf_counter() - w0, out


def measure(db: Path, queries: dict[str, list[str]], check: bool,
            pragmas: list[str]) -> dict[str, dict]:
    cfg = SearchConfig()
    conn = connect(str(db))
    for pragma in pragmas:
        conn.execute(f"PRAGMA {pragma}")
    scope = Scope(NAMESPACE, AGENT)
    q = Query(tiers=TIERS, limit=cfg.fusion_pool)
    pool = cfg.fusion_pool
    token_match = keyword.match_text  # the store's MATCH text

    def store(text: str, term_docs: int, matches: int) -> list:
        return keyword.search_entries(conn, scope, q, query_terms(text), NOW, pool, term_docs,
                                  matches)

    def fts(text: str) -> list:
        match = token_match(scope, query_terms(text))
        return conn.execute("SELECT rowid FROM entries_fts WHERE entries_fts MATCH ?"
                            " ORDER BY rank LIMIT ?", (match, pool)).fetchall()

    out: dict[str, dict] = {}
    for text in queries["rare"][:2]:  # warm the page cache and the statement cache
        store(text, cfg.max_term_docs, cfg.max_keyword_matches)
        fts(text)
    for kind, texts in queries.items():
        cpu, wall, fcpu, fwall, found = [], [], [], [], []
        same = 0
        for text in texts:
            c, w, got = _timed(lambda t=text: store(t, cfg.max_term_docs,  # type: ignore[misc]
                                                     cfg.max_keyword_matches))
            cpu.append(c)
            wall.append(w)
            found.append(len(got))  # type: ignore[arg-type]
            c, w, _ = _timed(lambda t=text: fts(t))  # type: ignore[misc]
            fcpu.append(c)
            fwall.append(w)
            if check:
                ref = store(text, cfg.max_term_docs, cfg.max_keyword_matches)
                exhaustive = _exhaustive(conn, scope, q, text, pool, cfg.max_term_docs,
                                         cfg.max_keyword_matches)
                same += [(e.id, e.keyword) for e in ref] == exhaustive
        row = {
            "cpu_p50_ms": _pct(cpu, 50) * 1e3, "cpu_p99_ms": _pct(cpu, 99) * 1e3,
            "wall_p50_ms": _pct(wall, 50) * 1e3, "wall_p99_ms": _pct(wall, 99) * 1e3,
            "fts_cpu_p50_ms": _pct(fcpu, 50) * 1e3, "fts_wall_p50_ms": _pct(fwall, 50) * 1e3,
            "results": statistics.median(found),
        }
        if check:
            row["same_as_exhaustive"] = f"{same}/{len(texts)}"
        out[kind] = row
    conn.close()
    return out


async def _engine(db: Path, queries: dict[str, list[str]]) -> dict[str, dict]:
    """`--engine`: each query through `SearchEngine.search` and `rank_matches`."""
    from host.config import Config
    from host.search.engine import SearchEngine
    from host.search.rank import RankWeights, rank_matches
    from host.store.sqlite.store import SQLiteEntryStore

    config = Config()
    cfg = config.search
    store = SQLiteEntryStore(db, max_term_docs=cfg.max_term_docs,
                             max_matches=cfg.max_keyword_matches)
    await store.open()
    engine = SearchEngine(store, None, cfg)
    weights = RankWeights.from_config(config.ranking)
    scope = Scope(NAMESPACE, AGENT)
    q = Query(tiers=TIERS, limit=10)
    want = config.ranking.search_candidates
    out: dict[str, dict] = {}
    try:
        for kind, texts in queries.items():
            cpu, wall = [], []
            for text in texts:
                c0, w0 = time.process_time(), time.perf_counter()
                found = await engine.search(scope, q, text, NOW, want)
                rank_matches(found, q.min_score, NOW, weights)
                cpu.append(time.process_time() - c0)
                wall.append(time.perf_counter() - w0)
            out[kind] = {"cpu_p50_ms": _pct(cpu, 50) * 1e3, "cpu_p99_ms": _pct(cpu, 99) * 1e3,
                         "wall_p50_ms": _pct(wall, 50) * 1e3, "wall_p99_ms": _pct(wall, 99) * 1e3}
    finally:
        await store.close()
    return out


def _exhaustive(conn: sqlite3.Connection, scope: Scope, q: Query, text: str, pool: int,
                term_docs: int, matches: int) -> list[tuple[int, float]]:
    """The top `pool` (id, BM25) by scoring every one of the newest `matches` readable matches
    with `sqlite.bm25.score_rows` (no bound on the rows scored, no early stop)."""
    from host.store.sqlite import bm25

    kept, stats = keyword.keyword_stats(conn, scope, q, query_terms(text), NOW, term_docs)
    if not kept:
        return []
    where, params = reads.read_where(scope, q, NOW)
    sql = (f"SELECT f.rowid, highlight(entries_fts, 1, '{bm25.MARK_OPEN}', '{bm25.MARK_CLOSE}'),"
           " (SELECT sz FROM entries_fts_docsize WHERE id = f.rowid)"
           " FROM entries_fts f CROSS JOIN entries e ON e.id = f.rowid"
           f" WHERE entries_fts MATCH ? AND {where} ORDER BY f.rowid DESC")
    args: list[object] = [keyword.match_text(scope, kept), *params]
    if matches > 0:
        sql += " LIMIT ?"
        args.append(matches)
    scored = bm25.score_rows(stats, conn.execute(sql, args))
    scored.sort(key=lambda r: (-r[0], -r[1]))
    return [(rowid, s) for s, rowid, _ in scored[:pool]]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--queries", type=int, default=30, help="queries of each kind")
    ap.add_argument("--clusters", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dir", default="", help="where the stores are kept (default: a temp dir)")
    ap.add_argument("--check", action="store_true",
                    help="compare each top pool with the exhaustive scoring")
    ap.add_argument("--engine", action="store_true",
                    help="also time the engine's ranked read (SearchEngine.search, rank_matches)")
    ap.add_argument("--pragma", action="append", default=[],
                    help="a PRAGMA for the read connection, e.g. mmap_size=1073741824"
                    " (repeatable; default: the store's connection as it is)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    texts = Texts(args.clusters, args.seed)
    queries = texts.queries(args.queries)
    tmp = None
    if args.dir:
        where = Path(args.dir)
        where.mkdir(parents=True, exist_ok=True)
    else:
        tmp = tempfile.TemporaryDirectory(prefix="bench-keyword-")
        where = Path(tmp.name)
    report: dict[str, object] = {"load_before": os.getloadavg()[0], "pragmas": args.pragma,
                                 "sizes": {}}
    try:
        for size in sizes:
            db, took = _store(where, size, texts)
            got = measure(db, queries, args.check, args.pragma)
            engine = asyncio.run(_engine(db, queries)) if args.engine else None
            report["sizes"][str(size)] = {"build_s": took, "kinds": got,  # type: ignore[index]
                                          "engine": engine}
            if not args.json:
                print(f"\n{size:,} entries" + (f" (built in {took:.0f} s)" if took else
                                                " (store reused)"))
                print(f"  {'kind':8} {'cpu p50':>8} {'cpu p99':>8} {'wall p50':>8}"
                      f" {'wall p99':>8} {'fts5 cpu':>8} {'fts5 wall':>9} {'found':>6}"
                      + ("  same" if args.check else ""))
                for kind, r in got.items():
                    print(f"  {kind:8} {r['cpu_p50_ms']:8.2f} {r['cpu_p99_ms']:8.2f}"
                          f" {r['wall_p50_ms']:8.2f} {r['wall_p99_ms']:8.2f}"
                          f" {r['fts_cpu_p50_ms']:8.2f} {r['fts_wall_p50_ms']:9.2f}"
                          f" {r['results']:6.0f}"
                          + (f"  {r['same_as_exhaustive']}" if args.check else ""))
                if engine:
                    print("  the engine's ranked read (SearchEngine.search + rank_matches):")
                    for kind, r in engine.items():
                        print(f"  {kind:8} {r['cpu_p50_ms']:8.2f} {r['cpu_p99_ms']:8.2f}"
                              f" {r['wall_p50_ms']:8.2f} {r['wall_p99_ms']:8.2f}")
    finally:
        if tmp is not None:
            tmp.cleanup()
    report["load_after"] = os.getloadavg()[0]
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"\nload average: {report['load_before']:.2f} before, {report['load_after']:.2f}"
              " after (times in ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
