"""`SearchEngine`: hybrid retrieval (keywords + vectors) and the background embedding worker.

Stores are acknowledged after their commit; the worker then embeds the queued entries in
batches on a thread of its own and writes their vectors (BLOBs, in the store) and into the
in-memory `VectorIndexes`. So an entry is findable by keywords at once and by meaning as soon as
its vector is written. The store records the embedder's name: a different embedder at start
drops every vector and re-embeds in the background (`a2e-host reindex` does it on demand).

A query search (see docs/search.md):
1. keyword candidates from the store (BM25, visibility and filters in SQL), the best
   `fusion_pool`;
2. the query's vector (its own thread, so it never waits behind a background batch) and the
   `fusion_pool` nearest rows among those the agent may read (tier/owner groups, TTL, and the
   ids allowed by key/tag filters, all applied before ranking); a vector-only hit counts when it
   stands `vector_min_z` standard deviations above the query's mean similarity to that memory;
3. those hits read back through the store, which checks visibility again;
4. the session's working entries (when the query reads that tier) scored with the BM25 they
   would have in the store's index (`host.text.bm25`), joining the candidates;
5. the entries written just before and after the best `neighbour_hits` candidates (same tier
   and owner, readable) join the candidates;
6. BM25 and exact similarity of every candidate fused (`host.search.fusion`) into `relevance`;
   a neighbour of a candidate that stands out ranks at least `neighbour_weight` ** distance of
   that candidate's fused z-score (a reply written right after a matching question).

A store that searches vectors itself (`host.store.base.VectorSearch`: PostgreSQL with pgvector,
shared by several hosts) keeps no vectors in this process: the worker claims queued entries
from the store and writes their vectors back through it, step 2 asks the store for the nearest
readable rows (visibility in its WHERE, before ranking), and the exact similarity of the other
candidates comes from the store too. Everything else is the same code on both backends.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, runtime_checkable

import numpy as np

from host.search.embed import Embedder
from host.search.fusion import fuse
from host.search.vectors import Hits, Pending, VectorIndex, VectorIndexes, digest, group_of
from host.store.base import Query, Scope, StoredEntry, VectorSearch, owner_for
from host.text.bm25 import Analysis, Bm25Stats, bm25
from host.text.keyword import query_terms

__all__ = ["KeywordStats", "SearchEngine", "StoreVectors", "VectorStore", "WorkingEntries"]

log = logging.getLogger("a2e_host.search")

# Texts on unrelated subjects: the similarity of these queries to these documents is what
# "no relation" looks like for an embedder, the prior for memories too small to tell.
_CALIBRATION_DOCS = (
    "The meeting was moved to Thursday at three.", "She planted tomatoes in the garden.",
    "The invoice total is 420 euros.", "Our cat sleeps on the windowsill.",
    "The train to Lyon leaves from platform 4.", "He is allergic to peanuts.",
    "The database backup runs every night at 2 am.", "They hiked up the mountain on Sunday.",
    "The recipe needs two cups of flour.", "My sister plays the violin.",
    "The server returned a 500 error.", "We watched a documentary about whales.",
    "The lease ends in September.", "Paint the fence before the rain.",
    "The user prefers dark mode.", "Grandpa told stories about the war.",
)
_CALIBRATION_QUERIES = (
    "What is the capital of Peru?", "How do I reset my password?",
    "Which football team won yesterday?", "When is the dentist appointment?",
    "What does the error log say?", "Who wrote this poem?",
)
_PRIOR_WEIGHT = 10.0  # pseudo-rows of the prior in the match threshold of a query
_PRIORS: dict[str, tuple[float, float]] = {}  # embedder name -> (mean, max) unrelated similarity


@runtime_checkable
class VectorStore(Protocol):
    """What the engine needs of a store beyond `EntryStore` (SQLiteEntryStore has it)."""

    async def search(
        self, scope: Scope, q: Query, text: str, now: float, candidates: int
    ) -> list[StoredEntry]: ...
    async def fetch(self, scope: Scope, q: Query, ids: Sequence[int], now: float
                    ) -> list[StoredEntry]: ...
    async def allowed_ids(self, scope: Scope, q: Query, now: float) -> np.ndarray: ...
    async def pending_vectors(self, limit: int) -> list[tuple[Pending, bytes | None]]: ...
    async def write_vectors(self, rows: Sequence[tuple[int, str, bytes | None]]) -> list[int]: ...
    async def set_vector_model(self, name: str, dim: int) -> bool: ...
    async def requeue_vectors(self) -> int: ...
    async def vector_queue(self) -> int: ...
    async def vectors_gone(self) -> list[int]: ...
    async def clear_vectors_gone(self, ids: Sequence[int]) -> None: ...
    def load_vectors(self, dim: int) -> Iterator[tuple[list[Pending], np.ndarray]]: ...


@runtime_checkable
class KeywordStats(Protocol):
    """A store whose keyword search is BM25 and that can score a text outside its index on the
    same scale (SQLite and PostgreSQL stores have it; see `host.text.bm25`)."""

    async def keyword_stats(self, scope: Scope, text: str, q: Query | None = None,
                            now: float | None = None) -> Bm25Stats: ...
    def analyse(self, text: str) -> Analysis: ...


class WorkingEntries(Protocol):
    """What the engine needs of a session's working tier (`host.memory.working.WorkingTier`)."""

    def __len__(self) -> int: ...
    def search(self, terms: tuple[str, ...], keys: Sequence[bytes], tags: Sequence[str],
               now: float) -> list[StoredEntry]: ...
    def scored(self, keys: Sequence[bytes], tags: Sequence[str], now: float,
               analyse: Callable[[str], Analysis], keyword: Callable[[Analysis], float],
               ) -> list[StoredEntry]: ...


