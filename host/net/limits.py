"""Connection and request limits: how many connections, from where, how fast.

- `ConnectionLimiter.admit` runs at the accept of each TCP connection (`host.net.front`),
  before anything is read: past `limits.max_connections` open connections it answers HTTP
  503, past `limits.max_connections_per_ip` from one address HTTP 429, and the connection is
  closed. A connection counts from its accept until it is lost, so half-open upgrades count.
- `TokenBucket` limits the frames of one connection (`host.net.pipeline` keeps one per
  connection): `requests_per_second` sustained, up to `request_burst` at once; a frame beyond
  it is answered `rate_limited` (retryable).
- `DeadlineWatch` keeps the request deadline (`limits.request_timeout`): a few times a
  second it asks each connection to expire the requests waiting longer (`Pipeline.expire`).

Storage quotas (entries and bytes per namespace and agent) are kept by the store
(`host.store.records.Quotas`), working-tier entries by `host.memory.working`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable
from http import HTTPStatus
from typing import Protocol

from host.config import LimitsConfig
from host.net.http import HttpReply


class Expirable(Protocol):
    """A connection whose late requests can be expired (see `host.net.pipeline.Pipeline`)."""

    def expire(self, now: float, timeout: float) -> None:
        """Answer the requests that arrived more than `timeout` s before `now` (perf_counter)."""

__all__ = ["ConnectionLimiter", "DeadlineWatch", "Expirable", "RequestRate", "TokenBucket",
           "no_release"]

log = logging.getLogger("a2e_host.limits")


class TokenBucket:
    """`rate` tokens a second, at most `burst` saved; `take()` spends one if there is one."""

    __slots__ = ("burst", "rate", "stamp", "tokens")

    def __init__(self, rate: float, burst: int) -> None:
        self.rate = rate
        self.burst = float(burst)
        self.tokens = float(burst)
        self.stamp = time.monotonic()

    def take(self, now: float | None = None) -> bool:
        """True (and one token spent) when the caller may go ahead now."""
        t = time.monotonic() if now is None else now
        self.tokens = min(self.burst, self.tokens + (t - self.stamp) * self.rate)
        self.stamp = t
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


class RequestRate:
    """One connection's `limits.requests_per_second`: a `TokenBucket` that follows the
    current setting (a reload applies to open connections at their next frame)."""

    __slots__ = ("_bucket", "limits")

    def __init__(self, limits: LimitsConfig | None) -> None:
        self.limits = limits
        self._bucket: TokenBucket | None = None

    def allow(self) -> bool:
        """Spend one token at the current rate; False when the bucket is empty."""
        limits = self.limits
        if limits is None or limits.requests_per_second <= 0:
            return True
        if self._bucket is None:
            self._bucket = TokenBucket(limits.requests_per_second, limits.request_burst)
        else:
            self._bucket.rate = limits.requests_per_second
            self._bucket.burst = float(limits.request_burst)
        return self._bucket.take()


class ConnectionLimiter:
    """Counts open TCP connections, in total and per remote IP, from their accept."""

    def __init__(self, limits: LimitsConfig) -> None:
        self.limits = limits
        self.total = 0
        self.per_ip: Counter[str] = Counter()
        self.refused = 0

    def admit(self, remote: tuple[str, int] | None) -> tuple[HttpReply | None, Callable[[], None]]:
        """At the accept of a TCP connection from `remote`: (None, release) admits and counts
        it (call `release()` once when it ends), else (the refusal to send, a no-op)."""
        ip = str(remote[0]) if remote else ""
        refusal = None
        if self.total >= self.limits.max_connections:
            refusal = HttpReply(HTTPStatus.SERVICE_UNAVAILABLE, "too many connections\n")
        elif self.per_ip[ip] >= self.limits.max_connections_per_ip:
            refusal = HttpReply(HTTPStatus.TOO_MANY_REQUESTS, "too many connections from here\n")
        if refusal is not None:
            self.refused += 1
            if self.refused % 1000 == 1:  # a flood logs a line a thousand refusals
                log.warning("refused a connection from %s: %d open, %d from it (%d refused)",
                            ip, self.total, self.per_ip[ip], self.refused)
            return refusal, no_release
        self.total += 1
        self.per_ip[ip] += 1
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self._release(ip)

        return None, release

    def _release(self, ip: str) -> None:
        self.total -= 1
        self.per_ip[ip] -= 1
        if self.per_ip[ip] <= 0:
            del self.per_ip[ip]


def no_release() -> None:
    """The release of a connection that took no slot."""


class DeadlineWatch:
    """One task per server: every `period()` seconds, `expire()` on each open connection.

    A request may so run up to a period past `request_timeout` before it is answered.
    """

    def __init__(self, connections: Callable[[], Iterable[Expirable]], limits: LimitsConfig) -> None:
        self.connections = connections
        self.limits = limits
        self._task: asyncio.Task[None] | None = None

    def period(self) -> float:
        """Seconds between checks: a quarter of the timeout, within [0.01, 1]."""
        return min(1.0, max(0.01, self.limits.request_timeout / 4))

    def start(self) -> None:
        """Start the checks (on the running loop)."""
        if self._task is None:
            self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        """Stop the checks."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.period())
            now, timeout = time.perf_counter(), self.limits.request_timeout
            for conn in list(self.connections()):
                conn.expire(now, timeout)
