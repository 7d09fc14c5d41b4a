"""The group-commit writer: operations share a transaction, one that raises rolls back alone,
and writes held for the end of the group land as the operations' order says."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

import pytest

from host.store.records import NewEntry, Query, Quotas, Scope
from host.store.sqlite import keyword, writes
from host.store.sqlite.deferred import Deferred
from host.store.sqlite.schema import connect, migrate
from host.store.sqlite.writer import Writer
from host.text.keyword import query_terms


def _started(db: Path, observed: list[int], held: Deferred | None = None) -> Writer:
    """A started writer on `db` that appends each group's size to `observed`."""
    w = Writer(lambda: connect(str(db)), observer=lambda n, _s: observed.append(n), held=held)
    w.start()
    return w


def _writer(db: Path, observed: list[int]) -> Writer:
    conn = connect(str(db))
    conn.execute("CREATE TABLE IF NOT EXISTS t (v INTEGER PRIMARY KEY)")
    conn.close()
    return _started(db, observed)


def _insert(conn: sqlite3.Connection, v: int) -> int:
    conn.execute("INSERT INTO t (v) VALUES (?)", (v,))
    return v


def _insert_then_fail(conn: sqlite3.Connection, v: int) -> None:
    conn.execute("INSERT INTO t (v) VALUES (?)", (v,))
    raise ValueError("refused")


def _values(db: Path) -> list[int]:
    with sqlite3.connect(db) as c:
        return [r[0] for r in c.execute("SELECT v FROM t ORDER BY v")]


async def test_failed_operation_rolls_back_alone_in_a_group(db_path: Path) -> None:
    """In one group, the writes of an operation that raised are undone and the others commit."""
    observed: list[int] = []
    w = _writer(db_path, observed)
    gate = threading.Event()
    try:
        first = w.submit(lambda conn: gate.wait(10))  # holds the writer while the group queues
        futs = [w.submit(_insert, 1), w.submit(_insert_then_fail, 2), w.submit(_insert, 3)]
        gate.set()
        await first
        done = await asyncio.gather(*futs, return_exceptions=True)
    finally:
        w.stop()
    assert done[0] == 1 and done[2] == 3
    assert isinstance(done[1], ValueError)
    assert _values(db_path) == [1, 3]
    assert max(observed) >= 3  # the three operations were one group


async def test_lone_failing_operation_raises_and_writes_nothing(db_path: Path) -> None:
    """An operation alone in its group that raises leaves no write behind."""
    w = _writer(db_path, [])
    try:
        with pytest.raises(ValueError):
            await w.submit(_insert_then_fail, 5)
        assert await w.submit(_insert, 6) == 6
    finally:
        w.stop()
    assert _values(db_path) == [6]


# -- keyword rows held for the end of the group (sqlite.deferred.Deferred) -----------------------

_SCOPE = Scope("ns", "a1")


def _entry(key: int, text: str) -> NewEntry:
    return NewEntry(tier="episodic", key=b'{"k":%d}' % key, content=b'"%s"' % text.encode(),
                    tags=["t"])


def _store_writer(db: Path, observed: list[int]) -> tuple[Writer, Deferred]:
    conn = connect(str(db))
    migrate(conn)
    conn.close()
    held = Deferred()
    return _started(db, observed, held), held


def _found(db: Path, words: str) -> list[bytes]:
    conn = connect(str(db))
    try:
        q = Query(tiers=("episodic",), limit=50)
        hits = keyword.search_entries(conn, _SCOPE, q, query_terms(words), 10.0, 50)
        # every keyword row belongs to a live entry, one row an entry
        orphans = conn.execute("SELECT count(*) FROM entries_fts f"
                               " LEFT JOIN entries e ON e.id = f.rowid WHERE e.id IS NULL")
        assert orphans.fetchone()[0] == 0
        n_fts = conn.execute("SELECT count(*) FROM entries_fts").fetchone()[0]
        assert n_fts == conn.execute("SELECT count(*) FROM entries").fetchone()[0]
    finally:
        conn.close()
    return sorted(h.key for h in hits)


