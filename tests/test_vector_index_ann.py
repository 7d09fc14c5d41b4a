"""`AnnIndex` (faiss HNSW over 8-bit vectors): recall on clustered data, filters that stay
exact, removal, save/load, and `VectorIndexes` promoting, compacting and reusing saved files."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from host.search.index import ExactIndex, VectorIndexes, group_of
from host.search.index.ann import AnnIndex
from host.search.index.builds import build_ann
from host.search.index.graph import estimate_graph_nbytes
from host.search.index.persist import unread

DIM, N = 64, 12_000
ALICE, BOB, SHARED = group_of("episodic", "alice"), group_of("episodic", "bob"), group_of("semantic", "")
OPTS = {"exact_rows": 300, "exact_share": 0.02}  # small: the tests' rows take the graph paths


def clustered(n: int, seed: int, centres: int = 300) -> np.ndarray:
    rng = np.random.default_rng(1000)
    c = rng.standard_normal((centres, DIM)).astype(np.float32)
    c /= np.linalg.norm(c, axis=1, keepdims=True)
    r = np.random.default_rng(seed)
    v = c[r.integers(0, centres, n)] + 0.12 * r.standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


VECS = clustered(N, 1)
IDS = np.arange(100, 100 + N)
GROUPS = [ALICE if i % 100 == 0 else BOB if i % 3 == 0 else SHARED for i in range(N)]  # alice: 1 %
QUERIES = clustered(40, 2)


def chunks(ids: np.ndarray, vecs: np.ndarray, groups: list[str], size: int = 2500) -> Iterator[
        tuple[list[int], np.ndarray, list[str], list[float | None]]]:
    for i in range(0, len(ids), size):
        yield ids[i:i + size].tolist(), vecs[i:i + size], groups[i:i + size], [None] * len(ids[i:i + size])


@pytest.fixture(scope="module")
def built() -> tuple[AnnIndex, ExactIndex]:
    ann = build_ann(DIM, chunks(IDS, VECS, GROUPS), **OPTS)
    exact = ExactIndex(DIM)
    exact.add(IDS.tolist(), VECS, GROUPS, [None] * N)
    return ann, exact


def recall(ann: AnnIndex, exact: ExactIndex, **kw: object) -> float:
    got = 0
    for q in QUERIES:
        a = ann.search(q, 10, **kw)  # type: ignore[arg-type]
        e = exact.search(q, 10, **kw)  # type: ignore[arg-type]
        got += len(set(a.ids.tolist()) & set(e.ids.tolist()))
        assert a.allowed == e.allowed
    return got / (10 * len(QUERIES))


def exact_over_stored(ann: AnnIndex, q: np.ndarray, ids: np.ndarray, k: int) -> list[int]:
    sims = ann.similarity(q, ids.tolist())
    return ids[np.argsort(-sims, kind="stable")[:k]].tolist()


def test_recall_and_similarities(built: tuple[AnnIndex, ExactIndex]) -> None:
    ann, exact = built
    assert len(ann) == N and int(IDS[5]) in ann and ann.nbytes > N * DIM
    assert recall(ann, exact) >= 0.95
    q = QUERIES[0]
    hits = ann.search(q, 10)
    true = VECS[hits.ids - 100] @ q
    assert np.abs(hits.similarities - true).max() < 0.02  # from the 8-bit vectors
    assert hits.allowed == N and abs(hits.mean - float((VECS @ q).mean())) < 0.02
    assert np.allclose(ann.similarity(q, hits.ids.tolist()), hits.similarities, atol=1e-4)


def test_filter_to_one_percent_is_exact(built: tuple[AnnIndex, ExactIndex]) -> None:
    ann, exact = built
    alice = IDS[[i for i, g in enumerate(GROUPS) if g == ALICE]]
    only = IDS[7::100]
    for q in QUERIES[:10]:
        hits = ann.search(q, 10, groups=[ALICE])
        assert hits.ids.tolist() == exact_over_stored(ann, q, alice, 10)
        assert hits.allowed == alice.size
        hits = ann.search(q, 10, only=only)
        assert hits.ids.tolist() == exact_over_stored(ann, q, only, 10)


def test_wider_filters_never_leak(built: tuple[AnnIndex, ExactIndex]) -> None:
    ann, exact = built
    assert recall(ann, exact, groups=[BOB]) >= 0.9  # a third of the rows: the graph, filtered
    bob = {int(i) for i, g in zip(IDS, GROUPS, strict=True) if g == BOB}
    for q in QUERIES:
        assert set(ann.search(q, 50, groups=[BOB]).ids.tolist()) <= bob


def test_expiry_remove_replace() -> None:
    n = 3000
    ann = build_ann(DIM, chunks(IDS[:n], VECS[:n], GROUPS[:n]), **OPTS)
    q = VECS[10]
    assert ann.search(q, 1).ids.tolist() == [110]
    assert ann.set_meta(110, SHARED, 5.0)
    assert 110 not in ann.search(q, 20, now=6.0).ids.tolist()
    assert ann.search(q, 1, now=4.0).ids.tolist() == [110]
    assert ann.remove([110, 111, 999_999]) == 2 and len(ann) == n - 2 and ann.garbage == 2
    for kw in ({}, {"groups": [SHARED, BOB, ALICE]}):
        assert 110 not in ann.search(q, 50, **kw).ids.tolist()  # type: ignore[arg-type]
    ann.add([112], VECS[2000:2001], [SHARED], [None])  # 112 replaced by another vector
    assert ann.search(VECS[2000], 2).ids.tolist()[:2] in ([112, 2100], [2100, 112])
    assert 112 in ann and len(ann) == n - 2 and ann.garbage == 3
    assert sorted(r for c in ann.rows() for r in c[0]) == sorted(ann.ids().tolist())


def test_save_load_round_trip_and_corrupt_files(built: tuple[AnnIndex, ExactIndex], tmp_path: Path) -> None:
    ann, _ = built
    path = tmp_path / "k"
    ann.save(path, key="ns\x00space")
    back = AnnIndex.load(path, key="ns\x00space")
    assert len(back) == len(ann) and not back.dirty
    for q in QUERIES[:5]:
        a, b = ann.search(q, 10, groups=[BOB, SHARED]), back.search(q, 10, groups=[BOB, SHARED])
        assert a.ids.tolist() == b.ids.tolist()
    with pytest.raises(ValueError):
        AnnIndex.load(path, key="another")
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError):
        AnnIndex.load(path, key="ns\x00space")


class Store:
    def __init__(self) -> None:
        self.rows: dict[int, tuple[np.ndarray, str]] = {}
        self.reads = 0

    def loader(self, key: str) -> Iterator[tuple[list[int], np.ndarray, list[str], list[float | None]]]:
        self.reads += 1
        ids = np.array(sorted(self.rows), dtype=np.int64)
        if ids.size:
            vecs = np.stack([self.rows[int(i)][0] for i in ids])
            yield from chunks(ids, vecs, [self.rows[int(i)][1] for i in ids])


def test_reopen_uses_saved_index_and_rebuilds_a_corrupt_one(tmp_path: Path) -> None:
    store = Store()
    n = 4000
    for i in range(n):
        store.rows[int(IDS[i])] = (VECS[i], GROUPS[i])

    async def run() -> None:
        vi = VectorIndexes(loader=store.loader, ann_min_rows=1000, persist_dir=tmp_path,
                           ann_options=OPTS)
        ix = await vi.open("k")  # served exactly at once (codes), its graph built after
        assert isinstance(ix, AnnIndex) and not ix.built and vi.stats()["promoting"] == 1
        await vi.wait_idle()
        await vi.save_all()  # the promoted graph's save, done
        ix = vi.get("k")
        assert ix is not None and ix.kind == "ann" and vi.stats()["saved_hits"] == 0
        # the store changes while no host runs: a row gone, one re-grouped, one new
        del store.rows[int(IDS[0])]
        store.rows[int(IDS[1])] = (VECS[1], ALICE)
        store.rows[99_999] = (VECS[n], SHARED)
        vi2 = VectorIndexes(loader=store.loader, ann_min_rows=1000, persist_dir=tmp_path,
                            ann_options=OPTS)
        ix2 = await vi2.open("k")
        assert ix2 is not None and ix2.kind == "ann" and vi2.stats()["saved_hits"] == 1
        assert len(ix2) == n and int(IDS[0]) not in ix2 and 99_999 in ix2
        assert ix2.search(VECS[1], 1, groups=[ALICE]).ids.tolist() == [int(IDS[1])]
        assert ix2.search(VECS[n], 1).ids.tolist() == [99_999]
        assert await vi2.save_all() == 1  # changed since saved
        for f in tmp_path.iterdir():
            if not f.name.endswith(".npz"):
                f.write_bytes(b"not an index")
        vi3 = VectorIndexes(loader=store.loader, ann_min_rows=1000, persist_dir=tmp_path,
                            ann_options=OPTS)
        ix3 = await vi3.open("k")  # rebuilt from the store, no crash
        assert ix3 is not None and len(ix3) == n and vi3.stats()["saved_hits"] == 0
        assert ix3.search(VECS[n], 1).ids.tolist() == [99_999]
        await vi3.wait_idle()
        await vi3.save_all()
        for f in tmp_path.iterdir():  # saved again once rebuilt; now its rows file is garbage
            if f.name.endswith(".npz"):
                f.write_bytes(f.read_bytes()[:100])
        vi4 = VectorIndexes(loader=store.loader, ann_min_rows=1000, persist_dir=tmp_path,
                            ann_options=OPTS)
        ix4 = await vi4.open("k")
        assert ix4 is not None and len(ix4) == n and vi4.stats()["saved_hits"] == 0

    asyncio.run(run())


def test_unread_is_the_saved_ids_the_store_no_longer_has() -> None:
    # what a saved graph's reconcile removes: its ids that no batch of the store's rows held
    # (client spaces' row ids are negative and far apart), in the graph's order
    rng = np.random.default_rng(3)
    kept = -(rng.permutation(np.arange(1, 5001, dtype=np.int64)) * 64) - 1
    gone = set(kept[rng.choice(kept.size, 300, replace=False)].tolist())
    still = [i for i in kept.tolist() if i not in gone] + [-7, 5, 10**12]  # and rows it lacks
    rng.shuffle(still)
    read = [np.asarray(still[a: a + 700], dtype=np.int64) for a in range(0, len(still), 700)]
    assert unread(kept, read).tolist() == [i for i in kept.tolist() if i in gone]
    assert unread(kept, []).tolist() == kept.tolist()  # nothing read: every row goes
    assert unread(kept, [kept[::-1]]).size == 0
    assert unread(np.zeros(0, dtype=np.int64), read).size == 0
    assert unread(kept[:3], [np.asarray([kept[1]])]).tolist() == [kept[0], kept[2]]


def test_promotion_keeps_results_and_writes_during_the_build() -> None:
    async def run() -> None:
        vi = VectorIndexes(DIM, ann_min_rows=2000, ann_options=OPTS)
        vi.add("k", IDS[:1999].tolist(), VECS[:1999], GROUPS[:1999], [None] * 1999)
        assert vi.get("k").kind == "exact"  # type: ignore[union-attr]
        vi.add("k", IDS[1999:2500].tolist(), VECS[1999:2500], GROUPS[1999:2500], [None] * 501)
        assert vi.stats()["promoting"] == 1
        # written while the graph is built: served now by the exact index, replayed after
        vi.add("k", IDS[2500:3000].tolist(), VECS[2500:3000], GROUPS[2500:3000], [None] * 500)
        vi.remove([int(IDS[0])])
        vi.set_meta(int(IDS[1]), ALICE, None)
        assert vi.get("k").kind == "exact"  # type: ignore[union-attr]
        await vi.wait_idle()
        ix = vi.get("k")
        assert ix is not None and ix.kind == "ann" and len(ix) == 2999 and vi.stats()["promotions"] == 1
        assert int(IDS[0]) not in ix and int(IDS[2999]) in ix
        assert ix.search(VECS[1], 1, groups=[ALICE]).ids.tolist() == [int(IDS[1])]
        assert ix.search(VECS[2999], 1).ids.tolist() == [int(IDS[2999])]
        # removing most rows rebuilds the graph without its holes
        vi.remove(IDS[:1500].tolist())
        await vi.wait_idle()
        ix = vi.get("k")
        assert ix is not None and ix.kind == "ann" and ix.garbage == 0 and len(ix) == 1500  # type: ignore[union-attr]
        assert ix.search(VECS[2999], 1).ids.tolist() == [int(IDS[2999])]

    asyncio.run(run())


def test_an_evicted_graph_is_saved_and_reopened_from_its_file(tmp_path: Path) -> None:
    stores = {"a": Store(), "b": Store()}
    for j, store in enumerate(stores.values()):
        for i in range(j * 2000, j * 2000 + 2000):
            store.rows[int(IDS[i])] = (VECS[i], GROUPS[i])

    def loader(key: str) -> Iterator[tuple[list[int], np.ndarray, list[str], list[float | None]]]:
        return stores[key].loader(key)

    async def run() -> None:
        vi = VectorIndexes(loader=loader, ann_min_rows=1000, persist_dir=tmp_path,
                           ann_options=OPTS, budget_bytes=1)  # one key at a time
        await vi.open("a")
        await vi.wait_idle()
        a = vi.get("a")
        assert a is not None and a.kind == "ann"
        a.add([1], VECS[5000:5001], [SHARED], [None])  # changed since it was saved
        stores["a"].rows[1] = (VECS[5000], SHARED)
        assert await vi.open("b") is not None and vi.keys() == ["b"]
        await vi.wait_idle()
        await vi.save_all()  # waits for the evicted key's save too
        again = await vi.open("a")
        assert again is not None and again.kind == "ann" and vi.stats()["saved_hits"] == 1
        assert again.search(VECS[5000], 1).ids.tolist() == [1] and len(again) == 2001
        assert vi.stats()["evictions"] == 2 and vi.keys() == ["a"]

    asyncio.run(run())


def test_bench_index_reports_every_kind_on_a_tiny_run(tmp_path: Path) -> None:
    """scripts/bench/bench_index.py, tiny: every kind builds, searches under every filter, and the
    approximate index is saved, reloaded and checked (then reused from --keep)."""
    import subprocess
    import sys
    script = Path(__file__).resolve().parents[1] / "scripts" / "bench" / "bench_index.py"
    args = [sys.executable, str(script), "--n", "3000", "--queries", "5", "--keep", str(tmp_path),
            "--ann", '{"exact_rows": 100, "exact_share": 0.01}']
    for _ in range(2):
        out = subprocess.run(args, capture_output=True, text=True, timeout=300, check=True).stdout
        assert "failed" not in out and out.count("recall@10") == 12
        assert "changed: False, holes 0" in out
    assert any(f.name.startswith("ann-3000") for f in tmp_path.iterdir())


def test_a_big_first_open_is_served_coded_while_promoted_and_counts_its_build() -> None:
    """The first open of a key past `ann_min_rows` without a saved graph returns at once an
    index of every row's 8-bit codes, no graph yet (every row scored: its best k + margin
    hold the exact top k, as the callers' rescoring wants), builds the graph over those codes
    in the background (the budget counting the graph alone meanwhile: the codes once), the
    index the same object throughout; `drop` forgets a key."""
    from host.search.index import approximate
    from host.search.index.ann import BUILD_STEP
    from host.search.index.rows import ROW_DICT_BYTES

    store = Store()
    for i in range(3000):
        store.rows[int(IDS[i])] = (VECS[i], GROUPS[i])

    async def run() -> None:
        vi = VectorIndexes(loader=store.loader, ann_min_rows=1000, ann_options=OPTS)
        ix = await vi.open("k")
        assert isinstance(ix, AnnIndex) and not ix.built and approximate(ix) and len(ix) == 3000
        assert vi.stats()["promoting"] == 1
        exact = ExactIndex(DIM)
        exact.add(IDS[:3000].tolist(), VECS[:3000], GROUPS[:3000], [None] * 3000)
        for q in QUERIES[:5]:
            got, want = ix.search(q, 42), exact.search(q, 10)
            assert set(want.ids.tolist()) <= set(got.ids.tolist())
            assert np.allclose(ix.similarity(q, want.ids.tolist()), want.similarities, atol=1e-2)
            assert got.allowed == 3000
        # a quarter of float32's bytes for the vectors
        assert ix.codes().nbytes == len(ix) * DIM
        # the graph being built counted at its estimated size from the build's start, and
        # only the graph: the codes and the rows' metadata are the served index's, once
        await asyncio.sleep(0)
        assert "k" in vi.builds.promoting and ix.building is not None
        slack = max(2 * BUILD_STEP, 3000 // 16)
        extra = vi.nbytes - ix.nbytes
        assert extra == estimate_graph_nbytes(3000 + slack)
        assert extra < AnnIndex.estimate_nbytes(3000 + slack, DIM) - (3000 + slack) * (
            DIM + ROW_DICT_BYTES)
        assert vi.nbytes == vi._held
        await vi.wait_idle()
        ann = vi.get("k")
        assert ann is ix and ann.kind == "ann" and ann.built and vi.nbytes == ann.nbytes
        assert vi._held == vi.nbytes
        assert abs(ann.nbytes - AnnIndex.estimate_nbytes(3000, DIM)) < 0.3 * ann.nbytes
        assert recall(ann, exact) >= 0.95  # type: ignore[arg-type]
        # dropped: forgotten, its bytes released; the next open reads the store again
        assert vi.drop("k") and not vi.drop("k") and vi.keys() == [] and vi.nbytes == 0
        assert vi._held == 0
        again = await vi.open("k")
        assert again is not None and len(again) == 3000 and store.reads == 2
        # dropped during its promotion: the graph built meanwhile is not swapped in
        await asyncio.sleep(0)
        assert vi.drop("k") and vi.stats()["promoting"] == 0 and vi.nbytes == 0
        await vi.wait_idle()
        assert vi.get("k") is None and vi._held == 0

    asyncio.run(run())


def test_a_build_stops_at_its_next_step_once_told() -> None:
    """`build_ann(stop=...)` looks at `stop` every `BUILD_STEP` rows and raises
    `BuildAbandoned` once it says True (what a host's exit does to a build in progress)."""
    from host.search.index.ann import BUILD_STEP, BuildAbandoned

    looks = []

    def stop() -> bool:
        looks.append(1)
        return len(looks) > 2

    with pytest.raises(BuildAbandoned):
        build_ann(DIM, chunks(IDS, VECS, GROUPS), stop=stop, **OPTS)
    assert len(looks) == 3 and N > 3 * BUILD_STEP
    whole = build_ann(DIM, chunks(IDS[:3000], VECS[:3000], GROUPS[:3000]),
                           stop=lambda: False, **OPTS)
    assert len(whole) == 3000


def test_a_big_index_with_no_graph_is_scanned_by_faiss_and_answers_as_numpy_does() -> None:
    """An index of codes with no graph yet (12,000 rows, past `SCAN_ROWS`), searched whole,
    filtered to its groups, with holes, and while its graph is being built in place (the
    build's room and tail past its slots): each search returns numpy's exact top k over the
    decoded codes (the same ids, similarities within 1e-5), `allowed` exact, and `mean`/`std`
    those of the fixed sample (within 0.02 of every allowed row's)."""
    from host.search.index.ann import SCAN_ROWS
    from host.search.index.graph import GraphBuild

    exact = ExactIndex(DIM)
    exact.add(IDS.tolist(), VECS, GROUPS, [None] * N)
    ix = AnnIndex.coded_of(exact, **OPTS)
    ix.remove(IDS[::7].tolist())
    gone = set(IDS[::7].tolist())
    assert not ix.built and len(ix) > SCAN_ROWS

    def check() -> None:
        for q in QUERIES[:6]:
            for groups in (None, [BOB, SHARED]):
                got = ix.search(q, 10, groups)
                rows = [j for j in range(N) if IDS[j] not in gone
                        and (groups is None or GROUPS[j] in groups)]
                sims = ix.similarity(q, IDS[rows].tolist())
                want = IDS[rows][np.argsort(-sims, kind="stable")[:10]]
                assert got.ids.tolist() == want.tolist() and got.allowed == len(rows)
                assert np.allclose(got.similarities, np.sort(sims)[::-1][:10], atol=1e-5)
                assert abs(got.mean - sims.mean()) < 0.02 and abs(got.std - sims.std()) < 0.02

    check()
    build = GraphBuild(ix)
    build._begin(4096)  # codes sized past the slots: a room and faiss's tail
    assert build.cap > ix.slots and ix.building is build
    check()
    build._abandon()


def _old_scan(ix: AnnIndex, q: np.ndarray, k: int, slots: np.ndarray) -> tuple[list[int], np.ndarray]:
    """The scan as it was before it ran in steps: faiss's search of the whole storage in one
    call, the allowed slots as a bitmap (ids, similarities best first, ties by slot)."""
    import faiss

    mask = np.zeros(ix.slots, dtype=bool)
    mask[slots] = True
    bitmap = np.packbits(mask, bitorder="little")
    params = faiss.SearchParameters()
    params.sel = faiss.IDSelectorBitmap(bitmap.size, faiss.swig_ptr(bitmap))
    dist, found = ix.storage.search(q[None, :].astype(np.float32), min(k, slots.size),
                                    params=params)
    keep = found[0] >= 0
    picked, sims = found[0][keep], dist[0][keep]
    order = np.lexsort((picked, -sims))
    return ix.slots_meta(ix.slots)["ids"][picked[order]].tolist(), sims[order]


def test_a_scan_in_steps_answers_as_the_scan_in_one_call_did() -> None:
    """An index of codes with no graph (12,000 rows), scanned 1,024 rows a step
    (`scan_step_bytes`), whole, by groups, with holes and under an `only` filter, through
    `search`, `search_steps` run at once and `search_stepped` on a loop: the same ids and
    similarities as faiss's scan of the whole storage in one call (the scan before steps);
    and a scan interrupted by writes between its steps (rows added, the codes moved by their
    growth, a row removed) returns what the slots of its start held."""
    from host.search.index.ann import SCAN_ROWS, run_steps, search_stepped

    exact = ExactIndex(DIM)
    exact.add(IDS.tolist(), VECS, GROUPS, [None] * N)
    ix = AnnIndex.coded_of(exact, **OPTS)
    ix.remove(IDS[::7].tolist())
    ix.scan_step_bytes = 1024 * DIM  # 1,024 rows a step: 12 steps
    live = np.flatnonzero(ix.slots_meta(ix.slots)["live"])
    meta = ix.slots_meta(ix.slots)
    groups_of = np.array(GROUPS)
    only = IDS[:11_000]  # past SCAN_ROWS allowed: every case is a scan
    cases: list[tuple[list[str] | None, np.ndarray | None, np.ndarray]] = [
        (None, None, live),
        ([BOB, SHARED], None, live[np.isin(groups_of[live], [BOB, SHARED])]),
        (None, only, live[np.isin(meta["ids"][live], only)]),
    ]
    for q in QUERIES[:8]:
        for groups, ids, slots in cases:
            want_ids, want_sims = _old_scan(ix, q, 42, slots)
            for got in (ix.search(q, 42, groups, only=ids),
                        run_steps(ix.search_steps(q, 42, groups, only=ids)),
                        asyncio.run(search_stepped(ix, q, 42, groups, only=ids))):
                assert got.ids.tolist() == want_ids and got.allowed == slots.size > SCAN_ROWS
                assert np.array_equal(got.similarities, want_sims.astype(np.float32))
    q = QUERIES[0]
    want_ids, want_sims = _old_scan(ix, q, 10, live)
    steps = ix.search_steps(q, 10)
    next(steps)
    next(steps)
    before = ix.codes().__array_interface__["data"][0]
    more = clustered(20_000, 9)
    ix.add(list(range(10**6, 10**6 + 20_000)), more, [SHARED] * 20_000, [None] * 20_000)
    assert ix.codes().__array_interface__["data"][0] != before  # the codes moved
    ix.remove([want_ids[5]])  # in the steps already taken: still found
    got = run_steps(steps)
    assert got.ids.tolist() == want_ids and np.array_equal(got.similarities, want_sims)


def test_a_stepped_search_lets_the_loop_run_between_its_steps() -> None:
    """`search_stepped` of a 12-step scan: a task counting turns of the loop runs between
    the steps (at least 11 turns before the search returns); an index with a graph, or an
    exact one, answers in one turn (no turn between)."""
    from support.turns import turns_while

    from host.search.index.ann import search_stepped

    exact = ExactIndex(DIM)
    exact.add(IDS.tolist(), VECS, GROUPS, [None] * N)
    ix = AnnIndex.coded_of(exact, **OPTS)
    ix.scan_step_bytes = 1024 * DIM

    def turns(index: object) -> int:
        return asyncio.run(turns_while(search_stepped(index, QUERIES[0], 10)))[1]  # type: ignore[arg-type]

    assert turns(ix) >= 11
    assert turns(exact) == 0


def test_a_read_told_how_many_rows_come_sizes_their_codes_once() -> None:
    """`read_rows` told that 12,000 rows come (`expected`) reserves their codes and a build's
    room as soon as it turns coded (`reserve_codes`: the room is exactly what it asked, not a
    doubling's), answers as the same read without the count (same ids and similarities), and
    `VectorIndexes.expect` hands the count to a key's next load; a row added later lands in
    the room without moving the codes."""
    from host.search.index.loading import build_room, read_rows

    told = read_rows(chunks(IDS, VECS, GROUPS), "float32", 3000, 0, OPTS, expected=N)
    plain = read_rows(chunks(IDS, VECS, GROUPS), "float32", 3000, 0, OPTS)
    assert isinstance(told, AnnIndex) and isinstance(plain, AnnIndex)
    assert told.code_room == N + build_room(N) != plain.code_room
    for q in QUERIES[:5]:
        for groups in (None, [ALICE]):
            a, b = told.search(q, 10, groups), plain.search(q, 10, groups)
            assert a.ids.tolist() == b.ids.tolist()
            assert np.array_equal(a.similarities, b.similarities)
    where = told.codes().__array_interface__["data"][0]
    told.add([1], VECS[:1], [SHARED], [None])
    assert told.codes().__array_interface__["data"][0] == where

    async def opened() -> int:
        indexes = VectorIndexes(loader=lambda key: chunks(IDS, VECS, GROUPS), ann_min_rows=3000,
                                ann_options=OPTS)
        indexes.expect("k", N)
        ix = await indexes.open("k")
        assert isinstance(ix, AnnIndex) and not ix.built
        return ix.code_room

    assert asyncio.run(opened()) == N + build_room(N)
