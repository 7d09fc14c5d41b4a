"""`AnnIndex`: approximate nearest neighbours for a big key, on faiss (HNSW over 8-bit vectors).

Why faiss's `IndexHNSWSQ` (scripts/bench/bench_index.py, docs/benchmarks.md "Vector index"): its 8-bit
scalar quantiser, trained per dimension, keeps recall@10 ~0.99 at 384 bytes a vector (usearch's
i8 topped out near 0.90 on the same data, hnswlib keeps float32); its codes are one contiguous
array the index reads without a copy, so the exact paths below score any subset of rows in
numpy; and its HNSW search takes a bitmap of allowed rows, so filters apply inside the graph.

How a search stays exact where it must:
- The allowed rows (groups, expiry, `only`) are computed first, as in `ExactIndex`. When they
  are few (`exact_rows`, or a share below `exact_share` of the rows), they are scored exactly
  from their codes: a filter to 1 % of the rows returns its exact top k.
- Otherwise the graph is searched with the allowed rows as a bitmap (no bitmap when every row
  is allowed), `ef_search` scaled up by how small the allowed share is (bounded by
  `max_ef`); fewer than k results fall back to exact scoring. What the caller may not read
  is never returned either way.
- Similarities are those of the stored 8-bit vectors (decoded: per-dimension error <= 1/510 of
  its range, ~1e-3 on a similarity).
- `Hits.mean`/`std`: the query's similarity over the allowed rows when numpy scored them all;
  else (through the graph, or faiss's scan of a big index with no graph yet) over a fixed
  sample of `sample_rows` of them (evenly spaced over the allowed slots, the same rows for every
  query of an unchanged index). `allowed` is always exact.

Removal: faiss's HNSW cannot delete, so a removed (or replaced) row's slot becomes a hole:
never returned (the bitmap excludes it), still a waypoint of the graph. `garbage` says how
many; `VectorIndexes` rebuilds the index when they pass a share (`compact_share`).

Coded first, graph after (`coded_of`): an index can hold its rows as codes with no graph yet
(`built` False), searched exactly (every allowed row scored, as a `CodedIndex`); its graph is
then built over those same codes, in place, by a `host.search.index.graph.GraphBuild`, which
the index knows only as `building` (the room its codes have for rows added meanwhile, and
`detach` for an add past it).

Saved as two files (`host.search.index.files`): `load` refuses anything that does not match.

Not thread-safe: the owner serialises writes and reads (the host calls it on the event loop).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Generator, Iterable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any, Protocol, TypedDict, TypeVar, Unpack, cast

import faiss as _faiss
import numpy as np

from host.search.index import files
from host.search.index.allocator import release
from host.search.index.exact import CHUNK, CodedIndex, ExactIndex, code_ranges, dots
from host.search.index.rows import (
    ROW_DICT_BYTES,
    Chunk,
    Rows,
    checked,
    chunk_of,
    no_hits,
    row_map,
)
from host.store.records import Hits

faiss: Any = _faiss  # its bundled type stubs miss much of the API used here
TRAIN_ROWS = 100_000  # rows the 8-bit quantiser learns each dimension's range from
BUILD_STEP = 1024  # rows a build adds to the graph between two looks at its `stop`
TAIL = BUILD_STEP  # rows past a build's room where faiss writes its copy of a step's codes


# At most this many rows are added to a graph on the calling thread alone: OpenMP's threads
# wait at their barriers for one the other work on a shared 2-core machine took the core of
# (64 rows into a small graph took 31-40 ms on 2 threads, 4.5-6.9 ms on 1, at load ~2.2;
# scripts/bench/bench_loop_steps.py); a bigger add (a build's step) takes every thread set.
SMALL_ADD = 256
# past this many allowed rows, an index with no graph yet is searched by faiss's scan (`_scan`)
SCAN_ROWS = 8192
# the codes one step of that scan reads (`_scan_steps`): between two steps the loop runs
# (`search_stepped`); 32 MiB is ~87,000 rows of 384 dimensions, ~3 ms on one core (a million
# rows' scan in one call held the loop ~25 ms alone, and more beside a build)
SCAN_STEP_BYTES = 32 << 20


@contextmanager
def omp_threads(threads: int) -> Iterator[None]:
    """faiss's OpenMP threads set to `threads` for the calling thread (0: left as they are),
    restored after."""
    before = faiss.omp_get_max_threads()
    if threads:
        faiss.omp_set_num_threads(threads)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(before)


def _add_to_graph(index: Any, vecs: np.ndarray) -> None:
    with omp_threads(1 if len(vecs) <= SMALL_ADD else 0):
        index.add(vecs)


T = TypeVar("T")


def run_steps(steps: Generator[None, None, T]) -> T:
    """What a generator of steps returns, every step taken at once."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


