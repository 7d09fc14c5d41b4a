"""`GraphBuild`: the graph of an `AnnIndex` of codes only (`coded_of`) built in place, over its own
codes, a step at a time, while the index goes on serving and being written on the loop.

Why in place: a big key read from the store is held as codes at once (a million rows of 384
dimensions are 0.4 GB as codes, 1.6 GB as float32); a graph built beside it from a copy would
hold the codes and the id map twice. faiss's `IndexHNSW.add` always appends the codes of what it
adds to its storage, so each step of `BUILD_STEP` rows is added with the storage's count set to
the end of a reserved tail (`TAIL` rows past `slack` rows of room): faiss writes its copy of
the step's codes there, out of every row's way, and links the vertices of slots that already
hold them (tests/test_faiss_internals.py checks what this relies on in the pinned faiss). The
codes are sized once for the build (never reallocated while its thread reads them); a row added
meanwhile is coded into the room; past the room, the rows are copied to a storage of their own
and the build is abandoned (`detach`).

Who does what, and where:
- on the loop (`run`, `_turn`, `_thaw`, `_check`): the budget's count, each step's set-up
  (`_next_step`: the storage's count, the graph's), the freeze of the rows to save, the end;
  a step is taken only while the build is still the key's (not dropped, evicted, detached);
- in the build's daemon thread (`_steps`): faiss's adds (`_step`, the GIL released) and the
  save of the complete graph (`_save`, between `_freeze` and `_thaw`, while the loop only codes
  rows into the room and changes metadata, which the file does not read).
`build_now` runs every step at once (a script's: no loop).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from host.search.index import files
from host.search.index.allocator import trim_soon
from host.search.index.ann import BUILD_STEP, TAIL, AnnIndex, BuildAbandoned, faiss, omp_threads
from host.search.index.builds import BUILDERS, EXITING, Turn, on_loop
from host.search.index.daemon import in_daemon
from host.search.index.loading import Op, build_room

if TYPE_CHECKING:
    from host.search.index.builds import Builds

log = logging.getLogger(__name__)

Step = tuple[int, int]  # (first slot, rows)
Frozen = dict[str, Any]  # `AnnIndex.slots_meta`: the rows a save writes


def estimate_graph_nbytes(rows: int, connectivity: int = 16) -> int:
    """About the bytes of the graph of `rows` rows alone (what a build in place adds to a
    coded index): the `AnnIndex.estimate_nbytes` part of links, levels and offsets."""
    return int(rows * (10 * connectivity + 12))


class GraphBuild:
    """The graph of `ann` (codes only) being built over its codes; `ann.building` while it is."""

    nbytes = 0  # the writes meanwhile go to the index: nothing is kept (see `Writes`)
    overflowed = False

    def __init__(self, ann: AnnIndex) -> None:
        self.ann = ann
        self.graph: Any = None  # faiss's index as the build began (a detach leaves it here)
        self.cap = 0  # rows the codes are sized to: the rows, the room, faiss's tail
        self.saving = -1  # while a save writes the complete graph: the slots in its file
        self._builds: Builds | None = None
        self._key = ""

    @property
    def room(self) -> int:
        """Rows `ann` may hold before an add detaches it from the build."""
        return self.cap - TAIL

    def append(self, op: Op) -> None:
        """A write to the key: made on `ann` itself, which the build follows."""

    # --- the loop's side ---

    async def run(self, builds: Builds, key: str, turn: Turn) -> None:
        """Build the graph of `ann`, the loaded index of `key`, in a daemon thread, each step
        taken on the loop; saved (with a persist folder) as soon as complete. Counted in the
        budget meanwhile: the graph at its estimated size (the codes are `ann`'s). `turn`
        released once the build ends (by its thread when it fails: its loop may be gone)."""
        self._builds, self._key = builds, key
        site, ann = builds.site, self.ann
        builds.promoting[key] = self
        done = started = False
        try:
            before = ann.nbytes
            self._begin(build_room(len(ann)) - TAIL)
            builds.reserve(key, estimate_graph_nbytes(
                self.room, int(site.ann_options.get("connectivity", 16))))
            site.count(ann.nbytes - before)
            site.evict(key)
            loop = asyncio.get_running_loop()
            path = site.saved_path(key)
            if path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
            build = in_daemon(self._in_thread, loop, path, turn, site.rebuild_threads,
                              name="a2e-vector-index", track=BUILDERS)
            started = True

            def ended(_: object) -> None:  # on the loop, the thread out of faiss
                if ann.building is self:  # not complete, not detached
                    was = ann.nbytes
                    self._abandon()  # codes only again, built again after a later write
                    if site.current(key) is ann:
                        site.count(ann.nbytes - was)
                turn.release()
            build.add_done_callback(ended)
            done = await asyncio.shield(build)
        except BuildAbandoned:
            log.info("vector index build of a key abandoned")
        except Exception:
            log.exception("vector index graph of a key not built: it stays coded")
        finally:
            builds.end(key, self)  # (when still the key's: its thread's next turn stops it)
            if not started:
                turn.release()
        if done and site.current(key) is ann:
            builds.promotions += 1
            trim_soon()
            site.evict(key)

    def _turn(self, saved: bool) -> Step | Frozen | None:
        """(On the loop.) The next step; once complete, the rows to save (`_freeze`) or,
        saved, the graph made `ann`'s (`_end`, the budget's estimate replaced by its bytes)."""
        self._check()
        step = self._next_step()
        if step is not None:
            return step
        if not saved:
            return self._freeze()
        assert self._builds is not None
        before = self.ann.nbytes
        self._end(saved=self._builds.site.saved_path(self._key) is not None)
        self._builds.end(self._key, self)
        self._builds.site.count(self.ann.nbytes - before)
        return None

    def _thaw_after(self, written: bool) -> None:
        """(On the loop.) After the save (`written`: the file holds it): the last steps follow."""
        if self.ann.building is self and self.saving >= 0:
            self._thaw()
        if not written:
            self.ann.dirty = True
        self._check()

    def _check(self) -> None:
        builds = self._builds
        assert builds is not None
        if (builds.promoting.get(self._key) is not self
                or builds.site.current(self._key) is not self.ann or self.ann.building is not self):
            raise BuildAbandoned  # dropped, evicted, or detached (past its room)

    # --- the build's thread ---

    def _in_thread(self, loop: asyncio.AbstractEventLoop, path: Path | None, turn: Turn,
                   threads: int) -> bool:
        """(In the build's thread.) Every step, each set up on the loop; the save once
        complete; True once the graph is `ann`'s. The turn released here when it fails."""
        try:
            with omp_threads(threads):
                self._steps(loop, path)
            return True
        except BaseException:
            turn.release()
            raise

    def _steps(self, loop: asyncio.AbstractEventLoop, path: Path | None) -> None:
        saved = path is None
        self._reserve_links()
        while True:
            if EXITING.is_set() or loop.is_closed():
                raise BuildAbandoned
            step = on_loop(loop, self._turn, saved)
            if step is None:
                return
            if isinstance(step, dict):  # complete: saved while the loop serves it
                assert path is not None
                written = True
                try:
                    self._save(path, step)
                except Exception as e:  # a full disk: the index stays to save
                    log.warning("vector index not saved (%s)", e)
                    written = False
                saved = True
                on_loop(loop, self._thaw_after, written)
                continue
            self._step(*step)

    # --- faiss's side: the codes, the counts, the graph ---

    def _begin(self, slack: int) -> None:
        """(On the loop.) The codes sized once for the build: the rows, `slack` rows of room
        for rows added meanwhile (a smaller room within the codes' allocation rather than a
        copy of them now) and `TAIL` rows for faiss's copies; the graph's count at 0."""
        ann = self.ann
        if ann.built or ann.building is not None:
            raise ValueError("the index has a graph, or one is being built")
        room = ann.code_room - ann.slots - TAIL  # rows there without reallocating
        if room >= min(slack, 2 * BUILD_STEP):
            slack = min(slack, room)
        self.cap = ann.slots + max(0, slack) + TAIL
        ann.resize_codes(self.cap)  # the rows beyond the slots zeroed: room
        self.graph = ann.graph
        self.graph.ntotal = 0
        ann.building = self

    def _reserve_links(self) -> None:
        """(In the build's thread, before its first step; the graph is the thread's alone.)
        The graph emptied (a build abandoned may have left part of one), its neighbour lists
        sized once for the build's rows (level 0's 2M links a row, the upper levels' M / 8)."""
        storage = faiss.downcast_index(self.graph.storage)
        hnsw = self.graph.hnsw
        hnsw.reset()
        rows = storage.codes.size() // storage.code_size
        hnsw.neighbors.resize(rows * (int(hnsw.nb_neighbors(0)) + int(hnsw.nb_neighbors(1)) // 8))
        hnsw.neighbors.resize(0)

    def _next_step(self) -> Step | None:
        """(On the loop.) The next step's first slot and rows, the storage's count set so that
        faiss's add writes its copy of their codes in the tail; None once every slot is in
        the graph (then `_freeze` for a save, or `_end`, in the same turn of the loop)."""
        if self.ann.building is not self or self.saving >= 0:
            raise ValueError("no graph is being built")
        graphed = int(self.graph.hnsw.levels.size())
        rows = min(BUILD_STEP, self.ann.slots - graphed)
        if rows <= 0:
            return None
        self.ann.storage.ntotal = self.cap - rows
        self.graph.ntotal = graphed
        return graphed, rows

    def _step(self, first: int, rows: int) -> None:
        """(In the build's thread.) Slots `first`..`first + rows` added to the graph, from
        their codes decoded (the codes they keep)."""
        storage = faiss.downcast_index(self.graph.storage)
        cs = storage.code_size
        codes = np.asarray(faiss.rev_swig_ptr(storage.codes.data(), (first + rows) * cs))
        x = self.ann.decode_rows(codes[first * cs:].reshape(rows, cs))
        self.graph.add(np.ascontiguousarray(x, dtype=np.float32))

    def _freeze(self) -> Frozen:
        """(On the loop, the graph complete.) The storage fitted to the rows (rows added from
        now on are coded into the room beyond), a copy of their metadata now; `_thaw` after
        the save."""
        n = self.saving = self.ann.slots
        self.ann.fit(n)
        self.ann.dirty = False  # a write from now on sets it again
        return self.ann.slots_meta(n, copy=True)

    def _save(self, path: Path, rows: Frozen) -> None:
        """(In the build's thread, between `_freeze` and `_thaw`.) The graph written."""
        files.write(path, self._key, self.graph, self.ann.dim, self.ann.options, rows)

    def _thaw(self) -> None:
        """(On the loop, after the save.) The codes sized to the build's room again, the rows
        added during the save kept (their graph steps follow)."""
        ann, n0 = self.ann, self.saving
        n, cs = ann.slots, ann.storage.code_size
        late = ann.codes(n)[n0:n].copy()  # beyond the codes' size: resizing zeroes them
        ann.storage.codes.resize(self.cap * cs)
        ann.codes(n)[n0:n] = late
        self.saving = -1

    def _end(self, saved: bool) -> None:
        """(On the loop, in the turn `_next_step` gave None.) The graph is the index's, which
        grows as usual from now on; `saved`: a file holds it (else it stays to save)."""
        ann = self.ann
        if ann.building is not self or int(self.graph.hnsw.levels.size()) != ann.slots:
            raise ValueError("the graph is not complete")
        ann.fit(ann.slots)
        ann.building, ann.built, self.saving = None, True, -1
        if not saved:
            ann.dirty = True

    def _abandon(self) -> None:
        """(On the loop.) A build stopped or failed: back to codes only, searched exactly."""
        ann = self.ann
        if ann.building is not self:
            return
        if self.saving >= 0:
            self._thaw()
        ann.fit(ann.slots)
        ann.graph.ntotal = 0
        ann.graph.hnsw.reset()
        ann.building, self.saving = None, -1

    def detach(self) -> None:
        """(On the loop: an add past the room.) The rows' codes copied to a storage of their
        own; the build, whose thread may be in faiss over the old one, is abandoned."""
        self.ann.own_codes()
        self.ann.building, self.saving = None, -1

    def build_now(self, stop: Callable[[], bool] | None = None) -> None:
        """Every step here and now (a script's: no loop)."""
        self._begin(0)
        try:
            self._reserve_links()
            while (step := self._next_step()) is not None:
                if stop is not None and stop():
                    raise BuildAbandoned
                self._step(*step)
        except BaseException:
            self._abandon()
            raise
        self._end(saved=False)
