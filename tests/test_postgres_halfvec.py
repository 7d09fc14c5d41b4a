"""The host's HNSW indexes on PostgreSQL are on `halfvec`: a new dimension's index is built on
`embedding::halfvec(dim)`, the nearest-vectors statement orders by the index's expression (its
plan uses the index), and the similarities it returns are computed on 32-bit floats."""

from __future__ import annotations

from collections.abc import AsyncIterator

import numpy as np
import pytest
from support.store import BOTH, T0, entry, key

from host.store.postgres.store import PostgresEntryStore
from host.store.records import Query, Scope

INDEXES = ("SELECT indexname FROM pg_indexes WHERE tablename = 'a2e_vectors'"
           " AND indexname LIKE 'a2e_vectors_hnsw%' ORDER BY 1")


@pytest.fixture
async def store(pg_url: str) -> AsyncIterator[PostgresEntryStore]:
    s = PostgresEntryStore(pg_url)
    await s.open()
    try:
        yield s
    finally:
        await s.close()


async def _embedded(store: PostgresEntryStore, vectors: dict[str, list[float]]) -> list[int]:
    """Put one entry a name, claim them and write their vectors (model "m"); their ids."""
    scope = Scope("ns", "alice")
    await store.put(scope, [entry(k) for k in vectors], T0)
    claimed = await store.claim_vectors(100, 60.0)
    got = {e.key: int(e.id) for e in await store.fetch(  # type: ignore[arg-type]
        scope, Query(tiers=BOTH), [p.id for p, _ in claimed], T0)}
    seqs = {p.id: s for p, s in claimed}
    rows = [(got[key(k)], seqs[got[key(k)]], v) for k, v in vectors.items()]
    return await store.put_vectors("m", rows)


async def test_the_index_is_on_halfvec_and_serves_the_nearest_vectors_query(
    store: PostgresEntryStore
) -> None:
    """The first vectors of a dimension build its index on halfvec; the nearest-vectors statement
    uses it; the similarities returned are the 32-bit cosine (not rounded to 16 bits)."""
    assert store.vectors_available and await store.index_kind() == "halfvec"
    third = 1 / 3
    vectors = {"a": [1.0, 0.0, 0.0], "b": [third, 1.0, 0.0], "c": [0.0, 0.0, 1.0]}
    assert len(await _embedded(store, vectors)) == 3
    assert [r[0] for r in await store.pool.fetch(INDEXES)] == ["a2e_vectors_hnsw_half_3"]
    q = [1.0, 0.123456789, 0.0]
    hits = await store.nearest_vectors(Scope("ns", "alice"), Query(tiers=BOTH), "m", q, T0, 2)
    qv = np.array(q) / np.linalg.norm(q)
    b = np.array(vectors["b"]) / np.linalg.norm(vectors["b"])
    assert hits.similarities.tolist() == pytest.approx([qv[0], float(qv @ b)], abs=1e-6)
    sql, values = store.nearest_sql(Scope("ns", "alice"), Query(tiers=BOTH), "m", q, T0, 2,
                                    2000, [], "halfvec")
    async with store.pool.acquire() as conn, conn.transaction():
        # a table of 3 rows: without a sort, only an index gives the order
        await conn.execute("SET LOCAL enable_seqscan = off; SET LOCAL enable_sort = off")
        plan = "\n".join(r[0] for r in await conn.fetch("EXPLAIN " + sql, *values))
    assert "a2e_vectors_hnsw_half_3" in plan
