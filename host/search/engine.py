"""`SearchEngine`: hybrid retrieval (keywords + vectors) over one store.

The vectors of stored entries come from the background worker (`host.search.worker`: batches,
newest first, both cores while the host is idle); the vectors of queries from `QueryVectors`
(`host.search.queries`: its own thread, batched, cached, a fair share per connection). This
module is the query path.

A query search (see docs/search.md):
0. read-your-writes: when the query's connection wrote since the namespace's vectors were last
   complete, wait (at most `vector_wait` seconds) until the worker embedded them;
1. keyword candidates from the store (BM25, visibility and filters in SQL), the best
   `fusion_pool`;
2. the query's vector and the `fusion_pool` nearest rows among those the agent may read
   (tier/owner groups, TTL, and the ids allowed by key/tag filters, all applied before
   ranking); a vector-only hit counts when it stands `vector_min_z` standard deviations above
   the query's mean similarity to that memory;
3. those hits read back through the store, which checks visibility again;
4. the session's working entries (when the query reads that tier) scored with the BM25 they
   would have in the store's index (`host.text.bm25`), joining the candidates;
5. the entries written just before and after the best `neighbour_hits` candidates (same tier
   and owner, readable) join the candidates;
6. every candidate scored by `host.search.ranking`: its `relevance` from the pair (query,
   entry) alone, its order (`fused`) from that and how far it stands out among the
   candidates; a neighbour of a candidate that stands out and matches (`neighbour_min`) orders
   at least `neighbour_weight` ** distance of that candidate's order, keeping its own relevance.

A store that searches vectors itself (`host.store.base.VectorSearch`: PostgreSQL with pgvector,
shared by several hosts) keeps no vectors in this process: its worker is a `SharedWorker`,
step 2 asks the store for the nearest readable rows (visibility in its WHERE, before ranking),
and the exact similarity of the other candidates comes from the store too. Everything else is
the same code on both backends.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from host.search import ranking
from host.search.client_vectors import ClientSpaces, rescore_count
from host.search.embed import Embedder
from host.search.queries import QueryVectors
from host.search.vectors import Hits, VectorIndex, VectorIndexes, approximate, group_of
from host.search.worker import EmbeddingWorker, LocalWorker, SharedWorker
from host.store.base import (  # the store capabilities the engine reads, declared there
    ClientSpaceReads,
    EntryStore,
    KeywordStats,
    NamespaceVectors,
    NearSearch,
    Query,
    Scope,
    StoredEntry,
    VectorSearch,
    VectorStore,
    owner_for,
)
from host.text.bm25 import Analysis, bm25
from host.text.keyword import query_terms

if TYPE_CHECKING:
    from host.config import SearchConfig

__all__ = ["KeywordStats", "SearchEngine", "StoreVectors", "VectorStore", "WorkingEntries"]

log = logging.getLogger("a2e_host.search")


@runtime_checkable
class _ExactVectors(Protocol):
    """A store that reads back the float32 vectors of entries by id (SQLite's `vectors_of`):
    what an approximate index (8-bit codes) found is scored again on them."""

    async def vectors_of(self, ids: Sequence[int], dim: int) -> tuple[list[int], np.ndarray]:
        ...


Near = dict[int, list[tuple[StoredEntry, int]]]
# The keyword candidates whose neighbours come with the keyword search (`NearSearch`), as a
# multiple of `neighbour_hits`: the hits are chosen later by the fused order, which mostly
# but not always follows BM25; a hit past these costs one more round trip
_NEAR_FACTOR = 2

_PRIOR_WEIGHT = 10.0  # pseudo-rows of the prior in the match threshold of a query
# embedder name -> (highest similarity of unrelated queries and texts, the unit vectors of
# `ranking.REFERENCE_TEXTS`)
_PRIORS: dict[str, tuple[float, np.ndarray]] = {}
# Seconds `stop()` gives the vector indexes to save what they built (approximate indexes): a
# stopping host is bounded (what is not saved is built again from the stored vectors)
_SAVE_SECONDS = 5.0


class WorkingEntries(Protocol):
    """What the engine needs of a session's working tier (`host.memory.working.WorkingTier`)."""

    def __len__(self) -> int: ...
    def search(self, terms: tuple[str, ...], keys: Sequence[bytes], tags: Sequence[str],
               now: float) -> list[StoredEntry]: ...
    def scored(self, keys: Sequence[bytes], tags: Sequence[str], now: float,
               analyse: Callable[[str], Analysis], keyword: Callable[[Analysis], float],
               ) -> list[StoredEntry]: ...


class SearchEngine:
    """Hybrid search over one store. `start()` loads vectors and starts the worker.

    `busy()` tells the worker whether requests are waiting (then it embeds on one thread);
    `on_batch(n, seconds)` and `on_query_batch(n, seconds)` are told of each embedder call of
    the worker and of the query thread (the metrics).
    """

    def __init__(
        self, store: EntryStore, embedder: Embedder | None, cfg: SearchConfig,
        busy: Callable[[], bool] | None = None,
        on_batch: Callable[[int, float], None] | None = None,
    ) -> None:
        self.store = store
        self.cfg = cfg
        # what the store offers (host/store/base.py), checked once: a runtime Protocol check
        # inspects every method. Shared: the store keeps and searches the vectors (several
        # hosts on one database); local: the engine searches them in memory
        self._shared = store if isinstance(store, VectorSearch) else None
        self._local = store if self._shared is None and isinstance(store, VectorStore) else None
        self._vectors: VectorSearch | VectorStore | None = (
            self._shared if self._shared is not None else self._local)
        self._keywords = store if isinstance(store, KeywordStats) else None
        self._near = store if isinstance(store, NearSearch) else None
        self.shared = self._shared is not None
        self._fetches = self._vectors is not None
        self._bm25 = self._keywords is not None
        self._prior: asyncio.Future[tuple[float, np.ndarray]] | None = None
        self._busy = busy or (lambda: False)
        self._on_batch = on_batch
        # the vectors of a store searched in memory (SQLite): every namespace's (the host's
        # embedder) and client space's, each loaded on its first query, within the budget
        self.vectors: VectorIndexes | None = None
        self.spaces: ClientSpaces | None = None
        self._by_namespace = (store if not self.shared and isinstance(store, NamespaceVectors)
                              else None)
        if self._by_namespace is not None:
            self.vectors = VectorIndexes(
                budget_bytes=cfg.vector_memory_bytes, loader=self._load,
                ann_min_rows=cfg.ann_min_rows, persist_dir=vectors_dir(self._by_namespace.path),
                dtype=cfg.vector_dtype, namespace_share=cfg.vector_namespace_share)
            if isinstance(store, ClientSpaceReads):
                self.spaces = ClientSpaces(store, self.vectors)
        elif isinstance(store, ClientSpaceReads):  # PostgreSQL: the client spaces only
            self.spaces = ClientSpaces(store, VectorIndexes(
                budget_bytes=cfg.vector_memory_bytes, loader=self._load,
                ann_min_rows=cfg.ann_min_rows, dtype=cfg.vector_dtype,
                namespace_share=cfg.vector_namespace_share))
        self.use_embedder(embedder)

    def use_embedder(self, embedder: Embedder | None, kind: str | None = None) -> None:
        """Search with `embedder` (before `start()`): its index, worker and query thread, and
        the relevance calibration of its `kind` (default: `search.embedder`)."""
        cfg = self.cfg
        self.embedder = embedder if self._fetches else None
        kind = kind or (cfg.embedder if self.embedder is not None else "none")
        # pair relevance weights: the configured ones, else those fitted for this embedder,
        # else none (relevance is then the order's logistic, see host.search.ranking)
        self.calibration: list[float] = (list(cfg.calibration)
                                         or ranking.CALIBRATIONS.get(kind, []))
        self.index: VectorIndexes | None = None
        if self.embedder is not None and not self.shared:
            self.index = (self.vectors if self.vectors is not None
                          else VectorIndexes(self.embedder.dim))
        self.worker: EmbeddingWorker | None = None
        self.queries: QueryVectors | None = None
        if self.embedder is not None:
            self.queries = QueryVectors(
                self.embedder, cfg.max_query_chars, cfg.query_cache, cfg.query_batch_chars,
                cfg.batch_size)
            wbusy, on_batch = self._worker_busy, self._on_batch
            if self._shared is not None:
                self.worker = SharedWorker(self._shared, self.embedder, cfg, busy=wbusy,
                                           on_batch=on_batch)
            else:
                assert self._local is not None and self.index is not None
                self.worker = LocalWorker(self._local, self.embedder, cfg, self.index,
                                          lazy=self.vectors is not None, busy=wbusy,
                                          on_batch=on_batch)

    def _load(self, key: str) -> Iterator[tuple[list[int], np.ndarray, list[str],
                                                 list[float | None]]]:
        """The stored rows of an index key (the loader of `self.vectors`; blocking, run in a
        thread): a client space's (`ClientSpaces.load`), or a namespace's own vectors."""
        if "\x00" in key:
            if self.spaces is not None:
                yield from self.spaces.load(key)
            return
        if self.embedder is None or self._by_namespace is None:
            return
        for ids, vecs, places, expires in self._by_namespace.namespace_vectors(
                key, self.embedder.dim):
            yield ids, vecs, [group_of(t, o) for t, o in places], expires

    def _worker_busy(self) -> bool:
        return self._busy() or (self.queries is not None and self.queries.busy)

    @property
    def enabled(self) -> bool:
        """True when vectors take part (an embedder and a store that keeps vectors)."""
        return self.embedder is not None

    @property
    def backlog(self) -> int:
        """Entries waiting for a vector, as last counted (0 without an embedder)."""
        return self.worker.backlog if self.worker is not None else 0

    async def count_backlog(self) -> int:
        """Count the entries waiting for a vector now (0 without an embedder)."""
        return await self.worker.count_backlog() if self.worker is not None else 0

    async def start(self, worker: bool = True) -> None:
        """Record the model (re-embedding everything if it changed) and start the background
        worker (unless `worker` is False). No vector is read here: a namespace's load on its
        first query (`self.vectors`), so a host is ready at once whatever it stores."""
        if self.embedder is None or self.worker is None or self._vectors is None:
            return
        if self._shared is not None and not self._shared.vectors_available:
            log.warning("the store cannot search vectors (no pgvector): keywords only")
            self.embedder = self.worker = self.queries = None
            return
        if await self._vectors.set_vector_model(self.embedder.name, self.embedder.dim):
            log.info("embedding model recorded: %s (entries embedded by another model, if any,"
                     " are re-embedded %s)", self.embedder.name,
                     "in the background" if worker else "by this command")
        if isinstance(self.worker, LocalWorker):
            await asyncio.to_thread(self.worker.load)
        await self.worker.count_backlog()
        self._prior = asyncio.ensure_future(self._calibrate())
        if worker:
            self.worker.start()

    async def stop(self) -> None:
        """Stop the worker at once (a batch in progress is abandoned: its entries stay
        queued for the next start) and the query thread."""
        if self.worker is not None:
            await self.worker.stop()
        if self.vectors is not None:
            await self._save_vectors()
        if self._prior is not None and not self._prior.done():
            self._prior.cancel()
            await asyncio.gather(self._prior, return_exceptions=True)
        if self.queries is not None:
            await self.queries.close()

    async def _save_vectors(self) -> None:
        """Save what the indexes built (approximate indexes), at most `_SAVE_SECONDS`."""
        assert self.vectors is not None
        saving = asyncio.ensure_future(self.vectors.save_all())
        done, _ = await asyncio.wait([saving], timeout=_SAVE_SECONDS)
        if not done:
            log.warning("vector indexes not all saved within %.0f s: those left are built"
                        " again from the stored vectors when next loaded", _SAVE_SECONDS)
            saving.add_done_callback(_retrieved)
        elif saving.exception() is not None:
            log.warning("vector indexes not saved: %s", saving.exception())

    def notify(self) -> int:
        """Tell the worker that entries were committed or deleted; the write's ticket (see
        `search(ticket=...)`), 0 without an embedder."""
        return self.worker.wrote() if self.worker is not None else 0

    async def _calibrate(self) -> tuple[float, np.ndarray]:
        assert self.embedder is not None and self.queries is not None
        cached = _PRIORS.get(self.embedder.name)
        if cached is None:
            emb = self.embedder
            docs = await self.queries.embed_now(emb.embed, list(ranking.REFERENCE_TEXTS))
            qs = await self.queries.embed_now(emb.embed_queries,
                                              list(ranking.REFERENCE_QUERIES))
            cached = _PRIORS[emb.name] = (float((qs @ docs.T).max()), docs.astype(np.float64))
        return cached

    async def embed_pending(self) -> int:
        """Embed one batch of queued entries (newest first) and store their vectors; the
        number handled (0 when nothing is queued)."""
        if self.worker is None:
            return 0
        return (await self.worker.embed_pending())[0]

    async def drain(self, progress: Callable[[int, int], None] | None = None) -> int:
        """Embed until the queue is empty (on a shared store, until other hosts' workers
        finished what they claimed too), calling `progress(done, remaining)` after each
        batch; the number of entries handled."""
        if self.worker is None:
            return 0
        return await self.worker.drain(progress)

    async def reindex(self, progress: Callable[[int, int], None] | None = None) -> int:
        """Re-embed every entry now (the `a2e-host reindex` command)."""
        if self.embedder is None or self._vectors is None:
            return 0
        await self._vectors.requeue_vectors()
        return await self.drain(progress)

    # -- the query path ------------------------------------------------------------------

    async def search(
        self, scope: Scope, q: Query, text: str, now: float, candidates: int,
        working: WorkingEntries | None = None, ticket: int = 0, conn: str = "",
    ) -> list[StoredEntry]:
        """Candidates for `text` that `q` lets `scope` read, each with its `relevance` in (0, 1)
        (of the pair query/entry alone) and its order `fused` (`host.search.ranking`);
        unordered, `limit` is the caller's.

        `working` (the session's working tier, when the query reads it) adds its entries that
        match `q`'s keys and tags and share a term with the query: each scored with the BM25 it
        would have in the store's keyword index (`host.text.bm25`), then fused with the
        stored candidates as one pool, so relevance means the same in every tier. Working
        entries have no vector (embedding a scratch pad's every write costs ~37 ms of a core
        each): they rank on their keyword z-score, as a stored entry whose vector is not
        written yet. With a store that has no BM25 their relevance is the store's (term share).

        `ticket` is the newest write ticket (`notify()`) of the asking connection: the search
        first waits, at most `vector_wait` seconds, until the worker has embedded what the
        namespace had queued up to it (read-your-writes). `conn` names the connection for the
        fair share of the query thread (`host.search.queries`).
        """
        cfg = self.cfg
        words = self._keyword_text(text)
        ns = scope.namespace
        wait = (self.worker is not None and bool(q.tiers)
                and ticket > self.worker.through(ns))
        index: VectorIndex | StoreVectors | None = (
            await self._index_of(ns) if self.index is not None and q.tiers else None)
        qv_future: asyncio.Future[np.ndarray] | None = None
        if self.queries is not None and (
                self.shared and q.tiers or index is not None and len(index) > 0 or wait):
            # the query's vector on its thread while the keyword search runs here
            qv_future = asyncio.ensure_future(self.queries.vector(text, ns, conn))
            qv_future.add_done_callback(_retrieved)
        if wait:
            assert self.worker is not None
            await self.worker.caught_up(ns, ticket, cfg.vector_wait)
            if self.index is not None:
                index = await self._index_of(ns)
        # the store returns its best candidates first: asking for the pool alone keeps the same
        # ones and spares building (and scoring) the rest of `candidates` rows
        pool = min(candidates, cfg.fusion_pool)
        near: Near = {}
        if not q.tiers:
            kw: list[StoredEntry] = []
        elif self._near is not None and cfg.neighbour_hits > 0 and self._fetches:
            kw, near = await self._near.search_near(
                scope, q, words, now, pool, cfg.neighbour_hits * _NEAR_FACTOR,
                cfg.neighbour_span)
        else:
            kw = await self.store.search(scope, q, words, now, pool)
        if not self._bm25 or any(e.keyword is None for e in kw):
            # a store without BM25: its own relevance, the working tier's term share alike
            if qv_future is not None:
                await asyncio.gather(qv_future, return_exceptions=True)
            own = (working.search(query_terms(words), q.keys, q.tags, now)
                   if working is not None and len(working) else [])
            return kw + own
        own = await self._working(scope, q, words, now, working)
        if qv_future is None or (index is None and not self.shared):
            return await self._fused(scope, q, now, words, kw, np.full(len(kw), np.nan), own,
                                     None, None, near=near)
        qv = await qv_future
        if self.shared:  # the store ranks, within visibility, in its own query
            index = await self._shared_vectors(scope, q, qv, now, [e.id for e in kw])
        assert index is not None
        hits = await self._nearest(scope, q, qv, now, index)
        seen = {e.id for e in kw}
        prior, docs = await self._background_prior()
        ref = float((docs @ qv.astype(np.float64)).mean())  # the pair relevance's `reference`
        extra = [int(i) for i in self._standouts(hits, prior, ref) if int(i) not in seen]
        assert self._vectors is not None  # vectors took part: the store keeps them
        found = await self._vectors.fetch(scope, q, extra, now) if extra else []
        stored = kw + found
        sims = await self._similarity(index, qv, [e.id for e in stored])
        return await self._fused(scope, q, now, words, stored, sims, own, qv, index, ref, near)

    async def _fused(
        self, scope: Scope, q: Query, now: float, text: str, stored: list[StoredEntry],
        sims: np.ndarray, own: list[StoredEntry], qv: np.ndarray | None, index: Any,
        ref: float = 0.0, near: Near | None = None,
    ) -> list[StoredEntry]:
        """The stored candidates (`sims`: their similarities), their neighbours when the store
        can fetch them (`_neighbours`; `near`: those the keyword search brought), and the
        working entries `own`, scored for the query `text` (`host.search.ranking.score`;
        `ref`: the query's reference similarity)."""
        links: dict[int, tuple[int, int]] = {}
        added = 0
        # each candidate's coverage of the query, computed once (it reads the entry's text)
        cov = ranking.coverages(text, stored) if self.calibration else None
        if self.cfg.neighbour_hits > 0 and stored and self._fetches:
            stored, sims, links, added = await self._neighbours(
                scope, q, now, text, stored, sims, qv, index, ref, cov, near)
        if cov is not None:
            cov = np.concatenate([cov, ranking.coverages(text, stored[len(cov):] + own)])
        return ranking.score(stored + own, text,
                             np.concatenate([sims, np.full(len(own), np.nan)]), self.cfg,
                             self.calibration, ref, links, len(stored) - added, added, cov)

    async def _neighbours(
        self, scope: Scope, q: Query, now: float, text: str, stored: list[StoredEntry],
        sims: np.ndarray, qv: np.ndarray | None, index: Any, ref: float = 0.0,
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
        assert self._vectors is not None  # called when the store can fetch (`_fused`)
        near = near or {}
        ask = [h for h in hits if h[0] not in near]
        found = (await self._vectors.neighbours(scope, q, ask, cfg.neighbour_span, now)
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
            more = (await self._similarity(index, qv, [e.id for e in added])
                    if index is not None and qv is not None else np.full(len(added), np.nan))
            sims = np.concatenate([sims, more])
        return stored, sims, links, len(added)

    async def _working(
        self, scope: Scope, q: Query, text: str, now: float, working: WorkingEntries | None
    ) -> list[StoredEntry]:
        """The working entries matching `q` and the query, `keyword` set on the store's scale."""
        if working is None or not len(working):
            return []
        keywords = self._keywords
        assert keywords is not None  # called for a BM25 store only (`search`)
        stats = await keywords.keyword_stats(scope, text, q, now)
        if not stats.terms:
            return []
        return working.scored(q.keys, q.tags, now, keywords.analyse,
                              lambda a: bm25(stats, a))

    async def _index_of(self, namespace: str) -> Any:
        """The in-memory index of `namespace`'s vectors, loaded if it is not (None: none, or
        its load failed: the query then answers by keywords, and the next one loads again)."""
        assert self.index is not None
        index = self.index.get(namespace)
        if index is not None:
            return index
        try:
            return await self.index.open(namespace)
        except Exception:
            log.exception("vectors of a namespace not loaded: its query answers by keywords")
            return None

    async def _nearest(
        self, scope: Scope, q: Query, qv: np.ndarray, now: float,
        index: VectorIndex | StoreVectors,
    ) -> Hits:
        """The `fusion_pool` nearest rows `q` lets `scope` read, from the in-memory `index`
        (tier/owner groups, TTL, and the ids allowed by key/tag filters) or, for a shared
        store, as `_shared_vectors` fetched them."""
        if isinstance(index, StoreVectors):
            return index.hits
        groups = [group_of(t, owner_for(t, scope.agent)) for t in q.tiers]
        assert self._local is not None  # an in-memory index: a local store's vectors
        only = await self._local.allowed_ids(scope, q, now) if q.narrowed else None
        pool = self.cfg.fusion_pool
        if not approximate(index) or not isinstance(self._local, _ExactVectors):
            return index.search(qv, pool, groups, now, only)
        # approximate (8-bit codes): the best `pool` + margin scored again on float32, cut
        hits = index.search(qv, rescore_count(pool), groups, now, only)
        sims = await self._exact_sims(qv, hits.ids.tolist(),
                                      hits.similarities.astype(np.float64))
        order = np.lexsort((-hits.ids, -sims))[:pool]  # best first, ties: the newer
        return dataclasses.replace(hits, ids=hits.ids[order],
                                   similarities=sims[order].astype(np.float32))

    async def _exact_sims(self, qv: np.ndarray, ids: Sequence[int], approx: np.ndarray
                          ) -> np.ndarray:
        """`approx` (similarities of `qv` to `ids` from an approximate index; NaN: no row) with
        each id the store has a float32 vector for scored on it instead."""
        assert isinstance(self._local, _ExactVectors)
        out = np.array(approx, dtype=np.float64)
        ask = [int(i) for i, s in zip(ids, out.tolist(), strict=True) if s == s]
        if not ask:
            return out
        q = np.asarray(qv, dtype=np.float32).reshape(-1)
        got, vecs = await self._local.vectors_of(ask, q.size)
        exact = dict(zip(got, (vecs @ q).astype(np.float64).tolist(), strict=True))
        for j, i in enumerate(ids):
            s = exact.get(int(i))
            if s is not None and out[j] == out[j]:
                out[j] = s
        return out

    async def _shared_vectors(
        self, scope: Scope, q: Query, qv: np.ndarray, now: float, candidates: Sequence[Any] = ()
    ) -> StoreVectors:
        """For a `VectorSearch` store: its nearest rows to `qv` that `q` lets `scope` read, and
        the similarity of the keyword `candidates` (their ids) in the same round trip, as a
        `StoreVectors` answering like an index (`_similarity` asks the store for the rest)."""
        assert self.embedder is not None
        name = self.embedder.name
        also = [int(i) for i in candidates if i is not None]
        assert self._shared is not None
        hits = await self._shared.nearest_vectors(
            scope, q, name, qv, now, self.cfg.fusion_pool, self.cfg.vector_sample, also)
        known = dict(zip(
            hits.ids.tolist(), hits.similarities.astype(np.float64).tolist(), strict=True))
        for i in also:  # a candidate without a vector is NaN, known: not asked again
            known.setdefault(i, hits.also.get(i, np.nan))
        return StoreVectors(hits, known)

    async def _similarity(
        self, index: VectorIndex | StoreVectors, qv: np.ndarray, ids: Sequence[int | None]
    ) -> np.ndarray:
        """Exact similarity of `qv` to each of `ids` (NaN without a vector): from the in-memory
        index, or from a shared store for the ids it has not answered for yet."""
        if isinstance(index, StoreVectors):
            ask = [int(i) for i in ids if i is not None and int(i) not in index.known]
            if ask:
                assert self.embedder is not None and self._shared is not None
                sims = await self._shared.vector_similarity(self.embedder.name, qv, ask)
                index.known.update(zip(ask, sims.tolist(), strict=True))
        rows = [-1 if i is None else int(i) for i in ids]  # -1: no row
        sims = index.similarity(qv, rows)
        if approximate(index) and isinstance(self._local, _ExactVectors):
            sims = await self._exact_sims(qv, rows, sims)  # 8-bit codes: float32 instead
        return sims

    def _keyword_text(self, text: str) -> str:
        """`text` for keyword search: as it is, or, when it is long, its first
        `search.max_query_terms` distinct terms (which read back as the same terms)."""
        limit = self.cfg.max_query_terms
        if len(text) <= limit * 16:
            return text
        return " ".join(query_terms(text[: limit * 64])[:limit])

    async def _background_prior(self) -> tuple[float, np.ndarray]:
        if self._prior is None:
            self._prior = asyncio.ensure_future(self._calibrate())
        return await asyncio.shield(self._prior)

    def _standouts(self, hits: Hits, prior: float, ref: float) -> np.ndarray:
        """The hit ids whose similarity passes the match threshold: `vector_min_z` standard
        deviations above the query's mean similarity to the memory it may read, blended (as
        `_PRIOR_WEIGHT` rows) with the highest similarity unrelated texts reach (`prior`), so
        that in a memory of a few entries only a clear paraphrase counts; and, in any memory,
        those whose cosine alone gives relevance 0.5 (`ref`: the query's reference similarity)."""
        n = float(hits.allowed)
        scope = hits.mean + self.cfg.vector_min_z * hits.std
        threshold = (n * scope + _PRIOR_WEIGHT * prior) / (n + _PRIOR_WEIGHT)
        half = ranking.cosine_at_half(self.calibration, ref)
        return hits.ids[(hits.similarities >= threshold) | (hits.similarities >= half)]


def vectors_dir(db: str) -> Path | None:
    """Where the vector indexes of SQLite file `db` are saved: `<db>.vectors` beside it
    (None for an in-memory database)."""
    if not db or db == ":memory:" or db.startswith("file:"):
        return None
    return Path(db + ".vectors")


def _retrieved(fut: asyncio.Future[Any]) -> None:
    """Mark a future's exception as seen (a query vector nobody needed in the end)."""
    if not fut.cancelled():
        fut.exception()


class StoreVectors:
    """What a `VectorSearch` store answered for one query, with the in-memory index's read
    interface (`similarity`), so the rest of the query path is the same code for both."""

    def __init__(self, hits: Hits, known: dict[int, float]) -> None:
        self.hits = hits
        self.known = known

    def __len__(self) -> int:
        return len(self.known)

    def similarity(self, query: np.ndarray, ids: Sequence[int]) -> np.ndarray:
        """Similarity of the query to each of `ids` as the store answered it (among the nearest,
        or asked by `SearchEngine._similarity`); NaN for an id without a vector or not asked."""
        return np.array([self.known.get(int(i), np.nan) for i in ids], dtype=np.float64)
