"""`EmbedCalls`: how the background embedding workers (`host.search.worker`, on SQLite and on
PostgreSQL alike) embed the stored texts they read: a window of them at a time, sorted by
length, in short calls on two threads, the vectors handed on a batch at a time, the texts the
embedder fails on set aside.

- **A window.** A worker reads (SQLite) or claims (PostgreSQL) up to `window()` queued entries
  at a time (`WINDOW` batches): sorted by length, 512 short texts pad about as little as a
  whole backlog sorted, and the two threads go from call to call without waiting at each
  batch's end.

- **Sorted, short calls.** The texts are sorted by length and cut into calls of at most
  `embed_call_chars` (texts x the longest), so a call pads little and holds a core briefly.
- **Two threads, none waiting for the other.** Each thread takes the next call as soon as its
  last one returned; the second only while the embedder may run on two threads at once
  (`parallel`) and the host has nothing else to do (`busy()`), else it waits for the first
  thread's next call and asks again: then the other core stays with the requests. The threads
  run at niceness 10: on a machine short of CPU the requests get it first.
- **Written as they come.** The vectors are handed to the caller's `write` a batch
  (`batch_size`) at a time, awaited while the thread's next call computes; the caller may stop
  the calls early (`until`: a query waits for another namespace).
- **Failures.** A failed call is told apart by a probe: a failing embedder raises (the worker
  retries later), a text it fails on alone is set aside for a while and the others go on.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from host.search.embed import Embedder
from host.search.lanes import Lane

if TYPE_CHECKING:
    from host.config import SearchConfig

__all__ = ["WINDOW", "EmbedCalls", "Write"]

log = logging.getLogger("a2e_host.search")

# An entry whose text the embedder fails on (while it embeds others) is set aside: skipped
# by the batches for `_ASIDE` seconds, doubled at each failure up to `_ASIDE_MAX`, at most
# `_ASIDE_KEPT` entries at a time (past it, the one due first is forgotten: retried at once)
_ASIDE = 60.0
_ASIDE_MAX = 3600.0
_ASIDE_KEPT = 256
# what the worker embeds to tell a failing embedder from a text it fails on
_PROBE = "a"
# A worker reads (or claims) up to this many batches (`batch_size`) of queued entries at a time
# (`EmbedCalls.window`)
WINDOW = 16

# `write(positions, their vectors)`: what `EmbedCalls._embed` hands the vectors it computed to
Write = Callable[[list[int], np.ndarray], Awaitable[None]]


class _CallFailed(Exception):
    """An embedder call of `_embed` failed: `positions` are the texts it held, `error` what
    it raised."""

    def __init__(self, positions: list[int], error: BaseException) -> None:
        super().__init__(str(error))
        self.positions = positions
        self.error = error


class EmbedCalls:
    """The worker's two threads, its calls of the embedder and the entries set aside."""

    def __init__(
        self, embedder: Embedder, cfg: SearchConfig, busy: Callable[[], bool] | None = None,
        on_batch: Callable[[int, float], None] | None = None,
    ) -> None:
        self.embedder = embedder
        self.cfg = cfg
        self.busy = busy or (lambda: False)
        self.on_batch = on_batch  # (entries written, seconds) after each batch written
        self.parallel = bool(getattr(embedder, "parallel", False))
        self.embedded_total = 0
        self.set_aside = 0  # entries set aside since start (their embedding failed alone; an
        # entry counted once however often it fails again)
        # entry id -> (monotonic time it is due again, failures in a row)
        self._aside: dict[int, tuple[float, int]] = {}
        # niceness 10: on a busy machine the requests' threads get the CPU before the backlog
        self._lanes = (Lane("a2e-embed", nice=10), Lane("a2e-embed-2", nice=10))

    def window(self) -> int:
        """The most queued entries a worker reads (or claims) at a time: `WINDOW` batches."""
        return self.cfg.batch_size * WINDOW

    def _calls(self, texts: list[str], todo: Sequence[int]) -> list[list[int]]:
        """The positions `todo` of `texts` sorted by length and cut into calls of at most
        `embed_call_chars` (texts x the longest: little is padding)."""
        calls: list[list[int]] = [[]]
        for i in sorted(todo, key=lambda i: len(texts[i])):
            call = calls[-1]
            if call and (len(call) + 1) * len(texts[i]) > self.cfg.embed_call_chars:
                calls.append(call := [])
            call.append(i)
        return calls if calls[0] else []

    async def _embed(self, texts: list[str], todo: Sequence[int], out: np.ndarray,
                     finished: list[int], write: Write, until: Callable[[], bool] | None
                     ) -> None:
        """Embed the stored texts `texts[j]` for `j` in `todo` into `out[j]`, handing them to
        `write` a batch (`batch_size`) at a time and appending their positions to `finished`
        once written.

        In calls of `_calls`; each of two threads takes the next call as soon as its last one
        returned, the second only while the embedder allows it and the host has nothing else
        to do (`busy()`: else it waits for the first thread's next call to return and asks
        again). A write is awaited while the thread's next call computes. No call starts once
        `until()` is true (after the first) or a call failed; a failed call raises
        `_CallFailed` once the calls running returned and their vectors were written."""
        calls = self._calls(texts, todo)
        done: list[int] = []  # embedded, not yet written
        nxt = 0
        halt = False
        lead_over = False
        tick = asyncio.Event()  # the first thread's call returned (or it stopped)
        writing = False
        t_last = time.perf_counter()

        async def flush(rows: list[int]) -> None:
            nonlocal t_last
            await write(rows, out[rows])
            finished.extend(rows)
            self.embedded_total += len(rows)
            if self.on_batch is not None:
                now = time.perf_counter()
                self.on_batch(len(rows), now - t_last)
                t_last = now

        async def feed(k: int) -> None:
            nonlocal nxt, halt, lead_over, writing
            try:
                while True:
                    if k and not lead_over and not halt and self.busy():
                        tick.clear()
                        await tick.wait()
                        continue
                    if halt or nxt >= len(calls) or (nxt and until is not None and until()):
                        return
                    call = calls[nxt]
                    nxt += 1
                    fut = self._lanes[k].run(self.embedder.embed, [texts[i] for i in call])
                    if not writing and len(done) >= self.cfg.batch_size:
                        rows = done[:]
                        del done[:]
                        writing = True
                        try:
                            await flush(rows)  # while `call` computes
                        except BaseException:
                            fut.cancel()
                            raise
                        finally:
                            writing = False
                    try:
                        out[call] = await fut
                    except Exception as e:
                        raise _CallFailed(call, e) from e
                    done.extend(call)
                    if not k:
                        tick.set()
            except BaseException:
                halt = True
                raise
            finally:
                if not k:
                    lead_over = True
                    tick.set()

        got = await asyncio.gather(*(feed(k) for k in range(2 if self.parallel else 1)),
                                   return_exceptions=True)
        errors = [e for e in got if isinstance(e, BaseException)]
        failed = [e for e in errors if isinstance(e, _CallFailed)]
        if len(failed) < len(errors):
            raise next(e for e in errors if not isinstance(e, _CallFailed))
        if done:
            await flush(done)
        if failed:
            raise _CallFailed([j for e in failed for j in e.positions], failed[0].error)

    def _bound(self, text: str) -> str:
        return text[: self.cfg.max_embed_chars]

    # -- entries the embedder fails on -------------------------------------------------------

    def _due(self, entry_id: int) -> bool:
        """False while `entry_id` is set aside."""
        aside = self._aside.get(entry_id)
        return aside is None or aside[0] <= time.monotonic()

    async def _embed_apart(self, ids: Sequence[int], texts: list[str], write: Write,
                           until: Callable[[], bool] | None = None
                           ) -> tuple[list[int], list[int]]:
        """Embed `texts` (of entries `ids`) through `_embed`, handing their vectors to `write`;
        (the positions written, those the embedder fails on alone, set aside in `_aside`).
        When a call fails, a probe tells a failing embedder (raised, the step retried later)
        from texts it fails on; then each text of that call is embedded alone, and the other
        calls go on. An entry embedded leaves `_aside`. Stops early when `until()` is
        true: the positions not written nor failed stay queued."""
        out = np.zeros((len(texts), self.embedder.dim), dtype=np.float32)
        finished: list[int] = []
        failed: list[int] = []
        todo: list[int] = list(range(len(texts)))
        while todo:
            try:
                await self._embed(texts, todo, out, finished, write, until)
                break
            except _CallFailed as e:
                # raises when the embedder itself fails (not counted as an entry embedded)
                await self._lanes[0].run(self.embedder.embed, [_PROBE])
                alone: list[int] = []
                for j in e.positions:
                    try:
                        out[j] = (await self._lanes[0].run(self.embedder.embed, [texts[j]]))[0]
                        alone.append(j)
                    except Exception as err:
                        failed.append(j)
                        self._put_aside(ids[j], err)
                if alone:
                    await write(alone, out[alone])
                    finished.extend(alone)
                    self.embedded_total += len(alone)
                gone = set(finished) | set(failed)
                todo = [j for j in todo if j not in gone]
        for j in finished:
            self._aside.pop(ids[j], None)
        return finished, failed

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
