#!/usr/bin/env python3
"""Consolidation on write, measured: how often a write policy merges what it should not, and
misses what it should merge.

The families of `eval_judgement.py` (`scripts/bench/data/judgement.json`, its `memories`:
updates of a fact among unrelated turns, silent and far updates, paraphrase clusters beside
distinct facts, similar but different pairs), stored the way an agent stores what it is told:
turn after turn, each an episodic entry keyed by its turn number, in a namespace of its own
per family, memory size and policy. Each labelled turn is stored alone with the policy
(`"consolidate": "skip"` or `"supersede"`); the unrelated turns between them go in batches
with `keep` (so they never merge among themselves: what is measured is the labelled facts'
merges, with each other and with the unrelated turns). Small memories hold a family alone,
large ones the family among `--fill` generated unrelated turns. Over the wire, on SQLite or
(`--postgres`) an embedded PostgreSQL.

A merge the host reports (`consolidated`: the new turn, the existing one) is right when both
say the same fact: two sayings of one cluster, or an update and the fact it updates
(`updates`, `far_updates`, `silent_updates`, new over old). Every other merge is false (two
similar but different facts, a fact and an unrelated turn, two distinct facts). A merge is
expected where the stored memory holds a live saying of the same fact (a cluster's second to
fifth saying) and, for `supersede`, where an update that says it changed (`updates`,
`far_updates`) finds its fact live; a silent update ("... is ramen." after "... is sushi.") is
not expected (the rule does not tell it from a different fact) but counts as right when merged.

Reported per memory size and policy: merges, false merges, precision, expected merges found
(recall), missed ones, the similar pairs merged (must be 0), and the mean time of a labelled
store with the policy (indicative). `--show` prints each false and missed merge.

A second table, **the time of a fact** (`valid_from` / `valid_until`, docs/protocol.md): a
family of its own, in its own namespaces, stored the same way. The 20 first facts of
`ended_updates` are each stored without bounds (or with those of their kind), then said again
in the same words with other bounds: ended (`valid_until` passed), ending later (`valid_until`
ahead), beginning later (`valid_from` ahead), a next stint (ended, then from that end on),
and the same bounds again; the 20 `updates` pairs each as the fact, then the update saying it
changed: an update that ended, one to come, an update of an ended fact (from its end on), and
an update of a fact still to come. A told fact is **lost** when `skip` drops an entry whose
bounds differ from those of the entry it was skipped for (its time is stored nowhere), or when
`supersede` retires a fact still to come, or one that holds at the write in favour of an entry
that does not (the present retired by a record of the past or by a fact to come). Must be 0;
`--show` prints each loss. `--bounds-only` runs this family alone.

    python scripts/bench/eval_consolidation.py                  # SQLite, 300 unrelated turns
    python scripts/bench/eval_consolidation.py --postgres --fill 1000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # tests/support

from host.client import MemoryClient  # noqa: E402
from host.config import load_config  # noqa: E402
from protocol.codec import new_id, now  # noqa: E402
from protocol.messages import VERSION, MemoryStoreRequest  # noqa: E402
from protocol.validity import valid_at  # noqa: E402
from scripts.bench.eval_judgement import DATA, Label, database, memories  # noqa: E402
from scripts.bench.eval_relevance import (  # noqa: E402
    add_harness_args,
    cached_host,
    generated_filler,
    overrides,
)

POLICIES = ("skip", "supersede")
UPDATES = ("updates", "far_updates")  # updates that say they changed


@dataclass
class Count:
    """The merges of one memory size and policy."""

    merges: int = 0
    false: list[tuple[str, str]] = field(default_factory=list)
    expected: int = 0
    found: int = 0
    missed: list[tuple[str, str]] = field(default_factory=list)
    similar_merged: int = 0
    store_seconds: list[float] = field(default_factory=list)


def same_fact(new: Label, old: Label | None) -> bool:
    """Whether a merge of `new` with `old` is right: one fact said again, or an update over
    the fact it updates."""
    if old is None or new.family != old.family or new.case != old.case:
        return False
    if new.family == "clusters":
        return True
    return new.family.endswith("updates") and (new.role, old.role) == ("new", "old")


def _expected(policy: str, lab: Label, live: dict[int, Label | None]) -> int | None:
    """The live turn the policy should merge `lab` with (None: none)."""
    for turn, other in live.items():
        if other is None:
            continue
        if lab.family == "clusters" and same_fact(lab, other):
            return turn
        if policy == "supersede" and lab.family in UPDATES and same_fact(lab, other):
            return turn
    return None


async def store(c: MemoryClient, entries: list[dict[str, Any]], policy: str) -> Any:
    return await c.request(MemoryStoreRequest(
        id=new_id(), version=VERSION, ts=now(), memory_id=c._mid(None),
        entries=entries, consolidate=policy))  # type: ignore[arg-type]


async def one_memory(c: MemoryClient, turns: list[tuple[str, Label | None]], policy: str,
                     count: Count) -> None:
    """Store `turns` in order (the labelled ones alone, with `policy`) and count the merges."""
    live: dict[int, Label | None] = {}
    batch: list[dict[str, Any]] = []

    async def flush() -> None:
        if batch:
            await store(c, batch, "keep")
            batch.clear()

    for i, (text, lab) in enumerate(turns):
        entry = {"key": {"turn": i}, "content": text, "tier": "episodic"}
        if lab is None:
            batch.append(entry)
            live[i] = None
            if len(batch) >= 100:
                await flush()
            continue
        await flush()
        want = _expected(policy, lab, live)
        t0 = time.perf_counter()
        reply = await store(c, [entry], policy)
        count.store_seconds.append(time.perf_counter() - t0)
        merges = [(int(m["existing"]["turn"]), m["action"]) for m in reply.consolidated or []]
        if want is not None:
            count.expected += 1
        right = False
        for old, action in merges:
            count.merges += 1
            if same_fact(lab, turns[old][1]):
                right = True
            else:
                count.false.append((text, turns[old][0]))
                if lab.family == "similar":
                    count.similar_merged += 1
            if action == "superseded":
                live.pop(old, None)
        if want is not None:
            if right:
                count.found += 1
            else:
                count.missed.append((text, turns[want][0]))
        if reply.stored:
            live[i] = lab


# the bounds family: instants passed and ahead at every run (epoch seconds)
PASSED = 1577836800.0  # 2020-01-01T00:00:00Z
AHEAD = 4102444800.0  # 2100-01-01T00:00:00Z
Bounds = dict[str, float]
# (kind, the first saying's bounds, the second's): `ended_updates`' facts said twice
RESTATED: list[tuple[str, Bounds, Bounds]] = [
    ("ended", {}, {"valid_until": PASSED}),
    ("ends later", {}, {"valid_until": AHEAD}),
    ("begins later", {}, {"valid_from": AHEAD}),
    ("next stint", {"valid_until": PASSED}, {"valid_from": PASSED}),
    ("same bounds", {"valid_until": PASSED}, {"valid_until": PASSED}),
]
# `updates`' pairs: the fact's bounds, the update's
UPDATED: list[tuple[str, Bounds, Bounds]] = [
    ("update ended", {}, {"valid_until": PASSED}),
    ("update to come", {}, {"valid_from": AHEAD}),
    ("update of an ended fact", {"valid_until": PASSED}, {"valid_from": PASSED}),
    ("update of a fact to come", {"valid_from": AHEAD}, {}),
]


@dataclass
class Told:
    """The bounds family's merges of one memory size and policy."""

    told: int = 0  # labelled stores
    merges: int = 0
    lost: list[tuple[str, str, str]] = field(default_factory=list)  # kind, new, existing


