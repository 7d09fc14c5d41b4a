"""The Health page's figures over time: a sampler of the host's own metrics.

Every `ui.health_interval` seconds it reads the request counters and latency histogram
(`Metrics.latency_snapshot`), the open connections, requests in flight and the embedding
backlog, and keeps the last `ui.health_samples` samples. Requests a second and p99 latency by
message type come from the difference of two snapshots: the p99 is the upper bound of the
histogram bucket holding the 99th percentile of the requests answered in that interval.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from host.lifecycle import Periodic
from host.ops.metrics import LATENCY_BUCKETS

__all__ = ["HealthSample", "HealthSampler", "p99_of"]

log = logging.getLogger("a2e_host.ui")

_BOUNDS = (*LATENCY_BUCKETS, math.inf)


@dataclass(frozen=True, slots=True)
class HealthSample:
    """The figures of one interval ending at `at` (Unix seconds)."""

    at: float
    rates: dict[str, float]  # message type -> requests a second
    p99: dict[str, float]  # message type -> seconds (inf: above the last bucket)
    connections: int
    in_flight: int
    backlog: int


def p99_of(before: tuple[int, ...], after: tuple[int, ...]) -> float | None:
    """The p99 latency (a bucket's upper bound, s) of the requests counted between two
    cumulative bucket snapshots; None when none was answered."""
    if len(before) != len(after):
        before = (0,) * len(after)
    deltas = [a - b for a, b in zip(after, before)]
    total = deltas[-1]
    if total <= 0:
        return None
    target = 0.99 * total
    return next(b for b, n in zip(_BOUNDS, deltas) if n >= target)


@dataclass(eq=False)
class HealthSampler:
    """Samples the host's figures (the callables: each read at a sample) every `interval`
    seconds, the last `keep` samples kept; `start()`/`stop()` run it, `sample()` takes one
    now."""

    latency: Callable[[], dict[str, tuple[int, ...]]]
    connections: Callable[[], int]
    in_flight: Callable[[], int]
    backlog: Callable[[], Awaitable[int]]
    interval: float
    keep: int
    samples: deque[HealthSample] = field(init=False)
    _last: tuple[float, dict[str, tuple[int, ...]]] | None = field(default=None, init=False)
    _periodic: Periodic = field(init=False)

    def __post_init__(self) -> None:
        self.samples = deque(maxlen=self.keep)
        self._periodic = Periodic(self.sample, self.interval, log, "ui: health sample failed",
                                  first=True, name="a2e-ui-health")

    async def sample(self, mono: float | None = None, at: float | None = None) -> HealthSample:
        """Read the figures now (`mono`: a monotonic clock reading, `at`: Unix time; both
        default to the clocks), append and return the sample. The first sample has no rates:
        they need an interval."""
        mono = time.monotonic() if mono is None else mono
        at = time.time() if at is None else at
        snap = self.latency()
        rates: dict[str, float] = {}
        p99: dict[str, float] = {}
        if self._last is not None:
            t0, prev = self._last
            span = max(mono - t0, 1e-9)
            for kind, buckets in snap.items():
                before = prev.get(kind, (0,) * len(buckets))
                rates[kind] = (buckets[-1] - before[-1]) / span
                p = p99_of(before, buckets)
                if p is not None:
                    p99[kind] = p
        self._last = (mono, snap)
        try:
            backlog = await self.backlog()
        except Exception:  # a store that cannot tell: no backlog figure rather than no page
            backlog = 0
        s = HealthSample(at, rates, p99, self.connections(), self.in_flight(), backlog)
        self.samples.append(s)
        return s

    def start(self) -> None:
        """Sample every `interval` seconds in a task of the running loop."""
        self._periodic.start()

    async def stop(self) -> None:
        """Stop sampling."""
        await self._periodic.stop()
