"""The `EntryStore` contract, run against every backend (SQLite file, PostgreSQL database).

Each test states one behaviour of `host.store.interface.EntryStore`; the `store` fixture is
parametrised by backend, so a backend that drifts from the reference semantics fails here.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from pathlib import Path

import pytest
from support.store import BOTH, T0, entry, key

from host.store.interface import EntryStore
from host.store.postgres.store import PostgresEntryStore
from host.store.records import NewEntry, Query, Quotas, Refusal, Scope
from host.store.sqlite.store import SQLiteEntryStore
from host.text.keyword import coverage, query_terms
from protocol.keys import canonical_key

A = Scope("ns", "alice")
B = Scope("ns", "bob")
OTHER_NS = Scope("other", "alice")

StoreFactory = Callable[..., EntryStore]


pytestmark = pytest.mark.all_backends


@pytest.fixture
async def make_store(store_db: str) -> AsyncIterator[StoreFactory]:
    """A factory of open stores on one database of the parametrised backend (`store_db`, see
    `all_backends`); all closed after."""
    async with AsyncExitStack() as stack:

        async def _make(quotas: Quotas | None = None, max_term_docs: int = 0) -> EntryStore:
            s: PostgresEntryStore | SQLiteEntryStore
            if store_db.startswith("postgresql"):
                s = PostgresEntryStore(store_db, quotas=quotas, pool_max=4,
                                       max_term_docs=max_term_docs)
            else:
                s = SQLiteEntryStore(store_db, quotas=quotas, max_term_docs=max_term_docs)
            return await stack.enter_async_context(s)  # opened now, closed after the test

        yield _make


@pytest.fixture
async def store(make_store: StoreFactory) -> EntryStore:
    """One open store with the default quotas."""
    return await make_store()


async def keys_of(store: EntryStore, scope: Scope, now: float = T0, **q: object) -> list[bytes]:
    found, _ = await store.find(scope, Query(tiers=BOTH, **q), now)  # type: ignore[arg-type]
    return [e.key for e in found]


# -- put / find -----------------------------------------------------------------------------


async def test_put_then_find_returns_every_field(store: EntryStore) -> None:
    """A stored entry reads back with its content, tags, source, score, ttl and timestamps."""
    out = await store.put(A, [entry(1, b'{"a": [1, 2]}', tags=["t1", "t2"], source="s",
                                    score=0.25, ttl=60)], T0)
    assert out == [None]
    (e,), total = await store.find(A, Query(tiers=BOTH), T0)
    assert total == 1
    assert (e.tier, e.owner, e.key, e.content) == ("episodic", "alice", key(1), b'{"a": [1, 2]}')
    assert (e.tags, e.source, e.score, e.ttl) == (["t1", "t2"], "s", 0.25, 60)
    assert e.created_at == e.updated_at == T0
    assert e.relevance is None


async def test_upsert_keeps_created_at_and_replaces_the_rest(store: EntryStore) -> None:
    """Storing an existing live key updates it in place and keeps its created_at."""
    await store.put(A, [entry(1, b'"old"', tags=["a"])], T0)
    await store.put(A, [entry(1, b'"new"', tags=["b"], score=0.5)], T0 + 10)
    (e,), total = await store.find(A, Query(tiers=BOTH), T0 + 10)
    assert total == 1
    assert (e.content, e.tags, e.score) == (b'"new"', ["b"], 0.5)
    assert (e.created_at, e.updated_at) == (T0, T0 + 10)


async def test_upsert_of_an_expired_key_starts_a_new_entry(store: EntryStore) -> None:
    """A key whose entry has expired is replaced by a new entry with a new created_at."""
    await store.put(A, [entry(1, b'"old"', ttl=5)], T0)
    await store.put(A, [entry(1, b'"new"')], T0 + 10)
    (e,), _ = await store.find(A, Query(tiers=BOTH), T0 + 10)
    assert (e.content, e.created_at, e.ttl) == (b'"new"', T0 + 10, 0)


async def test_duplicate_keys_in_one_put_last_wins(store: EntryStore) -> None:
    """Two entries with one key in one request leave one entry, the later content."""
    assert await store.put(A, [entry(1, b'"a"'), entry(1, b'"b"')], T0) == [None, None]
    (e,), total = await store.find(A, Query(tiers=BOTH), T0)
    assert (total, e.content) == (1, b'"b"')


async def test_import_path_keeps_given_timestamps(store: EntryStore) -> None:
    """An entry with created_at/updated_at set (import) keeps them instead of `now`."""
    await store.put(A, [entry(1, created_at=T0 - 100, updated_at=T0 - 50, ttl=60)], T0)
    (e,), _ = await store.find(A, Query(tiers=BOTH), T0)
    assert (e.created_at, e.updated_at) == (T0 - 100, T0 - 50)
    assert await keys_of(store, A, T0 + 11) == []  # expiry counts from updated_at


async def test_unicode_and_nested_json_round_trip(store: EntryStore) -> None:
    """Keys, contents and tags with non-ASCII text and nesting come back byte for byte."""
    k = canonical_key({"user": "Zoë", "n": [1, {"x": None}]})
    content = '{"text":"naïve café ☕","list":[1.5,true,null]}'.encode()
    await store.put(A, [NewEntry(tier="semantic", key=k, content=content, tags=["日本"])], T0)
    (e,), _ = await store.find(A, Query(tiers=("semantic",), keys=(k,)), T0)
    assert (e.key, e.content, e.tags, e.owner) == (k, content, ["日本"], "")


# -- visibility -----------------------------------------------------------------------------


async def test_episodic_is_private_semantic_is_shared(store: EntryStore) -> None:
    """Another agent sees the namespace's semantic entries, never someone's episodic ones."""
    await store.put(A, [entry("ep"), entry("sem", tier="semantic")], T0)
    assert sorted(await keys_of(store, A)) == sorted([key("ep"), key("sem")])
    assert await keys_of(store, B) == [key("sem")]


async def test_namespaces_are_disjoint(store: EntryStore) -> None:
    """Nothing of one namespace is read, searched or forgotten through another."""
    await store.put(A, [entry(1, b'"apple"', tier="semantic", tags=["t"])], T0)
    assert await keys_of(store, OTHER_NS) == []
    assert await store.search(OTHER_NS, Query(tiers=BOTH), "apple", T0, 10) == []
    assert await store.forget(OTHER_NS, BOTH, [key(1)], [], T0) == 0
    assert await keys_of(store, A) == [key(1)]


async def test_tier_filter(store: EntryStore) -> None:
    """Reading one tier returns only that tier's entries."""
    await store.put(A, [entry("ep"), entry("sem", tier="semantic")], T0)
    found, _ = await store.find(A, Query(tiers=("semantic",)), T0)
    assert [e.key for e in found] == [key("sem")]


