"""`VectorIndexes`: the vector indexes of every key (namespace, or namespace and vector space),
loaded on first use, evicted least recently used past a memory budget (the keys of a namespace
over its share of the budget first, `namespace_share`: one tenant cannot evict the others).

A key's rows come from the store through `loader(key)` (blocking: `open` runs it in a thread).
A key below `ann_min_rows` rows is an `ExactIndex`; past it, an `AnnIndex` (approximate search,
compact vectors, exact under small filters: see `host.search.index.ann`), built in a background
thread while searches stay exact, or read back from `persist_dir` when a saved graph still
matches the store's rows (a restart then never rebuilds a big graph, and never re-embeds).

A load never builds a graph: the first open of a big key without a usable saved file serves it
from the rows it read at once, and promotes it in the background like a key grown past
`ann_min_rows` (a graph takes ~6 minutes a million rows on 2 cores, bench_index). Its rows are
held as 8-bit codes once they pass `ann_min_rows` (an `AnnIndex` with no graph yet,
`AnnIndex.coded_of`) or the budget as `dtype` (a `CodedIndex`), every row scored (its best
rescored by the callers as an `AnnIndex`'s): a million rows of 384 dimensions are then 0.5 GB
instead of 1.6 GB. The graph of such an `AnnIndex` is built in place, over those codes, a step
at a time (`_build_here`, `AnnIndex.begin_graph`): the index serves and takes writes
meanwhile, nothing is journalled, and the codes and the id map exist once.

Promotions and compactions are queued (`BUILDS`: one at a time in the process, smallest key
first; a key waiting is served by its current index) and build on one core
(`rebuild_threads`) in a daemon thread, which takes the rows from the loop a chunk at a time
(`CHUNK` rows copied from the current index there, consistent with the journal of writes
since the build began), not from a snapshot: a build holds the graph it makes, counted in the
budget from its start at its estimated final size, and one chunk. Shutdown never waits for a
build to end (one in progress stops at its next step of `BUILD_STEP` rows, see `_EXITING`,
and is done again at the next load). A graph built is saved (with `persist_dir`) before it is
swapped in, while it is still the build's alone, so a host killed afterwards reads it back.

Writes (`add`, `set_meta`, `remove`) mirror the store's: a write to a key that is not loaded is
dropped (its next load reads it from the store); a write to a key being loaded, or being
promoted to an `AnnIndex`, is also kept in a journal and replayed on the new index, so nothing
written during a load or a build is lost (a build's journal by the build's thread, but for
its last `SWAP_ROWS` rows, which the loop adds `SWAP_STEP` at a time before the swap).

Not thread-safe: call it on the event loop (its threads only build indexes no one else sees,
or, built in place, a graph whose every step the loop sets up between two of their calls).
"""

from __future__ import annotations

import asyncio
import atexit
import ctypes
import hashlib
import heapq
import importlib
import itertools
import json
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future as _ThreadFuture
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

import numpy as np

from host.search.index.exact import CHUNK, CodedIndex, ExactIndex

if TYPE_CHECKING:
    from host.search.index.ann import AnnIndex

log = logging.getLogger(__name__)

Chunk = tuple[list[int], np.ndarray, list[str], list[float | None]]
Loader = Callable[[str], Iterable[Chunk]]
Index = Union[ExactIndex, "AnnIndex"]  # noqa: UP007 (a forward reference)
_Op = tuple[Any, ...]  # ("add", ids, vecs, groups, expires) | ("meta", id, group, expires) | ("remove", ids)

DEFAULT_ANN_MIN_ROWS = 50_000
# The writes kept for a key being loaded or rebuilt are bounded: past this, the journal is
# dropped and the load re-read (up to LOAD_ATTEMPTS times; a last overflowing load serves its
# caller without being kept), or the rebuild abandoned (retried on a later write).
JOURNAL_MAX_BYTES = 64 << 20
LOAD_ATTEMPTS = 3
COMPACT_SHARE = 0.3  # an AnnIndex is rebuilt when this share of its slots are holes
COMPACT_MIN = 1000  # ... and at least this many
# a saved graph is read afresh instead when more than this share of its rows (and at least
# COMPACT_MIN) would be added to it (`_reconcile`)
STALE_SHARE = 0.25
# The writes made to a key while its graph was built are replayed on the new graph by the
# build's thread (the GIL released in faiss) until at most SWAP_ROWS of them are left; the
# loop applies those at the swap, SWAP_STEP rows between two of its turns (64 rows took
# 45-91 ms into a graph of 100,000 x 384 here; replayed at once on the loop, the 40,000 rows a
# catch-up wrote during a build held every connection for 23 s).
SWAP_ROWS = 1024
SWAP_STEP = 16
# freed by evictions since the allocator was last asked to return its free pages (`_trim`)
TRIM_BYTES = 32 << 20


def _op_rows(ops: list[_Op]) -> int:
    """Rows the adds among `ops` write."""
    return sum(len(op[1]) for op in ops if op[0] == "add")


def _steps(op: _Op, rows: int) -> Iterator[_Op]:
    """`op` in parts of at most `rows` rows (an add; other writes whole)."""
    if op[0] != "add" or len(op[1]) <= rows:
        yield op
        return
    for i in range(0, len(op[1]), rows):
        j = slice(i, i + rows)
        yield ("add", op[1][j], op[2][j], op[3][j], op[4][j])


