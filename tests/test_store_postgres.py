"""What only the PostgreSQL store has: several stores (hosts) on one database, its advisory
locks, its migrations, usage triggers and pgvector search. The shared contract is in
`test_store_contract.py`."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import numpy as np
import pytest
from support.store import BOTH, T0, entry, key

from host.app import make_store
from host.config import load_config
from host.store.postgres.schema import LOCK_CLASS, LOCK_GC, MIGRATIONS
from host.store.postgres.sql import lexemes_and_length, lexemes_of
from host.store.postgres.store import PostgresEntryStore
from host.store.records import Query, Quotas, Scope
from host.store.sqlite.store import SQLiteEntryStore


@pytest.fixture
async def sql(pg_url: str) -> AsyncIterator[asyncpg.Connection]:
    """A plain connection to the test database, for looking under the store."""
    conn = await asyncpg.connect(pg_url)
    yield conn
    await conn.close()


@pytest.fixture
async def stores(pg_url: str) -> AsyncIterator[list[PostgresEntryStore]]:
    """Two stores with their own pools on one database: two hosts, as far as the DB knows."""
    quotas = Quotas(max_entries_per_namespace=20, max_entries_per_agent=1000)
    opened = [PostgresEntryStore(pg_url, quotas=quotas, pool_max=4) for _ in range(2)]
    for s in opened:
        await s.open()
    yield opened
    for s in opened:
        await s.close()


async def test_quota_holds_under_concurrent_writers_on_two_hosts(
    stores: list[PostgresEntryStore], sql: asyncpg.Connection
) -> None:
    """80 concurrent single-entry puts through two stores into a namespace of quota 20 store
    exactly 20 entries; the rest are memory_full."""
    async def writer(store: PostgresEntryStore, agent: str) -> list[str | None]:
        out: list[str | None] = []
        for i in range(10):
            out += await store.put(Scope("ns", agent), [entry(f"{agent}-{i}")], T0)
        return out

    results = await asyncio.gather(*(
        writer(stores[n % 2], f"agent{n}") for n in range(8)))
    outcomes = [o for r in results for o in r]
    assert outcomes.count(None) == 20
    assert outcomes.count("memory_full") == 60
    assert await sql.fetchval("SELECT count(*) FROM a2e_entries WHERE namespace = 'ns'") == 20
    assert await sql.fetchval(
        "SELECT entries FROM a2e_usage WHERE namespace = 'ns' AND agent = ''") == 20


async def test_write_on_one_store_is_read_on_the_other_at_once(
    stores: list[PostgresEntryStore],
) -> None:
    """A put acknowledged by one store is visible to a find and a search on the other."""
    a, b = stores
    await a.put(Scope("ns", "x"), [entry(1, b'"shared fact"', tier="semantic")], T0)
    found, _ = await b.find(Scope("ns", "y"), Query(tiers=BOTH), T0)
    assert [e.content for e in found] == [b'"shared fact"']
    got = await b.search(Scope("ns", "y"), Query(tiers=BOTH), "fact", T0, 10)
    assert [e.key for e in got] == [key(1)]


async def test_gc_skips_while_another_host_holds_the_lock(
    stores: list[PostgresEntryStore], sql: asyncpg.Connection
) -> None:
    """While another session holds the GC advisory lock, collect_garbage deletes nothing;
    once released, one collection deletes every expired entry."""
    a, _ = stores
    await a.put(Scope("ns", "x"), [entry(i, ttl=5) for i in range(5)], T0)
    assert await sql.fetchval("SELECT pg_try_advisory_lock($1, $2)", LOCK_CLASS, LOCK_GC)
    assert await a.collect_garbage(T0 + 10) == 0
    assert await sql.fetchval("SELECT count(*) FROM a2e_entries") == 5
    await sql.execute("SELECT pg_advisory_unlock($1, $2)", LOCK_CLASS, LOCK_GC)
    assert await a.collect_garbage(T0 + 10) == 5
    assert await sql.fetchval("SELECT count(*) FROM a2e_entries") == 0


async def test_gc_in_batches_across_namespaces(pg_url: str, sql: asyncpg.Connection) -> None:
    """GC deletes in batches of `gc_batch`, namespace by namespace, until none is left."""
    async with PostgresEntryStore(pg_url, gc_batch=3) as store:
        for ns in ("n1", "n2"):
            await store.put(Scope(ns, "x"), [entry(i, ttl=1) for i in range(7)], T0)
        assert await store.collect_garbage(T0 + 2) == 14
    assert await sql.fetchval("SELECT count(*) FROM a2e_entries") == 0
    assert await sql.fetchval("SELECT sum(entries) FROM a2e_usage") == 0


async def test_hosts_starting_together_migrate_once(pg_url: str, sql: asyncpg.Connection) -> None:
    """Five stores opening at once on an empty database all start; each migration ran once."""
    stores = [PostgresEntryStore(pg_url, pool_max=1) for _ in range(5)]
    await asyncio.gather(*(s.open() for s in stores))
    for s in stores:
        await s.close()
    versions = [r[0] for r in await sql.fetch("SELECT version FROM a2e_migrations ORDER BY 1")]
    assert versions == list(MIGRATIONS)


async def test_usage_rows_match_the_entries_after_mixed_writes(
    stores: list[PostgresEntryStore], sql: asyncpg.Connection
) -> None:
    """After concurrent puts, upserts, overwrites, touches, forgets and GC, the trigger-kept
    usage rows and term counts equal counts and sizes computed from the entries themselves."""
    a, b = stores

    async def churn(store: PostgresEntryStore, agent: str, ns: str) -> None:
        s = Scope(ns, agent)
        for i in range(6):
            sized = f'"{"v" * i}"'.encode()  # sizes differ, so bytes are checked too
            mine = f'"{agent}"'.encode()
            words = f'"{agent} word{i} common"'.encode()  # terms change with each write
            await store.put(s, [entry(i, sized, ttl=3 if i % 2 else 0),
                                entry("shared", mine, tier="semantic"),
                                entry(f"w{i % 3}", words)], T0 + i)
            await store.touch(s, BOTH, [key(f"w{i % 3}")], T0 + i + 0.5)
        await store.forget(s, BOTH, [key(0)], [], T0 + 6)

    await asyncio.gather(*(churn(st, ag, ns) for st in (a, b) for ag in ("p", "q")
                           for ns in ("n1", "n2")))
    await a.collect_garbage(T0 + 7)
    usage = {(r[0], r[1]): (r[2], r[3]) for r in await sql.fetch(
        "SELECT namespace, agent, entries, bytes FROM a2e_usage WHERE entries <> 0 OR bytes <> 0")}
    actual = {(r[0], r[1]): (r[2], r[3]) for r in await sql.fetch(
        "SELECT namespace, agent, count(*), sum(size) FROM a2e_entries GROUP BY 1, 2"
        " UNION ALL SELECT namespace, '', count(*), sum(size) FROM a2e_entries GROUP BY 1")}
    assert usage == actual
    assert actual  # the churn left something to count
    terms = await sql.fetch("SELECT namespace, term, docs FROM a2e_terms ORDER BY 1, 2")
    counted = await sql.fetch(
        "SELECT namespace, u.term, count(*) FROM a2e_entries,"
        " unnest(tsvector_to_array(lexemes)) AS u(term) GROUP BY 1, 2 ORDER BY 1, 2")
    assert [tuple(r) for r in terms] == [tuple(r) for r in counted]
    assert any(r[1] == "common" for r in counted)


async def test_lexemes_carry_the_scope_and_term_counts(
    stores: list[PostgresEntryStore], sql: asyncpg.Connection
) -> None:
    """The stored lexemes are the namespace's scope lexeme, then each distinct token with one
    position per occurrence, minus any token longer than PostgreSQL allows in one lexeme."""
    lex = lexemes_of("ns", "Café café " + "x" * 3000 + " bar").split(" ")
    assert lex[0].startswith("'_n") and lex[1:] == ["'cafe':1,2", "'bar':1"]
    assert lexemes_of("other", "").startswith("'_n") and lexemes_of("other", "") != lex[0]
    assert await sql.fetchval("SELECT a2e_doc_len($1::tsvector)",
                              lexemes_of("ns", "a b a c a")) == 6  # 5 tokens + the scope
    assert await sql.fetchval("SELECT a2e_doc_len($1::tsvector)",
                              lexemes_of("ns", "a b a c a")) == lexemes_and_length("ns", "a b a c a")[1]


async def test_term_occurrences_read_back_exactly(
    stores: list[PostgresEntryStore], sql: asyncpg.Connection
) -> None:
    """a2e_tf reads a term's occurrences in an entry's lexemes back from ts_rank exactly, for
    every count a lexeme can hold (1..256), and 0 for a term the entry does not hold."""
    got = await sql.fetch(
        "SELECT k, a2e_tf(ts_rank($1::tsvector || ('x:' || array_to_string(ARRAY("
        "SELECT generate_series(1, k)), ','))::tsvector, 'x'::tsquery, 0)),"
        " a2e_tf(ts_rank(('x:' || k)::tsvector, 'y'::tsquery, 0))"
        " FROM generate_series(1, 256) k ORDER BY k", lexemes_of("ns", "other words"))
    assert [(r[0], r[2]) for r in got] == [(k, 0.0) for k in range(1, 257)]
    assert [r[1] for r in got] == [float(k) for k in range(1, 257)]


async def test_search_scores_the_newest_readable_matches(pg_url: str) -> None:
    """With max_matches, only the newest that many matches the reader may read are scored:
    another agent's newer private entries sharing the word neither take those places nor hide
    the reader's own entries; without a cap every match is scored (the best BM25 first)."""
    for cap in (2, 0):
        alice, bob = Scope(f"ns{cap}", "alice"), Scope(f"ns{cap}", "bob")
        async with PostgresEntryStore(pg_url, max_matches=cap) as store:
            await store.put(alice, [entry("a0", b'"zebra zebra zebra"'),
                                    entry("a1", b'"zebra and a horse"'),
                                    entry("a2", b'"zebra and a mule"')], T0)
            await store.put(bob, [entry(f"b{i}", b'"zebra crossing"') for i in range(5)], T0)
            got = await store.search(alice, Query(tiers=("episodic",)), "zebra", T0, 10)
            want = {key("a1"), key("a2")} if cap else {key("a0"), key("a1"), key("a2")}
            assert {e.key for e in got} == want
            assert cap or got[0].key == key("a0")
            theirs = await store.search(bob, Query(tiers=("episodic",)), "zebra", T0, 10)
            assert len(theirs) == (cap or 5) and {e.owner for e in theirs} == {"bob"}


