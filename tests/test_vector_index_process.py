"""A host SIGTERM'd while it builds a namespace's approximate index: it exits at once with
status 0 (the build, in a daemon thread, is abandoned, not waited for), and every write it
acknowledged is there after a restart, where the space is again served exactly while it is
promoted."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from typing import Any

import numpy as np

from host.client import MemoryClient
from host.search.client_vectors import unit_rows
from host.search.index.cache import ANN_OPTIONS_ENV
from host.store.records import NewEntry, Scope
from host.store.sqlite.store import SQLiteEntryStore

DIMS, ROWS, SPACE = 64, 40_000, "s"
# a graph of 40,000 rows this deep takes minutes on one core: far past the hang guard below
SLOW = {"connectivity": 64, "ef_construction": 8000}
HANG_GUARD = 60.0  # seconds: not a threshold, the bound on a hang


async def _fill(db: Path) -> None:
    rng = np.random.default_rng(7)
    store = SQLiteEntryStore(db)
    await store.open()
    try:
        for start in range(0, ROWS, 2000):
            vecs = unit_rows(rng.standard_normal((2000, DIMS)).tolist())
            batch = [NewEntry(tier="semantic", key=b'{"k":%d}' % (start + j), content=b'{"t":0}',
                              vectors=vecs[j: j + 1].tobytes(), vector_space=SPACE, dims=DIMS)
                     for j in range(2000)]
            assert await store.put(Scope("ns", "a1"), batch, 1.0) == [None] * 2000
    finally:
        await store.close()


async def _query(url: str, vec: list[float], limit: int = 1) -> list[Any]:
    async with await MemoryClient.connect(url) as c:
        await c.init("ns", {"agent": "a1"})
        found = await c.retrieve(vector=vec, vector_space=SPACE, limit=limit)
        return [e["key"] for e in found.entries]


async def _store(url: str, vecs: np.ndarray) -> None:
    async with await MemoryClient.connect(url) as c:
        await c.init("ns", {"agent": "a1"})
        for j, v in enumerate(vecs):
            await c.store([{"key": {"new": j}, "tier": "semantic", "content": {"t": 1},
                            "vectors": [v.tolist()], "vector_space": SPACE}])


def test_sigterm_during_a_graph_build_exits_at_once_and_keeps_every_write(
    tmp_path: Path, host_process: Any,
) -> None:
    db = tmp_path / "a2e.db"
    asyncio.run(_fill(db))
    slow = {"A2E_HOST_SEARCH_ANN_MIN_ROWS": "1000", ANN_OPTIONS_ENV: json.dumps(SLOW)}
    proc = host_process(db, env=slow)
    probe = unit_rows(np.random.default_rng(8).standard_normal((5, DIMS)).tolist())
    # the first query loads the space: served exactly at once, its graph built meanwhile
    assert len(asyncio.run(_query(proc.url, probe[0].tolist(), limit=3))) == 3
    asyncio.run(_store(proc.url, probe))  # acknowledged during the build
    assert asyncio.run(_query(proc.url, probe[4].tolist())) == [{"new": 4}]
    status = proc.stop(signal.SIGTERM, timeout=HANG_GUARD)
    assert proc.proc.stderr is not None
    log = proc.proc.stderr.read().decode()
    assert status == 0, log[-4000:]
    assert "vector indexes not all saved" not in log  # save_all did not wait for the build
    assert "Traceback" not in log
    proc = host_process(db, env=slow)
    try:
        for j, v in enumerate(probe):
            assert asyncio.run(_query(proc.url, v.tolist())) == [{"new": j}]
    finally:
        assert proc.stop(signal.SIGTERM, timeout=HANG_GUARD) == 0
