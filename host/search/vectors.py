"""The vectors under the query path: one interface (`Vectors`), two implementations.

The query path (`host.search.retrieve`) reads vectors through `Vectors`, whichever backend
keeps them, as the embedding worker writes them through `host.search.worker.EmbeddingWorker`:

- `LocalVectors`: a store whose vectors this host searches in memory (SQLite): the namespace's
  index in `VectorIndexes`, the ids the query's key/tag filters allow from the store
  (`allowed_ids`), and, for an approximate index (8-bit codes), its best rows scored again on
  the store's float32 vectors (`vectors_of`);
- `SharedVectors`: a store that keeps and searches the vectors itself (PostgreSQL with
  pgvector, shared by several hosts): `nearest_vectors` (visibility in its WHERE, before
  ranking, and the keyword candidates' similarities in the same round trip) and
  `vector_similarity` for the rest.

`Vectors.open(namespace)` gives one query's `Lookup` of a namespace (None: nothing to search):
its nearest rows and the exact similarity of any candidate. Both read the entries back through
the store (`fetch`, `neighbours`), which checks visibility again.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Collection, Generator, Sequence
from typing import Generic, Protocol, TypeVar

import numpy as np

from host.search.client_vectors import rescore_count
from host.search.index import VectorIndexes, approximate, group_of
from host.search.index.ann import search_stepped
from host.store.interface import EntryStore, VectorSearch, VectorStore
from host.store.records import Hits, Query, Scope, StoredEntry, owner_for

__all__ = ["Index", "LocalVectors", "Lookup", "SharedVectors", "Vectors"]

log = logging.getLogger("a2e_host.search")
S = TypeVar("S", bound=EntryStore)


class Index(Protocol):
    """What the query path reads of an in-memory index (`host.search.index`: exact, coded or
    approximate)."""

    def __len__(self) -> int: ...

    def search(self, query: np.ndarray, k: int, groups: Collection[str] | None = None,
               now: float | None = None, only: np.ndarray | None = None) -> Hits: ...

    def search_steps(self, query: np.ndarray, k: int, groups: Collection[str] | None = None,
                     now: float | None = None, only: np.ndarray | None = None
                     ) -> Generator[None, None, Hits]: ...

    def similarity(self, query: np.ndarray, ids: Sequence[int]) -> np.ndarray: ...


class Lookup(Protocol):
    """One namespace's vectors as one query reads them."""

    @property
    def searchable(self) -> bool:
        """True when it holds rows to search (a query's vector is worth computing)."""

    async def nearest(self, scope: Scope, q: Query, qv: np.ndarray, now: float,
                      also: Sequence[int] = ()) -> Hits:
        """The `fusion_pool` rows nearest to `qv` that `q` lets `scope` read, best first
        (ties: the newer), with the mean/std of the similarity over the rows it may read;
        `also`: the ids whose similarity the query will ask next (its keyword candidates)."""

    async def similarity(self, qv: np.ndarray, ids: Sequence[int | None]) -> np.ndarray:
        """Exact similarity of `qv` to each of `ids` (NaN without a vector, or for None)."""


class Vectors(Protocol):
    """The vectors of a store, as the query path reads them."""

    async def open(self, namespace: str) -> Lookup | None:
        """`namespace`'s vectors for one query (None: no embedder, or none could be read:
        the query answers by keywords)."""

    async def fetch(self, scope: Scope, q: Query, ids: Sequence[int], now: float
                    ) -> list[StoredEntry]:
        """The entries among `ids` that `q` lets `scope` read, with `id` set; any order."""

    async def neighbours(self, scope: Scope, q: Query, hits: Sequence[tuple[int, str, str]],
                         span: int, now: float) -> list[tuple[StoredEntry, int, int]]:
        """As `host.store.interface.EntryStore.neighbours`."""


class _StoreReads(Generic[S]):
    """`Vectors.fetch` and `neighbours`: the entries read back through the store, whichever
    keeps the vectors."""

    store: S

    async def fetch(self, scope: Scope, q: Query, ids: Sequence[int], now: float
                    ) -> list[StoredEntry]:
        return await self.store.fetch(scope, q, ids, now)

    async def neighbours(self, scope: Scope, q: Query, hits: Sequence[tuple[int, str, str]],
                         span: int, now: float) -> list[tuple[StoredEntry, int, int]]:
        return await self.store.neighbours(scope, q, hits, span, now)


