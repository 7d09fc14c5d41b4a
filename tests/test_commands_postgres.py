"""The store sub-commands on a PostgreSQL store: export and import (SQLite -> PostgreSQL and
back, by a pipe), stats and gc, run as real `a2e-host` processes."""

from __future__ import annotations

import json
import time
from pathlib import Path

import asyncpg
from support.dumps import jsonl, sorted_rows
from support.hosts import make_config, run_cli, running_host, url_of

from host.client import MemoryClient
from host.store.postgres.schema import LOCK_CLASS, LOCK_GC


async def _fill(db: str) -> None:
    """Entries in two namespaces and both persistent tiers, one with a TTL, through a host."""
    async with running_host(make_config(db)) as h:
        c = await MemoryClient.connect(url_of(h))
        for ns, agent in (("alpha", "a1"), ("alpha", "a2"), ("beta", "a1")):
            await c.init(ns, {"agent": agent})
            await c.store([{"key": {"k": i, "by": agent}, "content": {"text": f"apples {i} ☕"},
                            "tier": "semantic" if i % 3 == 0 else "episodic",
                            "tags": ["fruit", f"n{i}"], "score": 0.5, "source": "t",
                            "ttl": 3600 if i == 1 else 0} for i in range(6)])
        await c.close()


async def test_sqlite_to_postgres_and_back_through_a_pipe(tmp_path: Path, pg_url: str) -> None:
    """`export` from SQLite piped into `import --db postgresql://...` moves every entry with
    its timestamps, writer and TTL; the PostgreSQL host finds them by query; exporting from
    PostgreSQL into a new SQLite file gives the same lines again."""
    sqlite_db = str(tmp_path / "a2e.db")
    await _fill(sqlite_db)
    exported = run_cli("export", "--db", sqlite_db)
    assert exported.returncode == 0, exported.stderr.decode()
    first = jsonl(exported.stdout)
    assert len(first) == 18
    for _ in range(2):  # importing twice changes nothing
        imported = run_cli("import", "-", "--db", pg_url, input=exported.stdout)
        assert imported.returncode == 0, imported.stderr.decode()
        assert b"imported 18 entries" in imported.stderr
    from_pg = run_cli("export", "--db", pg_url)
    assert from_pg.returncode == 0, from_pg.stderr.decode()
    assert sorted_rows(jsonl(from_pg.stdout)) == sorted_rows(first)

    back = str(tmp_path / "back.db")
    assert run_cli("import", "-", "--db", back, input=from_pg.stdout).returncode == 0
    assert sorted_rows(jsonl(run_cli("export", "--db", back).stdout)) == sorted_rows(first)

    async with running_host(make_config(pg_url)) as h:
        c = await MemoryClient.connect(url_of(h))
        await c.init("alpha", {"agent": "a2"})
        found = await c.retrieve(query="apples", limit=100)
        assert found.total == 6 + 2  # a2's episodic entries and alpha's semantic ones
        await c.close()


async def test_export_one_namespace_to_a_file(tmp_path: Path, pg_url: str) -> None:
    """`export --namespace beta --output FILE` on PostgreSQL writes only that namespace."""
    await _fill(pg_url)
    out = tmp_path / "beta.jsonl"
    proc = run_cli("export", "--db", pg_url, "--namespace", "beta", "--output", str(out))
    assert proc.returncode == 0, proc.stderr.decode()
    rows = jsonl(out.read_bytes())
    assert len(rows) == 6 and {r["namespace"] for r in rows} == {"beta"}


async def test_stats_and_gc_on_postgres(pg_url: str) -> None:
    """`stats` counts live entries by namespace and tier; `gc` deletes expired entries, but
    none while a host holds the GC lock."""
    await _fill(pg_url)
    stats = json.loads(run_cli("stats", "--db", pg_url, "--json").stdout)
    assert stats["entries"] == 18 and stats["database_bytes"] > 0
    assert {(n["namespace"], n["tier"], n["entries"]) for n in stats["namespaces"]} == {
        ("alpha", "episodic", 8), ("alpha", "semantic", 4), ("beta", "episodic", 4),
        ("beta", "semantic", 2)}
    sql = await asyncpg.connect(pg_url)
    try:
        await sql.execute("UPDATE a2e_entries SET expires_at = $1 WHERE ttl > 0", time.time() - 1)
        assert await sql.fetchval("SELECT pg_try_advisory_lock($1, $2)", LOCK_CLASS, LOCK_GC)
        assert run_cli("gc", "--db", pg_url).stdout.strip() == b"deleted 0 expired entries"
        await sql.execute("SELECT pg_advisory_unlock($1, $2)", LOCK_CLASS, LOCK_GC)
        assert run_cli("gc", "--db", pg_url).stdout.strip() == b"deleted 3 expired entries"
    finally:
        await sql.close()
    text = run_cli("stats", "--db", pg_url).stdout.decode()
    assert "total entries: 15" in text
