"""The background embedding worker: vectors for the entries stores have queued.

Stores are acknowledged after their commit; the store's triggers queue each new or changed
entry (`embed_queue`), and the worker embeds the queue in batches and writes the vectors. So an
entry is findable by keywords at once and by meaning as soon as its vector is written.

- **Newest first.** A batch takes the most recently queued entries: what an agent just wrote is
  what it is about to ask for; a bulk import behind it waits.
- **Short calls, both cores while nobody waits.** A batch is embedded in calls of at most
  `embed_call_chars` (its texts sorted by length, so a call pads little), two calls at a time
  on two threads when the host has no request in flight and no query waiting for its vector
  (`busy()` says so), one at a time otherwise: the other core stays with the requests. The
  worker's threads run at niceness 10, so when the machine is short of CPU the requests (and
  the query thread) get it first.
- **Read-your-writes for queries.** Every committed write takes a ticket (`wrote()`, a counter);
  a similarity query waits (`caught_up`, bounded by `search.vector_wait`) until the worker has
  embedded everything its namespace had queued when the query's connection last wrote: the
  worker then serves the waiting namespaces first, a batch of their newest entries at a time.
- **Abandoned at shutdown.** `stop()` does not finish a batch in progress: its vectors are never
  written and its entries stay queued for the next start. It only lets the one embedder call
  running return (at most `_SETTLE` seconds; a batch is well under that), because a process
  leaving while onnxruntime computes is aborted; the rest of the batch is never started.

Two kinds: `LocalWorker` adds the vectors it writes to the process's `VectorIndexes` too
(SQLite; to the namespaces loaded: the others read them when a query loads them);
`SharedWorker` claims queued entries from a store that keeps and searches the vectors itself
(`host.store.interface.VectorSearch`: PostgreSQL shared by several hosts) and writes them back
through it; there, a waiting query is satisfied when the whole queue is empty.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from host.search.embed import Embedder
from host.search.index import Pending, VectorIndexes, digest, group_of
from host.search.lanes import Lane
from host.store.interface import EntryStore, VectorSearch, VectorStore
from host.store.records import StorageFull

if TYPE_CHECKING:
    from host.config import SearchConfig

__all__ = ["EmbeddingWorker", "LocalWorker", "SharedWorker"]

log = logging.getLogger("a2e_host.search")

# Seconds `stop()` lets an abandoned embedder call return (one batch: ~0.1-1 s); a process that
# exits while onnxruntime computes is aborted
_SETTLE = 5.0
# After a failed step the worker waits `_RETRY` seconds, doubled at each failure in a row up to
# `_RETRY_MAX` (an endpoint down is not called every 5 s for hours, nor logged so)
_RETRY = 5.0
_RETRY_MAX = 60.0
# namespaces whose index refused vectors, remembered so each is logged once (bounded: past
# it, the set starts again)
_REFUSED_KEPT = 1024
# An entry whose text the embedder fails on (while it embeds others) is set aside: skipped
# by the batches for `_ASIDE` seconds, doubled at each failure up to `_ASIDE_MAX`, at most
# `_ASIDE_KEPT` entries at a time (past it, the one due first is forgotten: retried at once)
_ASIDE = 60.0
_ASIDE_MAX = 3600.0
_ASIDE_KEPT = 256
# what the worker embeds to tell a failing embedder from a text it fails on
_PROBE = "a"


def _resolve(fut: asyncio.Future[bool | None], value: bool | None) -> None:
    if not fut.done():
        fut.set_result(value)


class EmbeddingWorker:
    """What both workers share: tickets, waiters, the loop, the two threads, the figures."""

    def __init__(
        self, store: EntryStore, embedder: Embedder, cfg: SearchConfig,
        busy: Callable[[], bool] | None = None,
        on_batch: Callable[[int, float], None] | None = None,
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.cfg = cfg
        self.busy = busy or (lambda: False)
        self.on_batch = on_batch  # (entries embedded, seconds) after each batch
        self.backlog = 0  # entries waiting for a vector, as last counted
        self.embedded_total = 0
        self.failures = 0  # failed steps since start (each retried later)
        self.set_aside = 0  # entries set aside since start (their embedding failed alone; an
        # entry counted once however often it fails again)
        self.refused = 0  # namespaces' index writes refused since start (LocalWorker's `_add`)
        # entry id -> (monotonic time it is due again, failures in a row)
        self._aside: dict[int, tuple[float, int]] = {}
        self._ticket = 0
        self._through_all = 0  # every write up to this ticket has its vector
        self._through: dict[str, int] = {}  # the same, per namespace
        self._waiters: dict[str, list[tuple[int, asyncio.Future[bool | None]]]] = {}
        # niceness 10: on a busy machine the requests' threads get the CPU before the backlog
        self._lanes = (Lane("a2e-embed", nice=10), Lane("a2e-embed-2", nice=10))
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self.parallel = bool(getattr(embedder, "parallel", False))

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
        """Stop at once: a batch in progress is abandoned, its entries stay queued."""
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
        """One batch: of the namespace a query waits for (oldest waiter first), else of the
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

    # -- one batch -------------------------------------------------------------------------

    async def embed_pending(self, namespace: str | None = None) -> tuple[int, bool]:
        """Embed one batch; (entries handled, True when the queue (of `namespace`) held no
        more than that batch)."""
        raise NotImplementedError

    async def _embed(self, texts: list[str]) -> np.ndarray:
        """Vectors of stored `texts`, in calls of at most `embed_call_chars` (texts x the
        longest: sorted by length, so little is padding); two calls at a time on two threads
        when the embedder allows it and the host has nothing else to do, else one."""
        t0 = time.perf_counter()
        out = np.zeros((len(texts), self.embedder.dim), dtype=np.float32)
        if not texts:
            return out
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        calls: list[list[int]] = [[]]
        for i in order:
            call = calls[-1]
            if call and (len(call) + 1) * len(texts[i]) > self.cfg.embed_call_chars:
                calls.append(call := [])
            call.append(i)
        j = 0
        while j < len(calls):
            two = self.parallel and j + 1 < len(calls) and not self.busy()
            now = calls[j:j + 2] if two else calls[j:j + 1]
            got = await asyncio.gather(*(
                self._lanes[k].run(self.embedder.embed, [texts[i] for i in c])
                for k, c in enumerate(now)))
            for c, v in zip(now, got, strict=True):
                out[c] = v
            j += len(now)
        self.embedded_total += len(texts)
        if self.on_batch is not None:
            self.on_batch(len(texts), time.perf_counter() - t0)
        return out

    def _bound(self, text: str) -> str:
        return text[: self.cfg.max_embed_chars]

    # -- entries the embedder fails on -------------------------------------------------------

    def _due(self, entry_id: int) -> bool:
        """False while `entry_id` is set aside."""
        aside = self._aside.get(entry_id)
        return aside is None or aside[0] <= time.monotonic()

    async def _embed_apart(self, ids: Sequence[int], texts: list[str]
                           ) -> tuple[np.ndarray, list[int]]:
        """Vectors of `texts` (of entries `ids`), and the positions of those the embedder
        fails on alone, set aside (`_aside`): when the batch fails, a probe tells a failing
        embedder (raised, the step retried later) from texts it fails on; then each text is
        embedded alone. An entry embedded leaves `_aside`."""
        try:
            vecs = await self._embed(texts)
        except Exception:
            # raises when the embedder itself fails (not counted as an entry embedded)
            await self._lanes[0].run(self.embedder.embed, [_PROBE])
            vecs = np.zeros((len(texts), self.embedder.dim), dtype=np.float32)
            failed = []
            for j, text in enumerate(texts):
                try:
                    vecs[j] = (await self._embed([text]))[0]
                except Exception as e:
                    failed.append(j)
                    self._put_aside(ids[j], e)
            for j in set(range(len(texts))) - set(failed):
                self._aside.pop(ids[j], None)
            return vecs, failed
        for i in ids:
            self._aside.pop(i, None)
        return vecs, []

    def _forget_aside(self) -> None:
        """Forget the entries set aside whose time came `_ASIDE_MAX` ago (embedded by another
        host, deleted, or waiting like any other entry)."""
        old = time.monotonic() - _ASIDE_MAX
        for i in [i for i, (due, _) in self._aside.items() if due < old]:
            del self._aside[i]

    def _put_aside(self, entry_id: int, err: Exception) -> None:
        self._forget_aside()
        now = time.monotonic()
        _, times = self._aside.pop(entry_id, (0.0, 0))
        if len(self._aside) >= _ASIDE_KEPT:
            del self._aside[min(self._aside, key=lambda i: self._aside[i][0])]
        wait = min(_ASIDE * 2 ** times, _ASIDE_MAX)
        self._aside[entry_id] = (now + wait, times + 1)
        if not times:
            self.set_aside += 1
            log.warning("an entry's text failed to embed (%s): set aside, retried in %.0f s,"
                        " the others embedded", err, wait)


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
        """Embed one batch of queued entries (of `namespace`, newest first) and store their
        vectors; also drops from memory the vectors deletes removed, and adds those other
        processes wrote."""
        await self._catch_up()
        gone = await self.store.vectors_gone()
        if gone:
            self.index.remove(gone)
            await self.store.clear_vectors_gone(gone)
        limit = self.cfg.batch_size
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
        vecs, failed = await self._embed_apart([p.id for p in fresh],
                                               [self._bound(p.text) for p in fresh])
        skipped = {fresh[j].id for j in failed}
        blobs = {p.id: vecs[j].tobytes() for j, p in enumerate(fresh)}
        done = set(await self.store.write_vectors(
            [(p.id, p.text, blobs.get(p.id)) for p, _ in batch if p.id not in skipped]))
        written = [j for j, p in enumerate(fresh) if p.id in done]
        self._add([fresh[j] for j in written], vecs[written])
        await self.count_backlog()
        return len(batch), len(queued) < window and len(due) <= limit

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
        """Claim and embed one batch (of any namespace: claims are global)."""
        limit = self.cfg.batch_size
        batch = await self.store.claim_vectors(limit, self.cfg.embed_lease)
        if not batch:
            return 0, await self._drained()
        vecs, failed = await self._embed_apart([p.id for p, _seq in batch],
                                               [self._bound(p.text) for p, _seq in batch])
        # an entry the embedder fails on stays claimed: its lease (`embed_lease`) passes
        # before any host claims it again
        bad = set(failed)
        await self.store.put_vectors(
            self.embedder.name,
            [(p.id, seq, vecs[j]) for j, (p, seq) in enumerate(batch) if j not in bad])
        return len(batch), await self._drained()

    async def _drained(self) -> bool:
        """Nothing queued but, at most, the entries set aside (claimed till their lease ends:
        a reindex does not wait for them)."""
        self._forget_aside()
        return await self.count_backlog() <= len(self._aside)
