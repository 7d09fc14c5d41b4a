"""Search by client-supplied vectors (the store extension): cosine similarity, nothing else.

Apart from the host's own ranking (retrieve.py, ranking.py, rank.py): a retrieve with `vector` asks
for the entries nearest to a vector the client computed in its own space, and its relevance
is their cosine similarity, as LangGraph's stores report it. An entry with several vectors
(one a field it embedded) scores its best one.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator, Sequence

import numpy as np

from host.search.index import VectorIndexes, approximate, group_of
from host.search.index.ann import search_stepped
from host.search.index.loading import Index
from host.search.index.rows import Chunk
from host.store.growth import UsageOf
from host.store.interface import EntryStore
from host.store.records import Query, Scope, StoredEntry, owner_for

__all__ = ["MAX_DIMS", "ROWS_PER_ENTRY", "ClientSpaces", "SpaceDims", "entry_of", "nearest",
           "rescore_count", "row_ids", "space_key", "space_of", "unit_rows"]

MAX_DIMS = 4096  # the largest dimension a space may have


def unit_rows(vectors: Sequence[Sequence[float]]) -> np.ndarray:
    """`vectors` as float32 rows of unit length (a zero row stays zero). Raises ValueError for
    rows of different lengths, an empty row, more than `MAX_DIMS` values or a value that is not
    finite (in float32 too)."""
    dims = {len(v) for v in vectors}
    if len(dims) != 1:
        raise ValueError("every vector of an entry has the same dimension")
    d = dims.pop()
    if not 1 <= d <= MAX_DIMS:
        raise ValueError(f"a vector has 1 to {MAX_DIMS} values, not {d}")
    with np.errstate(over="ignore", invalid="ignore"):
        m = np.asarray(vectors, dtype=np.float64)
        if not np.isfinite(m).all() or not np.isfinite(m.astype(np.float32)).all():
            raise ValueError("vector values are finite numbers")
        norms = np.linalg.norm(m, axis=1, keepdims=True)
        m = np.divide(m, norms, out=np.zeros_like(m), where=norms > 0)
    return m.astype(np.float32)


def nearest(query: np.ndarray, rows: Sequence[tuple[int, np.ndarray]], min_score: float
            ) -> list[tuple[float, int]]:
    """(similarity, id) of every entry of `rows` whose best cosine similarity to the unit
    `query` is at least `min_score` (0: every one, negative similarities included), best
    first (ties: the higher id, the newer, first)."""
    if not rows:
        return []
    scores = [(float(np.max(m @ query)), i) for i, m in rows]
    if min_score > 0:
        scores = [s for s in scores if s[0] >= min_score]
    return sorted(scores, reverse=True)


# -- the client spaces of a store the host searches in memory (SQLite) ------------------------

ROWS_PER_ENTRY = 64  # the most vectors an entry has in its space (index rows an entry)
CATCH_UP_ROWS = 10_000  # entries a page of a space's catch-up reads back
# rows a catch-up adds to a space's index between two turns of the loop: to an approximate
# one's graph (faiss: 64 rows took 45-91 ms into a graph of 100,000 x 384 here), to an exact
# one (2,048 rows ~5 ms)
ADD_STEP_ROWS = 16
EXACT_STEP_ROWS = 2048
_ROUNDS = 16  # searches of one retrieve at most (each drops what it found gone, or asks more)
# An approximate index (8-bit codes) ranks and scores on decoded vectors (~1e-3 off a
# similarity): its best `want + margin` entries, margin max(want, RESCORE_MARGIN) bounded by
# RESCORE_MAX, are scored again on their float32 vectors read from the store, then cut to the
# page. RESCORE_SLACK: how far below `min_score` an 8-bit score may be and still be rescored.
RESCORE_MARGIN = 32
RESCORE_MAX = 1024
RESCORE_SLACK = 0.01


def rescore_count(want: int) -> int:
    """How many of an approximate index's best entries are scored again for a page of `want`."""
    return want + min(max(want, RESCORE_MARGIN), RESCORE_MAX)


class SpaceDims(ValueError):
    """A query vector of another dimension than its space's (`dims`)."""

    def __init__(self, dims: int) -> None:
        super().__init__(f"the space has {dims} dimensions")
        self.dims = dims


