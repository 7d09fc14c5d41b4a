"""BM25 of a text outside the keyword index on the index's scale, and what it is for: one
relevance across tiers (working entries fused with stored ones), on every backend."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from typing import Any

import pytest
from support.hosts import make_config, running_host, url_of

from host.app import Host
from host.client import MemoryClient
from host.store.records import NewEntry, Query, Scope
from host.text.bm25 import Analysis, Bm25Stats, bm25
from host.text.searchable import searchable_text
from protocol.keys import canonical_key

pytestmark = pytest.mark.all_backends

TEXTS = [
    "The dogs were running in the park all morning.",
    "A dog runs; another dog sleeps.",
    "Running shoes for the marathon, running every day, running far.",
    "The cat watched the birds from the window.",
    "Budget review for the running costs of the office.",
    "Nothing about that here at all.",
]


@pytest.fixture
async def keyword_host(store_db: str) -> AsyncIterator[Host]:
    """A started host without an embedder and without neighbour lifting: relevance is the
    fused keyword signal alone (a stored entry written next to a match may be lifted above
    it; tests/test_search_engine.py covers that)."""
    config = make_config(store_db, search={"embedder": "none", "neighbour_hits": 0})
    async with running_host(config) as h:
        yield h


@pytest.fixture
async def kw_client(keyword_host: Host) -> AsyncIterator[MemoryClient]:
    """A client of `keyword_host` with an open session."""
    c = await MemoryClient.connect(url_of(keyword_host))
    await c.init("tiers", {"agent": "alice"})
    try:
        yield c
    finally:
        await c.close()


def test_bm25_formula() -> None:
    """The formula is FTS5's: idf floored at 1e-6, tf saturating with k1, length-normalised."""
    stats = Bm25Stats(terms=("run", "rare"), hits=(90, 1), rows=100, avgdl=10.0)
    text = Analysis({"run": 2, "rare": 1}, 10)
    rare = math.log(99.5 / 1.5) * 2.2 / (1 + 1.2)
    common = 1e-6 * 2 * 2.2 / (2 + 1.2)
    assert bm25(stats, text) == pytest.approx(rare + common)
    assert bm25(stats, Analysis({"other": 3}, 4)) == 0.0


async def test_text_outside_the_index_scores_as_a_row(keyword_host: Host) -> None:
    """A text scored with the store's statistics and analysis gets exactly the BM25 the store's
    own search gives the same text stored as a row (stemming included: "running" ~ "run")."""
    store: Any = keyword_host.store
    scope = Scope("bm25", "alice")
    by_key: dict[bytes, str] = {}
    rows = []
    for i, t in enumerate(TEXTS):
        key = canonical_key({"i": i})
        by_key[key] = searchable_text(t, [], {"i": i})
        rows.append(NewEntry(tier="episodic", key=key, content=f'"{t}"'.encode(),
                             text=by_key[key]))
    await store.put(scope, rows, 1000.0)
    query = "who was running with a dog"
    found, stats = await store.search_stats(scope, Query(tiers=("episodic",)), query, 1000.0, 50)
    assert len(found) >= 4
    for e in found:
        assert bm25(stats, store.analyse(by_key[e.key])) == pytest.approx(e.keyword, rel=1e-9)


async def test_same_text_same_relevance_in_every_tier(kw_client: MemoryClient) -> None:
    """An entry in the working tier and its twin in the episodic tier get the same relevance,
    so importance decides their order whichever tier holds the more important one."""
    filler = [{"key": {"f": i}, "content": t, "tier": "episodic"} for i, t in enumerate(TEXTS)]
    await kw_client.store(filler)
    for high, low in (("working", "episodic"), ("episodic", "working")):
        await kw_client.store([
            {"key": {"k": "twin"}, "content": "The dog runs after the ball.", "tier": high,
             "score": 0.9},
            {"key": {"k": "twin"}, "content": "The dog runs after the ball.", "tier": low,
             "score": 0.2},
        ])
        got = await kw_client.retrieve(query="dog ball", limit=2)
        assert [e["tier"] for e in got.entries] == [high, low]
        assert got.entries[0]["relevance"] == pytest.approx(got.entries[1]["relevance"])


async def test_working_entry_ranks_by_the_same_relevance(kw_client: MemoryClient) -> None:
    """A working entry that merely contains the query's term among many words ranks below a
    stored entry about it (BM25 on one scale), not above every stored entry as a term share
    of 1.0 would; a working entry that is the better match ranks first. Both hold the query's
    one term, so their relevance (of the pair alone) is the same: the order comes from BM25."""
    stored = [{"key": {"f": i}, "content": t, "tier": "episodic"} for i, t in enumerate(TEXTS)]
    stored.append({"key": {"k": "z"}, "content": "Zebra.", "tier": "episodic"})
    long = ("Meeting notes: budget, hiring, the office move, parking, printers, holidays,"
            " a zebra sticker on the laptop, lunch, coffee, the wiki and the backlog.")
    await kw_client.store(stored + [{"key": {"w": 1}, "content": long, "tier": "working"}])
    got = await kw_client.retrieve(query="zebra", limit=5)
    assert [e["key"] for e in got.entries] == [{"k": "z"}, {"w": 1}]
    assert got.entries[0]["relevance"] == pytest.approx(got.entries[1]["relevance"])
    await kw_client.store([{"key": {"w": 2}, "content": "Zebra zebra.", "tier": "working"}])
    got = await kw_client.retrieve(query="zebra", limit=5)
    assert [e["key"] for e in got.entries] == [{"w": 2}, {"k": "z"}, {"w": 1}]
    only = await kw_client.retrieve(query="zebra", tier="working", limit=5)
    assert [e["key"] for e in only.entries] == [{"w": 2}, {"w": 1}]
