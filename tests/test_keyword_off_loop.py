"""A keyword search of many rows leaves the event loop: on SQLite, a search whose terms are in
more than `keyword_on_loop` rows of a larger namespace runs on a scan thread with a connection
of its own, and answers exactly what the loop's own search answers (entries, order, BM25,
relevance, the statistics), while a search of a rare word stays on the loop (a thread hop would
cost it as much again)."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

from host.store.records import NewEntry, Query, Scope
from host.store.sqlite.keyword import KEYWORD_ON_LOOP
from host.store.sqlite.store import SQLiteEntryStore

T0 = 1_800_000_000.0
ALICE, BOB = Scope("ns", "alice"), Scope("ns", "bob")
BOTH = ("episodic", "semantic")
WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike"
         " november oscar papa quebec romeo sierra tango running runs runner").split()
# a common word alone and with others, a rarer one, a phrase-like pair, a repeated word, a
# word of no row, the rare word (`zulu`: in 3 rows) with a common one
QUERIES = ("alpha", "tango", "runs", "alpha bravo", "sierra tango romeo", "running papa alpha",
           "quebec quebec", "nothing here", "zulu", "zulu alpha")
N = 3 * KEYWORD_ON_LOOP  # entries of the namespace, a third each alice's, bob's, shared


def entries(agent: int) -> list[NewEntry]:
    """Texts of 1-12 words (the first of `WORDS` the most common), `zulu` in 3 of alice's."""
    rng = random.Random(agent)
    weights = [1.0 / (i + 1) for i in range(len(WORDS))]
    out = []
    for i in range(N // 3):
        text = " ".join(rng.choices(WORDS, weights, k=rng.randint(1, 12)))
        if agent == 0 and i % 100 == 7:
            text += " zulu"
        out.append(NewEntry(tier="semantic" if agent == 2 else "episodic",
                            key=json.dumps(f"{agent}-{i}").encode(),
                            content=json.dumps({"text": text}).encode(), text=text,
                            created_at=T0 - 10_000 + i, updated_at=T0 - 10_000 + i))
    return out


async def filled(path: Path) -> SQLiteEntryStore:
    store = SQLiteEntryStore(path, max_term_docs=200, max_matches=300)
    await store.open()
    for agent, scope in enumerate((ALICE, BOB, ALICE)):
        await store.put(scope, entries(agent), T0)
    return store


async def beside_a_bystander(call: Awaitable[Any]) -> tuple[list[str], Any]:
    """`call` started beside a task started after it: (which ended first, its answer). On the
    loop a search ends in its first step, before the other task; off it the other runs first."""
    order: list[str] = []
    got: list[Any] = []

    async def search() -> None:
        got.append(await call)
        order.append("search")

    async def bystander() -> None:
        order.append("bystander")

    await asyncio.gather(asyncio.create_task(search()), asyncio.create_task(bystander()))
    return order, got[0]


ON, OFF = ["search", "bystander"], ["bystander", "search"]


async def test_a_search_off_the_loop_answers_what_the_loop_would(tmp_path: Path) -> None:
    """Every query, with and without `relevance`, of both tiers, one tier and none (the
    statistics alone), `search` and `search_stats`: forced onto the loop (a bound above the
    namespace) and forced off it (a bound of 0: every search of a word some row holds), the
    same entries, order, scores, relevance and statistics; and each ran where it was forced
    to."""
    store = await filled(tmp_path / "db.sqlite")
    try:
        answers: dict[str, list[Any]] = {}
        for where, bound, want_order in (("on", N + 1, ON), ("off", 0, OFF)):
            store.keyword_on_loop = bound
            got = answers[where] = []
            for text in QUERIES:
                want = ON if text == "nothing here" else want_order  # in no row: nothing to read
                for tiers in (BOTH, ("episodic",), ()):
                    for relevance in (True, False):
                        q = Query(tiers=tiers)
                        order, stats = await beside_a_bystander(store.search_stats(
                            ALICE, q, text, T0, 20, relevance=relevance))
                        assert order == want, (where, text)
                        order, found = await beside_a_bystander(store.search(
                            ALICE, q, text, T0, 20, relevance=relevance))
                        assert order == want, (where, text)
                        got.append((text, tiers, relevance, stats, found))
        assert answers["off"] == answers["on"]
        # the answers are searches' answers: alice's and shared rows, scored, some relevant
        found = [f for text, tiers, relevance, _, f in answers["on"]
                 if text == "alpha" and tiers == BOTH and relevance]
        assert found and len(found[0]) == 20
        assert all(e.owner in ("alice", "") and e.keyword and e.relevance == 1.0
                   for e in found[0])
        zulu = [s for text, tiers, _, s, _ in answers["on"] if text == "zulu" and tiers == BOTH]
        assert zulu[0][0] and len(zulu[0][0]) == 3 and zulu[0][1].hits == (3,)
    finally:
        await store.close()


async def test_a_rare_word_stays_on_the_loop_and_a_common_one_leaves_it(
        tmp_path: Path) -> None:
    """With the default bound, in a namespace of more entries than `KEYWORD_ON_LOOP`: a word
    in 3 rows is searched on the loop, one in more rows than the bound off it, a query of
    both off it; in a namespace of fewer entries, a search stays on the loop whatever its
    words (at most that many rows to read)."""
    store = await filled(tmp_path / "db.sqlite")
    try:
        assert store.keyword_on_loop == KEYWORD_ON_LOOP
        small = Scope("small", "alice")
        await store.put(small, entries(0)[:KEYWORD_ON_LOOP], T0)
        q = Query(tiers=BOTH)
        for scope, text, want in ((ALICE, "zulu", ON), (ALICE, "alpha", OFF),
                                  (ALICE, "zulu alpha", OFF), (small, "alpha", ON),
                                  (ALICE, "nothing", ON)):
            order, found = await beside_a_bystander(store.search(scope, q, text, T0, 10))
            assert order == want, (scope, text)
        assert len(found) == 0
    finally:
        await store.close()
