"""Where time comes from: a clock is a function returning seconds since the epoch.

    clock: Clock = wall_clock         # the default everywhere: time.time
    clock = ShiftedClock()            # tests: the wall clock, moved on by `advance(seconds)`
    clock.advance(1.2)                # a 1 s TTL has now passed, without sleeping

The host takes its clock once (`Host(config, clock=...)`) and hands it to what reads the time
for TTL, recency and collection (the memory plugin, the garbage collector); `protocol.codec.now`
is the wall clock, for message timestamps.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["Clock", "ShiftedClock", "wall_clock"]

Clock = Callable[[], float]

wall_clock: Clock = time.time


class ShiftedClock:
    """The wall clock plus an offset that only grows: time still flows (entries written one
    after the other get increasing times) and `advance` jumps ahead."""

    def __init__(self, base: Clock = wall_clock) -> None:
        self._base = base
        self.offset = 0.0

    def __call__(self) -> float:
        return self._base() + self.offset

    def advance(self, seconds: float) -> None:
        """Move the clock `seconds` ahead (never back: a negative step is refused)."""
        if seconds < 0:
            raise ValueError("a clock does not go back")
        self.offset += seconds
