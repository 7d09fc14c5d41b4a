"""Acknowledged writes survive SIGKILL; SIGTERM drains, commits and exits 0."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from typing import Any

import pytest

from host.client import MemoryClient

pytestmark = [pytest.mark.all_backends, pytest.mark.all_transports("websocket")]


async def _writer(url: str, agent: str, acked: list[tuple[str, int]], stop: asyncio.Event) -> None:
    """Store one entry at a time until the connection dies; record each acknowledged key."""
    try:
        async with await MemoryClient.connect(url) as c:
            await c.init("durable", {"agent": agent})
            i = 0
            while not stop.is_set():
                tier = "semantic" if i % 2 else "episodic"
                reply = await c.store([{"key": {"a": agent, "i": i}, "content": f"v{i}",
                                        "tier": tier}])
                if reply.stored:
                    acked.append((agent, i))
                i += 1
    except Exception:  # the host died under us: expected
        return


async def _count(url: str, agents: list[str]) -> set[tuple[str, int]]:
    found: set[tuple[str, int]] = set()
    for agent in agents:
        async with await MemoryClient.connect(url) as c:
            await c.init("durable", {"agent": agent})
            got = await c.retrieve(limit=1000, tier="episodic")
            found |= {(e["key"]["a"], e["key"]["i"]) for e in got.entries}
            got = await c.retrieve(limit=1000, tier="semantic", tags=[])
            found |= {(e["key"]["a"], e["key"]["i"]) for e in got.entries if e["key"]["a"] == agent}
    return found


async def test_sigkill_loses_no_acknowledged_store(
    store_db: str, host_process: Callable[..., Any]
) -> None:
    """Writers hammer a host subprocess; SIGKILL; a restart on the same database has every ack."""
    db = store_db
    proc = host_process(db)
    agents = [f"w{i}" for i in range(8)]
    acked: list[tuple[str, int]] = []
    stop = asyncio.Event()
    tasks = [asyncio.create_task(_writer(proc.url, a, acked, stop)) for a in agents]
    while len(acked) < 200:
        await asyncio.sleep(0.05)
    proc.proc.send_signal(signal.SIGKILL)
    proc.proc.wait(10)
    stop.set()
    await asyncio.gather(*tasks)
    restarted = host_process(db)
    found = await _count(restarted.url, agents)
    missing = set(acked) - found
    assert not missing, f"{len(missing)} acknowledged entries lost"
    assert len(acked) >= 200


async def test_sigterm_answers_in_flight_and_exits_zero(
    store_db: str, host_process: Callable[..., Any]
) -> None:
    """SIGTERM with pipelined stores in flight: they are answered, exit code 0, nothing lost."""
    db = store_db
    proc = host_process(db)
    c = await MemoryClient.connect(proc.url)
    await c.init("durable", {"agent": "t"})
    pending = [asyncio.ensure_future(c.store([{"key": {"a": "t", "i": i}, "content": i,
                                                "tier": "episodic"}])) for i in range(300)]
    await asyncio.sleep(0)  # let the sends start
    await asyncio.sleep(0.02)
    proc.proc.send_signal(signal.SIGTERM)
    results = await asyncio.gather(*pending, return_exceptions=True)
    acked = {(r.stored[0]["a"], r.stored[0]["i"]) for r in results if not isinstance(r, BaseException)}
    assert await asyncio.to_thread(proc.proc.wait, 20) == 0
    await c.close()
    assert acked, "no store was answered before shutdown"
    restarted = host_process(db)
    found = await _count(restarted.url, ["t"])
    assert acked <= found
