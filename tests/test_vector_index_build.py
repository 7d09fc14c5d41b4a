"""Big keys while their graph is built: held as 8-bit codes (an `AnnIndex` without its graph
yet, every row scored, as a `CodedIndex` scores them), the graph built over those same codes in
place, a step at a time (writes meanwhile go to the index itself), one build at a time in the
process (smallest first, the others served meanwhile), the graph saved as soon as it is built
(a host killed afterwards reads it back)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from host.search.index import CodedIndex, ExactIndex, VectorIndexes, approximate, group_of
from host.search.index.ann import BUILD_STEP, AnnIndex
from host.search.index.builds import BUILDS, build_ann
from host.search.index.graph import GraphBuild

DIM = 32
ALICE, BOB = group_of("episodic", "alice"), group_of("semantic", "")
OPTS = {"exact_rows": 200, "exact_share": 0.02}
Chunk = tuple[list[int], np.ndarray, list[str], list[float | None]]


def clustered(n: int, seed: int) -> np.ndarray:
    c = np.random.default_rng(7).standard_normal((100, DIM)).astype(np.float32)
    r = np.random.default_rng(seed)
    v = c[r.integers(0, 100, n)] / np.sqrt(DIM) + 0.1 * r.standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


class Store:
    """Rows by key as a store holds them: id -> (vector, group)."""

    def __init__(self) -> None:
        self.rows: dict[str, dict[int, tuple[np.ndarray, str]]] = {}

    def fill(self, key: str, first: int, n: int, seed: int) -> None:
        vecs = clustered(n, seed)
        self.rows[key] = {first + j: (vecs[j], ALICE if j % 100 == 0 else BOB) for j in range(n)}

    def loader(self, key: str) -> Iterator[Chunk]:
        items = sorted(self.rows.get(key, {}).items())
        for s in range(0, len(items), 500):
            part = items[s: s + 500]
            yield ([i for i, _ in part], np.stack([r[0] for _, r in part]),
                   [r[1] for _, r in part], [None] * len(part))

    def exact(self, key: str) -> ExactIndex:
        index = ExactIndex(DIM)
        for chunk in self.loader(key):
            index.add(*chunk)
        return index


def coded(index: object) -> bool:
    """An index of codes only (its graph not built yet)."""
    return isinstance(index, AnnIndex) and not index.built


def holds_top(coded: object, exact: ExactIndex, q: np.ndarray, **kw: object) -> bool:
    """The exact top 10 is among the coded index's best 42 (what a caller rescores)."""
    got = coded.search(q, 42, **kw)  # type: ignore[attr-defined]
    want = exact.search(q, 10, **kw)  # type: ignore[arg-type]
    return set(want.ids.tolist()) <= set(got.ids.tolist()) and got.allowed == want.allowed


def wait_builds_idle() -> None:
    """Builds left by an earlier test (their loop closed) stop within a second or so."""
    deadline = time.monotonic() + 30
    while (BUILDS.running or BUILDS.waiting) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert BUILDS.running == 0 and BUILDS.waiting == 0


def test_coded_rows_keep_the_exact_top_k_within_the_rescored_margin() -> None:
    vecs = clustered(3000, 1)
    ids = list(range(10, 3010))
    groups = [ALICE if i % 50 == 0 else BOB for i in range(3000)]
    exact = ExactIndex(DIM)
    exact.add(ids, vecs, groups, [None] * 3000)
    coded = CodedIndex.of(exact)
    assert approximate(coded) and not approximate(exact) and len(coded) == 3000
    assert coded._m.dtype == np.uint8 and coded._m.nbytes * 4 <= exact._m.nbytes
    # written: a replaced vector, removals (the last row fills each hole), a group moved
    for index in (exact, coded):
        index.add([10], vecs[5:6], [ALICE], [None])
        index.remove(ids[100:400])
        index.set_meta(20, ALICE, None)
    assert len(coded) == len(exact) == 2700
    assert np.abs(coded.vectors([10, 2000, 3009]) - exact.vectors([10, 2000, 3009])).max() < 0.02
    for q in clustered(20, 2):
        assert holds_top(coded, exact, q)
        assert holds_top(coded, exact, q, groups=[ALICE])  # 2 %: every allowed row scored
        sims = coded.similarity(q, [10, 20, 5, 3009])
        assert np.isnan(sims[2]) and np.allclose(sims[[0, 1, 3]],
                                                 exact.similarity(q, [10, 20, 3009]), atol=1e-2)


