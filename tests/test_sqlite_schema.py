"""Schema migrations: a database made by an older version keeps its data and its tag filters."""

from __future__ import annotations

from pathlib import Path

from host.store import sqlite_ops as ops
from host.store.base import Query, Scope
from host.store.sqlite_schema import MIGRATIONS, connect, migrate


def test_version_one_database_keeps_tags_after_migration(tmp_path: Path) -> None:
    """Entries and tags written under schema 1 are found by tag after migrating to the latest."""
    conn = connect(str(tmp_path / "old.db"))
    conn.executescript(MIGRATIONS[0] + "\nPRAGMA user_version = 1;")
    for i, (owner, tags) in enumerate([("a1", ["x", "y"]), ("a2", ["x"]), ("a1", ["y"])], 1):
        conn.execute(
            "INSERT INTO entries (id, namespace, tier, owner, key, agent, content, tags, source,"
            " score, ttl, created_at, updated_at, expires_at, size)"
            " VALUES (?, 'ns', 'episodic', ?, ?, ?, '\"c\"', '[]', '', 1.0, 0, 1.0, ?, NULL, 3)",
            (i, owner, f'{{"k":{i}}}', owner, float(i)),
        )
        conn.executemany("INSERT INTO entry_tags (tag, entry_id) VALUES (?, ?)",
                         [(t, i) for t in tags])
    assert migrate(conn) == len(MIGRATIONS)
    q = Query(tiers=("episodic",), tags=("x",))
    found, total = ops.find_entries(conn, Scope("ns", "a1"), q, now=10.0)
    assert [e.key for e in found] == [b'{"k":1}'] and total == 1
    q = Query(tiers=("episodic",), tags=("y",))
    found, total = ops.find_entries(conn, Scope("ns", "a1"), q, now=10.0)
    assert [e.key for e in found] == [b'{"k":3}', b'{"k":1}'] and total == 2
    conn.execute("DELETE FROM entries WHERE id = 1")  # the trigger still removes its tags
    assert conn.execute("SELECT count(*) FROM entry_tags WHERE entry_id = 1").fetchone()[0] == 0
    conn.close()