# -- filters and order ----------------------------------------------------------------------


async def test_tags_are_anded(store: EntryStore) -> None:
    """A read with several tags returns only entries that carry all of them."""
    await store.put(A, [entry(1, tags=["a", "b"]), entry(2, tags=["a"]), entry(3, tags=["b"])], T0)
    assert await keys_of(store, A, tags=("a", "b")) == [key(1)]
    assert sorted(await keys_of(store, A, tags=("a",))) == sorted([key(1), key(2)])


async def test_keys_filter(store: EntryStore) -> None:
    """A read with keys returns only those keys (ANDed with the other filters)."""
    await store.put(A, [entry(1, tags=["a"]), entry(2), entry(3, tags=["a"])], T0)
    assert sorted(await keys_of(store, A, keys=(key(1), key(2)))) == sorted([key(1), key(2)])
    assert await keys_of(store, A, keys=(key(1), key(2)), tags=("a",)) == [key(1)]


async def test_find_orders_by_score_then_recency_with_limit_and_total(store: EntryStore) -> None:
    """Higher score first, then the more recently updated; `total` counts past the limit."""
    await store.put(A, [entry("low", score=0.1), entry("high", score=0.9)], T0)
    await store.put(A, [entry("mid-new", score=0.5)], T0 + 2)
    await store.put(A, [entry("mid-old", score=0.5)], T0 + 1)
    found, total = await store.find(A, Query(tiers=BOTH, limit=3), T0 + 3)
    assert [e.key for e in found] == [key("high"), key("mid-new"), key("mid-old")]
    assert total == 4