async def test_another_agents_private_entries_do_not_make_your_terms_common(
    pg_url: str,
) -> None:
    """A term common in the namespace only through another agent's private entries is still
    searched for a reader who holds it in few entries (counted among what they may read), with
    the namespace's count (capped) as its BM25 statistic; a term common for the reader too is
    left out."""
    carol, dave = Scope("ns", "carol"), Scope("ns", "dave")
    async with PostgresEntryStore(pg_url, max_term_docs=5) as store:
        await store.put(dave, [entry(f"d{i}", b'"zebra stripes giraffe"') for i in range(30)], T0)
        await store.put(carol, [entry("c", b'"zebra crossing"')]
                        + [entry(f"g{i}", b'"giraffe"') for i in range(8)], T0)
        q = Query(tiers=BOTH)
        got = await store.search(carol, q, "zebra giraffe", T0, 10)
        assert [e.key for e in got] == [key("c")]  # giraffe: 8 readable > 5, left out
        _, stats = await store.search_stats(carol, q, "zebra giraffe", T0, 10)
        assert (stats.terms, stats.hits) == (("zebra",), (6,))  # 30 in the namespace, capped


async def test_bm25_equals_sqlite_fts5(pg_url: str, tmp_path: Path) -> None:
    """In one namespace, the PostgreSQL store's keyword scores are SQLite FTS5's bm25 values
    for the same entries and query, in the same order."""
    texts = ["the quick brown fox", "brown brown brown dog", "a fox, a fox and a fox!",
             "lazy dogs sleep all day long in the warm sun", "quick quick quick",
             "nothing to see", "brown"]
    entries = [entry(i, json.dumps(t).encode(), tier="semantic" if i % 2 else "episodic")
               for i, t in enumerate(texts)]
    scores = []
    for store in (SQLiteEntryStore(tmp_path / "a2e.db"), PostgresEntryStore(pg_url)):
        async with store:
            await store.put(Scope("ns", "alice"), entries, T0)
            await store.put(Scope("ns", "bob"), [entry("b", b'"brown fox"')], T0)
            got = await store.search(Scope("ns", "alice"), Query(tiers=BOTH), "quick brown fox",
                                     T0, 100)
            scores.append([(e.key, round(e.keyword or 0.0, 9)) for e in got])
    assert scores[0] == scores[1]
    assert len(scores[0]) == 5


