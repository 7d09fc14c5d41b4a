"""`ExactIndex`: one matrix of unit vectors (float32, or float16 for half the memory), searched
exactly: every allowed row is scored. ~8 ms at 100,000 x 384 float32 on 2 cores.

`CodedIndex`: the same over 8-bit codes (a quarter of float32's bytes), each dimension
quantised over the range learnt from the rows it was made from, as an `AnnIndex` stores them
(and with its ranges, so a graph built from it keeps the same codes): what `VectorIndexes`
holds of a key past the whole budget below `ann_min_rows` (past it, the codes are an
`AnnIndex`'s without a graph, `AnnIndex.coded_of`). Every allowed row is scored, on the decoded
vectors (~1e-3 off a similarity), so its callers rescore its best rows on float32 as they do an
`AnnIndex`'s (`host.search.index.approximate`).

float16 keeps the same top 10 (recall@10 ~1.0 against float32) in half the bytes, but a query
costs ~10x the CPU: numpy converts float16 to float32 slowly (scripts/bench/bench_index.py). So it
suits keys that are many and small; a big key is better served by an `AnnIndex` (8-bit).

Not thread-safe: the owner serialises writes and reads (the host calls it on the event loop).
"""

from __future__ import annotations

from collections.abc import Collection, Generator, Iterable, Iterator

import numpy as np

from host.search.index.rows import Chunk, Rows, checked, chunk_of, no_hits
from host.store.records import Hits

CHUNK = 4096  # rows scored at a time: bounds the float32 copy a gather or a compact matrix makes
DTYPES = {"float32": np.float32, "float16": np.float16}
# each dimension's learnt range widened by this share of it on either side: a later vector
# beyond the range is clipped (a similarity off by ~0.01 at 1M rows trained on 50,000)
RANGE_MARGIN = 0.02


