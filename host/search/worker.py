"""The background embedding worker: vectors for the entries stores have queued.

Stores are acknowledged after their commit; the store's triggers queue each new or changed
entry (`embed_queue`), and the worker embeds the queue in batches and writes the vectors. So an
entry is findable by keywords at once and by meaning as soon as its vector is written.

- **Newest first, a window at a time.** The worker reads up to `window()` entries (16 batches,
  512 by default: `host.search.embed_calls.WINDOW`) of the most recently queued entries: what
  an agent just wrote is what it is about to ask for; a bulk import behind it waits.
  `EmbedCalls` (`host.search.embed_calls`) embeds them sorted by length in short calls, on
  both cores while the host has nothing else to do, and the vectors are written a batch
  (`batch_size`) at a time as they come.
- **Read-your-writes for queries.** Every committed write takes a ticket (`wrote()`, a counter);
  a similarity query waits (`caught_up`, bounded by `search.vector_wait`) until the worker has
  embedded everything its namespace had queued when the query's connection last wrote: the
  worker then starts no other call of its window (the rest stays queued, read again later) and
  serves the waiting namespaces first, a window of their newest entries at a time.
- **Abandoned at shutdown.** `stop()` does not finish a window in progress: the vectors not
  yet written never are, and their entries stay queued for the next start. It only lets the
  embedder calls running return (at most `_SETTLE` seconds; a call is well under that),
  because a process leaving while onnxruntime computes is aborted.

Two kinds: `LocalWorker` adds the vectors it writes to the process's `VectorIndexes` too
(SQLite; to the namespaces loaded: the others read them when a query loads them);
`SharedWorker` claims queued entries from a store that keeps and searches the vectors itself
(`host.store.interface.VectorSearch`: PostgreSQL shared by several hosts), a window at a time
(oldest first, leased: no other host embeds them meanwhile), embeds them as `LocalWorker` does
and writes them back through the store. Read-your-writes there as on SQLite: a query waits
until its namespace has nothing queued that was queued at its connection's last write, and the
worker serves the waiting namespaces first, a claim of the namespace's entries alone
(`claim_namespace_vectors`, leased as any claim, its oldest first) at a time; a window of any
namespace starts no other call once a query waits (its claims not started released). A
namespace's entries another host holds are waited for: that host writes them, or its lease
lapses and they are claimed again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from host.search.embed import Embedder
from host.search.embed_calls import EmbedCalls
from host.search.index import Pending, VectorIndexes, digest, group_of
from host.store.interface import EntryStore, VectorSearch, VectorStore
from host.store.records import StorageFull

if TYPE_CHECKING:
    from host.config import SearchConfig

__all__ = ["EmbeddingWorker", "LocalWorker", "SharedWorker"]

log = logging.getLogger("a2e_host.search")

# Seconds `stop()` lets an abandoned embedder call return (one call: ~0.01-0.5 s); a process
# that exits while onnxruntime computes is aborted
_SETTLE = 5.0
# After a failed step the worker waits `_RETRY` seconds, doubled at each failure in a row up to
# `_RETRY_MAX` (an endpoint down is not called every 5 s for hours, nor logged so)
_RETRY = 5.0
_RETRY_MAX = 60.0
# namespaces whose index refused vectors, remembered so each is logged once (bounded: past
# it, the set starts again)
_REFUSED_KEPT = 1024
# A `SharedWorker` starts no call of its window once this share of the claims' lease has
# passed (the rest released for any host to take): no other host ever takes over an entry it
# still embeds, however slow the embedder
_LEASE_USED = 0.5


def _resolve(fut: asyncio.Future[bool | None], value: bool | None) -> None:
    if not fut.done():
        fut.set_result(value)


class EmbeddingWorker(EmbedCalls):
    """What both workers share: tickets, waiters, the loop, the figures (and `EmbedCalls`: how
    texts are embedded)."""

    def __init__(
        self, store: EntryStore, embedder: Embedder, cfg: SearchConfig,
        busy: Callable[[], bool] | None = None,
        on_batch: Callable[[int, float], None] | None = None,
    ) -> None:
        super().__init__(embedder, cfg, busy, on_batch)
        self.store = store
        self.backlog = 0  # entries waiting for a vector, as last counted
        self.failures = 0  # failed steps since start (each retried later)
        self.refused = 0  # namespaces' index writes refused since start (LocalWorker's `_add`)
        self._ticket = 0
        self._through_all = 0  # every write up to this ticket has its vector
        self._through: dict[str, int] = {}  # the same, per namespace
        self._waiters: dict[str, list[tuple[int, asyncio.Future[bool | None]]]] = {}
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    def faults(self) -> dict[str, int]:
        """The fault counters since start, by name (`failures`, `set_aside`, `refused`)."""
        return {"failures": self.failures, "set_aside": self.set_aside,
                "refused": self.refused}

    # -- tickets and waiting ---------------------------------------------------------------

    def wrote(self) -> int:
        """A write committed (or entries were deleted): wake the worker; the write's ticket."""
        self._ticket += 1
        if self._wake is not None:
            self._wake.set()
        return self._ticket

    def through(self, namespace: str) -> int:
        """The newest ticket whose writes in `namespace` all have vectors."""
        return max(self._through_all, self._through.get(namespace, 0))

    async def caught_up(self, namespace: str, ticket: int, timeout: float) -> bool:
        """Wait (at most `timeout` seconds) until the writes up to `ticket` in `namespace`
        have their vectors; True when they have.

        It keeps its own timer instead of `asyncio.timeout`: a query's handler may reach this
        in its first step, which the request core runs outside any task on Python 3.11 (see
        `host.net.pipeline`), where `asyncio.timeout` cannot work."""
        if ticket <= self.through(namespace):
            return True
        if timeout <= 0 or self._task is None:
            return False
        # a future of its own, resolved by `_caught_up` (None) or by the timer (False)
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[bool | None] = loop.create_future()
        self._waiters.setdefault(namespace, []).append((ticket, fut))
        timer = loop.call_later(timeout, _resolve, fut, False)
        assert self._wake is not None
        self._wake.set()
        try:
            return await fut is not False
        finally:
            timer.cancel()
            waiting = self._waiters.get(namespace)
            if waiting is not None:
                waiting[:] = [(t, f) for t, f in waiting if f is not fut]
                if not waiting:
                    del self._waiters[namespace]

    def _caught_up(self, namespace: str | None, snapshot: int) -> None:
        """Everything queued in `namespace` (None: everywhere) up to ticket `snapshot` has its
        vector: wake the queries that waited for that."""
        if namespace is None:
            self._through_all = max(self._through_all, snapshot)
            self._through.clear()
        else:
            self._through[namespace] = max(self._through.get(namespace, 0), snapshot)
        for ns in list(self._waiters) if namespace is None else [namespace]:
            done = self.through(ns)
            left = []
            for t, f in self._waiters.get(ns, []):
                if t <= done:
                    if not f.done():
                        f.set_result(None)
                else:
                    left.append((t, f))
            if left:
                self._waiters[ns] = left
            else:
                self._waiters.pop(ns, None)

    # -- the loop --------------------------------------------------------------------------

    def start(self) -> None:
        """Start the background loop."""
        self._wake = asyncio.Event()
        self._stopping = False
        self._wake.set()  # look at the queue once at start
        self._task = asyncio.create_task(self._run(), name="a2e-embed-worker")

    async def stop(self) -> None:
        """Stop at once: a window in progress is abandoned, its entries not written stay queued."""
        task, self._task = self._task, None
        self._stopping = True  # the loop ends even if a cancellation were swallowed
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        for lane in self._lanes:
            lane.close()
        for lane in self._lanes:  # its result is dropped; only the native call is let finish
            await lane.settle(_SETTLE)
        for waiting in self._waiters.values():
            for _t, f in waiting:
                if not f.done():
                    f.set_result(None)  # let them answer with what there is
        self._waiters.clear()

    async def _run(self) -> None:
        assert self._wake is not None
        failures = 0  # failed steps in a row
        while not self._stopping:
            try:
                async with asyncio.timeout(5.0):
                    await self._wake.wait()
            except TimeoutError:
                pass
            self._wake.clear()
            try:
                while await self.step():
                    failures = 0
                    await asyncio.sleep(0)
                failures = 0
            except asyncio.CancelledError:
                raise
            except StorageFull:  # the vectors wait for room (host.store.sqlite.space)
                log.warning("background embedding paused: the disk is full; retrying in 5 s")
                await asyncio.sleep(5.0)
            except Exception as e:  # a failing endpoint or model: retry, later each time
                failures += 1
                self.failures += 1
                wait = min(_RETRY * 2 ** (failures - 1), _RETRY_MAX)
                if failures == 1:
                    log.exception("background embedding failed; retrying in %.0f s", wait)
                else:
                    log.warning("background embedding failed again (%d in a row: %s);"
                                " retrying in %.0f s", failures, e, wait)
                await asyncio.sleep(wait)

    async def step(self) -> int:
        """One window: of the namespace a query waits for (oldest waiter first), else of the
        newest queued entries; marks what is caught up. The number of entries handled."""
        ns = next(iter(self._waiters), None)
        snapshot = self._ticket
        n, complete = await self.embed_pending(ns)
        if complete:
            self._caught_up(ns, snapshot)
        elif not n:  # what is left is claimed by other hosts' workers: give them time
            await asyncio.sleep(0.05)
        if ns is not None and ns in self._waiters:
            self._waiters[ns] = self._waiters.pop(ns)  # the next waiting namespace goes first
        return n or (1 if ns is not None and self._waiters else 0)

    async def drain(self, progress: Callable[[int, int], None] | None = None) -> int:
        """Embed until the queue is empty, calling `progress(done, remaining)` after each
        batch; the number of entries handled (the `a2e-host reindex` command)."""
        done = 0
        while True:
            snapshot = self._ticket
            n, complete = await self.embed_pending(None)
            done += n
            if n and progress is not None:
                progress(done, await self.store.vector_queue())
            if complete:
                self._caught_up(None, snapshot)
                if await self._drained():
                    return done
            elif not n:
                await asyncio.sleep(0.05)  # the rest is claimed by other hosts' workers

    async def _drained(self) -> bool:
        return True

    async def count_backlog(self) -> int:
        """Count the entries waiting for a vector now (`backlog`)."""
        self.backlog = int(await self.store.vector_queue())
        return self.backlog

    # -- one window ------------------------------------------------------------------------

    async def embed_pending(self, namespace: str | None = None) -> tuple[int, bool]:
        """Embed one window; (entries handled, True when the queue (of `namespace`) held no
        more than that window and all of it was handled)."""
        raise NotImplementedError


