"""The embedding worker on PostgreSQL (`SharedWorker`, host/search/worker.py): it claims a
window of queued entries, leased, embeds it sorted by length in short calls as SQLite's
worker does, and writes the vectors a batch at a time. Every stored vector is the one the
embedder gives its text alone; two hosts on one database embed each entry once; a host
stopped mid-window leaves the rest to be claimed after its lease; a window that outlasts half
its lease starts no other call and releases the rest at once."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import numpy as np

from host.config import Config
from host.search.embed_calls import WINDOW
from host.search.worker import _LEASE_USED, SharedWorker
from host.store.postgres.store import PostgresEntryStore
from host.store.records import NewEntry, Scope


def _hash8(texts: list[str]) -> np.ndarray:
    """Unit vectors of 8 dimensions seeded by each text."""
    m = np.asarray([np.random.default_rng(list(t.encode())).standard_normal(8)
                    for t in texts], dtype=np.float32).reshape(-1, 8)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


class _Recorded:
    """Hash vectors on one thread; records every call's texts. The first call waits at
    `barrier` when given (at most 10 s); the calls after the first `free` ones wait for
    `gate` (at most 10 s, then they fail), `held` set while one does."""

    name = "recorded-8"
    dim = 8
    parallel = False

    def __init__(self, barrier: threading.Barrier | None = None, free: int | None = None
                 ) -> None:
        self.barrier = barrier
        self.free = free
        self.gate = threading.Event()
        self.held = threading.Event()
        self.calls: list[list[str]] = []

    def embed(self, texts: list[str]) -> np.ndarray:
        self.calls.append(list(texts))
        if self.barrier is not None and len(self.calls) == 1:
            self.barrier.wait(timeout=10)
        if self.free is not None and len(self.calls) > self.free:
            self.held.set()
            if not self.gate.wait(timeout=10):
                raise RuntimeError("the gate stayed shut for 10 s")
        return _hash8(texts)


async def _put(store: PostgresEntryStore, contents: list[str]) -> list[int]:
    """Store `contents` as semantic entries of one namespace; their ids, in that order."""
    await store.put(Scope("ns", "a1"), [
        NewEntry(tier="semantic", key=b'{"k":%d}' % i, content=f'"{c}"'.encode())
        for i, c in enumerate(contents)], time.time())
    rows = await store.pool.fetch("SELECT id, key FROM a2e_entries ORDER BY id")
    return [int(r[0]) for r in rows]


async def _worker(store: PostgresEntryStore, embedder: Any, **search: Any) -> SharedWorker:
    await store.set_vector_model(embedder.name, embedder.dim)
    return SharedWorker(store, embedder, Config().search.model_copy(update=search))


async def _embedded(store: PostgresEntryStore) -> set[int]:
    return {int(r[0]) for r in await store.pool.fetch("SELECT entry_id FROM a2e_vectors")}


async def _held(store: PostgresEntryStore) -> int:
    """Queued entries claimed and not released (their lease running or lapsed)."""
    return int(await store.pool.fetchval(
        "SELECT count(*) FROM a2e_embed_queue WHERE claimed_until > 0"))


async def test_a_window_in_short_sorted_calls_gives_each_text_its_own_vector(
    pg_stores: list[PostgresEntryStore], embedder: Any,
) -> None:
    """150 texts of 1 to 150 words, claimed in windows of 64 (batches of 4), embedded sorted
    by length in calls of at most 600 characters on two threads and written 4 at a time: every
    stored vector is the one the embedder gives the text alone."""
    store, _ = pg_stores
    words = "the lease on the flat by the river ends in September when Mel moves".split()
    await _put(store, [" ".join(words[(i + j) % len(words)] for j in range(1 + (i * 37) % 150))
                       + f" {i}" for i in range(150)])
    texts = {p.id: p.text for p, _seq in await store.claim_vectors(1000, 0.0)}
    worker = await _worker(store, embedder, batch_size=4, embed_call_chars=600)
    assert await worker.drain() == 150
    assert await store.vector_queue() == 0 and worker.embedded_total == 150
    ids, vecs = await store.vectors_of(list(texts), embedder.dim)
    assert sorted(ids) == sorted(texts)
    alone = np.vstack([embedder.embed([texts[i][:worker.cfg.max_embed_chars]]) for i in ids])
    np.testing.assert_allclose(vecs, alone, atol=1e-6)


async def test_the_worker_claims_a_window_not_a_batch(pg_stores: list[PostgresEntryStore]) -> None:
    """Of 100 queued entries, each shorter than the one before, the worker's first call holds
    the shortest of the first window (`WINDOW` batches of 4, oldest first): a worker claiming a
    batch at a time would start with the shortest of the first four."""
    store, _ = pg_stores
    ids = await _put(store, ["x" * (200 - i) for i in range(100)])
    emb = _Recorded()
    worker = await _worker(store, emb, batch_size=4, embed_call_chars=400)
    assert await worker.drain() == 100
    window = 4 * WINDOW
    assert emb.calls[0][0].startswith("x" * (200 - window + 1) + "\n")
    assert sum(map(len, emb.calls)) == 100 and await _embedded(store) == set(ids)


async def test_two_hosts_on_one_database_embed_each_entry_once(
    pg_stores: list[PostgresEntryStore],
) -> None:
    """Two hosts' workers drain one queue of 150 entries at once, each having claimed its
    window before either embeds: every entry is embedded by one of them, once."""
    a, b = pg_stores
    ids = await _put(a, [f"note number {i}" for i in range(150)])
    barrier = threading.Barrier(2)
    embs = [_Recorded(barrier), _Recorded(barrier)]
    workers = [await _worker(s, e, batch_size=4, embed_call_chars=200)
               for s, e in zip(pg_stores, embs, strict=True)]
    done = await asyncio.gather(*(w.drain() for w in workers))
    embedded = [t for e in embs for call in e.calls for t in call]
    assert len(embedded) == len(set(embedded)) == 150
    assert all(done) and sum(done) == 150
    assert await _embedded(b) == set(ids) and await a.vector_queue() == 0


async def test_a_stop_mid_window_leaves_the_rest_claimable_after_the_lease(
    pg_stores: list[PostgresEntryStore],
) -> None:
    """A host stopped while its window of 40 entries is half embedded keeps the vectors it
    wrote; the rest stay claimed (another host gets none of them) until the lease ends, then
    another host claims exactly them."""
    a, b = pg_stores
    ids = await _put(a, [f"bulk {i:02d}" for i in range(40)])
    emb = _Recorded(free=6)
    worker = await _worker(a, emb, batch_size=4, embed_call_chars=8, embed_lease=5.0)
    worker.start()
    task = worker._task
    assert task is not None
    # the 7th call waits for the gate (the first four vectors were written as the 5th began)
    assert await asyncio.to_thread(emb.held.wait, 10)
    stopping = asyncio.ensure_future(worker.stop())
    while not task.done():
        await asyncio.sleep(0.01)
    emb.gate.set()  # the native call returns; its result is dropped
    await stopping
    written = await _embedded(a)
    assert 0 < len(written) < 40
    assert await _held(a) == 40 - len(written)  # A's claims of the rest were not released
    claimed: list[int] = []
    for _ in range(300):
        claimed = [p.id for p, _seq in await b.claim_vectors(100, 60.0)]
        if claimed:
            break
        await asyncio.sleep(0.1)
    assert sorted(claimed) == sorted(set(ids) - written)
    assert await a.vector_queue() == 40 - len(written)


async def test_a_window_past_half_its_lease_releases_the_calls_not_started(
    pg_stores: list[PostgresEntryStore],
) -> None:
    """A window whose first call returns after half its lease (4 s) has passed starts no other
    call: that call's vector is written and the other claims released (not left to lapse), so
    another host claims them at once."""
    a, b = pg_stores
    ids = await _put(a, [f"slow {i:02d}" for i in range(20)])
    emb = _Recorded(free=0)
    worker = await _worker(a, emb, batch_size=4, embed_call_chars=8, embed_lease=4.0)
    window = asyncio.ensure_future(worker.embed_pending())
    assert await asyncio.to_thread(emb.held.wait, 10)
    await asyncio.sleep(4.0 * _LEASE_USED + 0.2)
    emb.gate.set()
    assert (await window)[0] == 1 and len(emb.calls) == 1
    written = await _embedded(a)
    assert len(written) == 1 and await _held(a) == 0  # released, not left to lapse
    claimed = [p.id for p, _seq in await b.claim_vectors(100, 60.0)]
    assert sorted(claimed) == sorted(set(ids) - written)
