"""Entries stored with client vectors are not embedded by the host, on both backends (one test
each, run on SQLite and on PostgreSQL, so the two cannot drift): they are never in the
embedding queue, lose a host vector of an earlier text, stay out of a model change's, a
reindex's and a TTL refresh's queue, and a plain put replacing one is embedded again. A text
query then finds such an entry by its keywords only; a vector query in its space finds it."""

from __future__ import annotations

from typing import Any

import pytest
from support.hosts import make_config
from support.search import DISTRACTORS, PARAPHRASE, PUPPY, entry, keys_of

from host.app import Host, make_store
from host.client import MemoryClient
from host.search.client_vectors import unit_rows
from host.store.records import NewEntry, Scope

pytestmark = pytest.mark.all_backends

SPACE = "s"
VECS = [[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]]
K1, K2 = b'{"k":1}', b'{"k":2}'


def _given(key: Any, content: Any, vectors: list[list[float]] = VECS) -> dict[str, Any]:
    return entry(key, content, vectors=vectors, vector_space=SPACE)


async def test_a_retrieve_finds_entries_with_client_vectors_by_keywords_and_in_their_space(
    client: MemoryClient, host: Host
) -> None:
    """The host's vector of an entry goes when it is stored again with vectors (same text), so a
    paraphrase no longer finds it, keywords and its space do; an entry first stored with vectors
    is never embedded; stored plain again, it is embedded again and found by the paraphrase."""
    store: Any = host.store
    await client.store([entry({"d": i}, t) for i, t in enumerate(DISTRACTORS)]
                       + [entry({"k": "p"}, PUPPY)])
    await host.search.drain()
    assert keys_of(await client.retrieve(query=PARAPHRASE, limit=3))[0] == {"k": "p"}

    # plain -> with vectors, the text unchanged: its host vector goes, it is not queued
    assert (await client.store([_given({"k": "p"}, PUPPY)])).errors == []
    await client.store([_given({"k": "v"}, PUPPY + " She named it Biscuit.", [VECS[1]])])
    assert await store.vector_queue() == 0
    await host.search.drain()
    near = keys_of(await client.retrieve(query=PARAPHRASE, limit=20))
    assert {"k": "p"} not in near and {"k": "v"} not in near
    by_words = keys_of(await client.retrieve(query="Caroline adopted a puppy", limit=20))
    assert {"k": "p"} in by_words and {"k": "v"} in by_words
    got = await client.retrieve(vector=VECS[0], vector_space=SPACE, limit=5)
    assert keys_of(got) == [{"k": "p"}, {"k": "v"}]
    assert got.entries[0]["relevance"] == pytest.approx(1.0, abs=1e-5)
    assert got.entries[1]["relevance"] == pytest.approx(0.0, abs=1e-5)

    # with vectors -> plain, the text unchanged: embedded again, out of the space
    await client.store([entry({"k": "p"}, PUPPY)])
    await host.search.drain()
    assert keys_of(await client.retrieve(query=PARAPHRASE, limit=3))[0] == {"k": "p"}
    assert keys_of(await client.retrieve(vector=VECS[0], vector_space=SPACE, limit=5)) \
        == [{"k": "v"}]


@pytest.mark.parametrize("near_quota", [False, True], ids=["set_based", "entry_by_entry"])
async def test_model_change_reindex_and_refresh_leave_client_vector_entries_unqueued(
    store_db: str, near_quota: bool
) -> None:
    """The embedding queue holds exactly the entries the host embeds through every path: a put
    (set-based, or entry by entry near a quota), a model change, a reindex, a TTL refresh, a
    plain entry stored again with vectors and the reverse, the text unchanged."""
    limits = {"max_entries_per_namespace": 2} if near_quota else {}
    store: Any = make_store(make_config(store_db, limits=limits))
    await store.open()
    try:
        scope = Scope("ns", "a1")
        vecs = unit_rows([[1.0, 0.0, 0.0]]).tobytes()
        plain = NewEntry(tier="semantic", key=K1, content=b'"plain text"', ttl=100)
        given = NewEntry(tier="semantic", key=K2, content=b'"with vectors"', ttl=100,
                         vectors=vecs, vector_space=SPACE, dims=3)
        assert await store.put(scope, [plain, given], 1.0) == [None, None]
        assert await store.vector_queue() == 1
        assert await store.set_vector_model("m1", 4) is True
        assert await store.vector_queue() == 1
        assert await store.set_vector_model("m2", 8) is True
        assert await store.requeue_vectors() == 1
        assert await store.refresh(scope, ["semantic"], [K1, K2], 2.0) == 2
        assert await store.vector_queue() == 1
        # plain -> with vectors (same text): leaves the queue
        again = NewEntry(tier="semantic", key=K1, content=b'"plain text"', vectors=vecs,
                         vector_space=SPACE, dims=3)
        assert await store.put(scope, [again], 3.0) == [None]
        assert await store.vector_queue() == 0
        assert await store.requeue_vectors() == 0
        # with vectors -> plain (same text): queued again, and for a reindex
        assert await store.put(scope, [NewEntry(tier="semantic", key=K2,
                                                content=b'"with vectors"')], 4.0) == [None]
        assert await store.vector_queue() == 1
        assert await store.requeue_vectors() == 1
        # one request storing an address twice: the last entry (with vectors) decides
        assert await store.put(scope, [NewEntry(tier="semantic", key=K2, content=b'"x"'),
                                       NewEntry(tier="semantic", key=K2, content=b'"y"',
                                                vectors=vecs, vector_space=SPACE, dims=3)],
                               5.0) == [None, None]
        assert await store.requeue_vectors() == 0
    finally:
        await store.close()


async def test_a_claim_from_before_client_vectors_never_writes_its_vector(pg_url: str) -> None:
    """PostgreSQL: a worker claims an entry (text 1), the entry is stored with vectors and text 2
    (it leaves the queue), then stored plain with text 2 (queued again): the worker's vector of
    text 1 is refused (the new queue row's sequence is past the claim's), the entry stays
    queued for text 2."""
    from host.store.postgres.store import PostgresEntryStore

    store = PostgresEntryStore(pg_url)
    await store.open()
    try:
        scope = Scope("ns", "a1")
        vecs = unit_rows([[1.0, 0.0, 0.0]]).tobytes()
        assert await store.put(scope, [NewEntry(tier="semantic", key=K1, content=b'"one"')],
                               1.0) == [None]
        (pending, seq), = await store.claim_vectors(10, 60.0)
        assert pending.text.startswith("one")
        assert await store.put(scope, [NewEntry(tier="semantic", key=K1, content=b'"two"',
                                                vectors=vecs, vector_space=SPACE, dims=3)],
                               2.0) == [None]
        assert await store.vector_queue() == 0
        assert await store.put(scope, [NewEntry(tier="semantic", key=K1, content=b'"two"')],
                               3.0) == [None]
        assert await store.vector_queue() == 1
        assert await store.put_vectors("m", [(pending.id, seq, [1.0, 0.0])]) == []
        (again, _), = await store.claim_vectors(10, 0.0)
        assert again.id == pending.id and again.text.startswith("two")
    finally:
        await store.close()
