"""Both ways `a2e_keyword_query` runs its pool give SQLite's answers, and the neighbours it
returns with the candidates are those the store's `neighbours` gives for them.

The pool's statement is prepared once a session and run on a generic plan (walked) in a
namespace of at most 2,000 entries or 4x its terms' counts, and planned for its values in a
larger one (the GIN index for rare terms): a namespace of 600 entries and one of 2,400 of which
2,000 hold none of the query words, queries of rare, common and capped terms, with and without
tags, each compared with SQLite's entries, order and BM25 (to 1e-9)."""

from __future__ import annotations

import json
from pathlib import Path

from support.store import BOTH, T0, entry, keyword_texts

from host.store.filters import parse_filter
from host.store.interface import EntryStore
from host.store.postgres.store import PostgresEntryStore
from host.store.records import Query, Scope
from host.store.sqlite.store import SQLiteEntryStore

QUERIES = ("apple", "apple river", "stone cloud music", "lantern meadow apple", "copper",
           "harbor nothing", "signal winter garden copper stone")


def _large() -> list[str]:
    """2,400 texts, 2,000 of them of words no query holds (the terms' matches are rare)."""
    return keyword_texts(400, seed=12) + [f"filler{i % 50} words only" for i in range(2000)]


async def _load(store: EntryStore, namespace: str, texts: list[str]) -> None:
    """The texts in `namespace`: alice's episodic and the semantic tier alternately, a tag on
    every third."""
    alice = Scope(namespace, "alice")
    for start in range(0, len(texts), 200):
        await store.put(alice, [entry(i, json.dumps(t).encode(),
                                      tier="semantic" if i % 2 else "episodic",
                                      tags=["third"] if i % 3 == 0 else [])
                                for i, t in enumerate(texts[start:start + 200], start)], T0)


async def _answers(store: EntryStore, namespace: str, tags: tuple[str, ...] = ()
                   ) -> list[list[tuple[bytes, float]]]:
    q = Query(tiers=BOTH, tags=tags)
    return [[(e.key, round(e.keyword or 0.0, 9))
             for e in await store.search(Scope(namespace, "alice"), q, text, T0, 60)]
            for text in QUERIES]


async def test_both_pool_plans_answer_as_sqlite(pg_url: str, tmp_path: Path) -> None:
    """600 entries (the prepared, walked pool) and 2,400 (planned for its values), the
    common-term cap and the pool's cut low enough to bite, with and without a tag filter:
    the same entries, order and BM25 as SQLite's, on the first call of a session and after
    (a prepared statement reused)."""
    sizes = {"small": keyword_texts(600, seed=11), "large": _large()}
    stores = (SQLiteEntryStore(tmp_path / "a2e.db", max_term_docs=400, max_matches=900),
              PostgresEntryStore(pg_url, max_term_docs=400, max_matches=900))
    got = []
    for store in stores:
        async with store:
            answers = []
            for ns, texts in sizes.items():
                await _load(store, ns, texts)
                for tags in ((), ("third",)):
                    answers.append(await _answers(store, ns, tags))
                    answers.append(await _answers(store, ns, tags))
            got.append(answers)
    for lite, pg in zip(got[0], got[1], strict=True):
        assert pg == lite
    assert sum(len(a) for answers in got[1] for a in answers) > 1000


async def test_prefetched_neighbours_are_the_stores_neighbours(pg_url: str) -> None:
    """The neighbours `search_near` returns for its first candidates are, row for row and in
    order, what `neighbours` returns for the same candidates; a neighbour that is itself a
    candidate is that candidate's entry; a query with an extension filter prefetches none."""
    async with PostgresEntryStore(pg_url) as store:
        for ns, texts in (("small", keyword_texts(600, seed=11)), ("large", _large())):
            await _load(store, ns, texts)
            alice = Scope(ns, "alice")
            for tags in ((), ("third",)):
                q = Query(tiers=BOTH, tags=tags)
                for text in QUERIES:
                    kw, near, _ = await store.search_near(alice, q, text, T0, 60, 8, 2)
                    assert [e.key for e in kw] == [
                        e.key for e in await store.search(alice, q, text, T0, 60)]
                    assert list(near) == [e.id for e in kw[:8]]
                    hits = [(int(e.id or 0), e.tier, e.owner) for e in kw[:8]]
                    asked = await store.neighbours(alice, q, hits, 2, T0)
                    flat = [(e.key, e.id, hit, d) for hit, rows in near.items()
                            for e, d in rows]
                    assert flat == [(e.key, e.id, hit, d) for e, hit, d in asked]
                    by_id = {e.id: e for e in kw}
                    for rows in near.values():
                        for e, _ in rows:
                            assert e.id not in by_id or e is by_id[e.id]
            filtered = Query(tiers=BOTH, where=parse_filter({"absent": {"$ne": 1}}))
            assert (await store.search_near(alice, filtered, "apple", T0, 60, 8, 2))[1] == {}