def code_ranges(sample: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each dimension's (min, width) for 8-bit codes, from `sample` (float32 rows): their
    min and max (faiss's `ScalarQuantizer` min-max), widened by `RANGE_MARGIN`."""
    sample = np.asarray(sample, dtype=np.float32)
    if len(sample) < 2:  # a range needs spread: widen a lone vector's
        sample = np.concatenate([sample, -sample, np.zeros((1, sample.shape[1]), np.float32)])
    vmin = sample.min(axis=0)
    vdiff = np.maximum(sample.max(axis=0) - vmin, 1e-6)
    return ((vmin - RANGE_MARGIN * vdiff).astype(np.float32),
            (vdiff * (1 + 2 * RANGE_MARGIN)).astype(np.float32))


def dots(m: np.ndarray, n: int, slots: np.ndarray | None, q: np.ndarray) -> np.ndarray:
    """`m[slots] @ q` (`m[:n]` when `slots` is None) in float32, a chunk of rows at a time."""
    if m.dtype == np.float32 and (slots is None or 2 * slots.size >= n):
        # one BLAS call over every row, the GIL let go once (chunks let it go twice each,
        # and it comes back late each time another thread runs Python)
        return m[:n] @ q if slots is None else (m[:n] @ q)[slots]
    total = n if slots is None else slots.size
    out = np.empty(total, dtype=np.float32)
    for i in range(0, total, CHUNK):
        part = m[i: min(i + CHUNK, n)] if slots is None else m[slots[i: i + CHUNK]]
        out[i: i + part.shape[0]] = part.astype(np.float32, copy=False) @ q
    return out


class ExactIndex(Rows):
    """The vectors of one key. Add or replace rows by id, remove by id, search exactly."""

    kind = "exact"

    def __init__(self, dim: int, dtype: str = "float32", capacity: int = 1) -> None:
        if dim <= 0:
            raise ValueError("dim must be positive")
        if dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {sorted(DTYPES)}, not {dtype!r}")
        super().__init__(capacity)
        self.dim = dim
        self.dtype = dtype
        self._m = np.zeros((len(self._ids), dim), dtype=DTYPES[dtype])

    @property
    def matrix(self) -> np.ndarray:
        """The rows' vectors (`dtype`, or codes), one a slot: a view."""
        return self._m[: self._n]

    @property
    def nbytes(self) -> int:
        """Bytes this index holds: the matrix (its whole capacity: what its rows need, at most
        twice that as it grows) and the rows' metadata."""
        return int(self._m.nbytes) + self.meta_nbytes()

    def _grow(self, need: int) -> None:
        cap = len(self._ids)
        new = self._grow_meta(need)
        if new != cap:
            m = np.zeros((new, self.dim), dtype=self._m.dtype)
            m[: self._n] = self._m[: self._n]
            self._m = m

    def add(
        self, ids: Iterable[int], vectors: np.ndarray, groups: Iterable[str],
        expires: Iterable[float | None],
    ) -> None:
        """Add rows, or replace the rows of ids already present. `vectors` must be unit rows
        `(n, dim)`; `expires` is the expiry time of each row (None: never)."""
        ids, vecs, groups, expires = checked(self.dim, ids, vectors, groups, expires)
        if not ids:
            return
        self._grow(self._n + len(ids))
        vecs = self._encode(vecs)
        for j, (i, group, exp) in enumerate(zip(ids, groups, expires, strict=True)):
            slot = self._row.get(i)
            if slot is None:
                slot = self._n
                self._n += 1
            else:
                self._clear_slot(slot)
            self._set_slot(slot, i, group, exp)
            self._m[slot] = vecs[j]

    def remove(self, ids: Iterable[int]) -> int:
        """Remove the rows of `ids` (absent ids are ignored); the number removed."""
        removed = 0
        for i in ids:
            slot = self._row.pop(i, None)
            if slot is None:
                continue
            self._clear_slot(slot)
            last = self._n - 1
            if slot != last:  # the last row fills the hole: slots below `_n` stay live
                moved = int(self._ids[last])
                self._m[slot] = self._m[last]
                self._ids[slot] = moved
                self._groups[slot] = self._groups[last]
                self._expires[slot] = self._expires[last]
                self._live[slot] = True
                self._live[last] = False
                self._row[moved] = slot
            self._n = last
            removed += 1
        return removed

    def search_steps(
        self, query: np.ndarray, k: int, groups: Collection[str] | None = None,
        now: float | None = None, only: np.ndarray | None = None,
    ) -> Generator[None, None, Hits]:
        """`search` in one step (`host.search.index.ann.search_stepped` drives the indexes'
        steps; a float32 index's search is one)."""
        yield from ()
        return self.search(query, k, groups, now, only)

    def search(
        self, query: np.ndarray, k: int, groups: Collection[str] | None = None,
        now: float | None = None, only: np.ndarray | None = None,
    ) -> Hits:
        """The `k` rows most similar to the unit vector `query` among the allowed rows.

        Allowed: in one of `groups` (None: any), not expired at `now` (None: no check), and
        among `only` ids (None: any). Filters apply before ranking. `mean`/`std` are those of
        the query's similarity to every allowed row.
        """
        if self._n == 0 or k <= 0:
            return no_hits()
        q = np.asarray(query, dtype=np.float32).reshape(-1)
        slots = self.allowed(groups, now, only)
        if slots is not None and slots.size == 0:
            return no_hits()
        return self._top(self._scores(slots, q), k, slots)

    def vectors(self, ids: Iterable[int]) -> np.ndarray:
        """The stored vectors of `ids` as float32 rows (every id must have a row)."""
        slots = np.array([self._row[i] for i in ids], dtype=np.int64)
        return self._decode(self._m[slots])

    # the stored form of vectors: float32/float16 as they are (a subclass codes them)
    def _encode(self, vecs: np.ndarray) -> np.ndarray:
        return vecs

    def _decode(self, m: np.ndarray) -> np.ndarray:
        return m.astype(np.float32)

    def _scores(self, slots: np.ndarray | None, q: np.ndarray) -> np.ndarray:
        """Similarity of `q` to the rows of `slots` (None: every row)."""
        return dots(self._m, self._n, slots, q)

    def _frozen(self) -> np.ndarray:
        """A copy of the stored vectors for `snapshot`: float16 (half their float32 size,
        finer than the 8-bit codes an `AnnIndex` built from them keeps), whatever the dtype."""
        return self._m[: self._n].astype(np.float16)

    def snapshot(self) -> tuple[Iterator[Chunk], int]:
        """`rows()` of a copy of the rows (`_frozen` of the vectors), for a build in another
        thread while this index goes on changing; and the bytes that copy holds."""
        n = self._n
        m = self._frozen()
        ids, gcodes, exps = self._ids[:n].copy(), self._groups[:n].copy(), self._expires[:n].copy()
        names = self.group_names()

        def chunks() -> Iterator[Chunk]:
            for i in range(0, n, CHUNK):
                j = slice(i, i + CHUNK)
                yield chunk_of(ids[j], self._decode(m[j]), gcodes[j], exps[j], names)
        return chunks(), int(m.nbytes + ids.nbytes + gcodes.nbytes + exps.nbytes)

    def rows(self, chunk: int = CHUNK) -> Iterator[Chunk]:
        """Every row, a chunk at a time, as `add` takes them (vectors as float32 copies)."""
        names = self.group_names()
        for i in range(0, self._n, chunk):
            j = slice(i, min(i + chunk, self._n))
            yield chunk_of(self._ids[j], self._decode(self._m[j]), self._groups[j],
                           self._expires[j], names)


class CodedIndex(ExactIndex):
    """An `ExactIndex` over 8-bit codes: each dimension's value `v` stored as
    `floor(255 * (v - vmin) / vdiff)` clipped to 0..255, decoded as `vmin + (code + 0.5) *
    vdiff / 255` (faiss's 8-bit scalar quantiser: an `AnnIndex` given the same ranges stores
    the same codes). `ranges`: each dimension's (min, width), see `code_ranges`."""

    coded = True  # its scores are the codes' (approximate): callers rescore its best rows

    def __init__(self, dim: int, ranges: tuple[np.ndarray, np.ndarray],
                 capacity: int = 1) -> None:
        super().__init__(dim, "float32", capacity=1)
        self.dtype = "uint8"
        vmin, vdiff = (np.asarray(r, dtype=np.float32).reshape(dim) for r in ranges)
        self.ranges = (vmin, vdiff)
        self._vmin, self._vstep = vmin, vdiff / np.float32(255.0)
        self._grow_meta(max(1, capacity))
        self._m = np.zeros((len(self._ids), dim), dtype=np.uint8)

    @classmethod
    def of(cls, exact: ExactIndex) -> CodedIndex:
        """The rows of `exact` coded (the ranges learnt from them); `exact` is left as it was."""
        n = exact._n
        m = exact._m[:n]
        sample = m[np.linspace(0, n - 1, min(n, 100_000)).astype(np.int64)] if n else m
        index = cls(exact.dim, code_ranges(sample.astype(np.float32)), capacity=max(1, n))
        for i in range(0, n, CHUNK):
            index._m[i: i + CHUNK] = index._encode(m[i: i + CHUNK].astype(np.float32))
        index._copy_slots(exact)
        return index

    def _encode(self, vecs: np.ndarray) -> np.ndarray:
        x = (np.asarray(vecs, dtype=np.float32) - self._vmin) / (self._vstep * np.float32(255.0))
        return np.clip(np.floor(x * np.float32(255.0)), 0, 255).astype(np.uint8)

    def _decode(self, m: np.ndarray) -> np.ndarray:
        return self._vmin + (m.astype(np.float32) + np.float32(0.5)) * self._vstep

    def _scores(self, slots: np.ndarray | None, q: np.ndarray) -> np.ndarray:
        qs = (q * self._vstep).astype(np.float32)
        base = float(q @ self._vmin + 0.5 * qs.sum())
        return dots(self._m, self._n, slots, qs) + np.float32(base)

    def _frozen(self) -> np.ndarray:
        """A copy of the codes (`snapshot` decodes them a chunk at a time)."""
        return self._m[: self._n].copy()