class _Journal:
    """Writes made to a key while it is loaded or rebuilt, replayed on the new index."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.ops: list[_Op] = []
        self.nbytes = 0
        self.overflowed = False

    def append(self, op: _Op) -> None:
        if self.overflowed:
            return
        self.nbytes += 64 + (op[2].nbytes + 64 * len(op[1]) if op[0] == "add"
                             else 8 * len(op[1]) if op[0] == "remove" else 0)
        if self.nbytes > self.max_bytes:
            self.overflowed = True
            self.ops = []
        else:
            self.ops.append(op)


class _Behind(Exception):
    """A saved graph too far behind its key's stored rows to bring up to date."""


class _InPlace(_Journal):
    """The mark of a key whose graph is built in place (`_build_here`): its writes go to the
    index itself, nothing is kept."""

    def __init__(self) -> None:
        super().__init__(0)
        self.build_id = -1

    def append(self, op: _Op) -> None:
        pass


# JSON of `AnnIndex` keyword arguments under every `VectorIndexes`'s `ann_options` (tests and
# benchmarks of a host process: e.g. a slow build, {"ef_construction": 4000})
ANN_OPTIONS_ENV = "A2E_INDEX_ANN_OPTIONS"


# Set at exit: the graph builds in progress stop at their next step (`AnnIndex.build`'s
# `stop`), and the exit waits for that (at most `EXIT_WAIT` seconds), not for their end: a
# daemon thread still in faiss while the process tears down aborts it ("terminate called").
_EXITING = threading.Event()
_BUILDERS: set[threading.Thread] = set()
EXIT_WAIT = 30.0


@atexit.register
def _abandon_builds() -> None:
    _EXITING.set()
    deadline = time.monotonic() + EXIT_WAIT
    for thread in list(_BUILDERS):
        thread.join(max(0.0, deadline - time.monotonic()))


def _in_daemon(fn: Callable[..., Any], *args: Any, builder: bool = False
               ) -> asyncio.Future[Any]:
    """`fn(*args)` in a daemon thread, as a future of the running loop: unlike
    `asyncio.to_thread`, the interpreter does not wait for it at exit (a graph build of a
    million rows takes minutes). A loop closed before it ends is not called back."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[Any] = loop.create_future()
    done: _ThreadFuture[Any] = _ThreadFuture()

    def settle(_: object) -> None:
        if not fut.done():
            if done.exception() is not None:
                fut.set_exception(done.exception())  # type: ignore[arg-type]
            else:
                fut.set_result(done.result())

    def run() -> None:
        try:
            done.set_result(fn(*args))
        except BaseException as e:  # handed to the loop
            done.set_exception(e)
        finally:
            _BUILDERS.discard(threading.current_thread())
        try:
            loop.call_soon_threadsafe(settle, None)
        except RuntimeError:  # the loop is closed: no one waits any more
            pass

    thread = threading.Thread(target=run, name="a2e-vector-index", daemon=True)
    if builder:
        _BUILDERS.add(thread)
    thread.start()
    return fut


class _Ticket:
    """A build's place in `BUILDS`: `fut` (of the loop that asked) is done once it may run."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.fut: asyncio.Future[None] = loop.create_future()
        self.granted = False  # under the queue's lock


def _grant(ticket: _Ticket) -> None:
    if not ticket.fut.done():  # (cancelled: its waiter's `give_up` passes the turn on)
        ticket.fut.set_result(None)


class BuildQueue:
    """The background graph builds of the process, at most `limit` at a time, the smallest
    (rows) first, then in the order asked: one key's build cannot starve another's of CPU,
    nor several builds' memory add up. Asked on a loop (`ask`), released by whichever thread
    ends the build (`release`)."""

    def __init__(self, limit: int = 1) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._running = 0
        self._waiting: list[tuple[int, int, _Ticket]] = []
        self._order = itertools.count()

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @property
    def running(self) -> int:
        return self._running

    def ask(self, rows: int) -> _Ticket:
        """A ticket for a build of `rows` rows; await its `fut`, then `release()` once built
        (or `give_up` a ticket no longer wanted)."""
        ticket = _Ticket(asyncio.get_running_loop())
        with self._lock:
            if self._running < self.limit and not self._waiting:
                self._running += 1
                ticket.granted = True
                ticket.fut.set_result(None)
            else:
                heapq.heappush(self._waiting, (rows, next(self._order), ticket))
        return ticket

    def give_up(self, ticket: _Ticket) -> None:
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


class _Turn:
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


_LIBC: Any = None


def _trim() -> None:
    """Ask the C allocator to return its free pages to the system (glibc's `malloc_trim`):
    numpy arrays freed by evictions and builds otherwise stay in its arenas, counted in RSS."""
    global _LIBC
    try:
        if _LIBC is None:
            _LIBC = ctypes.CDLL("libc.so.6")
        _LIBC.malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        _LIBC = False