class LocalWorker(EmbeddingWorker):
    """Writes vectors to the store and into the in-memory `index` (SQLite).

    Other processes on the same file (a host, `a2e-host mcp`, the library's `SQLiteStore`)
    embed too, and dequeue what they embed: before each batch the worker adds to the index
    the vectors written since it last looked, by anyone (a store with `vectors_since`)."""

    store: VectorStore

    def __init__(self, store: VectorStore, embedder: Embedder, cfg: SearchConfig,
                 index: VectorIndexes, lazy: bool = False, **kw: Any) -> None:
        super().__init__(store, embedder, cfg, **kw)
        self.index = index
        self.lazy = lazy  # the index loads namespaces itself (its loader): `load` loads none
        # other processes write vectors too: read those written since (`VectorStore.vectors_since`)
        self._catch: VectorStore | None = store
        self._seq: int | None = None  # the newest write of vectors the index has seen
        self.catch_up_rows = 10_000  # vectors read a chunk of `_catch_up`
        self._refused: set[str] = set()  # ... those logged

    def _add(self, rows: Sequence[Pending], vecs: np.ndarray) -> None:
        """Add stored vectors (`rows[j]`'s is `vecs[j]`) to their namespaces' indexes. A
        namespace whose index refuses them (vectors of another dimension than it holds, or
        any other failure) is dropped from memory: the store has the vectors, and the
        namespace's next query reads them; the others are added all the same, so one
        namespace never stops the worker (logged once a namespace, counted in `refused`)."""
        by_ns: dict[str, list[int]] = {}
        for j, p in enumerate(rows):
            by_ns.setdefault(p.namespace, []).append(j)
        for ns, js in by_ns.items():
            try:
                self.index.add(ns, [rows[j].id for j in js], vecs[js],
                               [group_of(rows[j].tier, rows[j].owner) for j in js],
                               [rows[j].expires_at for j in js])
            except Exception as e:
                self.index.drop(ns)
                self.refused += 1
                if ns not in self._refused:
                    if len(self._refused) >= _REFUSED_KEPT:
                        self._refused.clear()
                    self._refused.add(ns)
                    log.warning("the vector index of a namespace refused its vectors (%s):"
                                " dropped from memory, its next query reads them from the"
                                " store", e)

    def load(self) -> None:
        """Note the newest write of vectors (blocking: run it in a thread). The index reads a
        namespace's vectors on its first query (`VectorIndexes.open`, the engine's loader);
        the catch-up adds what is written from now on to the namespaces loaded (a write to
        another is dropped: its load reads it). Without `lazy` (an index without a loader: a
        test's) every stored vector is read into the index here."""
        if self._catch is not None:
            self._seq = self._catch.vector_seq()
        if self.lazy:
            return
        n = 0
        for rows, vecs in self.store.load_vectors(self.embedder.dim):
            self._add(rows, vecs)
            n += len(rows)
        if n:
            log.info("loaded %d vectors", n)

    async def embed_pending(self, namespace: str | None = None) -> tuple[int, bool]:
        """Embed one window of queued entries (of `namespace`, newest first) and store their
        vectors; also drops from memory the vectors deletes removed, and adds those other
        processes wrote."""
        await self._catch_up()
        gone = await self.store.vectors_gone()
        if gone:
            self.index.remove(gone)
            await self.store.clear_vectors_gone(gone)
        limit = self.window()
        self._forget_aside()
        window = limit + len(self._aside)  # the entries set aside are skipped: read past them
        queued: list[tuple[Pending, bytes | None]] = (
            await self.store.pending_vectors(window) if namespace is None
            else await self.store.pending_vectors(window, namespace=namespace))
        if not queued:
            self.backlog = 0 if namespace is None else self.backlog
            return 0, True
        due = [(p, d) for p, d in queued if self._due(p.id)]
        batch = due[:limit]
        if not batch:  # only entries set aside are queued: they wait for their time
            await self.count_backlog()
            return 0, True
        fresh = [p for p, d in batch if d is None or d != digest(p.text)
                 or not self._moved(p)]
        new = {p.id for p in fresh}
        # the entries whose stored vector is current: dequeued with the first write
        kept = [(p.id, p.text, None) for p, _ in batch if p.id not in new]

        async def write(js: list[int], vecs: np.ndarray) -> None:
            rows: list[tuple[int, str, bytes | None]] = [
                (fresh[j].id, fresh[j].text, vecs[k].tobytes()) for k, j in enumerate(js)]
            rows += kept
            kept.clear()
            done = set(await self.store.write_vectors(rows))
            written = [k for k, j in enumerate(js) if fresh[j].id in done]
            self._add([fresh[js[k]] for k in written], vecs[written])

        finished, failed = await self._embed_apart(
            [p.id for p in fresh], [self._bound(p.text) for p in fresh], write,
            lambda: self._stopping or any(ns != namespace for ns in self._waiters))
        handled = len(batch) - len(fresh) + len(finished) + len(failed)
        if kept:  # nothing was embedded
            await write([], np.zeros((0, self.embedder.dim), dtype=np.float32))
        await self.count_backlog()
        return handled, (handled == len(batch) and len(queued) < window
                         and len(due) <= limit)

    def _moved(self, p: Pending) -> bool:
        """Give the indexed row of `p` (whose stored vector is current) its group and expiry;
        True unless its namespace is loaded without it (then it is embedded again). An
        unloaded namespace reads them with its vectors when it loads."""
        group = group_of(p.tier, p.owner)
        return (self.index.set_meta(p.id, group, p.expires_at, p.namespace)
                or self.index.get(p.namespace) is None)

    async def _catch_up(self) -> None:
        """Add to the index the vectors written since the last look (by this process too:
        re-adding a row replaces it), `catch_up_rows` at a time; the event loop runs between
        chunks (the store reads on the loop: another process's reindex of a big file would
        otherwise hold every connection while it is read back)."""
        if self._seq is None or self._catch is None:
            return
        while True:
            rows, vecs, last = await self._catch.vectors_since(
                self._seq, self.embedder.dim, self.catch_up_rows)
            self._add(rows, vecs)
            if last == self._seq:
                return
            self._seq = last
            await asyncio.sleep(0)  # a chunk read and added: let the connections run


