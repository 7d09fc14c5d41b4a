"""`VectorIndexes`: the vector indexes of every key (namespace, or namespace and vector space),
loaded on first use, evicted least recently used past a memory budget (the keys of a namespace
over its share of the budget first, `namespace_share`: one tenant cannot evict the others).

A key's rows come from the store through `loader(key)` (blocking: `open` runs it in a daemon
thread, `host.search.index.loading`). A key below `ann_min_rows` rows is an `ExactIndex`; past
it, an `AnnIndex` (approximate search, compact vectors, exact under small filters: see
`host.search.index.ann`), or the saved graph read back from `persist_dir` when it still matches
the store's rows (`host.search.index.persist`).

A load never builds a graph: the first open of a big key without a usable saved file serves it
from the rows it read at once, held as 8-bit codes (an `AnnIndex` with no graph yet: a million
rows of 384 dimensions are then 0.5 GB instead of 1.6 GB, every row scored, its best rescored by
the callers), and its graph is built in place over those codes in the background
(`host.search.index.graph.GraphBuild`). A key grown past `ann_min_rows`, or an `AnnIndex` whose
holes pass `COMPACT_SHARE`, is rebuilt from its rows beside the index serving it
(`host.search.index.builds`). Either way the build waits for its turn (`BUILDS`: one at a time
in the process, smallest key first) and is counted in the budget from its start.

Writes (`add`, `set_meta`, `remove`) mirror the store's: a write to a key that is not loaded is
dropped (its next load reads it from the store); a write to a key being loaded, or being
rebuilt, is also kept in a journal and replayed on the new index, so nothing written during a
load or a build is lost.

Not thread-safe: call it on the event loop (its threads only build indexes no one else sees,
or, built in place, a graph whose every step the loop sets up between two of their calls).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections import OrderedDict
from collections.abc import Iterable
from pathlib import Path
from typing import cast

import numpy as np

from host.search.index.allocator import trim, trim_soon
from host.search.index.ann import AnnIndex, AnnOptions
from host.search.index.builds import EXITING, Builds, Turn, build_ann
from host.search.index.daemon import in_daemon
from host.search.index.exact import ExactIndex
from host.search.index.graph import GraphBuild
from host.search.index.loading import (
    Add,
    Index,
    Journal,
    Loader,
    Meta,
    Op,
    Remove,
    Writes,
    apply,
    read_rows,
)
from host.search.index.persist import COMPACT_MIN, Behind, Saves

log = logging.getLogger(__name__)

DEFAULT_ANN_MIN_ROWS = 50_000
# The writes kept for a key being loaded or rebuilt are bounded: past this, the journal is
# dropped and the load re-read (up to LOAD_ATTEMPTS times; a last overflowing load serves its
# caller without being kept), or the rebuild abandoned (retried on a later write).
JOURNAL_MAX_BYTES = 64 << 20
LOAD_ATTEMPTS = 3
COMPACT_SHARE = 0.3  # an AnnIndex is rebuilt when this share of its slots are holes
# freed by evictions since the allocator was last asked to return its free pages (`trim`)
TRIM_BYTES = 32 << 20
# JSON of `AnnIndex` keyword arguments under every `VectorIndexes`'s `ann_options` (tests and
# benchmarks of a host process: e.g. a slow build, {"ef_construction": 4000})
ANN_OPTIONS_ENV = "A2E_INDEX_ANN_OPTIONS"


def namespace_of(key: str) -> str:
    """The namespace of a key: the key itself (a namespace's own vectors), or its part before
    U+0000 (a client space's, `host.search.client_vectors.space_key`)."""
    return key.split("\x00", 1)[0]


class VectorIndexes:
    """The indexes of every key: `get`/`open` one, write through `add`/`set_meta`/`remove`.

    - `dim`: the dimension of a key created by `add` without a loader (a loaded key takes the
      dimension of the vectors its loader yields, so keys may differ).
    - `budget_bytes`: past this sum of `nbytes`, least recently used keys are evicted (only
      with a `loader`: an evicted key must be readable again); 0: no budget. The key being
      opened or written stays even when it alone passes the budget.
    - `ann_min_rows`: a key with at least this many rows is an `AnnIndex` (0: never).
    - `persist_dir`: where built graphs are saved and read back (None: never saved).
    - `dtype`: of an exact key's vectors ("float32" or "float16").
    - `ann_options`: `AnnIndex` keyword arguments (`ANN_OPTIONS_ENV` under them).
    - `namespace_share`: below 1, a namespace holding more than this share of the budget
      loses its own keys first, least recently used first, then (when it is still over and
      the budget is passed) the key being opened or written, before any other namespace's
      key; once no namespace is over its share, keys leave least recently used of all. So one
      tenant filling the budget evicts its own keys; a namespace alone on a host still holds
      the whole budget.
    """

    def __init__(
        self, dim: int = 0, budget_bytes: int = 0, loader: Loader | None = None,
        ann_min_rows: int = DEFAULT_ANN_MIN_ROWS, persist_dir: str | Path | None = None,
        dtype: str = "float32", ann_options: AnnOptions | None = None,
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
        self.ann_options = cast(AnnOptions, {
            **json.loads(os.environ.get(ANN_OPTIONS_ENV) or "{}"), **(ann_options or {})})
        self.persist_dir = Path(persist_dir) if persist_dir is not None else None
        self.saves = Saves(self.persist_dir, self.ann_options) if self.persist_dir else None
        self.builds = Builds(self)
        self._loader = loader
        self._indexes: OrderedDict[str, Index] = OrderedDict()  # least recently used first
        self._loading: dict[str, asyncio.Future[Index | None]] = {}
        self._journals: dict[str, Journal] = {}  # key -> writes during its load
        self._expected: dict[str, int] = {}  # key -> about how many rows its next load reads
        self._tasks: set[asyncio.Task[None]] = set()
        # bytes evicted, dropped or loaded (a load's chunks are freed) since the allocator was
        # last trimmed; the first load trims before it reads (what the host freed before, a
        # bulk load's requests)
        self._freed = TRIM_BYTES
        self.loads = self.evictions = 0
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
            saving = self.saves.saving.get(key) if self.saves is not None else None
            if saving is not None:
                await asyncio.shield(saving)
            for _ in range(LOAD_ATTEMPTS):
                self._journals[key] = Journal(self.journal_max_bytes)
                trim_first = self._freed >= TRIM_BYTES
                if trim_first:
                    self._freed = 0
                index = await in_daemon(self._load, key, trim_first, name="a2e-vector-index")
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

    def expect(self, key: str, rows: int) -> None:
        """The next load of `key` reads about `rows` rows (its caller counted them, e.g. the
        namespace's entries for one of its spaces): its codes are sized once (`read_rows`)."""
        if rows > 0 and key not in self._indexes:
            self._expected[key] = rows
            if len(self._expected) > 1024:  # keys asked for and never loaded: forgotten
                self._expected.clear()

    def keys(self) -> list[str]:
        """The loaded keys, least recently used first."""
        return list(self._indexes)

    def __len__(self) -> int:
        """Rows held in memory (every loaded key)."""
        return sum(len(ix) for ix in self._indexes.values())

    def _writes(self) -> list[tuple[str, Writes]]:
        return [*self._journals.items(), *self.builds.promoting.items()]

    @property
    def nbytes(self) -> int:
        """Bytes the loaded indexes hold, what their builds in progress hold (the graph each
        makes, at its estimated final size, from the build's start) and the journals of the
        writes during loads and builds: the sum the budget bounds."""
        return (sum(ix.nbytes for ix in self._indexes.values())
                + sum(self.builds.reserved.values())
                + sum(j.nbytes for _, j in self._writes()))

    def drop(self, key: str) -> bool:
        """Forget the loaded index of `key` (its next `open` reads the store; a build in
        progress is not swapped in, a load in progress reads again); False when not loaded."""
        journal = self._journals.get(key)
        if journal is not None:  # a load in progress: read again (see `open`)
            journal.drop()
        self.builds.forget(key)
        index = self._indexes.pop(key, None)
        if index is None:
            return False
        self._held -= index.nbytes
        self._freed += index.nbytes
        return True

    def stats(self) -> dict[str, int]:
        """Figures for metrics: keys loaded / loading / being promoted, rows, bytes, budget,
        and the counts since start of loads, evictions, promotions and saved indexes reused."""
        builds = self.builds
        return {
            "keys": len(self._indexes), "loading": len(self._loading),
            "promoting": len(builds.promoting) + len(builds.queued),
            "builds_queued": len(builds.queued), "rows": len(self), "nbytes": self.nbytes,
            "budget_bytes": self.budget_bytes, "loads": self.loads,
            "evictions": self.evictions, "promotions": builds.promotions,
            "saved_hits": self.saves.hits if self.saves is not None else 0,
            "let_go": self.let_go,
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
        op = Add(list(ids), vectors, list(groups), list(expires))
        if key in self._journals:
            self._journals[key].append(op)
        if key in self.builds.promoting:
            self.builds.promoting[key].append(op)
        index = self._indexes.get(key)
        if index is None:
            if self._loader is not None:
                return
            index = self._indexes[key] = ExactIndex(self.dim or vectors.shape[1], self.dtype)
            self._held += index.nbytes
        self._indexes.move_to_end(key)
        before = index.nbytes
        index.add(op.ids, op.vectors, op.groups, op.expires)
        self._held += index.nbytes - before
        self._evict(keep=key)
        if self._indexes.get(key) is index:  # (not let go: its namespace's share)
            self._maybe_promote(key, index)

    def set_meta(self, entry_id: int, group: str, expires: float | None,
                 key: str | None = None) -> bool:
        """Update the group and expiry of a row (in `key`, else in whichever loaded key holds
        it: naming the key is cheaper); False when no loaded index has the row (the key may
        just not be loaded)."""
        self._journal(Meta(entry_id, group, expires), key)
        holders = (self._indexes.values() if key is None
                   else [ix for ix in (self._indexes.get(key),) if ix is not None])
        return any(ix.set_meta(entry_id, group, expires) for ix in holders)

    def remove(self, ids: Iterable[int], key: str | None = None) -> int:
        """Remove rows by id (from `key`, else from every loaded key); the number removed."""
        ids = list(ids)
        self._journal(Remove(ids), key)
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

    def _journal(self, op: Op, key: str | None) -> None:
        for k, writes in self._writes():
            if key is None or k == key:
                writes.append(op)

    def apply(self, index: Index, op: Op) -> None:
        """A journalled write made on `index` (on the loop, or in a build's thread)."""
        apply(index, op)

    def _replay(self, index: Index | None, ops: list[Op]) -> Index | None:
        for op in ops:
            if index is None and isinstance(op, Add):
                index = ExactIndex(op.vectors.shape[1], self.dtype)
            if index is not None:
                self.apply(index, op)
        return index

    # --- what the builds use (`host.search.index.builds.Site`) ---

    def current(self, key: str) -> Index | None:
        return self._indexes.get(key)

    def count(self, nbytes: int) -> None:
        self._held += nbytes

    def evict(self, keep: str) -> None:
        self._evict(keep)

    def replace(self, key: str, index: Index) -> None:
        self._indexes[key] = index  # keeps its place in the LRU order

    def saved_path(self, key: str) -> Path | None:
        return self.saves.path(key) if self.saves is not None else None

    def save_soon(self, key: str, index: AnnIndex) -> asyncio.Future[None]:
        assert self.saves is not None
        return self.saves.soon(key, index)

    # --- loading (in a thread) ---

    def _load(self, key: str, trim_first: bool = False) -> Index | None:
        """(In a thread.) The rows of `key` read (`trim_first`: the allocator's free pages
        returned first, here off the loop: what the host freed since, a bulk load's requests
        or an index dropped, is not in its RSS beside the rows read)."""
        assert self._loader is not None
        if trim_first:
            trim()
        saved = self.saves.read(key) if self.saves is not None else None
        if saved is not None:
            assert self.saves is not None
            try:
                kept = self.saves.reconcile(saved, self._loader(key), self.journal_max_bytes)
                if kept is None:  # emptied since saved: its file would be read every query
                    self.saves.discard(key)
                return kept
            except Behind:
                log.info("saved vector index of a key far behind its rows: read afresh")
            except (ValueError, KeyError, RuntimeError) as e:  # another dimension, ...
                log.warning("saved vector index of a key does not fit its rows (%s): rebuilt", e)
            del saved
        # past ann_min_rows: promoted by `open` afterwards
        return read_rows(self._loader(key), self.dtype, self.ann_min_rows, self.budget_bytes,
                         self.ann_options, self._expected.pop(key, 0))

    # --- promotion, eviction, saving (on the loop) ---

    def _rebuild_due(self, key: str, index: Index) -> bool:
        if (key in self.builds.promoting or key in self.builds.queued or key in self._loading
                or not self.ann_min_rows):
            return False
        if not isinstance(index, AnnIndex):
            return len(index) >= self.ann_min_rows
        if not index.built:  # codes only (a big key loaded): its graph is due
            return True
        garbage = index.garbage
        return garbage >= COMPACT_MIN and garbage > COMPACT_SHARE * (garbage + len(index))

    def _maybe_promote(self, key: str, index: Index) -> None:
        """Promote an exact index past `ann_min_rows` to an `AnnIndex`, build the graph of an
        `AnnIndex` of codes, or rebuild an `AnnIndex` whose holes pass `COMPACT_SHARE`: queued
        for its turn (`BUILDS`), the index serving meanwhile (see the module's docstring)."""
        if not self._rebuild_due(key, index):
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a script): build now
            before = index.nbytes
            if isinstance(index, AnnIndex) and not index.built:
                GraphBuild(index).build_now(stop=EXITING.is_set)
            else:
                index = self._indexes[key] = build_ann(
                    index.dim, index.rows(), stop=EXITING.is_set, **self.ann_options)
            self._held += index.nbytes - before
            self.builds.promotions += 1
            return
        self.builds.queued[key] = index
        task = loop.create_task(self._promote(key, index))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _promote(self, key: str, index: Index) -> None:
        turn = await Turn.take(len(index))
        queued = self.builds.queued
        if queued.get(key) is not index or self._indexes.get(key) is not index:
            if queued.get(key) is index:
                del queued[key]
            turn.release()
            return  # evicted, dropped or replaced while it waited: nothing to build
        del queued[key]
        if isinstance(index, AnnIndex) and not index.built:  # its turn released by its end
            await GraphBuild(index).run(self.builds, key, turn)
            return
        pull = self.builds.pull(key, index, turn)
        del index  # held by the build alone: freed (and trimmed) there once swapped out
        try:
            await pull
        finally:
            turn.release()  # the next build starts once this one's graph is in (or not)

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
            if key != keep and key not in self.builds.promoting:
                self._evict_key(key)
        self._maybe_trim()

    def _evict_shares(self, keep: str) -> None:
        """`_evict`'s first steps: the keys of namespaces over their share leave, least
        recently used first; then the key being opened or written, when its namespace is still
        over its share and the budget would otherwise take another namespace's key."""
        share = self.namespace_share * self.budget_bytes
        held = self.namespace_bytes()
        building = self.builds.promoting
        for key in list(self._indexes):
            if self._held <= self.budget_bytes:
                return
            ns = namespace_of(key)
            if key != keep and key not in building and held[ns] > share:
                held[ns] -= self._evict_key(key)
        ns = namespace_of(keep)
        if (self._held > self.budget_bytes and held.get(ns, 0) > share
                and keep in self._indexes and keep not in building
                and any(namespace_of(k) != ns for k in self._indexes)):
            self.let_go += 1
            self._evict_key(keep)

    def namespace_bytes(self) -> dict[str, int]:
        """The bytes each namespace's keys hold (`nbytes` by namespace)."""
        held: dict[str, int] = {}
        for parts in (((k, ix.nbytes) for k, ix in self._indexes.items()),
                      self.builds.reserved.items(),
                      ((k, j.nbytes) for k, j in self._writes())):
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
        if self.saves is not None and isinstance(index, AnnIndex) and index.dirty \
                and index.built:
            self.saves.later(key, index)
        return size

    def _maybe_trim(self) -> None:
        if self._freed >= TRIM_BYTES:
            self._freed = 0
            trim_soon()  # off the loop

    async def save_all(self) -> int:
        """Save every loaded `AnnIndex` changed since it was saved (call at shutdown, with
        `persist_dir`); waits for saves in progress, not for builds (what they build is lost:
        the next load of their key serves it exactly and builds again). The number saved."""
        if self.saves is None:
            return 0
        n = 0
        for key, index in list(self._indexes.items()):
            if isinstance(index, AnnIndex) and index.dirty and index.built:
                await asyncio.to_thread(self.saves.write, key, index)
                n += 1
        for fut in list(self.saves.saving.values()):
            await asyncio.shield(fut)
        return n

    async def wait_idle(self) -> None:
        """Wait for the promotions in progress (tests, benchmarks)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks))
