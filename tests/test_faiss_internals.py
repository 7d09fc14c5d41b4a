"""What host/search/index/graph.py (`GraphBuild`) and ann.py rely on in faiss beyond its documented API, on a tiny real
index: the version pinned in pyproject.toml, the storage's codes as a std::vector numpy reads
and writes in place, `ntotal` steering where `IndexHNSW.add` copies the codes it adds, the
8-bit quantiser's trained ranges and its code formula, the HNSW arrays sized and reset by a
build in place, and the bitmap selector's bit order. A faiss release that changes one of
these fails here before it corrupts an index."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import faiss as _faiss
import numpy as np

from host.search.index.ann import BUILD_STEP, AnnIndex
from host.search.index.exact import ExactIndex
from host.search.index.graph import GraphBuild

faiss: Any = _faiss
DIM, M = 8, 4


def _unit(n: int, seed: int = 0) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _index() -> tuple[Any, Any]:
    index = faiss.IndexHNSWSQ(DIM, faiss.ScalarQuantizer.QT_8bit, M, faiss.METRIC_INNER_PRODUCT)
    return index, faiss.downcast_index(index.storage)


def _codes(storage: Any, rows: int) -> np.ndarray:
    cs = storage.code_size
    return np.asarray(faiss.rev_swig_ptr(storage.codes.data(), rows * cs)).reshape(rows, cs)


def _trained(index: Any, storage: Any) -> tuple[np.ndarray, np.ndarray]:
    """Trained as ann.py's `train` does: ranges [0, 1) per dimension, set after training."""
    vmin, vdiff = np.full(DIM, -1, np.float32), np.full(DIM, 2, np.float32)
    index.train(np.stack([vmin, vmin + vdiff]))
    faiss.copy_array_to_vector(np.concatenate([vmin, vdiff]), storage.sq.trained)
    return vmin, vdiff


def test_the_installed_faiss_is_the_minor_version_pyproject_pins() -> None:
    """The installed faiss is within the bounds pyproject.toml declares for faiss-cpu."""
    text = (Path(__file__).parent.parent / "pyproject.toml").read_text()
    deps = tomllib.loads(text)["project"]["dependencies"]
    spec = next(d for d in deps if d.startswith("faiss-cpu"))
    low, high = re.fullmatch(r"faiss-cpu>=(\d+\.\d+),<(\d+\.\d+)", spec).groups()  # type: ignore[union-attr]
    version = tuple(int(x) for x in faiss.__version__.split(".")[:2])
    assert tuple(map(int, low.split("."))) <= version < tuple(map(int, high.split(".")))


def test_the_storage_codes_are_a_vector_numpy_reads_and_writes_in_place() -> None:
    """The 8-bit storage is an `IndexScalarQuantizer` whose `codes` (one byte a dimension) are
    resized in place and aliased by `rev_swig_ptr`: codes written there are what it decodes;
    the trained ranges are [min..., width...] and a value codes as floor(255 (v - min) /
    width)."""
    index, storage = _index()
    assert isinstance(storage, faiss.IndexScalarQuantizer) and storage.code_size == DIM
    vmin, vdiff = _trained(index, storage)
    assert np.array_equal(faiss.vector_to_array(storage.sq.trained), np.concatenate([vmin, vdiff]))
    x = _unit(5)
    want = np.clip(np.floor(255 * (x - vmin) / vdiff), 0, 255).astype(np.uint8)
    assert np.array_equal(storage.sa_encode(x), want)
    storage.codes.resize(5 * DIM)
    _codes(storage, 5)[:] = want
    storage.ntotal = 5
    decoded = storage.sa_decode(_codes(storage, 5).copy())
    assert np.allclose(decoded, vmin + (want.astype(np.float32) + 0.5) * vdiff / 255, atol=1e-6)
    assert np.array_equal(storage.reconstruct_n(0, 5), decoded)
    ptr = int(storage.codes.data())
    storage.codes.resize(3 * DIM)  # a shrink keeps the allocation: the room stays
    assert int(storage.codes.data()) == ptr and storage.codes.size() == 3 * DIM


def test_an_add_writes_its_codes_at_the_storage_count_and_links_the_graph_count() -> None:
    """`IndexHNSW.add` copies the codes it adds at the storage's `ntotal` and makes vertices
    from the index's `ntotal` on (both counts the storage's after), scored from the codes at their own slots: with the count set
    past the rows (a build in place), the graph of rows already coded is built over those
    codes, and searching it finds each row."""
    n, tail = 40, 16
    index, storage = _index()
    _trained(index, storage)
    x = _unit(n, seed=1)
    storage.codes.resize((n + tail) * DIM)
    _codes(storage, n)[:] = storage.sa_encode(x)
    before = _codes(storage, n).copy()
    index.ntotal = 0
    for first in range(0, n, 10):  # ann.py's steps: the storage count at the tail's start
        storage.ntotal = n + tail - 10
        index.ntotal = first
        index.add(storage.sa_decode(_codes(storage, first + 10)[first:].copy()))
        assert index.ntotal == storage.ntotal == n + tail  # the graph's own count: `levels`
        assert int(index.hnsw.levels.size()) == first + 10
    assert np.array_equal(_codes(storage, n), before)  # the rows' codes untouched
    assert np.array_equal(_codes(storage, n + tail)[n + tail - 10:], before[30:])
    storage.ntotal = index.ntotal = n
    storage.codes.resize(n * DIM)
    _, found = index.search(x, 1)
    assert (found[:, 0] == np.arange(n)).mean() >= 0.9


