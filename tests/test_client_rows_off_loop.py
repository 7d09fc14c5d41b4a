"""A big read of client vectors leaves the event loop: on SQLite, `client_rows_of` of more than
`client_rows_on_loop` entries (a space's catch-up reads back pages of 10,000) runs in a thread
on a connection of its own and returns exactly what the loop's read returns (the entries, how
many vectors each has, the vectors, their tier and owner, their expiry); fewer (a rescoring's)
are read on the loop."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import numpy as np

from host.search.client_vectors import unit_rows
from host.store.records import NewEntry, Scope
from host.store.sqlite.extensions import CLIENT_ROWS_ON_LOOP
from host.store.sqlite.store import SQLiteEntryStore

T0 = 1_800_000_000.0
SPACE, OTHER, DIMS = "s", "t", 8
ALICE, BOB = Scope("ns", "alice"), Scope("ns", "bob")
N = 300  # entries a writer


def entries(rng: np.random.Generator, agent: int) -> list[NewEntry]:
    """One to three vectors each in `SPACE`, every fifth entry in `OTHER` instead, every
    seventh none; every third with a TTL; episodic and semantic."""
    out = []
    for i in range(N):
        vecs, space = b"", ""
        if i % 7:
            space = OTHER if i % 5 == 0 else SPACE
            vecs = unit_rows(rng.standard_normal((int(rng.integers(1, 4)), DIMS))).tobytes()
        text = f"entry {agent} {i}"
        out.append(NewEntry(tier="semantic" if i % 2 else "episodic",
                            key=json.dumps(f"{agent}-{i}").encode(),
                            content=json.dumps({"text": text}).encode(), text=text,
                            ttl=100 if i % 3 == 0 else 0, vectors=vecs, vector_space=space,
                            dims=DIMS if vecs else 0))
    return out


async def beside_a_bystander(call: Awaitable[Any]) -> tuple[list[str], Any]:
    """`call` started beside a task started after it: (which ended first, its answer). On the
    loop the read ends in its first step, before the other task; off it the other runs first."""
    order: list[str] = []
    got: list[Any] = []

    async def read() -> None:
        got.append(await call)
        order.append("read")

    async def bystander() -> None:
        order.append("bystander")

    await asyncio.gather(asyncio.create_task(read()), asyncio.create_task(bystander()))
    return order, got[0]


ON, OFF = ["read", "bystander"], ["bystander", "read"]


def plain(rows: Any) -> tuple[Any, ...]:
    ids, counts, vecs, places, expires = rows
    return ids, counts, vecs.dtype.str, vecs.shape, vecs.tobytes(), places, expires


async def test_client_rows_off_the_loop_are_the_rows_the_loop_reads(tmp_path: Path) -> None:
    """The rows of every entry two writers stored (ids of entries without vectors in the
    space, in another space, and of no entry among them), of a part of them and of none, read
    on the loop (a bound above their number) and off it (a bound of 0): the same rows; and
    each read ran where the bound sent it. With the default bound, a rescoring's few entries
    are read on the loop, a catch-up page's many off it."""
    rng = np.random.default_rng(5)
    store = SQLiteEntryStore(tmp_path / "db.sqlite")
    await store.open()
    try:
        for scope in (ALICE, BOB):
            assert await store.put(scope, entries(rng, scope is BOB), T0) == [None] * N
        _head, stored = await store.client_changes("ns", 0, 10 * N)
        assert stored is not None and len(stored) == 2 * N
        asks = [stored, stored[::-1] + [10**9, -5], stored[N // 3: N // 2], []]
        answers: dict[str, list[Any]] = {}
        for where, bound, want in (("on", 10 * N, ON), ("off", 0, OFF)):
            store.client_rows_on_loop = bound
            got = answers[where] = []
            for ids in asks:
                order, rows = await beside_a_bystander(store.client_rows_of(ids, SPACE, DIMS))
                assert order == (ON if not ids else want), (where, len(ids))
                got.append(plain(rows))
        assert answers["off"] == answers["on"]
        ids, counts, _dtype, shape, _vecs, places, expires = answers["on"][0]
        # what was asked: the entries with vectors in the space, each with its own
        assert len(ids) == 2 * sum(1 for i in range(N) if i % 7 and i % 5) and shape[1] == DIMS
        assert sum(counts) == shape[0] and set(counts) == {1, 2, 3}
        assert set(places) == {("episodic", "alice"), ("episodic", "bob"),
                                       ("semantic", "")}
        assert any(e is None for e in expires) and any(e is not None for e in expires)
        store.client_rows_on_loop = CLIENT_ROWS_ON_LOOP
        few, many = stored[:CLIENT_ROWS_ON_LOOP], stored
        assert len(many) > CLIENT_ROWS_ON_LOOP
        assert (await beside_a_bystander(store.client_rows_of(few, SPACE, DIMS)))[0] == ON
        assert (await beside_a_bystander(store.client_rows_of(many, SPACE, DIMS)))[0] == OFF
    finally:
        await store.close()