class Searched(Protocol):
    def search_steps(self, query: np.ndarray, k: int, groups: Collection[str] | None = None,
                     now: float | None = None, only: np.ndarray | None = None
                     ) -> Generator[None, None, Hits]: ...


async def search_stepped(index: Searched, query: np.ndarray, k: int,
                         groups: Collection[str] | None = None, now: float | None = None,
                         only: np.ndarray | None = None) -> Hits:
    """(On the loop.) `index.search(...)`, in the steps of its `search_steps` (an `AnnIndex`
    has steps; an `ExactIndex` one), the loop running between two: a big key's exact scan
    while its graph is built (a million rows of 384 dimensions: ~25 ms in one call) holds the
    loop a step at a time (`SCAN_STEP_BYTES`)."""
    gen = index.search_steps(query, k, groups, now, only)
    while True:
        try:
            next(gen)
        except StopIteration as done:
            return cast(Hits, done.value)
        await asyncio.sleep(0)


class AnnOptions(TypedDict, total=False):
    """`AnnIndex`'s keyword arguments (see there)."""

    connectivity: int
    ef_construction: int
    ef_search: int
    exact_rows: int
    exact_share: float
    max_ef: int
    sample_rows: int


class BuildAbandoned(Exception):
    """A build stopped by its `stop` (the process exits)."""


class Building(Protocol):
    """A graph being built in place over an index's codes (`GraphBuild`), as the index sees it."""

    cap: int  # rows the codes are sized to for the build (its room and faiss's tail)

    @property
    def room(self) -> int:
        """Rows the index may hold before an add must `detach` (the codes are not moved)."""

    def detach(self) -> None:
        """The build abandoned: the codes copied to a storage of their own (`own_codes`)."""


