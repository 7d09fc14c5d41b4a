"""Connection and request limits: how many connections, from where, how fast.

- `ConnectionLimiter.gate` runs at the WebSocket upgrade (`process_request`): past
  `limits.max_connections` open connections it answers HTTP 503, past
  `limits.max_connections_per_ip` from one address HTTP 429. A connection counts from its
  admitted upgrade until its TCP connection is lost.
- `TokenBucket` limits the frames of one connection (`host.net.connection` keeps one per
  connection): `requests_per_second` sustained, up to `request_burst` at once; a frame beyond
  it is answered `rate_limited` (retryable).
- `DeadlineWatch` keeps the request deadline (`limits.request_timeout`): a few times a
  second it asks each connection to expire the requests waiting longer (`Connection.expire`).

Storage quotas (entries and bytes per namespace and agent) are kept by the store
(`host.store.sqlite.ops.Quotas`), working-tier entries by `host.memory.working`.
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
from host.net.http import HttpReply, Upgrade


class Expirable(Protocol):
    """A connection whose late requests can be expired (see `host.net.connection.Connection`)."""

    def expire(self, now: float, timeout: float) -> None:
        """Answer the requests that arrived more than `timeout` s before `now` (perf_counter)."""

__all__ = ["ConnectionLimiter", "DeadlineWatch", "Expirable", "RequestRate", "TokenBucket"]

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
    """Counts admitted connections, in total and per remote IP."""

    def __init__(self, limits: LimitsConfig) -> None:
        self.limits = limits
        self.total = 0
        self.per_ip: Counter[str] = Counter()

    def gate(self, up: Upgrade) -> HttpReply | None:
        """Upgrade gate: None admits (and counts) the connection, else the refusal.

        Run it last among the gates, so that only admitted connections are counted.
        """
        ip = str(up.remote[0]) if up.remote else ""
        if self.total >= self.limits.max_connections:
            log.warning("refused a connection from %s: %d open", ip, self.total)
            return HttpReply(HTTPStatus.SERVICE_UNAVAILABLE, "too many connections\n")
        if self.per_ip[ip] >= self.limits.max_connections_per_ip:
            log.warning("refused a connection from %s: %d open from it", ip, self.per_ip[ip])
            return HttpReply(HTTPStatus.TOO_MANY_REQUESTS, "too many connections from here\n")
        self.total += 1
        self.per_ip[ip] += 1
        up.on_close(lambda: self._release(ip))
        return None

    def _release(self, ip: str) -> None:
        self.total -= 1
        self.per_ip[ip] -= 1
        if self.per_ip[ip] <= 0:
            del self.per_ip[ip]


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
