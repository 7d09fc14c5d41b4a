"""The event loop stays free while a client space grows: a catch-up that takes an exact space
past `ann_min_rows` by more than a quarter reads the space again (in the loader's thread, a
task running beside it runs meanwhile) instead of adding every row on the loop and being
promoted midway; and the writes a key takes while its graph is built reach the new graph
mostly from the build's thread, the loop adding at most `SWAP_STEP` rows between two of its
turns (replayed at once on the loop, they held every connection of the host for 23 s at
100,000 rows on PostgreSQL). The answers stay numpy's."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import numpy as np
import pytest
from support.client_vectors import (
    Model,
    check_retrieves,
    put_vectors,
    vector_config,
    vector_sessions,
)
from support.hosts import running_host

from host.search.client_vectors import space_key
from host.search.index import VectorIndexes
from host.search.index import builds as ix
from host.search.index.loading import Add
from protocol.clock import ShiftedClock

SPACE = "s"




@pytest.mark.all_backends
async def test_an_exact_space_caught_up_past_ann_min_rows_is_read_again(store_db: str) -> None:
    """A space loaded exact (100 entries) that a catch-up would take to 800, past
    `ann_min_rows` (300), is read again after the first page of the catch-up (the loader's
    thread reads it, a task running beside sees the load in progress), and its graph is built
    from the rows read; each retrieve answers as numpy does."""
    rng = np.random.default_rng(5)
    model = Model()
    async with running_host(vector_config(store_db, ann_min_rows=300)) as host, \
            vector_sessions(host, ("a1",)) as cs:
        spaces: Any = host.search.spaces
        spaces.catch_up_rows = 100
        if hasattr(host.store, "client_page_rows"):  # PostgreSQL: a load's and a read's pages
            host.store.client_page_rows = 64  # type: ignore[attr-defined]
        vectors: Any = spaces.indexes
        await put_vectors(cs["a1"], model, "a1", rng, range(100), "semantic", host.clock())
        await check_retrieves(host, cs, model, rng, queries=1)  # loaded: exact
        key = space_key("ns", SPACE)
        assert vectors.stats()["loads"] == 1 and vectors.get(key).kind == "exact"
        for first in range(100, 800, 100):
            await put_vectors(cs["a1"], model, "a1", rng, range(first, first + 100), "semantic",
                              host.clock())
        seen: list[int] = []  # `loading` at each turn of the watcher
        done = False

        async def watch() -> None:
            while not done:
                seen.append(vectors.stats()["loading"])
                await asyncio.sleep(0)

        watcher = asyncio.ensure_future(watch())
        try:
            await check_retrieves(host, cs, model, rng, queries=1)
        finally:
            done = True
            await watcher
        assert vectors.stats()["loads"] == 2  # read again, not caught up in place
        assert 1 in seen  # the loop ran while the space loaded
        await vectors.wait_idle()
        assert vectors.stats()["ann_keys"] == 1
        await check_retrieves(host, cs, model, rng, queries=2)


@pytest.mark.all_backends
async def test_plain_puts_never_make_a_space_read_again(store_db: str) -> None:
    """An approximate space (600 entries) whose namespace then takes 400 entries without
    vectors is caught up in place (they are read through, a page of the change log at a time)
    rather than read again as if it had grown by more than a quarter; 40 entries with vectors
    are caught up in place too, and 400 more read it again. The host's clock runs 120 s behind
    the wall's, so PostgreSQL's changes are past the window in which an entry may still get
    its vectors (`PENDING_SECONDS`). Each retrieve answers as numpy does."""
    rng = np.random.default_rng(9)
    model = Model()
    clock = ShiftedClock(base=lambda: time.time() - 120.0)
    async with running_host(vector_config(store_db, ann_min_rows=300), clock=clock) as host, \
            vector_sessions(host, ("a1",)) as cs:
        spaces: Any = host.search.spaces
        spaces.catch_up_rows = 50
        if hasattr(host.store, "client_page_rows"):  # PostgreSQL: a load's and a read's pages
            host.store.client_page_rows = 32  # type: ignore[attr-defined]
        vectors: Any = spaces.indexes
        await put_vectors(cs["a1"], model, "a1", rng, range(600), "semantic", host.clock())
        await check_retrieves(host, cs, model, rng, queries=1)  # loaded
        await vectors.wait_idle()
        assert vectors.stats()["ann_keys"] == 1 and vectors.stats()["loads"] == 1
        for first in range(600, 1000, 100):
            await put_vectors(cs["a1"], model, "a1", rng, range(first, first + 100), "semantic",
                              host.clock(), vectors=False)
        await check_retrieves(host, cs, model, rng, queries=2)
        assert vectors.stats()["loads"] == 1  # the space did not grow: not read again
        await put_vectors(cs["a1"], model, "a1", rng, range(1000, 1040), "semantic", host.clock())
        await check_retrieves(host, cs, model, rng, queries=2)
        assert vectors.stats()["loads"] == 1
        await put_vectors(cs["a1"], model, "a1", rng, range(1040, 1440), "semantic", host.clock())
        await check_retrieves(host, cs, model, rng, queries=2)
        assert vectors.stats()["loads"] == 2  # 400 entries with vectors: read again


class _Watched(VectorIndexes):
    """`VectorIndexes` noting, for each write applied to an index from a journal, the thread
    it ran on, the turn of the loop it ran in (`turn`, counted by a task) and its rows."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.turn = 0
        self.applied: list[tuple[bool, int, int]] = []  # (on the loop's thread, turn, rows)
        self.loop_thread = threading.current_thread()

    def apply(self, index: Any, op: Any) -> None:
        on_loop = threading.current_thread() is self.loop_thread
        self.applied.append((on_loop, self.turn, len(op.ids) if isinstance(op, Add) else 0))
        VectorIndexes.apply(self, index, op)