async def test_find_min_score(store: EntryStore) -> None:
    """`min_score` on a read without query keeps entries whose stored score reaches it."""
    await store.put(A, [entry(1, score=0.2), entry(2, score=0.6)], T0)
    assert await keys_of(store, A, min_score=0.5) == [key(2)]


# -- TTL ------------------------------------------------------------------------------------


async def test_expired_entries_are_never_read(store: EntryStore) -> None:
    """An entry is readable until updated_at + ttl and hidden from then on, before any GC."""
    await store.put(A, [entry(1, b'"apple pie"', ttl=10)], T0)
    assert await keys_of(store, A, T0 + 9.9) == [key(1)]
    assert await keys_of(store, A, T0 + 10) == []
    assert await store.search(A, Query(tiers=BOTH), "apple", T0 + 10, 10) == []


async def test_collect_garbage_deletes_only_expired(store: EntryStore) -> None:
    """GC deletes the expired entries and reports how many; live ones stay."""
    await store.put(A, [entry(i, ttl=5) for i in range(3)] + [entry("keep")], T0)
    await store.put(OTHER_NS, [entry("x", ttl=5)], T0)
    assert await store.collect_garbage(T0 + 1) == 0
    assert await store.collect_garbage(T0 + 6) == 4
    assert await keys_of(store, A, T0 + 6) == [key("keep")]
    assert await store.collect_garbage(T0 + 6) == 0


# -- search ---------------------------------------------------------------------------------


async def test_search_relevance_is_keyword_coverage(store: EntryStore) -> None:
    """Each candidate's relevance is `coverage(query terms, text)`, the shared definition."""
    await store.put(A, [
        entry(1, b'"the quick brown fox"'),
        entry(2, b'"a brown dog"'),
        entry(3, b'"nothing here"'),
    ], T0)
    query = "quick brown fox"
    got = await store.search(A, Query(tiers=BOTH), query, T0, 10)
    rel = {e.key: e.relevance for e in got}
    terms = query_terms(query)
    assert rel == {key(1): coverage(terms, "the quick brown fox"),
                   key(2): coverage(terms, "a brown dog")}
    assert got[0].key == key(1)


async def test_search_folds_case_and_diacritics(store: EntryStore) -> None:
    """"CAFE" finds "Café", as the shared tokeniser folds case and strips diacritics."""
    await store.put(A, [entry(1, '"Un café, s\'il vous plaît"'.encode())], T0)
    (e,) = await store.search(A, Query(tiers=BOTH), "CAFE plait", T0, 10)
    assert e.relevance == 1.0


async def test_search_finds_json_members_tags_and_key_values(store: EntryStore) -> None:
    """Member names and values of JSON content, tags and key values are all searchable."""
    await store.put(A, [NewEntry(tier="episodic", key=canonical_key({"topic": "zebra"}),
                                 content=b'{"language": "python"}', tags=["preferences"])], T0)
    for word in ("language", "python", "preferences", "zebra"):
        assert len(await store.search(A, Query(tiers=BOTH), word, T0, 10)) == 1, word


async def test_search_respects_visibility_and_filters(store: EntryStore) -> None:
    """Search applies namespace, tier visibility, keys and tags like `find`."""
    await store.put(A, [entry("mine", b'"apple"', tags=["t"]),
                        entry("shared", b'"apple"', tier="semantic")], T0)
    await store.put(B, [entry("bobs", b'"apple"')], T0)
    got = await store.search(A, Query(tiers=BOTH), "apple", T0, 10)
    assert sorted(e.key for e in got) == sorted([key("mine"), key("shared")])
    got = await store.search(A, Query(tiers=BOTH, tags=("t",)), "apple", T0, 10)
    assert [e.key for e in got] == [key("mine")]
    got = await store.search(B, Query(tiers=BOTH, keys=(key("shared"),)), "apple", T0, 10)
    assert [e.key for e in got] == [key("shared")]


async def test_search_candidates_bound_and_best_first(store: EntryStore) -> None:
    """At most `candidates` come back, and the ones matching more query terms are kept."""
    await store.put(A, [entry(i, b'"alpha"') for i in range(5)] + [entry("both",
                        b'"alpha beta"')], T0)
    got = await store.search(A, Query(tiers=BOTH), "alpha beta", T0, 2)
    assert len(got) == 2
    assert got[0].key == key("both") and got[0].relevance == 1.0


