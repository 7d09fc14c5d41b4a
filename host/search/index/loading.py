"""A key's rows read into an index (`load`, in a thread), and the writes made to a key while it
is read or rebuilt (`Journal`), replayed on the new index so that none is lost.

A write is a typed record (`Add`, `Meta`, `Remove`), applied to an index by `apply`. A key
below `ann_min_rows` rows is read as an `ExactIndex` (as 8-bit codes, a `CodedIndex`, once it
would pass the whole budget as its dtype); past it, as an `AnnIndex` of codes with no graph
yet (`coded_of`), whose graph a `GraphBuild` makes over those codes afterwards. A saved graph
that still matches the key's rows is read back instead (`host.search.index.persist`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from host.search.index.ann import BUILD_STEP, TAIL, AnnIndex, AnnOptions
from host.search.index.exact import CodedIndex, ExactIndex
from host.search.index.rows import Chunk

Loader = Callable[[str], Iterable[Chunk]]
Index = ExactIndex | AnnIndex


@dataclass(frozen=True, slots=True)
class Add:
    """Rows added or replaced (`ExactIndex.add`)."""

    ids: list[int]
    vectors: np.ndarray
    groups: list[str]
    expires: list[float | None]


@dataclass(frozen=True, slots=True)
class Meta:
    """A row's group and expiry changed."""

    entry_id: int
    group: str
    expires: float | None


@dataclass(frozen=True, slots=True)
class Remove:
    """Rows removed by id."""

    ids: list[int]


Op = Add | Meta | Remove


def apply(index: Index, op: Op) -> None:
    """`op` made on `index`."""
    if isinstance(op, Add):
        index.add(op.ids, op.vectors, op.groups, op.expires)
    elif isinstance(op, Meta):
        index.set_meta(op.entry_id, op.group, op.expires)
    else:
        index.remove(op.ids)


def op_rows(ops: Iterable[Op]) -> int:
    """Rows the adds among `ops` write."""
    return sum(len(op.ids) for op in ops if isinstance(op, Add))


def steps(op: Op, rows: int) -> Iterator[Op]:
    """`op` in parts of at most `rows` rows (an add; other writes whole)."""
    if not isinstance(op, Add) or len(op.ids) <= rows:
        yield op
        return
    for i in range(0, len(op.ids), rows):
        j = slice(i, i + rows)
        yield Add(op.ids[j], op.vectors[j], op.groups[j], op.expires[j])


class Writes(Protocol):
    """What a key's writes are given to while it is read or rebuilt: a `Journal`, or a
    `GraphBuild` (whose writes go to the index itself: nothing kept)."""

    @property
    def nbytes(self) -> int: ...

    @property
    def overflowed(self) -> bool: ...

    def append(self, op: Op) -> None: ...


class Journal:
    """Writes made to a key while it is loaded or rebuilt, replayed on the new index; past
    `max_bytes`, dropped (`overflowed`: the load is read again, the rebuild abandoned)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.ops: list[Op] = []
        self.nbytes = 0
        self.overflowed = False

    def append(self, op: Op) -> None:
        if self.overflowed:
            return
        self.nbytes += 64 + (op.vectors.nbytes + 64 * len(op.ids) if isinstance(op, Add)
                             else 8 * len(op.ids) if isinstance(op, Remove) else 0)
        if self.nbytes > self.max_bytes:
            self.overflowed = True
            self.ops = []
        else:
            self.ops.append(op)

    def drop(self) -> None:
        """Forget what was kept: the load in progress is read again."""
        self.overflowed = True
        self.ops = []


def replay(index: Index | None, ops: list[Op], dtype: str) -> Index | None:
    """`ops` made on `index` (None: an `ExactIndex` of `dtype` made by the first add)."""
    for op in ops:
        if index is None and isinstance(op, Add):
            index = ExactIndex(op.vectors.shape[1], dtype)
        if index is not None:
            apply(index, op)
    return index


def build_room(rows: int) -> int:
    """Rows of codes past `rows` a graph built in place over them takes: room for the rows
    added meanwhile (`GraphBuild`'s slack) and faiss's tail."""
    return max(2 * BUILD_STEP, rows // 16) + TAIL


def read_rows(rows: Iterable[Chunk], dtype: str, ann_min_rows: int, budget_bytes: int,
              options: AnnOptions, expected: int = 0) -> Index | None:
    """(In a thread.) An index of `rows`: exact below `ann_min_rows`, the rest coded once the
    graph is due (an `AnnIndex` with no graph yet: its graph is built over those codes) or
    once it would pass `budget_bytes` as `dtype` (a `CodedIndex`); the float rows go.
    `expected`: about how many rows come (0: unknown); the codes are then sized once for them
    and the room a build in place takes (`reserve_codes`), not grown by doubling."""
    index: Index | None = None
    for ids, vecs, groups, expires in rows:
        if not len(ids):
            continue
        if index is None:
            index = ExactIndex(np.asarray(vecs).shape[-1], dtype)
        index.add(ids, vecs, groups, expires)
        if isinstance(index, ExactIndex):
            if ann_min_rows and len(index) >= ann_min_rows:
                index = AnnIndex.coded_of(index, **options)
                if expected > len(index):
                    index.reserve_codes(expected + build_room(expected))
            elif not isinstance(index, CodedIndex) and budget_bytes \
                    and index.nbytes > budget_bytes:
                index = CodedIndex.of(index)
    return index