def space_key(namespace: str, space: str) -> str:
    """The key of a client space in the host's `VectorIndexes` (and so of its saved graph's
    file, a hash of the key). A namespace's own vectors are keyed by the namespace alone, which
    holds no control character (`protocol.names`); a space by its namespace, U+0000 and its
    name, unless one of them holds U+0000 (or the namespace is empty): then by two U+0000 and
    the JSON array of both (ASCII). So no two (namespace, space) pairs share a key, whatever
    names a check let through, and no pair's key is a namespace's own."""
    if not namespace or "\x00" in namespace or "\x00" in space:
        return "\x00\x00" + json.dumps([namespace, space])
    return f"{namespace}\x00{space}"


def space_of(key: str) -> tuple[str, str]:
    """The (namespace, space) of a `space_key`."""
    if key.startswith("\x00\x00"):
        namespace, space = json.loads(key[2:])
        return namespace, space
    namespace, space = key.split("\x00", 1)
    return namespace, space


def row_ids(entry_ids: np.ndarray | Sequence[int], counts: Sequence[int] | int) -> np.ndarray:
    """The index row ids of entries' vectors: the j-th vector of entry i is row
    -(i * ROWS_PER_ENTRY + j) - 1, negative so that no row of a space is ever an entry id (a
    removal by entry ids, the embedding worker's, never touches a space). `counts`: each
    entry's number of vectors, or one number for all of them (every row it may have)."""
    ids = np.asarray(entry_ids, dtype=np.int64).reshape(-1)
    if isinstance(counts, int):
        j = np.arange(counts, dtype=np.int64)
        return (-(ids[:, None] * ROWS_PER_ENTRY + j[None, :]) - 1).reshape(-1)
    n = np.asarray(counts, dtype=np.int64)
    first = np.repeat(ids * ROWS_PER_ENTRY, n)
    j = np.arange(int(n.sum()), dtype=np.int64) - np.repeat(np.cumsum(n) - n, n)
    return -(first + j) - 1


def entry_of(rows: np.ndarray) -> np.ndarray:
    """The entry ids of index rows (`row_ids` backwards)."""
    return (-np.asarray(rows, dtype=np.int64) - 1) // ROWS_PER_ENTRY


