#!/usr/bin/env python3
"""The CPU a query's ranking costs, counted in process time (not wall clock): a figure that
holds on a shared machine.

A LoCoMo conversation is stored in an in-process host (real SQLite, the configured embedder);
each of its questions is searched once through the engine, and the candidates it gathered
(keyword candidates, vector hits, neighbours, each with its BM25 and cosine) are kept. Then
the ranking work of a query is replayed `--rounds` times over every question and timed with
`time.process_time()`:

- `z only`: the fused z-scores alone (`ranking.score` without calibration), the ranking before
  the pair relevance: the baseline measured in the same run;
- `coverage`: `ranking.coverages`, each candidate's share of the query's terms, from the stems
  of its text kept from the last round (`host.text.searchable.EntryTerms`);
- `coverage, nothing kept`: the same, each text tokenised and stemmed anew (a cold cache);
- `score`: `ranking.score` with the pair relevance (coverage given);
- `query`: what the engine does for one query: the coverage, the first pass that picks the
  candidates whose neighbours are fetched (`ranking.orders`) and `ranking.score`;
- `the whole search`: `SearchEngine.search` itself (keyword SQL, vector search, read-back,
  neighbours, ranking; the query vectors cached), every thread of the process counted.

    python scripts/bench/bench_ranking.py --data PATH --conv 26
    python scripts/bench/bench_ranking.py --data tests/data/locomo/tiny.json --conv tiny --rounds 20

`--save FILE` also writes the questions and their candidates to FILE; `--replay FILE` then runs
one part of the ranking (`--part`) over them `--rounds` times and nothing else, for an
instruction count that no load on the machine moves (`valgrind --tool=callgrind`): the
instructions of a query are (Ir with --rounds R  -  Ir with --rounds 0) / (R * questions).

    valgrind --tool=callgrind --callgrind-out-file=/dev/null \\
        python scripts/bench/bench_ranking.py --replay FILE --part query --rounds 2

Parts: `z` (the fused z-scores alone), `coverage`, `query` (coverage, the neighbours' first pass
and `ranking.score`, as the engine does).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import pickle
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from host.search import ranking  # noqa: E402
from host.store.records import Query, Scope, StoredEntry  # noqa: E402
from host.text.searchable import EntryTerms  # noqa: E402
from scripts.bench.bench_retrieval import DATA_HELP, load  # noqa: E402
from scripts.bench.eval_relevance import (  # noqa: E402
    add_harness_args,
    cached_host,
    overrides,
    stored_conversation,
)

Case = tuple[str, list[StoredEntry], np.ndarray, float]  # query, candidates, cosines, reference


async def gather(data: Path, conv: str, cache: Path, passes: int = 3
                 ) -> tuple[list[Case], Any, list[float], float]:
    """Every question of `conv` with the candidates the host's search scored for it, and the
    process microseconds of a whole search (the best of `passes` over every question)."""
    from host.config import load_config
    turns, qs = load(data, conv)
    cases: list[Case] = []
    with tempfile.TemporaryDirectory(prefix="a2e-bench-ranking-") as tmp:
        cfg = load_config(None, overrides([], f"{tmp}/r.db"))
        async with cached_host(cfg, cache) as (host, emb):
            c = await stored_conversation(host, "bench", turns)
            await host.search.drain()
            docs = (emb.embed(list(ranking.REFERENCE_TEXTS)).astype(np.float64)
                    if emb is not None else None)
            for q, _ev, _cat in qs:
                got = await host.search.search(Scope("bench", "bench"),
                                               Query(tiers=("episodic",)), q, time.time(), 100)
                ref = (float((docs @ emb.embed_queries([q])[0].astype(np.float64)).mean())
                       if docs is not None and emb is not None else 0.0)
                sims = np.array([np.nan if e.similarity is None else e.similarity for e in got])
                cases.append((q, got, sims, ref))
            # the whole engine path of a query (SQL keyword search, vector search, read-back,
            # neighbours, ranking), query vectors cached: process time of every thread
            spent = float("inf")
            for _ in range(passes):
                t = time.process_time()
                for q, _ev, _cat in qs:
                    await host.search.search(Scope("bench", "bench"),
                                             Query(tiers=("episodic",)), q, time.time(), 100)
                spent = min(spent, time.process_time() - t)
            await c.close()
            return cases, cfg.search, list(host.search.calibration), spent / len(qs) * 1e6


def timed(fn: Callable[[], Any], rounds: int) -> float:
    """Process seconds of `rounds` calls of `fn`, the best of three tries."""
    best = float("inf")
    for _ in range(3):
        t = time.process_time()
        for _ in range(rounds):
            fn()
        best = min(best, time.process_time() - t)
    return best


def run(cases: list[Case], cfg: Any, weights: list[float], rounds: int) -> dict[str, float]:
    """Microseconds of process time a query for each part (see the module docstring)."""
    fresh = [(q, [copy.copy(e) for e in es], s, r) for q, es, s, r in cases]
    covs = [ranking.coverages(q, es) for q, es, _s, _r in fresh]

    def z_only() -> None:
        for q, es, s, r in fresh:
            ranking.score(es, q, s, cfg, [], r)

    def coverage() -> None:
        for q, es, _s, _r in fresh:
            ranking.coverages(q, es)

    def cold() -> None:
        for q, es, _s, _r in fresh:
            ranking.coverages(q, es, EntryTerms(0))

    def score() -> None:
        for (q, es, s, r), cov in zip(fresh, covs, strict=True):
            ranking.score(es, q, s, cfg, weights, r, cov=cov)

    def query() -> None:
        for q, es, s, r in fresh:
            cov = ranking.coverages(q, es)
            ranking.orders(es, q, s, cfg, weights, r, cov=cov)
            ranking.score(es, q, s, cfg, weights, r, cov=cov)

    n = rounds * len(fresh)
    return {name: timed(fn, rounds) / n * 1e6 for name, fn in
            (("z only", z_only), ("coverage", coverage), ("coverage, nothing kept", cold),
             ("score", score), ("query", query))}


def replay(file: Path, part: str, rounds: int) -> None:
    """Run `part` of the ranking `rounds` times over the queries `--save` wrote to `file`."""
    from host.config import SearchConfig
    with file.open("rb") as f:
        saved = pickle.load(f)  # noqa: S301 - a file this script wrote
    cfg, weights = SearchConfig(), saved["weights"]
    cases = [(q, [copy.copy(e) for e in es], s, r) for q, es, s, r in saved["cases"]]
    for _ in range(rounds):
        for q, es, s, r in cases:
            if part == "z":
                ranking.score(es, q, s, cfg, [], r)
                continue
            cov = ranking.coverages(q, es)
            if part == "query":
                ranking.orders(es, q, s, cfg, weights, r, cov=cov)
                ranking.score(es, q, s, cfg, weights, r, cov=cov)
    print(f"{part}: {rounds} rounds of {len(cases)} queries")


async def main_async(args: argparse.Namespace) -> None:
    cases, cfg, weights, search = await gather(args.data, args.conv, args.cache)
    sizes = [len(es) for _q, es, _s, _r in cases]
    print(f"conversation {args.conv}: {len(cases)} questions, candidates a query: median "
          f"{statistics.median(sizes):.0f}, max {max(sizes)}; {args.rounds} rounds")
    us = run(cases, cfg, weights, args.rounds)
    print("| part | process time a query (us) |\n|---|---:|")
    for name, v in us.items():
        print(f"| {name} | {v:.1f} |")
    print(f"| the whole search (engine, SQL included) | {search:.1f} |")
    if args.save is not None:
        with args.save.open("wb") as f:
            pickle.dump({"cases": cases, "weights": weights}, f)
        print(f"candidates saved to {args.save} (for --replay)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=None, metavar="PATH", help=DATA_HELP)
    ap.add_argument("--conv", default="26", help="the LoCoMo conversation")
    ap.add_argument("--rounds", type=int, default=20, help="replays of every question")
    ap.add_argument("--save", type=Path, default=None, metavar="FILE",
                    help="write the questions and their candidates to FILE (a pickle) for"
                    " --replay")
    ap.add_argument("--replay", type=Path, default=None, metavar="FILE",
                    help="only replay `--part` of the ranking over the queries of FILE")
    ap.add_argument("--part", choices=("z", "coverage", "query"), default="query",
                    help="with --replay: the part of the ranking run")
    add_harness_args(ap, tries="")
    args = ap.parse_args()
    if args.replay is not None:
        replay(args.replay, args.part, args.rounds)
    elif args.data is None:
        ap.error(f"--data is required (or --replay FILE): {DATA_HELP}")
    else:
        asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
