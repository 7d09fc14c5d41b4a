"""The TTL garbage collector: a task that deletes expired entries every `gc.interval` seconds.

Reads already hide expired entries from the moment they expire; this task reclaims the space.
After each collection it runs the `after` callbacks (the watch hub: announce what expired,
prune the change log).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from host.lifecycle import Periodic
from host.store.interface import EntryStore
from protocol.clock import Clock, wall_clock

__all__ = ["GarbageCollector"]

log = logging.getLogger("a2e_host.gc")


class GarbageCollector:
    """Runs `store.collect_garbage` periodically. `start()` / `stop()`."""

    def __init__(self, store: EntryStore, interval: float, clock: Clock = wall_clock) -> None:
        self.store = store
        self.clock = clock
        self.interval = interval
        self.deleted_total = 0
        self.last_run: float | None = None  # Unix time the last collection finished
        self.last_deleted = 0  # entries that collection deleted
        self.after: list[Callable[[float], Awaitable[None]]] = []
        self._periodic = Periodic(self.collect_once, interval, log,
                                  "gc failed; retrying next interval")

    async def collect_once(self) -> int:
        """One collection now; the number of entries deleted."""
        t = self.clock()
        n = await self.store.collect_garbage(t)
        self.deleted_total += n
        self.last_run, self.last_deleted = self.clock(), n
        for hook in self.after:
            await hook(t)
        if n:
            log.info("gc deleted %d expired entries", n)
        return n

    def start(self) -> None:
        """Start the periodic task."""
        self._periodic.start()

    async def stop(self) -> None:
        """Cancel the task and wait for it."""
        await self._periodic.stop()
