"""Change streams across two `a2e-host serve` processes on one PostgreSQL database: a change
committed through either host reaches the watchers of both, and a cursor of one host resumes
on the other."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from host.client import MemoryClient
from protocol.messages import MemoryChangedEvent


async def _session(url: str, agent: str) -> MemoryClient:
    c = await MemoryClient.connect(url)
    await c.init("shared", {"agent": agent})
    return c


async def _change(c: MemoryClient) -> MemoryChangedEvent:
    ev = await c.next_event(timeout=20.0)
    assert isinstance(ev, MemoryChangedEvent), ev
    return ev


async def test_a_change_through_one_host_reaches_watchers_on_both(
    pg_url: str, host_process: Callable[..., Any]
) -> None:
    """A store through host A is one event on a watcher of host B and on one of host A; a
    forget through B reaches both too; a cursor from B resumes on A, losing nothing."""
    a, b = host_process(pg_url), host_process(pg_url)
    on_a, on_b = await _session(a.url, "alice"), await _session(b.url, "bob")
    writer_a, writer_b = await _session(a.url, "w1"), await _session(b.url, "w2")
    try:
        await on_a.watch()
        await on_b.watch()
        await writer_a.store([{"key": {"k": i}, "content": i, "tier": "semantic"}
                              for i in range(3)])
        for c in (on_a, on_b):
            ev = await _change(c)
            assert ev.op == "stored" and [e["key"]["k"] for e in ev.entries] == [0, 1, 2]
        assert await writer_b.forget(keys=[{"k": 1}], tier="semantic") == 1
        for c in (on_a, on_b):
            ev = await _change(c)
            assert ev.op == "forgotten" and ev.entries[0]["key"] == {"k": 1}
        cursor = ev.cursor  # host B's
        await on_b.close()
        for i in range(3, 6):
            await writer_b.store([{"key": {"k": i}, "content": i, "tier": "semantic"}])
        moved = await _session(a.url, "bob")
        await moved.watch(since=cursor)
        got = [(await _change(moved)).entries[0]["key"]["k"] for _ in range(3)]
        assert got == [3, 4, 5]
        await moved.close()
    finally:
        for c in (on_a, writer_a, writer_b):
            await c.close()