def test_a_key_past_the_budget_loads_coded_even_below_ann_min_rows() -> None:
    store = Store()
    store.fill("k", 1, 2000, 3)

    async def run() -> None:
        small = VectorIndexes(loader=store.loader, ann_min_rows=0, budget_bytes=100_000)
        ix = await small.open("k")
        assert isinstance(ix, CodedIndex) and len(ix) == 2000 and small.stats()["promoting"] == 0
        assert holds_top(ix, store.exact("k"), clustered(1, 9)[0])
        roomy = VectorIndexes(loader=store.loader, ann_min_rows=0, budget_bytes=1 << 30)
        ix = await roomy.open("k")
        assert type(ix) is ExactIndex

    asyncio.run(run())


def test_builds_run_one_at_a_time_smallest_first_the_waiting_served_meanwhile() -> None:
    """Three keys due for a graph in two sets of indexes while another build holds the
    process's turn: all wait (served by their coded rows), then build one at a time, the
    smallest first; the budget counts only the build in progress."""
    wait_builds_idle()
    store = Store()
    store.fill("a", 1, 4000, 4)
    store.fill("b", 10_000, 3000, 5)
    store.fill("c", 20_000, 1500, 6)

    async def run() -> None:
        one = VectorIndexes(loader=store.loader, ann_min_rows=1000, ann_options=OPTS)
        two = VectorIndexes(loader=store.loader, ann_min_rows=1000, ann_options=OPTS)
        held = BUILDS.ask(0)  # another build runs
        await held.fut
        for vi, key in ((one, "a"), (two, "b"), (one, "c")):
            assert coded(await vi.open(key))
        await asyncio.sleep(0)
        assert one.stats()["builds_queued"] == 2 and two.stats()["builds_queued"] == 1
        assert one.stats()["promoting"] == 2 and BUILDS.waiting == 3
        assert one.nbytes == sum(ix.nbytes for ix in one._indexes.values())  # none built yet
        q = clustered(1, 11)[0]
        for vi, key in ((one, "a"), (two, "b"), (one, "c")):  # served while they wait
            assert holds_top(vi.get(key), store.exact(key), q)
        BUILDS.release()
        order: list[str] = []
        while one._tasks or two._tasks:
            building = [k for vi in (one, two) for k in vi.builds.promoting]
            assert len(building) <= 1 and BUILDS.running <= 1
            if building and (not order or order[-1] != building[0]):
                order.append(building[0])
            await asyncio.sleep(0)
        assert order == ["c", "b", "a"]
        for vi, key in ((one, "a"), (two, "b"), (one, "c")):
            ix = vi.get(key)
            assert ix is not None and ix.kind == "ann" and len(ix) == len(store.rows[key])
        assert one.stats()["promotions"] == 2 and one.stats()["promoting"] == 0
        assert BUILDS.running == 0

    asyncio.run(run())


