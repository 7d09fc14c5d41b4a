"""Keyword search on PostgreSQL ranks as on SQLite: for the same entries and queries, the same
entries in the same order with the same BM25 (FTS5's), common terms and the pool's cut
included; and each score is `host.text.bm25` over the statistics the store reports."""

from __future__ import annotations

import json
from pathlib import Path

from support.store import BOTH, T0, entry, keyword_texts

from host.store.interface import EntryStore
from host.store.postgres.store import PostgresEntryStore
from host.store.records import Query, Scope
from host.store.sqlite.store import SQLiteEntryStore
from host.text.bm25 import bm25
from host.text.searchable import stored_text

QUERIES = ("apple", "apple river", "stone cloud music", "lantern meadow apple", "copper",
           "winter winter signal", "harbor nothing", "absent words")


async def _load(store: EntryStore, texts: list[str]) -> None:
    """The texts in namespace ns: alice's episodic and the semantic tier alternately, then a
    few of bob's episodic ones (which alice's searches must not count)."""
    alice, bob = Scope("ns", "alice"), Scope("ns", "bob")
    for start in range(0, len(texts), 50):
        await store.put(alice, [entry(i, json.dumps(t).encode(),
                                      tier="semantic" if i % 2 else "episodic")
                                for i, t in enumerate(texts[start:start + 50], start)], T0)
    await store.put(bob, [entry(f"b{i}", json.dumps(t).encode())
                          for i, t in enumerate(texts[:40])], T0)


async def _ranked(store: EntryStore, text: str, limit: int) -> list[tuple[bytes, float]]:
    got = await store.search(Scope("ns", "alice"), Query(tiers=BOTH), text, T0, limit)
    return [(e.key, round(e.keyword or 0.0, 9)) for e in got]


async def test_keyword_order_and_scores_equal_sqlite(pg_url: str, tmp_path: Path) -> None:
    """300 entries, eight queries, with and without the common-term cap and the pool's cut:
    the PostgreSQL store returns SQLite's entries, order and BM25 (to 1e-9)."""
    texts = keyword_texts(300)
    for cap, pool in ((0, 0), (60, 0), (0, 120), (60, 120)):
        ranked = []
        for store in (SQLiteEntryStore(tmp_path / f"a2e-{cap}-{pool}.db", max_term_docs=cap,
                                       max_matches=pool),
                      PostgresEntryStore(pg_url, max_term_docs=cap, max_matches=pool)):
            async with store:
                if isinstance(store, SQLiteEntryStore) or (cap, pool) == (0, 0):
                    await _load(store, texts)
                ranked.append([await _ranked(store, q, 50) for q in QUERIES])
        for q, lite, pg in zip(QUERIES, ranked[0], ranked[1], strict=True):
            assert pg == lite, (cap, pool, q)
        assert sum(map(len, ranked[1])) > 200  # the queries found plenty


async def test_scores_are_bm25_of_the_reported_statistics(pg_url: str) -> None:
    """Each candidate's score is `host.text.bm25.bm25` of the statistics `search_stats`
    reports with it for the query and of the entry's searchable text as `analyse` reads it; best first, equal
    scores newest first (as on SQLite)."""
    async with PostgresEntryStore(pg_url) as store:
        await _load(store, keyword_texts(200, seed=3))
        alice, q = Scope("ns", "alice"), Query(tiers=BOTH)
        for text in QUERIES[:6]:
            got, stats = await store.search_stats(alice, q, text, T0, 500)
            assert got
            for e in got:
                expected = bm25(stats, store.analyse(stored_text(e.content, e.tags, e.key)))
                assert abs((e.keyword or 0.0) - expected) < 1e-9 * max(1.0, expected)
            order = [(-(e.keyword or 0.0), -(e.id or 0)) for e in got]
            assert order == sorted(order)
