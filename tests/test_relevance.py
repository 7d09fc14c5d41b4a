"""Relevance as a property of the pair (query, entry): a paraphrased fact passes `min_score`
0.5 in a memory of a few entries, an off-topic question gets nothing at 0.5, a neighbour of a
match does not pass for one, and a pair's relevance stays put when a thousand unrelated entries
join the memory; on both backends, over the wire, with the default embedder."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.hosts import make_config, running_host, url_of
from support.labels import label

from host.app import Host
from host.client import MemoryClient
from host.config import SearchConfig
from host.search import ranking
from host.store.records import StoredEntry
from host.text.keyword import pair_coverage, term_weights

pytestmark = pytest.mark.all_backends

FACTS = [
    "The user's dentist appointment is on March 14 at 9:30 with Dr. Okafor.",
    "The user is allergic to penicillin.",
    "The user follows a vegetarian diet, no fish either.",
    "The user drives a blue 2018 Toyota Corolla.",
    "The user's gym membership costs 42 euros a month.",
    "The user's flight to Nairobi departs on 22 October, booking reference QX7P2L.",
    "The user prefers tea over coffee and drinks it without sugar.",
    "The user broke their left wrist skiing in 2021.",
]
# questions sharing no content word with their fact (index into FACTS)
PARAPHRASES = {
    "How much do I pay for fitness?": 4,
    "When is my trip to Kenya?": 5,
    "Are there any antibiotics I must avoid?": 1,
    "What hot beverage do I like?": 6,
}
OFF_TOPIC = ["What is the capital of Australia?", "How many moons does Jupiter have?",
             "What is quantum entanglement?", "How do I change a flat tyre?"]

_WHO = ["The team", "My neighbour", "Sarah", "Our manager", "Grandpa", "The plumber", "Jonas",
        "The book club", "Priya", "Marco"]
_WHAT = ["moved the meeting to Friday afternoon", "bought a second-hand bike",
         "complained about the noise upstairs", "fixed the leaking tap in the bathroom",
         "finished the quarterly report", "lost the keys to the shed",
         "planted roses in the front garden", "booked a hotel in Madrid",
         "painted the fence green", "sent the invoice to the client",
         "cancelled the dinner reservation", "borrowed the ladder again",
         "repaired the garage door", "organised a quiz night", "sold the old sofa online",
         "cleaned out the attic", "joined a choir", "printed the concert tickets",
         "visited the science museum", "picked strawberries at the farm"]
_WHEN = ["yesterday", "last week", "on Monday", "this morning", "two days ago"]


def facts(tier: str = "episodic") -> list[dict[str, Any]]:
    return [{"key": {"fact": i}, "content": t, "tier": tier} for i, t in enumerate(FACTS)]


def filler(n: int, tier: str = "episodic") -> list[dict[str, Any]]:
    """`n` everyday sentences about other people."""
    combos = itertools.islice(itertools.product(_WHO, _WHAT, _WHEN), n)
    return [{"key": {"fill": j}, "content": f"{w} {x} {t}.", "tier": tier}
            for j, (w, x, t) in enumerate(combos)]


async def memory(connect: Callable[..., Any], host: Host, ns: str,
                 entries: list[dict[str, Any]]) -> MemoryClient:
    """A client in namespace `ns` that stored `entries`, every vector written."""
    c: MemoryClient = await connect()
    await c.init(ns, {"agent": "a1"})
    for i in range(0, len(entries), 250):
        await c.store(entries[i:i + 250])
    await host.search.drain()
    return c


async def test_a_paraphrased_fact_in_a_small_memory_passes_one_half(
    connect: Callable[..., Any], host: Host
) -> None:
    """In a memory of eight facts, a question sharing no word with its fact gets that fact,
    and only that fact, at `min_score: 0.5`."""
    c = await memory(connect, host, "small", facts())
    for q, i in PARAPHRASES.items():
        got = await c.retrieve(query=q, limit=10, min_score=0.5)
        assert [e["key"] for e in got.entries] == [{"fact": i}], (q, got.entries)


async def test_an_off_topic_question_gets_nothing_at_one_half(
    connect: Callable[..., Any], host: Host
) -> None:
    """Questions about nothing stored get no entry at `min_score: 0.5`, in the eight facts as
    among 300 other entries, though without a threshold they get candidates."""
    small = await memory(connect, host, "small", facts())
    large = await memory(connect, host, "large", filler(150) + facts() + filler(300)[150:])
    for c in (small, large):
        for q in OFF_TOPIC:
            assert (await c.retrieve(query=q, limit=10, min_score=0.5)).entries == [], q
    assert (await large.retrieve(query=OFF_TOPIC[0], limit=10)).entries  # candidates exist


async def test_a_neighbour_of_a_match_does_not_pass_for_a_match(
    connect: Callable[..., Any], host: Host
) -> None:
    """Facts written one after the other: the question finds its fact at 0.5, not the facts
    written next to it, which only ranked near it for standing beside it."""
    c = await memory(connect, host, "batch", facts())
    got = await c.retrieve(query="Do I eat meat?", limit=10, min_score=0.5)
    assert [e["key"] for e in got.entries] == [{"fact": 2}]


async def test_a_pairs_relevance_stays_put_when_a_thousand_entries_join(
    connect: Callable[..., Any], host: Host
) -> None:
    """The same question and fact get the same relevance (within 1e-6) in a memory of the
    eight facts and in one where 1,000 unrelated entries surround them, in the episodic and
    the semantic tier; the fact is still found first."""
    for tier in ("episodic", "semantic"):
        small = await memory(connect, host, f"small-{tier}", facts(tier))
        big = filler(1000, tier)
        large = await memory(connect, host, f"large-{tier}", big[:500] + facts(tier) + big[500:])
        asked = {**PARAPHRASES, "When is my dentist appointment?": 0, "QX7P2L": 5}
        for q, i in asked.items():
            a = await small.retrieve(query=q, limit=1, tier=tier)
            b = await large.retrieve(query=q, limit=1, tier=tier)
            assert a.entries[0]["key"] == b.entries[0]["key"] == {"fact": i}, q
            assert a.entries[0]["relevance"] == pytest.approx(b.entries[0]["relevance"],
                                                              abs=1e-6), q


async def test_sqlite_and_postgresql_report_one_scale(db_path: Path, pg_url: str) -> None:
    """The same facts and questions get the same relevance (within 1e-4) on SQLite, where the
    host computes the cosine, and on PostgreSQL, where the database does."""
    got: list[list[tuple[str, Any, float]]] = []
    for db in (db_path, pg_url):
        async with running_host(make_config(db)) as h, await MemoryClient.connect(url_of(h)) as c:
            await c.init("ns", {"agent": "a1"})
            await c.store(facts())
            await h.search.drain()
            rows = []
            for q in [*PARAPHRASES, "When is my dentist appointment?", OFF_TOPIC[0]]:
                for e in (await c.retrieve(query=q, limit=3)).entries:
                    rows.append((q, e["key"], e["relevance"]))
            got.append(sorted(rows, key=lambda r: (r[0], str(r[1]))))
    sqlite, postgres = got
    assert [r[:2] for r in sqlite] == [r[:2] for r in postgres]
    for a, b in zip(sqlite, postgres, strict=True):
        assert a[2] == pytest.approx(b[2], abs=1e-4), (a, b)


def test_the_evaluations_paraphrases_share_no_content_word_with_their_facts() -> None:
    """scripts/bench/data/relevance.json's paraphrase family is what it says: no question of it holds
    a content term of its fact (as `pair_coverage` stems and weighs them); and the evaluation's
    keys are distinct and hold no digit (a key's values are searched and embedded)."""
    data = json.loads((Path(__file__).parents[1] / "scripts/bench/data/relevance.json").read_text())
    shared = [(f["paraphrase"], f["fact"]) for f in data["facts"]
              if pair_coverage(term_weights(f["paraphrase"]), f["fact"]) > 0]
    assert shared == []
    labels = [label(i) for i in range(20000)]
    assert len(set(labels)) == len(labels) and not any(c.isdigit() for c in "".join(labels))


def test_the_training_file_is_apart_from_the_evaluation() -> None:
    """scripts/bench/data/relevance_train.json (what `fit_relevance.py --train` fits on) shares no
    fact and no question with the evaluation's data, its paraphrases share no content term
    with their facts, and its keyword and exact questions share at least one."""
    root = Path(__file__).parents[1] / "scripts/bench/data"
    train = json.loads((root / "relevance_train.json").read_text())
    held = json.loads((root / "relevance.json").read_text())

    def texts(data: dict[str, object]) -> set[str]:
        facts = data["facts"]
        assert isinstance(facts, list)
        out = {v for f in facts for v in f.values()}
        off = data["off_topic"]
        assert isinstance(off, list)
        return out | set(off)

    assert len(train["facts"]) >= 30 and texts(train) & texts(held) == set()
    for f in train["facts"]:
        assert pair_coverage(term_weights(f["paraphrase"]), f["fact"]) == 0, f
        for fam in ("keyword", "exact"):
            if fam in f:
                assert pair_coverage(term_weights(f[fam]), f["fact"]) > 0, (fam, f)


# a conversation where the question's one term, "job", is in five turns (their BM25s alike),
# the best of them a question whose neighbours answer something else; the user's fact says
# what the job is without the word
CHAT = ["Caroline said: I went hiking with my dog on Sunday.",
        "Melanie said: That sounds lovely, where did you go?",
        "Caroline said: So what is your job these days?",
        "Melanie said: I paint houses and sometimes murals.",
        "Caroline said: That sounds fun, I love murals.",
        "Melanie said: We baked cookies for the school fair.",
        "Caroline said: My old job had terrible hours.",
        "Melanie said: The fair raised money for the library.",
        "Caroline said: The job fair downtown is on Saturday.",
        "Melanie said: My kids love drawing too.",
        "Caroline said: A job interview always makes me nervous.",
        "Melanie said: Just breathe and be yourself.",
        "Caroline said: I lost my job at the bank yesterday.",
        "Melanie said: Oh no, I am so sorry to hear that!"]
NURSE = "The user works as a nurse at St. Mary's hospital, on night shifts."


async def test_a_question_whose_word_every_match_shares_gets_the_fact_by_meaning(
    connect: Callable[..., Any], host: Host
) -> None:
    """"What is my job?" among 60 other entries and a conversation where five turns say
    "job": the fact that says it in other words is in the top 3, not the turns written next to
    the best "job" turn (the query's matches score alike, so none lifts its neighbours)."""
    turns = [{"key": {"turn": j}, "content": t, "tier": "episodic"} for j, t in enumerate(CHAT)]
    fact = {"key": {"fact": 0}, "content": NURSE, "tier": "episodic"}
    c = await memory(connect, host, "job", filler(60) + turns[:7] + [fact] + turns[7:])
    top = [e["key"] for e in (await c.retrieve(query="What is my job?", limit=3)).entries]
    assert {"fact": 0} in top and {"turn": 1} not in top and {"turn": 3} not in top, top


def _candidate(i: int, content: str, keyword: float | None) -> StoredEntry:
    return StoredEntry(tier="episodic", owner="a1", key=json.dumps({"turn": i}).encode(),
                       content=json.dumps(content).encode(), tags=[], source="", score=0.5,
                       ttl=0, created_at=0.0, updated_at=0.0, id=i + 1, keyword=keyword)


# "What is my job?" among a conversation's turns: four say "job" (BM25 alike), one of them the
# closest by meaning; the fact says it with no shared word; two unrelated chat turns
JOB_TURNS = [(0, "What kind of job do you have now?", 5.0, 0.45),
             (1, "My old job had terrible hours.", 5.1, 0.28),
             (2, "The job fair is on Saturday.", 4.9, 0.27),
             (3, "A job interview makes me nervous.", 5.05, 0.26),
             (4, "The user works as a nurse at the children's hospital.", None, 0.34),
             (5, "We baked cookies for the school fair.", None, 0.18),
             (6, "I went hiking with my dog.", None, 0.16)]
NEIGHBOUR = (7, "Oh, that sounds wonderful!", None, 0.25)  # written right after turn 0


def _ranked(bm25: dict[int, float]) -> list[int]:
    """The turns of `JOB_TURNS` and `NEIGHBOUR` (linked to turn 0) best first as the host ranks
    them for "What is my job?" (the default embedder's weights), with BM25s `bm25`."""
    rows = [*JOB_TURNS, NEIGHBOUR]
    entries = [_candidate(i, t, bm25.get(i, kw)) for i, t, kw, _s in rows]
    sims = np.array([s for *_r, s in rows])
    out = ranking.score(entries, "What is my job?", sims, SearchConfig(),
                        ranking.CALIBRATIONS["minilm"], 0.12, {8: (1, 1)}, len(rows) - 1, 1)
    out.sort(key=lambda e: -(e.fused or 0.0))
    return [json.loads(e.key)["turn"] for e in out]


def test_a_query_whose_matches_score_alike_lifts_no_neighbour() -> None:
    """When every keyword match of the query scores alike (the query's one term, "job", in
    four turns), the turn written after the best of them is not lifted next to it and the
    fact that says the same without the word makes the top 3; when the matches' scores stand
    apart (one turn matches far better), the neighbour is lifted right below its match."""
    flat = _ranked({})
    assert 7 not in flat and 4 in flat[:3], flat
    spread = _ranked({0: 14.0, 1: 3.0, 2: 2.0, 3: 1.5})
    assert spread[:2] == [0, 7], spread
    assert ranking.flat_bm25(np.array([5.0, 5.1, 0.0]), np.array([0.3, 0.2, 0.1]))
    assert not ranking.flat_bm25(np.array([5.0, 12.0, 0.0]), np.array([0.3, 0.2, 0.1]))
    # without vectors keyword scores are all the order has: never flat
    assert not ranking.flat_bm25(np.array([5.0, 5.1]), np.array([np.nan, np.nan]))
    assert not ranking.flat_bm25(np.array([5.0, 0.0]), np.array([0.3, 0.2]))  # one match
