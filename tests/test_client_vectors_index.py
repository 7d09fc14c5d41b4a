"""Client-vector retrieves served from the host's budgeted vector indexes (SQLite): the same
answers as a brute-force numpy computation over what the asking agent may read, through
filters, offsets, `min_score`, another agent's episodic entries, forgets, re-stores, TTL, a
restart (the space loads on its first retrieve), another process's writes and a memory budget
smaller than the spaces; entries stored with vectors are never queued for the host's own
embedder."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
from support.client_vectors import (
    DIMS,
    SPACE,
    Model,
    check_retrieves,
    put_vectors,
    random_vectors,
    vector_config,
    vector_sessions,
)
from support.hosts import running_host

from host.app import Host
from host.client import MemoryClient
from host.search.client_vectors import space_key, unit_rows
from host.store.records import NewEntry, Scope
from host.store.sqlite.store import SQLiteEntryStore
from protocol.clock import ShiftedClock


async def test_retrieve_by_vector_matches_brute_force_through_changes(tmp_path: Path) -> None:
    """Filters, offsets, min_score and tiers answer as numpy does over what the agent may read;
    so they do after forgets, re-stores with other vectors or none, TTL expiry, a restart (the
    space loads on its first retrieve, not at start) and another process's writes."""
    db = tmp_path / "cv.db"
    rng = np.random.default_rng(11)
    model = Model()
    clock = ShiftedClock()
    async with running_host(vector_config(db), clock=clock) as host, vector_sessions(host) as cs:
        t = host.clock()
        await put_vectors(cs["a1"], model, "a1", rng, range(0, 80), "semantic", t)
        await put_vectors(cs["a1"], model, "a1", rng, range(80, 120), "episodic", t)
        await put_vectors(cs["a2"], model, "a2", rng, range(120, 160), "episodic", t)
        await put_vectors(cs["a1"], model, "a1", rng, range(160, 170), "semantic", t, vectors=False)
        await check_retrieves(host, cs, model, rng)
        assert host.search.vectors is not None
        assert space_key("ns", SPACE) in host.search.vectors.keys()
        # forgets, re-stores with new vectors and without vectors
        assert await cs["a1"].forget(keys=[{"k": k} for k in range(10)], tier="semantic") == 10
        for k in range(10):
            del model.entries[k]
        await put_vectors(cs["a1"], model, "a1", rng, range(10, 20), "semantic", host.clock())
        await put_vectors(cs["a1"], model, "a1", rng, range(20, 25), "semantic", host.clock(),
                          vectors=False)
        await put_vectors(cs["a2"], model, "a2", rng, range(120, 125), "episodic", host.clock())
        await check_retrieves(host, cs, model, rng)
        clock.advance(150)  # every third entry expired
        await check_retrieves(host, cs, model, rng)
    # a restart: nothing is read at start; the first retrieve loads the space
    async with running_host(vector_config(db), clock=clock) as host, vector_sessions(host) as cs:
        assert host.search.vectors is not None and host.search.vectors.keys() == []
        await check_retrieves(host, cs, model, rng)
        # another process on the file stores entries with vectors: the next retrieve has them
        other = SQLiteEntryStore(db)
        await other.open()
        try:
            new = []
            for k in range(200, 210):
                vecs = unit_rows(random_vectors(rng))
                new.append(NewEntry(tier="semantic", key=b'{"k":%d}' % k, content=b'{"t":0}',
                                    vectors=vecs.tobytes(), vector_space=SPACE, dims=DIMS))
                model.entries[k] = ("semantic", "a1", vecs, [], 0, None)
            assert await other.put(Scope("ns", "a1"), new, host.clock()) == [None] * 10
        finally:
            await other.close()
        await check_retrieves(host, cs, model, rng)


async def test_spaces_stay_correct_within_a_small_memory_budget(tmp_path: Path) -> None:
    """With a budget of about two spaces, retrieves over eight namespaces' spaces, round and
    round, answer as numpy does; the indexes never hold more than the budget, and evict."""
    db = tmp_path / "budget.db"
    rng = np.random.default_rng(5)
    clock = ShiftedClock()
    budget = 32_000  # one space holds 12-15 KB (55-67 rows of 16 dimensions, their metadata)
    models: dict[str, Model] = {}
    async with running_host(vector_config(db, vector_memory_bytes=budget), clock=clock) as host:
        for i in range(8):
            ns = f"ns{i}"
            models[ns] = Model()
            async with vector_sessions(host, ("a1",), ns) as cs:
                await put_vectors(cs["a1"], models[ns], "a1", rng, range(30), "semantic",
                                  host.clock())
        vectors = host.search.vectors
        assert vectors is not None
        for _ in range(2):
            for ns, model in models.items():
                async with vector_sessions(host, ("a1",), ns) as cs:
                    await check_retrieves(host, cs, model, rng, queries=1)
                assert vectors.nbytes <= budget
                assert len(vectors.keys()) <= 2
        assert vectors.stats()["evictions"] >= 8


