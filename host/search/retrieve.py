"""`Retrieval`: the query path of hybrid search (keywords + vectors) over one store.

The vectors of queries come from `QueryVectors` (`host.search.queries`: its own thread,
batched, cached, a fair share per connection), those of stored entries are read through
`host.search.vectors.Vectors` (in this host's memory, or searched by a shared database: the
same steps either way). `host.search.engine.SearchEngine` builds it and owns the lifecycle.

A query search (see docs/search.md):
0. read-your-writes: when the query's connection wrote since the namespace's vectors were last
   complete, wait (at most `vector_wait` seconds) until the worker embedded them;
1. keyword candidates from the store (BM25, visibility and filters in SQL), the best
   `fusion_pool`, with, when the query reads working entries, the BM25 statistics of the terms
   searched (`EntryStore.search_stats`: the same store call);
2. the query's vector and the `fusion_pool` nearest rows among those the agent may read
   (tier/owner groups, TTL, and the ids allowed by key/tag filters, all applied before
   ranking); a vector-only hit counts when it stands `vector_min_z` standard deviations above
   the query's mean similarity to that memory (`host.search.ranking.standouts`);
3. those hits read back through the store, which checks visibility again;
4. the session's working entries (when the query reads that tier) scored with the BM25 they
   would have in the store's index (`host.text.bm25`, those statistics), joining the
   candidates;
5. the entries written just before and after the best `neighbour_hits` candidates (same tier
   and owner, readable) join the candidates;
6. every candidate scored by `host.search.ranking`: its `relevance` from the pair (query,
   entry) alone, its order (`fused`) from that and how far it stands out among the
   candidates; a neighbour of a candidate that stands out and matches (`neighbour_min`) orders
   at least `neighbour_weight` ** distance of that candidate's order, keeping its own relevance.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from host.search import ranking
from host.store.interface import EntryStore, NearSearch
from host.store.records import Query, Scope, StoredEntry
from host.text.bm25 import Analysis, Bm25Stats, bm25
from host.text.keyword import query_terms, term_weights

if TYPE_CHECKING:
    from host.config import SearchConfig
    from host.search.queries import QueryVectors
    from host.search.vectors import Lookup, Vectors
    from host.search.worker import EmbeddingWorker

__all__ = ["Prior", "Retrieval", "WorkingEntries"]

Near = dict[int, list[tuple[StoredEntry, int]]]
# The keyword candidates whose neighbours come with the keyword search (`NearSearch`), as a
# multiple of `neighbour_hits`: the hits are chosen later by the fused order, which mostly
# but not always follows BM25; a hit past these costs one more round trip
_NEAR_FACTOR = 2

# The embedder's calibration: (highest similarity of unrelated queries and texts, the unit
# vectors of `ranking.REFERENCE_TEXTS`), computed once in the background
Prior = Callable[[], Awaitable[tuple[float, np.ndarray]]]


class WorkingEntries(Protocol):
    """What the query path needs of a session's working tier
    (`host.memory.working.WorkingTier`)."""

    def __len__(self) -> int: ...
    def search(self, terms: tuple[str, ...], keys: Sequence[bytes], tags: Sequence[str],
               now: float) -> list[StoredEntry]: ...
    def scored(self, keys: Sequence[bytes], tags: Sequence[str], now: float,
               analyse: Callable[[str], Analysis], keyword: Callable[[Analysis], float],
               ) -> list[StoredEntry]: ...


class Retrieval:
    """The candidates of a query over `store`, scored (`search`). `vectors`: the store's
    vectors (None: it keeps none); `queries` and `worker`: the query embedding and the
    background worker (None: no embedder); `prior`: the embedder's calibration;
    `calibration`: the pair relevance's weights (`host.search.ranking`)."""

    def __init__(
        self, store: EntryStore, cfg: SearchConfig, calibration: Sequence[float],
        vectors: Vectors | None, queries: QueryVectors | None, worker: EmbeddingWorker | None,
        prior: Prior,
    ) -> None:
        self.store = store
        self.cfg = cfg
        self.calibration = list(calibration)
        self.vectors = vectors
        self.queries = queries
        self.worker = worker
        self.prior = prior
        # what the store offers beyond `EntryStore` (host/store/interface.py), checked once
        self.near = (store if isinstance(store, NearSearch) and vectors is not None
                     and cfg.neighbour_hits > 0 else None)

    async def search(
        self, scope: Scope, q: Query, text: str, now: float, candidates: int,
        working: WorkingEntries | None = None, ticket: int = 0, conn: str = "",
    ) -> list[StoredEntry]:
        """See `host.search.engine.SearchEngine.search`: the steps of the module docstring."""
        cfg = self.cfg
        words = self._keyword_text(text)
        lookup, qv_future = await self._vector_of(scope.namespace, q, text, ticket, conn)
        # the store returns its best candidates first: asking for the pool alone keeps the same
        # ones and spares building (and scoring) the rest of `candidates` rows; with working
        # entries to score, the store's statistics come in the same call
        scores_working = working is not None and len(working) > 0
        kw, near, stats = await self._keyword_candidates(
            scope, q, words, now, min(candidates, cfg.fusion_pool), scores_working)
        if any(e.keyword is None for e in kw):
            # a store without BM25: its own relevance, the working tier's term share alike
            if qv_future is not None:
                await asyncio.gather(qv_future, return_exceptions=True)
            own = (working.search(query_terms(words), q.keys, q.tags, now)
                   if working is not None and len(working) else [])
            return kw + own
        own = self._working(q, now, working, stats)
        if qv_future is None or lookup is None:
            return await self._fused(scope, q, now, words, kw, np.full(len(kw), np.nan), own,
                                     None, None, near=near)
        qv = await qv_future
        hits = await lookup.nearest(scope, q, qv, now, [e.id for e in kw if e.id is not None])
        seen = {e.id for e in kw}
        prior, docs = await self.prior()
        ref = float((docs @ qv.astype(np.float64)).mean())  # the pair relevance's `reference`
        extra = [int(i) for i in ranking.standouts(hits, cfg.vector_min_z, prior,
                                                    self.calibration, ref)
                 if int(i) not in seen]
        assert self.vectors is not None  # a lookup is of the store's vectors
        found = await self.vectors.fetch(scope, q, extra, now) if extra else []
        stored = kw + found
        sims = await lookup.similarity(qv, [e.id for e in stored])
        return await self._fused(scope, q, now, words, stored, sims, own, qv, lookup, ref, near)

    async def _vector_of(
        self, ns: str, q: Query, text: str, ticket: int, conn: str,
    ) -> tuple[Lookup | None, asyncio.Future[np.ndarray] | None]:
        """The namespace's vectors and the query's vector, started on its thread (None: the
        query answers by keywords), after waiting for the worker when the connection's writes
        are not embedded yet (step 0)."""
        worker = self.worker
        wait = worker is not None and bool(q.tiers) and ticket > worker.through(ns)
        vectors = self.vectors
        lookup = await vectors.open(ns) if vectors is not None and q.tiers else None
        qv_future: asyncio.Future[np.ndarray] | None = None
        if self.queries is not None and (lookup is not None and lookup.searchable or wait):
            # the query's vector on its thread while the keyword search runs here: queued
            # now, not when a task would start after the keyword search
            qv_future = self.queries.request(text, ns, conn)
            qv_future.add_done_callback(retrieved)
        if wait:
            assert worker is not None and vectors is not None
            await worker.caught_up(ns, ticket, self.cfg.vector_wait)
            lookup = await vectors.open(ns)
        return lookup, qv_future

    async def _keyword_candidates(
        self, scope: Scope, q: Query, words: str, now: float, pool: int, stats: bool,
    ) -> tuple[list[StoredEntry], Near, Bm25Stats | None]:
        """The store's best `pool` keyword candidates (step 1), with the neighbours of the
        first of them when the store brings them in the same round trip (`NearSearch`), and
        with `stats` the statistics that score the working entries (step 4) from the same
        call (None without)."""
        if not q.tiers and not stats:
            return [], {}, None
        if self.near is not None:
            cfg = self.cfg
            return await self.near.search_near(scope, q, words, now, pool,
                                               cfg.neighbour_hits * _NEAR_FACTOR,
                                               cfg.neighbour_span, stats=stats)
        # `ranking.score` sets every candidate's relevance: the store's is not asked for
        if stats:
            found, got = await self.store.search_stats(scope, q, words, now, pool,
                                                       relevance=False)
            return found, {}, got
        return await self.store.search(scope, q, words, now, pool, relevance=False), {}, None

    async def _fused(
        self, scope: Scope, q: Query, now: float, text: str, stored: list[StoredEntry],
        sims: np.ndarray, own: list[StoredEntry], qv: np.ndarray | None, lookup: Lookup | None,
        ref: float = 0.0, near: Near | None = None,
    ) -> list[StoredEntry]:
        """The stored candidates (`sims`: their similarities), their neighbours when the store
        can fetch them (`_neighbours`; `near`: those the keyword search brought), and the
        working entries `own`, scored for the query `text` (`host.search.ranking.score`;
        `ref`: the query's reference similarity)."""
        links: dict[int, tuple[int, int]] = {}
        added = 0
        # each candidate's coverage of the query, computed once (it reads the entry's text)
        # the query's content terms, analysed once for every candidate's coverage
        weights = term_weights(text) if self.calibration else {}
        cov = ranking.coverages(weights, stored) if self.calibration else None
        if self.cfg.neighbour_hits > 0 and stored and self.vectors is not None:
            stored, sims, links, added = await self._neighbours(
                scope, q, now, text, stored, sims, qv, lookup, ref, cov, near)
        if cov is not None:
            cov = np.concatenate([cov, ranking.coverages(weights, stored[len(cov):] + own)])
        return ranking.score(stored + own, text,
                             np.concatenate([sims, np.full(len(own), np.nan)]), self.cfg,
                             self.calibration, ref, links, len(stored) - added, added, cov)

    async def _neighbours(
        self, scope: Scope, q: Query, now: float, text: str, stored: list[StoredEntry],
        sims: np.ndarray, qv: np.ndarray | None, lookup: Lookup | None, ref: float = 0.0,
        cov: np.ndarray | None = None, near: Near | None = None,
    ) -> tuple[list[StoredEntry], np.ndarray, dict[int, tuple[int, int]], int]:
        """Append the entries written just before and after the best candidates (the
        `neighbour_span` nearest by row id within the candidate's own namespace, tier and
        owner, readable under `q`; the store's `neighbours`, asked only for the hits that
        `near` does not hold) to the candidates; also the links {neighbour id: (candidate id,
        distance)} (see `host.search.ranking.score`) and how many entries were appended."""
        cfg = self.cfg
        first, rel, _z = ranking.orders(stored, text, sims, cfg, self.calibration, ref, cov=cov)
        first = np.where(rel >= cfg.neighbour_min, first, -np.inf)  # who may lift neighbours
        by_id = {e.id: e for e in stored}
        hits: list[tuple[int, str, str]] = []
        for j in np.argsort(-first)[: cfg.neighbour_hits]:
            if not np.isfinite(first[j]):
                break
            hit = stored[int(j)]
            assert hit.id is not None
            hits.append((int(hit.id), hit.tier, hit.owner))
        assert self.vectors is not None  # called when the store can fetch (`_fused`)
        near = near or {}
        ask = [h for h in hits if h[0] not in near]
        found = (await self.vectors.neighbours(scope, q, ask, cfg.neighbour_span, now)
                 if ask else [])
        if len(ask) < len(hits):  # each hit's rows in turn, as one `neighbours` call gives them
            asked: dict[int, list[tuple[StoredEntry, int, int]]] = {}
            for row in found:
                asked.setdefault(row[1], []).append(row)
            found = [row for h in hits for row in (
                [(e, h[0], d) for e, d in near[h[0]]] if h[0] in near else asked.get(h[0], []))]
        # a row near several candidates (another candidate, too) links to the best of them
        # (the first in `hits`), at that candidate's distance
        rank = {h[0]: i for i, h in enumerate(hits)}
        best: dict[int, tuple[StoredEntry, int, int]] = {}
        for e, hit_id, d in found:
            n = int(e.id or 0)
            old = best.get(n)
            if old is None or (rank[hit_id], d) < (rank[old[1]], old[2]):
                best[n] = (e, hit_id, d)
        links: dict[int, tuple[int, int]] = {}
        added = []
        for n, (e, hit_id, d) in best.items():
            links[n] = (hit_id, d)
            if n not in by_id:
                added.append(e)
        if added:
            stored = stored + added
            more = (await lookup.similarity(qv, [e.id for e in added])
                    if lookup is not None and qv is not None else np.full(len(added), np.nan))
            sims = np.concatenate([sims, more])
        return stored, sims, links, len(added)

    def _working(
        self, q: Query, now: float, working: WorkingEntries | None, stats: Bm25Stats | None,
    ) -> list[StoredEntry]:
        """The working entries matching `q` and the query, `keyword` set on the store's scale
        (`stats`: the store's statistics of the terms it searched, from the keyword search)."""
        if working is None or not len(working) or stats is None or not stats.terms:
            return []
        return working.scored(q.keys, q.tags, now, self.store.analyse,
                              lambda a: bm25(stats, a))

    def _keyword_text(self, text: str) -> str:
        """`text` for keyword search: as it is, or, when it is long, its first
        `search.max_query_terms` distinct terms (which read back as the same terms)."""
        limit = self.cfg.max_query_terms
        if len(text) <= limit * 16:
            return text
        return " ".join(query_terms(text[: limit * 64])[:limit])


def retrieved(fut: asyncio.Future[Any]) -> None:
    """Mark a future's exception as seen (a query vector nobody needed in the end)."""
    if not fut.cancelled():
        fut.exception()