async def test_make_store_selects_postgres_for_a_url(pg_url: str) -> None:
    """`store.db` = postgresql://... selects the PostgreSQL store with the config's quotas."""
    cfg = load_config(None, {"store": {"db": pg_url, "pool_size": 3},
                             "limits": {"max_entries_per_agent": 7}})
    store = make_store(cfg)
    assert isinstance(store, PostgresEntryStore)
    assert (store.pool_max, store.quotas.max_entries_per_agent) == (3, 7)


# -- vectors --------------------------------------------------------------------------------


async def _embed(store: PostgresEntryStore, vectors: dict[bytes, list[float]],
                 model: str = "m1") -> list[int]:
    """Claim the whole queue and write `vectors` (by entry key) for the claimed entries."""
    claimed = await store.claim_vectors(100, 60.0)
    by_text = {}
    for p, seq in claimed:
        by_text[p.id] = seq
    ids = await store.fetch(Scope("ns", "alice"), Query(tiers=BOTH), list(by_text), T0)
    ids += await store.fetch(Scope("ns", "bob"), Query(tiers=("episodic",)), list(by_text), T0)
    rows = [(int(e.id), by_text[int(e.id)], vectors[e.key])  # type: ignore[arg-type]
            for e in ids if e.key in vectors]
    return await store.put_vectors(model, rows)