async def test_entries_with_client_vectors_are_not_queued_for_embedding(tmp_path: Path) -> None:
    """An entry stored with vectors leaves the embedding queue (the host's embedder never
    computes a vector for it), and a host vector it had for an earlier text goes; one stored
    without vectors stays queued, and a reindex queues only the latter."""
    db = tmp_path / "queue.db"
    store = SQLiteEntryStore(db)
    await store.open()
    try:
        scope = Scope("ns", "a1")
        vecs = unit_rows([[1.0, 0.0, 0.0]]).tobytes()
        plain = NewEntry(tier="semantic", key=b'{"k":1}', content=b'"plain text"')
        given = NewEntry(tier="semantic", key=b'{"k":2}', content=b'"with vectors"',
                         vectors=vecs, vector_space=SPACE, dims=3)
        assert await store.put(scope, [plain, given], 1.0) == [None, None]
        queued = [p.text for p, _ in await store.pending_vectors(10)]
        assert len(queued) == 1 and queued[0].startswith("plain text")
        # the plain entry gets a host vector, then is stored again with client vectors
        (p, _), = await store.pending_vectors(10)
        assert await store.write_vectors([(p.id, p.text, np.ones(4, np.float32).tobytes())])
        again = NewEntry(tier="semantic", key=b'{"k":1}', content=b'"new text"',
                         vectors=vecs, vector_space=SPACE, dims=3)
        assert await store.put(scope, [again], 2.0) == [None]
        assert await store.pending_vectors(10) == []
        assert await store.vectors_gone() == [p.id]
        await store.put(scope, [NewEntry(tier="semantic", key=b'{"k":3}', content=b'"three"')],
                        3.0)
        assert await store.requeue_vectors() == 1
    finally:
        await store.close()
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM vectors").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM embed_queue q JOIN client_vectors v"
                            " ON v.entry_id = q.entry_id").fetchone()[0] == 0


async def test_a_large_space_is_approximate_saved_and_read_back_after_a_restart(
    tmp_path: Path,
) -> None:
    """A space past `ann_min_rows` loads as an approximate index: its top 10 are nearly those
    of numpy (filtered ones too), later stores and forgets reach it, it is saved beside the
    database at shutdown and read back, not rebuilt, by the next host's first retrieve."""
    db = tmp_path / "ann.db"
    rng = np.random.default_rng(3)
    model = Model()
    clock = ShiftedClock()
    config = vector_config(db, ann_min_rows=300)

    async def recall(host: Host, c: MemoryClient, **kw: Any) -> tuple[float, list[Any]]:
        hit = total = 0
        pages = []
        for _ in range(5):
            q = rng.standard_normal(DIMS).tolist()
            args = {"vector": q, "vector_space": SPACE, "limit": 10}
            if "tags" in kw:
                args["tags"] = list(kw["tags"])
            got = [e["key"]["k"] for e in (await c.retrieve(**args)).entries]
            want = [k for k, _ in model.expected("a1", q, host.clock(), **kw)]
            hit += len(set(got) & set(want))
            total += len(want)
            pages.append(got)
        return hit / total, pages

    async with running_host(config, clock=clock) as host, vector_sessions(host, ("a1",)) as cs:
        for first in range(0, 600, 200):
            await put_vectors(cs["a1"], model, "a1", rng, range(first, first + 200), "semantic",
                              host.clock())
        r, _ = await recall(host, cs["a1"])
        vectors: Any = host.search.vectors
        await vectors.wait_idle()  # a load promotes in the background
        assert vectors.stats()["ann_keys"] == 1
        assert r >= 0.9
        r, _ = await recall(host, cs["a1"], tags=("even",))
        assert r >= 0.9
        assert await cs["a1"].forget(keys=[{"k": k} for k in range(0, 600, 7)],
                                     tier="semantic") == 86
        for k in range(0, 600, 7):
            del model.entries[k]
        await put_vectors(cs["a1"], model, "a1", rng, range(600, 650), "semantic", host.clock())
        r, _ = await recall(host, cs["a1"])
        assert r >= 0.9
        state = rng.bit_generator.state
        _, before = await recall(host, cs["a1"])
    assert any((tmp_path / "ann.db.vectors").iterdir())
    async with running_host(config, clock=clock) as host, vector_sessions(host, ("a1",)) as cs:
        rng.bit_generator.state = state
        _, after = await recall(host, cs["a1"])
        vectors = host.search.vectors
        assert vectors.stats()["saved_hits"] == 1 and vectors.stats()["ann_keys"] == 1
        assert after == before


