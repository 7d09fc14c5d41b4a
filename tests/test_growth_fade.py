"""Importance that fades and reads that refresh it, over real sockets on both backends: with
`ranking.importance_half_life` an entry's score weighs in `combined` and in eviction's order
halved every half-life since it was last written or read over the wire, the `score` a reply
carries stays the stored one; a retrieve's entries count as read (their read times written in
batches); with no half-life (the default) ranking is as before."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, closing
from pathlib import Path
from typing import Any

import pytest
from support.growth import growing
from support.http import get, metric_value

from host.app import Host
from host.client import MemoryClient
from host.store.growth import ReadLog
from host.store.records import NewEntry, Scope, StoredEntry
from host.store.sqlite import evict
from host.store.sqlite.schema import connect
from host.store.sqlite.store import SQLiteEntryStore
from protocol.clock import ShiftedClock

pytestmark = pytest.mark.all_backends  # tests taking `store_db` run on SQLite and PostgreSQL

HALF_LIFE = 100.0


def entry(k: int, score: float, content: str = "the garden tomatoes") -> dict[str, Any]:
    """An episodic entry with key {"k": k}."""
    return {"key": {"k": k}, "content": content, "tier": "episodic", "score": score}


def fading(db: str, half_life: float = HALF_LIFE, **limits: Any
           ) -> AbstractAsyncContextManager[tuple[Host, ShiftedClock, Callable[..., Any]]]:
    """`support.growth.growing` with importance fading at `half_life` (0: off): a host on a
    clock the test moves, and a factory of clients with a session open on it."""
    limits.setdefault("on_full", "refuse")
    return growing(db, {"importance_half_life": half_life} if half_life else None, **limits)


async def combined(c: MemoryClient, query: str = "garden tomatoes") -> dict[int, tuple[float, float]]:
    """(combined, score) of each match of `query`, by k."""
    reply = await c.retrieve(query=query, limit=10)
    return {e["key"]["k"]: (e["combined"], e["score"]) for e in reply.entries}


async def read_keys(host: Host, c: MemoryClient, *ks: int) -> None:
    """Read the entries of `ks` over the wire and let the host write their read times."""
    assert len((await c.retrieve(keys=[{"k": k} for k in ks])).entries) == len(ks)
    await host.memory.reads.flush()


async def test_importance_fades_with_the_half_life_in_combined_and_score_stays(
    store_db: str,
) -> None:
    """Two half-lives after its write an entry's importance term is a quarter of its score:
    `combined` drops by 0.2 * 3/4 * score against a just-written twin, and `score` stays."""
    async with fading(store_db) as (_host, clock, session):
        c = await session()
        await c.store([entry(1, 0.8)])
        clock.advance(2 * HALF_LIFE)
        await c.store([entry(2, 0.8)])
        got = await combined(c)
        assert got[1][1] == got[2][1] == 0.8
        # the importance weight is 0.2 of a total of 1.0; recency (0.1) fades on its own
        # half-life (a week): its share of the difference is below 1e-4 here
        assert got[2][0] - got[1][0] == pytest.approx(0.2 * 0.8 * 0.75, abs=1e-3)
        assert list((await c.retrieve(query="garden tomatoes")).entries)[0]["key"] == {"k": 2}


async def test_a_read_over_the_wire_restores_an_entrys_importance(store_db: str) -> None:
    """An entry read over the wire weighs its full score again: the older, less important
    entry read now outranks one written after it but not read since (0.6 against 0.9 / 8;
    unread it would weigh 0.6 / 16 and rank second)."""
    async with fading(store_db) as (host, clock, session):
        c = await session()
        await c.store([entry(1, 0.6)])
        clock.advance(HALF_LIFE)
        await c.store([entry(2, 0.9)])
        clock.advance(3 * HALF_LIFE)
        await read_keys(host, c, 1)
        got = await combined(c)
        assert got[1][0] - got[2][0] == pytest.approx(0.2 * (0.6 - 0.9 / 8), abs=1e-3)
        assert (got[1][1], got[2][1]) == (0.6, 0.9)


async def test_without_a_half_life_combined_weighs_the_stored_score(store_db: str) -> None:
    """With no half-life (the default) an old entry's importance term is its score: two
    entries of one score and content differ in `combined` only by recency."""
    async with fading(store_db, half_life=0) as (host, clock, session):
        c = await session()
        await c.store([entry(1, 0.8)])
        clock.advance(2 * HALF_LIFE)
        await c.store([entry(2, 0.8)])
        await read_keys(host, c, 1)
        got = await combined(c)
        assert got[2][0] - got[1][0] == pytest.approx(0.0, abs=1e-3)


async def test_a_faded_entry_is_evicted_before_a_less_important_recent_one(
    store_db: str,
) -> None:
    """Under a quota with a half-life, an important entry unread for ten half-lives (0.9 /
    1024) is worth less than a recent one of score 0.5, and goes first; without a half-life
    the lower score goes."""
    for half_life, gone in ((HALF_LIFE, 1), (0.0, 2)):
        async with fading(store_db, half_life, max_entries_per_agent=2, on_full="evict") as (
                host, clock, session):
            c = await session(ns=f"ns{half_life}")
            await c.store([entry(1, 0.9)])
            clock.advance(10 * HALF_LIFE)
            await c.store([entry(2, 0.5)])
            clock.advance(1)
            assert (await c.store([entry(3, 0.5)])).evicted == 1
            left = {e["key"]["k"] for e in (await c.retrieve(limit=10)).entries}
            assert left == {1, 2, 3} - {gone}, half_life


async def test_a_read_keeps_an_entry_from_eviction(store_db: str) -> None:
    """Among entries of one score, the one read over the wire since is not the longest
    unused any more: the next oldest goes (with or without a half-life)."""
    for half_life in (0.0, HALF_LIFE):
        async with fading(store_db, half_life, max_entries_per_agent=3, on_full="evict") as (
                host, clock, session):
            c = await session(ns=f"ns{half_life}")
            for k in (1, 2, 3):
                await c.store([entry(k, 0.5)])
                clock.advance(1)
            await read_keys(host, c, 1)
            clock.advance(1)
            assert (await c.store([entry(4, 0.5)])).evicted == 1
            left = {e["key"]["k"] for e in (await c.retrieve(limit=10)).entries}
            assert left == {1, 3, 4}, half_life


async def test_a_faded_entry_read_again_survives_eviction(store_db: str) -> None:
    """With a half-life, reading the faded important entry gives it back its weight: the
    recent, less important one goes instead."""
    async with fading(store_db, max_entries_per_agent=2, on_full="evict") as (
            host, clock, session):
        c = await session()
        await c.store([entry(1, 0.9)])
        clock.advance(10 * HALF_LIFE)
        await c.store([entry(2, 0.5)])
        clock.advance(1)
        await read_keys(host, c, 1)
        clock.advance(1)
        assert (await c.store([entry(3, 0.5)])).evicted == 1
        left = {e["key"]["k"] for e in (await c.retrieve(limit=10)).entries}
        assert left == {1, 3}


async def test_faded_order_is_the_same_merged_by_score_and_sorted_by_scan(
    tmp_path: Path,
) -> None:
    """SQLite reads eviction's faded order by merging one index cursor a score (few distinct
    scores) or by sorting a scan (many): both give log2(score) + last use / half-life, then row,
    then last use, then row, as computed here from the rows, reads over the wire included."""
    path = tmp_path / "a.db"
    rng = random.Random(5)
    async with SQLiteEntryStore(path) as store:
        scope = Scope("ns", "a1")
        for k in range(300):
            entry = NewEntry(tier=rng.choice(("episodic", "semantic")), key=b'{"k":%d}' % k,
                             content=b'"x"', score=rng.choice((0.0, 0.2, 0.5, 0.9, 1.0)))
            await store.put(scope, [entry], 1000.0 + rng.random() * 1e6)
        await store.put(Scope("ns", "a2"), [NewEntry(tier="episodic", key=b'{"k":1}',
                                                     content=b'"x"')], 5.0)
        reads = [("ns", "episodic", "a1", b'{"k":%d}' % k, 2e6 + k) for k in range(0, 300, 7)]
        await store.record_reads(reads)
    with closing(connect(str(path))) as conn:
        rows = conn.execute("SELECT id, score, max(updated_at, coalesce(read_at, 0))"
                            " FROM entries WHERE namespace = 'ns' AND agent = 'a1'").fetchall()
        expected = [i for i, *_ in sorted(rows, key=lambda r: (
            math.log2(r[1]) + r[2] / HALF_LIFE if r[1] > 0 else -math.inf, r[2], r[0]))]
        merged = [i for i, _ in evict._by_faded(conn, "ns", "a1", "[]", HALF_LIFE)]
        scanned = [i for i, _ in evict._by_faded(conn, "ns", "a1", "[]", HALF_LIFE, 0)]
    assert merged == expected
    assert scanned == expected
    assert len(expected) == 300


async def test_among_many_distinct_scores_the_lowest_faded_value_is_evicted(
    store_db: str,
) -> None:
    """With more distinct scores than the merge reads (70), eviction still removes the entry
    of the lowest faded value: here the oldest of the high scores, not the lowest score."""
    async with fading(store_db, max_entries_per_agent=70, on_full="evict") as (
            _host, clock, session):
        c = await session()
        # k = 0 (score 1.0) is written first: ten half-lives before the rest, it is worth
        # 1.0 / 1024 when the rest (scores 0.30 to 0.99) are worth nearly their score
        for k in range(70):
            await c.store([entry(k, 1.0 if k == 0 else 0.30 + k / 100)])
            clock.advance(10 * HALF_LIFE if k == 0 else 1)
        assert (await c.store([entry(70, 0.5)])).evicted == 1
        left = {e["key"]["k"] for e in (await c.retrieve(limit=100)).entries}
        assert left == set(range(1, 71))


async def test_the_read_log_holds_at_most_its_bytes_and_counts_what_it_drops(
    tmp_path: Path,
) -> None:
    """Reads of entries with large keys fill the log's byte bound: the reads past it are
    dropped and counted, the log never holds more than its bound, and a flush takes it all
    (the reads it kept are written, nothing else)."""
    async with SQLiteEntryStore(tmp_path / "a.db") as store:
        keys = [b'{"k":"%s"}' % (b"x" * 1000 + b"%d" % i) for i in range(10)]
        await store.put(Scope("ns", "a1"), [NewEntry(tier="episodic", key=k, content=b'"x"')
                                            for k in keys], 1.0)
        log = ReadLog(store, interval=3600, max_bytes=4000)
        log.note("ns", [StoredEntry("episodic", "a1", k, b'"x"', [], "", 1.0, 0, 1.0, 1.0)
                        for k in keys], 50.0)
        assert log.dropped == 7  # each 1,011 bytes: 3 fit in 4,000
        assert log.bytes <= 4000
        await log.flush()
        assert log.bytes == 0
        with closing(connect(str(tmp_path / "a.db"))) as conn:
            read = conn.execute("SELECT count(*) FROM entries WHERE read_at = 50.0").fetchone()[0]
        assert read == 3
        await log.close()


async def test_metrics_count_the_reads_the_read_log_dropped(db_path: Path) -> None:
    """The reads a host's read log drops at its bound are counted in /metrics
    (`a2e_read_times_dropped_total`, 0 before): one note of 5 entries past `max_pending`."""
    async with fading(str(db_path)) as (host, _clock, _session):
        text = (await get(host.port, "/metrics"))[2]
        assert "a2e_read_times_dropped_total 0.0" in text.splitlines()
        log = host.memory.reads
        log.note("ns", [StoredEntry("episodic", "a1", b'{"k":%d}' % i, b'"x"', [], "", 1.0, 0,
                                    1.0, 1.0) for i in range(log.max_pending + 5)], 50.0)
        text = (await get(host.port, "/metrics"))[2]
        assert metric_value(text, "a2e_read_times_dropped_total") == 5


async def test_reads_are_noted_only_while_a_setting_uses_them(store_db: str) -> None:
    """With no half-life and `on_full` "refuse" (the defaults) a read notes nothing and writes
    no read time (it would cost every read for nothing); once a reload sets "evict", reads are
    noted and written again."""
    async with fading(store_db, half_life=0.0) as (host, clock, session):
        c = await session()
        await c.store([entry(1, 0.5), entry(2, 0.5)])
        await read_keys(host, c, 1)
        assert host.memory.reads.bytes == 0
        ids = list(range(1, 1000))  # the row ids of this fresh store's two entries among them
        assert await host.store.read_times(ids) == {}  # type: ignore[attr-defined]
        new = host.config.model_copy(deep=True)
        new.limits.on_full = "evict"
        host.reload(new)
        assert len((await c.retrieve(keys=[{"k": 1}])).entries) == 1
        assert host.memory.reads.bytes > 0
        await host.memory.reads.flush()
        times = await host.store.read_times(ids)  # type: ignore[attr-defined]
        assert len(times) == 1  # the entry read since
