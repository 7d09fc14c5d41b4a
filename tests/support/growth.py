"""A host whose stores grow past their quotas, on a clock the test moves: what the tests of
eviction (`test_growth`) and of fading importance (`test_growth_fade`) start."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from host.app import Host
from host.client import MemoryClient
from protocol.clock import ShiftedClock
from support.hosts import make_config, running_host, url_of

__all__ = ["growing"]


@asynccontextmanager
async def growing(db: Path | str, ranking: dict[str, Any] | None = None, **limits: Any
                  ) -> AsyncIterator[tuple[Host, ShiftedClock, Callable[..., Any]]]:
    """A host with `limits` (on_full "evict" unless given) and `ranking` settings on a clock
    the test moves, and a factory of clients with a session open on it:
    `await session(agent, namespace)`."""
    limits.setdefault("on_full", "evict")
    clock = ShiftedClock()
    config = make_config(db, limits=limits, ranking=ranking or {}, search={"embedder": "none"})
    clients: list[MemoryClient] = []
    async with running_host(config, clock=clock) as host:

        async def session(agent: str = "a1", ns: str = "ns") -> MemoryClient:
            c = await MemoryClient.connect(url_of(host))
            await c.init(ns, {"agent": agent})
            clients.append(c)
            return c

        try:
            yield host, clock, session
        finally:
            for c in clients:
                await c.close()
