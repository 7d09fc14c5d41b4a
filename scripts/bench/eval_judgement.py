#!/usr/bin/env python3
"""Judgement of a reply, measured: is the present first, and does a reply repeat itself?

The data (`scripts/bench/data/judgement.json`, written for this script), stored the way agents store
conversation memory (each turn an episodic entry keyed by its turn number, in the order said):

- **updates**: 20 facts and, later, their updates that say they changed ("I work as a data
  analyst at Northwind Bank." ... "I switched jobs last week: I'm now a product manager at
  Helios Robotics."), each asked once ("Where do I work?"); **silent updates**: 6 more whose
  newer text does not say so ("My favourite food is sushi." ... "... is ramen.");
- **clusters**: four facts said five ways each beside eight distinct facts, asked six questions
  ("What do we know about this user?", "What is my dog called?"...);
- **similar**: 12 pairs of similar but different facts ("I'm allergic to peanuts." / "I'm
  allergic to penicillin."), the second written later, each member asked for;
- **far updates**: 10 updates that share no word with the question and are far from it by
  meaning ("I rent a flat in Glasgow..." ... "We relocated to Lisbon in March; the new
  apartment overlooks the river.", asked "Where do I live?"): what a person means, which the
  embedder must know (reported as "far update above / first");
- **ended facts** (one memory, a second table): 20 facts stored with a `valid_until` that has
  passed and their successors with that `valid_from`, neither saying it changed ("My phone is
  an iPhone 11." ... "My phone is a Pixel 8.", asked "What phone do I have?"), and 12 ended
  facts with no successor, asked about the past ("My first mobile phone was a Nokia 3310.",
  "What was my first mobile phone?"), several near a successor of the pairs. Reported: how
  often the current fact ranks above the ended one and first, and where each ended-only
  answer lands (first, top 5, top 10; "lost" when out of the top 10), beside the same memory
  stored without bounds (the order before the judgement read them).

Each family is a namespace of an in-process host (real WebSocket, SQLite, or PostgreSQL with
`--postgres`), small (the family alone) and large (among `--fill` unrelated generated turns).
Reported per memory and half (cases of even index: "tune", odd: "check"):

- how often the update ranks above the fact it replaced, and first;
- distinct facts in a top 5 and a top 10 of the cluster questions;
- merges: pairs collapsed into one (false: not the same fact said again) and missed duplicates
  (two sayings of one fact both shown in a top 10); supersessions, right and false;
- the similar pairs: the asked-for fact's rank, with and without judgement (it must not move).

Each question is asked with `"supersede": false` (the ranking alone, the baseline) and, when
the host judges replies, as it answers by default (updates first) and with `"collapse": true`
(near-duplicates collapsed too). `--grid` also judges the baseline replies offline
(`host.search.judgement.plan` on the stored texts' vectors) at each pair of thresholds, to
choose them on the tuning half.

    python scripts/bench/eval_judgement.py                    # SQLite, 300 unrelated turns
    python scripts/bench/eval_judgement.py --postgres --fill 1000
    python scripts/bench/eval_judgement.py --grid
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # tests/support

from host.client import MemoryClient  # noqa: E402
from host.config import load_config  # noqa: E402
from host.search.judgement import Thresholds, plan  # noqa: E402
from host.text.searchable import searchable_text  # noqa: E402
from scripts.bench.eval_relevance import (  # noqa: E402
    add_harness_args,
    cached_host,
    generated_filler,
    overrides,
)

DATA = ROOT / "scripts" / "bench" / "data" / "judgement.json"
HALVES = ("tune", "check")
TEXTS: dict[tuple[str, str], list[str]] = {}  # (memory, size): its turns' texts (--show)


@dataclass(frozen=True)
class Label:
    """What a stored turn is: its family, case (fact/cluster index), role and half."""

    family: str
    case: int
    role: str
    half: str

    def fact(self) -> tuple[str, int, str]:
        """The fact it says: a cluster's five sayings are one fact."""
        return (self.family, self.case, "" if self.role.startswith("say") else self.role)


@dataclass
class Memory:
    """The turns of one namespace (text, label or None for filler) in the order written."""

    name: str
    turns: list[tuple[str, Label | None]]
    questions: list[tuple[str, Label]]  # question, the label of the fact it asks for
    bounds: dict[str, dict[str, str]] = field(default_factory=dict)  # text: its valid_*


