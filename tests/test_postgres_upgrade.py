"""Databases made by older trees: the schema starts at a baseline (migration 19, the development
versions' migrations 1-19 squashed). A database those versions brought to 19 opens as the
baseline (their leftover functions go, the data stays); one they left below it is refused with a
message naming what to do, and nothing in it changes."""

from __future__ import annotations

import asyncpg
import pytest
from support.store import T0, entry, key

from host.store.postgres.schema import BASELINE, FUNCTIONS, MIGRATIONS, OlderSchema
from host.store.postgres.store import PostgresEntryStore
from host.store.records import Query, Scope

_TABLES = ("SELECT string_agg(tablename, ',' ORDER BY tablename) FROM pg_tables"
           " WHERE schemaname = current_schema()")


async def test_a_database_below_the_baseline_is_refused_and_left_as_it_is(pg_url: str) -> None:
    """A database whose ledger stops at migration 11 is refused with `OlderSchema` naming the
    migration, export and import; its tables and ledger are as they were."""
    conn = await asyncpg.connect(pg_url)
    try:
        await conn.execute("CREATE TABLE a2e_migrations (version integer PRIMARY KEY,"
                           " applied_at timestamptz NOT NULL DEFAULT now())")
        await conn.execute("INSERT INTO a2e_migrations SELECT generate_series(1, 11)")
        await conn.execute("CREATE TABLE a2e_entries (id bigint PRIMARY KEY, content text)")
        await conn.execute("INSERT INTO a2e_entries VALUES (1, '\"kept\"')")
        tables = await conn.fetchval(_TABLES)
        with pytest.raises(OlderSchema, match="migration 11.*export.*import"):
            await PostgresEntryStore(pg_url, pool_max=1).open()
        assert await conn.fetchval(_TABLES) == tables
        assert await conn.fetchval("SELECT max(version) FROM a2e_migrations") == 11
        assert await conn.fetchval("SELECT content FROM a2e_entries") == '"kept"'
    finally:
        await conn.close()


async def test_a_database_at_migration_19_opens_as_the_baseline(pg_url: str) -> None:
    """A database with the development versions' ledger 1-19, their functions version and a
    function they had that the baseline dropped opens: no migration runs again, the leftover
    function is gone, the functions are this host's, and its entries are found."""
    s = Scope("ns", "a")
    async with PostgresEntryStore(pg_url, pool_max=1) as store:
        await store.put(s, [entry("k", content=b'"apples and pears"')], T0)
    conn = await asyncpg.connect(pg_url)
    try:  # as the development versions left it
        await conn.execute("INSERT INTO a2e_migrations SELECT generate_series(1, $1 - 1)",
                           BASELINE)
        await conn.execute("UPDATE a2e_functions SET version = 6, digest = 'older'")
        await conn.execute("CREATE FUNCTION a2e_put_batch(p_namespace text[]) RETURNS text[]"
                           " LANGUAGE sql AS $$ SELECT p_namespace $$")
        async with PostgresEntryStore(pg_url, pool_max=1) as store:
            hits = await store.search(s, Query(tiers=("episodic",)), "apples", T0, 10)
            assert [h.key for h in hits] == [key("k")]
        versions = [r[0] for r in await conn.fetch("SELECT version FROM a2e_migrations"
                                                   " ORDER BY 1")]
        assert versions == list(range(1, BASELINE + len(MIGRATIONS)))
        assert await conn.fetchval("SELECT to_regproc('a2e_put_batch')") is None
        row = await conn.fetchrow("SELECT version, digest FROM a2e_functions")
        assert (row[0], row[1]) == (FUNCTIONS.version, FUNCTIONS.digest)
    finally:
        await conn.close()
