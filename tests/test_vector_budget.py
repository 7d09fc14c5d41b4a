"""The host's own vectors on SQLite, loaded a namespace at a time on its first query within
`search.vector_memory_bytes`: a restarted host reads no vector at start and embeds nothing
again, yet finds by meaning at once; with a budget of about two namespaces, queries over six
stay right while the indexes evict; what the worker writes for a namespace not loaded is read
when it loads."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from support.hosts import make_config, running_host, url_of
from support.search import DISTRACTORS, PARAPHRASE, PUPPY

from host.app import Host
from host.client import MemoryClient

# one namespace's index holds ~15 KB (its 9 rows of 384 float32 values and their metadata)
TWO_NAMESPACES = 38_000


async def _client(host: Host, ns: str) -> MemoryClient:
    c = await MemoryClient.connect(url_of(host))
    await c.init(ns, {"agent": "a1"})
    return c


async def _fill(host: Host, ns: str, puppy: bool = True) -> None:
    c = await _client(host, ns)
    try:
        texts = DISTRACTORS + ([PUPPY] if puppy else [])
        reply = await c.store([{"key": {"k": i}, "content": t, "tier": "semantic"}
                               for i, t in enumerate(texts)])
        assert reply.errors == []
    finally:
        await c.close()


async def _finds_puppy(host: Host, ns: str) -> bool:
    c = await _client(host, ns)
    try:
        got = await c.retrieve(query=PARAPHRASE, limit=3)
        return any(e["content"] == PUPPY for e in got.entries)
    finally:
        await c.close()


def _queued(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        return int(conn.execute("SELECT count(*) FROM embed_queue").fetchone()[0])


async def test_a_restarted_host_loads_on_first_query_without_embedding_again(
    tmp_path: Path,
) -> None:
    """After a restart no namespace is in memory and nothing is queued; the first query of a
    namespace loads its stored vectors (and only its) and finds the paraphrase; the worker
    computes no vector."""
    db = tmp_path / "lazy.db"
    config = make_config(db)
    async with running_host(config) as host:
        await _fill(host, "ns")
        await _fill(host, "other")
        await host.search.drain()
        assert await _finds_puppy(host, "ns")
    assert _queued(db) == 0
    async with running_host(config) as host:
        vectors: Any = host.search.vectors
        assert vectors is not None and vectors.keys() == []
        assert await host.search.count_backlog() == 0
        assert await _finds_puppy(host, "ns")
        assert vectors.keys() == ["ns"]
        assert len(vectors) == len(DISTRACTORS) + 1
        assert host.search.worker is not None and host.search.worker.embedded_total == 0
    assert _queued(db) == 0


async def test_queries_over_many_namespaces_stay_right_within_a_small_budget(
    tmp_path: Path,
) -> None:
    """Six namespaces, a budget of about two: each query finds its paraphrase, round after
    round, while the least recently used namespaces leave memory; the indexes never hold more
    than the budget. An entry embedded while its namespace is out of memory is found when the
    namespace loads again."""
    config = make_config(tmp_path / "budget.db", search={"vector_memory_bytes": TWO_NAMESPACES})
    spaces = [f"ns{i}" for i in range(6)]
    async with running_host(config) as host:
        for ns in spaces:
            await _fill(host, ns, puppy=ns != "ns0")
        await host.search.drain()
        vectors: Any = host.search.vectors
        for _ in range(2):
            for ns in spaces[1:]:
                assert await _finds_puppy(host, ns), ns
                assert vectors.nbytes <= TWO_NAMESPACES
                assert len(vectors.keys()) <= 2
        assert vectors.stats()["evictions"] >= 6
        assert "ns0" not in vectors.keys()
        c = await _client(host, "ns0")
        try:
            await c.store([{"key": {"k": "p"}, "content": PUPPY, "tier": "semantic"}])
        finally:
            await c.close()
        await host.search.drain()
        assert await _finds_puppy(host, "ns0")
        assert vectors.nbytes <= TWO_NAMESPACES
