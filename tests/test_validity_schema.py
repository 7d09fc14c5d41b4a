"""The time extension's schema: a SQLite database of schema 15 and a PostgreSQL one at migration
21 (before validity) keep their entries, which hold at every time, and take windows once
migrated; a SQLite history of schema 16 keeps bounds from 17 on; export and import keep an
entry's window and check it."""

from __future__ import annotations

import json
from pathlib import Path

import asyncpg
from support.hosts import run_cli
from support.schema import schema_at
from support.store import T0, entry, key

from host.client import MemoryClient
from host.store.postgres.schema import BASELINE
from host.store.postgres.schema import MIGRATIONS as PG_MIGRATIONS
from host.store.postgres.store import PostgresEntryStore
from host.store.records import NewEntry, Query, Quotas, Scope
from host.store.sqlite import reads, writes
from host.store.sqlite.history import read_history
from host.store.sqlite.schema import MIGRATIONS, migrate


def test_a_schema_fifteen_database_migrates_with_open_windows(tmp_path: Path) -> None:
    """Entries written under schema 15 read back after migrating with no validity, and an
    `as_of` read keeps them at any time; an entry written then with a window is kept only
    inside it, and overwriting it without one opens it again."""
    conn = schema_at(tmp_path / "old.db", 15)
    conn.execute(
        "INSERT INTO entries (id, namespace, tier, owner, key, agent, content, tags, source,"
        " score, ttl, created_at, updated_at, expires_at, size)"
        " VALUES (1, 'ns', 'semantic', '', '{\"k\":1}', 'a', '\"old\"', '[]', '', 1.0, 0,"
        " 1.0, 1.0, NULL, 12)")
    assert migrate(conn) == len(MIGRATIONS)
    scope = Scope("ns", "a")
    found, total = reads.find_entries(conn, scope, Query(tiers=("semantic",)), now=10.0)
    assert total == 1 and found[0].valid_from is None and found[0].valid_until is None
    for as_of in (-1e9, 0.0, 1e10):
        q = Query(tiers=("semantic",), as_of=as_of)
        assert reads.find_entries(conn, scope, q, now=10.0)[1] == 1
    windowed = NewEntry(tier="semantic", key=b'{"k":2}', content=b'"new"', valid_from=100.0,
                        valid_until=200.0)
    conn.execute("BEGIN")
    assert writes.put_entries(conn, scope, [windowed], 10.0, Quotas()) == [None]
    conn.execute("COMMIT")
    at = {t: sorted(e.key for e in reads.find_entries(
        conn, scope, Query(tiers=("semantic",), as_of=t), now=10.0)[0]) for t in (50, 100, 200)}
    assert at == {50: [b'{"k":1}'], 100: [b'{"k":1}', b'{"k":2}'], 200: [b'{"k":1}']}
    conn.execute("BEGIN")
    writes.put_entries(conn, scope, [NewEntry(tier="semantic", key=b'{"k":2}',
                                              content=b'"newer"')], 11.0, Quotas())
    conn.execute("COMMIT")
    q = Query(tiers=("semantic",), keys=(b'{"k":2}',), as_of=500.0)
    (again,), _ = reads.find_entries(conn, scope, q, now=12.0)
    assert again.content == b'"newer"' and again.valid_until is None
    conn.close()


def test_a_schema_sixteen_history_migrates_and_keeps_bounds_from_then_on(tmp_path: Path
                                                                         ) -> None:
    """A version kept under schema 16 reads back after migrating with no bounds; a content
    change from then on keeps the replaced version's bounds (the trigger of 17)."""
    conn = schema_at(tmp_path / "old.db", 16)
    scope, q = Scope("ns", "a"), Quotas()
    for n, (content, window) in enumerate([(b'"one"', {}), (b'"two"', {"valid_until": 200.0}),
                                           (b'"three"', {})]):
        if n == 2:
            assert migrate(conn) == len(MIGRATIONS)
        conn.execute("BEGIN")
        writes.put_entries(conn, scope, [entry("h", content, **window)], T0 + n, q)
        conn.execute("COMMIT")
    got = read_history(conn, scope, ("episodic",), key("h"), T0 + 3, 10)
    assert [(v.content, v.valid_from, v.valid_until) for v in got] == [
        (b'"three"', None, None), (b'"two"', None, 200.0), (b'"one"', None, None)]
    conn.close()