async def test_search_without_terms_or_match_is_empty(store: EntryStore) -> None:
    """A query of punctuation only, or one sharing no term, finds nothing."""
    await store.put(A, [entry(1, b'"apple"')], T0)
    assert await store.search(A, Query(tiers=BOTH), "?!", T0, 10) == []
    assert await store.search(A, Query(tiers=BOTH), "banana", T0, 10) == []


async def test_search_sees_updates(store: EntryStore) -> None:
    """After an upsert, the old text no longer matches and the new one does."""
    await store.put(A, [entry(1, b'"apple"')], T0)
    await store.put(A, [entry(1, b'"banana"')], T0 + 1)
    assert await store.search(A, Query(tiers=BOTH), "apple", T0 + 1, 10) == []
    assert len(await store.search(A, Query(tiers=BOTH), "banana", T0 + 1, 10)) == 1


async def test_search_query_operators_are_plain_words(store: EntryStore) -> None:
    """Words and symbols that are operators in FTS syntaxes are searched as plain text."""
    await store.put(A, [entry(1, b'"and or not near"')], T0)
    got = await store.search(A, Query(tiers=BOTH), "NOT & | ! ( ) : * near 'or' \"x", T0, 10)
    assert [e.key for e in got] == [key(1)]


async def test_search_leaves_out_terms_in_too_many_entries(make_store: StoreFactory) -> None:
    """With max_term_docs, a query term found in more entries of the namespace than that is
    not searched (the rarest term is kept when all are too common)."""
    store = await make_store(max_term_docs=2)
    await store.put(A, [entry(i, b'"common words"') for i in range(3)]
                    + [entry("r", b'"common rare"')], T0)
    (e,) = await store.search(A, Query(tiers=BOTH), "common rare", T0, 10)
    assert (e.key, e.relevance) == (key("r"), 1.0)  # coverage of the terms searched
    # both too common (counts stop at max_term_docs + 1): the first of the rarest is searched
    assert len(await store.search(A, Query(tiers=BOTH), "words common", T0, 10)) == 3


# -- forget ---------------------------------------------------------------------------------


async def test_forget_by_keys_and_tags(store: EntryStore) -> None:
    """Forget deletes entries matching keys AND tags and returns how many."""
    await store.put(A, [entry(1, tags=["x"]), entry(2, tags=["x"]), entry(3)], T0)
    assert await store.forget(A, BOTH, [key(1), key(3)], ["x"], T0) == 1
    assert sorted(await keys_of(store, A)) == sorted([key(2), key(3)])
    assert await store.forget(A, BOTH, [], ["x"], T0) == 1
    assert await keys_of(store, A) == [key(3)]


async def test_forget_cannot_touch_another_agents_episodic(store: EntryStore) -> None:
    """An agent's forget never deletes another agent's episodic entries."""
    await store.put(A, [entry(1)], T0)
    assert await store.forget(B, BOTH, [key(1)], [], T0) == 0
    assert await keys_of(store, A) == [key(1)]


async def test_forget_counts_only_live_entries(store: EntryStore) -> None:
    """An expired entry is not counted as deleted by forget."""
    await store.put(A, [entry(1, ttl=5)], T0)
    assert await store.forget(A, BOTH, [key(1)], [], T0 + 6) == 0


# -- touch ----------------------------------------------------------------------------------


async def test_touch_moves_updated_at_and_nothing_else(store: EntryStore) -> None:
    """A touch moves updated_at forward; content, tags, source, score, ttl, created_at and
    the keyword index stay as they were."""
    await store.put(A, [entry(1, b'"apple pie"', tags=["t"], source="s", score=0.5, ttl=100),
                        entry(2, b'"plum"', tier="semantic")], T0)
    assert await store.touch(A, BOTH, [key(1), key(2), key("none")], T0 + 5) == 2
    found, _ = await store.find(A, Query(tiers=BOTH), T0 + 5)
    got = {e.key: e for e in found}
    e = got[key(1)]
    assert (e.content, e.tags, e.source, e.score, e.ttl) == (b'"apple pie"', ["t"], "s", 0.5, 100)
    assert (e.created_at, e.updated_at) == (T0, T0 + 5)
    assert (got[key(2)].content, got[key(2)].updated_at) == (b'"plum"', T0 + 5)
    (hit,) = await store.search(A, Query(tiers=BOTH), "apple", T0 + 5, 10)
    assert hit.key == key(1)


