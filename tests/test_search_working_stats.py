"""A query that reads the working tier gets the store's BM25 statistics with its keyword
candidates, from one store call (`EntryStore.search_stats`), and answers as the two calls did:
the candidates (`EntryStore.search`), then the statistics read apart (the statement the stores
ran for them, here in the test), the working entries scored with those. On every backend."""

from __future__ import annotations

import math
import sqlite3
from collections.abc import AsyncIterator
from typing import Any

import pytest
from support.hosts import make_config, running_host

from host.app import Host
from host.memory.working import WorkingTier
from host.store.postgres.sql import indexable, scope_lexeme, visibility
from host.store.records import NewEntry, Query, Scope, StoredEntry
from host.store.sqlite import keyword as sqlite_keyword
from host.text.bm25 import Bm25Stats, bm25
from host.text.keyword import query_terms
from host.text.searchable import searchable_text
from protocol.keys import canonical_key

pytestmark = pytest.mark.all_backends

T0 = 1000.0
WORDS = ("dog", "park", "running", "ball", "window", "budget", "river", "stone")
QUERIES = ("dog park", "running ball window", "river", "budget stone dog running",
           "nothing matches zebra", "the")
# the statement the PostgreSQL store ran for the statistics alone, apart from the candidates
_PG_STATS = ("SELECT u.entries, u.tokens, t.terms, t.hits FROM (SELECT array_agg(s.term ORDER BY"
             " s.ord) AS terms, array_agg(s.hits ORDER BY s.ord) AS hits FROM"
             " a2e_search_terms($1, $2, $3, $4, $5, $6, $7, $8, $9)"
             " WITH ORDINALITY AS s(term, hits, ord)) t"
             " LEFT JOIN a2e_usage u ON u.namespace = $1 AND u.agent = ''")


def _text(i: int) -> str:
    """Entry `i`'s text: two to four of `WORDS` ("dog" in half of them: common past the cap)."""
    picked = [WORDS[i % 8], WORDS[(i * 3 + 1) % 8]] + (["dog"] if i % 2 else [])
    return " ".join(picked + [f"note{i}"] * (i % 3))


@pytest.fixture(params=[0, 2], ids=["no-neighbours", "neighbours"])
async def kw_host(request: pytest.FixtureRequest, store_db: str) -> AsyncIterator[Host]:
    """A keyword-only host whose terms in more than 6 readable entries are left out, with
    and without neighbour lifting (on PostgreSQL the keyword statement then brings the
    neighbours: the other call the statistics ride on)."""
    config = make_config(store_db, search={"embedder": "none", "max_term_docs": 6,
                                           "neighbour_hits": request.param})
    async with running_host(config) as h:
        yield h


async def _stats_apart(store: Any, db: str, scope: Scope, q: Query, text: str) -> Bm25Stats:
    """The statistics read apart from the candidates, as each store read them before."""
    if db.startswith("postgresql"):
        tiers, owners, keys, tags = visibility(scope, q)
        row = await store.pool.fetchrow(
            _PG_STATS, scope.namespace, scope_lexeme(scope.namespace),
            indexable(query_terms(text)), store.max_term_docs, tiers, owners, T0, keys, tags)
        n, length = max(row[0] or 0, 1), max(row[1] or 0, 1)
        return Bm25Stats(tuple(row[2] or ()), tuple(int(h) for h in row[3] or ()), n, length / n)
    conn = sqlite3.connect(db)
    try:
        return sqlite_keyword.keyword_stats(conn, scope, q, query_terms(text), T0,
                                            store.max_term_docs)[1]
    finally:
        conn.close()


def _seen(entries: list[StoredEntry]) -> list[tuple[str, bytes, float]]:
    return sorted((e.tier, e.key, e.keyword or 0.0) for e in entries)


async def test_working_query_answers_as_the_two_calls(kw_host: Host, store_db: str) -> None:
    """For readers, filters and queries (common terms left out, none matching, a working-only
    read): the stored candidates are `search`'s, the statistics `search_stats` returns are those
    read apart, and the working entries carry the BM25 of those statistics, the same ones the
    host's retrieve fuses."""
    store: Any = kw_host.store
    alice, bob = Scope("ws", "alice"), Scope("ws", "bob")
    for scope, tier, start in ((alice, "episodic", 0), (bob, "episodic", 40),
                               (alice, "semantic", 80)):
        await store.put(scope, [
            NewEntry(tier=tier, key=canonical_key({"i": i}), content=f'"{_text(i)}"'.encode(),
                     tags=["odd"] if i % 2 else [],
                     text=searchable_text(_text(i), ["odd"] if i % 2 else [], {"i": i}))
            for i in range(start, start + 30)], T0)
    working = WorkingTier(100)
    for i in range(12):
        tags = ["odd"] if i % 2 else []
        assert working.put(NewEntry(tier="working", key=canonical_key({"w": i}),
                                    content=f'"{_text(i + 7)}"'.encode(), tags=tags),
                           searchable_text(_text(i + 7), tags, {"w": i}), T0) is None
    engine = kw_host.search
    checked = 0
    for scope in (alice, bob):
        for q in (Query(tiers=("episodic", "semantic")), Query(tiers=("episodic",), tags=("odd",)),
                  Query(tiers=())):
            for text in QUERIES:
                found, stats = await store.search_stats(scope, q, text, T0, 50)
                apart = await _stats_apart(store, store_db, scope, q, text)
                assert stats == apart, (scope, q, text)
                kw = await store.search(scope, q, text, T0, 50) if q.tiers else []
                assert [(e.key, e.id, e.keyword, e.relevance) for e in found] == [
                    (e.key, e.id, e.keyword, e.relevance) for e in kw]
                own = working.scored(q.keys, q.tags, T0, store.analyse,
                                     lambda a, s=apart: bm25(s, a))
                got = await engine.search(scope, q, text, T0, 50, working)
                searched = [e for e in got if e.tier == "working" or e.keyword is not None]
                assert _seen(searched) == _seen(kw + own), (scope, q, text)
                assert all(math.isfinite(e.fused or 0.0) for e in got)
                checked += len(own)
    assert checked > 50  # working entries took part