def _put_then_fail(conn: sqlite3.Connection, held: Deferred) -> None:
    writes.put_entries(conn, _SCOPE, [_entry(9, "doomed walrus")], 1.0, Quotas(), held)
    raise ValueError("refused")


async def test_group_indexes_puts_updates_and_forgets_in_order(db_path: Path) -> None:
    """Within one group, keys stored, overwritten and forgotten (some committed before, some
    new) leave the keyword index as the operations' order says: the last text searchable, a
    forgotten entry not found, one keyword row a live entry."""
    observed: list[int] = []
    w, held = _store_writer(db_path, observed)
    gate = threading.Event()
    q = Quotas()
    try:
        await w.submit(writes.put_entries, _SCOPE, [_entry(1, "amber falcon"),
                                                 _entry(2, "cobalt otter")], 1.0, q, held)
        first = w.submit(lambda conn: gate.wait(10))
        futs = [
            w.submit(writes.put_entries, _SCOPE, [_entry(3, "amber lynx"), _entry(4, "cobalt lynx"),
                                               _entry(5, "violet lynx")], 2.0, q, held),
            w.submit(writes.put_entries, _SCOPE, [_entry(1, "crimson heron")], 2.0, q, held),
            w.submit(writes.put_entries, _SCOPE, [_entry(3, "crimson owl")], 2.0, q, held),
            w.submit(writes.forget_entries, _SCOPE, ["episodic"], [b'{"k":2}', b'{"k":4}'], [], 2.0),
        ]
        gate.set()
        await first
        await asyncio.gather(*futs)
    finally:
        w.stop()
    assert max(observed) >= 4  # one group
    assert _found(db_path, "amber") == []
    assert _found(db_path, "crimson") == [b'{"k":1}', b'{"k":3}']
    assert _found(db_path, "cobalt") == []
    assert _found(db_path, "lynx") == [b'{"k":5}']


async def test_failed_operation_drops_its_held_keyword_rows(db_path: Path) -> None:
    """An operation that raises after holding keyword rows (an overwrite of a committed entry)
    rolls back alone: the entry keeps its indexed text, the other operations' rows are indexed."""
    observed: list[int] = []
    w, held = _store_writer(db_path, observed)
    gate = threading.Event()
    q = Quotas()
    try:
        await w.submit(writes.put_entries, _SCOPE, [_entry(9, "steady walrus")], 1.0, q, held)
        first = w.submit(lambda conn: gate.wait(10))
        ok1 = w.submit(writes.put_entries, _SCOPE, [_entry(1, "amber walrus")], 1.0, q, held)
        bad = w.submit(_put_then_fail, held)
        ok2 = w.submit(writes.put_entries, _SCOPE, [_entry(2, "cobalt walrus")], 1.0, q, held)
        gate.set()
        await first
        done = await asyncio.gather(ok1, bad, ok2, return_exceptions=True)
    finally:
        w.stop()
    assert max(observed) >= 3
    assert isinstance(done[1], ValueError)
    assert _found(db_path, "walrus") == [b'{"k":1}', b'{"k":2}', b'{"k":9}']
    assert _found(db_path, "steady") == [b'{"k":9}']
    assert _found(db_path, "doomed") == []


def _usage_matches_entries(db: Path) -> dict[tuple[str, str], tuple[int, int]]:
    """The usage rows (those not zero), checked equal to counts computed from the entries."""
    conn = connect(str(db))
    try:
        usage = {(r[0], r[1]): (r[2], r[3]) for r in conn.execute(
            "SELECT namespace, agent, entries, bytes FROM usage WHERE entries <> 0 OR bytes <> 0")}
        actual = {(r[0], r[1]): (r[2], r[3]) for r in conn.execute(
            "SELECT namespace, agent, count(*), sum(size) FROM entries GROUP BY 1, 2"
            " UNION ALL SELECT namespace, '', count(*), sum(size) FROM entries GROUP BY 1")}
    finally:
        conn.close()
    assert usage == actual
    return usage


async def _one_group(w: Writer, calls: list[tuple]) -> list[object]:
    """Run `calls` ((fn, *args) each) as one commit group; their results or errors."""
    gate = threading.Event()
    first = w.submit(lambda conn: gate.wait(10))
    futs = [w.submit(*c) for c in calls]
    gate.set()
    await first
    return await asyncio.gather(*futs, return_exceptions=True)