class ClientSpaces:
    """The client vectors of a SQLite store, searched in the host's budgeted `VectorIndexes`
    (key `space_key(namespace, space)`) instead of read back from SQL on every query.

    A space is loaded on its first retrieve (`load`, the indexes' loader for these keys: every
    vector of the space, with the namespace's change number of the same snapshot). Before each
    retrieve the space catches up on the change log (`client_changes`): the entries stored
    since are read again and their rows replaced (a log pruned past it, or more entries with
    vectors in the space than a quarter of an approximate space, or of one the catch-up takes
    past `ann_min_rows`, reload the space). Index rows carry the entry's group
    (tier and owner) but no expiry, and the entries the index finds are read back through the
    store (`fetch`: visibility, TTL and filters again); one found gone (forgotten, expired,
    deleted by another tool) leaves the index there. So the stored rows stay the truth: a missed update is gone at the next load.
    """

    def __init__(self, store: EntryStore, indexes: VectorIndexes) -> None:
        self.store = store
        self.indexes = indexes
        # key -> (change number its rows are current to, the space's dimension, the most
        # vectors an entry of it has): written by `load` (in the loader's thread) and on the loop
        self._state: dict[str, tuple[int, int, int]] = {}
        # one load or catch-up of a space at a time (a later read is never applied first)
        self._locks: dict[str, tuple[asyncio.Lock, list[int]]] = {}  # key -> (lock, users)
        self.catch_up_rows = CATCH_UP_ROWS  # entry rows a page of a catch-up reads back
        # rows of a catch-up page added to an approximate space's graph (or to an exact one)
        # between two turns of the loop (inserting a page at once held every connection for
        # seconds)
        self.add_step_rows = ADD_STEP_ROWS
        self.exact_step_rows = EXACT_STEP_ROWS
        # an approximate index's best entries scored again on float32 (False: its 8-bit
        # ranking and scores as they are; benchmarks compare the two)
        self.rescore = True

    def load(self, key: str) -> Iterator[Chunk]:
        """The rows of the space `key` (blocking: `VectorIndexes.open` runs it in a thread)."""
        namespace, space = space_of(key)
        head, dims, batches = self.store.client_space(namespace, space)
        span = 1
        self._state[key] = (head, dims, span)
        for ids, counts, vecs, places, _expires in batches:
            if not ids:
                continue
            span = max(span, *counts)
            self._state[key] = (head, dims, span)
            groups = [group_of(t, o) for (t, o), c in zip(places, counts) for _ in range(c)]
            yield row_ids(ids, counts).tolist(), vecs, groups, [None] * len(groups)

    async def _open(self, namespace: str, key: str) -> Index | None:
        """The space's index (`VectorIndexes.open`), read if it is not loaded; a big one's rows
        counted first where the store keeps the count (`UsageOf`: the namespace's entries,
        at least its rows when each has one vector), so that its codes are sized once
        (`VectorIndexes.expect`: a million rows' codes grown by doubling were copied,
        ~370 MB beside them)."""
        due = self.indexes.ann_min_rows
        if isinstance(self.store, UsageOf) and due and self.indexes.get(key) is None:
            (entries, _bytes), _agent = await self.store.usage_of(namespace, "")
            if entries >= due:
                self.indexes.expect(key, entries)
        return await self.indexes.open(key)

    async def _current(self, namespace: str, space: str) -> tuple[Index | None, int, int]:
        """The space's index (loaded and caught up; None when it has no vector), its dimension
        and the most vectors an entry of it has."""
        key = space_key(namespace, space)
        index = self.indexes.get(key) or await self._open(namespace, key)
        state = self._state.get(key)
        if state is None:  # loaded before by another holder of the indexes: read it again
            self._drop(key)
            index = await self._open(namespace, key)
            state = self._state.get(key, (0, 0, 1))
        head, dims, span = state
        if index is None:
            return None, dims, span
        grown = 0  # entries with vectors in the space this catch-up read
        due = self.indexes.ann_min_rows
        while True:
            upto, stored = await self.store.client_changes(namespace, head, self.catch_up_rows)
            rows_of = (await self.store.client_rows_of(stored, space, dims) if stored
                       else None)
            grown += len(rows_of[0]) if rows_of is not None else 0
            if stored is None or (rows_of is not None
                                  and grown > max(self.catch_up_rows, len(index) // 4)
                                  and (approximate(index) or due and len(index) + grown >= due)):
                # the log cannot say what changed, or an approximate space (or one this
                # catch-up takes past `ann_min_rows`) grew by more than a quarter since it was
                # loaded (a bulk load): read the space again; a reload serves exactly at once
                # and builds its graph in the background from the rows it read, where adding
                # the rows one by one to the graph held this query for minutes (900,000 rows
                # into a graph of 100,000: 179 s), and an exact space of 10,000 caught up to
                # 100,000 in place was promoted midway with the rest of its rows to replay.
                # Only the entries with vectors in the space count: the namespace's other
                # stores (plain puts, other spaces) are read through, a page at a time.
                self._drop(key)
                del index, rows_of  # the old rows let go before the space is read again
                index = await self._open(namespace, key)
                dims, span = self._state.get(key, (0, dims, 1))[1:]
                return index, dims, span
            if stored and rows_of is not None:
                ids, counts, vecs, places, _expires = rows_of
                self.indexes.remove(row_ids(stored, span).tolist(), key)
                if ids:
                    span = max(span, *counts)
                    groups = [group_of(t, o) for (t, o), c in zip(places, counts)
                              for _ in range(c)]
                    rows = row_ids(ids, counts).tolist()
                    i = 0
                    while i < len(rows):
                        if i:  # a graph's insertions take ~0.3 ms a row: let the others run
                            await asyncio.sleep(0)
                        # (a graph may have been swapped in meanwhile)
                        step = (self.add_step_rows if approximate(self.indexes.get(key))
                                else self.exact_step_rows)
                        self.indexes.add(key, rows[i:i + step], vecs[i:i + step],
                                         groups[i:i + step], [None] * len(groups[i:i + step]))
                        i += step
            self._state[key] = (upto, dims, span)
            if upto == head:
                break
            head = upto
            await asyncio.sleep(0)  # a page applied: let the connections run
        if len(self._state) > 2 * len(self.indexes.keys()) + 64:  # evicted spaces: forgotten
            keep = set(self.indexes.keys()) | set(self._locks)
            for k in list(self._state):  # in place: a loader thread may be writing its key
                if k not in keep:
                    self._state.pop(k, None)
        index = self.indexes.get(key)
        if index is None:  # evicted while it caught up (others loaded): read it again
            index = await self._open(namespace, key)
            dims, span = self._state.get(key, (0, dims, span))[1:]
        return index, dims, span

    async def _rescored(self, ranked: dict[int, float], count: int, space: str, dims: int,
                        query: np.ndarray, min_score: float) -> dict[int, float]:
        """`ranked` (entry -> 8-bit similarity, best first) with its first `count` entries
        scored again on their float32 vectors from the store (each by its best one) and sorted
        again (ties: the higher id first), those below `min_score` dropped; the rest after them
        as they were (counted, never on the page: `count` covers it). An entry the store no
        longer has in the space keeps its score (the page's fetch finds it gone)."""
        items = list(ranked.items())
        head, tail = items[:count], items[count:]
        ids, counts, vecs, _places, _expires = await self.store.client_rows_of(
            [e for e, _ in head], space, dims)
        exact: dict[int, float] = {}
        if ids:
            sims = vecs.astype(np.float32) @ np.asarray(query, dtype=np.float32).reshape(-1)
            ends = np.cumsum(counts)
            best = np.maximum.reduceat(sims, ends - np.asarray(counts)) if len(sims) else sims
            exact = dict(zip(ids, best.astype(np.float64).tolist(), strict=True))
        scored = [(exact.get(e, s), e) for e, s in head]
        scored.sort(key=lambda x: (-x[0], -x[1]))
        out = {e: s for s, e in scored if not (min_score > 0 and s < min_score)}
        for e, s in tail:
            if not (min_score > 0 and s < min_score):
                out[e] = s
        return out

    def _drop(self, key: str) -> None:
        """Forget the loaded index of `key` (its next `open` reads the store)."""
        self._state.pop(key, None)
        self.indexes.drop(key)

    async def search(self, scope: Scope, q: Query, space: str, query: np.ndarray, now: float
                     ) -> tuple[list[tuple[float, StoredEntry]], int]:
        """The page `q` asks for (`offset`, `limit`, `min_score`) of the entries `scope` may
        read with vectors in `space`, nearest to the unit `query` first (each entry by its best
        vector), as (similarity, entry); and how many match (exact when fewer than
        offset + limit do; else the readable entries with vectors in the space, estimated from
        its rows when entries have several, or with `min_score` the matches seen). Raises
        `SpaceDims` for a query of another dimension than the space. From an approximate
        index, its best `rescore_count` entries are scored again on their float32 vectors
        (`rescore`): the page and its similarities are float32's."""
        key = space_key(scope.namespace, space)
        lock, users = self._locks.setdefault(key, (asyncio.Lock(), [0]))
        users[0] += 1
        try:
            async with lock:
                index, dims, span = await self._current(scope.namespace, space)
        finally:
            users[0] -= 1
            if not users[0]:
                del self._locks[key]  # nobody holds or waits on it: only busy spaces are kept
        if dims and dims != query.size:
            raise SpaceDims(dims)
        if index is None or not len(index) or not q.tiers:
            return [], 0
        groups = [group_of(t, owner_for(t, scope.agent)) for t in q.tiers]
        only = None
        if q.narrowed:
            allowed = await self.store.allowed_ids(scope, q, now)
            if not allowed.size:
                return [], 0
            only = row_ids(allowed, span)
        want = q.offset + q.limit
        ask = min(want * span, max(4 * want, 256))
        approx = self.rescore and approximate(index)
        if approx:
            ask = max(ask, rescore_count(want))
        page: list[tuple[float, StoredEntry]] = []
        total = 0
        for _ in range(_ROUNDS):
            hits = await search_stepped(index, query, ask, groups, None, only)
            seen = len(hits.ids)
            every = seen >= hits.allowed or seen < ask  # every allowed row was ranked
            ranked: dict[int, float] = {}  # entry -> best similarity, best first
            low = False
            floor = q.min_score - RESCORE_SLACK if approx else q.min_score
            for e, s in zip(entry_of(hits.ids).tolist(), hits.similarities.tolist()):
                if e in ranked:
                    continue
                if q.min_score > 0 and s < floor:
                    low = True  # the rest is lower still
                    break
                ranked[e] = s
            if approx and ranked:
                ranked = await self._rescored(ranked, rescore_count(want), space, dims,
                                              query, q.min_score)
            first = list(ranked.items())[:want]
            found = {x.id: x for x in await self.store.fetch(scope, q, [e for e, _ in first],
                                                              now)} if first else {}
            gone = [e for e, _ in first if e not in found]
            if gone:  # forgotten, expired or deleted since its rows were read: they go
                self.indexes.remove(row_ids(gone, span).tolist(), key)
                index = self.indexes.get(key) or index
                continue
            page = [(s, found[e]) for e, s in first[q.offset:]]
            if len(ranked) >= want or every or low:
                if every or low or q.min_score > 0:
                    total = len(ranked)
                else:
                    total = max(len(ranked), round(hits.allowed * len(ranked) / max(seen, 1)))
                break
            ask = min(ask * 2, max(hits.allowed, 1))  # entries of several vectors filled it
        else:
            total = len(page) + q.offset
        for s, e in page:
            e.relevance = s
        return page, total