async def test_vector_search_nearest_first_within_visibility(
    stores: list[PostgresEntryStore], sql: asyncpg.Connection
) -> None:
    """Vectors written for claimed entries come back nearest first (cosine), only for entries
    the reader may see and of the model asked for, with an HNSW index for their dimension."""
    a, _ = stores
    assert a.vectors_available
    alice, bob = Scope("ns", "alice"), Scope("ns", "bob")
    await a.put(alice, [entry("east"), entry("north"), entry("ne", tier="semantic")], T0)
    await a.put(bob, [entry("bob-east")], T0)
    stored = await _embed(a, {key("east"): [1.0, 0.0, 0.0], key("north"): [0.0, 1.0, 0.0],
                              key("ne"): [0.7, 0.7, 0.0], key("bob-east"): [1.0, 0.0, 0.0]})
    assert len(stored) == 4 and await a.vector_queue() == 0
    hits = await a.nearest_vectors(alice, Query(tiers=BOTH), "m1", [0.9, 0.1, 0.0], T0, 10)
    got = await a.fetch(alice, Query(tiers=BOTH), hits.ids.tolist(), T0)
    by_id = {e.id: e.key for e in got}
    assert [by_id[i] for i in hits.ids.tolist()] == [key("east"), key("ne"), key("north")]
    assert hits.similarities[0] > hits.similarities[1] > hits.similarities[2]
    assert hits.allowed == 3 and 0 < hits.mean < 1
    other = await a.nearest_vectors(alice, Query(tiers=BOTH), "other", [1, 0, 0], T0, 10)
    assert other.ids.size == 0 and other.allowed == 0
    assert await sql.fetchval(
        "SELECT count(*) FROM pg_indexes WHERE indexname = 'a2e_vectors_hnsw_half_3'") == 1


async def test_nearest_vectors_filter_before_ranking(stores: list[PostgresEntryStore]) -> None:
    """Expired entries and entries outside the tag filter are never among the nearest, even
    when they are the closest: the filters apply before ranking, so `k` readable rows come
    back."""
    a, _ = stores
    s = Scope("ns", "alice")
    await a.put(s, [entry("near-expired", ttl=5), entry("near-untagged"),
                    entry("far", tags=["t"]), entry("farther", tags=["t"])], T0)
    await _embed(a, {key("near-expired"): [1.0, 0.0], key("near-untagged"): [1.0, 0.0],
                     key("far"): [0.6, 0.8], key("farther"): [0.0, 1.0]}, model="m")
    by_id = {e.id: e.key for e in await a.fetch(s, Query(tiers=BOTH), list(range(1, 99)), T0)}
    later = await a.nearest_vectors(s, Query(tiers=BOTH), "m", [1.0, 0.0], T0 + 10, 2)
    assert [by_id[i] for i in later.ids.tolist()] == [key("near-untagged"), key("far")]
    tagged = await a.nearest_vectors(s, Query(tiers=BOTH, tags=("t",)), "m", [1.0, 0.0], T0, 2)
    assert [by_id[i] for i in tagged.ids.tolist()] == [key("far"), key("farther")]
    assert tagged.allowed == 2


