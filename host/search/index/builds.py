"""The background builds of the vector indexes: the process's queue of them (`BUILDS`), their
daemon threads and the calls those make on the loop (`on_loop`), and the rebuild of a key's
index from its rows pulled off the loop (`Builds.pull`: an exact key promoted past
`ann_min_rows`, an `AnnIndex` compacted), swapped in once built. A graph built in place over a
key's codes is a `host.search.index.graph.GraphBuild`, queued here alike.

Builds run one at a time in the process, the smallest key first (a key waiting is served by its
current index), on `rebuild_threads` cores, in daemon threads: shutdown never waits for a build
to end (one in progress stops at its next step, see `EXITING`, and is done again at the next
load). A pulled build takes the rows from the loop a chunk at a time (`CHUNK` rows copied from
the current index there, consistent with the journal of writes since the build began), not
from a snapshot: it holds the graph it makes, counted in the budget from its start at its
estimated final size, and one chunk. The writes made meanwhile are replayed on the new index
by the build's thread (the GIL released in faiss) until at most `SWAP_ROWS` of them are left;
the loop applies those at the swap, `SWAP_STEP` rows between two of its turns (64 rows took
45-91 ms into a graph of 100,000 x 384 here; replayed at once on the loop, the 40,000 rows a
catch-up wrote during a build held every connection for 23 s). A graph built is saved (with a
persist folder) before it is swapped in, while it is still the build's alone, so a host killed
afterwards reads it back.
"""

from __future__ import annotations

import asyncio
import atexit
import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future as ThreadFuture
from pathlib import Path
from typing import Protocol, TypeVar, Unpack

import numpy as np

from host.search.index.allocator import trim_soon
from host.search.index.ann import (
    BUILD_STEP,
    TRAIN_ROWS,
    AnnIndex,
    AnnOptions,
    BuildAbandoned,
    omp_threads,
)
from host.search.index.daemon import in_daemon
from host.search.index.exact import CHUNK, CodedIndex
from host.search.index.loading import Index, Journal, Op, Writes, op_rows, steps
from host.search.index.rows import Chunk

log = logging.getLogger(__name__)
T = TypeVar("T")

SWAP_ROWS = 1024
SWAP_STEP = 16

# Set at exit: the builds in progress stop at their next step, and the exit waits for that (at
# most `EXIT_WAIT` seconds), not for their end: a daemon thread still in faiss while the
# process tears down aborts it ("terminate called").
EXITING = threading.Event()
BUILDERS: set[threading.Thread] = set()
EXIT_WAIT = 30.0


@atexit.register
def _abandon_builds() -> None:
    EXITING.set()
    deadline = time.monotonic() + EXIT_WAIT
    for thread in list(BUILDERS):
        thread.join(max(0.0, deadline - time.monotonic()))


def on_loop(loop: asyncio.AbstractEventLoop, fn: Callable[..., T], *args: object) -> T:
    """(From a build's thread.) `fn(*args)` run on `loop`, its result; `BuildAbandoned` when
    the loop is closed or the process exits."""
    done: ThreadFuture[T] = ThreadFuture()

    def run() -> None:
        try:
            done.set_result(fn(*args))
        except BaseException as e:  # noqa: BLE001 - handed to the thread
            done.set_exception(e)
    try:
        loop.call_soon_threadsafe(run)
    except RuntimeError:
        raise BuildAbandoned from None
    while True:
        try:
            return done.result(timeout=0.5)
        except TimeoutError:
            if EXITING.is_set() or loop.is_closed():
                raise BuildAbandoned from None