def test_writes_during_a_build_from_chunks_are_kept() -> None:
    """Rows added, replaced, removed and moved to another group while the key waits for its
    turn and while its graph is built from chunks (before and after the chunk that holds them
    is taken): the graph swapped in has every one of them."""
    wait_builds_idle()
    store = Store()
    store.fill("k", 1, 6000, 12)
    extra = clustered(302, 13)

    async def run() -> None:
        vi = VectorIndexes(loader=store.loader, ann_min_rows=1000, ann_options=OPTS)
        held = BUILDS.ask(0)
        await held.fut
        ix = await vi.open("k")
        assert coded(ix)
        vi.add("k", list(range(90_000, 90_100)), extra[:100], [BOB] * 100, [None] * 100)
        vi.remove(range(1, 51), key="k")
        BUILDS.release()
        while "k" not in vi.builds.promoting:
            await asyncio.sleep(0)
        # during the build: ids of the first chunk (maybe taken) and of the last (not yet)
        vi.remove([60, 5990], key="k")
        vi.add("k", [70, 5980], extra[100:102], [BOB, BOB], [None, None])
        vi.add("k", list(range(90_100, 90_300)), extra[102:302], [BOB] * 200, [None] * 200)
        vi.set_meta(80, ALICE, None, key="k")
        vi.set_meta(5970, ALICE, None, key="k")
        assert vi.get("k") is ix and coded(ix)  # served by its codes until the graph is built
        await vi.wait_idle()
        ann = vi.get("k")
        assert ann is ix and ann is not None and ann.kind == "ann" and ann.built  # type: ignore[union-attr]
        want = set(range(51, 6001)) - {60, 5990} | set(range(90_000, 90_300))
        assert set(ann.ids().tolist()) == want and len(ann) == len(want)
        alice = ann.search(extra[0], 500, groups=[ALICE]).ids.tolist()
        assert 80 in alice and 5970 in alice
        assert ann.search(extra[100], 1).ids.tolist() == [70]
        assert ann.search(extra[101], 1).ids.tolist() == [5980]

    asyncio.run(run())


def test_a_built_graph_is_saved_at_once_and_read_back_after_a_kill(tmp_path: Path) -> None:
    """With `persist_dir`, a graph is saved as soon as it is built (no eviction, no
    `save_all`): indexes opened afresh on the same folder (a host killed and started again)
    read it back, brought to the store's rows written since."""
    wait_builds_idle()
    store = Store()
    store.fill("k", 1, 3000, 14)

    async def run() -> None:
        vi = VectorIndexes(loader=store.loader, ann_min_rows=1000, persist_dir=tmp_path,
                           ann_options=OPTS)
        await vi.open("k")
        await vi.wait_idle()
        assert vi.get("k").kind == "ann"  # type: ignore[union-attr]
        assert any(f.name.endswith(".meta.npz") for f in tmp_path.iterdir())
        v = clustered(1, 15)
        vi.add("k", [50_000], v, [BOB], [None])  # after the save: only in the store
        store.rows["k"][50_000] = (v[0], BOB)
        again = VectorIndexes(loader=store.loader, ann_min_rows=1000, persist_dir=tmp_path,
                              ann_options=OPTS)
        ix = await again.open("k")
        assert ix is not None and ix.kind == "ann" and again.stats()["saved_hits"] == 1
        assert len(ix) == 3001 and ix.search(v[0], 1).ids.tolist() == [50_000]

    asyncio.run(run())


def test_a_build_whose_loop_is_gone_gives_its_turn_back() -> None:
    """A build in progress when its loop closes (a test's, a host's) stops and releases the
    process's turn, so later builds are not held."""
    wait_builds_idle()
    store = Store()
    store.fill("k", 1, 5000, 16)
    started = threading.Event()

    async def run() -> None:
        vi = VectorIndexes(loader=store.loader, ann_min_rows=1000,
                           ann_options={**OPTS, "ef_construction": 400})
        await vi.open("k")
        while "k" not in vi.builds.promoting:
            await asyncio.sleep(0)
        started.set()

    asyncio.run(run())  # returns without waiting for the build
    assert started.is_set()
    wait_builds_idle()


def old_load(store: Store, key: str, ann_min_rows: int) -> CodedIndex:
    """The coded rows a load served before graphs were built in place: an `ExactIndex` until
    `ann_min_rows` rows, then a `CodedIndex` of them, the rest of the rows added to it."""
    index: ExactIndex = ExactIndex(DIM)
    for chunk in store.loader(key):
        index.add(*chunk)
        if not isinstance(index, CodedIndex) and len(index) >= ann_min_rows:
            index = CodedIndex.of(index)
    assert isinstance(index, CodedIndex)
    return index


