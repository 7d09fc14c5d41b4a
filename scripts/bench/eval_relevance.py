#!/usr/bin/env python3
"""Relevance as a person means it: facts and the questions people ask of them, small and large.

The data (`scripts/bench/data/relevance.json`, written for this script): 30 facts a personal assistant
might keep, each asked by a **paraphrase** that shares no content word with it, a **keyword**
question that shares its words, and for 10 of them an **exact** lookup quoting a name, number
or id; and 16 **off-topic** questions about nothing stored. Two memories per run, each a
namespace of an in-process host (real WebSocket, real SQLite, the configured embedder):

- small: the 30 facts alone;
- large: the facts written between `--fill` unrelated entries (generated sentences, or LoCoMo
  turns with `--data`), half before and half after them.

For each family and memory: the top-3 hit rate of vector similarity alone (exact cosine over
every entry), of BM25 alone (the store's keyword search) and of the host (`memory/retrieve`);
then, over the host's replies, the share of right and of wrong answers at relevance >= 0.5, a
reliability table (relevance bins against the share that are the right fact), entries returned
to off-topic questions at `min_score: 0.5`, and the drift of each (question, right fact) pair's
relevance between the two memories.

    python scripts/bench/eval_relevance.py                          # generated filler, 1,000 entries
    python scripts/bench/eval_relevance.py --fill 10000
    python scripts/bench/eval_relevance.py --data PATH --fill 600   # LoCoMo turns as the filler
    python scripts/bench/eval_relevance.py --try search.pair_weight=0 --try search.neighbour_hits=0

Vectors are cached as in `scripts/bench/tune_retrieval.py` (`--cache`); a run with a warm cache takes
about a minute for 1,000 filler entries.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from host.app import Host  # noqa: E402
from host.client import MemoryClient  # noqa: E402
from host.config import load_config  # noqa: E402
from host.search.ranking import REFERENCE_TEXTS, coverages  # noqa: E402
from host.store.records import Query, Scope  # noqa: E402
from host.text.searchable import searchable_text  # noqa: E402
from scripts.bench.tune_retrieval import cached_host, overrides  # noqa: E402

DATA = ROOT / "scripts" / "bench" / "data" / "relevance.json"
FAMILIES = ("paraphrase", "keyword", "exact", "off_topic")
BINS = (0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0001)

_WHO = ["The team", "My neighbour", "Sarah", "Our manager", "The kids' teacher", "Grandpa",
        "The plumber", "Jonas", "The book club", "Aunt Rosa", "The new intern", "Priya",
        "The school", "Dad", "The landlord's agent", "Marco", "The bakery", "Lena", "The coach",
        "The council", "Ahmed", "The delivery driver", "Chloe", "The band", "Uncle Ben"]
_WHAT = ["talked about the new parking rules", "moved the meeting to Friday afternoon",
         "bought a second-hand bike", "complained about the noise upstairs",
         "recommended a podcast about history", "fixed the leaking tap in the bathroom",
         "finished the quarterly report", "ordered pizza for the office party",
         "lost the keys to the shed", "planted roses in the front garden",
         "watched the match at the pub", "booked a hotel in Madrid", "started a pottery class",
         "painted the fence green", "sent the invoice to the client",
         "asked about the recycling schedule", "cancelled the dinner reservation",
         "shared photos from the beach", "borrowed the ladder again", "signed up for a marathon",
         "repainted the hallway", "adopted a rescue rabbit", "knitted a scarf",
         "renewed the library books", "posted a video about gardening",
         "found a cheaper phone contract", "hosted a barbecue for the street",
         "repaired the garage door", "wrote a review of the new cafe",
         "organised a quiz night", "visited the science museum", "sold the old sofa online",
         "missed the last train home", "learned to juggle", "cleaned out the attic",
         "joined a choir", "tried a new yoga studio", "printed the concert tickets",
         "called about the broken streetlight", "picked strawberries at the farm"]
_WHEN = ["yesterday", "last week", "on Monday", "this morning", "two days ago",
         "in the summer", "after lunch", "before the holidays", "on the weekend", "last night"]


def generated_filler(n: int, seed: int = 7) -> list[str]:
    """`n` distinct everyday sentences about other people (never the user's facts)."""
    rng = random.Random(seed)
    combos = [(w, x, t) for w in _WHO for x in _WHAT for t in _WHEN]
    rng.shuffle(combos)
    if n > len(combos):
        raise SystemExit(f"--fill {n}: at most {len(combos)} generated sentences")
    return [f"{w} {x} {t}." for w, x, t in combos[:n]]


def locomo_filler(data: Path, convs: list[str], n: int) -> list[str]:
    """The first `n` turns of LoCoMo conversations `convs` of `data`."""
    from scripts.bench.bench_retrieval import load
    out: list[str] = []
    for c in convs:
        out += [t for _d, t in load(data, c)[0]]
    return out[:n]


@dataclass
class Question:
    """One question: its family, text, the index of its right fact (None: off-topic), and
    the split it belongs to (facts of even index: "fit", odd: "check")."""

    family: str
    text: str
    fact: int | None
    split: str


def questions(data: dict[str, Any]) -> list[Question]:
    """Every question of the data file."""
    out = []
    for i, f in enumerate(data["facts"]):
        split = "fit" if i % 2 == 0 else "check"
        out += [Question(fam, f[fam], i, split) for fam in ("paraphrase", "keyword", "exact")
                if fam in f]
    out += [Question("off_topic", q, None, "fit" if j % 2 == 0 else "check")
            for j, q in enumerate(data["off_topic"])]
    return out


def label(i: int) -> str:
    """A key value for entry `i` made of letters ("qb", "qbc"...): a key's values are part of an
    entry's searchable text, embedded too, and numbers there would match the numbers of exact
    lookups ("912 448 031") by keyword and by vector."""
    out = ""
    while True:
        i, r = divmod(i, 26)
        out = "abcdefghijklmnopqrstuvwxyz"[r] + out
        if i == 0:
            return "q" + out


def memory(facts: list[str], filler: list[str]) -> list[dict[str, Any]]:
    """The entries of a memory: half the filler, the facts, the other half."""
    half = len(filler) // 2
    fill = [{"key": {"fill": label(j)}, "content": t, "tier": "episodic"}
            for j, t in enumerate(filler)]
    own = [{"key": {"fact": label(i)}, "content": t, "tier": "episodic"}
           for i, t in enumerate(facts)]
    return fill[:half] + own + fill[half:]


@dataclass
class Memory:
    """One stored memory's answers: per question, top-3 hits of each method, the host's
    reply (relevance, right or not) and the right fact's relevance."""

    name: str
    size: int
    top3: dict[str, dict[str, list[bool]]] = field(default_factory=dict)
    replies: list[tuple[str, float, bool]] = field(default_factory=list)  # family, rel, right
    at_half: dict[str, list[int]] = field(default_factory=dict)  # family: wrong entries at 0.5
    found_at_half: dict[str, list[bool]] = field(default_factory=dict)
    right: dict[str, float] = field(default_factory=dict)  # question text: its fact's relevance
    # family: (question, the right fact's rank in the host's top 10 or None), for each question
    # whose fact the host did not put in its top 3
    misses: dict[str, list[tuple[str, int | None]]] = field(default_factory=dict)
    # question, cosines, coverages, labels (every host candidate), the query's reference similarity
    candidates: list[tuple[Question, np.ndarray, np.ndarray, np.ndarray, float]] = field(
        default_factory=list)


async def ask_memory(host: Host, emb: Any, name: str, entries: list[dict[str, Any]],
                     qs: list[Question], collect: bool = False) -> Memory:
    """Store `entries` in namespace `name`, wait for their vectors, and ask every question."""
    c = await MemoryClient.connect(f"ws://127.0.0.1:{host.port}")
    await c.init(name, {"agent": "eval"})
    for i in range(0, len(entries), 200):
        await c.store(entries[i:i + 200])
    await host.search.drain()
    keys = [json.dumps(e["key"], sort_keys=True) for e in entries]
    # the vectors the host's index holds: of each entry's searchable text (content, tags, key)
    vecs = (emb.embed([searchable_text(e["content"], e.get("tags", []), e["key"])
                       for e in entries]) if emb is not None else None)
    qvecs = emb.embed_queries([q.text for q in qs]) if emb is not None else None
    refs = (qvecs @ emb.embed(list(REFERENCE_TEXTS)).T).mean(axis=1) if emb is not None \
        else np.zeros(len(qs))
    scope = Scope(name, "eval")
    m = Memory(name, len(entries))
    for qi, q in enumerate(qs):
        right = json.dumps({"fact": label(q.fact)}) if q.fact is not None else None
        fam = m.top3.setdefault(q.family, {"vector": [], "bm25": [], "host": []})
        if vecs is not None and qvecs is not None:
            order = np.argsort(-(vecs @ qvecs[qi]))[:3]
            fam["vector"].append(right in {keys[j] for j in order.tolist()})
        kw = await host.store.search(scope, Query(tiers=("episodic",)), q.text, time.time(), 100)
        kw.sort(key=lambda e: -(e.keyword or 0.0))
        fam["bm25"].append(right in {json.dumps(json.loads(e.key)) for e in kw[:3]})
        got = await c.retrieve(query=q.text, limit=10)
        got_keys = [json.dumps(e["key"], sort_keys=True) for e in got.entries]
        fam["host"].append(right in got_keys[:3])
        if right is not None and right not in got_keys[:3]:
            m.misses.setdefault(q.family, []).append(
                (q.text, got_keys.index(right) + 1 if right in got_keys else None))
        for e, k in zip(got.entries, got_keys, strict=True):
            m.replies.append((q.family, float(e["relevance"]), k == right))
            if k == right:
                m.right[q.text] = float(e["relevance"])
        half = await c.retrieve(query=q.text, limit=50, min_score=0.5)
        hk = [json.dumps(e["key"], sort_keys=True) for e in half.entries]
        m.at_half.setdefault(q.family, []).append(sum(k != right for k in hk))
        m.found_at_half.setdefault(q.family, []).append(right in hk)
        if collect:
            cands = await host.search.search(scope, Query(tiers=("episodic",)), q.text,
                                             time.time(), 100)
            cos = np.array([np.nan if e.similarity is None else e.similarity for e in cands])
            lab = np.array([json.dumps(json.loads(e.key)) == right for e in cands], dtype=float)
            m.candidates.append((q, cos, coverages(q.text, cands), lab, float(refs[qi])))
    await c.close()
    return m


async def evaluate(settings: list[str], filler: list[str], cache: Path, collect: bool = False,
                   data_file: Path = DATA) -> tuple[Memory, Memory]:
    """The small and the large memory's answers under config overrides `settings`, for the
    facts and questions of `data_file` (the evaluation's by default)."""
    data = json.loads(data_file.read_text())
    facts = [f["fact"] for f in data["facts"]]
    qs = questions(data)
    with tempfile.TemporaryDirectory(prefix="a2e-eval-") as tmp:
        cfg = load_config(None, overrides(settings, f"{tmp}/e.db"))
        async with cached_host(cfg, cache) as (host, emb):
            small = await ask_memory(host, emb, "small", memory(facts, []), qs, collect)
            large = await ask_memory(host, emb, "large", memory(facts, filler), qs, collect)
    return small, large


def _rate(v: list[bool]) -> str:
    return f"{sum(v)}/{len(v)}" if v else "-"


def report(title: str, small: Memory, large: Memory) -> None:
    """Print the tables of one run."""
    print(f"\n## {title}\n")
    print("| family | memory | vector top-3 | BM25 top-3 | host top-3 | host: right at >= 0.5 |"
          " wrong entries a question at >= 0.5 |")
    print("|---|---|---|---|---|---|---|")
    for fam in FAMILIES:
        for m in (small, large):
            t = m.top3.get(fam)
            if t is None:
                continue
            wrong = m.at_half.get(fam, [])
            found = _rate(m.found_at_half.get(fam, [])) if fam != "off_topic" else "-"
            hits = (_rate(t["vector"]), _rate(t["bm25"]), _rate(t["host"])) \
                if fam != "off_topic" else ("-", "-", "-")
            print(f"| {fam} | {m.name} ({m.size}) | {hits[0]} | {hits[1]} | {hits[2]} | {found} |"
                  f" {statistics.fmean(wrong) if wrong else 0:.2f} |")
    print("\n| relevance | replies (top 10) | mean | share right |")
    print("|---|---|---|---|")
    rows = small.replies + large.replies
    rel = np.array([r for _f, r, _ok in rows])
    ok = np.array([k for _f, _r, k in rows], dtype=float)
    for lo, hi in zip(BINS, BINS[1:], strict=False):
        sel = (rel >= lo) & (rel < hi)
        if sel.any():
            print(f"| {lo:.2f}-{min(hi, 1):.2f} | {int(sel.sum())} | {rel[sel].mean():.3f} |"
                  f" {ok[sel].mean():.3f} |")
    both = [(small.right[q], large.right[q]) for q in small.right if q in large.right]
    drift = [abs(a - b) for a, b in both]
    if drift:
        print(f"\ndrift of a (question, right fact) pair's relevance, small -> large: "
              f"{len(drift)} pairs found in both, mean {statistics.fmean(drift):.4f},"
              f" max {max(drift):.4f}")
    for m in (small, large):
        for fam, missed in m.misses.items():
            print(f"{m.name}: {fam} questions the host missed (rank in its top 10): "
                  + "; ".join(f"{t!r} ({'-' if r is None else r})" for t, r in missed))
        right = [r for _f, r, k in m.replies if k]
        print(f"{m.name}: right answers in the top 10: {len(right)}, relevance "
              f"min {min(right, default=0):.3f} median {statistics.median(right or [0]):.3f}")


async def run(args: argparse.Namespace) -> None:
    filler = (locomo_filler(args.data, args.conv, args.fill) if args.data is not None
              else generated_filler(args.fill))
    print(f"filler: {len(filler)} {'LoCoMo turns' if args.data else 'generated sentences'}")
    for settings in args.tries or [[]]:
        small, large = await evaluate(settings, filler, args.cache)
        report(" ".join(settings) or "defaults", small, large)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fill", type=int, default=1000, help="unrelated entries of the large memory")
    ap.add_argument("--data", type=Path, default=None, metavar="PATH",
                    help="LoCoMo (a folder of <conv>.json or the single file) for the filler")
    ap.add_argument("--conv", nargs="+", default=["26", "30"],
                    help="LoCoMo conversations the filler comes from (with --data)")
    ap.add_argument("--try", dest="tries", nargs="+", action="append", default=[],
                    metavar="SECTION.FIELD=VALUE", help="one run's config overrides")
    ap.add_argument("--cache", type=Path,
                    default=Path(tempfile.gettempdir()) / "a2e-tune-embeddings.npz")
    asyncio.run(run(ap.parse_args()))


if __name__ == "__main__":
    main()