class Ticket:
    """A build's place in `BUILDS`: `fut` (of the loop that asked) is done once it may run."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.fut: asyncio.Future[None] = loop.create_future()
        self.granted = False  # under the queue's lock


def _grant(ticket: Ticket) -> None:
    if not ticket.fut.done():  # (cancelled: its waiter's `give_up` passes the turn on)
        ticket.fut.set_result(None)


class BuildQueue:
    """The background builds of the process, at most `limit` at a time, the smallest (rows)
    first, then in the order asked: one key's build cannot starve another's of CPU, nor
    several builds' memory add up. Asked on a loop (`ask`), released by whichever thread ends
    the build (`release`)."""

    def __init__(self, limit: int = 1) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._running = 0
        self._waiting: list[tuple[int, int, Ticket]] = []
        self._order = itertools.count()

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @property
    def running(self) -> int:
        return self._running

    def ask(self, rows: int) -> Ticket:
        """A ticket for a build of `rows` rows; await its `fut`, then `release()` once built
        (or `give_up` a ticket no longer wanted)."""
        ticket = Ticket(asyncio.get_running_loop())
        with self._lock:
            if self._running < self.limit and not self._waiting:
                self._running += 1
                ticket.granted = True
                ticket.fut.set_result(None)
            else:
                heapq.heappush(self._waiting, (rows, next(self._order), ticket))
        return ticket

    def give_up(self, ticket: Ticket) -> None:
        """Leave the queue (waiting: its place goes; granted: its turn passes on)."""
        with self._lock:
            if not ticket.granted:
                self._waiting = [w for w in self._waiting if w[2] is not ticket]
                heapq.heapify(self._waiting)
                return
            ticket.granted = False
        self.release()

    def release(self) -> None:
        """A build ended (any thread): the next waiting one may run."""
        while True:
            with self._lock:
                self._running -= 1
                if not self._waiting or self._running >= self.limit:
                    return
                _, _, ticket = heapq.heappop(self._waiting)
                ticket.granted = True
                self._running += 1
            try:
                ticket.loop.call_soon_threadsafe(_grant, ticket)
                return
            except RuntimeError:  # its loop is closed: no one waits there any more
                continue


BUILDS = BuildQueue()


class Turn:
    """A granted build's turn, released once: by the loop after the graph is swapped in (or
    not), or by the build's thread when the build fails (its loop may be gone)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held = True

    def release(self) -> None:
        with self._lock:
            if not self._held:
                return
            self._held = False
        BUILDS.release()

    @staticmethod
    async def take(rows: int) -> Turn:
        """A turn of `BUILDS` for a build of `rows` rows, once it comes."""
        ticket = BUILDS.ask(rows)
        try:
            await ticket.fut
        except BaseException:
            BUILDS.give_up(ticket)
            raise
        return Turn()


class Site(Protocol):
    """What the builds need of the keys' cache (`VectorIndexes`), on the loop."""

    ann_options: AnnOptions
    rebuild_threads: int
    journal_max_bytes: int

    def current(self, key: str) -> Index | None:
        """The loaded index of `key` (not made the most recently used)."""

    def count(self, nbytes: int) -> None:
        """The bytes the budget holds changed by `nbytes`."""

    def evict(self, keep: str) -> None:
        """Past the budget, keys leave (not `keep`)."""

    def replace(self, key: str, index: Index) -> None:
        """`index` is the loaded index of `key` (in its place in the LRU order)."""

    def apply(self, index: Index, op: Op) -> None:
        """A journalled write made on `index` (any thread)."""

    def saved_path(self, key: str) -> Path | None:
        """Where the index of `key` is saved (None: not saved)."""

    def save_soon(self, key: str, index: AnnIndex) -> asyncio.Future[None]:
        """`index` saved in a thread."""