class LocalVectors(_StoreReads[VectorStore]):
    """The vectors of a `VectorStore` searched in this host's memory (`indexes`; None: no
    embedder, nothing to search). `pool`: how many nearest rows a query takes."""

    def __init__(self, store: VectorStore, indexes: VectorIndexes | None, pool: int) -> None:
        self.store = store
        self.indexes = indexes
        self.pool = pool

    async def open(self, namespace: str) -> Lookup | None:
        """The namespace's index, loaded if it is not (None: its load failed: the query then
        answers by keywords, and the next one loads again)."""
        if self.indexes is None:
            return None
        index: Index | None = self.indexes.get(namespace)
        if index is None:
            try:
                index = await self.indexes.open(namespace)
            except Exception:
                log.exception("vectors of a namespace not loaded: its query answers by keywords")
                return None
        return None if index is None else _LocalLookup(self, index)

    async def exact_similarity(self, qv: np.ndarray, ids: Sequence[int], approx: np.ndarray
                               ) -> np.ndarray:
        """`approx` (similarities of `qv` to `ids` from an approximate index; NaN: no row) with
        each id the store has a float32 vector for scored on it instead."""
        out = np.array(approx, dtype=np.float64)
        ask = [int(i) for i, s in zip(ids, out.tolist(), strict=True) if s == s]
        if not ask:
            return out
        q = np.asarray(qv, dtype=np.float32).reshape(-1)
        got, vecs = await self.store.vectors_of(ask, q.size)
        exact = dict(zip(got, (vecs @ q).astype(np.float64).tolist(), strict=True))
        for j, i in enumerate(ids):
            s = exact.get(int(i))
            if s is not None and out[j] == out[j]:
                out[j] = s
        return out


class _LocalLookup:
    """A namespace's in-memory `index` for one query."""

    def __init__(self, vectors: LocalVectors, index: Index) -> None:
        self.vectors = vectors
        self.index = index
        # 8-bit codes (approximate): their best rows are scored again on the store's float32
        self.rescore = approximate(index)

    @property
    def searchable(self) -> bool:
        return len(self.index) > 0

    async def nearest(self, scope: Scope, q: Query, qv: np.ndarray, now: float,
                      also: Sequence[int] = ()) -> Hits:
        """The nearest rows among the tier/owner groups of `q`, not expired, and among the ids
        its key/tag filters allow (the store's `allowed_ids`)."""
        groups = [group_of(t, owner_for(t, scope.agent)) for t in q.tiers]
        only = (await self.vectors.store.allowed_ids(scope, q, now)) if q.narrowed else None
        pool = self.vectors.pool
        if not self.rescore:
            return await search_stepped(self.index, qv, pool, groups, now, only)
        # the best `pool` + margin scored again on float32, cut (a big key's scan while its
        # graph is built runs in steps: the loop runs between two)
        hits = await search_stepped(self.index, qv, rescore_count(pool), groups, now, only)
        sims = await self.vectors.exact_similarity(qv, hits.ids.tolist(),
                                                   hits.similarities.astype(np.float64))
        order = np.lexsort((-hits.ids, -sims))[:pool]  # best first, ties: the newer
        return dataclasses.replace(hits, ids=hits.ids[order],
                                   similarities=sims[order].astype(np.float32))

    async def similarity(self, qv: np.ndarray, ids: Sequence[int | None]) -> np.ndarray:
        rows = [-1 if i is None else int(i) for i in ids]  # -1: no row
        sims = self.index.similarity(qv, rows)
        if self.rescore:
            sims = await self.vectors.exact_similarity(qv, rows, sims)
        return sims


class SharedVectors(_StoreReads[VectorSearch]):
    """The vectors of a `VectorSearch` store, searched by the store (`model`: the embedder's
    name; None: no embedder, nothing to search). `pool`: how many nearest rows a query takes,
    `sample`: over how many rows the store measures the similarity's mean and deviation."""

    def __init__(self, store: VectorSearch, model: str | None, pool: int, sample: int) -> None:
        self.store = store
        self.model = model
        self.pool = pool
        self.sample = sample

    async def open(self, namespace: str) -> Lookup | None:
        return None if self.model is None else _SharedLookup(self, self.model)


class _SharedLookup:
    """One query's reads of a shared store: what it answered is kept (`known`), so each id's
    similarity is asked once."""

    searchable = True

    def __init__(self, vectors: SharedVectors, model: str) -> None:
        self.vectors = vectors
        self.model = model
        self.known: dict[int, float] = {}

    async def nearest(self, scope: Scope, q: Query, qv: np.ndarray, now: float,
                      also: Sequence[int] = ()) -> Hits:
        """The store's nearest readable rows, and the similarity of `also` in the same round
        trip."""
        v = self.vectors
        ask = [int(i) for i in also]
        hits = await v.store.nearest_vectors(scope, q, self.model, qv, now, v.pool, v.sample,
                                             ask)
        self.known.update(zip(
            hits.ids.tolist(), hits.similarities.astype(np.float64).tolist(), strict=True))
        for i in ask:  # a candidate without a vector is NaN, known: not asked again
            self.known.setdefault(i, hits.also.get(i, np.nan))
        return hits

    async def similarity(self, qv: np.ndarray, ids: Sequence[int | None]) -> np.ndarray:
        ask = [int(i) for i in ids if i is not None and int(i) not in self.known]
        if ask:
            sims = await self.vectors.store.vector_similarity(self.model, qv, ask)
            self.known.update(zip(ask, sims.tolist(), strict=True))
        return np.array([np.nan if i is None else self.known.get(int(i), np.nan) for i in ids],
                        dtype=np.float64)
