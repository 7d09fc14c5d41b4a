"""Connection and request limits: how many connections, from where, how fast.

- `ConnectionLimiter.gate` runs at the WebSocket upgrade (`process_request`): past
  `limits.max_connections` open connections it answers HTTP 503, past
  `limits.max_connections_per_ip` from one address HTTP 429. A connection counts from its
  admitted upgrade until its TCP connection is lost.
- `TokenBucket` limits the frames of one connection (`host.connection` keeps one per
  connection): `requests_per_second` sustained, up to `request_burst` at once; a frame beyond
  it is answered `rate_limited` (retryable).
- The request deadline (`limits.request_timeout`) is kept by `host.connection`.

Storage quotas (entries and bytes per namespace and agent) are kept by the store
(`host.store.sqlite_ops.Quotas`), working-tier entries by `host.memory.working`.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from http import HTTPStatus

from websockets.asyncio.server import ServerConnection
from websockets.http11 import Request, Response

from host.config import LimitsConfig

__all__ = ["ConnectionLimiter", "TokenBucket"]

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


class ConnectionLimiter:
    """Counts admitted connections, in total and per remote IP."""

    def __init__(self, limits: LimitsConfig) -> None:
        self.limits = limits
        self.total = 0
        self.per_ip: Counter[str] = Counter()

    def gate(self, conn: ServerConnection, request: Request) -> Response | None:
        """`process_request` gate: None admits (and counts) the connection, else the refusal.

        Run it last among the gates, so that only admitted connections are counted.
        """
        addr = conn.remote_address
        ip = str(addr[0]) if addr else ""
        if self.total >= self.limits.max_connections:
            log.warning("refused a connection from %s: %d open", ip, self.total)
            return conn.respond(HTTPStatus.SERVICE_UNAVAILABLE, "too many connections\n")
        if self.per_ip[ip] >= self.limits.max_connections_per_ip:
            log.warning("refused a connection from %s: %d open from it", ip, self.per_ip[ip])
            return conn.respond(HTTPStatus.TOO_MANY_REQUESTS, "too many connections from here\n")
        self.total += 1
        self.per_ip[ip] += 1
        conn.connection_lost_waiter.add_done_callback(lambda _: self._release(ip))
        return None

    def _release(self, ip: str) -> None:
        self.total -= 1
        self.per_ip[ip] -= 1
        if self.per_ip[ip] <= 0:
            del self.per_ip[ip]