def build_ann(dim: int, rows: Iterable[Chunk], threads: int = 0,
              stop: Callable[[], bool] | None = None,
              ranges: tuple[np.ndarray, np.ndarray] | None = None, rows_hint: int = 0,
              **options: Unpack[AnnOptions]) -> AnnIndex:
    """An `AnnIndex` of `rows` (chunks as `add` takes them); the quantiser learns from the
    first `TRAIN_ROWS` rows. `threads`: faiss's threads for the graph (0: every core); set for
    the calling thread only, restored after. `stop`: looked at every `BUILD_STEP` rows,
    `BuildAbandoned` raised once it says True (a process exiting does not wait long, nor leave
    faiss running while it tears down). `ranges`: the quantiser's, as `train` takes them (then
    nothing is held to learn them from). `rows_hint`: about how many rows come (the arrays are
    sized for them once, not grown by doubling: a copy of the codes and the graph while they
    grow is ~0.3 GB at a million rows)."""
    with omp_threads(threads):
        index = AnnIndex(dim, **options)
        if rows_hint:
            index.reserve(rows_hint)
        head: list[Chunk] = []
        held = 0
        it = iter(rows)
        if ranges is not None:
            index.train(np.zeros((0, dim), np.float32), ranges)
        else:
            for chunk in it:
                head.append(chunk)
                held += len(chunk[0])
                if held >= TRAIN_ROWS:
                    break
            if head:
                index.train(np.concatenate([np.asarray(c[1], dtype=np.float32) for c in head]))

        def source() -> Iterator[Chunk]:  # a chunk added is no longer held
            while head:
                yield head.pop(0)
            yield from it

        for ids, vecs, groups, expires in source():
            for i in range(0, len(ids), BUILD_STEP):
                if stop is not None and stop():
                    raise BuildAbandoned
                j = slice(i, i + BUILD_STEP)
                index.add(ids[j], vecs[j], groups[j], expires[j])
        return index


def estimate_nbytes(rows: int, dim: int, options: AnnOptions) -> int:
    return AnnIndex.estimate_nbytes(rows, dim, int(options.get("connectivity", 16)))