class AnnIndex(Rows):
    """The vectors of one big key: approximate search, exact under small filters.

    `connectivity`: HNSW's M (neighbours a node); `ef_construction`, `ef_search`: the graph's
    search depths when adding and querying; `exact_rows`/`exact_share`: at most this many
    allowed rows (or this share of the rows) are scored exactly; `max_ef`: the bound on the
    depth a filtered search scales up to; `sample_rows`: rows `mean`/`std` come from when the
    search did not score every allowed row.
    """

    kind = "ann"

    def __init__(
        self, dim: int, connectivity: int = 16, ef_construction: int = 128,
        ef_search: int = 256, exact_rows: int = 20_000, exact_share: float = 0.05,
        max_ef: int = 1024, sample_rows: int = 2048,
    ) -> None:
        if dim <= 0:
            raise ValueError("dim must be positive")
        super().__init__(1024)
        self.dim = dim
        self.options = {"connectivity": connectivity, "ef_construction": ef_construction,
                        "ef_search": ef_search, "exact_rows": exact_rows,
                        "exact_share": exact_share, "max_ef": max_ef,
                        "sample_rows": sample_rows}
        self.ef_search, self.exact_rows, self.exact_share = ef_search, exact_rows, exact_share
        self.max_ef, self.sample_rows = max_ef, sample_rows
        self.scan_step_bytes = SCAN_STEP_BYTES  # codes a step of a scan reads (`_scan_steps`)
        self._index, self._storage = self._faiss_index()
        self._vmin = self._vstep = np.zeros(dim, dtype=np.float32)
        self._dead = 0
        self._built = True  # the graph holds every slot (False: codes only, searched exactly)
        self.building: Building | None = None  # a graph being built in place over the codes
        # bytes the storage's codes have room for without reallocating, as far as known (a
        # build in place fits its room there rather than copy the codes while they serve)
        self._code_room = 0
        self.dirty = True  # changed since saved (or never saved)
        self.changed = False  # changed by `sync` (a saved index brought up to date)

    def _faiss_index(self) -> tuple[Any, Any]:
        index = faiss.IndexHNSWSQ(self.dim, faiss.ScalarQuantizer.QT_8bit,
                                  int(self.options["connectivity"]), faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = int(self.options["ef_construction"])
        return index, faiss.downcast_index(index.storage)

    # --- building ---

    @classmethod
    def coded_of(cls, source: Rows, **options: Unpack[AnnOptions]) -> AnnIndex:
        """An index of the rows of `source` (an `ExactIndex`, or a `CodedIndex`: its ranges
        and codes kept) as codes, no graph yet (`built` False: searched exactly until
        a `GraphBuild` makes one); `source` is left as it was. The ranges of an
        `ExactIndex`'s rows are learnt as `CodedIndex.of` learns them (the same codes)."""
        assert isinstance(source, ExactIndex)
        n = source.slots
        index = cls(source.dim, **options)
        index._built = False
        if isinstance(source, CodedIndex):
            index.train(np.zeros((0, source.dim), np.float32), source.ranges)
            cs = index._storage.code_size
            index._grown(lambda: index._storage.codes.resize(n * cs))
            index.codes(n)[:] = source.matrix
            index._storage.ntotal = n
        else:
            m = source.matrix
            sample = m[np.linspace(0, n - 1, min(n, TRAIN_ROWS)).astype(np.int64)] if n else m
            index.train(np.zeros((0, source.dim), np.float32),
                        code_ranges(sample.astype(np.float32)))
            for i in range(0, n, CHUNK):
                part = np.ascontiguousarray(m[i: i + CHUNK], dtype=np.float32)
                index._grown(partial(index._storage.add, part))
        index._copy_slots(source)
        return index

    def _grown(self, grow: Callable[[], object]) -> None:
        """`grow()` (a resize of the codes, an add to the storage), the room of the codes
        followed: a std::vector reallocated from `s` bytes to `s'` holds `max(2s, s')`
        (libstdc++'s rule; elsewhere a build's resize may copy the codes once, no more)."""
        codes = self._storage.codes
        size, ptr = int(codes.size()), int(codes.data() or 0)
        grow()
        codes = self._storage.codes
        now = int(codes.size())
        if int(codes.data() or 0) != ptr:
            self._code_room = max(2 * size, now)
        elif now > self._code_room:
            self._code_room = now

    @property
    def built(self) -> bool:
        """True when the graph holds every row (else searches score every allowed row)."""
        return self._built

    @built.setter
    def built(self, built: bool) -> None:
        self._built = built

    # --- what a graph built in place over the codes uses (`GraphBuild`) ---

    @property
    def graph(self) -> Any:
        """The faiss index (`IndexHNSWSQ`): the graph and, as its storage, the codes."""
        return self._index

    @property
    def storage(self) -> Any:
        """The faiss storage of the codes (`IndexScalarQuantizer`)."""
        return self._storage

    @property
    def code_room(self) -> int:
        """Rows the codes have room for without reallocating, as far as known."""
        return self._code_room // self._storage.code_size

    @property
    def ranges(self) -> tuple[np.ndarray, np.ndarray]:
        """Each dimension's (min, width) of the 8-bit codes, as `train` takes them."""
        return self._vmin, self._vstep * np.float32(255.0)

    def resize_codes(self, rows: int) -> None:
        """The codes sized to `rows` rows (beyond the slots: zeroed), their room followed."""
        self._grown(lambda: self._storage.codes.resize(rows * self._storage.code_size))

    def reserve_codes(self, rows: int) -> None:
        """Room for `rows` rows' codes, made now (a read told how many rows come: the codes
        then never move as they grow, where each doubling copied them, the old array beside
        the new: ~370 MB of a million rows' peak). The room is zeroed by the vector's resize,
        then its pages are given back (`builds.release`): they count in the RSS only once rows
        are written there, so a count too high costs address space, not memory."""
        cs = self._storage.code_size
        used = int(self._storage.codes.size())
        if rows * cs <= max(self._code_room, used):
            return
        self.resize_codes(rows)
        self._storage.codes.resize(used)  # the capacity stays
        start = int(self._storage.codes.data() or 0)
        if start:
            release(start + used, start + rows * cs)

    def fit(self, rows: int) -> None:
        """The storage's count, the graph's and the codes' size set to `rows` rows (the codes
        shrunk: no byte moves, the room beyond stays allocated)."""
        self._storage.ntotal = self._index.ntotal = rows
        self._storage.codes.resize(rows * self._storage.code_size)

    def own_codes(self) -> None:
        """The rows' codes copied to a storage (and an empty graph) of their own: the old one
        is left to whoever still reads it (a build's thread in faiss)."""
        n, cs = self._n, self._storage.code_size
        codes = self.codes(n)
        index, storage = self._faiss_index()
        index.train(np.stack([self._vmin, self._vmin + self._vstep * np.float32(255.0)]))
        faiss.copy_array_to_vector(faiss.vector_to_array(self._storage.sq.trained),
                                   storage.sq.trained)
        storage.codes.resize(n * cs)
        np.asarray(faiss.rev_swig_ptr(storage.codes.data(), n * cs)).reshape(n, cs)[:] = codes
        storage.ntotal = n
        self._index, self._storage = index, storage
        self._code_room = n * cs

    def slots_meta(self, n: int, copy: bool = False) -> dict[str, Any]:
        """The first `n` slots' metadata as a saved file holds it (`write`): views, or copies
        (a save in a thread while the index changes)."""
        names = [g for g, _ in sorted(self._group_codes.items(), key=lambda gc: gc[1])]
        arrays: dict[str, np.ndarray] = {"ids": self._ids[:n], "gcodes": self._groups[:n],
                  "expires": self._expires[:n], "live": self._live[:n]}
        if copy:
            arrays = {k: v.copy() for k, v in arrays.items()}
        return {"n": n, "groups": names, **arrays}

    def reserve(self, rows: int) -> None:
        """Room for `rows` rows before the first `add` (faiss's vectors are sized up and back
        down: their capacity stays; the neighbour lists for level 0's 2M links a row and
        the upper levels' M / 8, about what they take)."""
        if self._index.ntotal:
            return
        hnsw = self._index.hnsw
        links = rows * (int(hnsw.nb_neighbors(0)) + int(hnsw.nb_neighbors(1)) // 8)
        for vec, size in ((self._storage.codes, rows * self._storage.code_size),
                          (self._index.hnsw.neighbors, links)):
            before = vec.size()
            vec.resize(size)
            vec.resize(before)
        self._grow_meta(rows)

    def train(self, sample: np.ndarray,
              ranges: tuple[np.ndarray, np.ndarray] | None = None) -> None:
        """Learn each dimension's range from `sample` (unit rows), or take `ranges` (each
        dimension's min and width, a `CodedIndex`'s: then its codes are the same here);
        before the first `add`."""
        if self._index.is_trained:
            raise ValueError("the index is already trained")
        sample = np.ascontiguousarray(sample, dtype=np.float32).reshape(-1, self.dim)
        if ranges is None:
            vmin, vdiff = code_ranges(sample)
        else:
            vmin, vdiff = (np.asarray(r, dtype=np.float32).reshape(self.dim) for r in ranges)
        self._index.train(np.stack([vmin, vmin + vdiff]))  # then its ranges set as learnt here
        faiss.copy_array_to_vector(np.concatenate([vmin, vdiff]).astype(np.float32),
                                   self._storage.sq.trained)
        self._vmin, self._vstep = vmin, (vdiff / np.float32(255.0)).astype(np.float32)

    @property
    def holes(self) -> bool:  # type: ignore[override]
        return self._dead > 0

    @property
    def garbage(self) -> int:
        """Slots of removed or replaced rows still in the graph."""
        return self._dead

    @property
    def nbytes(self) -> int:
        """Bytes held: codes, graph (neighbour lists, levels, offsets) and rows' metadata.
        While a graph is built in place: the codes at the size of the build (its room and
        tail), not the graph (its builder counts it, see `estimate_graph_nbytes`)."""
        codes = (self.building.cap if self.building is not None else self._n) \
            * self._storage.code_size
        if not self._built:
            return int(codes + self.meta_nbytes())
        h = self._index.hnsw
        return int(codes + h.neighbors.size() * 4 + h.levels.size() * 4
                   + h.offsets.size() * 8 + self.meta_nbytes())

    @staticmethod
    def estimate_nbytes(rows: int, dim: int, connectivity: int = 16) -> int:
        """About the `nbytes` of an index of `rows` rows (what a build will hold at its end):
        codes, ~10 x M neighbour bytes a row (level 0's 2M links of 4 bytes, the upper levels'
        and the lists' slack, as measured at 1M x 384), levels and offsets, the rows' metadata."""
        return int(rows * (dim + 10 * connectivity + 12 + 21 + ROW_DICT_BYTES))

    def codes(self, rows: int | None = None) -> np.ndarray:
        """A view of the codes of the first `rows` slots (default: every slot)."""
        n = self._n if rows is None else rows
        if n == 0:
            return np.zeros((0, self.dim), dtype=np.uint8)
        ptr = faiss.rev_swig_ptr(self._storage.codes.data(), n * self._storage.code_size)
        return np.asarray(ptr).reshape(n, self._storage.code_size)

    # --- writing ---

    def add(
        self, ids: Iterable[int], vectors: np.ndarray, groups: Iterable[str],
        expires: Iterable[float | None],
    ) -> None:
        """Add rows, or replace the rows of ids already present (the old slot becomes a
        hole). `vectors` must be unit rows `(n, dim)`."""
        ids, vecs, groups, expires = checked(self.dim, ids, vectors, groups, expires)
        if not ids:
            return
        last: dict[int, int] = {i: j for j, i in enumerate(ids)}  # an id twice: the last wins
        if len(last) < len(ids):
            keep = sorted(last.values())
            ids, vecs = [ids[j] for j in keep], vecs[keep]
            groups, expires = [groups[j] for j in keep], [expires[j] for j in keep]
        if not self._index.is_trained:
            self.train(vecs)
        self._drop(ids)
        first = self._n
        self._grow_meta(first + len(ids))
        if self._built:
            _add_to_graph(self._index, vecs)
        elif self.building is not None and first + len(ids) <= self.building.room:
            self.codes(first + len(ids))[first:] = self._storage.sa_encode(vecs)
        else:
            if self.building is not None:  # past the build's room: it is abandoned
                self.building.detach()
            self._grown(lambda: self._storage.add(vecs))
        for j, (i, group, exp) in enumerate(zip(ids, groups, expires, strict=True)):
            self._set_slot(first + j, i, group, exp)
        self._n = first + len(ids)
        self.dirty = True

    def _drop(self, ids: Iterable[int]) -> int:
        dropped = 0
        for i in ids:
            slot = self._row.pop(i, None)
            if slot is not None:
                self._clear_slot(slot)
                dropped += 1
        self._dead += dropped
        return dropped

    def remove(self, ids: Iterable[int]) -> int:
        """Remove the rows of `ids` (absent ids are ignored); the number removed."""
        removed = self._drop(ids)
        self.dirty = self.dirty or removed > 0
        return removed

    def set_meta(self, entry_id: int, group: str, expires: float | None) -> bool:
        """Update the group and expiry of a row; False when `entry_id` has no row."""
        ok = super().set_meta(entry_id, group, expires)
        self.dirty = self.dirty or ok
        return ok

    # --- reading ---

    def _decode(self, slots: np.ndarray) -> np.ndarray:
        return self.decode_rows(self.codes()[slots])

    def decode_rows(self, codes: np.ndarray) -> np.ndarray:
        return self._vmin + (codes.astype(np.float32) + 0.5) * self._vstep

    def _scores(self, slots: np.ndarray | None, q: np.ndarray) -> np.ndarray:
        """Similarity of `q` to the decoded vectors of `slots` (None: every slot)."""
        qs = q * self._vstep
        base = float(q @ self._vmin + 0.5 * qs.sum())
        return dots(self.codes(), self._n, slots, qs) + base

    def search(
        self, query: np.ndarray, k: int, groups: Collection[str] | None = None,
        now: float | None = None, only: np.ndarray | None = None,
    ) -> Hits:
        """The `k` rows most similar to the unit vector `query` among the allowed rows (see
        `ExactIndex.search`; the module docstring says when it is approximate)."""
        live = len(self._row)
        if live == 0 or k <= 0:
            return no_hits()
        q = np.ascontiguousarray(query, dtype=np.float32).reshape(-1)
        slots, mask = self.allowed_mask(groups, now, only)
        allowed = live if slots is None else int(slots.size)
        if allowed == 0:
            return no_hits()
        if not self._built or allowed <= max(self.exact_rows, k, self.exact_share * live):
            return self._exact(q, k, slots)  # (with no graph: as `search_steps` at once)
        share = allowed / live
        ef = int(min(self.max_ef, max(self.ef_search, 2 * k, self.ef_search / share)))
        params = faiss.SearchParametersHNSW(efSearch=ef)
        bitmap = None
        if slots is not None:
            if mask is None:
                mask = np.zeros(self._n, dtype=bool)
                mask[slots] = True
            bitmap = np.packbits(mask, bitorder="little")
            params.sel = faiss.IDSelectorBitmap(self._n, faiss.swig_ptr(bitmap))
        dist, found = self._index.search(q[None, :], k, params=params)
        keep = found[0] >= 0
        if int(keep.sum()) < min(k, allowed):
            return self._exact(q, k, slots)
        return self._sampled(q, found[0][keep], dist[0][keep], slots, allowed)

    def _sampled(self, q: np.ndarray, picked: np.ndarray, sims: np.ndarray,
                 slots: np.ndarray | None, allowed: int) -> Hits:
        """Hits of `picked` (slots) best first, `mean`/`std` over the fixed sample of the
        allowed `slots` (None: every slot, no holes)."""
        order = np.lexsort((picked, -sims))  # ties by slot, as `top_k`
        picked, sims = picked[order], sims[order]
        total = self._n if slots is None else slots.size
        spots = np.linspace(0, total - 1, min(self.sample_rows, total)).astype(np.int64)
        bg = self._scores(spots if slots is None else slots[spots], q)
        return Hits(ids=self._ids[picked].copy(), similarities=sims.astype(np.float32),
                    mean=float(bg.mean()), std=float(bg.std()), allowed=allowed)

    def _scan(self, q: np.ndarray, k: int, slots: np.ndarray | None) -> Hits:
        """`_scan_steps` at once."""
        return run_steps(self._scan_steps(q, k, slots))

    def _scan_steps(self, q: np.ndarray, k: int, slots: np.ndarray | None
                    ) -> Generator[None, None, Hits]:
        """The exact top `k` of the allowed rows of an index with no graph, scored over the
        codes by faiss's scanner of the 8-bit codes (the code faiss's own scan of the storage
        runs), `scan_step_bytes` of codes a call, yielding between two calls; the best of each
        step kept, the `k` best of them (ties: the lower slot) returned. In C each call (the
        GIL let go once; numpy's chunks let it go twice each, and it comes back a switch
        interval late each time another thread runs Python: a scan of 100,000 codes took
        330 ms instead of 9 beside such a thread). `mean`/`std` over the fixed sample, as a
        search through the graph has them. Only the slots there were at the start are
        scored (a build's room and tail past them never), each step reading the codes where
        they are then (a write between two steps may move them: `own_codes`); a row removed
        meanwhile may be returned (the caller reads every hit back through the store)."""
        n = self._n
        mask = np.zeros(n, dtype=bool)
        mask[slice(None) if slots is None else slots] = True
        bitmap = np.packbits(mask, bitorder="little")
        sel = faiss.IDSelectorBitmap(bitmap.size, faiss.swig_ptr(bitmap))
        allowed = n if slots is None else int(slots.size)
        k = min(k, allowed)
        cs = self._storage.code_size
        step = max(1024, self.scan_step_bytes // cs)
        lowest = np.finfo(np.float32).min
        found, dist = [], []
        for a in range(0, n, step):
            if a:
                yield
            b = min(n, a + step)
            if not mask[a:b].any():
                continue
            scanner = self._storage.sq.select_InvertedListScanner(
                faiss.METRIC_INNER_PRODUCT, None, False, sel, False)
            scanner.set_query(faiss.swig_ptr(q))
            scanner.set_list(0, 0.0)
            d = np.full(k, lowest, dtype=np.float32)
            i = np.full(k, -1, dtype=np.int64)
            ids = np.arange(a, b, dtype=np.int64)
            codes = self.codes(b)[a:]  # where they are now (a write may have moved them)
            scanner.scan_codes(b - a, faiss.swig_ptr(codes), faiss.swig_ptr(ids),
                               faiss.swig_ptr(d), faiss.swig_ptr(i), k)
            keep = i >= 0
            found.append(i[keep])
            dist.append(d[keep])
        picked = np.concatenate(found) if found else np.zeros(0, np.int64)
        sims = np.concatenate(dist) if dist else np.zeros(0, np.float32)
        best = np.lexsort((picked, -sims))[:k]
        return self._sampled(q, picked[best], sims[best], slots, allowed)

    def _exact(self, q: np.ndarray, k: int, slots: np.ndarray | None) -> Hits:
        return run_steps(self._exact_steps(q, k, slots))

    def _exact_steps(self, q: np.ndarray, k: int, slots: np.ndarray | None
                     ) -> Generator[None, None, Hits]:
        if slots is None and self.holes:
            slots = np.flatnonzero(self._live[: self._n])
        if not self._built and (self._n if slots is None else slots.size) > SCAN_ROWS:
            return (yield from self._scan_steps(q, k, slots))
        return self._top(self._scores(slots, q), k, slots)

    def search_steps(
        self, query: np.ndarray, k: int, groups: Collection[str] | None = None,
        now: float | None = None, only: np.ndarray | None = None,
    ) -> Generator[None, None, Hits]:
        """`search` in steps: an index with no graph yet (a big key read, its graph being
        built) scans its allowed codes a step at a time, yielding between two
        (`_scan_steps`); through a graph, or over few rows, it is `search` at once. Driven by
        `search_stepped` on the loop (which lets it run between two steps), or `run_steps`."""
        if self._built:
            return self.search(query, k, groups, now, only)
        live = len(self._row)
        if live == 0 or k <= 0:
            return no_hits()
        q = np.ascontiguousarray(query, dtype=np.float32).reshape(-1)
        slots, _mask = self.allowed_mask(groups, now, only)
        if slots is not None and slots.size == 0:
            return no_hits()
        return (yield from self._exact_steps(q, k, slots))

    def vectors(self, ids: Iterable[int]) -> np.ndarray:
        """The stored (decoded) vectors of `ids` as float32 rows (every id must have a row)."""
        return self._decode(np.array([self._row[i] for i in ids], dtype=np.int64))

    def rows(self, chunk: int = CHUNK) -> Iterator[Chunk]:
        """Every row, a chunk at a time, as `add` takes them (vectors decoded)."""
        live = np.flatnonzero(self._live[: self._n])
        names = self.group_names()
        for i in range(0, live.size, chunk):
            s = live[i: i + chunk]
            yield chunk_of(self._ids[s], self._decode(s), self._groups[s], self._expires[s], names)

    # --- saving (the files: `host.search.index.files`) ---

    exists = staticmethod(files.exists)
    discard = staticmethod(files.discard)

    def save(self, path: str | Path, key: str = "") -> None:
        """Write the index to `path` and its rows to `path.meta.npz` (`files.write`)."""
        if not self._built:
            raise ValueError("the index has no graph yet")
        files.write(path, key, self._index, self.dim, self.options, self.slots_meta(self._n))
        self.dirty = False

    @classmethod
    def load(cls, path: str | Path, key: str = "", **options: Unpack[AnnOptions]) -> AnnIndex:
        """The index saved at `path` for `key`; ValueError when the files do not match (not
        of this format, another key, corrupt, truncated)."""
        saved = files.read(path, key)
        dim, n, names = saved.dim, saved.n, saved.groups
        index = cls(dim, **{**saved.options, **options})
        raw = saved.index
        if not isinstance(raw, faiss.IndexHNSWSQ) or raw.d != dim or raw.ntotal != n:
            raise ValueError("saved index does not match its rows")
        index._index = raw
        index._index.hnsw.efSearch = index.ef_search
        index._storage = faiss.downcast_index(raw.storage)
        trained = faiss.vector_to_array(index._storage.sq.trained).astype(np.float32)
        index._vmin, index._vstep = trained[:dim], trained[dim:] / 255.0
        index._grow_meta(n)
        index._n = n
        for name in names:
            index._code(name)
        ids, gcodes, exps, live = saved.ids, saved.gcodes, saved.expires, saved.live
        index._ids[:n], index._groups[:n], index._expires[:n] = ids, gcodes, exps
        index._live[:n] = live
        slots = np.flatnonzero(live)
        index._row = row_map(ids, slots)  # in steps: a load runs in a thread beside the loop
        if len(index._row) != slots.size:
            raise ValueError("saved rows repeat an id")
        index._group_rows = np.bincount(gcodes[slots], minlength=len(names)).tolist()
        index._expiring = int(np.isfinite(exps[slots]).sum())
        index._dead = n - int(slots.size)
        index.dirty = False
        return index