def _on_loop(loop: asyncio.AbstractEventLoop, fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)` run on `loop` (from a build's thread), its result; `BuildAbandoned` when
    the loop is closed or the process exits."""
    done: _ThreadFuture[Any] = _ThreadFuture()

    def run() -> None:
        try:
            done.set_result(fn(*args))
        except BaseException as e:  # handed to the thread
            done.set_exception(e)
    try:
        loop.call_soon_threadsafe(run)
    except RuntimeError:
        raise _ann().BuildAbandoned from None
    while True:
        try:
            return done.result(timeout=0.5)
        except TimeoutError:
            if _EXITING.is_set() or loop.is_closed():
                raise _ann().BuildAbandoned from None


def namespace_of(key: str) -> str:
    """The namespace of a key: the key itself (a namespace's own vectors), or its part before
    U+0000 (a client space's, `host.search.client_vectors.space_key`)."""
    return key.split("\x00", 1)[0]


def _ann() -> Any:
    # the ANN library is imported only when a key needs it
    return importlib.import_module("host.search.index.ann")


class VectorIndexes:
    """The indexes of every key: `get`/`open` one, write through `add`/`set_meta`/`remove`.

    - `dim`: the dimension of a key created by `add` without a loader (a loaded key takes the
      dimension of the vectors its loader yields, so keys may differ).
    - `budget_bytes`: past this sum of `nbytes`, least recently used keys are evicted (only
      with a `loader`: an evicted key must be readable again); 0: no budget. The key being
      opened or written is never evicted, so a key bigger than the whole budget stays loaded
      alone (then `nbytes` > `budget_bytes` until it shrinks).
    - `loader(key)`: yields the key's stored rows in chunks `(ids, unit float32 vectors
      (n, dim), groups, expiries)`; blocking (run in a thread by `open`). None: every key lives
      in memory from its first `add` (no loading, no eviction).
    - `ann_min_rows`: a key with this many rows becomes an `AnnIndex` (0: never).
    - `persist_dir`: where `AnnIndex`es are saved (when evicted, and by `save_all()`), and read
      back by `open` when they still match the store's rows; a corrupt or foreign file is
      ignored (the key is rebuilt from the loader).
    - `dtype`: the storage of `ExactIndex`es, "float32" or "float16" (half the memory).
    - `ann_options`: keyword arguments for `AnnIndex` (see there).
    - `namespace_share`: the share of `budget_bytes` the keys of one namespace (`namespace_of`
      a key) hold when others need the room (1: no bound). Past the budget, the least recently
      used keys of the namespaces over their share leave first; then, when the namespace of
      the key being opened or written is still over its share, that key leaves (its caller
      is served, its next query reads it again) rather than another namespace's; then the
      least recently used of all. So one tenant filling the budget evicts its own keys; a
      namespace alone on a host still holds the whole budget.
    """

    def __init__(
        self, dim: int = 0, budget_bytes: int = 0, loader: Loader | None = None,
        ann_min_rows: int = DEFAULT_ANN_MIN_ROWS, persist_dir: str | Path | None = None,
        dtype: str = "float32", ann_options: dict[str, Any] | None = None,
        namespace_share: float = 1.0,
    ) -> None:
        if budget_bytes < 0 or ann_min_rows < 0:
            raise ValueError("budget_bytes and ann_min_rows must be >= 0")
        if not 0 < namespace_share <= 1:
            raise ValueError("namespace_share must be in (0, 1]")
        self.namespace_share = namespace_share
        ExactIndex(1, dtype, capacity=1)  # checks dtype
        self.dim = dim
        self.budget_bytes = budget_bytes
        self.ann_min_rows = ann_min_rows
        self.dtype = dtype
        self.ann_options = {**json.loads(os.environ.get(ANN_OPTIONS_ENV) or "{}"),
                            **(ann_options or {})}
        self.persist_dir = Path(persist_dir) if persist_dir is not None else None
        self._loader = loader
        self._indexes: OrderedDict[str, Index] = OrderedDict()  # least recently used first
        self._loading: dict[str, asyncio.Future[Index | None]] = {}
        self._journals: dict[str, _Journal] = {}  # key -> writes during its load
        self._promoting: dict[str, _Journal] = {}  # key -> writes during its ANN build
        self._tasks: set[asyncio.Task[Any]] = set()
        self._saving: dict[str, asyncio.Future[Any]] = {}
        self._snapshots: dict[str, int] = {}  # key -> bytes its build holds (estimated)
        self._queued: dict[str, Index] = {}  # key -> its index waiting for a build's turn
        # bytes evicted or loaded (a load's chunks are freed) since the allocator was last
        # trimmed; the first load trims (what the host freed before, a bulk load's requests)
        self._freed = TRIM_BYTES
        self.loads = self.evictions = self.promotions = self.saved_hits = 0
        self.let_go = 0  # keys evicted as they were opened or written: their namespace's share
        self.journal_max_bytes = JOURNAL_MAX_BYTES  # see there
        self.rebuild_threads = 1  # faiss threads of a background promotion or compaction
        self._held = 0  # running sum of the loaded indexes' nbytes (`_evict` checks it)

    # --- reading ---

    def get(self, key: str) -> Index | None:
        """The loaded index of `key` (now the most recently used), or None: no I/O."""
        index = self._indexes.get(key)
        if index is not None:
            self._indexes.move_to_end(key)
        return index

    async def open(self, key: str) -> Index | None:
        """The index of `key`, loaded from the store when it is not (in a thread; concurrent
        opens of one key share one load); None when the key has no rows (or no loader)."""
        index = self.get(key)
        if index is not None or self._loader is None:
            return index
        fut = self._loading.get(key)
        if fut is not None:
            return await asyncio.shield(fut)
        fut = self._loading[key] = asyncio.get_running_loop().create_future()
        try:
            saving = self._saving.get(key)
            if saving is not None:
                await asyncio.shield(saving)
            for _ in range(LOAD_ATTEMPTS):
                self._journals[key] = _Journal(self.journal_max_bytes)
                index = await _in_daemon(self._load, key)
                journal = self._journals.pop(key)  # no await till the next: no write unseen
                if not journal.overflowed:
                    break
            index = self._replay(index, journal.ops)
            if journal.overflowed:  # writes were missed: serve this caller, keep nothing
                log.warning("vector index of a key written too fast to load: not kept")
            elif index is not None and len(index):
                self._indexes[key] = index
                self._held += index.nbytes
                self.loads += 1
                self._freed += index.nbytes
                self._evict(keep=key)
                self._loading.pop(key, None)  # loaded: past ann_min_rows, promoted from now
                if self._indexes.get(key) is index:  # (not let go: its namespace's share)
                    self._maybe_promote(key, index)
            else:
                index = None
            fut.set_result(index)
        except BaseException as e:
            self._journals.pop(key, None)
            fut.set_exception(e)
            fut.exception()  # retrieved: the caller gets it raised
            raise
        finally:
            self._loading.pop(key, None)
        return index

    def keys(self) -> list[str]:
        """The loaded keys, least recently used first."""
        return list(self._indexes)

    def __len__(self) -> int:
        """Rows held in memory (every loaded key)."""
        return sum(len(ix) for ix in self._indexes.values())

    @property
    def nbytes(self) -> int:
        """Bytes the loaded indexes hold, what their builds in progress hold (the graph each
        makes, at its estimated final size, from the build's start) and the journals of the
        writes during loads and builds: the sum the budget bounds."""
        return (sum(ix.nbytes for ix in self._indexes.values())
                + sum(self._snapshots.values())
                + sum(j.nbytes for j in (*self._journals.values(), *self._promoting.values())))

    def drop(self, key: str) -> bool:
        """Forget the loaded index of `key` (its next `open` reads the store; a build in
        progress is not swapped in, a load in progress reads again); False when not loaded."""
        journal = self._journals.get(key)
        if journal is not None:  # a load in progress: read again (see `open`)
            journal.overflowed = True
            journal.ops = []
        self._promoting.pop(key, None)
        self._queued.pop(key, None)
        self._held -= self._snapshots.pop(key, 0)
        index = self._indexes.pop(key, None)
        if index is None:
            return False
        self._held -= index.nbytes
        return True

    def stats(self) -> dict[str, int]:
        """Figures for metrics: keys loaded / loading / being promoted, rows, bytes, budget,
        and the counts since start of loads, evictions, promotions and saved indexes reused."""
        return {
            "keys": len(self._indexes), "loading": len(self._loading),
            "promoting": len(self._promoting) + len(self._queued),
            "builds_queued": len(self._queued), "rows": len(self), "nbytes": self.nbytes,
            "budget_bytes": self.budget_bytes, "loads": self.loads,
            "evictions": self.evictions, "promotions": self.promotions,
            "saved_hits": self.saved_hits, "let_go": self.let_go,
            "ann_keys": sum(ix.kind == "ann" for ix in self._indexes.values()),
        }

    # --- writing ---

    def add(
        self, key: str, ids: list[int], vectors: np.ndarray, groups: list[str],
        expires: list[float | None],
    ) -> None:
        """Add or replace rows of `key` (see `ExactIndex.add`). With a loader, dropped when the
        key is not loaded (its next load reads them from the store)."""
        if not ids:
            return
        vectors = np.asarray(vectors, dtype=np.float32).reshape(len(ids), -1)
        op = ("add", list(ids), vectors, list(groups), list(expires))
        if key in self._journals:
            self._journals[key].append(op)
        if key in self._promoting:
            self._promoting[key].append(op)
        index = self._indexes.get(key)
        if index is None:
            if self._loader is not None:
                return
            index = self._indexes[key] = ExactIndex(self.dim or vectors.shape[1], self.dtype)
            self._held += index.nbytes
        self._indexes.move_to_end(key)
        before = index.nbytes
        index.add(*op[1:])
        self._held += index.nbytes - before
        self._evict(keep=key)
        if self._indexes.get(key) is index:  # (not let go: its namespace's share)
            self._maybe_promote(key, index)

    def set_meta(self, entry_id: int, group: str, expires: float | None,
                 key: str | None = None) -> bool:
        """Update the group and expiry of a row (in `key`, else in whichever loaded key holds
        it: naming the key is cheaper); False when no loaded index has the row (the key may
        just not be loaded)."""
        op = ("meta", entry_id, group, expires)
        self._journal(op, key)
        return any(ix.set_meta(entry_id, group, expires) for ix in self._holders(key))

    def remove(self, ids: Iterable[int], key: str | None = None) -> int:
        """Remove rows by id (from `key`, else from every loaded key); the number removed."""
        ids = list(ids)
        self._journal(("remove", ids), key)
        removed = 0
        for k, index in list(self._indexes.items()):
            if key is None or k == key:
                before = index.nbytes
                n = index.remove(ids)
                self._held += index.nbytes - before
                if n:
                    removed += n
                    self._maybe_promote(k, index)
        return removed

    def _holders(self, key: str | None) -> list[Index]:
        if key is not None:
            index = self._indexes.get(key)
            return [] if index is None else [index]
        return list(self._indexes.values())

    def _journal(self, op: _Op, key: str | None) -> None:
        for journals in (self._journals, self._promoting):
            for k, journal in journals.items():
                if key is None or k == key:
                    journal.append(op)

    @staticmethod
    def _apply(index: Index, op: _Op) -> None:
        if op[0] == "add":
            index.add(*op[1:])
        elif op[0] == "meta":
            index.set_meta(*op[1:])
        else:
            index.remove(op[1])

    def _replay(self, index: Index | None, journal: list[_Op]) -> Index | None:
        for op in journal:
            if index is None and op[0] == "add":
                index = ExactIndex(op[2].shape[1], self.dtype)
            if index is not None:
                self._apply(index, op)
        return index

    # --- loading (in a thread) ---

    def _load(self, key: str) -> Index | None:
        assert self._loader is not None
        saved = self._read_saved(key)
        if saved is not None:
            try:
                kept = self._reconcile(saved, key)
                if kept is None:  # emptied since saved: its file would be read every query
                    _ann().AnnIndex.discard(self._path(key))
                return kept
            except _Behind:
                log.info("saved vector index of a key far behind its rows: read afresh")
            except (ValueError, KeyError, RuntimeError) as e:  # another dimension, ...
                log.warning("saved vector index of a key does not fit its rows (%s): rebuilt", e)
            del saved
        index: Index | None = None  # past ann_min_rows: promoted by `open` afterwards
        for ids, vecs, groups, expires in self._loader(key):
            if not len(ids):
                continue
            if index is None:
                index = ExactIndex(np.asarray(vecs).shape[-1], self.dtype)
            index.add(ids, vecs, groups, expires)
            if isinstance(index, ExactIndex):  # the rest comes coded; the float rows go
                if self.ann_min_rows and len(index) >= self.ann_min_rows:
                    # the codes its graph is built over, in place (`_build_here`)
                    index = _ann().AnnIndex.coded_of(index, **self.ann_options)
                elif not isinstance(index, CodedIndex) and self._coded_due(index):
                    index = CodedIndex.of(index)
        return index

    def _coded_due(self, index: ExactIndex) -> bool:
        """A key being loaded is held as 8-bit codes once its graph is due (the graph keeps
        the same codes) or once it would pass the whole budget as `dtype`."""
        return bool((self.ann_min_rows and len(index) >= self.ann_min_rows)
                    or (self.budget_bytes and index.nbytes > self.budget_bytes))

    def _build_ann(self, rows: ExactIndex | Iterator[Chunk], dim: int = 0,
                   threads: int = 0) -> Index:
        """An `AnnIndex` of an exact index's rows, or of chunks of rows (in a thread; `threads`
        for the graph, 0: every core)."""
        if isinstance(rows, ExactIndex):
            dim, rows = rows.dim, rows.rows()
        return _ann().AnnIndex.build(  # type: ignore[no-any-return]
            dim, rows, threads=threads, stop=_EXITING.is_set, **self.ann_options)

    def _path(self, key: str) -> Path:
        assert self.persist_dir is not None
        return self.persist_dir / hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:40]

    def _read_saved(self, key: str) -> Index | None:
        if self.persist_dir is None:
            return None
        path = self._path(key)
        if not _ann().AnnIndex.exists(path):
            return None
        try:
            return _ann().AnnIndex.load(path, key=key, **self.ann_options)  # type: ignore[no-any-return]
        except Exception as e:  # corrupt, truncated, foreign: rebuild from the store
            log.warning("saved vector index %s unreadable (%s): rebuilt", path.name, e)
            return None

    def _write_saved(self, key: str, index: Index) -> None:
        assert self.persist_dir is not None
        try:
            if not len(index):  # emptied: no file (a load would read it for nothing)
                _ann().AnnIndex.discard(self._path(key))
                return
            self.persist_dir.mkdir(parents=True, exist_ok=True)
            ann: Any = index
            ann.save(self._path(key), key=key)
        except Exception as e:  # a full disk, an unwritable folder: the next load rebuilds
            log.warning("vector index not saved (%s)", e)

    def _reconcile(self, saved: Any, key: str) -> Index | None:
        """The saved index brought to the store's rows: rows missing or changed re-added, rows
        gone removed, groups and expiries taken from the store. `_Behind` when more than
        `STALE_SHARE` of its rows (at least `COMPACT_MIN`) would be added: each goes into the
        graph one by one (~0.3 ms), where reading the rows afresh serves at once and builds
        the graph in the background (a graph of 100,000 saved, the store grown to 1,000,000:
        900,000 insertions held the first query past its deadline). The rows to add are
        held till then up to `journal_max_bytes`, added when past it."""
        assert self._loader is not None
        seen: set[int] = set()
        late: list[Chunk] = []
        behind = held = 0

        def add_late() -> None:
            for part in late:
                saved.add(*part)
                saved.changed = True
            late.clear()

        rows = self._loader(key)
        try:
            for ids, vecs, groups, expires in rows:
                if len(ids):
                    part = saved.sync(ids, vecs, groups, expires, add=False)
                    seen.update(ids)
                    if part is not None:
                        late.append(part)
                        behind += len(part[0])
                        held += part[1].nbytes
                        if behind > max(COMPACT_MIN, STALE_SHARE * len(saved)):
                            raise _Behind
                        if held > self.journal_max_bytes:
                            add_late()
                            held = 0
        finally:
            close = getattr(rows, "close", None)
            if close is not None:  # a generator left midway: its snapshot is let go
                close()
        add_late()
        saved.remove([i for i in saved.ids().tolist() if i not in seen])
        saved.dirty = saved.changed
        self.saved_hits += 1
        return saved if len(saved) else None

    # --- promotion, eviction, saving (on the loop) ---

    def _rebuild_due(self, key: str, index: Index) -> bool:
        if (key in self._promoting or key in self._queued or key in self._loading
                or not self.ann_min_rows):
            return False
        if index.kind == "exact":
            return len(index) >= self.ann_min_rows
        if not self._built(index):  # codes only (a big key loaded): its graph is due
            return True
        garbage = index.garbage  # type: ignore[union-attr]
        return garbage >= COMPACT_MIN and garbage > COMPACT_SHARE * (garbage + len(index))

    def _maybe_promote(self, key: str, index: Index) -> None:
        """Promote an exact index past `ann_min_rows` to an `AnnIndex`, or rebuild an
        `AnnIndex` whose holes pass `COMPACT_SHARE`: queued for its turn (`BUILDS`), then built
        in a thread from the current index's rows (taken a chunk at a time on the loop) while
        it goes on serving; the writes meanwhile are replayed on the new one."""
        if not self._rebuild_due(key, index):
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a script): build now
            if not self._built(index):
                before = index.nbytes
                ann: Any = index
                ann.build_graph(stop=_EXITING.is_set)
                self._held += index.nbytes - before
                self.promotions += 1
                return
            snapshot, _ = index.snapshot()
            ann = self._indexes[key] = self._build_ann(iter(snapshot), index.dim)
            self._held += ann.nbytes - index.nbytes
            self.promotions += 1
            return
        self._queued[key] = index
        task = loop.create_task(self._promote(key, index))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @staticmethod
    def _built(index: Index) -> bool:
        """False for an `AnnIndex` of codes only, whose graph is built in place."""
        return bool(getattr(index, "built", True))

    @staticmethod
    def _ranges(index: Index) -> tuple[np.ndarray, np.ndarray] | None:
        """The 8-bit ranges a graph built from `index` takes (its own codes' when it has them:
        the codes are then the same), None: learnt from its rows."""
        if isinstance(index, CodedIndex):
            return index.ranges
        if index.kind == "ann":
            ann: Any = index
            return ann._vmin, ann._vstep * 255.0
        return None

    async def _promote(self, key: str, old: Index) -> None:
        ticket = BUILDS.ask(len(old))
        try:
            await ticket.fut
        except BaseException:
            BUILDS.give_up(ticket)
            raise
        started = False
        turn = _Turn()
        try:
            if self._queued.get(key) is not old or self._indexes.get(key) is not old:
                return  # evicted, dropped or replaced while it waited: nothing to build
            del self._queued[key]
            if not self._built(old):
                started = True
                await self._build_here(key, old, turn)
                return
            loop = asyncio.get_running_loop()
            ids = old.ids()  # the rows the build takes; the journal has every write from now
            journal = self._promoting[key] = _Journal(self.journal_max_bytes)
            size = _ann().AnnIndex.estimate_nbytes(
                len(ids), old.dim, int(self.ann_options.get("connectivity", 16)))
            self._snapshots[key] = size
            self._held += size
            self._evict(keep=key)
            started = True
            build = _in_daemon(self._build_pulled, key, old, journal, ids, loop,
                               self._ranges(old), turn, builder=True)
        finally:
            if not started:
                if self._queued.get(key) is old:
                    del self._queued[key]
                turn.release()
        swap = self._swap_built(key, old, journal, build)
        del old  # held by `swap` alone: freed (and trimmed) there once swapped out
        try:
            await swap
        finally:
            turn.release()  # the next build starts once this one's graph is in (or dropped)

    async def _build_here(self, key: str, ann: Any, turn: _Turn) -> None:
        """Build the graph of `ann` (codes only) over its own codes, in a thread, a step at a
        time (each taken on the loop, where `ann` goes on serving and being written, see
        `AnnIndex.begin_graph`); saved (with `persist_dir`) as soon as complete. Counted in
        the budget meanwhile: the graph at its estimated size (the codes are `ann`'s)."""
        token = self._promoting[key] = _InPlace()
        done = started = False
        try:
            slack = max(2 * _ann().BUILD_STEP, len(ann) // 16)
            before = ann.nbytes
            graph = ann.begin_graph(slack)  # its codes sized for the build: counted from now
            token.build_id = ann.build_id
            size = _ann().AnnIndex.estimate_graph_nbytes(
                ann._cap - _ann().TAIL, int(self.ann_options.get("connectivity", 16)))
            self._snapshots[key] = size
            self._held += size + ann.nbytes - before
            self._evict(keep=key)
            loop = asyncio.get_running_loop()
            path = self._path(key) if self.persist_dir is not None else None
            if path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
            build = _in_daemon(self._graph_here, key, ann, graph, token, loop, path, turn,
                               builder=True)
            started = True

            def ended(f: asyncio.Future[Any]) -> None:  # on the loop, the thread out of faiss
                if ann._cap and ann.build_id == token.build_id:  # not complete, not detached
                    was = ann.nbytes
                    ann.abandon_graph()  # codes only again, retried on a later write
                    if key in self._indexes and self._indexes[key] is ann:
                        self._held += ann.nbytes - was
                turn.release()
            build.add_done_callback(ended)
            done = await asyncio.shield(build)
        except Exception as e:
            if isinstance(e, _ann().BuildAbandoned):
                log.info("vector index build of a key abandoned")
            else:
                log.exception("vector index graph of a key not built: it stays coded")
        finally:
            if self._promoting.get(key) is token:  # (its thread's next turn stops it)
                self._promoting.pop(key)
                self._held -= self._snapshots.pop(key, 0)
            if not started:
                turn.release()
        if done and self._indexes.get(key) is ann:
            self.promotions += 1
            _trim()
            self._evict(keep=key)

    def _graph_here(self, key: str, ann: Any, graph: Any, token: _InPlace,
                    loop: asyncio.AbstractEventLoop, path: Path | None, turn: _Turn) -> bool:
        """(In the build's thread.) The steps of `ann`'s graph, the save once complete; True
        once the graph is `ann`'s (`end_graph`, on the loop). `graph`: its faiss index as the
        build began. The queue's turn released here when the build fails (its loop may be
        gone), else by the loop."""
        try:
            with _ann().omp_threads(self.rebuild_threads):
                self._graph_steps(key, ann, graph, token, loop, path)
            return True
        except BaseException:
            turn.release()
            raise

    def _graph_steps(self, key: str, ann: Any, graph: Any, token: _InPlace,
                     loop: asyncio.AbstractEventLoop, path: Path | None) -> None:
        """(In the build's thread.) `_graph_here`'s loop: each step taken on the loop, run
        here; the save once complete; returns once the graph is `ann`'s."""
        saved = path is None
        ann.reserve_links(graph)
        while True:
            if _EXITING.is_set() or loop.is_closed():
                raise _ann().BuildAbandoned
            step = _on_loop(loop, self._graph_turn, key, ann, token, saved)
            if step is None:
                return
            if isinstance(step, dict):  # complete: saved while the loop serves it
                assert path is not None
                ok = True
                try:
                    ann.save_built(path, key, step)
                except Exception as e:  # a full disk: the index stays to save
                    log.warning("vector index not saved (%s)", e)
                    ok = False
                saved = True
                _on_loop(loop, self._graph_thaw, key, ann, token, ok)
                continue
            ann.graph_step(*step)

    def _graph_turn(self, key: str, ann: Any, token: _InPlace, saved: bool
                    ) -> tuple[Any, int, int] | dict[str, Any] | None:
        """(On the loop.) The next step of `ann`'s graph; once complete, its rows to save
        (`freeze`) or, saved, the graph made `ann`'s (`end_graph`, the budget's estimate of
        it replaced by its bytes), None."""
        self._check_here(key, ann, token)
        step = ann.next_step()
        if step is not None:
            return step  # type: ignore[no-any-return]
        if not saved:
            return ann.freeze()  # type: ignore[no-any-return]
        before = ann.nbytes
        ann.end_graph(saved=self.persist_dir is not None)
        self._promoting.pop(key)
        self._held += ann.nbytes - before - self._snapshots.pop(key, 0)
        return None

    def _graph_thaw(self, key: str, ann: Any, token: _InPlace, saved: bool) -> None:
        """(On the loop.) After the save (`saved`: written): the graph's last steps follow."""
        if ann.build_id == token.build_id and ann._saving >= 0:
            ann.thaw()
        if not saved:
            ann.dirty = True
        self._check_here(key, ann, token)

    def _check_here(self, key: str, ann: Any, token: _InPlace) -> None:
        index: Any = self._indexes.get(key)
        if (self._promoting.get(key) is not token or index is not ann
                or ann.build_id != token.build_id):
            raise _ann().BuildAbandoned  # dropped, evicted, or detached (past its room)

    async def _swap_built(self, key: str, old: Index, journal: _Journal,
                          build: asyncio.Future[Any]) -> None:
        done = 0  # the journal's writes the new graph has
        try:
            # one core: the key is served meanwhile, and the host has other work; a daemon
            # thread: shutdown does not wait for it
            ann, done = await build
            if self._promoting.get(key) is journal and self.persist_dir is not None:
                # saved now, while no one else sees it (a save while the loop writes to an
                # index would tear its file): a host killed later reads it back, brought to
                # the store's rows by the load's check
                await asyncio.shield(self._save_soon(key, ann))
            # the writes the build's thread left (and those made meanwhile), `SWAP_STEP` rows
            # between two turns of the loop; the journal keeps taking new ones till the swap
            while (done < len(journal.ops) and self._promoting.get(key) is journal
                   and self._indexes.get(key) is old and not journal.overflowed):
                op = journal.ops[done]
                done += 1
                for part in _steps(op, SWAP_STEP):
                    self._apply(ann, part)
                    await asyncio.sleep(0)
        except Exception as e:
            if isinstance(e, _ann().BuildAbandoned):
                log.info("vector index build of a key abandoned")
            else:
                log.exception("vector index of a key not rebuilt: it stays as it was")
            return
        finally:
            if self._promoting.get(key) is journal:  # not dropped (and promoted again) meanwhile
                self._promoting.pop(key)
                self._held -= self._snapshots.pop(key, 0)
        if self._indexes.get(key) is not old or journal.overflowed or done < len(journal.ops):
            return  # evicted (or replaced) meanwhile, or too many writes meanwhile: not swapped
        self._held += ann.nbytes - old.nbytes
        self._indexes[key] = ann  # keeps its place in the LRU order
        self.promotions += 1
        del old
        _trim()  # the rows it served from meanwhile are freed
        self._evict(keep=key)

    def _build_pulled(self, key: str, source: Index, journal: _Journal, ids: np.ndarray,
                      loop: asyncio.AbstractEventLoop,
                      ranges: tuple[np.ndarray, np.ndarray] | None, turn: _Turn
                      ) -> tuple[Index, int]:
        """(In the build's thread.) An `AnnIndex` of the rows of `ids`, each chunk copied from
        `source` on the loop when the build needs it, with the writes of `journal` made
        meanwhile replayed on it here until at most `SWAP_ROWS` of them are left; and how many
        of the journal's writes it has. The queue's turn released here when the build fails
        (else by the loop once the graph is swapped in)."""
        def chunks() -> Iterator[Chunk]:
            for i in range(0, len(ids), CHUNK):
                chunk = _on_loop(loop, self._copy_rows, key, source, journal,
                                 ids[i: i + CHUNK].tolist())
                if chunk[0]:
                    yield chunk

        def stop() -> bool:
            return _EXITING.is_set() or loop.is_closed()
        try:
            ann = _ann().AnnIndex.build(
                source.dim, chunks(), threads=self.rebuild_threads, stop=stop, ranges=ranges,
                rows_hint=len(ids), **self.ann_options)
            with _ann().omp_threads(self.rebuild_threads):
                done = 0
                while True:
                    ops = _on_loop(loop, self._journal_since, key, source, journal, done)
                    if _op_rows(ops) <= SWAP_ROWS:
                        return ann, done  # the loop applies the rest at the swap
                    for op in ops:
                        for part in _steps(op, _ann().BUILD_STEP):
                            if stop():
                                raise _ann().BuildAbandoned
                            self._apply(ann, part)
                    done += len(ops)
        except BaseException:
            turn.release()
            raise

    def _journal_since(self, key: str, source: Index, journal: _Journal, done: int
                       ) -> list[_Op]:
        """(On the loop.) The writes of `journal` after its first `done`, for the build's
        thread to replay; the build is abandoned once the key left or the build was dropped."""
        if self._promoting.get(key) is not journal or self._indexes.get(key) is not source \
                or journal.overflowed:
            raise _ann().BuildAbandoned
        return journal.ops[done:]

    def _copy_rows(self, key: str, source: Index, journal: _Journal, ids: list[int]) -> Chunk:
        """(On the loop.) The rows of `ids` still in `source`, for its build; the build is
        abandoned once the key left or the build was dropped."""
        if self._promoting.get(key) is not journal or self._indexes.get(key) is not source \
                or journal.overflowed:
            raise _ann().BuildAbandoned
        return source.rows_of(ids)

    def _evict(self, keep: str) -> None:
        """Past the budget, keys leave: see `namespace_share` for which first."""
        if not self.budget_bytes or self._loader is None or self._held <= self.budget_bytes:
            self._maybe_trim()
            return
        self._held = self.nbytes  # the running sum checked against the real one
        if self.namespace_share < 1:
            self._evict_shares(keep)
        for key in list(self._indexes):
            if self._held <= self.budget_bytes or len(self._indexes) == 1:
                break
            if key != keep and key not in self._promoting:
                self._evict_key(key)
        self._maybe_trim()

    def _evict_shares(self, keep: str) -> None:
        """`_evict`'s first steps: the keys of namespaces over their share leave, least
        recently used first; then the key being opened or written, when its namespace is still
        over its share and the budget would otherwise take another namespace's key."""
        share = self.namespace_share * self.budget_bytes
        held = self.namespace_bytes()
        for key in list(self._indexes):
            if self._held <= self.budget_bytes:
                return
            ns = namespace_of(key)
            if key != keep and key not in self._promoting and held[ns] > share:
                held[ns] -= self._evict_key(key)
        ns = namespace_of(keep)
        if (self._held > self.budget_bytes and held.get(ns, 0) > share
                and keep in self._indexes and keep not in self._promoting
                and any(namespace_of(k) != ns for k in self._indexes)):
            self.let_go += 1
            self._evict_key(keep)

    def namespace_bytes(self) -> dict[str, int]:
        """The bytes each namespace's keys hold (`nbytes` by namespace)."""
        held: dict[str, int] = {}
        for parts in (((k, ix.nbytes) for k, ix in self._indexes.items()),
                      self._snapshots.items(),
                      ((k, j.nbytes) for k, j in (*self._journals.items(),
                                                  *self._promoting.items()))):
            for key, size in parts:
                ns = namespace_of(key)
                held[ns] = held.get(ns, 0) + size
        return held

    def _evict_key(self, key: str) -> int:
        """Let the loaded index of `key` go (saved first when it has a graph not saved); the
        bytes it held."""
        index = self._indexes.pop(key)
        size = index.nbytes
        self._held -= size
        self.evictions += 1
        self._freed += size
        if (self.persist_dir is not None and index.kind == "ann" and index.dirty
                and self._built(index)):
            self._save_later(key, index)
        return size

    def _maybe_trim(self) -> None:
        if self._freed >= TRIM_BYTES:
            self._freed = 0
            _trim()

    def _save_later(self, key: str, index: Index) -> None:
        """Save `index` in a thread (open(key) waits for it before reading the file)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            self._write_saved(key, index)
            return
        self._save_soon(key, index)

    def _save_soon(self, key: str, index: Index) -> asyncio.Future[Any]:
        """Save `index` in a thread after the key's save in progress; open(key) and `save_all`
        wait for it."""
        loop = asyncio.get_running_loop()
        previous = self._saving.get(key)

        async def save() -> None:
            if previous is not None:
                await asyncio.shield(previous)
            await asyncio.to_thread(self._write_saved, key, index)

        fut = self._saving[key] = asyncio.ensure_future(save(), loop=loop)
        fut.add_done_callback(lambda f: self._saving.pop(key, None) if self._saving.get(key) is f else None)
        return fut

    async def save_all(self) -> int:
        """Save every loaded `AnnIndex` changed since it was saved (call at shutdown, with
        `persist_dir`); waits for saves in progress, not for builds (what they build is lost:
        the next load of their key serves it exactly and builds again). The number saved."""
        n = 0
        if self.persist_dir is not None:
            for key, index in list(self._indexes.items()):
                if index.kind == "ann" and index.dirty and self._built(index):
                    await asyncio.to_thread(self._write_saved, key, index)
                    n += 1
        for fut in list(self._saving.values()):
            await asyncio.shield(fut)
        return n

    async def wait_idle(self) -> None:
        """Wait for the promotions in progress (tests, benchmarks)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks))