def bounded_memories(data: dict[str, Any], filler: list[str], seed: int = 11
                     ) -> list[tuple[str, list[tuple[str, Label | None]],
                                     dict[int, tuple[str, Bounds]]]]:
    """The bounds family's two memories (the facts said again, the updates), each as its
    name, its turns (first sayings before the filler's middle, second ones after) and, by
    turn, each labelled turn's kind and bounds."""
    restated = [(c["old"], c["old"], RESTATED[i % len(RESTATED)])
                for i, c in enumerate(data["ended_updates"])]
    updated = [(c["old"], c["new"], UPDATED[i % len(UPDATED)])
               for i, c in enumerate(data["updates"])]
    return [("restated", *_bounded(restated, filler, seed)),
            ("updated", *_bounded(updated, filler, seed))]


def _bounded(cases: list[tuple[str, str, tuple[str, Bounds, Bounds]]], filler: list[str],
             seed: int
             ) -> tuple[list[tuple[str, Label | None]], dict[int, tuple[str, Bounds]]]:
    rng = random.Random(seed)
    half = len(filler) // 2
    a: list[tuple[str, Label | None, str, Bounds]] = [(t, None, "", {}) for t in filler[:half]]
    b: list[tuple[str, Label | None, str, Bounds]] = [(t, None, "", {}) for t in filler[half:]]
    for i, (first, second, (kind, b1, b2)) in enumerate(cases):
        a.insert(rng.randrange(len(a) + 1), (first, Label("bounds", i, "old", ""), kind, b1))
        b.insert(rng.randrange(len(b) + 1), (second, Label("bounds", i, "new", ""), kind, b2))
    turns = a + b
    return [(t, lab) for t, lab, _k, _b in turns], {
        i: (kind, bounds) for i, (_t, lab, kind, bounds) in enumerate(turns) if lab is not None}