def same_hits(a: object, b: object) -> bool:
    x, y = a, b
    return (x.ids.tolist() == y.ids.tolist()  # type: ignore[attr-defined]
            and np.allclose(x.similarities, y.similarities, atol=1e-5)  # type: ignore[attr-defined]
            and abs(x.mean - y.mean) < 1e-5 and abs(x.std - y.std) < 1e-5  # type: ignore[attr-defined]
            and x.allowed == y.allowed)  # type: ignore[attr-defined]


def test_an_in_place_build_serves_the_coded_rows_and_ends_with_the_graph_of_before() -> None:
    """While a big key waits for its turn and while its graph is built over its codes, a
    search answers exactly what the `CodedIndex` a load made before answered (the same ids,
    similarities, mean, std and allowed rows); once built, the graph is the one a build from
    those coded rows in a graph of its own made (the same codes, the same top 10)."""
    wait_builds_idle()
    store = Store()
    store.fill("k", 1, 6000, 21)
    opts = {**OPTS, "ef_construction": 400}
    queries = clustered(8, 22)
    before = old_load(store, "k", 1000)
    filters: list[dict[str, object]] = [{}, {"groups": [ALICE]}, {"groups": [BOB]}]

    def serves_as_before(ix: object) -> bool:
        return all(same_hits(ix.search(q, 42, **kw), before.search(q, 42, **kw))  # type: ignore[attr-defined, arg-type]
                   for q in queries for kw in filters)

    async def run() -> None:
        vi = VectorIndexes(loader=store.loader, ann_min_rows=1000, ann_options=opts)
        held = BUILDS.ask(0)
        await held.fut
        ix = await vi.open("k")
        assert coded(ix) and serves_as_before(ix)  # waiting for its turn
        BUILDS.release()
        assert isinstance(ix, AnnIndex)
        while not 0 < ix._index.hnsw.levels.size() < len(ix):
            await asyncio.sleep(0)
        assert coded(ix) and serves_as_before(ix)  # its graph part built
        await vi.wait_idle()
        assert vi.get("k") is ix and ix.built and vi.stats()["promotions"] == 1
        graph = build_ann(DIM, before.rows(), threads=1, ranges=before.ranges,
                               rows_hint=len(before), **opts)
        assert np.array_equal(ix.codes(), graph.codes())
        assert ix.ids().tolist() == graph.ids().tolist()
        for q in queries:
            assert same_hits(ix.search(q, 10), graph.search(q, 10))

    asyncio.run(run())


