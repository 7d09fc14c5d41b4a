"""Each way `a2e_keyword_query` reads its pool gives SQLite's answers.

The pool (the newest `max_matches` matches the reader may read) is read three ways: when no
query term is held by more entries than the pool takes, every match from the GIN index (one
bitmap, the reader's groups a filter, then sorted), on a prepared generic plan; when one is
(dense), by walking the newest index of each readable group, on a prepared generic plan in a
namespace of at most 2,000 entries or 4x the terms' counts, else planned for its values. Here
a namespace for each (rare words among fillers; 1,500 entries all holding "apple"; 1,000 such
among 4,000 fillers), alice's episodic and the semantic tier alternately and 50 of bob's
episodic entries she must not see (holding every query word thrice), each query compared with SQLite's entries, order and BM25
(to 1e-9), with and without a tag filter, twice in a session (a prepared statement reused).
"""

from __future__ import annotations

import json
from pathlib import Path

from test_postgres_keyword import _texts
from test_store_contract import BOTH, T0, entry

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
        "sparse": _texts(300, seed=21) + [f"filler{i % 50} words only" for i in range(900)],
        "dense": [f"apple {t}" for t in _texts(1500, seed=22)],
        "dense_large": [f"apple {t}" for t in _texts(1000, seed=23)]
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


async def test_every_pool_path_answers_as_sqlite(pg_url: str, tmp_path: Path) -> None:
    stores = (SQLiteEntryStore(tmp_path / "a2e.db", max_term_docs=400, max_matches=MAX_MATCHES),
              PostgresEntryStore(pg_url, max_term_docs=400, max_matches=MAX_MATCHES))
    got = []
    for store in stores:
        async with store:
            answers = []
            for ns, texts in _namespaces().items():
                await _load(store, ns, texts)
                for tags in ((), ("third",)):
                    answers.append(await _answers(store, ns, tags))
                    answers.append(await _answers(store, ns, tags))
            got.append(answers)
    for lite, pg in zip(got[0], got[1], strict=True):
        assert pg == lite
    assert all(any(a) for a in got[1])
    assert sum(len(a) for answers in got[1] for a in answers) > 1000
