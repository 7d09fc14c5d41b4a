"""The vector indexes under hostile tenants: a space of one wide vector is charged what it
holds, not a thousand rows; one namespace filling the memory budget with many spaces evicts
its own indexes, never another namespace's (both backends: the client spaces' indexes); one
namespace whose index refuses its vectors never stops the embedding of the others."""

from __future__ import annotations

import io
import json
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.hosts import EmbeddingHandler as _EmbeddingHandler
from support.hosts import make_config, running_host, url_of

from host.app import Host
from host.client import MemoryClient
from host.config import Config
from host.search.client_vectors import MAX_DIMS, ROWS_PER_ENTRY, space_key
from host.search.index import VectorIndexes
from host.search.worker import LocalWorker
from host.store.records import NewEntry, Scope
from host.store.sqlite.store import SQLiteEntryStore


def _config(db: Path | str, **search: Any) -> Any:
    return make_config(db, search={"embedder": "none", **search})


async def _client(host: Host, ns: str) -> MemoryClient:
    c = await MemoryClient.connect(url_of(host))
    await c.init(ns, {"agent": "a1"})
    return c


async def _put(c: MemoryClient, space: str, vectors: list[np.ndarray]) -> None:
    """Store one entry a vector set of `vectors` into `space`."""
    reply = await c.store([{"key": {"k": i}, "content": {"i": i}, "tier": "semantic",
                            "vectors": v.tolist(), "vector_space": space}
                           for i, v in enumerate(vectors)])
    assert reply.errors == []


@pytest.mark.all_backends
async def test_a_space_of_one_wide_vector_is_charged_its_row_not_a_thousand(store_db: str) -> None:
    """A space holding one vector of the widest dimension adds about that vector's bytes to
    the indexes' figure (what `a2e_vector_index_bytes` shows), not a matrix of 1,024 rows."""
    rng = np.random.default_rng(1)
    async with running_host(_config(store_db)) as host:
        c = await _client(host, "ns")
        try:
            await _put(c, "wide", [rng.standard_normal((1, MAX_DIMS))])
            got = await c.retrieve(vector=rng.standard_normal(MAX_DIMS).tolist(),
                                   vector_space="wide")
            assert len(got.entries) == 1
        finally:
            await c.close()
        vectors: Any = host.search.spaces.indexes  # type: ignore[union-attr]
        assert vectors.keys() == [space_key("ns", "wide")]
        assert vectors.stats()["nbytes"] < 4 * MAX_DIMS + 4096


@pytest.mark.all_backends
async def test_a_namespace_filling_the_budget_with_spaces_evicts_its_own(store_db: str) -> None:
    """A victim's space stays loaded (never read again) while another namespace creates and
    queries 40 spaces that together pass the budget: the attacker's own spaces leave, each
    of its retrieves still answers right, the indexes stay within the budget."""
    dims = 256
    rng = np.random.default_rng(2)
    budget = 2_000_000  # the victim ~0.25 MB; each attacker space ~0.07 MB, 40 of them ~2.9 MB
    async with running_host(_config(store_db, vector_memory_bytes=budget)) as host:
        vectors: Any = host.search.spaces.indexes  # type: ignore[union-attr]
        victim = await _client(host, "victim")
        attacker = await _client(host, "attacker")
        try:
            mine = rng.standard_normal((200, 1, dims))
            await _put(victim, "v", list(mine))
            q = mine[7, 0].tolist()
            assert (await victim.retrieve(vector=q, vector_space="v")).entries[0]["key"] == {"k": 7}
            key = space_key("victim", "v")
            loads = vectors.stats()["loads"]
            for i in range(40):
                theirs = rng.standard_normal((1, ROWS_PER_ENTRY, dims))
                await _put(attacker, f"s{i}", list(theirs))
                got = await attacker.retrieve(vector=theirs[0, 3].tolist(), vector_space=f"s{i}")
                assert got.entries[0]["key"] == {"k": 0}
                assert key in vectors.keys(), i
                assert vectors.nbytes <= budget
            assert vectors.stats()["evictions"] > 0
            assert (await victim.retrieve(vector=q, vector_space="v")).entries[0]["key"] == {"k": 7}
            assert vectors.stats()["loads"] == loads + 40  # the attacker's alone
        finally:
            await victim.close()
            await attacker.close()


class _Hash8:
    """Unit vectors of 8 dimensions seeded by the text: an embedder with no meaning, cheap."""

    name = "hash-8"
    dim = 8

    def embed(self, texts: list[str]) -> np.ndarray:
        m = np.asarray([np.random.default_rng(list(t.encode())).standard_normal(8)
                        for t in texts], dtype=np.float32).reshape(-1, 8)
        return m / np.linalg.norm(m, axis=1, keepdims=True)


async def _stored(store: SQLiteEntryStore, ns: str, first: int, n: int) -> None:
    await store.put(Scope(ns, "a1"), [
        NewEntry(tier="semantic", key=b'{"k":%d}' % i, content=b'"note %d"' % i)
        for i in range(first, first + n)], time.time())


