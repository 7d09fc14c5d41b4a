"""`memory/usage` over every transport and both backends: a session asks how much of its quotas
its agent and its namespace hold (entries and bytes against each limit), and its working tier;
never another agent's or namespace's figures, and counting the connection's own writes."""

from __future__ import annotations

from typing import Any

import pytest
from support.hosts import client_of, make_config, running_host, server_transport

from host.client import MemoryClient, RemoteError
from host.store.records import stored_bytes
from protocol.codec import new_id, now
from protocol.messages import (
    VERSION,
    MemoryStoreRequest,
    MemoryUsageRequest,
    MemoryUsageResponse,
)

pytestmark = [pytest.mark.all_backends, pytest.mark.all_transports]

LIMITS = {"max_entries_per_agent": 50, "max_entries_per_namespace": 200,
          "max_bytes_per_agent": 10_000, "max_bytes_per_namespace": 40_000,
          "max_working_entries": 7, "on_full": "evict"}


def entry(k: int, tier: str = "episodic", content: str = "x") -> dict[str, Any]:
    return {"key": {"k": k}, "content": content, "tier": tier}


def size(k: int, content: str = "x") -> int:
    """The bytes `entry(k)` counts against the byte quotas."""
    return stored_bytes(b'{"k":%d}' % k, f'"{content}"'.encode(), [])


def usage_request(c: MemoryClient, memory_id: str | None = None) -> MemoryUsageRequest:
    return MemoryUsageRequest(id=new_id(), version=VERSION, ts=now(),
                              memory_id=memory_id or c.memory_id or "")


async def usage(c: MemoryClient) -> MemoryUsageResponse:
    return await c.usage()


async def test_usage_gives_the_agent_and_its_namespace_against_their_quotas(
    store_db: str, transport: str,
) -> None:
    """Agent a1 (3 episodic and 1 semantic entry) sees its own 4 and its namespace's 6 (with
    a2's 2), each against its limits; a2 sees its 2; a1's entries in another namespace count in
    neither; the working tier counts the session's entries against its limit."""
    config = make_config(store_db, limits=LIMITS, server={"transport": server_transport(transport)})
    async with running_host(config) as host:
        clients = []
        try:
            for agent, ns, entries in (
                    ("a1", "ns", [entry(1), entry(2), entry(3), entry(4, "semantic", "yy")]),
                    ("a2", "ns", [entry(5), entry(6)]),
                    ("a1", "other", [entry(k) for k in range(20)])):
                c = await client_of(host, transport)
                clients.append(c)
                await c.init(ns, {"agent": agent})
                await c.store(entries)
            a1, a2, elsewhere = clients
            await a1.store([entry(9, "working"), entry(10, "working")])
            mine = await usage(a1)
            assert (mine.agent.entries, mine.agent.bytes) == (
                4, size(1) + size(2) + size(3) + size(4, "yy"))
            assert (mine.agent.max_entries, mine.agent.max_bytes) == (50, 10_000)
            assert (mine.namespace.entries, mine.namespace.bytes) == (
                6, mine.agent.bytes + size(5) + size(6))
            assert (mine.namespace.max_entries, mine.namespace.max_bytes) == (200, 40_000)
            assert (mine.working.entries, mine.working.max_entries) == (2, 7)
            assert mine.working.bytes == size(9) + size(10)
            assert mine.on_full == "evict"
            theirs = await usage(a2)
            assert (theirs.agent.entries, theirs.namespace.entries) == (2, 6)
            assert theirs.working.entries == 0
            other = await usage(elsewhere)
            assert (other.agent.entries, other.namespace.entries) == (20, 20)
        finally:
            for c in clients:
                await c.close()


async def test_usage_counts_the_connections_own_writes_sent_before_it(
    store_db: str, transport: str,
) -> None:
    """A usage request sent right behind a store, before its reply, counts the stored entries
    (a read waits for the connection's writes)."""
    config = make_config(store_db, limits=LIMITS, server={"transport": server_transport(transport)})
    async with running_host(config) as host:
        c = await client_of(host, transport)
        try:
            await c.init("ns", {"agent": "a1"})
            stored = await c.submit(MemoryStoreRequest(
                id=new_id(), version=VERSION, ts=now(), memory_id=c.memory_id or "",
                entries=[entry(k) for k in range(5)]))  # type: ignore[arg-type]
            asked = await c.submit(usage_request(c))
            await stored
            assert (await asked).agent.entries == 5
        finally:
            await c.close()


async def test_usage_of_an_unknown_session_is_memory_not_found(
    store_db: str, transport: str,
) -> None:
    """A memory_id no session of the connection has is `memory_not_found`."""
    config = make_config(store_db, server={"transport": server_transport(transport)})
    async with running_host(config) as host:
        c = await client_of(host, transport)
        try:
            await c.init("ns", {"agent": "a1"})
            with pytest.raises(RemoteError) as err:
                await c.request(usage_request(c, "no-such-session"))
            assert err.value.code == "memory_not_found"
        finally:
            await c.close()