async def test_export_and_import_keep_a_window(client: MemoryClient, db_path: Path,
                                               tmp_path: Path) -> None:
    """An exported entry carries its bounds (an entry without them, neither field), an import
    writes them back, and a line whose window is empty is refused, naming its line."""
    await client.store([
        {"key": {"k": 1}, "content": "Boston", "tier": "semantic", "valid_from": 100.0,
         "valid_until": "1970-01-01T00:03:20Z"},
        {"key": {"k": 2}, "content": "no time", "tier": "semantic"}])
    dump = tmp_path / "dump.jsonl"
    assert run_cli("export", "--db", str(db_path), "--output", str(dump)).returncode == 0
    lines = {json.loads(x)["key"]["k"]: json.loads(x) for x in dump.read_bytes().splitlines()}
    assert (lines[1]["valid_from"], lines[1]["valid_until"]) == (100.0, 200.0)
    assert "valid_from" not in lines[2] and "valid_until" not in lines[2]
    target = tmp_path / "copy.db"
    assert run_cli("import", str(dump), "--db", str(target)).returncode == 0
    again = run_cli("export", "--db", str(target))
    assert again.returncode == 0, again.stderr
    assert {json.loads(x)["key"]["k"]: json.loads(x) for x in again.stdout.splitlines()} == lines
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({**lines[1], "valid_until": 50.0}) + "\n")
    proc = run_cli("import", str(bad), "--db", str(tmp_path / "other.db"))
    assert proc.returncode != 0 and b"line 1" in proc.stderr and b"valid_until" in proc.stderr


async def test_a_postgres_database_at_migration_21_migrates_with_open_windows(pg_url: str
                                                                              ) -> None:
    """A database as migration 21 and functions version 11 left it (no validity columns, the
    puts' earlier signature) opens at migration 22: its entry holds at any time, the earlier
    signature is gone, and a put with a window is kept only inside it."""
    s = Scope("ns", "a")
    async with PostgresEntryStore(pg_url, pool_max=1) as store:
        await store.put(s, [entry("old")], T0)
    conn = await asyncpg.connect(pg_url)
    try:  # back to 21: the columns (the history's of 23 too, the queue's of 24), the ledger's
        # rows, the functions'
        await conn.execute("DROP TRIGGER a2e_embed_queue_namespace_bi ON a2e_embed_queue;"
                           " DROP FUNCTION a2e_embed_queue_namespace();"
                           " ALTER TABLE a2e_embed_queue DROP COLUMN namespace")
        await conn.execute("ALTER TABLE a2e_entries DROP COLUMN valid_from,"
                           " DROP COLUMN valid_until")
        await conn.execute("ALTER TABLE a2e_entry_history DROP COLUMN valid_from,"
                           " DROP COLUMN valid_until")
        await conn.execute("DELETE FROM a2e_migrations WHERE version >= 22")
        await conn.execute("UPDATE a2e_functions SET version = 11, digest = 'older'")
        await conn.execute(
            "CREATE FUNCTION a2e_put_group(p_quotas bigint[], p_put integer[]) RETURNS text[]"
            " LANGUAGE sql AS $$ SELECT NULL::text[] $$")
        async with PostgresEntryStore(pg_url, pool_max=1) as store:
            for as_of in (-1e9, 0.0, 1e10):
                found, total = await store.find(s, Query(tiers=("episodic",), as_of=as_of), T0)
                assert total == 1 and found[0].valid_from is None
            windowed = entry("new")
            windowed.valid_from, windowed.valid_until = 100.0, 200.0
            assert await store.put(s, [windowed], T0) == [None]
            for as_of, want in [(50.0, 1), (150.0, 2), (200.0, 1)]:
                q = Query(tiers=("episodic",), as_of=as_of)
                assert (await store.find(s, q, T0))[1] == want
            q = Query(tiers=("episodic",), keys=(key("new"),))
            (got,), _ = await store.find(s, q, T0)
            assert (got.valid_from, got.valid_until) == (100.0, 200.0)
        assert await conn.fetchval("SELECT max(version) FROM a2e_migrations") == (
            BASELINE + len(PG_MIGRATIONS) - 1)
        assert await conn.fetchval(
            "SELECT to_regprocedure('a2e_put_group(bigint[], integer[])')") is None
    finally:
        await conn.close()
