"""The group-commit writer: operations share a transaction, and one that raises rolls back alone."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

import pytest

from host.store.sqlite_schema import connect
from host.store.writer import Writer


def _writer(db: Path, observed: list[int]) -> Writer:
    conn = connect(str(db))
    conn.execute("CREATE TABLE IF NOT EXISTS t (v INTEGER PRIMARY KEY)")
    conn.close()
    w = Writer(lambda: connect(str(db)), observer=lambda n, _s: observed.append(n))
    w.start()
    return w


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
