"""`SearchEngine`: hybrid retrieval (keywords + vectors) over one store, and its lifecycle.

The engine puts together what a store needs to be searched: the background worker that embeds
stored entries (`host.search.worker`: batches, newest first, both cores while the host is idle),
the query vectors (`host.search.queries`), the store's vectors as the query path reads them
(`host.search.vectors`: in this host's memory, or searched by a shared database), and the
query path itself (`host.search.retrieve`, whose docstring lists a query's steps). This module
starts, stops, drains and reindexes them, and swaps the embedder; it holds no query step.

A store that searches vectors itself (`host.store.interface.VectorSearch`: PostgreSQL with pgvector,
shared by several hosts) keeps no vectors in this process: its worker is a `SharedWorker` and
its vectors a `SharedVectors`; a store the host searches in memory (SQLite) has a `LocalWorker`
and `LocalVectors` over the same `VectorIndexes`. Everything else is the same code.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from host.search import ranking
from host.search.client_vectors import ClientSpaces
from host.search.embed import Embedder
from host.search.index import VectorIndexes, group_of
from host.search.index.exact import ExactIndex
from host.search.judgement import VectorsOf
from host.search.queries import QueryVectors
from host.search.retrieve import Retrieval, WorkingEntries, retrieved
from host.search.vectors import LocalVectors, SharedVectors, Vectors
from host.search.worker import EmbeddingWorker, LocalWorker, SharedWorker
from host.store.interface import EntryStore, VectorSearch, VectorStore
from host.store.records import Query, Scope, StoredEntry

if TYPE_CHECKING:
    from host.config import SearchConfig

__all__ = ["SearchEngine", "vectors_dir"]

log = logging.getLogger("a2e_host.search")

# embedder name -> (highest similarity of unrelated queries and texts, the unit vectors of
# `ranking.REFERENCE_TEXTS`)
_PRIORS: dict[str, tuple[float, np.ndarray]] = {}
# Seconds `stop()` gives the vector indexes to save what they built (approximate indexes): a
# stopping host is bounded (what is not saved is built again from the stored vectors)
_SAVE_SECONDS = 5.0


class SearchEngine:
    """Hybrid search over one store. `start()` loads vectors and starts the worker; `search()`
    is the query path (`host.search.retrieve`).

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
        # what the store offers beyond `EntryStore` (host/store/interface.py), checked once.
        # Shared: the store keeps and searches the vectors (several
        # hosts on one database); local: the engine searches them in memory
        self._shared = store if isinstance(store, VectorSearch) else None
        self._local = store if self._shared is None and isinstance(store, VectorStore) else None
        self.shared = self._shared is not None
        self._prior: asyncio.Future[tuple[float, np.ndarray]] | None = None
        self._busy = busy or (lambda: False)
        self._on_batch = on_batch
        # the vectors of a store searched in memory (SQLite): every namespace's (the host's
        # embedder) and client space's, each loaded on its first query, within the budget
        self.vectors: VectorIndexes | None = None
        self.spaces: ClientSpaces | None = None
        if self._local is not None:
            self.vectors = VectorIndexes(
                budget_bytes=cfg.vector_memory_bytes, loader=self._load,
                ann_min_rows=cfg.ann_min_rows, persist_dir=vectors_dir(self._local.path),
                dtype=cfg.vector_dtype, namespace_share=cfg.vector_namespace_share)
            self.spaces = ClientSpaces(store, self.vectors)
        else:  # PostgreSQL: the client spaces only
            self.spaces = ClientSpaces(store, VectorIndexes(
                budget_bytes=cfg.vector_memory_bytes, loader=self._load,
                ann_min_rows=cfg.ann_min_rows, dtype=cfg.vector_dtype,
                namespace_share=cfg.vector_namespace_share))
        self.use_embedder(embedder)

    def use_embedder(self, embedder: Embedder | None, kind: str | None = None) -> None:
        """Search with `embedder` (before `start()`): its index, worker and query thread, and
        the relevance calibration of its `kind` (default: `search.embedder`)."""
        cfg = self.cfg
        self.embedder = embedder if self._shared is not None or self._local is not None else None
        kind = kind or (cfg.embedder if self.embedder is not None else "none")
        # pair relevance weights: the configured ones, else those fitted for this embedder,
        # else none (relevance is then the order's logistic, see host.search.ranking)
        self.calibration: list[float] = (list(cfg.calibration)
                                         or ranking.CALIBRATIONS.get(kind, []))
        # the in-memory indexes searched with this embedder (a local store's)
        self.index = self.vectors if self.embedder is not None else None
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
                                          lazy=True, busy=wbusy, on_batch=on_batch)
        self.retrieval = self._retrieval()

    def _retrieval(self) -> Retrieval:
        """The query path over the store's vectors with the present embedder."""
        cfg = self.cfg
        vectors: Vectors | None = None
        if self._shared is not None:
            vectors = SharedVectors(
                self._shared, self.embedder.name if self.embedder is not None else None,
                cfg.fusion_pool, cfg.vector_sample)
        elif self._local is not None:
            vectors = LocalVectors(self._local, self.index, cfg.fusion_pool)
        return Retrieval(self.store, cfg, self.calibration, vectors, self.queries, self.worker,
                         self._background_prior)

    def _load(self, key: str) -> Iterator[tuple[list[int], np.ndarray, list[str],
                                                 list[float | None]]]:
        """The stored rows of an index key (the loader of `self.vectors`; blocking, run in a
        thread): a client space's (`ClientSpaces.load`), or a namespace's own vectors."""
        if "\x00" in key:
            if self.spaces is not None:
                yield from self.spaces.load(key)
            return
        if self.embedder is None or self._local is None:
            return
        for ids, vecs, places, expires in self._local.namespace_vectors(
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
        store = self._shared if self._shared is not None else self._local
        if self.embedder is None or self.worker is None or store is None:
            return
        if self._shared is not None and not self._shared.vectors_available:
            log.warning("the store cannot search vectors (no pgvector): keywords only")
            self.embedder = self.worker = self.queries = None
            self.retrieval = self._retrieval()
            return
        if await store.set_vector_model(self.embedder.name, self.embedder.dim):
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
            saving.add_done_callback(retrieved)
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
        store = self._shared if self._shared is not None else self._local
        if self.embedder is None or store is None:
            return 0
        await store.requeue_vectors()
        return await self.drain(progress)

    # -- the query path: host.search.retrieve --------------------------------------------

    async def search(
        self, scope: Scope, q: Query, text: str, now: float, candidates: int,
        working: WorkingEntries | None = None, ticket: int = 0, conn: str = "",
    ) -> list[StoredEntry]:
        """Candidates for `text` that `q` lets `scope` read, each with its `relevance` in (0, 1)
        (of the pair query/entry alone) and its order `fused` (`host.search.ranking`);
        unordered, `limit` is the caller's. The steps: `host.search.retrieve`.

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
        return await self.retrieval.search(scope, q, text, now, candidates, working, ticket,
                                           conn)

    def stored_vectors(self, namespace: str) -> VectorsOf:
        """Where the judgement of a reply in `namespace` reads its matches' vectors
        (`host.search.judgement`): the namespace's index in memory when it holds them as
        stored (float32, exact), the store for the others (and for every other index)."""
        index = self.index.get(namespace) if self.index is not None else None
        return _HeldVectors(self.store, index if type(index) is ExactIndex
                            and index.dtype == "float32" else None)

    async def _background_prior(self) -> tuple[float, np.ndarray]:
        if self._prior is None:
            self._prior = asyncio.ensure_future(self._calibrate())
        return await asyncio.shield(self._prior)


class _HeldVectors:
    """`VectorsOf` over an exact float32 index (the same float32 values the store holds: the
    worker writes both from one array, a load reads the store's) and the store behind it:
    the query's candidates' vectors are read from memory, not asked of the store again."""

    def __init__(self, store: EntryStore, index: ExactIndex | None) -> None:
        self.store = store
        self.index = index

    async def vectors_of(self, ids: Sequence[int], dim: int) -> tuple[list[int], np.ndarray]:
        index = self.index
        if index is None or index.dim != dim:
            return await self.store.vectors_of(ids, dim)
        held = [int(i) for i in ids if i in index]
        if len(held) == len(ids):
            return held, index.vectors(held)
        got, vecs = await self.store.vectors_of([int(i) for i in ids if i not in index], dim)
        return held + list(got), np.concatenate([index.vectors(held), vecs])


def vectors_dir(db: str) -> Path | None:
    """Where the vector indexes of SQLite file `db` are saved: `<db>.vectors` beside it
    (None for an in-memory database)."""
    if not db or db == ":memory:" or db.startswith("file:"):
        return None
    return Path(db + ".vectors")