def _window(bounds: Bounds) -> tuple[float | None, float | None]:
    return bounds.get("valid_from"), bounds.get("valid_until")


def lost(action: str, new: Bounds, old: Bounds, at: float) -> bool:
    """Whether a merge at `at` loses a told fact (the module's docstring)."""
    if action == "skipped":
        return _window(new) != _window(old)
    retired, by = _window(old), _window(new)
    return not valid_at(retired[0], None, at) or (
        valid_at(*retired, at) and not valid_at(*by, at))


async def bounded_memory_run(c: MemoryClient, turns: list[tuple[str, Label | None]],
                             kinds: dict[int, tuple[str, Bounds]], policy: str,
                             told: Told) -> None:
    """Store the bounds family's `turns` in order (the labelled ones alone, with `policy`,
    each with its bounds) and count the merges and the told facts they lose."""
    batch: list[dict[str, Any]] = []
    for i, (text, lab) in enumerate(turns):
        entry: dict[str, Any] = {"key": {"turn": i}, "content": text, "tier": "episodic"}
        if lab is None:
            batch.append(entry)
            if len(batch) >= 100:
                await store(c, batch, "keep")
                batch.clear()
            continue
        if batch:
            await store(c, batch, "keep")
            batch.clear()
        kind, bounds = kinds[i]
        at = time.time()
        reply = await store(c, [{**entry, **bounds}], policy)
        told.told += 1
        for m in reply.consolidated or []:
            told.merges += 1
            old = int(m["existing"]["turn"])
            if lost(m["action"], bounds, kinds.get(old, ("", {}))[1], at):
                told.lost.append((kind, text, turns[old][0]))