async def test_touch_never_moves_updated_at_back(store: EntryStore) -> None:
    """A touch older than the entry's last update changes nothing."""
    await store.put(A, [entry(1)], T0 + 10)
    assert await store.touch(A, BOTH, [key(1)], T0) == 0
    (e,), _ = await store.find(A, Query(tiers=BOTH), T0 + 10)
    assert e.updated_at == T0 + 10


async def test_touch_after_a_newer_store_keeps_the_new_content(store: EntryStore) -> None:
    """The touch of a read that a write overtook leaves the written entry whole (no lost
    update): the touch is older than the write, so nothing moves."""
    await store.put(A, [entry(1, b'"old"', tags=["a"])], T0)
    (read,), _ = await store.find(A, Query(tiers=BOTH, keys=(key(1),)), T0 + 1)
    await store.put(A, [entry(1, b'"new"', tags=["b"], score=0.5)], T0 + 2)
    assert await store.touch(A, [read.tier], [read.key], T0 + 1) == 0
    (e,), _ = await store.find(A, Query(tiers=BOTH), T0 + 3)
    assert (e.content, e.tags, e.score, e.updated_at) == (b'"new"', ["b"], 0.5, T0 + 2)


async def test_touch_does_not_extend_a_ttl(store: EntryStore) -> None:
    """A touched entry with a TTL still expires when its last write said (updated_at + ttl of
    the put), not later."""
    await store.put(A, [entry(1, ttl=10)], T0)
    assert await store.touch(A, BOTH, [key(1)], T0 + 5) == 1
    assert await keys_of(store, A, T0 + 9.9) == [key(1)]
    assert await keys_of(store, A, T0 + 10) == []
    assert await store.collect_garbage(T0 + 10) == 1


async def test_touch_does_not_revive_an_expired_entry(store: EntryStore) -> None:
    """An entry expired at the touch's time is not touched and stays expired."""
    await store.put(A, [entry(1, ttl=10)], T0)
    assert await store.touch(A, BOTH, [key(1)], T0 + 20) == 0
    assert await keys_of(store, A, T0 + 20) == []
    assert await store.collect_garbage(T0 + 20) == 1


async def test_touch_respects_visibility(store: EntryStore) -> None:
    """A touch reaches only what its scope reads: not another agent's episodic entries nor
    another namespace's, nor a tier it did not name; an empty key list touches nothing."""
    await store.put(A, [entry(1), entry(2, tier="semantic")], T0)
    assert await store.touch(B, BOTH, [key(1)], T0 + 1) == 0
    assert await store.touch(OTHER_NS, BOTH, [key(1), key(2)], T0 + 1) == 0
    assert await store.touch(A, ["semantic"], [key(1)], T0 + 1) == 0
    assert await store.touch(A, BOTH, [], T0 + 1) == 0
    assert await store.touch(B, ["semantic"], [key(2)], T0 + 1) == 1  # shared by the namespace
    found, _ = await store.find(A, Query(tiers=BOTH), T0 + 1)
    assert {e.key: e.updated_at for e in found} == {key(1): T0, key(2): T0 + 1}


async def test_concurrent_touches_and_puts_all_land(store: EntryStore) -> None:
    """Touches queued with puts of several namespaces commit together; each touch answers
    for its own keys."""
    scopes = [Scope(f"ns{i}", "alice") for i in range(4)]
    for s in scopes:
        await store.put(s, [entry(1), entry(2)], T0)
    results = await asyncio.gather(
        *(store.touch(s, BOTH, [key(1), key(2)], T0 + 1) for s in reversed(scopes)),
        *(store.put(s, [entry(3)], T0 + 1) for s in scopes))
    assert results[:4] == [2, 2, 2, 2]
    for s in scopes:
        found, _ = await store.find(s, Query(tiers=BOTH), T0 + 1)
        assert sorted(e.updated_at for e in found) == [T0 + 1] * 3


# -- quotas ---------------------------------------------------------------------------------


