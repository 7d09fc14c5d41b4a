"""The PostgreSQL functions file (host/store/postgres/functions.sql): it defines every function
of the schema, every start applies it after the migrations, and a host never puts older
functions over a newer host's."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import asyncpg
import pytest
from test_store_contract import T0, entry, key

from host.store.base import Query, Scope
from host.store.postgres.schema import (
    FUNCTIONS,
    LOCK_MIGRATE,
    Functions,
    advisory_lock,
    apply_functions,
)
from host.store.postgres.store import PostgresEntryStore

_OURS = ("SELECT p.proname, pg_get_functiondef(p.oid) FROM pg_proc p JOIN pg_namespace n"
         " ON n.oid = p.pronamespace WHERE n.nspname = current_schema()"
         " AND p.proname LIKE 'a2e\\_%' ORDER BY p.oid::regprocedure::text")


@pytest.fixture
async def sql(pg_url: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(pg_url)
    yield conn
    await conn.close()


async def _opened(pg_url: str) -> None:
    async with PostgresEntryStore(pg_url, pool_max=1):
        pass


def _newer(marker: int) -> Functions:
    """This host's functions file as a newer host's, with one more function answering
    `marker`."""
    sql = re.sub(r"^-- a2e functions version: \d+",
                 f"-- a2e functions version: {FUNCTIONS.version + 1}", FUNCTIONS.sql)
    return Functions.parse(sql + "\nCREATE OR REPLACE FUNCTION a2e_marker() RETURNS integer"
                           f" LANGUAGE sql AS $$ SELECT {marker} $$;\n")


async def test_the_file_defines_every_function_of_the_schema(
        pg_url: str, sql: asyncpg.Connection) -> None:
    """After a start, the schema's functions are exactly those the file names, and the database
    records the file's version and digest."""
    await _opened(pg_url)
    names = {r[0] for r in await sql.fetch(_OURS)}
    in_file = set(re.findall(r"^CREATE OR REPLACE FUNCTION (\w+)\(", FUNCTIONS.sql, re.M))
    assert names == in_file
    assert not re.search(r"^CREATE FUNCTION", FUNCTIONS.sql, re.M)  # all re-appliable
    row = await sql.fetchrow("SELECT version, digest FROM a2e_functions")
    assert (row[0], row[1]) == (FUNCTIONS.version, FUNCTIONS.digest)


async def test_every_start_reapplies_the_file(pg_url: str, sql: asyncpg.Connection) -> None:
    """A function changed by hand is restored at the next start, and a second start leaves the
    definitions as the first left them."""
    await _opened(pg_url)
    before = await sql.fetch(_OURS)
    await sql.execute("CREATE OR REPLACE FUNCTION a2e_tf(p_rank real) RETURNS double precision"
                      " LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 0::float8 $$")
    await _opened(pg_url)
    assert await sql.fetch(_OURS) == before
    async with PostgresEntryStore(pg_url, pool_max=1) as store:  # and the store works on them
        s = Scope("ns", "a")
        await store.put(s, [entry("k", content=b'"apples and pears"')], T0)
        hits = await store.search(s, Query(tiers=("episodic",)), "apples", T0, 10)
        assert [h.key for h in hits] == [key("k")]


async def test_an_older_host_keeps_a_newer_hosts_functions(
        pg_url: str, sql: asyncpg.Connection) -> None:
    """When a newer host applied a higher version, a start of this host leaves it (and its
    functions) in place; a still newer one replaces it."""
    await _opened(pg_url)
    async with advisory_lock(sql, LOCK_MIGRATE), sql.transaction():
        assert await apply_functions(sql, _newer(7))
    await _opened(pg_url)
    assert await sql.fetchval("SELECT a2e_marker()") == 7
    assert await sql.fetchval("SELECT version FROM a2e_functions") == FUNCTIONS.version + 1
    async with advisory_lock(sql, LOCK_MIGRATE), sql.transaction():
        assert not await apply_functions(sql, FUNCTIONS)  # as the start did
        assert await apply_functions(sql, _newer(8))  # the same version: applied again
    assert await sql.fetchval("SELECT a2e_marker()") == 8


def test_a_functions_file_starts_with_its_version() -> None:
    assert FUNCTIONS.version >= 1
    with pytest.raises(RuntimeError, match="version"):
        Functions.parse("CREATE OR REPLACE FUNCTION a2e_x() RETURNS integer"
                        " LANGUAGE sql AS $$ SELECT 1 $$;")