async def run(args: argparse.Namespace
              ) -> tuple[dict[tuple[str, str], Count], dict[tuple[str, str], Told]]:
    data = json.loads(DATA.read_text())
    out: dict[tuple[str, str], Count] = {}
    bounds: dict[tuple[str, str], Told] = {}
    with tempfile.TemporaryDirectory(prefix="a2e-consolidate-") as tmp, \
            database(args.postgres, tmp) as db:
        cfg = load_config(None, overrides(args.tries, db))
        async with cached_host(cfg, args.cache) as (host, _emb):
            for size, filler in (("small", []), ("large", generated_filler(args.fill))):
                for policy in POLICIES:
                    count = out.setdefault((size, policy), Count())
                    for m in [] if args.bounds_only else memories(data, filler):
                        c = await MemoryClient.connect(f"ws://127.0.0.1:{host.port}")
                        await c.init(f"{m.name}-{size}-{policy}", {"agent": "eval"})
                        await one_memory(c, m.turns, policy, count)
                        await c.close()
            # after the other families, so that their figures are those of a run without it
            for size, filler in (("small", []), ("large", generated_filler(args.fill))):
                for policy in POLICIES:
                    told = bounds.setdefault((size, policy), Told())
                    for name, turns, kinds in bounded_memories(data, filler):
                        c = await MemoryClient.connect(f"ws://127.0.0.1:{host.port}")
                        await c.init(f"bounds-{name}-{size}-{policy}", {"agent": "eval"})
                        await bounded_memory_run(c, turns, kinds, policy, told)
                        await c.close()
    return out, bounds


def report(out: dict[tuple[str, str], Count], args: argparse.Namespace) -> None:
    """One row a memory size and policy."""
    load = os.getloadavg()[0]
    print(f"backend: {'postgresql' if args.postgres else 'sqlite'}; large memories among"
          f" {args.fill} generated turns; load average {load:.2f}"
          f"{' (indicative: above 2)' if load > 2 else ''}")
    if args.bounds_only:
        return
    print("\n| memory | policy | merges | false merges | precision | expected found (recall) |"
          " missed | similar pairs merged | labelled store, mean ms |")
    print("|---|---|---|---|---|---|---|---|---|")
    for (size, policy), n in out.items():
        right = n.merges - len(n.false)
        precision = f"{right / n.merges:.3f}" if n.merges else "-"
        recall = f"{n.found}/{n.expected} ({n.found / n.expected:.2f})" if n.expected else "-"
        ms = 1000 * sum(n.store_seconds) / max(1, len(n.store_seconds))
        print(f"| {size} | {policy} | {n.merges} | {len(n.false)} | {precision} | {recall} |"
              f" {len(n.missed)} | {n.similar_merged} | {ms:.1f} |")
    if args.show:
        for (size, policy), n in out.items():
            for what, pairs in (("false merge", n.false), ("missed", n.missed)):
                for a, b in pairs:
                    print(f"  {size} {policy} {what}: {a!r} / {b!r}")


def report_bounds(bounds: dict[tuple[str, str], Told], show: bool) -> None:
    """The bounds family: one row a memory size and policy."""
    print("\n| memory | policy | told with bounds | merges | told facts lost | lost by kind |")
    print("|---|---|---|---|---|---|")
    for (size, policy), t in bounds.items():
        kinds: dict[str, int] = {}
        for kind, _new, _old in t.lost:
            kinds[kind] = kinds.get(kind, 0) + 1
        by = ", ".join(f"{k} {n}" for k, n in kinds.items()) or "-"
        print(f"| {size} | {policy} | {t.told} | {t.merges} | {len(t.lost)} | {by} |")
    if show:
        for (size, policy), t in bounds.items():
            for kind, new, old in t.lost:
                print(f"  {size} {policy} lost ({kind}): {new!r} / {old!r}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fill", type=int, default=300, help="unrelated turns of a large memory")
    ap.add_argument("--postgres", action="store_true", help="an embedded PostgreSQL database")
    ap.add_argument("--show", action="store_true", help="print each false and missed merge")
    ap.add_argument("--bounds-only", action="store_true",
                    help="the time of a fact's family alone")
    add_harness_args(ap, tries="one")
    args = ap.parse_args()
    out, bounds = asyncio.run(run(args))
    report(out, args)
    report_bounds(bounds, args.show)


if __name__ == "__main__":
    main()