async def test_agent_quota(make_store: StoreFactory) -> None:
    """A new entry past the per-agent quota is memory_full (a `Refusal`, not a string to parse);
    other agents still write."""
    store = await make_store(Quotas(max_entries_per_namespace=100, max_entries_per_agent=2))
    out = await store.put(A, [entry(1), entry(2), entry(3)], T0)
    assert out == [None, None, Refusal.MEMORY_FULL] and type(out[2]) is Refusal
    assert await store.put(A, [entry(1, b'"update"')], T0) == [None]  # updates still pass
    assert await store.put(B, [entry(9)], T0) == [None]


async def test_namespace_quota(make_store: StoreFactory) -> None:
    """The namespace quota counts every agent's entries; other namespaces are unaffected."""
    store = await make_store(Quotas(max_entries_per_namespace=3, max_entries_per_agent=100))
    assert await store.put(A, [entry(1), entry(2)], T0) == [None, None]
    assert await store.put(B, [entry(3), entry(4)], T0) == [None, "memory_full"]
    assert await store.put(OTHER_NS, [entry(5)], T0) == [None]


async def test_quota_collects_expired_to_make_room(make_store: StoreFactory) -> None:
    """When full, expired rows of the namespace are collected before refusing."""
    store = await make_store(Quotas(max_entries_per_namespace=2, max_entries_per_agent=2))
    await store.put(A, [entry(1, ttl=5), entry(2)], T0)
    assert await store.put(A, [entry(3)], T0 + 1) == ["memory_full"]
    assert await store.put(A, [entry(3)], T0 + 6) == [None]


async def test_forget_frees_quota(make_store: StoreFactory) -> None:
    """Forgotten entries no longer count against a quota."""
    store = await make_store(Quotas(max_entries_per_namespace=1, max_entries_per_agent=1))
    await store.put(A, [entry(1)], T0)
    assert await store.put(A, [entry(2)], T0) == ["memory_full"]
    assert await store.forget(A, BOTH, [key(1)], [], T0) == 1
    assert await store.put(A, [entry(2)], T0) == [None]


async def test_semantic_overwrite_moves_usage_to_the_writer(make_store: StoreFactory) -> None:
    """Overwriting another agent's semantic entry charges it to the new writer."""
    store = await make_store(Quotas(max_entries_per_namespace=100, max_entries_per_agent=1))
    await store.put(A, [entry("s", tier="semantic")], T0)
    assert await store.put(B, [entry("s", b'"bob"', tier="semantic")], T0) == [None]
    assert await store.put(A, [entry("other")], T0) == [None]  # alice's slot is free again
    assert await store.put(B, [entry("more")], T0) == ["memory_full"]


async def test_one_entry_over_quota_in_a_group_still_stores_the_others(
    make_store: StoreFactory,
) -> None:
    """Stores issued together (one group commit on either backend), one of whose entries would
    pass the byte quota: that entry is memory_full, every other entry of the group is stored,
    in its own namespace and in another one."""
    store = await make_store(Quotas(max_bytes_per_agent=80))  # sizes: 7-byte key + content
    big = b'"' + b"x" * 30 + b'"'  # 32 bytes, 39 with its key
    results = await asyncio.gather(
        store.put(A, [entry(1, b'"abc"'), entry(2, big)], T0),
        store.put(A, [entry(3, b'"de"')], T0),
        store.put(A, [entry(4, big), entry(5, b'"f"')], T0),  # 62 + 39 > 80; 62 + 10 fits
        store.put(OTHER_NS, [entry(i) for i in range(6)], T0),
    )
    assert results == [[None, None], [None], ["memory_full", None], [None] * 6]
    assert sorted(await keys_of(store, A)) == sorted(key(k) for k in (1, 2, 3, 5))
    assert len(await keys_of(store, OTHER_NS)) == 6


async def test_a_key_twice_in_a_group_keeps_the_last_content(store: EntryStore) -> None:
    """A key written twice by stores issued together (and twice in one store) reads back as the
    last write, one entry, with the first write's created_at."""
    results = await asyncio.gather(
        store.put(A, [entry(1, b'"a"'), entry(2, b'"b"'), entry(1, b'"c"')], T0),
        store.put(A, [entry(2, b'"d"')], T0 + 1),
        store.put(B, [entry(1, b'"bob"')], T0),
    )
    assert results == [[None, None, None], [None], [None]]
    found, total = await store.find(A, Query(tiers=BOTH), T0 + 1)
    assert total == 2
    assert {e.key: (e.content, e.created_at) for e in found} == {
        key(1): (b'"c"', T0), key(2): (b'"d"', T0)}