def test_rows_past_a_builds_room_abandon_it_and_a_later_write_builds_again() -> None:
    """Rows added during an in-place build past the room it left: the codes are copied to a
    storage of their own (the build's thread may be in faiss over the old one) and the build
    is abandoned; every row is served meanwhile, the budget's sum stays the real one, and the
    next write queues the build again, which ends with every row in the graph."""
    wait_builds_idle()
    store = Store()
    store.fill("k", 1, 3000, 23)
    extra = clustered(2 * BUILD_STEP + 2, 24)
    new_ids = list(range(50_000, 50_000 + len(extra)))

    async def run() -> None:
        vi = VectorIndexes(loader=store.loader, ann_min_rows=1000,
                           ann_options={**OPTS, "ef_construction": 400})
        ix = await vi.open("k")
        assert isinstance(ix, AnnIndex)
        while ix.building is None:
            await asyncio.sleep(0)
        build = ix.building
        vi.add("k", new_ids[:-1], extra[:-1], [BOB] * (len(extra) - 1), [None] * (len(extra) - 1))
        assert build is not None and ix.building is None and coded(ix)  # detached
        assert len(ix) == 3000 + len(extra) - 1
        for j in (0, len(extra) // 2, len(extra) - 2):
            assert ix.search(extra[j], 1).ids.tolist() == [new_ids[j]]
        assert vi._held == vi.nbytes
        await vi.wait_idle()
        assert coded(ix) and "k" not in vi.builds.promoting and BUILDS.running == 0
        assert vi._held == vi.nbytes and vi.stats()["promotions"] == 0
        vi.add("k", new_ids[-1:], extra[-1:], [BOB], [None])  # queued again
        await vi.wait_idle()
        assert vi.get("k") is ix and ix.built and vi.stats()["promotions"] == 1
        assert len(ix) == 3000 + len(extra) and ix._index.hnsw.levels.size() == len(ix)
        assert vi._held == vi.nbytes
        for j in (0, len(extra) - 1):
            assert ix.search(extra[j], 1).ids.tolist() == [new_ids[j]]

    asyncio.run(run())


def test_a_build_in_place_fits_its_room_in_the_codes_capacity_rather_than_copy_them() -> None:
    """A `GraphBuild` sizes the codes for the build within the room they already have (a
    smaller room for rows added meanwhile rather than a reallocation: at a million rows, a
    second copy of the codes while they serve); the graph built over them answers."""
    vecs = clustered(4196, 25)
    ids = list(range(1, 4197))
    exact = ExactIndex(DIM)
    exact.add(ids[:4096], vecs[:4096], [BOB] * 4096, [None] * 4096)
    ix = AnnIndex.coded_of(exact, **OPTS)
    ix.add(ids[4096:], vecs[4096:], [BOB] * 100, [None] * 100)  # the codes reallocated: 8,192 rows
    codes = ix._storage.codes
    before = int(codes.data())
    build = GraphBuild(ix)
    build._begin(5000)  # wanted: more room than there is
    assert int(ix._storage.codes.data()) == before  # not reallocated, so not copied
    assert build.cap == 8192 and build.room - len(ix) >= 2 * BUILD_STEP
    assert ix.building is build
    build._reserve_links()
    while (step := build._next_step()) is not None:
        build._step(*step)
    build._end(saved=False)
    assert ix.built and int(ix._storage.codes.data()) == before
    for j in (0, 2000, 4195):
        assert ix.search(vecs[j], 1).ids.tolist() == [ids[j]]


def test_a_saved_graph_far_behind_its_rows_is_read_afresh(tmp_path: Path) -> None:
    """A saved graph whose key has since grown by more than a quarter of it (and at least
    `COMPACT_MIN` rows) is not brought up to date row by row into the graph (900,000 rows into
    a graph of 100,000 held a query past its deadline): the rows are read afresh, served
    exactly at once, the graph built over them in the background; a graph a few rows behind
    is still read back."""
    wait_builds_idle()
    store = Store()
    store.fill("k", 1, 2000, 26)

    async def run() -> None:
        vi = VectorIndexes(loader=store.loader, ann_min_rows=1000, persist_dir=tmp_path,
                           ann_options=OPTS)
        await vi.open("k")
        await vi.wait_idle()
        assert vi.get("k").built  # type: ignore[union-attr]
        more = clustered(1500, 27)
        for j in range(1500):
            store.rows["k"][10_000 + j] = (more[j], BOB)
        again = VectorIndexes(loader=store.loader, ann_min_rows=1000, persist_dir=tmp_path,
                              ann_options=OPTS)
        ix = await again.open("k")
        assert coded(ix) and again.stats()["saved_hits"] == 0 and len(ix) == 3500  # type: ignore[arg-type]
        assert ix is not None and ix.search(more[7], 1).ids.tolist() == [10_007]
        await again.wait_idle()
        assert ix.built and len(ix) == 3500  # type: ignore[union-attr]
        store.rows["k"][20_000] = (more[0], ALICE)  # a row behind: the graph read back
        third = VectorIndexes(loader=store.loader, ann_min_rows=1000, persist_dir=tmp_path,
                              ann_options=OPTS)
        ix3 = await third.open("k")
        assert ix3 is not None and ix3.built and third.stats()["saved_hits"] == 1  # type: ignore[union-attr]
        assert len(ix3) == 3501

    asyncio.run(run())
