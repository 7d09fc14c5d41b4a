#!/usr/bin/env python3
"""Replay the ranking of saved queries, for an instruction count that no load on the machine
moves (`valgrind --tool=callgrind`).

`scripts/bench/bench_ranking.py --save FILE` writes a conversation's questions with the candidates
the host's search gathered for each; this script runs one part of the ranking over all of them
`--rounds` times and nothing else, so the instructions of a query are

    (Ir with --rounds R  -  Ir with --rounds 0) / (R * questions)

    valgrind --tool=callgrind --callgrind-out-file=/dev/null python scripts/bench/replay_ranking.py \\
        FILE --part query --rounds 2

Parts: `z` (the fused z-scores alone, the ranking before the pair relevance), `coverage`,
`query` (coverage, the neighbours' first pass and `ranking.score`, as the engine does).
"""

from __future__ import annotations

import argparse
import copy
import pickle
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from host.config import SearchConfig  # noqa: E402
from host.search import ranking  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("file", type=Path, help="written by scripts/bench/bench_ranking.py --save")
    ap.add_argument("--part", choices=("z", "coverage", "query"), default="query")
    ap.add_argument("--rounds", type=int, default=1)
    a = ap.parse_args()
    with a.file.open("rb") as f:
        saved = pickle.load(f)  # noqa: S301 - a file this repository's script wrote
    cfg, weights = SearchConfig(), saved["weights"]
    cases = [(q, [copy.copy(e) for e in es], s, r) for q, es, s, r in saved["cases"]]
    for _ in range(a.rounds):
        for q, es, s, r in cases:
            if a.part == "z":
                ranking.score(es, q, s, cfg, [], r)
                continue
            cov = ranking.coverages(q, es)
            if a.part == "query":
                ranking.orders(es, q, s, cfg, weights, r, cov=cov)
                ranking.score(es, q, s, cfg, weights, r, cov=cov)
    print(f"{a.part}: {a.rounds} rounds of {len(cases)} queries")


if __name__ == "__main__":
    main()