class SharedWorker(EmbeddingWorker):
    """Claims queued entries from a `VectorSearch` store (other hosts skip them), embeds them
    and writes the vectors through the store (PostgreSQL)."""

    store: VectorSearch

    async def embed_pending(self, namespace: str | None = None) -> tuple[int, bool]:
        """Claim and embed one window: up to `window()` queued entries (of `namespace`, when
        a query waits for it; else of any), oldest first, leased for `embed_lease` seconds
        (the other hosts on the database skip them meanwhile), embedded as `LocalWorker`'s
        window is (sorted by length, short calls on both threads, the vectors written a batch
        at a time as they come). No call starts once `_LEASE_USED` of the lease has passed,
        nor once stopping, nor (a window of any namespace, or of another) once a query waits
        for another namespace: the claims of the calls not started are released then, for
        any host to take. Complete (of `namespace`) when every entry it had queued at the
        claim was claimed by it and embedded (or set aside): none held by another host."""
        self._forget_aside()
        if namespace is None:
            claimed = await self.store.claim_vectors(self.window(), self.cfg.embed_lease)
            left = 0
        else:
            claimed, left = await self.store.claim_namespace_vectors(
                namespace, self.window(), self.cfg.embed_lease, list(self._aside))
        if not claimed:
            return 0, (await self._drained() if namespace is None else not left)
        deadline = time.monotonic() + self.cfg.embed_lease * _LEASE_USED
        unwritten = 0  # vectors `put_vectors` did not store (the entry changed, or gave way)

        async def write(js: list[int], vecs: np.ndarray) -> None:
            nonlocal unwritten
            rows = [(claimed[j][0].id, claimed[j][1], vecs[k]) for k, j in enumerate(js)]
            unwritten += len(rows) - len(await self.store.put_vectors(self.embedder.name, rows))

        # an entry the embedder fails on stays claimed: its lease (`embed_lease`) passes
        # before any host claims it again
        finished, failed = await self._embed_apart(
            [p.id for p, _seq in claimed], [self._bound(p.text) for p, _seq in claimed], write,
            lambda: (self._stopping or time.monotonic() >= deadline
                     or any(ns != namespace for ns in self._waiters)))
        handled = set(finished) | set(failed)
        if len(handled) < len(claimed):
            await self.store.release_vectors(
                [(p.id, seq) for j, (p, seq) in enumerate(claimed) if j not in handled])
        if namespace is None:
            return len(handled), await self._drained()
        return len(handled), not left and not unwritten and len(handled) == len(claimed)

    async def _drained(self) -> bool:
        """Nothing queued but, at most, the entries set aside (claimed till their lease ends:
        a reindex does not wait for them)."""
        self._forget_aside()
        return await self.count_backlog() <= len(self._aside)