class Builds:
    """The builds of one cache's keys: which are being built (`promoting`: their writes go to
    a `Journal`, or to a `GraphBuild`), the bytes reserved for them, which wait for a turn."""

    def __init__(self, site: Site) -> None:
        self.site = site
        self.promoting: dict[str, Writes] = {}
        self.reserved: dict[str, int] = {}  # key -> bytes its build holds (estimated)
        self.queued: dict[str, Index] = {}  # key -> its index waiting for a build's turn
        self.promotions = 0

    def reserve(self, key: str, nbytes: int) -> None:
        """`nbytes` counted in the budget for the build of `key` from now."""
        self.reserved[key] = nbytes
        self.site.count(nbytes)

    def end(self, key: str, build: Writes) -> None:
        """The build of `key` over (when `build` is still its: not dropped meanwhile)."""
        if self.promoting.get(key) is build:
            del self.promoting[key]
            self.site.count(-self.reserved.pop(key, 0))

    def forget(self, key: str) -> None:
        """The key dropped: a build in progress is not swapped in, a queued one not run."""
        self.promoting.pop(key, None)
        self.queued.pop(key, None)
        self.site.count(-self.reserved.pop(key, 0))

    @staticmethod
    def ranges(index: Index) -> tuple[np.ndarray, np.ndarray] | None:
        """The 8-bit ranges a graph built from `index` takes (its own codes' when it has them:
        the codes are then the same), None: learnt from its rows."""
        if isinstance(index, CodedIndex):
            return index.ranges
        if isinstance(index, AnnIndex):
            return index.ranges
        return None

    async def pull(self, key: str, old: Index, turn: Turn) -> None:
        """A new `AnnIndex` of the rows of `old` (the loaded index of `key`), built in a
        daemon thread from chunks copied on the loop, swapped in once built."""
        site = self.site
        loop = asyncio.get_running_loop()
        ids = old.ids()  # the rows the build takes; the journal has every write from now
        journal = Journal(site.journal_max_bytes)
        self.promoting[key] = journal
        self.reserve(key, estimate_nbytes(len(ids), old.dim, site.ann_options))
        site.evict(key)
        build = in_daemon(self._pulled, key, old, journal, ids, loop, turn,
                          name="a2e-vector-index", track=BUILDERS)
        await self._swap(key, old, journal, build)

    async def _swap(self, key: str, old: Index, journal: Journal,
                    build: asyncio.Future[tuple[AnnIndex, int]]) -> None:
        site = self.site
        done = 0  # the journal's writes the new graph has
        try:
            ann, done = await build
            path = site.saved_path(key)
            if self.promoting.get(key) is journal and path is not None:
                # saved now, while no one else sees it (a save while the loop writes to an
                # index would tear its file): a host killed later reads it back, brought to
                # the store's rows by the load's check
                await asyncio.shield(site.save_soon(key, ann))
            # the writes the build's thread left (and those made meanwhile), `SWAP_STEP` rows
            # between two turns of the loop; the journal keeps taking new ones till the swap
            while (done < len(journal.ops) and self.promoting.get(key) is journal
                   and site.current(key) is old and not journal.overflowed):
                op = journal.ops[done]
                done += 1
                for part in steps(op, SWAP_STEP):
                    site.apply(ann, part)
                    await asyncio.sleep(0)
        except BuildAbandoned:
            log.info("vector index build of a key abandoned")
            return
        except Exception:
            log.exception("vector index of a key not rebuilt: it stays as it was")
            return
        finally:
            self.end(key, journal)  # (not dropped, and promoted again, meanwhile)
        if site.current(key) is not old or journal.overflowed or done < len(journal.ops):
            return  # evicted (or replaced) meanwhile, or too many writes meanwhile: not swapped
        site.count(ann.nbytes - old.nbytes)
        site.replace(key, ann)
        self.promotions += 1
        del old
        trim_soon()  # the rows it served from meanwhile are freed
        site.evict(key)

    def _pulled(self, key: str, source: Index, journal: Journal, ids: np.ndarray,
                loop: asyncio.AbstractEventLoop, turn: Turn) -> tuple[AnnIndex, int]:
        """(In the build's thread.) An `AnnIndex` of the rows of `ids`, each chunk copied from
        `source` on the loop when the build needs it, with the writes of `journal` made
        meanwhile replayed on it here until at most `SWAP_ROWS` of them are left; and how many
        of the journal's writes it has. The turn released here when the build fails (else by
        the loop once the graph is swapped in)."""
        def chunks() -> Iterator[Chunk]:
            for i in range(0, len(ids), CHUNK):
                chunk = on_loop(loop, self._copy_rows, key, source, journal,
                                ids[i: i + CHUNK].tolist())
                if chunk[0]:
                    yield chunk

        def stop() -> bool:
            return EXITING.is_set() or loop.is_closed()
        threads = self.site.rebuild_threads
        try:
            ann = build_ann(source.dim, chunks(), threads=threads, stop=stop,
                            ranges=self.ranges(source), rows_hint=len(ids),
                            **self.site.ann_options)
            with omp_threads(threads):
                done = 0
                while True:
                    ops = on_loop(loop, self._journal_since, key, source, journal, done)
                    if op_rows(ops) <= SWAP_ROWS:
                        return ann, done  # the loop applies the rest at the swap
                    for op in ops:
                        for part in steps(op, BUILD_STEP):
                            if stop():
                                raise BuildAbandoned
                            self.site.apply(ann, part)
                    done += len(ops)
        except BaseException:
            turn.release()
            raise

    def _still(self, key: str, source: Index, journal: Journal) -> None:
        """(On the loop.) `BuildAbandoned` once the key left or the build was dropped."""
        if self.promoting.get(key) is not journal or self.site.current(key) is not source \
                or journal.overflowed:
            raise BuildAbandoned

    def _journal_since(self, key: str, source: Index, journal: Journal, done: int) -> list[Op]:
        """(On the loop.) The writes of `journal` after its first `done`, for the build's
        thread to replay."""
        self._still(key, source, journal)
        return journal.ops[done:]

    def _copy_rows(self, key: str, source: Index, journal: Journal, ids: list[int]) -> Chunk:
        """(On the loop.) The rows of `ids` still in `source`, for its build."""
        self._still(key, source, journal)
        return source.rows_of(ids)