def _half(i: int) -> str:
    return HALVES[i % 2]


def memories(data: dict[str, Any], filler: list[str], seed: int = 3) -> list[Memory]:
    """The families' memories: earlier facts in the first half of the filler, their updates
    (and the second of similar pairs) in the second; clusters spread at random."""
    rng = random.Random(seed)

    def spread(first: list[tuple[str, Label]], second: list[tuple[str, Label]]
               ) -> list[tuple[str, Label | None]]:
        half = len(filler) // 2
        a: list[tuple[str, Label | None]] = [(t, None) for t in filler[:half]]
        b: list[tuple[str, Label | None]] = [(t, None) for t in filler[half:]]
        for x in first:
            a.insert(rng.randrange(len(a) + 1), x)
        for x in second:
            b.insert(rng.randrange(len(b) + 1), x)
        return a + b

    def updates(fam: str) -> Memory:
        cases = data[fam]
        return Memory(fam, spread(
            [(c["old"], Label(fam, i, "old", _half(i))) for i, c in enumerate(cases)],
            [(c["new"], Label(fam, i, "new", _half(i))) for i, c in enumerate(cases)]),
            [(c["question"], Label(fam, i, "new", _half(i))) for i, c in enumerate(cases)])

    out = [updates("updates"), updates("silent_updates")]
    said = [(t, Label("clusters", i, f"say{j}", _half(i)))
            for i, c in enumerate(data["clusters"]) for j, t in enumerate(c)]
    said += [(t, Label("distinct", i, "fact", _half(i))) for i, t in enumerate(data["distinct"])]
    rng.shuffle(said)
    qs = [(q["question"], Label("clusters", -1 if q["cluster"] is None else q["cluster"], "q",
                                _half(k)))
          for k, q in enumerate(data["cluster_questions"])]
    out.append(Memory("clusters", spread(said[: len(said) // 2], said[len(said) // 2:]), qs))
    sim = data["similar"]
    out.append(Memory("similar", spread(
        [(c["first"], Label("similar", i, "first", _half(i))) for i, c in enumerate(sim)],
        [(c["second"], Label("similar", i, "second", _half(i))) for i, c in enumerate(sim)]),
        [(q, Label("similar", i, role, _half(i))) for i, c in enumerate(sim)
         for q, role in zip(c["questions"], ("first", "second"), strict=True)]))
    # last, so that the other families' places among the filler stay as they were
    out.append(updates("far_updates"))
    return out


# the instant the ended facts' successors began (and the ended facts stopped holding)
CHANGED = "2025-01-01T00:00:00Z"


def ended_memories(data: dict[str, Any], filler: list[str], seed: int = 5) -> list[Memory]:
    """The ended facts' memory (each pair's older fact before the filler's middle, its
    successor after, the ended-only facts at random) and the same turns stored without
    bounds ("ended_plain")."""
    rng = random.Random(seed)
    half = len(filler) // 2
    a: list[tuple[str, Label | None]] = [(t, None) for t in filler[:half]]
    b: list[tuple[str, Label | None]] = [(t, None) for t in filler[half:]]
    bounds: dict[str, dict[str, str]] = {}
    fam, only = "ended_updates", "ended_only"
    for i, c in enumerate(data[fam]):
        a.insert(rng.randrange(len(a) + 1), (c["old"], Label(fam, i, "old", _half(i))))
        b.insert(rng.randrange(len(b) + 1), (c["new"], Label(fam, i, "new", _half(i))))
        bounds[c["old"]] = {"valid_until": CHANGED}
        bounds[c["new"]] = {"valid_from": CHANGED}
    for i, c in enumerate(data[only]):
        side = a if rng.random() < 0.5 else b
        side.insert(rng.randrange(len(side) + 1), (c["fact"], Label(only, i, "old", _half(i))))
        bounds[c["fact"]] = {"valid_until": CHANGED}
    questions = [(c["question"], Label(fam, i, "new", _half(i)))
                 for i, c in enumerate(data[fam])]
    questions += [(c["question"], Label(only, i, "old", _half(i)))
                  for i, c in enumerate(data[only])]
    return [Memory("ended", a + b, questions, bounds), Memory("ended_plain", a + b, questions)]


@dataclass
class Shown:
    """One entry of a reply: its turn number, what it carries (turn numbers)."""

    turn: int
    supersedes: list[int] = field(default_factory=list)
    collapsed: list[int] = field(default_factory=list)


def _turn(key: dict[str, Any]) -> int:
    return int(key["turn"])


def shown(entries: list[dict[str, Any]]) -> list[Shown]:
    """A reply's entries as `Shown`."""
    return [Shown(_turn(e["key"]), [_turn(k) for k in e.get("supersedes", [])],
                  [_turn(k) for k in e.get("collapsed", {}).get("keys", [])]) for e in entries]


def judged_offline(entries: list[dict[str, Any]], vec: dict[int, np.ndarray],
                   th: Thresholds) -> list[Shown]:
    """A baseline reply judged here by `plan` (the stored texts' vectors `vec` by turn)."""
    turns = [_turn(e["key"]) for e in entries]
    head = turns[: th.depth]
    mat = np.stack([vec[t] for t in head]).astype(np.float64)
    sims = mat @ mat.T
    texts = [str(e["content"]) for e in entries[: th.depth]]
    newness = [(0.0, t) for t in head]  # written in turn order
    rel = [float(e["relevance"]) for e in entries[: th.depth]]
    out = [Shown(head[k], [head[j] for j in sup], [head[j] for j in coll])
           for k, sup, coll in plan(sims, texts, newness, th, rel)]
    return out + [Shown(t) for t in turns[th.depth:]]


@dataclass
class Tally:
    """Counts over the replies of one memory, half and method."""

    asked: int = 0
    update_above: int = 0
    update_first: int = 0
    distinct5: list[int] = field(default_factory=list)
    distinct10: list[int] = field(default_factory=list)
    merges: set[tuple[int, int]] = field(default_factory=set)
    false_merges: set[tuple[int, int]] = field(default_factory=set)
    missed: set[tuple[int, int]] = field(default_factory=set)
    supersede: set[tuple[int, int]] = field(default_factory=set)
    false_supersede: set[tuple[int, int]] = field(default_factory=set)
    similar_ranks: list[int] = field(default_factory=list)  # rank of the asked fact (11: absent)
    ended_ranks: list[int] = field(default_factory=list)  # of an ended-only fact (11: absent)


def tally(t: Tally, reply: list[Shown], asked: Label, labels: dict[int, Label | None]) -> None:
    """Add one reply (top 10) to `t`."""
    top = reply[:10]
    t.asked += 1

    def fact(turn: int) -> tuple[str, int, str] | None:
        lab = labels[turn]
        return lab.fact() if lab is not None else None

    for s in top:
        for o in s.collapsed:
            pair = (min(s.turn, o), max(s.turn, o))
            t.merges.add(pair)
            if fact(s.turn) is None or fact(s.turn) != fact(o):
                t.false_merges.add(pair)
        for o in s.supersedes:
            ls, lo = labels[s.turn], labels[o]
            right = (ls is not None and lo is not None and ls.family == lo.family
                     and ls.family.endswith("updates") and ls.case == lo.case
                     and (ls.role, lo.role) == ("new", "old"))
            (t.supersede if right else t.false_supersede).add((s.turn, o))
    facts = [fact(s.turn) for s in top]
    for i, a in enumerate(facts):
        for j in range(i + 1, len(facts)):
            if a is not None and a == facts[j]:
                t.missed.add((min(top[i].turn, top[j].turn), max(top[i].turn, top[j].turn)))
    if asked.family.endswith("updates"):
        pos = {labels[s.turn].role: k for k, s in enumerate(top)  # type: ignore[union-attr]
               if labels[s.turn] is not None and labels[s.turn].case == asked.case  # type: ignore[union-attr]
               and labels[s.turn].family == asked.family}  # type: ignore[union-attr]
        new, old = pos.get("new"), pos.get("old")
        if new is not None and (old is None or new < old):
            t.update_above += 1
        if new == 0:
            t.update_first += 1
    elif asked.family == "clusters":
        t.distinct5.append(len({f for f in facts[:5] if f is not None}))
        t.distinct10.append(len({f for f in facts if f is not None}))
    else:
        ranks = [k for k, s in enumerate(top) if labels[s.turn] == asked]
        (t.ended_ranks if asked.family == "ended_only" else t.similar_ranks).append(
            ranks[0] + 1 if ranks else 11)


async def ask(c: MemoryClient, q: str, limit: int, judge: bool | None) -> list[dict[str, Any]]:
    """One retrieve's entries: the ranking alone (`judge` False), judged as the host judges
    when asked to collapse too (True), or a plain request (None: a host before judgement)."""
    extra: dict[str, Any] = {} if judge is None else {"supersede": judge, "collapse": judge}
    return list((await c.retrieve(query=q, limit=limit, **extra)).entries)


def _grid(args: argparse.Namespace) -> list[Thresholds]:
    if not args.grid:
        return []
    return [Thresholds(d, s, relevance=r, single=one) for d in (0.7, 0.75, 0.8, 0.85, 0.9)
            for s in (0.35, 0.4, 0.45, 0.5, 0.55, 0.6) for r in (0.1, 0.2, 0.3)
            for one in (False, True)]


@contextlib.contextmanager
def database(pg: bool, tmp: str) -> Iterator[str]:
    """A database for the host: a SQLite file in `tmp`, or a fresh embedded PostgreSQL's."""
    if not pg:
        yield f"{tmp}/j.db"
        return
    from support.postgres import EmbeddedPostgres
    with EmbeddedPostgres() as server:
        yield server.create_database("judgement")


async def run(args: argparse.Namespace) -> None:
    data = json.loads(DATA.read_text())
    grid = _grid(args)
    results: dict[tuple[str, str, str, str], Tally] = {}
    with tempfile.TemporaryDirectory(prefix="a2e-judge-") as tmp, \
            database(args.postgres, tmp) as db:
        cfg = load_config(None, overrides(args.tries, db))
        async with cached_host(cfg, args.cache) as (host, emb):
            judges = True
            for size, filler in (("small", []), ("large", generated_filler(args.fill))):
                for m in memories(data, filler) + ended_memories(data, filler):
                    ns = f"{m.name}-{size}"
                    c = await MemoryClient.connect(f"ws://127.0.0.1:{host.port}")
                    await c.init(ns, {"agent": "eval"})
                    entries = [{"key": {"turn": i}, "content": t, "tier": "episodic",
                                **m.bounds.get(t, {})} for i, (t, _lab) in enumerate(m.turns)]
                    for i in range(0, len(entries), 100):
                        await c.store(entries[i:i + 100])
                    await host.search.drain()
                    labels = {i: lab for i, (_t, lab) in enumerate(m.turns)}
                    TEXTS[m.name, size] = [t for t, _lab in m.turns]
                    vec: dict[int, np.ndarray] = {}
                    if grid and emb is not None:
                        v = emb.embed([searchable_text(e["content"], [], e["key"])
                                       for e in entries])
                        vec = dict(enumerate(v))
                    for q, asked in m.questions:
                        def add(method: str, reply: list[Shown], _a: Label = asked,
                                _ns: tuple[str, str] = (size, m.name),
                                _lab: dict[int, Label | None] = labels) -> None:
                            key = (_ns[0], _a.half, method, _ns[1])
                            tally(results.setdefault(key, Tally()), reply, _a, _lab)

                        if judges:
                            try:
                                base = await ask(c, q, 50, False)
                            except Exception:
                                judges = False  # a host before judgement: the baseline alone
                        if not judges:
                            base = await ask(c, q, 50, None)
                        add("ranking alone", shown(base))
                        if judges:
                            add("host default", shown(await ask(c, q, 10, None)))
                            add("host, collapse", shown(await ask(c, q, 10, True)))
                        for th in grid:
                            add(f"d={th.duplicate} s={th.supersede} r={th.relevance}"
                                f"{' single' if th.single else ''}",
                                judged_offline(base, vec, th))
                    await c.close()
    report(results, args)
    report_ended(results, args.show)


def report(results: dict[tuple[str, str, str, str], Tally], args: argparse.Namespace) -> None:
    """Print one table row per memory, half and method."""
    print(f"backend: {'postgresql' if args.postgres else 'sqlite'}; large memories among "
          f"{args.fill} generated turns")
    print("\n| memory | half | method | update above old | update first | far update above / first |"
          " silent update above |"
          " distinct top 5 | distinct top 10 | merges | false merges | missed duplicates |"
          " supersessions | false supersessions | similar: asked fact's mean rank |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    methods = sorted({k[2] for k in results}, key=lambda x: (
        x != "ranking alone", not x.startswith("host"), x))
    for size in ("small", "large"):
        for half in HALVES:
            for meth in methods:
                parts = {fam: results.get((size, half, meth, fam), Tally())
                         for fam in ("updates", "silent_updates", "clusters", "similar",
                                     "far_updates")}
                u, su, cl, si, fu = parts.values()
                def every(what: str, _p: dict[str, Tally] = parts) -> set[Any]:
                    return {(f, pair) for f, x in _p.items() for pair in getattr(x, what)}

                merges, false, missed = every("merges"), every("false_merges"), every("missed")
                sup, fsup = every("supersede"), every("false_supersede")
                if meth == args.show:
                    for what, pairs in (("false merge", false), ("false supersession", fsup),
                                        ("missed duplicate", missed)):
                        for f, (a, b) in sorted(pairs):
                            print(f"  {size} {half} {what}: {TEXTS[f, size][a]!r} /"
                                  f" {TEXTS[f, size][b]!r}")
                d5 = np.mean(cl.distinct5) if cl.distinct5 else float("nan")
                d10 = np.mean(cl.distinct10) if cl.distinct10 else float("nan")
                sr = np.mean(si.similar_ranks) if si.similar_ranks else float("nan")
                print(f"| {size} | {half} | {meth} | {u.update_above}/{u.asked} |"
                      f" {u.update_first}/{u.asked} | {fu.update_above}/{fu.update_first}/"
                      f"{fu.asked} | {su.update_above}/{su.asked} | {d5:.2f} |"
                      f" {d10:.2f} | {len(merges)} | {len(false)} | {len(missed)} | {len(sup)} |"
                      f" {len(fsup)} | {sr:.2f} |")


def report_ended(results: dict[tuple[str, str, str, str], Tally], show: str = "") -> None:
    """The ended facts' table: one row per memory size, half and method ("bounds not stored":
    the same turns without bounds, as every reply was ordered before the judgement read
    them); with `show` a method, its false supersessions."""
    print("\n| memory | half | method | current above ended | current first |"
          " ended-only first / top 5 / top 10 / lost | ended-only mean rank |"
          " supersessions | false supersessions |")
    print("|---|---|---|---|---|---|---|---|---|")
    for size in ("small", "large"):
        for half in HALVES:
            for name, meth in (("ended", "ranking alone"), ("ended_plain", "host default"),
                               ("ended", "host default"), ("ended", "host, collapse")):
                t = results.get((size, half, meth, name))
                if t is None:
                    continue
                label = meth + (", bounds not stored" if name == "ended_plain" else "")
                if meth == show and name == "ended":
                    for a, b in sorted(t.false_supersede):
                        print(f"  {size} {half} false supersession: {TEXTS[name, size][a]!r}"
                              f" / {TEXTS[name, size][b]!r}")
                r = t.ended_ranks
                n = len(r)
                print(f"| {size} | {half} | {label} | {t.update_above}/{t.asked - n} |"
                      f" {t.update_first}/{t.asked - n} |"
                      f" {sum(x == 1 for x in r)}/{sum(x <= 5 for x in r)}/"
                      f"{sum(x <= 10 for x in r)}/{sum(x > 10 for x in r)} of {n} |"
                      f" {np.mean(r) if r else float('nan'):.2f} | {len(t.supersede)} |"
                      f" {len(t.false_supersede)} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fill", type=int, default=300, help="unrelated turns of a large memory")
    ap.add_argument("--postgres", action="store_true", help="an embedded PostgreSQL database")
    ap.add_argument("--grid", action="store_true",
                    help="also judge the baseline offline at each pair of thresholds")
    ap.add_argument("--show", default="", metavar="METHOD",
                    help="print the false merges and supersessions and the missed duplicates"
                         " of this method (a row's third column)")
    add_harness_args(ap, tries="one")
    asyncio.run(run(ap.parse_args()))


if __name__ == "__main__":
    main()