async def test_quota_is_exact_within_a_group(db_path: Path) -> None:
    """Puts of one group see each other's entries against the quota, and a forget earlier in
    the group frees its room for the puts after it."""
    observed: list[int] = []
    w, held = _store_writer(db_path, observed)
    q = Quotas(max_entries_per_namespace=100, max_entries_per_agent=2)
    a = _SCOPE

    def put(k: int) -> tuple:
        return (writes.put_entries, a, [_entry(k, "x")], 1.0, q, held)

    try:
        done = await _one_group(w, [
            put(1), put(2), put(3),
            (writes.forget_entries, a, ["episodic"], [b'{"k":1}'], [], 1.0),
            put(4), put(5), put(2),  # the last one overwrites: no new entry
        ])
    finally:
        w.stop()
    assert max(observed) >= 7
    assert done == [[None], [None], ["memory_full"], 1, [None], ["memory_full"], [None]]
    assert _usage_matches_entries(db_path)[("ns", "a1")][0] == 2


async def test_usage_counts_match_the_entries_after_mixed_groups(db_path: Path) -> None:
    """After groups mixing new entries, overwrites by another writer, expired keys replaced,
    a full namespace collecting its expired rows, forgets and an operation that failed, the
    usage rows equal the counts and sizes computed from the entries."""
    w, held = _store_writer(db_path, [])
    q = Quotas(max_entries_per_namespace=6, max_entries_per_agent=100)
    a, b = Scope("ns", "a1"), Scope("ns", "b2")

    def put(scope: Scope, k: int, text: str, tier: str = "episodic", ttl: int = 0,
            now: float = 1.0) -> tuple:
        e = NewEntry(tier=tier, key=b'{"k":%d}' % k, content=b'"%s"' % text.encode(), ttl=ttl)
        return (writes.put_entries, scope, [e], now, q, held)

    try:
        await _one_group(w, [
            put(a, 1, "one"), put(a, 2, "two", ttl=5), put(a, 3, "shared", tier="semantic"),
            put(b, 4, "four", ttl=5), put(a, 1, "one again, longer"),
            put(b, 3, "shared, now bob's", tier="semantic"), (_put_then_fail, held),
        ])
        _usage_matches_entries(db_path)
        done = await _one_group(w, [
            put(a, 2, "two, renewed after expiry", now=10.0),  # the expired key: a new entry
            put(b, 5, "five", now=10.0), put(b, 6, "six", now=10.0),
            put(b, 7, "seven: the namespace is full, b's expired entry makes room", now=10.0),
            (writes.forget_entries, a, ["semantic"], [b'{"k":3}'], [], 10.0),
            put(a, 8, "eight", now=10.0),
        ])
    finally:
        w.stop()
    assert done == [[None], [None], [None], [None], 1, [None]]
    usage = _usage_matches_entries(db_path)
    assert usage[("ns", "")][0] == 6 and ("ns", "b2") in usage


async def test_quota_after_an_expired_key_is_replaced_in_the_group(db_path: Path) -> None:
    """A put that replaces an expired key (a delete, then a new entry) leaves the next put of
    the group counting the right number of entries against the quota."""
    w, held = _store_writer(db_path, [])
    q = Quotas(max_entries_per_namespace=100, max_entries_per_agent=3)

    def put(k: int, ttl: int, now: float) -> tuple:
        e = NewEntry(tier="episodic", key=b'{"k":%d}' % k, content=b'"x"', ttl=ttl)
        return (writes.put_entries, _SCOPE, [e], now, q, held)

    try:
        assert await _one_group(w, [put(1, 5, 1.0), put(2, 0, 1.0)]) == [[None], [None]]
        assert await _one_group(w, [put(1, 0, 10.0), put(3, 0, 10.0), put(4, 0, 10.0)]) == [
            [None], [None], ["memory_full"]]
    finally:
        w.stop()
    assert _usage_matches_entries(db_path)[("ns", "a1")][0] == 3
