#!/usr/bin/env python3
"""The relevance harness: a host in this process, its vectors cached, settings tried side by side.

Two question sets (`--set`), the same `--try` (config overrides, one run each, compared in one
go) and the same vector cache (`--cache`, in the system's temporary folder: vectors by text and
embedder name, so a second run with other settings costs seconds, not minutes; delete it to
recompute).

`--set relevance` (the default): relevance as a person means it, facts and the questions people
ask of them, small and large. The data (`scripts/bench/data/relevance.json`, written for this script): 30 facts a personal assistant
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

A run with a warm cache takes about a minute for 1,000 filler entries.

`--set locomo`: LoCoMo evidence recall through the same in-process host. The requests of
`scripts/bench/bench_retrieval.py` (each turn one episodic entry, each question of categories 1-4
one `memory/retrieve` with `query`, over a WebSocket to the host on a free port); R@5, R@10,
R@10 per category and the p50 latency of each `--try`:

    python scripts/bench/eval_relevance.py --set locomo --data DIR --conv 26 30          # defaults
    python scripts/bench/eval_relevance.py --set locomo --data DIR --conv 26 30 \
        --try search.vector_weight=1.5 --try search.vector_weight=0.7 search.keyword_weight=1

Tune on 26 and 30 only; report the held-out conversations (41 42 43) once, with the figures of
`scripts/bench/bench_retrieval.py` (a real `a2e-host serve` process).
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
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # tests/support

from support.labels import label  # noqa: E402

from host.app import Host  # noqa: E402
from host.client import MemoryClient  # noqa: E402
from host.config import load_config  # noqa: E402
from host.search.ranking import REFERENCE_TEXTS, coverages  # noqa: E402
from host.store.records import Query, Scope  # noqa: E402
from host.text.searchable import searchable_text  # noqa: E402
from scripts.bench.bench_retrieval import CATEGORIES, DATA_HELP, ask, load  # noqa: E402

DATA = ROOT / "scripts" / "bench" / "data" / "relevance.json"
CACHE = Path(tempfile.gettempdir()) / "a2e-tune-embeddings.npz"  # shared by every harness run
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


class CachedEmbedder:
    """Wraps an embedder: vectors by (query or not, text), kept in a .npz file."""

    def __init__(self, inner: Any, path: Path) -> None:
        self.inner, self.path = inner, path
        self.name, self.dim = inner.name, inner.dim
        self.cache: dict[str, np.ndarray] = {}
        if path.exists():
            with np.load(path, allow_pickle=False) as z:
                self.cache = dict(zip(z["keys"].tolist(), z["vecs"], strict=True))
        self.dirty = False

    def _get(self, texts: list[str], query: bool) -> np.ndarray:
        tag = ("q|" if query else "d|") + self.name + "|"
        missing = [t for t in dict.fromkeys(texts) if tag + t not in self.cache]
        if missing:
            fn = self.inner.embed_queries if query else self.inner.embed
            for t, v in zip(missing, fn(missing), strict=True):
                self.cache[tag + t] = v
            self.dirty = True
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self.cache[tag + t] for t in texts]).astype(np.float32)

    def embed(self, texts: list[str]) -> np.ndarray:
        return self._get(list(texts), False)

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return self._get(list(texts), True)

    def save(self) -> None:
        if self.dirty:
            keys = list(self.cache)
            np.savez(self.path, keys=np.array(keys), vecs=np.stack([self.cache[k] for k in keys]))
            self.dirty = False


def overrides(pairs: list[str], db: str) -> dict[str, dict[str, Any]]:
    """Config overrides of `SECTION.FIELD=VALUE` pairs (numbers cast, a list as JSON), on a free
    port and the database `db`."""
    out: dict[str, dict[str, Any]] = {"server": {"port": 0}, "store": {"db": db}}
    for p in pairs:
        name, _, value = p.partition("=")
        section, _, field_name = name.partition(".")
        v: Any = value
        if value.startswith("["):  # a list, as JSON: search.calibration=[-8.4,24.3,...]
            out.setdefault(section, {})[field_name] = json.loads(value)
            continue
        for cast in (int, float):
            try:
                v = cast(value)
                break
            except ValueError:
                pass
        out.setdefault(section, {})[field_name] = v
    return out


@asynccontextmanager
async def cached_host(cfg: Any, cache: Path) -> AsyncIterator[tuple[Host, CachedEmbedder | None]]:
    """A started in-process Host whose embedder reads and fills the vector cache `cache`;
    on exit the host stops and the cache is saved."""
    host = Host(cfg)
    emb = None
    if host.search.embedder is not None:
        emb = CachedEmbedder(host.search.embedder, cache)
        host.search.use_embedder(emb)  # type: ignore[arg-type]
    await host.start()
    try:
        yield host, emb
    finally:
        await host.stop()
        if emb is not None:
            emb.save()


async def stored_conversation(host: Host, ns: str, turns: list[tuple[Any, str]]) -> MemoryClient:
    """A client of `host` in namespace `ns` (agent "bench") that has stored every turn as an
    episodic entry keyed by its dialogue id, 100 a request."""
    c = await MemoryClient.connect(f"ws://127.0.0.1:{host.port}")
    await c.init(ns, {"agent": "bench"})
    entries = [{"key": {"turn": d}, "content": t, "tier": "episodic"} for d, t in turns]
    for i in range(0, len(entries), 100):
        await c.store(entries[i:i + 100])
    return c


def add_harness_args(ap: argparse.ArgumentParser, tries: str = "runs") -> None:
    """`--cache` (the vector cache of every harness script) and, unless `tries` is "", `--try`:
    with "runs" each `--try` is one run's overrides (several compared), with "one" a single
    set of overrides."""
    if tries:
        ap.add_argument("--try", dest="tries", nargs="+", default=[],
                        action="append" if tries == "runs" else "store",
                        metavar="SECTION.FIELD=VALUE",
                        help="one run's config overrides" if tries == "runs"
                        else "config overrides")
    ap.add_argument("--cache", type=Path, default=CACHE, help="the vector cache (a .npz file)")


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


async def locomo_recall(settings: list[str], convs: dict[str, Any], cache: Path
                        ) -> dict[str, float]:
    """R@5, R@10, R@10 per category and the p50 latency (ms) of every question of `convs`
    (each conversation in its own namespace) under config overrides `settings`."""
    rows: list[tuple[int, float, float]] = []
    lat: list[float] = []
    with tempfile.TemporaryDirectory(prefix="a2e-tune-") as tmp:
        cfg = load_config(None, overrides(settings, f"{tmp}/t.db"))
        async with cached_host(cfg, cache) as (host, _emb):
            for name, (turns, qs) in convs.items():
                c = await stored_conversation(host, f"locomo-{name}", turns)
                await host.search.drain()
                await ask(c, qs, lat, rows)
                await c.close()
    res = {"r5": statistics.fmean(r[1] for r in rows), "r10": statistics.fmean(r[2] for r in rows),
           "p50": float(np.percentile(lat, 50))}
    for cat, name in CATEGORIES.items():
        sel = [r[2] for r in rows if r[0] == cat]
        res[name] = statistics.fmean(sel) if sel else float("nan")
    return res


async def run(args: argparse.Namespace) -> None:
    if args.set == "locomo":
        if args.data is None:
            raise SystemExit(f"--set locomo needs --data PATH: {DATA_HELP}")
        convs = {c: load(args.data, c) for c in args.conv}
        print(f"conversations {' '.join(args.conv)}")
        print("| settings | R@5 | R@10 | " + " | ".join(CATEGORIES.values()) + " | p50 ms |")
        print("|---|---|---|" + "---|" * len(CATEGORIES) + "---|")
        for settings in args.tries or [[]]:
            r = await locomo_recall(settings, convs, args.cache)
            print(f"| {' '.join(settings) or 'defaults'} | {r['r5']:.3f} | {r['r10']:.3f} | "
                  + " | ".join(f"{r[name]:.3f}" for name in CATEGORIES.values())
                  + f" | {r['p50']:.1f} |", flush=True)
        return
    filler = (locomo_filler(args.data, args.conv, args.fill) if args.data is not None
              else generated_filler(args.fill))
    print(f"filler: {len(filler)} {'LoCoMo turns' if args.data else 'generated sentences'}")
    for settings in args.tries or [[]]:
        small, large = await evaluate(settings, filler, args.cache)
        report(" ".join(settings) or "defaults", small, large)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--set", choices=("relevance", "locomo"), default="relevance",
                    help="the facts and their questions, or LoCoMo's evidence recall")
    ap.add_argument("--fill", type=int, default=1000,
                    help="unrelated entries of the large memory (--set relevance)")
    ap.add_argument("--data", type=Path, default=None, metavar="PATH",
                    help="LoCoMo (a folder of <conv>.json or the single file): the conversations"
                    " asked (--set locomo, required) or the filler (--set relevance)")
    ap.add_argument("--conv", nargs="+", default=["26", "30"],
                    help="LoCoMo conversations asked, or the filler comes from (with --data)")
    add_harness_args(ap)
    asyncio.run(run(ap.parse_args()))


if __name__ == "__main__":
    main()
