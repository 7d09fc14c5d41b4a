"""Upgrading a PostgreSQL database with data: a change log written by schema 11 (before a forget
forgot in the log) keeps its numbers and cursors, loses the content of what is already gone,
and forgets what is forgotten after the upgrade."""

from __future__ import annotations

import asyncpg

from host.store.base import Scope
from host.store.postgres.schema import MIGRATIONS
from host.store.postgres.store import PostgresEntryStore

_ENTRY = ("INSERT INTO a2e_entries (namespace, tier, owner, key, agent, content, tags, source,"
          " score, ttl, created_at, updated_at, expires_at, size, lexemes)"
          " VALUES ($1, 'semantic', '', $2, 'w', $3, '{}', '', 0.5, 0, 1.0, 1.0, NULL, 10, '')")
# a 'stored' change as schema 10-11 logged one: the records of the rows, by a2e_stored_record
_STORED = ("SELECT a2e_log_change($1, 'stored', 1.0, json_agg(a2e_stored_record(e)"
           " ORDER BY e.id)::text) FROM a2e_entries e WHERE e.namespace = $1 AND e.key = ANY($2)")


async def _schema_11(url: str) -> None:
    """Migrations 1-11 applied, as a host of that version left them, and some history: in
    namespace a a store of two entries (one forgotten since, logged as schema 11 logged it),
    a store in b, a store of a third entry in a."""
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("CREATE TABLE a2e_migrations (version integer PRIMARY KEY,"
                           " applied_at timestamptz NOT NULL DEFAULT now())")
        for number, script in enumerate(MIGRATIONS[:11], start=1):
            async with conn.transaction():
                await conn.execute(script)
                await conn.execute("INSERT INTO a2e_migrations (version) VALUES ($1)", number)
        for ns, key, content in (("a", '{"k":"gone"}', '"GONE-CONTENT"'),
                                 ("a", '{"k":"kept"}', '"KEPT-CONTENT"'),
                                 ("b", '{"k":"b"}', '"B-CONTENT"'),
                                 ("a", '{"k":"later"}', '"LATER-CONTENT"')):
            await conn.execute(_ENTRY, ns, key, content)
        await conn.fetchval(_STORED, "a", ['{"k":"gone"}', '{"k":"kept"}'])
        await conn.fetchval(_STORED, "b", ['{"k":"b"}'])
        async with conn.transaction():
            await conn.execute("SELECT set_config('a2e.change_op', 'forgotten', true)")
            await conn.execute("DELETE FROM a2e_entries WHERE key = '{\"k\":\"gone\"}'")
        await conn.fetchval(_STORED, "a", ['{"k":"later"}'])
    finally:
        await conn.close()


async def test_a_schema_11_change_log_upgrades_with_its_numbers_and_forgets(pg_url: str) -> None:
    """After the upgrade each namespace's changes keep their numbers (cursors given out before
    resume) and the next one follows them; the content of the entry forgotten before the
    upgrade is gone from the log while its `forgotten` change stays; an entry forgotten after
    the upgrade takes its content out of the old `stored` change too."""
    await _schema_11(pg_url)
    conn = await asyncpg.connect(pg_url)
    try:  # before the upgrade the log still holds the forgotten content
        assert "GONE-CONTENT" in await conn.fetchval("SELECT string_agg(entries, '')"
                                                     " FROM a2e_changes")
    finally:
        await conn.close()
    store = PostgresEntryStore(pg_url, pool_max=2)
    await store.open()
    try:
        a = await store.changes_after("a", 0, 100)
        assert [(c.seq, c.op) for c in a] == [(1, "stored"), (2, "forgotten"), (3, "stored")]
        assert [c.seq for c in await store.changes_after("b", 0, 100)] == [1]
        text = b"".join(c.entries for c in a)
        assert b"GONE-CONTENT" not in text and b"KEPT-CONTENT" in text
        assert b'"gone"' in a[1].entries  # the forgotten change itself says what went
        assert [c.seq for c in await store.changes_after("a", 1, 100)] == [2, 3]
        assert await store.forget(Scope("a", "w"), ["semantic"], [b'{"k":"kept"}'], [], 2.0) == 1
        after = await store.changes_after("a", 0, 100)
        assert [(c.seq, c.op) for c in after][-1] == (4, "forgotten")
        text = b"".join(c.entries for c in after)
        assert b"KEPT-CONTENT" not in text and b"LATER-CONTENT" in text
        assert await store.change_head("a") == 4 and await store.change_head("b") == 1
    finally:
        await store.close()