async def test_a_namespace_whose_index_refuses_its_vectors_stops_no_other(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    """A namespace whose loaded index holds vectors of another dimension than the embedder's
    fails its own index write only: the worker's steps go on, every other namespace's entries
    are embedded and indexed, batch after batch, the refusing namespace is dropped from memory
    (its vectors are in the store) and logged once."""
    store = SQLiteEntryStore(str(tmp_path / "w.db"))
    await store.open()
    try:
        index = VectorIndexes()  # each key takes the dimension of its first vectors
        index.add("bad", [-1], np.ones((1, 3), np.float32) / np.sqrt(3), ["semantic/"], [None])
        cfg = Config().search.model_copy(update={"batch_size": 8})
        worker = LocalWorker(store, _Hash8(), cfg, index)  # type: ignore[arg-type]
        await store.set_vector_model("hash-8", 8)
        worker.load()
        await _stored(store, "good", 0, 6)
        await _stored(store, "bad", 100, 6)
        with caplog.at_level(logging.WARNING, logger="a2e_host.search"):
            for _ in range(3):  # the batches of 8: both namespaces' entries mixed
                await worker.embed_pending()
            await _stored(store, "good", 6, 6)
            await _stored(store, "bad", 106, 2)
            while (await worker.embed_pending())[0]:
                pass
        good = index.get("good")
        assert good is not None and len(good) == 12
        assert await store.vector_queue() == 0
        assert worker.refused >= 1
        assert sum("refused its vectors" in r.getMessage() for r in caplog.records) == 1
    finally:
        await store.close()


def test_attack_vectors_holds_on_a_tiny_run() -> None:
    """scripts/fuzz/attack_vectors.py runs both attacks on a tiny scale and reports the victim's
    space never evicted, with every figure."""
    import json
    import subprocess
    import sys

    script = Path(__file__).resolve().parent.parent / "scripts" / "fuzz" / "attack_vectors.py"
    out = subprocess.run(
        [sys.executable, str(script), "--victim-rows", "20", "--spaces", "3", "--budget-mib",
         "1", "--wide-budget-mib", "2", "--json"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    results = json.loads(out.stdout)
    assert [r["victim_evicted"] for r in results] == [False, False]
    assert results[1]["evictions"] >= 1 and results[1]["index_mib"] <= 2


async def test_a_key_past_its_namespace_share_is_served_and_let_go_not_another_namespace() -> None:
    """A key bigger than its namespace's share of the budget, opened while another namespace's
    key is loaded and the budget is passed, answers its caller and leaves memory itself; the
    other namespace's key stays. Alone on the indexes, the same key stays loaded."""
    from support.index_rows import SHARED, Store, unit

    store = Store()
    store.put("victim", list(range(100)), unit(100), [SHARED] * 100)
    store.put("big\x00s", list(range(1000, 2000)), unit(1000, seed=1), [SHARED] * 1000)

    def indexes() -> VectorIndexes:  # the victim ~25 KB, the big key ~250 KB
        return VectorIndexes(budget_bytes=200_000, loader=store.loader, namespace_share=0.5)

    shared = indexes()
    assert await shared.open("victim") is not None
    big = await shared.open("big\x00s")
    assert big is not None and len(big) == 1000
    assert big.search(unit(1, seed=1)[0], 1).ids.tolist() == [1000]
    assert shared.keys() == ["victim"] and shared.stats()["let_go"] == 1
    alone = indexes()
    assert await alone.open("big\x00s") is not None
    assert alone.keys() == ["big\x00s"] and alone.stats()["let_go"] == 0


class _ShortContext(_EmbeddingHandler):
    """An OpenAI-compatible embeddings endpoint with a context smaller than the host's
    `max_embed_chars`, as some local model servers have: a request holding an input longer
    than `LIMIT` characters answers 400, the others `_Hash8` vectors."""

    LIMIT = 500

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        raw = self.rfile.read(int(self.headers["Content-Length"]))
        if any(len(t) > self.LIMIT for t in json.loads(raw)["input"]):
            self.send_error(400, "input too long for the context")
            return
        self.rfile = io.BytesIO(raw)
        super().do_POST()


@contextmanager
def _short_context_endpoint() -> Iterator[str]:
    handler = type("H", (_ShortContext,), {"embedder": _Hash8(), "seen": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.all_backends
async def test_an_entry_the_embedder_fails_on_is_set_aside_and_the_rest_embedded(
    store_db: str, caplog: pytest.LogCaptureFixture,
) -> None:
    """With an embeddings endpoint that refuses one stored text (longer than its context),
    the worker embeds every other entry, of that namespace and of others, batch after batch;
    the refused entry alone stays queued, set aside (logged once, counted)."""
    with _short_context_endpoint() as url:
        config = make_config(store_db, search={
            "embedder": "openai", "base_url": url, "model": "m", "dim": 8, "batch_size": 4})
        async with running_host(config) as host:
            await host.search.drain()  # nothing yet
            long = await _client(host, "long")
            other = await _client(host, "other")
            try:
                with caplog.at_level(logging.WARNING, logger="a2e_host.search"):
                    await other.store([{"key": {"k": i}, "content": f"note {i}",
                                        "tier": "semantic"} for i in range(3)])
                    await long.store([{"key": {"k": "long"}, "content": "word " * 200,
                                       "tier": "semantic"}])
                    await long.store([{"key": {"k": i}, "content": f"short {i}",
                                       "tier": "semantic"} for i in range(2)])
                    await other.store([{"key": {"k": i}, "content": f"later {i}",
                                        "tier": "semantic"} for i in range(3, 9)])
                    await host.search.drain()
                    assert await host.search.count_backlog() == 1
                    await other.store([{"key": {"k": "last"}, "content": "the last note",
                                        "tier": "semantic"}])
                    await host.search.drain()
                    assert await host.search.count_backlog() == 1
            finally:
                await long.close()
                await other.close()
            worker: Any = host.search.worker
            assert worker.set_aside == 1 and worker.embedded_total >= 12
            assert sum("failed to embed" in r.getMessage() for r in caplog.records) == 1
