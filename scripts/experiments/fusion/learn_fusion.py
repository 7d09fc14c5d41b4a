#!/usr/bin/env python3
"""A learned fusion, measured: a linear ranker over the features the ranking already has.

The host orders a query's candidates by a hand-set formula (`host.search.ranking`: keyword and
cosine z-scores, the pair relevance, the neighbour lift). This script asks whether a few-feature
linear model fitted on labelled queries orders them better. Every query goes through a real
in-process host (`memory/retrieve` over its WebSocket, SQLite, the configured embedder); the
ranking's inputs of each query are recorded as it runs (`Recorder` wraps
`host.search.ranking.score` in this process: the host's own reply is unchanged) and turned into
per-candidate `FEATURES`. The model is the score `features @ w`, fitted with a listwise
softmax loss (the right candidates' share of the softmax over the query's candidates), L2 pulled
towards the hand-set order (`BASE`: the order plus its neighbour lift), so the fit is a
correction of today's ranking, not a new one.

- fitted on: the training family (`scripts/bench/data/relevance_train.json`: the 40 facts alone, among
  1,000 generated sentences of another draw, among 1,000 LoCoMo turns) and the LoCoMo tuning
  conversations' questions (26 30);
- judged on: the evaluation's families (`scripts/bench/data/relevance.json`; the 30 facts alone,
  + 1,000 and + 10,000 generated sentences, + 600 LoCoMo turns), top 3 against vector
  similarity alone, BM25 alone, the host's reply and the hand-set order re-sorted here (which
  must equal the host's); and the held-out LoCoMo conversations' recall@10 (41 42 43).

    python scripts/experiments/fusion/learn_fusion.py --data PATH

Relevance is not touched (a property of the pair), so `min_score` and drift are the host's.
Vectors are cached as in `scripts/bench/eval_relevance.py`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from host.client import MemoryClient  # noqa: E402
from host.config import load_config  # noqa: E402
from host.search import ranking  # noqa: E402
from scripts.bench.bench_retrieval import load  # noqa: E402
from scripts.bench.eval_relevance import (  # noqa: E402
    DATA,
    add_harness_args,
    cached_host,
    generated_filler,
    label,
    locomo_filler,
    memory,
    overrides,
    questions,
    stored_conversation,
)
from scripts.tools.fit_relevance import TRAIN_SEED  # noqa: E402

TRAIN = ROOT / "scripts" / "bench" / "data" / "relevance_train.json"
# order: z + pair_weight * relevance; lift: the host's final order minus it (the neighbour
# lift; with the flat-BM25 rule, the keyword cut of such a query); *_flat: the feature when
# the query's keyword matches score alike (BM25 coefficient of variation < 0.3), else 0
FEATURES = ("order", "lift", "zk", "zv", "relevance", "coverage", "cos_gap", "rank_cos",
            "rank_bm25", "neighbour", "zk_flat", "no_vector", "zv_flat", "lift_flat")
# the hand-set order: order + lift (the weights that give today's ranking)
BASE = np.array([1.0, 1.0] + [0.0] * (len(FEATURES) - 2))


def candidate_features(entries: list[Any], query: str, sims: np.ndarray, cfg: Any,
                       weights: Any, reference: float, first: int, added: int,
                       cov: np.ndarray | None, lifted: dict[int, float]) -> np.ndarray:
    """`FEATURES` of each candidate of one `ranking.score` call (`lifted`: the order each
    returned candidate got, by id, neighbours' lift included)."""
    n = len(entries)
    sims = np.asarray(sims, dtype=np.float64)
    basis = None
    if added:
        basis = np.ones(n, dtype=bool)
        basis[first:first + added] = False
    order, rel, _z = ranking.orders(entries, query, sims, cfg, weights, reference, basis, cov)
    kw = np.array([e.keyword or 0.0 for e in entries], dtype=np.float64)
    zk = np.nan_to_num(ranking.zscores(kw, basis))
    zv = np.nan_to_num(ranking.zscores(sims, basis))
    if cov is None:
        cov = ranking.coverages(query, entries)
    has = np.isfinite(sims)
    cos = np.where(has, sims, 0.0)
    top = float(cos[has].max()) if has.any() else 0.0
    rank_c = np.empty(n)
    rank_c[np.argsort(-np.where(has, sims, -np.inf), kind="stable")] = np.arange(n)
    rank_k = np.empty(n)
    rank_k[np.argsort(-kw, kind="stable")] = np.arange(n)
    pos = kw[kw > 0]
    flat = float(pos.size > 1 and pos.std() / pos.mean() < 0.3)
    nb = np.zeros(n)
    nb[first:first + added] = 1.0
    lift = np.array([lifted.get(int(e.id or -1), o) - o for e, o in zip(entries, order,
                                                                      strict=True)])
    return np.column_stack([order, lift, zk, zv, rel, cov, cos - top, 3.0 / (3.0 + rank_c),
                            np.where(kw > 0, 3.0 / (3.0 + rank_k), 0.0), nb, zk * flat,
                            (~has).astype(float), zv * flat, lift * flat])


class Recorder:
    """Wraps `ranking.score` in this process: the last call's candidates (key -> features)."""

    def __init__(self) -> None:
        self.inner = ranking.score
        self.last: tuple[list[str], np.ndarray] = ([], np.zeros((0, len(FEATURES))))
        ranking.score = self  # type: ignore[assignment]

    def __call__(self, entries: list[Any], query: str, sims: np.ndarray, cfg: Any,
                 weights: Any, reference: float = 0.0, links: Any = None, first: int = 0,
                 added: int = 0, cov: np.ndarray | None = None) -> list[Any]:
        pool = list(entries)
        out = self.inner(entries, query, sims, cfg, weights, reference, links, first, added, cov)
        lifted = {int(e.id): float(np.log(e.fused / (1.0 - e.fused))) for e in out
                  if e.id is not None and 0.0 < e.fused < 1.0}
        f = candidate_features(pool, query, sims, cfg, weights, reference, first, added, cov,
                               lifted)
        kept = {int(e.id) for e in out if e.id is not None}
        keep = [j for j, e in enumerate(pool) if e.id is not None and int(e.id) in kept]
        self.last = ([json.dumps(json.loads(pool[j].key), sort_keys=True) for j in keep],
                     f[keep])
        return out

    def close(self) -> None:
        ranking.score = self.inner  # type: ignore[assignment]


@dataclass
class Group:
    """One query: where it comes from, its candidates' keys and features, the right keys, and
    the host's reply (keys, best first)."""

    source: str
    family: str
    keys: list[str]
    x: np.ndarray
    right: set[str]
    reply: list[str]
    vector_top3: bool = False
    bm25_top3: bool = False


async def fact_groups(host: Any, emb: Any, rec: Recorder, source: str, data: dict[str, Any],
                      filler: list[str]) -> list[Group]:
    """The questions of a facts file asked of its facts among `filler`."""
    import time

    from host.store.records import Query, Scope
    from host.text.searchable import searchable_text
    facts = [f["fact"] for f in data["facts"]]
    entries = memory(facts, filler)
    ns = f"m{abs(hash((source, len(filler)))) % 10**8}"
    c = await MemoryClient.connect(f"ws://127.0.0.1:{host.port}")
    await c.init(ns, {"agent": "eval"})
    for i in range(0, len(entries), 200):
        await c.store(entries[i:i + 200])
    await host.search.drain()
    keys = [json.dumps(e["key"], sort_keys=True) for e in entries]
    vecs = emb.embed([searchable_text(e["content"], [], e["key"]) for e in entries])
    out = []
    for q in questions(data):
        if q.fact is None:
            continue
        right = json.dumps({"fact": label(q.fact)}, sort_keys=True)
        got = await c.retrieve(query=q.text, limit=10)
        g = Group(source, q.family, *rec.last, {right},
                  [json.dumps(e["key"], sort_keys=True) for e in got.entries])
        qv = emb.embed_queries([q.text])[0]
        g.vector_top3 = right in {keys[j] for j in np.argsort(-(vecs @ qv))[:3].tolist()}
        kwh = await host.store.search(Scope(ns, "eval"), Query(tiers=("episodic",)), q.text,
                                      time.time(), 100)
        kwh.sort(key=lambda e: -(e.keyword or 0.0))
        g.bm25_top3 = right in {json.dumps(json.loads(e.key), sort_keys=True) for e in kwh[:3]}
        out.append(g)
    await c.close()
    return out


async def locomo_groups(host: Any, rec: Recorder, data: Path, conv: str) -> list[Group]:
    """The questions of LoCoMo conversation `conv`, its turns stored alone."""
    turns, qs = load(data, conv)
    c = await stored_conversation(host, f"locomo-{conv}", turns)
    await host.search.drain()
    out = []
    for q, ev, _cat in qs:
        got = await c.retrieve(query=q, limit=10)
        right = {json.dumps({"turn": d}, sort_keys=True) for d in ev}
        out.append(Group(f"locomo {conv}", "locomo", *rec.last, right,
                         [json.dumps(e["key"], sort_keys=True) for e in got.entries]))
    await c.close()
    return out


def ranked(g: Group, w: np.ndarray) -> list[str]:
    """The group's keys best first by `features @ w` (ties: the hand-set order)."""
    s = g.x @ w
    base = g.x @ BASE
    return [g.keys[j] for j in np.lexsort((-base, -s)).tolist()]


def fit(groups: list[Group], l2: float, iters: int = 3000, lr: float = 0.05) -> np.ndarray:
    """Listwise softmax fit: maximise the log of the right candidates' softmax share, L2
    towards `BASE` (features standardised for the steps, weights returned in raw units)."""
    use = [g for g in groups if any(k in g.right for k in g.keys)]
    allx = np.concatenate([g.x for g in use])
    sd = allx.std(axis=0)
    sd[sd < 1e-9] = 1.0
    xs = [g.x / sd for g in use]
    ys = [np.array([k in g.right for k in g.keys], dtype=float) for g in use]
    v = BASE * sd  # weights on the standardised features
    v0 = v.copy()
    m = np.zeros_like(v)
    s2 = np.zeros_like(v)
    for t in range(1, iters + 1):
        grad = l2 * (v - v0) * len(use)
        for x, y in zip(xs, ys, strict=True):
            s = x @ v
            p = np.exp(s - s.max())
            p /= p.sum()
            q = p * y
            q /= q.sum()
            grad += x.T @ (p - q)
        grad /= len(use)
        m = 0.9 * m + 0.1 * grad
        s2 = 0.999 * s2 + 0.001 * grad * grad
        v -= lr * (m / (1 - 0.9 ** t)) / (np.sqrt(s2 / (1 - 0.999 ** t)) + 1e-8)
    return np.asarray(v / sd)


def grid(train: list[Group], tuning: list[Group]) -> list[tuple[float, float, np.ndarray]]:
    """A direct search on the bars' own measures, on the fitting queries only: the hand-set
    order plus a * rank_cos + b * cos_gap + c * zk, its neighbour lift times d. Every
    combination's (training family top-3 hits, tuning recall@10, weights), best first by hits
    among those whose tuning recall is not below the hand-set order's."""
    at = {f: FEATURES.index(f) for f in FEATURES}
    floor = recall10(tuning, BASE)
    out = []
    for a in (0.0, 0.25, 0.5, 1.0, 2.0):
        for b in (0.0, 0.5, 1.0, 2.0, 4.0):
            for c in (0.0, -0.25, -0.5):
                for d in (1.0, 0.75, 0.5):
                    w = BASE.copy()
                    w[at["rank_cos"]], w[at["cos_gap"]], w[at["zk"]] = a, b, c
                    w[at["lift"]] = d
                    out.append((float(top3(train, w)), recall10(tuning, w), w))
    out.sort(key=lambda r: (r[1] >= floor - 1e-9, r[0], r[1]), reverse=True)
    return out


def coordinate(train: list[Group], tuning: list[Group], per_recall: float = 300.0,
               passes: int = 4) -> np.ndarray:
    """A direct search of every weight on the bars' measures, on the fitting queries only:
    maximise training-family top-3 hits + `per_recall` x (tuning recall@10 - the hand-set's),
    one weight at a time (steps scaled by the feature's spread), from the hand-set order."""
    sd = np.concatenate([g.x for g in train + tuning]).std(axis=0)
    sd[sd < 1e-9] = 1.0
    floor = recall10(tuning, BASE)

    def objective(w: np.ndarray) -> float:
        return top3(train, w) + per_recall * (recall10(tuning, w) - floor)

    w = BASE.copy()
    best = objective(w)
    for _ in range(passes):
        moved = False
        for j, f in enumerate(FEATURES):
            if f == "no_vector":
                continue
            for k in (0.4, 0.2, 0.1, 0.05, -0.05, -0.1, -0.2, -0.4):
                v = w.copy()
                v[j] += k / sd[j]
                o = objective(v)
                if o > best + 1e-9:
                    w, best, moved = v, o, True
        print(f"  pass: objective {best:.2f}, training top-3 {top3(train, w)}, tuning"
              f" {recall10(tuning, w):.3f}", flush=True)
        if not moved:
            break
    return w


def top3(groups: list[Group], w: np.ndarray) -> int:
    return sum(bool(set(ranked(g, w)[:3]) & g.right) for g in groups)


def recall10(groups: list[Group], w: np.ndarray | None) -> float:
    """Mean recall@10 (`w` None: the host's reply)."""
    r = [len(g.right & set(g.reply[:10] if w is None else ranked(g, w)[:10])) / len(g.right)
         for g in groups]
    return float(np.mean(r))


def report(w: np.ndarray, evals: dict[str, list[Group]], held: list[Group],
           tuning: list[Group], title: str) -> None:
    print(f"\n## {title}\n")
    print("weights (" + ", ".join(FEATURES) + ") = [" + ", ".join(f"{v:.3f}" for v in w) + "]")
    print("\n| memory | family | vector | BM25 | host reply | hand-set (re-sorted) | learned |")
    print("|---|---|---|---|---|---|---|")
    for name, gs in evals.items():
        for fam in ("paraphrase", "keyword", "exact"):
            sel = [g for g in gs if g.family == fam]
            host = sum(bool(set(g.reply[:3]) & g.right) for g in sel)
            print(f"| {name} | {fam} | {sum(g.vector_top3 for g in sel)} |"
                  f" {sum(g.bm25_top3 for g in sel)} | {host} | {top3(sel, BASE)} |"
                  f" {top3(sel, w)} |")
    print(f"\nLoCoMo recall@10, tuning (26 30): host {recall10(tuning, None):.3f}, hand-set "
          f"{recall10(tuning, BASE):.3f}, learned {recall10(tuning, w):.3f}; held out (41 42 43):"
          f" host {recall10(held, None):.3f}, hand-set {recall10(held, BASE):.3f},"
          f" learned {recall10(held, w):.3f}", flush=True)


def save(path: Path, parts: dict[str, Any]) -> None:
    """The recorded queries, to fit again without a host (`--load`)."""
    def one(g: Group) -> dict[str, Any]:
        return {"source": g.source, "family": g.family, "keys": g.keys, "x": g.x.tolist(),
                "right": sorted(g.right), "reply": g.reply, "vector_top3": g.vector_top3,
                "bm25_top3": g.bm25_top3}
    out = {k: ({n: [one(g) for g in gs] for n, gs in v.items()} if isinstance(v, dict)
               else [one(g) for g in v]) for k, v in parts.items()}
    path.write_text(json.dumps(out))


def loaded(path: Path) -> dict[str, Any]:
    def one(d: dict[str, Any]) -> Group:
        return Group(d["source"], d["family"], d["keys"],
                     np.asarray(d["x"], dtype=np.float64).reshape(-1, len(FEATURES)),
                     set(d["right"]), d["reply"], d["vector_top3"], d["bm25_top3"])
    raw = json.loads(path.read_text())
    return {k: ({n: [one(g) for g in gs] for n, gs in v.items()} if isinstance(v, dict)
                else [one(g) for g in v]) for k, v in raw.items()}


async def record(args: argparse.Namespace) -> dict[str, Any]:
    """Run every query through a host and record its candidates' features."""
    rec = Recorder()
    ev = json.loads(DATA.read_text())
    tr = json.loads(TRAIN.read_text())
    with tempfile.TemporaryDirectory(prefix="a2e-fusion-") as tmp:
        cfg = load_config(None, overrides(args.tries, f"{tmp}/f.db"))
        async with cached_host(cfg, args.cache) as (host, emb):
            train: list[Group] = []
            for name, filler in (
                    ("train: 40 facts", []),
                    ("train: + 1,000 sentences", generated_filler(1000, seed=TRAIN_SEED)),
                    ("train: + 1,000 LoCoMo", locomo_filler(args.data, ["26", "30"], 1000))):
                train += await fact_groups(host, emb, rec, name, tr, filler)
            tuning = [g for c in ("26", "30") for g in await locomo_groups(host, rec, args.data, c)]
            held = [g for c in ("41", "42", "43")
                    for g in await locomo_groups(host, rec, args.data, c)]
            evals: dict[str, list[Group]] = {}
            for name, filler in (("30 facts", []), ("+ 1,000", generated_filler(1000)),
                                 ("+ 10,000", generated_filler(10000)),
                                 ("+ 600 LoCoMo", locomo_filler(args.data, ["26", "30"], 600))):
                evals[name] = await fact_groups(host, emb, rec, name, ev, filler)
    rec.close()
    return {"train": train, "tuning": tuning, "held": held, "evals": evals}


async def run(args: argparse.Namespace) -> None:
    if args.load is not None:
        parts = loaded(args.load)
    else:
        parts = await record(args)
        if args.save is not None:
            save(args.save, parts)
    train, tuning, held, evals = parts["train"], parts["tuning"], parts["held"], parts["evals"]
    report(BASE, evals, held, tuning, "the hand-set order")
    if args.search is not None:
        for per in args.search:
            w = coordinate(train, tuning, per)
            report(w, evals, held, tuning, f"coordinate search, {per:g} hits a unit of recall")
        return
    if args.grid:
        rows = grid(train, tuning)
        print(f"\ngrid: hand-set training top-3 {top3(train, BASE)}/{len(train)}, tuning"
              f" recall@10 {recall10(tuning, BASE):.3f}; best 8:")
        for hits, r10, w in rows[:8]:
            print(f"  hits {hits:.0f} tuning {r10:.3f} held {recall10(held, w):.3f}"
                  f" (a, b, c, d) = ({w[7]:.2f}, {w[6]:.2f}, {w[2]:.2f}, {w[1]:.2f})")
        report(rows[0][2], evals, held, tuning, "grid: the best on the fitting queries")
        best_hits = max(r[0] for r in rows)
        top = max((r for r in rows if r[0] == best_hits), key=lambda r: r[1])
        report(top[2], evals, held, tuning, "grid: the most training hits, whatever the recall")
        return
    for l2 in args.l2:
        for fams, label_ in ((train + tuning, "training family + LoCoMo tuning"),
                             (train, "training family alone")):
            w = fit(fams, l2)
            report(w, evals, held, tuning, f"learned on the {label_}, l2 {l2}")
            tf = [g for g in train if g.family == "paraphrase"]
            print(f"(its fit: training paraphrases top-3 {top3(tf, w)}/{len(tf)}, hand-set"
                  f" {top3(tf, BASE)})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=None, metavar="PATH", help="LoCoMo")
    ap.add_argument("--save", type=Path, default=None, help="write the recorded queries here")
    ap.add_argument("--load", type=Path, default=None,
                    help="fit on queries recorded by --save instead of running a host")
    ap.add_argument("--search", type=float, nargs="+", default=None, metavar="HITS",
                    help="the coordinate search only, a unit of tuning recall worth HITS"
                    " training hits (e.g. 300: 0.01 recall = 3 hits)")
    ap.add_argument("--grid", action="store_true", help="the direct search (`grid`) only")
    ap.add_argument("--l2", type=float, nargs="+", default=[0.01, 0.1, 1.0])
    add_harness_args(ap, tries="one")
    asyncio.run(run(ap.parse_args()))


if __name__ == "__main__":
    main()