async def test_two_hosts_never_claim_the_same_entry(stores: list[PostgresEntryStore]) -> None:
    """Two stores (hosts) claiming the embedding queue at once get disjoint entries; a claim
    not written back is taken over once its lease ran out."""
    a, b = stores
    await a.put(Scope("ns", "alice"), [entry(i) for i in range(12)], T0)
    got = await asyncio.gather(*(s.claim_vectors(4, 60.0) for s in (a, b, a, b)))
    ids = [p.id for batch in got for p, _seq in batch]
    assert len(ids) == 12 and len(set(ids)) == 12
    assert await a.claim_vectors(100, 60.0) == [] and await a.vector_queue() == 12
    short = await b.put_vectors("m", [])  # nothing written: the claims stay until they lapse
    assert short == []
    await a.requeue_vectors()  # releases every claim, as a lapsed lease would
    assert len(await b.claim_vectors(100, 0.05)) == 12
    await asyncio.sleep(0.1)
    assert len(await a.claim_vectors(100, 60.0)) == 12


async def test_changed_content_drops_the_vector(stores: list[PostgresEntryStore]) -> None:
    """An upsert that changes an entry's content deletes its vector and queues it again (a
    vector computed from the old text is then refused); one that changes only the score keeps
    it; forgetting the entry deletes it too."""
    a, _ = stores
    s = Scope("ns", "alice")
    await a.put(s, [entry(1, b'"a"'), entry(2, b'"b"')], T0)
    (id1, seq1), (id2, seq2) = sorted((p.id, q) for p, q in await a.claim_vectors(10, 60.0))
    await a.put(s, [entry(1, b'"changed"'), entry(2, b'"b"', score=0.5)], T0 + 1)
    rows = [(id1, seq1, [1.0, 0.0]), (id2, seq2, [0.0, 1.0])]
    assert await a.put_vectors("m", rows) == [id2]
    [(again, _seq)] = await a.claim_vectors(10, 60.0)
    assert again.id == id1 and "changed" in again.text
    hits = await a.nearest_vectors(s, Query(tiers=BOTH), "m", [1.0, 0.0], T0 + 1, 10)
    assert hits.ids.tolist() == [id2]
    sims = await a.vector_similarity("m", np.array([0.0, 1.0]), [id2, 999])
    assert sims[0] == pytest.approx(1.0) and np.isnan(sims[1])
    await a.forget(s, BOTH, [key(2)], [], T0 + 1)
    hits = await a.nearest_vectors(s, Query(tiers=BOTH), "m", [1.0, 0.0], T0 + 1, 10)
    assert hits.ids.size == 0


async def test_vector_write_gives_way_to_a_held_row(
    stores: list[PostgresEntryStore], sql: asyncpg.Connection
) -> None:
    """A background vector write never waits long on an entry a request's write holds (it
    could close a deadlock PostgreSQL would break by aborting the request): it writes nothing
    and releases its claims, and succeeds once the row is free."""
    a, _ = stores
    await a.put(Scope("ns", "alice"), [entry(1)], T0)
    [(p, seq)] = await a.claim_vectors(10, 60.0)
    tx = sql.transaction()
    await tx.start()
    await sql.execute("SELECT 1 FROM a2e_entries WHERE id = $1 FOR UPDATE", p.id)
    try:
        # (a write that waited for the lock would time out here instead of hanging)
        assert await asyncio.wait_for(a.put_vectors("m", [(p.id, seq, [1.0, 0.0])]), 30) == []
    finally:
        await tx.rollback()
    [(again, seq2)] = await a.claim_vectors(10, 60.0)  # released: claimable at once
    assert (again.id, seq2) == (p.id, seq)
    assert await a.put_vectors("m", [(p.id, seq, [1.0, 0.0])]) == [p.id]


