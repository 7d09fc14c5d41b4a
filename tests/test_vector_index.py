"""The vector index package: exact top-k under filters (float32 and float16), and the budgeted
set of keys (`VectorIndexes`): loading, eviction, writes during a load, promotion to ANN."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import numpy as np
import pytest
from support.index_rows import ALICE, BOB, DIM, SHARED, Store, unit

from host.search.index import ExactIndex, VectorIndexes


def brute(vecs: np.ndarray, ids: np.ndarray, q: np.ndarray, allowed: np.ndarray, k: int) -> list[int]:
    sims = vecs[allowed] @ q
    order = np.argsort(-sims, kind="stable")[:k]
    return ids[allowed][order].tolist()


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_exact_top_k_under_filters(dtype: str) -> None:
    n = 2000
    vecs, ids = unit(n), np.arange(10, 10 + n)
    groups = [(ALICE, BOB, SHARED)[i % 3] for i in range(n)]
    expires: list[float | None] = [50.0 if i % 5 == 0 else None for i in range(n)]
    index = ExactIndex(DIM, dtype=dtype, capacity=3)
    index.add(ids.tolist(), vecs, groups, expires)
    assert len(index) == n and 10 in index and 9 not in index and index.nbytes > 0
    q = unit(1, seed=1)[0]
    g = np.array(groups)
    live = np.array([e is None for e in expires])
    only = ids[::7]
    for kw, allowed in [
        ({}, np.ones(n, dtype=bool)),
        ({"groups": [BOB, SHARED]}, g != ALICE),
        ({"now": 100.0}, live),
        ({"groups": [ALICE], "now": 100.0, "only": only}, (g == ALICE) & live & np.isin(ids, only)),
    ]:
        hits = index.search(q, 10, **kw)  # type: ignore[arg-type]
        assert hits.ids.tolist() == brute(vecs, ids, q, allowed, 10)
        assert hits.allowed == int(allowed.sum())
        assert np.allclose(hits.similarities, vecs[np.searchsorted(ids, hits.ids)] @ q, atol=2e-3)
        assert abs(hits.mean - float((vecs[allowed] @ q).mean())) < 1e-3
    # removal and replacement
    assert index.remove([10, 11, 99999]) == 2 and len(index) == n - 2
    index.add([12], unit(1, seed=5), [BOB], [None])
    assert index.search(unit(1, seed=5)[0], 1).ids.tolist() == [12]
    assert index.search(unit(1, seed=5)[0], 1, groups=[ALICE]).ids.tolist() != [12]
    assert index.set_meta(13, ALICE, 1.0) and not index.set_meta(10, ALICE, None)
    assert 13 not in index.search(q, n, now=2.0).ids.tolist()
    sims = index.similarity(q, [13, 10])
    assert np.isnan(sims[1]) and abs(sims[0] - float(vecs[3] @ q)) < 2e-3


def test_float16_recall_matches_float32() -> None:
    vecs = unit(5000, 64, seed=2)
    a, b = ExactIndex(64), ExactIndex(64, dtype="float16")
    for ix in (a, b):
        ix.add(range(5000), vecs, [SHARED] * 5000, [None] * 5000)
    qs = unit(50, 64, seed=3)
    same = sum(len(set(a.search(q, 10).ids.tolist()) & set(b.search(q, 10).ids.tolist())) for q in qs)
    assert same / 500 >= 0.97
    assert b.nbytes < a.nbytes * 0.7


def _key_rows(store: Store, key: str, n: int, seed: int, first: int) -> tuple[list[int], np.ndarray]:
    ids, vecs = list(range(first, first + n)), unit(n, seed=seed)
    store.put(key, ids, vecs, [SHARED] * n)
    return ids, vecs


def test_open_loads_and_budget_evicts_least_recently_used() -> None:
    store = Store()
    data = {k: _key_rows(store, k, 300, seed, 1000 * seed) for seed, k in enumerate(["a", "b", "c"], 1)}
    one = ExactIndex(DIM)
    one.add(*data["a"], [SHARED] * 300, [None] * 300)
    budget = int(one.nbytes * 2.5)

    async def run() -> None:
        vi = VectorIndexes(budget_bytes=budget, loader=store.loader, ann_min_rows=0)
        assert vi.get("a") is None and await vi.open("nothing") is None
        for k in ("a", "b"):
            assert await vi.open(k) is not None
        vi.get("a")  # a is now the most recently used: b goes first
        await vi.open("c")
        assert vi.keys() == ["a", "c"] and vi.nbytes <= budget and vi.stats()["evictions"] == 1
        vi.add("b", [1], unit(1), [SHARED], [None])  # not loaded: dropped
        assert vi.get("b") is None
        ix = await vi.open("b")  # re-read from the store
        assert ix is not None and len(ix) == 300 and 1 not in ix
        q = data["b"][1][7]
        assert ix.search(q, 1).ids.tolist() == [data["b"][0][7]]
        assert vi.nbytes <= budget and store.reads.count("b") == 2

    asyncio.run(run())


def test_key_bigger_than_budget_stays_alone() -> None:
    store = Store()
    _key_rows(store, "big", 500, 1, 0)
    _key_rows(store, "small", 10, 2, 10_000)

    async def run() -> None:
        vi = VectorIndexes(budget_bytes=1000, loader=store.loader, ann_min_rows=0)
        await vi.open("small")
        assert await vi.open("big") is not None
        assert vi.keys() == ["big"] and vi.nbytes > vi.budget_bytes

    asyncio.run(run())


def test_writes_during_load_are_not_lost() -> None:
    store = Store()
    ids, vecs = _key_rows(store, "k", 250, 1, 0)
    store.gate = threading.Event()

    async def run() -> None:
        vi = VectorIndexes(loader=store.loader, ann_min_rows=0)
        opening = asyncio.ensure_future(vi.open("k"))
        await asyncio.to_thread(store.started.wait)
        # the load has read its first chunk: write new rows, re-group one, remove others
        new = unit(2, seed=9)
        vi.add("k", [5000, 5001], new, [ALICE, ALICE], [None, None])
        vi.set_meta(3, BOB, None)
        vi.remove([0, 150])  # one already read, one not yet
        vi.add("other", [7000], new[:1], [SHARED], [None])  # not loaded, not loading: dropped
        store.gate.set()
        ix = await opening
        assert ix is not None and (await vi.open("k")) is ix
        assert 5000 in ix and 5001 in ix and 0 not in ix and 150 not in ix and len(ix) == 250
        assert ix.search(new[0], 1, groups=[ALICE]).ids.tolist() == [5000]
        assert ix.search(vecs[3], 1, groups=[BOB]).ids.tolist() == [3]
        assert vi.get("other") is None

    asyncio.run(run())


def test_without_loader_keys_live_from_first_add() -> None:
    vi = VectorIndexes(DIM, budget_bytes=1)
    vi.add("a", [1, 2], unit(2), [SHARED, ALICE], [None, None])
    vi.add("b", [3], unit(1, seed=4), [SHARED], [None])
    assert len(vi) == 3 and vi.keys() == ["a", "b"]  # no loader: nothing evicted
    assert vi.set_meta(2, BOB, None) and not vi.set_meta(9, BOB, None)
    assert vi.remove([1, 3, 9]) == 2 and len(vi) == 1


def test_concurrent_opens_share_one_load() -> None:
    store = Store()
    _key_rows(store, "k", 150, 1, 0)
    store.gate = threading.Event()

    async def run() -> None:
        vi = VectorIndexes(loader=store.loader, ann_min_rows=0)
        first = asyncio.ensure_future(vi.open("k"))
        await asyncio.to_thread(store.started.wait)
        second = asyncio.ensure_future(vi.open("k"))
        await asyncio.sleep(0)
        assert vi.stats()["loading"] == 1
        store.gate.set()
        a, b = await asyncio.gather(first, second)
        assert a is b and a is not None and store.reads == ["k"] and vi.stats()["loads"] == 1

    asyncio.run(run())


def test_a_failing_loader_raises_and_the_next_open_retries() -> None:
    calls: list[str] = []

    def loader(key: str) -> Iterator[tuple[list[int], np.ndarray, list[str], list[float | None]]]:
        calls.append(key)
        if len(calls) == 1:
            raise OSError("the store is gone")
        yield [1], unit(1), [SHARED], [None]

    async def run() -> None:
        vi = VectorIndexes(loader=loader, ann_min_rows=0)
        with pytest.raises(OSError):
            await vi.open("k")
        assert vi.stats()["loading"] == 0
        ix = await vi.open("k")
        assert ix is not None and 1 in ix

    asyncio.run(run())


def test_a_load_written_past_its_journal_is_read_again() -> None:
    store = Store()
    _key_rows(store, "k", 150, 1, 0)
    store.gate = threading.Event()

    async def run() -> None:
        vi = VectorIndexes(loader=store.loader, ann_min_rows=0)
        vi.journal_max_bytes = 2000
        opening = asyncio.ensure_future(vi.open("k"))
        await asyncio.to_thread(store.started.wait)
        store.gate = None  # the re-read does not wait
        ids, vecs = list(range(9000, 9040)), unit(40, seed=7)
        store.put("k", ids, vecs, [SHARED] * 40)  # the store has them: the re-read sees them
        vi.add("k", ids, vecs, [SHARED] * 40, [None] * 40)  # more than the journal holds
        gate.set()
        ix = await opening
        assert ix is not None and store.reads == ["k", "k"] and len(ix) == 190 and 9039 in ix
        assert vi.get("k") is ix

    gate = store.gate
    asyncio.run(run())


def test_the_row_map_built_in_steps_is_the_map_built_at_once() -> None:
    """`row_map` (a saved index's ids -> slots, built a step at a time so that a load's thread
    lets the GIL go) over live slots with holes, in steps of 7 and of one call: the dict that
    `dict(zip(...))` of every live slot makes, slot for slot."""
    from host.search.index.rows import row_map

    ids = np.arange(1000, dtype=np.int64) * -64 - 1
    slots = np.flatnonzero(np.arange(1000) % 3 != 0)
    want = dict(zip(ids[slots].tolist(), slots.tolist(), strict=True))
    assert row_map(ids, slots, step=7) == want == row_map(ids, slots)
    assert row_map(ids, slots[:0]) == {}


def test_release_gives_back_whole_pages_only_and_trim_soon_runs_one_at_a_time() -> None:
    """`allocator.release` over bytes of an array: the whole pages inside read back as zeros
    (given back: written again only when used), the bytes of the partial pages at either end
    kept; `trim_soon` twice at once starts one trimming thread, which lets its turn go."""
    from host.search.index import allocator

    a = np.ones(1 << 20, dtype=np.uint8)
    base = a.ctypes.data
    start, end = base + 100, base + 300_000
    allocator.release(start, end)
    first = -(-start // allocator.PAGE) * allocator.PAGE - base
    last = end // allocator.PAGE * allocator.PAGE - base
    assert a[:first].all() and a[last:].all() and not a[first:last].any()
    allocator.trim_soon()
    allocator.trim_soon()
    trims = [t for t in threading.enumerate() if t.name == "a2e-trim"]
    assert len(trims) <= 1
    for t in trims:
        t.join(30)
    assert not allocator._TRIMMING.locked()