async def test_what_is_kept_of_spaces_out_of_memory_is_bounded(tmp_path: Path) -> None:
    """Retrieves over 100 namespaces' spaces with a budget of about two: what the host keeps
    of the spaces no longer in memory stays bounded, and each retrieve is still right."""
    db = tmp_path / "many.db"
    rng = np.random.default_rng(9)
    # one space holds 1.1-1.9 KB (5-8 rows of 16 dimensions, their metadata)
    async with running_host(vector_config(db, vector_memory_bytes=3_500)) as host:
        spaces: Any = host.search.spaces
        vectors: Any = host.search.vectors
        for i in range(100):
            model = Model()
            async with vector_sessions(host, ("a1",), f"ns{i}") as cs:
                await put_vectors(cs["a1"], model, "a1", rng, range(3), "semantic", host.clock())
                q = rng.standard_normal(DIMS).tolist()
                got = await cs["a1"].retrieve(vector=q, vector_space=SPACE)
                assert [e["key"]["k"] for e in got.entries] == [
                    k for k, _ in model.expected("a1", q, host.clock())]
            assert len(spaces._state) <= 2 * len(vectors.keys()) + 65


async def test_catch_up_pages_through_the_change_log_and_reloads_past_its_floor(
    tmp_path: Path,
) -> None:
    """Stores since a space's last retrieve come back a page of the change log at a time
    (whole changes; a change larger than a page whole), and a log pruned past the space's
    number reloads it: each retrieve answers as numpy does."""
    db = tmp_path / "pages.db"
    rng = np.random.default_rng(21)
    model = Model()
    async with running_host(vector_config(db)) as host, vector_sessions(host, ("a1",)) as cs:
        spaces: Any = host.search.spaces
        spaces.catch_up_rows = 10
        await put_vectors(cs["a1"], model, "a1", rng, range(20), "semantic", host.clock())
        await check_retrieves(host, cs, model, rng, queries=1)  # loaded
        for first in range(20, 55, 7):  # five changes of 7: a page's limit falls inside one
            await put_vectors(cs["a1"], model, "a1", rng, range(first, first + 7), "semantic",
                              host.clock())
        await put_vectors(cs["a1"], model, "a1", rng, range(55, 80), "semantic", host.clock())
        await check_retrieves(host, cs, model, rng, queries=2)
        vectors: Any = host.search.vectors
        assert vectors.stats()["loads"] == 1  # caught up, not reloaded
        await put_vectors(cs["a1"], model, "a1", rng, range(0, 30), "semantic", host.clock())
        await host.store.prune_changes(host.clock() + 1, 0)  # type: ignore[attr-defined]
        await check_retrieves(host, cs, model, rng, queries=2)
        assert vectors.stats()["loads"] == 2