def _rows(rng: np.random.Generator, first: int, n: int, dim: int
          ) -> tuple[list[int], np.ndarray, list[str], list[float | None]]:
    v = rng.standard_normal((n, dim)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return list(range(first, first + n)), v, ["semantic/"] * n, [None] * n


async def test_the_writes_during_a_build_reach_the_graph_off_the_loop() -> None:
    """A key loaded exact (200 rows) and promoted once written past `ann_min_rows` (20,200
    rows) takes 3,000 more while its graph builds from its rows: they reach the new graph from the
    build's thread but for at most `SWAP_ROWS`, and the loop adds at most `SWAP_STEP` of them
    between two of its turns (a task counts the turns); the graph then holds every row, and
    searches find each row's own vector first."""
    dim = 16
    rng = np.random.default_rng(3)
    store: dict[str, list[Any]] = {"k": [_rows(rng, 0, 200, dim)]}
    vectors = _Watched(loader=lambda key: iter(store[key]), ann_min_rows=300)
    done = False

    async def count() -> None:
        while not done:
            vectors.turn += 1
            await asyncio.sleep(0)

    counter = asyncio.ensure_future(count())
    try:
        await vectors.open("k")  # loaded exact
        store["k"].append(_rows(rng, 200, 20_000, dim))
        vectors.add("k", *store["k"][1])  # past ann_min_rows: its promotion queued
        while not vectors.builds.promoting:  # the build started (its thread asks for rows)
            await asyncio.sleep(0)
        more = _rows(rng, 20_200, 3000, dim)
        vectors.add("k", *more)  # one write of 3,000 rows, journalled for the build
        assert vectors.get("k").kind == "exact"  # (the graph was not in yet)
        await vectors.wait_idle()
    finally:
        done = True
        await counter
    index: Any = vectors.get("k")
    assert index.kind == "ann" and len(index) == 23_200
    on_loop = [(turn, rows) for loop, turn, rows in vectors.applied if loop]
    assert sum(rows for _, rows in on_loop) <= ix.SWAP_ROWS
    per_turn: dict[int, int] = {}
    for turn, rows in on_loop:
        per_turn[turn] = per_turn.get(turn, 0) + rows
    assert max(per_turn.values(), default=0) <= ix.SWAP_STEP, per_turn
    assert sum(rows for loop, _, rows in vectors.applied if not loop) >= 3000 - ix.SWAP_ROWS
    ids = store["k"][0][0] + store["k"][1][0] + more[0]
    vecs = np.concatenate([store["k"][0][1], store["k"][1][1], more[1]])
    for j in rng.choice(len(ids), 20, replace=False).tolist():
        hits = index.search(vecs[j], 1)
        assert hits.ids.tolist() == [ids[j]]