class SearchEngine:
    """Hybrid search over one store. `start()` loads vectors and starts the worker."""

    def __init__(self, store: Any, embedder: Embedder | None, cfg: Any) -> None:
        self.store = store
        self.cfg = cfg
        # shared: the store keeps and searches the vectors (several hosts on one database)
        self.shared = isinstance(store, VectorSearch)
        # what the store offers, checked once (a runtime Protocol check inspects every method)
        self._fetches = self.shared or isinstance(store, VectorStore)
        self._bm25 = isinstance(store, KeywordStats)
        self.embedder = embedder if self._fetches else None
        self.index = (VectorIndexes(self.embedder.dim)
                      if self.embedder is not None and not self.shared else None)
        self._embed_pool: ThreadPoolExecutor | None = None
        self._query_pool: ThreadPoolExecutor | None = None
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._prior: asyncio.Future[tuple[float, float]] | None = None

    @property
    def enabled(self) -> bool:
        """True when vectors take part (an embedder and a store that keeps vectors)."""
        return self.embedder is not None

    async def start(self, worker: bool = True) -> None:
        """Record the model (re-embedding everything if it changed), load the stored vectors
        into memory, and start the background worker (unless `worker` is False)."""
        if self.embedder is None:
            return
        if self.shared and not self.store.vectors_available:
            log.warning("the store cannot search vectors (no pgvector): keywords only")
            self.embedder = None
            return
        self._embed_pool = ThreadPoolExecutor(1, thread_name_prefix="a2e-embed")
        self._query_pool = ThreadPoolExecutor(1, thread_name_prefix="a2e-embed-query")
        loop = asyncio.get_running_loop()
        if await self.store.set_vector_model(self.embedder.name, self.embedder.dim):
            log.info("embedding model recorded: %s (entries embedded by another model, if any,"
                     " are re-embedded in the background)", self.embedder.name)
        if not self.shared:
            await loop.run_in_executor(self._embed_pool, self._load)
        self._prior = asyncio.ensure_future(self._calibrate())
        if worker:
            self._wake = asyncio.Event()
            self._task = asyncio.create_task(self._run(), name="a2e-embed-worker")

    async def stop(self) -> None:
        """Stop the worker (a batch in flight finishes first) and release the threads."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if self._prior is not None and not self._prior.done():
            await asyncio.gather(self._prior, return_exceptions=True)
        for pool in (self._embed_pool, self._query_pool):
            if pool is not None:
                await asyncio.to_thread(pool.shutdown, True)
        self._embed_pool = self._query_pool = None

    def notify(self) -> None:
        """Tell the worker that entries were committed or deleted."""
        if self._wake is not None:
            self._wake.set()

    # -- the background worker -----------------------------------------------------------

    def _load(self) -> None:
        assert self.embedder is not None and self.index is not None
        n = 0
        for rows, vecs in self.store.load_vectors(self.embedder.dim):
            by_ns: dict[str, list[int]] = {}
            for j, p in enumerate(rows):
                by_ns.setdefault(p.namespace, []).append(j)
            for ns, js in by_ns.items():
                self.index.add(ns, [rows[j].id for j in js], vecs[js],
                               [group_of(rows[j].tier, rows[j].owner) for j in js],
                               [rows[j].expires_at for j in js])
            n += len(rows)
        if n:
            log.info("loaded %d vectors", n)

    async def _calibrate(self) -> tuple[float, float]:
        assert self.embedder is not None
        cached = _PRIORS.get(self.embedder.name)
        if cached is None:
            emb = self.embedder
            loop = asyncio.get_running_loop()
            docs = await loop.run_in_executor(self._query_pool, emb.embed, list(_CALIBRATION_DOCS))
            qs = await loop.run_in_executor(
                self._query_pool, emb.embed_queries, list(_CALIBRATION_QUERIES))
            sims = qs @ docs.T
            cached = _PRIORS[emb.name] = (float(sims.mean()), float(sims.max()))
        return cached

    async def embed_pending(self) -> int:
        """Embed one batch of queued entries and store their vectors; the number handled
        (0 when nothing is queued). Also drops from memory the vectors deletes removed."""
        if self.embedder is not None and self.shared:
            return await self._embed_shared()
        if self.embedder is None or self.index is None:
            return 0
        gone = await self.store.vectors_gone()
        if gone:
            self.index.remove(gone)
            await self.store.clear_vectors_gone(gone)
        batch = await self.store.pending_vectors(self.cfg.batch_size)
        if not batch:
            return 0
        fresh = [p for p, d in batch if d is None or d != digest(p.text)
                 or not self.index.set_meta(p.id, group_of(p.tier, p.owner), p.expires_at)]
        vecs = np.zeros((0, self.embedder.dim), dtype=np.float32)
        if fresh:
            loop = asyncio.get_running_loop()
            vecs = await loop.run_in_executor(
                self._embed_pool, self.embedder.embed,
                [p.text[: self.cfg.max_embed_chars] for p in fresh])
        blobs = {p.id: vecs[j].tobytes() for j, p in enumerate(fresh)}
        done = set(await self.store.write_vectors(
            [(p.id, p.text, blobs.get(p.id)) for p, _ in batch]))
        for j, p in enumerate(fresh):
            if p.id in done:
                self.index.add(p.namespace, [p.id], vecs[j:j + 1],
                               [group_of(p.tier, p.owner)], [p.expires_at])
        return len(batch)

    async def _embed_shared(self) -> int:
        """`embed_pending` for a `VectorSearch` store: claim a batch (other hosts skip it),
        embed it, write the vectors through the store; the number claimed."""
        assert self.embedder is not None
        batch = await self.store.claim_vectors(self.cfg.batch_size, self.cfg.embed_lease)
        if not batch:
            return 0
        vecs = await asyncio.get_running_loop().run_in_executor(
            self._embed_pool, self.embedder.embed, [p.text for p, _seq in batch])
        await self.store.put_vectors(
            self.embedder.name, [(p.id, seq, vecs[j]) for j, (p, seq) in enumerate(batch)])
        return len(batch)

    async def drain(self, progress: Callable[[int, int], None] | None = None) -> int:
        """Embed until the queue is empty (on a shared store, until other hosts' workers
        finished what they claimed too), calling `progress(done, remaining)` after each
        batch; the number of entries handled."""
        if self.embedder is None:
            return 0
        done = 0
        while True:
            n = await self.embed_pending()
            if n:
                done += n
                if progress is not None:
                    progress(done, await self.store.vector_queue())
            elif not self.shared or not await self.store.vector_queue():
                return done
            else:  # the rest is claimed by other workers: wait for them (or their lease)
                await asyncio.sleep(0.05)

    async def reindex(self, progress: Callable[[int, int], None] | None = None) -> int:
        """Re-embed every entry now (the `a2e-host reindex` command)."""
        if self.embedder is None:
            return 0
        await self.store.requeue_vectors()
        return await self.drain(progress)

    async def _run(self) -> None:
        assert self._wake is not None
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=5.0)
            except TimeoutError:
                pass
            self._wake.clear()
            try:
                while await self.embed_pending():
                    await asyncio.sleep(0)
            except asyncio.CancelledError:
                raise
            except Exception:  # a failing endpoint or model: retry on the next wake-up
                log.exception("background embedding failed; retrying in 5 s")
                await asyncio.sleep(5.0)

    # -- the query path ------------------------------------------------------------------

    async def search(
        self, scope: Scope, q: Query, text: str, now: float, candidates: int,
        working: WorkingEntries | None = None,
    ) -> list[StoredEntry]:
        """Candidates for `text` that `q` lets `scope` read, each with its fused `relevance`
        in (0, 1); unordered, `limit` is the caller's.

        `working` (the session's working tier, when the query reads it) adds its entries that
        match `q`'s keys and tags and share a term with the query: each scored with the BM25 it
        would have in the store's keyword index (`host.text.bm25`), then fused with the
        stored candidates as one pool, so relevance means the same in every tier. Working
        entries have no vector (embedding a scratch pad's every write costs ~37 ms of a core
        each): they rank on their keyword z-score, as a stored entry whose vector is not
        written yet. With a store that has no BM25 their relevance is the store's (term share).
        """
        cfg = self.cfg
        words = self._keyword_text(text)
        index: VectorIndex | StoreVectors | None = (
            self.index.get(scope.namespace) if self.index is not None and q.tiers else None)
        qv_future = None
        if self.embedder is not None and (
                self.shared and q.tiers or index is not None and len(index) > 0):
            # embed the query on its thread while the keyword search runs here
            qv_future = asyncio.get_running_loop().run_in_executor(
                self._query_pool, self.embedder.embed_queries, [text[: cfg.max_embed_chars]])
        # the store returns its best candidates first: asking for the pool alone keeps the same
        # ones and spares building (and scoring) the rest of `candidates` rows
        kw = (await self.store.search(scope, q, words, now, min(candidates, cfg.fusion_pool))
              if q.tiers else [])
        if not self._bm25 or any(e.keyword is None for e in kw):
            # a store without BM25: its own relevance, the working tier's term share alike
            if qv_future is not None:
                await asyncio.gather(qv_future, return_exceptions=True)
            own = (working.search(query_terms(words), q.keys, q.tags, now)
                   if working is not None and len(working) else [])
            return kw + own
        own = await self._working(scope, q, words, now, working)
        if qv_future is None or (index is None and not self.shared):
            return await self._fused(scope, q, now, kw, np.full(len(kw), np.nan), own, None, None)
        qv = (await qv_future)[0]
        if self.shared:  # the store ranks, within visibility, in its own query
            index = await self._shared_vectors(scope, q, qv, now)
        assert index is not None
        hits = await self._nearest(scope, q, qv, now, index)
        seen = {e.id for e in kw}
        extra = [int(i) for i in self._standouts(hits, await self._background_prior())
                 if int(i) not in seen]
        found = await self.store.fetch(scope, q, extra, now) if extra else []
        stored = kw + found
        sims = await self._similarity(index, qv, [e.id for e in stored])
        return await self._fused(scope, q, now, stored, sims, own, qv, index)

    async def _fused(
        self, scope: Scope, q: Query, now: float, stored: list[StoredEntry], sims: np.ndarray,
        own: list[StoredEntry], qv: np.ndarray | None, index: Any,
    ) -> list[StoredEntry]:
        """The stored candidates (`sims`: their similarities), their neighbours when the store
        can fetch them (`_neighbours`), and the working entries `own`, with fused relevance."""
        links: dict[int, tuple[int, int]] = {}
        added = 0
        if self.cfg.neighbour_hits > 0 and stored and self._fetches:
            stored, sims, links, added = await self._neighbours(
                scope, q, now, stored, sims, qv, index)
        return _with_relevance(stored + own, np.concatenate([sims, np.full(len(own), np.nan)]),
                               self.cfg, links, len(stored) - added, added)

    async def _neighbours(
        self, scope: Scope, q: Query, now: float, stored: list[StoredEntry], sims: np.ndarray,
        qv: np.ndarray | None, index: Any,
    ) -> tuple[list[StoredEntry], np.ndarray, dict[int, tuple[int, int]], int]:
        """Append the entries written just before and after the best candidates (row ids within
        `neighbour_span`, same tier and owner, readable under `q`) to the candidates; also the
        links {neighbour id: (candidate id, distance)} (see `_with_relevance`) and how many
        entries were appended."""
        cfg = self.cfg
        first = fuse(np.array([e.keyword or 0.0 for e in stored]), sims,
                     cfg.keyword_weight, cfg.vector_weight)
        by_id = {e.id: e for e in stored}
        wanted: dict[int, tuple[StoredEntry, int]] = {}
        for j in np.argsort(-first)[: cfg.neighbour_hits]:
            hit = stored[int(j)]
            assert hit.id is not None
            for d in range(1, cfg.neighbour_span + 1):
                for n in (hit.id - d, hit.id + d):
                    if n not in wanted:
                        wanted[n] = (hit, d)
        missing = [n for n in wanted if n not in by_id]
        fetched = await self.store.fetch(scope, q, missing, now) if missing else []
        links: dict[int, tuple[int, int]] = {}
        added = []
        for e in fetched:
            hit, d = wanted[int(e.id or 0)]
            if e.tier == hit.tier and e.owner == hit.owner:
                links[int(e.id or 0)] = (int(hit.id or 0), d)
                added.append(e)
        for n, (hit, d) in wanted.items():
            e = by_id.get(n)
            if e is not None and e.tier == hit.tier and e.owner == hit.owner:
                links[n] = (int(hit.id or 0), d)
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
        stats = await self.store.keyword_stats(scope, text, q, now)
        if not stats.terms:
            return []
        return working.scored(q.keys, q.tags, now, self.store.analyse,
                              lambda a: bm25(stats, a))

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
        only = await self.store.allowed_ids(scope, q, now) if (q.keys or q.tags) else None
        return index.search(qv, self.cfg.fusion_pool, groups, now, only)

    async def _shared_vectors(
        self, scope: Scope, q: Query, qv: np.ndarray, now: float
    ) -> StoreVectors:
        """For a `VectorSearch` store: its nearest rows to `qv` that `q` lets `scope` read, as a
        `StoreVectors` answering like an index (`_similarity` asks the store for the rest)."""
        assert self.embedder is not None
        name = self.embedder.name
        hits = await self.store.nearest_vectors(
            scope, q, name, qv, now, self.cfg.fusion_pool, self.cfg.vector_sample)
        return StoreVectors(hits, dict(zip(
            hits.ids.tolist(), hits.similarities.astype(np.float64).tolist(), strict=True)))

    async def _similarity(
        self, index: VectorIndex | StoreVectors, qv: np.ndarray, ids: Sequence[int | None]
    ) -> np.ndarray:
        """Exact similarity of `qv` to each of `ids` (NaN without a vector): from the in-memory
        index, or from a shared store for the ids it has not answered for yet."""
        if isinstance(index, StoreVectors):
            ask = [int(i) for i in ids if i is not None and int(i) not in index.known]
            if ask:
                assert self.embedder is not None
                sims = await self.store.vector_similarity(self.embedder.name, qv, ask)
                index.known.update(zip(ask, sims.tolist(), strict=True))
        return index.similarity(qv, [-1 if i is None else int(i) for i in ids])  # -1: no row

    def _keyword_text(self, text: str) -> str:
        """`text` for keyword search: as it is, or, when it is long, its first
        `search.max_query_terms` distinct terms (which read back as the same terms)."""
        limit = self.cfg.max_query_terms
        if len(text) <= limit * 16:
            return text
        return " ".join(query_terms(text[: limit * 64])[:limit])

    async def _background_prior(self) -> tuple[float, float]:
        if self._prior is None:
            self._prior = asyncio.ensure_future(self._calibrate())
        return await asyncio.shield(self._prior)

    def _standouts(self, hits: Hits, prior: tuple[float, float]) -> np.ndarray:
        """The hit ids whose similarity passes the match threshold: `vector_min_z` standard
        deviations above the query's mean similarity to the memory it may read, blended (as
        `_PRIOR_WEIGHT` rows) with the highest similarity unrelated texts reach, so that in a
        memory of a few entries only a clear paraphrase counts."""
        n = float(hits.allowed)
        scope = hits.mean + self.cfg.vector_min_z * hits.std
        threshold = (n * scope + _PRIOR_WEIGHT * prior[1]) / (n + _PRIOR_WEIGHT)
        return hits.ids[hits.similarities >= threshold]


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


def _with_relevance(
    entries: list[StoredEntry], sims: np.ndarray, cfg: Any,
    links: dict[int, tuple[int, int]] | None = None, first: int = 0, added: int = 0,
) -> list[StoredEntry]:
    """Set each entry's fused relevance from its `keyword` (BM25, None as 0) and `sims`
    (kept as its `similarity`, None for NaN).

    With `links` ({neighbour id: (candidate id, distance)}): the `added` entries after the
    first `first` are neighbours brought in, scored on the scale of the other candidates (they
    do not move the mean and deviation), and a neighbour of a candidate that stands out (fused
    z > 0) takes the larger of its own fused z and the candidate's times `neighbour_weight` **
    distance: the turn that answers a matching question, written next to it, ranks near it."""
    if not entries:
        return entries
    keyword = np.array([e.keyword or 0.0 for e in entries])
    basis = None
    if added:
        basis = np.ones(len(entries), dtype=bool)
        basis[first:first + added] = False
    rel = fuse(keyword, sims, cfg.keyword_weight, cfg.vector_weight, basis)
    similarity = np.asarray(sims, dtype=np.float64)
    if links:
        z = np.log(np.clip(rel, 1e-12, None) / np.clip(1.0 - rel, 1e-12, None))
        pos = {e.id: j for j, e in enumerate(entries) if e.id is not None}
        lifted = z.copy()
        for n, (h, d) in links.items():
            jn, jh = pos.get(n), pos.get(h)
            if jn is not None and jh is not None and z[jh] > 0:
                lifted[jn] = max(lifted[jn], z[jh] * cfg.neighbour_weight ** d)
        rel = 1.0 / (1.0 + np.exp(-lifted))
        # a neighbour brought in that no standing-out candidate lifted is no match
        keep = np.ones(len(entries), dtype=bool)
        keep[first:first + added] = lifted[first:first + added] > z[first:first + added]
        entries = [e for e, k in zip(entries, keep.tolist(), strict=True) if k]
        rel = rel[keep]
        similarity = similarity[keep]
    for e, r, v in zip(entries, rel.tolist(), similarity.tolist(), strict=True):
        e.relevance = r
        e.similarity = v if math.isfinite(v) else None  # a score part the memory browser shows
    return entries