def test_bench_client_vectors_agrees_with_the_scan_on_a_tiny_run() -> None:
    """scripts/bench/bench_client_vectors.py on 600 entries of 3 vectors, filtered: exit 0, every
    figure, and the index's pages are the SQL scan's."""
    script = Path(__file__).resolve().parent.parent / "scripts" / "bench" / "bench_client_vectors.py"
    done = subprocess.run([sys.executable, str(script), "--entries", "600", "--dims", "16",
                           "--queries", "5", "--vectors", "3", "--filtered"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    for figure in ("baseline", "index (", "the load", "load average"):
        assert figure in done.stdout
    assert "same top 10: 5 of 5 queries" in done.stdout


def test_bench_client_vectors_times_a_start_over_host_vectors_on_a_tiny_run() -> None:
    """scripts/bench/bench_client_vectors.py --host-vectors on 1,500 vectors in 3 namespaces: exit 0,
    the former start read every vector, the start now none, the first query one namespace."""
    script = Path(__file__).resolve().parent.parent / "scripts" / "bench" / "bench_client_vectors.py"
    done = subprocess.run([sys.executable, str(script), "--host-vectors", "1500", "--dims",
                           "16", "--namespaces", "3"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "(1500 vectors," in done.stdout and "(500 vectors;" in done.stdout
    assert "start now (no vector read)" in done.stdout and "load average" in done.stdout


async def test_an_approximate_space_grown_by_a_bulk_load_is_read_again(tmp_path: Path) -> None:
    """An approximate space that grew by more than a quarter since its last retrieve is read
    again (served exactly at once, its graph built in the background) instead of having every
    new row added to its graph on the query's path; a small growth is caught up in place.
    Either way each retrieve answers as numpy does."""
    db = tmp_path / "bulk.db"
    rng = np.random.default_rng(8)
    model = Model()
    async with running_host(vector_config(db, ann_min_rows=300), clock=ShiftedClock()) as host, \
            vector_sessions(host, ("a1",)) as cs:
        spaces: Any = host.search.spaces
        spaces.catch_up_rows = 50
        vectors: Any = host.search.vectors
        await put_vectors(cs["a1"], model, "a1", rng, range(600), "semantic", host.clock())
        await check_retrieves(host, cs, model, rng, queries=1)  # loaded
        await vectors.wait_idle()
        assert vectors.stats()["ann_keys"] == 1 and vectors.stats()["loads"] == 1
        await put_vectors(cs["a1"], model, "a1", rng, range(600, 640), "semantic", host.clock())
        await check_retrieves(host, cs, model, rng, queries=2)
        assert vectors.stats()["loads"] == 1  # 40 rows: caught up in place
        await put_vectors(cs["a1"], model, "a1", rng, range(640, 1000), "semantic", host.clock())
        await check_retrieves(host, cs, model, rng, queries=2)
        assert vectors.stats()["loads"] == 2  # 360 rows, past a quarter of 640: read again
        await vectors.wait_idle()
        await check_retrieves(host, cs, model, rng, queries=2)


async def test_a_catch_up_into_a_graph_lets_other_connections_run_between_its_steps(
    tmp_path: Path,
) -> None:
    """The rows a catch-up adds to an approximate space's graph go in steps of
    `add_step_rows`, the loop free between two: a task running meanwhile sees the space at
    sizes between before and after (adding a page at once held every connection, whatever its
    namespace, until the page was in). The retrieve still answers as numpy does."""
    db = tmp_path / "steps.db"
    rng = np.random.default_rng(11)
    model = Model()
    async with running_host(vector_config(db, ann_min_rows=300), clock=ShiftedClock()) as host, \
            vector_sessions(host, ("a1",)) as cs:
        spaces: Any = host.search.spaces
        vectors: Any = host.search.vectors
        spaces.add_step_rows = 16
        await put_vectors(cs["a1"], model, "a1", rng, range(600), "semantic", host.clock())
        await check_retrieves(host, cs, model, rng, queries=1)  # loaded
        await vectors.wait_idle()
        key = space_key("ns", SPACE)
        assert vectors.stats()["ann_keys"] == 1
        before = len(vectors.get(key))
        await put_vectors(cs["a1"], model, "a1", rng, range(600, 700), "semantic", host.clock())
        seen: set[int] = set()
        done = False

        async def watch() -> None:
            while not done:
                index = vectors.get(key)
                if index is not None:
                    seen.add(len(index))
                await asyncio.sleep(0)

        watcher = asyncio.ensure_future(watch())
        try:
            await check_retrieves(host, cs, model, rng, queries=1)
        finally:
            done = True
            await watcher
        after = len(vectors.get(key))
        assert vectors.stats()["loads"] == 1  # caught up in place, not read again
        assert after > before + 16
        assert any(before < n < after for n in seen), (before, sorted(seen), after)


async def test_a_space_emptied_after_its_graph_was_saved_reads_the_file_no_more(
    tmp_path: Path,
) -> None:
    """A space whose approximate index was saved, every entry forgotten while it is out of
    memory, answers nothing and removes its saved files: the retrieves after it read none."""
    db = tmp_path / "emptied.db"
    rng = np.random.default_rng(4)
    config = vector_config(db, ann_min_rows=300)
    saved = tmp_path / "emptied.db.vectors"
    async with running_host(config) as host, vector_sessions(host, ("a1",)) as cs:
        for first in range(0, 400, 200):
            await put_vectors(cs["a1"], Model(), "a1", rng, range(first, first + 200), "semantic",
                              host.clock())
        await cs["a1"].retrieve(vector=rng.standard_normal(DIMS).tolist(), vector_space=SPACE)
        vectors: Any = host.search.vectors
        await vectors.wait_idle()  # the graph is built and saved
        assert vectors.stats()["ann_keys"] == 1
    assert list(saved.glob("*.meta.npz"))
    async with running_host(config) as host, vector_sessions(host, ("a1",)) as cs:
        for first in range(0, 400, 100):
            assert await cs["a1"].forget(keys=[{"k": k} for k in range(first, first + 100)],
                                         tier="semantic") == 100
        for _ in range(3):
            got = await cs["a1"].retrieve(vector=rng.standard_normal(DIMS).tolist(),
                                          vector_space=SPACE)
            assert got.entries == []
        assert host.search.vectors is not None
        assert host.search.vectors.stats()["saved_hits"] == 1
        assert list(saved.iterdir()) == []
