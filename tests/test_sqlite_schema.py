"""Schema migrations: a database made by an older version keeps its data, its tag filters and
its quota counts."""

from __future__ import annotations

from pathlib import Path

from host.store.base import NewEntry, Query, Scope
from host.store.sqlite import ops
from host.store.sqlite.schema import MIGRATIONS, connect, migrate


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


def test_version_three_database_keeps_exact_usage_after_migration(tmp_path: Path) -> None:
    """Counts kept by the row triggers of schema 3 carry on exactly once `put_entries` counts
    inserts and overwrites itself (migration 4): new entries, another writer's overwrite and
    a forget leave usage equal to what the entries add up to."""
    conn = connect(str(tmp_path / "old.db"))
    conn.executescript("\n".join(MIGRATIONS[:3]) + "\nPRAGMA user_version = 3;")
    for i in range(3):  # written under schema 3: the insert trigger counts them
        conn.execute(
            "INSERT INTO entries (namespace, tier, owner, key, agent, content, tags, source,"
            " score, ttl, created_at, updated_at, expires_at, size)"
            " VALUES ('ns', 'semantic', '', ?, 'a1', '\"old\"', '[]', '', 1.0, 0, 1.0, 1.0, NULL, 5)",
            (f'{{"k":{i}}}',),
        )
    assert migrate(conn) == len(MIGRATIONS)
    q = ops.Quotas()
    conn.execute("BEGIN IMMEDIATE")
    new = NewEntry(tier="semantic", key=b'{"k":9}', content=b'"newer"')
    over = NewEntry(tier="semantic", key=b'{"k":0}', content=b'"overwritten by b2"')
    assert ops.put_entries(conn, Scope("ns", "a1"), [new], 2.0, q) == [None]
    assert ops.put_entries(conn, Scope("ns", "b2"), [over], 2.0, q) == [None]
    assert ops.forget_entries(conn, Scope("ns", "a1"), ["semantic"], [b'{"k":1}'], [], 2.0) == 1
    conn.execute("COMMIT")
    usage = {(r[0], r[1]): (r[2], r[3]) for r in conn.execute(
        "SELECT namespace, agent, entries, bytes FROM usage")}
    n, o = len(new.content), len(over.content)
    assert usage == {("ns", ""): (3, 5 + n + o), ("ns", "a1"): (2, 5 + n), ("ns", "b2"): (1, o)}
    conn.close()