def test_the_graph_arrays_a_build_sizes_and_resets() -> None:
    """`hnsw.nb_neighbors(0)` is 2M and level 1's M; `neighbors` and `levels` are vectors
    sized by `resize` and emptied by `reset`; `efConstruction`/`efSearch` are settable."""
    index, storage = _index()
    _trained(index, storage)
    hnsw = index.hnsw
    assert int(hnsw.nb_neighbors(0)) == 2 * M and int(hnsw.nb_neighbors(1)) == M
    hnsw.efConstruction, hnsw.efSearch = 40, 32
    assert (hnsw.efConstruction, hnsw.efSearch) == (40, 32)
    index.add(_unit(20))
    assert int(hnsw.levels.size()) == 20 and int(hnsw.neighbors.size()) > 0
    assert int(hnsw.offsets.size()) == 21
    hnsw.reset()
    assert int(hnsw.levels.size()) == 0 and int(hnsw.neighbors.size()) == 0
    hnsw.neighbors.resize(100)
    hnsw.neighbors.resize(0)
    assert int(hnsw.neighbors.size()) == 0


def test_a_bitmap_selector_reads_little_endian_bits_and_files_round_trip(tmp_path: Path) -> None:
    """`IDSelectorBitmap` over numpy's little-endian packed bits restricts a search to the
    set rows; a written index reads back as an `IndexHNSWSQ` of the same rows."""
    index, storage = _index()
    _trained(index, storage)
    x = _unit(30, seed=2)
    index.add(x)
    mask = np.zeros(30, dtype=bool)
    mask[[3, 17]] = True
    bitmap = np.packbits(mask, bitorder="little")
    params = faiss.SearchParametersHNSW(efSearch=64)
    params.sel = faiss.IDSelectorBitmap(30, faiss.swig_ptr(bitmap))
    _, found = index.search(x[:1], 5, params=params)
    assert sorted(int(i) for i in found[0] if i >= 0) == [3, 17]
    faiss.write_index(index, str(tmp_path / "ix"))
    back = faiss.read_index(str(tmp_path / "ix"))
    assert isinstance(back, faiss.IndexHNSWSQ) and back.ntotal == 30 and back.d == DIM
    assert np.array_equal(_codes(faiss.downcast_index(back.storage), 30), _codes(storage, 30))


def test_a_graph_build_in_place_relies_on_these_internals_and_keeps_the_codes() -> None:
    """`GraphBuild`, which relies on the internals above, builds the graph of a coded
    `AnnIndex` over its own codes in several steps: the codes are the same bytes after, the
    storage and the graph count the rows alone, and a search through the graph finds each
    row."""
    n = 2 * BUILD_STEP + 100
    x = _unit(n, seed=3)
    exact = ExactIndex(DIM)
    exact.add(list(range(n)), x, ["g"] * n, [None] * n)
    ann = AnnIndex.coded_of(exact, connectivity=M, exact_rows=0, exact_share=0.0)
    before = ann.codes().copy()
    GraphBuild(ann).build_now()
    assert ann.built and ann.building is None and np.array_equal(ann.codes(), before)
    assert ann.storage.ntotal == ann.graph.ntotal == n == int(ann.graph.hnsw.levels.size())
    found = [ann.search(x[j], 1).ids.tolist() == [j] for j in range(0, n, 7)]
    assert sum(found) >= 0.9 * len(found)


def test_the_storage_scan_scores_decoded_codes_within_the_selectors_bytes() -> None:
    """`IndexScalarQuantizer.search` (an index with no graph yet, `AnnIndex._scan`) scores a
    row as the inner product of the query and its decoded codes, and with `IDSelectorBitmap(
    nbytes, bits)` only the set bits of the first `nbytes` bytes: a storage counting rows past
    the bitmap (a build's room and tail) never returns them."""
    index, storage = _index()
    vmin, vdiff = _trained(index, storage)
    x = _unit(40, seed=4)
    storage.add(x)
    decoded = storage.sa_decode(_codes(storage, 40).copy())
    q = _unit(1, seed=5)
    mask = np.zeros(16, dtype=bool)  # the first 16 rows only: 2 bytes
    mask[[1, 5, 9, 12]] = True
    bitmap = np.packbits(mask, bitorder="little")
    params = faiss.SearchParameters()
    params.sel = faiss.IDSelectorBitmap(bitmap.size, faiss.swig_ptr(bitmap))
    dist, found = storage.search(q, 10, params=params)
    got = found[0][found[0] >= 0]
    assert sorted(got.tolist()) == [1, 5, 9, 12]
    assert np.allclose(dist[0][: got.size], decoded[got] @ q[0], atol=1e-5)
