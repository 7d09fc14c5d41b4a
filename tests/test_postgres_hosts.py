"""Two `a2e-host serve` processes on one PostgreSQL database: what one host acknowledges the
other reads at once (by key, by keywords, and by meaning once embedded), a namespace quota holds
across both under concurrent writers, and expired entries are collected by one host at a
time."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import asyncpg
from support.search import DISTRACTORS, PARAPHRASE, PUPPY, entry, keys_of

from host.client import MemoryClient, RemoteError
from host.store.postgres.schema import LOCK_CLASS, LOCK_GC


def _config(tmp_path: Path, text: str) -> str:
    path = tmp_path / "a2e-host.toml"
    path.write_text(text)
    return str(path)


async def _session(url: str, agent: str, ns: str = "shared") -> MemoryClient:
    c = await MemoryClient.connect(url)
    await c.init(ns, {"agent": agent})
    return c


async def test_a_store_through_one_host_is_read_through_the_other(
    pg_url: str, host_process: Callable[..., Any]
) -> None:
    """An entry acknowledged by host A is returned by host B's very next retrieve, by key and
    by query; a forget through B is seen by A."""
    a, b = host_process(pg_url), host_process(pg_url)
    ca, cb = await _session(a.url, "alice"), await _session(b.url, "bob")
    try:
        for i in range(20):
            entry = {"key": {"i": i}, "content": f"fact number {i} about zebras",
                     "tier": "semantic"}
            assert (await ca.store([entry])).stored == [{"i": i}]
            got = await cb.retrieve(keys=[{"i": i}], tier="semantic")
            assert [e["content"] for e in got.entries] == [entry["content"]]
        found = await cb.retrieve(query="zebras", tier="semantic", limit=100)
        assert found.total == 20
        assert await cb.forget(keys=[{"i": 0}], tier="semantic") == 1
        assert (await ca.retrieve(keys=[{"i": 0}], tier="semantic")).entries == []
    finally:
        await ca.close()
        await cb.close()


async def test_namespace_quota_holds_across_two_hosts(
    pg_url: str, tmp_path: Path, host_process: Callable[..., Any]
) -> None:
    """Six writers, three on each host, race single-entry stores into a namespace whose quota
    is 25: exactly 25 are acknowledged and stored, every other store is memory_full."""
    cfg = _config(tmp_path, "[limits]\nmax_entries_per_namespace = 25\n")
    hosts = [host_process(pg_url, "--config", cfg) for _ in range(2)]
    acked: list[str] = []
    refused: list[str] = []

    async def writer(n: int) -> None:
        c = await _session(hosts[n % 2].url, f"w{n}")
        try:
            for i in range(10):
                try:
                    await c.store([{"key": {"w": n, "i": i}, "content": "x", "tier": "semantic"}])
                    acked.append(f"{n}/{i}")
                except RemoteError as err:
                    assert err.code == "memory_full"
                    refused.append(f"{n}/{i}")
        finally:
            await c.close()

    await asyncio.gather(*(writer(n) for n in range(6)))
    assert (len(acked), len(refused)) == (25, 35)
    reader = await _session(hosts[1].url, "reader")
    try:
        got = await reader.retrieve(tier="semantic", limit=1000)
        assert got.total == 25
        assert {f"{e['key']['w']}/{e['key']['i']}" for e in got.entries} == set(acked)
    finally:
        await reader.close()


async def test_expired_entries_are_collected_by_exactly_one_host(
    pg_url: str, tmp_path: Path, host_process: Callable[..., Any]
) -> None:
    """Both hosts run GC every 0.1 s. While another session holds the GC lock, neither collects;
    once it is released, one host deletes every expired entry and the other deletes none."""
    cfg = _config(tmp_path, "[gc]\ninterval = 0.1\n[search]\nembedder = \"none\"\n")  # GC alone
    sql = await asyncpg.connect(pg_url)
    hosts = [host_process(pg_url, "--config", cfg) for _ in range(2)]
    try:
        deadline = time.monotonic() + 30  # a host may hold the lock for a round right now
        while not await sql.fetchval("SELECT pg_try_advisory_lock($1, $2)", LOCK_CLASS, LOCK_GC):
            assert time.monotonic() < deadline, "the hosts never let the GC lock go"
            await asyncio.sleep(0.01)
        c = await _session(hosts[0].url, "writer")
        entries = [{"key": {"i": i}, "content": i, "tier": "episodic", "ttl": 1}
                   for i in range(50)]
        assert len((await c.store(entries)).stored) == 50
        await c.close()
        await asyncio.sleep(2.0)  # expired, and ~20 GC rounds of each host went by
        assert await sql.fetchval("SELECT count(*) FROM a2e_entries") == 50
        await sql.execute("SELECT pg_advisory_unlock($1, $2)", LOCK_CLASS, LOCK_GC)
        deadline = time.monotonic() + 30
        while await sql.fetchval("SELECT count(*) FROM a2e_entries") and (
                time.monotonic() < deadline):
            await asyncio.sleep(0.05)
        assert await sql.fetchval("SELECT count(*) FROM a2e_entries") == 0
        await asyncio.sleep(0.5)  # a few more rounds: nothing is left to delete twice
    finally:
        await sql.close()
    logs = []
    for h in hosts:
        assert await asyncio.to_thread(h.stop, signal.SIGTERM) == 0
        logs.append(h.proc.stderr.read().decode())  # type: ignore[union-attr]
    collected = [[line for line in log.splitlines() if "gc deleted" in line] for log in logs]
    assert sorted(len(lines) for lines in collected) == [0, 1], collected
    assert "gc deleted 50 expired entries" in "".join(sum(collected, []))


async def test_found_by_meaning_through_another_host(
    pg_url: str, host_process: Callable[..., Any]
) -> None:
    """An entry stored through host A (and embedded by A's worker) is found by a paraphrase
    sharing no word with it through host B, which never held it in memory."""
    a, b = host_process(pg_url), host_process(pg_url)
    ca, cb = await _session(a.url, "alice"), await _session(b.url, "bob")
    try:
        await ca.store([entry({"d": i}, t, "semantic") for i, t in enumerate(DISTRACTORS)]
                       + [entry({"k": "puppy"}, PUPPY, "semantic")])
        sql = await asyncpg.connect(pg_url)
        try:
            deadline = time.monotonic() + 60
            while await sql.fetchval("SELECT count(*) FROM a2e_embed_queue") and (
                    time.monotonic() < deadline):
                await asyncio.sleep(0.1)
            assert await sql.fetchval("SELECT count(*) FROM a2e_vectors") == len(DISTRACTORS) + 1
            assert dict(await sql.fetch("SELECT name, value FROM a2e_search_meta"))["dim"] == "384"
        finally:
            await sql.close()
        got = await cb.retrieve(query=PARAPHRASE, tier="semantic", limit=3)
        assert keys_of(got)[0] == {"k": "puppy"}
    finally:
        await ca.close()
        await cb.close()