# -- lifecycle ------------------------------------------------------------------------------


async def test_data_survives_close_and_reopen(make_store: StoreFactory) -> None:
    """What a closed store acknowledged is there for a new store on the same database."""
    first = await make_store()
    await first.put(A, [entry(1, b'"kept"')], T0)
    await first.close()
    second = await make_store()
    (e,), _ = await second.find(A, Query(tiers=BOTH), T0)
    assert e.content == b'"kept"'


async def test_ready_when_open(store: EntryStore) -> None:
    """An open store reports ready."""
    assert await store.ready() is True


async def test_byte_quota_refuses_growth_and_keeps_the_old_content(
    make_store: StoreFactory,
) -> None:
    """Key and content bytes count per agent: a new entry or a growing update past the quota
    is memory_full and leaves the entry as it was; a shrinking update passes."""
    # sizes: the 7-byte key {"k":1} plus the content, quotes included
    store = await make_store(Quotas(max_bytes_per_agent=26))
    assert await store.put(A, [entry(1, b'"abcd"'), entry(2, b'"efgh"')], T0) == [None, None]
    assert await store.put(A, [entry(3, b'"ij"')], T0) == ["memory_full"]  # 26 + 11 > 26
    assert await store.put(A, [entry(1, b'"abcdef"')], T0) == ["memory_full"]  # 28 > 26
    (e,), _ = await store.find(A, Query(tiers=BOTH, keys=(key(1),)), T0)
    assert e.content == b'"abcd"'
    assert await store.put(A, [entry(1, b'""')], T0) == [None]  # shrinks to 22
    assert await store.put(A, [entry(3, b'"ij"')], T0) == ["memory_full"]  # 22 + 11 > 26


async def test_namespace_byte_quota_counts_every_writer(make_store: StoreFactory) -> None:
    """Every agent's bytes add up in the namespace quota; a takeover charges the new writer."""
    # sizes: key ({"k":"s"} 9 bytes, {"k":1} 7) plus content
    store = await make_store(Quotas(max_bytes_per_namespace=20, max_bytes_per_agent=18))
    assert await store.put(A, [entry("s", b'"abcdef"', tier="semantic")], T0) == [None]  # 17
    assert await store.put(B, [entry(1, b'"abcd"')], T0) == ["memory_full"]  # 17 + 13 > 20
    # the namespace grows to 19 (fits), but bob would hold 19 > 18
    assert await store.put(B, [entry("s", b'"abcdefgh"', tier="semantic")], T0) == ["memory_full"]
    assert await store.put(B, [entry("s", b'"abcd"', tier="semantic")], T0) == [None]


async def test_a_large_key_is_stored_read_and_forgotten(store: EntryStore) -> None:
    """A key of several kilobytes (past a btree row's limit) works like any other key."""
    big = canonical_key({"k": "x" * 6000})
    await store.put(A, [NewEntry(tier="episodic", key=big, content=b'"v1"')], T0)
    await store.put(A, [NewEntry(tier="episodic", key=big, content=b'"v2"')], T0 + 1)
    (e,), total = await store.find(A, Query(tiers=BOTH, keys=(big,)), T0 + 1)
    assert (total, e.content, e.created_at) == (1, b'"v2"', T0)
    assert await store.forget(A, BOTH, [big], [], T0 + 1) == 1


async def test_sqlite_search_scores_only_the_newest_matches(tmp_path: Path) -> None:
    """On SQLite with max_matches, only the newest that many entries of the namespace sharing
    a term are scored (a query of common words costs a bounded amount); without it, every one."""
    rows = [entry(0, b'"zebra zebra zebra"'), entry(1, b'"zebra and a horse"'),
            entry(2, b'"zebra and a mule"')]
    for cap, want in ((2, {key(1), key(2)}), (0, {key(0), key(1), key(2)})):
        store = SQLiteEntryStore(tmp_path / f"m{cap}.db", max_matches=cap)
        await store.open()
        try:
            await store.put(A, rows, T0)
            got = await store.search(A, Query(tiers=BOTH), "zebra", T0, 10)
            assert {e.key for e in got} == want
            assert cap or got[0].key == key(0)  # the best BM25, when every match is scored
        finally:
            await store.close()
