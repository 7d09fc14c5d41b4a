"""The PostgreSQL functions (host/store/postgres/functions/, one file a concern): with the
baseline they define every function of the schema, each once; every start applies them after
the migrations; and a host never puts older functions over a newer host's."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import asyncpg
import pytest
from support.store import T0, entry, key

from host.store.postgres.schema import (
    FUNCTIONS,
    LOCK_MIGRATE,
    MIGRATION_FUNCTIONS,
    MIGRATIONS,
    Functions,
    advisory_lock,
    apply_functions,
)
from host.store.postgres.store import PostgresEntryStore
from host.store.records import Query, Scope

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
    """This host's functions as a newer host's, with one more function answering `marker`."""
    return Functions.of(FUNCTIONS.version + 1, FUNCTIONS.sql + "\nCREATE OR REPLACE FUNCTION"
                        f" a2e_marker() RETURNS integer LANGUAGE sql AS $$ SELECT {marker} $$;\n")


async def test_the_folder_and_the_baseline_define_every_function_of_the_schema(
        pg_url: str, sql: asyncpg.Connection) -> None:
    """After a start, the schema's functions are exactly those the folder and the migrations
    name, and the database records the folder's version and digest."""
    await _opened(pg_url)
    names = {r[0] for r in await sql.fetch(_OURS)}
    assert names == FUNCTIONS.names | MIGRATION_FUNCTIONS
    assert not re.search(r"^CREATE FUNCTION", FUNCTIONS.sql, re.M)  # all re-appliable
    row = await sql.fetchrow("SELECT version, digest FROM a2e_functions")
    assert (row[0], row[1]) == (FUNCTIONS.version, FUNCTIONS.digest)


def test_each_function_has_one_body() -> None:
    """Each function is defined once in the folder, and a function a migration declares for
    its trigger is a stub there (its body is the folder's); only `a2e_key_hash`, part of the
    address index, has its body in the baseline."""
    defined = re.findall(r"^CREATE OR REPLACE FUNCTION (\w+)\(", FUNCTIONS.sql, re.M)
    assert len(defined) == len(set(defined))
    assert [x.split("(")[0] for x in FUNCTIONS.signatures] == defined
    for sql in MIGRATIONS.values():
        for name, body in re.findall(r"^CREATE FUNCTION (\w+)\(.*?AS \$\$(.*?)\$\$;", sql,
                                     re.M | re.S):
            if name == "a2e_key_hash":
                assert name not in defined
            else:
                assert name in defined and body.strip() == "BEGIN RETURN NULL; END"


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


async def test_a_function_no_longer_defined_is_dropped_at_the_next_start(
        pg_url: str, sql: asyncpg.Connection) -> None:
    """An `a2e_` function neither the folder nor the migrations define (one a version before
    had, or an earlier signature of one whose arguments changed) is gone after a start;
    another application's function stays."""
    await _opened(pg_url)
    await sql.execute("CREATE FUNCTION a2e_put(p text) RETURNS text LANGUAGE sql AS $$ SELECT p $$")
    await sql.execute("CREATE FUNCTION other_app(p text) RETURNS text LANGUAGE sql"
                      " AS $$ SELECT p $$")
    # an earlier signature of a function the folder defines with other arguments
    await sql.execute("CREATE FUNCTION a2e_tf(p_rank double precision) RETURNS double precision"
                      " LANGUAGE sql AS $$ SELECT 0::float8 $$")
    await _opened(pg_url)
    assert await sql.fetchval("SELECT to_regproc('a2e_put')") is None
    assert await sql.fetchval("SELECT to_regproc('other_app')::text") == "other_app"
    assert await sql.fetchval("SELECT to_regprocedure('a2e_tf(double precision)')") is None
    assert await sql.fetchval("SELECT to_regprocedure('a2e_tf(real)')") is not None
