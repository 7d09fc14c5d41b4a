"""Each way `a2e_keyword_query` reads its pool gives SQLite's answers.

The pool (the newest `max_matches` matches the reader may read) is read three ways: every
match from the GIN index (one bitmap, the reader's groups a filter, then sorted), on a
prepared generic plan, when no query term is held by more entries than the pool takes or when
they are spread thin (matches^2 below pool x entries); else (dense) by walking the newest
index of each readable group, on a prepared generic plan in a namespace of at most 2,000
entries or 4x the terms' counts, otherwise planned for its values. A common term's count for
the reader (the cap of `max_term_docs`) is walked likewise where it is held by a quarter of
the namespace or more, read from the GIN index where it is thinner. Here a namespace for each
(rare words among fillers; 1,500 entries all holding "apple"; 1,000 such among 4,000
fillers; and, with a smaller pool, 500 such among 1,900 fillers), alice's episodic and the
semantic tier alternately and 50 of bob's episodic entries she must not see (holding every
query word thrice), each query compared with SQLite's entries, order and BM25 (to 1e-9), with
and without a tag filter, twice in a session (a prepared statement reused).
"""

from __future__ import annotations

import json
from pathlib import Path

from support.store import BOTH, T0, entry, keyword_texts

from host.store.interface import EntryStore
from host.store.postgres.store import PostgresEntryStore
from host.store.records import Query, Scope
from host.store.sqlite.store import SQLiteEntryStore

QUERIES = ("apple", "apple river", "stone cloud music", "lantern meadow apple", "copper",
           "harbor nothing", "filler3 apple")
MAX_MATCHES = 900  # the pool: "apple" is held by more entries than this in the dense ones
_BOB = "apple river stone cloud music lantern meadow copper harbor filler3"


def _namespaces() -> dict[str, list[str]]:
    return {
        "sparse": keyword_texts(300, seed=21) + [f"filler{i % 50} words only" for i in range(900)],
        "dense": [f"apple {t}" for t in keyword_texts(1500, seed=22)],
        "dense_large": [f"apple {t}" for t in keyword_texts(1000, seed=23)]
        + [f"filler{i % 50} words only" for i in range(4000)],
    }


async def _load(store: EntryStore, namespace: str, texts: list[str]) -> None:
    alice, bob = Scope(namespace, "alice"), Scope(namespace, "bob")
    for start in range(0, len(texts), 500):
        await store.put(alice, [entry(i, json.dumps(t).encode(),
                                      tier="semantic" if i % 2 else "episodic",
                                      tags=["third"] if i % 3 == 0 else [])
                                for i, t in enumerate(texts[start:start + 500], start)], T0)
    # bob's, holding every query word thrice in few words: at the top of alice's answers if
    # any read let them through
    await store.put(bob, [entry(f"b{i}", json.dumps(" ".join([_BOB] * 3) + f" {i}").encode())
                          for i in range(50)], T0)


async def _answers(store: EntryStore, namespace: str, tags: tuple[str, ...]
                   ) -> list[list[tuple[bytes, float]]]:
    q = Query(tiers=BOTH, tags=tags)
    return [[(e.key, round(e.keyword or 0.0, 9))
             for e in await store.search(Scope(namespace, "alice"), q, text, T0, 60)]
            for text in QUERIES]


async def _both(pg_url: str, tmp_path: Path, namespaces: dict[str, list[str]],
                max_matches: int) -> None:
    """Each namespace loaded in SQLite and PostgreSQL: the same answers to every query."""
    stores = (SQLiteEntryStore(tmp_path / "a2e.db", max_term_docs=400, max_matches=max_matches),
              PostgresEntryStore(pg_url, max_term_docs=400, max_matches=max_matches))
    got = []
    for store in stores:
        async with store:
            answers = []
            for ns, texts in namespaces.items():
                await _load(store, ns, texts)
                for tags in ((), ("third",)):
                    answers.append(await _answers(store, ns, tags))
                    answers.append(await _answers(store, ns, tags))
            got.append(answers)
    for lite, pg in zip(got[0], got[1], strict=True):
        assert pg == lite
    assert all(any(a) for a in got[1])
    assert sum(len(a) for answers in got[1] for a in answers) > 100 * len(namespaces)


async def test_every_pool_path_answers_as_sqlite(pg_url: str, tmp_path: Path) -> None:
    """The GIN read (rare terms; a dense term spread thin, its count for the reader read from
    the GIN index too) and the prepared walk (a dense term, counted by a walk): SQLite's
    answers."""
    await _both(pg_url, tmp_path, _namespaces(), MAX_MATCHES)


async def test_the_walk_planned_for_its_values_answers_as_sqlite(
        pg_url: str, tmp_path: Path) -> None:
    """A pool of 60 in 2,450 entries of which 550 hold "apple": dense, too thick for the GIN
    read, too thin for the prepared walk, so walked on a plan made for its values: SQLite's
    answers."""
    texts = [f"apple {t}" for t in keyword_texts(500, seed=24)]
    texts += [f"filler{i % 50} words only" for i in range(1900)]
    await _both(pg_url, tmp_path, {"dense_planned": texts}, 60)
