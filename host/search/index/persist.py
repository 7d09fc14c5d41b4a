"""The saved graphs of a cache's keys (`Saves`, with a persist folder): read back when they
still match the store's rows (`read`, brought up to date by `reconcile`), written in a thread
(`soon`, one save of a key at a time; a load of the key waits for it), and at shutdown
(`VectorIndexes.save_all`). A restart then never rebuilds a big graph, and never re-embeds."""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from host.search.index import files
from host.search.index.ann import AnnIndex, AnnOptions
from host.search.index.loading import Index
from host.search.index.rows import Chunk

log = logging.getLogger(__name__)

COMPACT_MIN = 1000  # below this many rows to add, a saved graph is always brought up to date
# a saved graph is read afresh instead when more than this share of its rows (and at least
# COMPACT_MIN) would be added to it (`reconcile`)
STALE_SHARE = 0.25


def stale_rows(index: AnnIndex, ids: list[int], vectors: np.ndarray, groups: list[str],
               expires: list[float | None]) -> Chunk | None:
    """Of these stored rows, those `index` must (re)add: missing, or with another vector (the
    same vector: the same codes, +-1 for rounding); None when none. Groups and expiries are
    brought to the stored ones meanwhile (`changed` set when one moved)."""
    vecs = np.asarray(vectors, dtype=np.float32).reshape(len(ids), -1)
    if vecs.shape[1] != index.dim:
        raise ValueError(f"vectors have dimension {vecs.shape[1]}, index has {index.dim}")
    slots = index.slots_of(ids)
    have = np.flatnonzero(slots >= 0)
    stale = slots < 0
    if have.size:
        stored = index.codes()[slots[have]].astype(np.int16)
        fresh = index.storage.sa_encode(np.ascontiguousarray(vecs[have])).astype(np.int16)
        same = np.abs(stored - fresh).max(axis=1) <= 1
        stale[have[~same]] = True
        kept = have[same].tolist()
        moved = index.meta_moved(slots[kept], [groups[j] for j in kept],
                                 [expires[j] for j in kept])
        for j in np.asarray(kept, dtype=np.int64)[moved].tolist():
            index.set_meta(ids[j], groups[j], expires[j])
            index.changed = True
    if not stale.any():
        return None
    js = np.flatnonzero(stale).tolist()
    return ([ids[j] for j in js], vecs[js], [groups[j] for j in js], [expires[j] for j in js])


def unread(kept: np.ndarray, read: list[np.ndarray]) -> np.ndarray:
    """The ids of `kept` in none of the arrays `read`, in their order. Sorted and searched in
    numpy, which lets go of the GIL meanwhile (`np.isin` of a million row ids, spread over 64
    million numbers, sorts them holding it: the loop waited up to ~210 ms)."""
    ids = np.sort(np.concatenate(read)) if read else np.zeros(0, dtype=np.int64)
    if not ids.size:
        return kept
    at = np.minimum(np.searchsorted(ids, kept), ids.size - 1)
    return kept[ids[at] != kept]


class Behind(Exception):
    """A saved graph too far behind its key's stored rows to bring up to date."""


class Saves:
    """The files of the keys' graphs under `folder`."""

    def __init__(self, folder: Path, options: AnnOptions) -> None:
        self.folder = folder
        self.options = options
        self.saving: dict[str, asyncio.Future[None]] = {}  # key -> its save in progress
        self.hits = 0  # saved graphs read back

    def path(self, key: str) -> Path:
        return self.folder / hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:40]

    def read(self, key: str) -> AnnIndex | None:
        """(In a thread.) The saved index of `key`, or None (none, or unreadable)."""
        path = self.path(key)
        if not files.exists(path):
            return None
        try:
            return AnnIndex.load(path, key=key, **self.options)
        except Exception as e:  # corrupt, truncated, foreign: rebuild from the store
            log.warning("saved vector index %s unreadable (%s): rebuilt", path.name, e)
            return None

    def discard(self, key: str) -> None:
        files.discard(self.path(key))

    def write(self, key: str, index: Index) -> None:
        """(In a thread.) `index` saved (emptied: its files removed); an error is logged."""
        try:
            if not len(index):  # emptied: no file (a load would read it for nothing)
                self.discard(key)
                return
            if not isinstance(index, AnnIndex):
                return
            self.folder.mkdir(parents=True, exist_ok=True)
            index.save(self.path(key), key=key)
        except Exception as e:  # a full disk, an unwritable folder: the next load rebuilds
            log.warning("vector index not saved (%s)", e)

    def soon(self, key: str, index: Index) -> asyncio.Future[None]:
        """`index` saved in a thread after the key's save in progress (`pending` waits)."""
        loop = asyncio.get_running_loop()
        previous = self.saving.get(key)

        async def save() -> None:
            if previous is not None:
                await asyncio.shield(previous)
            await asyncio.to_thread(self.write, key, index)

        fut = self.saving[key] = asyncio.ensure_future(save(), loop=loop)
        fut.add_done_callback(
            lambda f: self.saving.pop(key, None) if self.saving.get(key) is f else None)
        return fut

    def later(self, key: str, index: Index) -> None:
        """`index` saved in a thread (at once with no loop running)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            self.write(key, index)
            return
        self.soon(key, index)

    def reconcile(self, saved: AnnIndex, rows: Iterable[Chunk], max_bytes: int
                  ) -> AnnIndex | None:
        """(In a thread.) The saved index brought to the store's `rows`: rows missing or
        changed re-added, rows gone removed, groups and expiries taken from the store. `Behind`
        when more than `STALE_SHARE` of its rows (at least `COMPACT_MIN`) would be added: each
        goes into the graph one by one (~0.3 ms), where reading the rows afresh serves at once
        and builds the graph in the background (a graph of 100,000 saved, the store grown to
        1,000,000: 900,000 insertions held the first query past its deadline). The rows to add
        are held till then up to `max_bytes`, added when past it."""
        # the ids read, as arrays: a set of a million ints was one container that each full
        # pass of the cyclic collector walked (3 ms at 50,000, 31 ms at 990,000, a pass every
        # ~8 batches, the loop waiting on it)
        seen: list[np.ndarray] = []
        late: list[Chunk] = []
        behind = held = 0

        def add_late() -> None:
            for part in late:
                saved.add(*part)
                saved.changed = True
            late.clear()

        try:
            for ids, vecs, groups, expires in rows:
                if len(ids):
                    part = stale_rows(saved, ids, vecs, groups, expires)
                    seen.append(np.asarray(ids, dtype=np.int64))
                    if part is not None:
                        late.append(part)
                        behind += len(part[0])
                        held += part[1].nbytes
                        if behind > max(COMPACT_MIN, STALE_SHARE * len(saved)):
                            raise Behind
                        if held > max_bytes:
                            add_late()
                            held = 0
        finally:
            close = getattr(rows, "close", None)
            if close is not None:  # a generator left midway: its snapshot is let go
                close()
        add_late()
        saved.remove(unread(saved.ids(), seen).tolist())
        saved.dirty = saved.changed
        self.hits += 1
        return saved if len(saved) else None
