"""Schema migrations: a database made by an older version keeps its data, its tag filters and
its quota counts."""

from __future__ import annotations

from pathlib import Path

from support.schema import schema_at

from host.store.records import NewEntry, Query, Quotas, Scope, scope_token
from host.store.sqlite import reads, writes
from host.store.sqlite.schema import MIGRATIONS, migrate


def test_version_one_database_keeps_tags_after_migration(tmp_path: Path) -> None:
    """Entries and tags written under schema 1 are found by tag after migrating to the latest."""
    conn = schema_at(tmp_path / "old.db", 1)
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
    found, total = reads.find_entries(conn, Scope("ns", "a1"), q, now=10.0)
    assert [e.key for e in found] == [b'{"k":1}'] and total == 1
    q = Query(tiers=("episodic",), tags=("y",))
    found, total = reads.find_entries(conn, Scope("ns", "a1"), q, now=10.0)
    assert [e.key for e in found] == [b'{"k":3}', b'{"k":1}'] and total == 2
    conn.execute("DELETE FROM entries WHERE id = 1")  # the trigger still removes its tags
    assert conn.execute("SELECT count(*) FROM entry_tags WHERE entry_id = 1").fetchone()[0] == 0
    conn.close()


def test_version_three_database_keeps_exact_usage_after_migration(tmp_path: Path) -> None:
    """Counts kept by the row triggers of schema 3 carry on exactly once `put_entries` counts
    inserts and overwrites itself (migration 4): new entries, another writer's overwrite and
    a forget leave usage equal to what the entries add up to."""
    conn = schema_at(tmp_path / "old.db", 3)
    for i in range(3):  # written under schema 3: the insert trigger counts them
        conn.execute(
            "INSERT INTO entries (namespace, tier, owner, key, agent, content, tags, source,"
            " score, ttl, created_at, updated_at, expires_at, size)"
            " VALUES ('ns', 'semantic', '', ?, 'a1', '\"old\"', '[]', '', 1.0, 0, 1.0, 1.0, NULL, 5)",
            (f'{{"k":{i}}}',),
        )
    assert migrate(conn) == len(MIGRATIONS)
    q = Quotas()
    conn.execute("BEGIN IMMEDIATE")
    new = NewEntry(tier="semantic", key=b'{"k":9}', content=b'"newer"')
    over = NewEntry(tier="semantic", key=b'{"k":0}', content=b'"overwritten by b2"')
    assert writes.put_entries(conn, Scope("ns", "a1"), [new], 2.0, q) == [None]
    assert writes.put_entries(conn, Scope("ns", "b2"), [over], 2.0, q) == [None]
    assert writes.forget_entries(conn, Scope("ns", "a1"), ["semantic"], [b'{"k":1}'], [], 2.0) == 1
    conn.execute("COMMIT")
    usage = {(r[0], r[1]): (r[2], r[3]) for r in conn.execute(
        "SELECT namespace, agent, entries, bytes FROM usage")}
    # migration 7 recounted the old entries' sizes as key + content bytes (7 + 5)
    n, o = len(new.key) + len(new.content), len(over.key) + len(over.content)
    assert usage == {("ns", ""): (3, 12 + n + o), ("ns", "a1"): (2, 12 + n), ("ns", "b2"): (1, o)}
    conn.close()


def test_version_four_database_gets_exact_keyword_statistics(tmp_path: Path) -> None:
    """Migration 6 fills each namespace's keyword statistics (rows, tokens) from the keyword
    index as it is, and later writes, overwrites and forgets keep them equal to a recount."""
    conn = schema_at(tmp_path / "old.db", 4)
    for i, (ns, text) in enumerate([("a", "one two three"), ("a", "four"), ("b", "five six")]):
        conn.execute(
            "INSERT INTO entries (namespace, tier, owner, key, agent, content, tags, source,"
            " score, ttl, created_at, updated_at, expires_at, size)"
            " VALUES (?, 'semantic', '', ?, 'w', '\"x\"', '[]', '', 1.0, 0, 1.0, 1.0, NULL, 3)",
            (ns, f'{{"k":{i}}}'))
        conn.execute("INSERT INTO entries_fts (rowid, scope, body) VALUES (?, ?, ?)",
                     (i + 1, scope_token(ns), text))
    assert migrate(conn) == len(MIGRATIONS)

    def stats() -> dict[str, tuple[int, int]]:
        return {r[0]: (r[1], r[2]) for r in conn.execute("SELECT * FROM keyword_stats")}

    def recount() -> dict[str, tuple[int, int]]:
        sizes = {}
        for scope, body in conn.execute("SELECT scope, body FROM entries_fts"):
            n, t = sizes.get(scope, (0, 0))
            sizes[scope] = (n + 1, t + len(body.split()) + 1)
        return sizes

    assert stats() == recount() == {scope_token("a"): (2, 6), scope_token("b"): (1, 3)}
    conn.execute("BEGIN IMMEDIATE")
    q = Quotas()
    assert writes.put_entries(conn, Scope("a", "w"), [
        NewEntry(tier="semantic", key=b'{"k":1}', content=b'"seven eight"', text="seven eight"),
        NewEntry(tier="semantic", key=b'{"k":7}', content=b'"nine"', text="nine")], 2.0, q) == [
        None, None]
    assert writes.forget_entries(conn, Scope("b", "w"), ["semantic"], [b'{"k":2}'], [], 2.0) == 1
    conn.execute("COMMIT")
    assert {k: v for k, v in stats().items() if v != (0, 0)} == recount()
    conn.close()


