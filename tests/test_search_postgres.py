"""Hybrid search on PostgreSQL, vectors written through the store and searched in SQL: forget
deletes the vector, and `reindex` embeds through the store. The two-host test is in
`test_postgres_hosts.py`; the paraphrase and visibility tests of `test_search_engine.py` run
on PostgreSQL too (marked `all_backends`)."""

from __future__ import annotations

import asyncpg
from support.hosts import make_config, run_cli, running_host, url_of
from support.search import DISTRACTORS, PARAPHRASE, PUPPY, entry, keys_of

from host.client import MemoryClient
from host.store.postgres.store import PostgresEntryStore


async def test_forget_removes_vector_on_postgres(pg_url: str) -> None:
    """Forgetting an entry deletes its vector row; a paraphrase no longer finds it."""
    async with running_host(make_config(pg_url)) as host:
        assert isinstance(host.store, PostgresEntryStore) and host.search.shared
        c = await MemoryClient.connect(url_of(host))
        await c.init("ns", {"agent": "alice"})
        await c.store([entry({"d": i}, t) for i, t in enumerate(DISTRACTORS)]
                      + [entry({"k": "puppy"}, PUPPY)])
        await host.search.drain()
        assert keys_of(await c.retrieve(query=PARAPHRASE, limit=3))[0] == {"k": "puppy"}
        count = "SELECT count(*) FROM a2e_vectors"
        before = await host.store.pool.fetchval(count)
        assert before == len(DISTRACTORS) + 1
        assert await c.forget(keys=[{"k": "puppy"}]) == 1
        assert await host.store.pool.fetchval(count) == before - 1
        assert {"k": "puppy"} not in keys_of(await c.retrieve(query=PARAPHRASE, limit=20))
        await c.close()


async def test_reindex_command_on_postgres(pg_url: str) -> None:
    """`a2e-host reindex --db postgresql://...` embeds the queued entries through the store;
    `--all` recomputes every vector."""
    async with running_host(make_config(pg_url, search={"embedder": "none"})) as host:
        c = await MemoryClient.connect(url_of(host))
        await c.init("ns", {"agent": "alice"})
        await c.store([entry({"k": "puppy"}, PUPPY), entry({"d": 0}, DISTRACTORS[0])])
        await c.close()
    assert b"embedded 2 entries" in run_cli("reindex", "--db", pg_url).stdout
    sql = await asyncpg.connect(pg_url)
    try:
        assert await sql.fetchval("SELECT count(*) FROM a2e_vectors") == 2
        assert await sql.fetchval("SELECT count(*) FROM a2e_embed_queue") == 0
    finally:
        await sql.close()
    assert b"embedded 0 entries" in run_cli("reindex", "--db", pg_url).stdout
    assert b"embedded 2 entries" in run_cli("reindex", "--all", "--db", pg_url).stdout
