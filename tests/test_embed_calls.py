"""The background worker's calls of the embedder (host/search/embed_calls.py): a window of
queued texts sorted by length and cut into short calls gives every entry the vector the
embedder gives its text alone; a query waiting for another namespace stops the window after
the call running; the second thread never waits for the first one's call to return."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from host.config import Config
from host.search.index import VectorIndexes
from host.search.worker import LocalWorker
from host.store.records import NewEntry, Scope
from host.store.sqlite.store import SQLiteEntryStore


def _hash8(texts: list[str]) -> np.ndarray:
    """Unit vectors of 8 dimensions seeded by each text."""
    m = np.asarray([np.random.default_rng(list(t.encode())).standard_normal(8)
                    for t in texts], dtype=np.float32).reshape(-1, 8)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


class _Gated:
    """Hash vectors; a call holding a text with "bulk" in it first takes a permit of `permits`
    (waiting at most 10 s, then it fails)."""

    name = "gated-8"
    dim = 8
    parallel = False

    def __init__(self) -> None:
        self.permits = threading.Semaphore(0)
        self.started = threading.Event()  # a bulk call began

    def embed(self, texts: list[str]) -> np.ndarray:
        if any("bulk" in t for t in texts):
            self.started.set()
            if not self.permits.acquire(timeout=10):
                raise RuntimeError("no permit within 10 s")
        return _hash8(texts)


class _SlowFirst:
    """Hash vectors on two threads at once; the call holding the entry "a" returns only once
    `others` calls without it have returned (waiting at most 10 s, then it fails): a worker
    whose second thread waited for the first one's call would never get there."""

    name = "slow-first-8"
    dim = 8
    parallel = True

    def __init__(self, others: int) -> None:
        self.others = others
        self.done = 0
        self.cond = threading.Condition()
        self.threads: list[str] = []

    def embed(self, texts: list[str]) -> np.ndarray:
        self.threads.append(threading.current_thread().name)
        if any(t.startswith("a\n") for t in texts):  # the entry whose content is "a"
            with self.cond:
                if not self.cond.wait_for(lambda: self.done >= self.others, timeout=10):
                    raise RuntimeError("the other thread did not go on")
        else:
            with self.cond:
                self.done += 1
                self.cond.notify_all()
        return _hash8(texts)


async def _store(store: SQLiteEntryStore, ns: str, contents: list[str]) -> None:
    await store.put(Scope(ns, "a1"), [
        NewEntry(tier="semantic", key=b'{"k":%d}' % i, content=f'"{c}"'.encode())
        for i, c in enumerate(contents)], time.time())


async def _worker(path: Path, embedder: Any, **search: Any) -> tuple[SQLiteEntryStore,
                                                                     LocalWorker]:
    store = SQLiteEntryStore(str(path))
    await store.open()
    cfg = Config().search.model_copy(update=search)
    worker = LocalWorker(store, embedder, cfg, VectorIndexes())
    await store.set_vector_model(embedder.name, embedder.dim)
    worker.load()
    return store, worker


async def test_a_window_in_short_sorted_calls_gives_each_text_its_own_vector(
    tmp_path: Path, embedder: Any,
) -> None:
    """150 texts of 1 to 150 words, embedded by the worker in windows of 64 sorted by length,
    in calls of at most 600 characters on two threads, written 4 at a time: every stored (and
    indexed) vector is the one the embedder gives the text alone."""
    words = "the lease on the flat by the river ends in September when Mel moves".split()
    contents = [" ".join(words[(i + j) % len(words)] for j in range(1 + (i * 37) % 150))
                + f" {i}" for i in range(150)]
    store, worker = await _worker(tmp_path / "w.db", embedder, batch_size=4,
                                  embed_call_chars=600)
    try:
        await _store(store, "ns", contents)
        texts = {p.id: p.text for p, _d in await store.pending_vectors(1000)}
        assert len(texts) == 150
        assert await worker.drain() == 150
        ids, vecs = await store.vectors_of(list(texts), embedder.dim)
        assert sorted(ids) == sorted(texts)
        alone = np.vstack([embedder.embed([texts[i][:worker.cfg.max_embed_chars]])
                           for i in ids])
        np.testing.assert_allclose(vecs, alone, atol=1e-6)
        index = worker.index.get("ns")
        assert index is not None and len(index) == 150
        assert worker.embedded_total == 150
    finally:
        await store.close()


async def test_a_query_waiting_for_another_namespace_stops_the_window_after_its_call(
    tmp_path: Path,
) -> None:
    """While the worker embeds a window of 40 queued entries, one call at a time, a query of
    another namespace starts waiting for its connection's write: the worker starts no other
    call of the window, serves that namespace, and the rest of the window stays queued."""
    emb = _Gated()
    store, worker = await _worker(tmp_path / "w.db", emb, batch_size=4, embed_call_chars=8)
    try:
        await _store(store, "bulk", [f"bulk {i}" for i in range(40)])
        worker.start()
        assert await asyncio.to_thread(emb.started.wait, 10)  # the window's first call runs
        await _store(store, "mine", ["my own note"])
        ticket = worker.wrote()
        waiting = asyncio.ensure_future(worker.caught_up("mine", ticket, 20.0))
        await asyncio.sleep(0.05)  # the query waits
        emb.permits.release()  # the call running returns
        assert await waiting  # a worker finishing its window first would wait for permits
        assert await store.vector_queue() == 39
        emb.permits.release(100)
    finally:
        await worker.stop()
        await store.close()


async def test_the_second_thread_goes_on_while_the_first_ones_call_runs(
    tmp_path: Path,
) -> None:
    """The window's shortest text's call (the first thread's) returns only after three other
    calls have: the second thread takes call after call meanwhile, and every entry gets its
    vector."""
    emb = _SlowFirst(others=3)
    store, worker = await _worker(tmp_path / "w.db", emb, batch_size=4, embed_call_chars=8)
    try:
        await _store(store, "ns", ["a", "bb", "ccc", "dddd", "eeeee"])
        assert await worker.drain() == 5
        assert await store.vector_queue() == 0
        assert emb.threads.count("a2e-embed-2") >= 3
    finally:
        await worker.stop()
        await store.close()