def test_version_eight_change_log_keeps_its_cursors_and_forgets_what_is_gone(
    tmp_path: Path,
) -> None:
    """A change log of schema 8 (one counter for every namespace) migrates with its numbers, so
    cursors given out before resume, and each namespace goes on after its own highest; the
    content of an entry already deleted leaves the log, and that of an entry still there leaves
    it when it is forgotten."""
    from host.store.changes import encode_records, stored_record
    from host.store.sqlite import changes

    conn = schema_at(tmp_path / "old.db", 8)
    conn.execute(
        "INSERT INTO entries (id, namespace, tier, owner, key, agent, content, tags, source,"
        " score, ttl, created_at, updated_at, expires_at, size)"
        " VALUES (7, 'a', 'semantic', '', '{\"k\":\"kept\"}', 'w', '\"KEPT\"', '[]', '', 0.5,"
        " 0, 1.0, 1.0, NULL, 18)")
    for ns, key, content in [("a", b'{"k":"gone"}', b'"GONE"'), ("b", b'{"k":"x"}', b'"B"'),
                             ("a", b'{"k":"kept"}', b'"KEPT"')]:
        conn.execute("INSERT INTO changes (namespace, at, op, entries) VALUES (?, 1.0, ?, ?)",
                     (ns, "stored", encode_records([stored_record(
                         "semantic", "", key, content, [], "", 0.5, 0, 1.0, 1.0)])))
    old = {ns: [c.seq for c in changes.changes_after(conn, ns, 0, 10)] for ns in ("a", "b")}
    assert migrate(conn) == len(MIGRATIONS)
    assert {ns: [c.seq for c in changes.changes_after(conn, ns, 0, 10)]
            for ns in ("a", "b")} == old
    logged = [bytes(c.entries) for c in changes.changes_after(conn, "a", 0, 10)]
    assert not any(b"GONE" in e for e in logged) and any(b"KEPT" in e for e in logged)
    assert changes.changes_after(conn, "a", old["a"][0], 10)[0].seq == old["a"][1]
    with conn:
        writes.forget_entries(conn, Scope("a", "w"), ["semantic"], [b'{"k":"kept"}'], [], 2.0)
    after = changes.changes_after(conn, "a", 0, 10)
    assert after[-1].seq == max(old["a"]) + 1 and after[-1].op == "forgotten"
    assert not any(b"KEPT" in bytes(c.entries) for c in after)
    conn.close()


def test_a_schema_ten_change_log_keeps_one_link_an_entry_after_migrating(tmp_path: Path) -> None:
    """A schema-10 log that linked a key to each of its three stores keeps, after migrating,
    only the link and the copy of its last store: the earlier stores' copies are gone, the
    numbers do not move, and the other entry of an earlier store keeps its record."""
    from host.store.changes import encode_records, stored_record
    from host.store.sqlite import changes

    conn = schema_at(tmp_path / "old.db", 10)
    for i, key in [(7, '{"k":"same"}'), (8, '{"k":"other"}')]:
        conn.execute(
            "INSERT INTO entries (id, namespace, tier, owner, key, agent, content, tags, source,"
            " score, ttl, created_at, updated_at, expires_at, size)"
            " VALUES (?, 'a', 'semantic', '', ?, 'w', '\"V3\"', '[]', '', 0.5,"
            " 0, 1.0, 1.0, NULL, 18)", (i, key))
    for n, keys in [(1, [b'{"k":"same"}', b'{"k":"other"}']), (2, [b'{"k":"same"}']),
                    (3, [b'{"k":"same"}'])]:
        (cid,) = conn.execute(
            "INSERT INTO changes (namespace, seq, at, op, entries) VALUES ('a', ?, 1.0,"
            " 'stored', ?) RETURNING id", (n, encode_records([stored_record(
                "semantic", "", k, f'"V{n}"'.encode(), [], "", 0.5, 0, 1.0, 1.0)
                for k in keys]))).fetchone()
        conn.executemany("INSERT INTO change_keys (entry_id, change_id) VALUES (?, ?)",
                         [(7 if k == b'{"k":"same"}' else 8, cid) for k in keys])
    assert migrate(conn) == len(MIGRATIONS)
    assert sorted(conn.execute("SELECT entry_id, change_id FROM change_keys")) == [(7, 3), (8, 1)]
    logged = changes.changes_after(conn, "a", 0, 10)
    assert [c.seq for c in logged] == [1, 2, 3]
    assert [bytes(c.entries).count(b'"same"') for c in logged] == [0, 0, 2]
    assert b'"other"' in bytes(logged[0].entries) and bytes(logged[1].entries) == b"[]"
    conn.close()