async def test_vector_model_recorded_and_change_requeues(
    stores: list[PostgresEntryStore], sql: asyncpg.Connection
) -> None:
    """The embedder's name and dimension are recorded in the database; the same one again
    changes nothing, a different one deletes every vector and queues every entry."""
    a, b = stores
    s = Scope("ns", "alice")
    await a.put(s, [entry(1, b'"a"')], T0)
    assert await a.set_vector_model("m", 2) is True
    assert dict(await sql.fetch("SELECT name, value FROM a2e_search_meta")) == {
        "model": "m", "dim": "2"}
    [(p, seq)] = await a.claim_vectors(10, 60.0)
    assert await a.put_vectors("m", [(p.id, seq, [1.0, 0.0])]) == [p.id]
    assert await b.set_vector_model("m", 2) is False and await a.vector_queue() == 0
    assert await b.set_vector_model("m2", 3) is True
    assert await sql.fetchval("SELECT count(*) FROM a2e_vectors") == 0
    assert await a.vector_queue() == 1


async def test_count_by_tier_counts_live_entries(stores: list[PostgresEntryStore]) -> None:
    """The metrics' entry counts: live entries by tier, expired ones left out."""
    a, _ = stores
    await a.put(Scope("ns", "x"), [entry(1), entry(2, ttl=5), entry(3, tier="semantic")], T0)
    assert await a.count_by_tier(T0 + 10) == {"episodic": 1, "semantic": 1}


async def test_concurrent_puts_of_one_host_share_a_commit(pg_url: str) -> None:
    """Fifty puts issued together by one store are committed in at most two batches (group
    commit), and each gets its own outcomes."""
    async with PostgresEntryStore(pg_url, quotas=Quotas(max_entries_per_agent=40)) as store:
        results = await asyncio.gather(*(
            store.put(Scope("ns", "a" if i < 45 else "b"), [entry(i)], T0) for i in range(50)))
        assert store._puts is not None and store._puts.batches <= 2
        assert results.count([None]) == 45 and results.count(["memory_full"]) == 5
        assert results[45:] == [[None]] * 5  # agent b has its own quota


async def test_a_failing_put_fails_alone_in_its_batch(
    pg_url: str, sql: asyncpg.Connection
) -> None:
    """Inside a2e_put_group a request that raises is rolled back alone ('error: ...' outcomes)
    and the other requests of the statement commit; a NUL in a tag is refused before it is
    queued."""
    async with PostgresEntryStore(pg_url) as store:
        with pytest.raises(ValueError, match="NUL"):
            await store.put(Scope("ns", "a"), [entry(1, tags=["bad\x00tag"])], T0)
        assert await store.put(Scope("ns", "a"), [entry(2)], T0) == [None]
    n = 3
    out = await sql.fetchval(
        "SELECT a2e_put_group($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15,"
        " $16, $17, $18, $19, $20, $21)",
        [100, 100, 10**6, 10**6], [1, 2, 2], [1] * n, ["n1", "n2", "n2"], ["a"] * n, [T0] * n,
        ["episodic"] * n, ["a"] * n, ['{"k":1}', '{"k":1}', '{"k":2}'], ['"x"'] * n,
        ["not an array", "{}", '{"t"}'], [""] * n, [1.0] * n, [0] * n, [None] * n, [None] * n,
        ["'_n1'", "'_n2'", "'_n2'"], [3] * n, [1] * n, [None] * n, [None] * n)
    assert out[0].startswith("error: ") and out[1:] == [None, None]
    assert [r[0] for r in await sql.fetch("SELECT namespace FROM a2e_entries"
                                          " WHERE namespace IN ('n1', 'n2')")] == ["n2", "n2"]


async def test_concurrent_forgets_share_a_commit(pg_url: str) -> None:
    """Forty forgets issued together are committed in at most two batches, each answering its
    own count; agents still forget only what they may see."""
    async with PostgresEntryStore(pg_url) as store:
        for agent in ("a", "b"):
            await store.put(Scope("ns", agent), [entry(i, tags=["t"]) for i in range(20)], T0)
        counts = await asyncio.gather(*(
            store.forget(Scope("ns", "a" if i % 2 else "b"), BOTH, [key(i // 2)], ["t"], T0)
            for i in range(40)))
        assert store._forgets is not None and store._forgets.batches <= 2
        assert counts == [1] * 40
        assert await store.forget(Scope("ns", "a"), BOTH, [key(1)], [], T0) == 0
