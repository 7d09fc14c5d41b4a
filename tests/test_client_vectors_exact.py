"""A retrieve by vector from an approximate (8-bit) index returns the exact top k of float32,
with exact cosine similarities: its best candidates are scored again on the stored vectors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from support.client_vectors import (
    DIMS,
    SPACE,
    Model,
    put_vectors,
    retrieve_args,
    vector_config,
    vector_sessions,
)
from support.hosts import running_host

from host.search.client_vectors import rescore_count


async def _promoted(vectors: Any) -> None:
    """Wait for the indexes' background promotions to approximate indexes (when they have)."""
    wait = getattr(vectors, "wait_idle", None)
    if wait is not None:
        await wait()


async def test_an_approximate_space_answers_filtered_queries_exactly(tmp_path: Path) -> None:
    rng = np.random.default_rng(11)
    model = Model()
    config = vector_config(tmp_path / "exact.db", ann_min_rows=300)
    async with running_host(config) as host, vector_sessions(host, ("a1",)) as cs:
        for first in range(0, 1200, 300):
            await put_vectors(cs["a1"], model, "a1", rng, range(first, first + 300), "semantic",
                              host.clock())
        await cs["a1"].retrieve(vector=[1.0] * DIMS, vector_space=SPACE)  # loads the space
        await _promoted(host.search.vectors)
        for _ in range(8):
            q = rng.standard_normal(DIMS).tolist()
            for kw in ({"tags": ("even",)}, {"t": 1}, {}, {"tags": ("even",), "limit": 3,
                                                         "offset": 4},
                       {"tags": ("even",), "min_score": 0.6, "limit": 50}):
                got = await cs["a1"].retrieve(**retrieve_args(q, kw))
                want = model.expected("a1", q, host.clock(), **kw)
                assert [e["key"]["k"] for e in got.entries] == [k for k, _ in want], kw
                assert np.allclose([e["relevance"] for e in got.entries],
                                   [s for _, s in want], rtol=0, atol=1e-6), kw
        vectors: Any = host.search.vectors
        assert vectors.stats()["ann_keys"] == 1  # the space was approximate throughout


def test_the_rescored_margin_is_bounded() -> None:
    assert rescore_count(10) == 42 and rescore_count(100) == 200
    assert rescore_count(5000) == 5000 + 1024


class _HashEmbedder:
    """Random unit vectors seeded by the text: a space with no meaning, cheap to embed."""

    name = "hash-16"
    dim = DIMS

    def embed(self, texts: list[str]) -> np.ndarray:
        rows = [np.random.default_rng(int.from_bytes(t.encode()[-8:].rjust(8, b"\0"), "little"))
                .standard_normal(DIMS) for t in texts]
        m = np.asarray(rows, dtype=np.float32).reshape(-1, DIMS)
        return (m / np.linalg.norm(m, axis=1, keepdims=True)).astype(np.float32)

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return self.embed(texts)


async def test_the_host_vectors_of_an_approximate_index_are_ranked_exactly(
    tmp_path: Path,
) -> None:
    """The nearest rows of a namespace past `ann_min_rows`, filtered by tag or not, and the
    similarity of any id, are those of float32 (the store's vectors), not of 8-bit codes."""
    import sqlite3

    from host.config import load_config
    from host.search.engine import SearchEngine
    from host.search.vectors import LocalVectors
    from host.store.records import NewEntry, Query, Scope
    from host.store.sqlite.store import SQLiteEntryStore
    from protocol.keys import canonical_key

    path = tmp_path / "h.db"
    store = SQLiteEntryStore(path)
    await store.open()
    cfg = load_config(None, {"search": {"ann_min_rows": 300}}).search
    engine = SearchEngine(store, _HashEmbedder(), cfg)  # type: ignore[arg-type]
    await engine.start(worker=False)
    scope = Scope("ns", "a1")
    try:
        await store.put(scope, [NewEntry("semantic", canonical_key({"k": i}),
                                         f'"text {i:06d}"'.encode(),
                                         tags=["even"] if i % 2 == 0 else [])
                                for i in range(1000)], 1.0)
        await engine.drain()
        with sqlite3.connect(path) as conn:
            rows = conn.execute("SELECT v.entry_id, v.vec, e.tags FROM vectors v"
                                " JOIN entries e ON e.id = v.entry_id").fetchall()
        ids = np.array([r[0] for r in rows])
        m = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32).reshape(-1, DIMS)
        even = np.array(["even" in (r[2] or "") for r in rows])
        vectors = engine.retrieval.vectors
        assert isinstance(vectors, LocalVectors) and vectors.indexes is not None
        await vectors.open("ns")
        await _promoted(engine.vectors)
        lookup = await vectors.open("ns")
        index = vectors.indexes.get("ns")
        assert lookup is not None and index is not None and index.kind == "ann"
        rng = np.random.default_rng(5)
        for _ in range(8):
            qv = rng.standard_normal(DIMS).astype(np.float32)
            qv /= np.linalg.norm(qv)
            for q, allowed in ((Query(tiers=("semantic",), tags=("even",)), even),
                               (Query(tiers=("semantic",)), np.ones(len(ids), bool))):
                hits = await lookup.nearest(scope, q, qv, 2.0)
                sims = m[allowed] @ qv
                order = np.lexsort((-ids[allowed], -sims))[: cfg.fusion_pool]
                assert hits.ids.tolist() == ids[allowed][order].tolist()
                assert np.allclose(hits.similarities, sims[order], rtol=0, atol=1e-6)
            got = await lookup.similarity(qv, ids[:50].tolist())
            assert np.allclose(got, m[:50] @ qv, rtol=0, atol=1e-6)
    finally:
        await engine.stop()
        await store.close()
