"""The semantic path as a client sees it: read-your-writes for similarity queries, the
embedding backlog (metrics, /readyz), queries answered during a backlog, the fair share of the
query thread, and an embedding batch abandoned at SIGTERM."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import sqlite3
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from support.hosts import make_config, run_cli, running_host, url_of

from host.client import MemoryClient
from host.config import load_config
from host.search.queries import QueryVectors

FACT = "Caroline adopted a puppy from the animal shelter last weekend."
PARAPHRASE = "Who got a new dog recently?"


def _get(port: int, path: str) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
        return r.read().decode()


def backlog_of(port: int) -> int:
    """The embedding backlog that /readyz of the host on `port` reports."""
    m = re.search(r"^embed_backlog (\d+)$", _get(port, "/readyz"), re.M)
    assert m is not None
    return int(m.group(1))


def gauge_of(port: int) -> int:
    """The `a2e_embed_backlog` gauge of the host on `port`."""
    m = re.search(r"^a2e_embed_backlog (\S+)$", _get(port, "/metrics"), re.M)
    assert m is not None
    return int(float(m.group(1)))


async def queue_backlog(db: Path, n: int, namespace: str = "bulk", words: int = 12) -> None:
    """Store `n` entries in `namespace` through a keyword-only host, so they wait for vectors
    when a host with an embedder opens the file."""
    cfg = make_config(db, search={"embedder": "none"})
    async with running_host(cfg) as h, await MemoryClient.connect(url_of(h)) as c:
        await c.init(namespace, {"agent": "bulk"})
        for start in range(0, n, 200):
            await c.store([{"key": {"i": i}, "tier": "episodic",
                            "content": " ".join(f"word{(i * 7 + j) % 997}" for j in range(words))}
                           for i in range(start, min(n, start + 200))])


async def test_a_paraphrase_stored_and_asked_at_once_is_found(db_path: Path) -> None:
    """A fact stored and, on the same connection, at once asked for by a paraphrase sharing no
    keyword is found: the query waits for its connection's vectors (read-your-writes)."""
    async with running_host(make_config(db_path)) as h:
        for attempt in range(5):  # every time, not by luck of timing
            async with await MemoryClient.connect(url_of(h)) as c:
                await c.init(f"ns{attempt}", {"agent": "a1"})
                await c.store([{"key": {"k": 1}, "content": FACT, "tier": "episodic"},
                               {"key": {"k": 2}, "content": "The invoice total is 420 euros.",
                                "tier": "episodic"},
                               {"key": {"k": 3}, "content": "The train leaves from platform 4.",
                                "tier": "episodic"}])
                found = await c.retrieve(query=PARAPHRASE, limit=1)
                assert [e["key"] for e in found.entries] == [{"k": 1}]


async def test_backlog_gauge_counts_down_to_zero(db_path: Path) -> None:
    """Entries queued before start show in `a2e_embed_backlog` and /readyz, and the gauge
    only falls, to 0, as the worker embeds them; `a2e_embedded_total` counts them."""
    await queue_backlog(db_path, 150)
    async with running_host(make_config(db_path)) as h:
        seen = [await asyncio.to_thread(gauge_of, h.port)]
        while seen[-1] > 0:
            seen.append(await asyncio.to_thread(gauge_of, h.port))
        assert seen[0] > 0 and seen[-1] == 0
        assert all(a >= b for a, b in zip(seen, seen[1:]))
        text = await asyncio.to_thread(_get, h.port, "/metrics")
        assert re.search(r"^a2e_embedded_total 150\.0$", text, re.M)
        assert re.search(r"^a2e_embed_batch_duration_seconds_count [1-9]", text, re.M)
        assert "embed_backlog 0" in await asyncio.to_thread(_get, h.port, "/readyz")


async def test_stats_reports_the_backlog(db_path: Path) -> None:
    """`a2e-host stats` shows how many entries wait for a vector."""
    await queue_backlog(db_path, 50)
    out = await asyncio.to_thread(run_cli, "stats", "--db", str(db_path), "--json")
    assert json.loads(out.stdout)["embed_backlog"] == 50
    text = (await asyncio.to_thread(run_cli, "stats", "--db", str(db_path))).stdout.decode()
    assert "embedding backlog): 50" in text


async def test_a_query_during_a_large_backlog_answers_and_reads_its_writes(
    db_path: Path,
) -> None:
    """With thousands of entries of another namespace waiting for vectors, a connection that
    stores a fact and asks for it by a paraphrase gets it, long before the backlog is
    embedded: its namespace is served first (progress is asserted, not time: `vector_wait` is
    generous here, for a loaded machine)."""
    await queue_backlog(db_path, 3000)
    cfg = make_config(db_path, search={"vector_wait": 60.0})
    async with running_host(cfg) as h, await MemoryClient.connect(url_of(h)) as c:
        assert await asyncio.to_thread(backlog_of, h.port) > 2000
        await c.init("mine", {"agent": "a1"})
        await c.store([{"key": {"k": 1}, "content": FACT, "tier": "episodic"},
                       {"key": {"k": 2}, "content": "The lease ends in September.",
                        "tier": "episodic"}])
        found = await c.retrieve(query=PARAPHRASE, limit=1)
        assert [e["key"] for e in found.entries] == [{"k": 1}], found.entries
        assert await asyncio.to_thread(backlog_of, h.port) > 1000  # the backlog is not done


@pytest.mark.parametrize("settings", [
    {"search": {"vector_wait": 0.0}},
    {"search": {"vector_wait": 120.0}, "limits": {"request_timeout": 2.0}},
], ids=["no-wait", "wait-past-the-deadline"])
async def test_a_query_waits_no_longer_than_vector_wait_nor_half_its_deadline(
    db_path: Path, settings: dict[str, dict[str, float]],
) -> None:
    """With `vector_wait = 0` a query never waits for vectors; a `vector_wait` longer than the
    request deadline (120 s against 2 s) is cut to half the deadline. Either way a query whose
    own entries are queued behind thousands more answers with what is embedded, by keywords
    (never the deadline's `internal_error`), the backlog still there."""
    await queue_backlog(db_path, 3000, namespace="mine")
    cfg = make_config(db_path, **settings)
    async with running_host(cfg) as h, await MemoryClient.connect(url_of(h)) as c:
        await c.init("mine", {"agent": "bulk"})
        await c.store([{"key": {"k": "x"}, "content": "zebra " + FACT, "tier": "episodic"}])
        found = await c.retrieve(query="zebra", limit=1)
        assert [e["key"] for e in found.entries] == [{"k": "x"}]
        assert await asyncio.to_thread(backlog_of, h.port) > 1000


async def test_a_short_query_is_not_queued_behind_another_connections_long_ones(
    embedder: Any,
) -> None:
    """Many long queries of one connection and one short query of another, asked together:
    the short one is embedded in the first or second call, not after the long ones."""
    qv = QueryVectors(embedder, max_chars=512, cache=0, batch_chars=2048)
    qv.record = True
    long_ones = [f"question {i} " + "about the long history of things " * 20 for i in range(12)]
    tasks = [asyncio.ensure_future(qv.vector(t, "ns-a", "conn-a")) for t in long_ones]
    tasks.append(asyncio.ensure_future(qv.vector("where is my dog?", "ns-b", "conn-b")))
    try:
        await asyncio.gather(*tasks)
        assert qv.calls >= 3  # the long ones did not all fit in one call
        first_two = qv.order[: 2 * (2048 // 512)]
        assert "where is my dog?" in first_two
    finally:
        await qv.close()


async def test_queries_arriving_together_share_one_call_and_repeats_are_cached(
    embedder: Any,
) -> None:
    """Short queries waiting together are embedded in one call, a repeated text is embedded
    once, and each asker gets the vector of its own text."""
    qv = QueryVectors(embedder, cache=16)
    texts = [f"what did I say about topic {i}?" for i in range(8)]
    try:
        first = await asyncio.gather(*(qv.vector(t, "ns", f"c{i}") for i, t in enumerate(texts)))
        calls = qv.calls
        assert calls <= 2
        again = await qv.vector(texts[3], "ns", "c9")
        assert qv.calls == calls and (again == first[3]).all()
        alone = embedder.embed_queries([texts[5]])[0]
        assert float(first[5] @ alone) > 0.999
    finally:
        await qv.close()


async def test_a_query_goes_to_the_thread_when_asked_not_when_the_caller_yields(
    embedder: Any,
) -> None:
    """`request` hands a query to a free thread before its caller yields (the query path's
    keyword search then runs while it is embedded): a call started before the event loop was
    held for a while reports at least that while as its time. The vector is `vector`'s; a
    text asked again is answered from the cache, at once."""
    qv = QueryVectors(embedder, cache=4)
    seconds: list[float] = []
    qv.on_call = lambda n, s: seconds.append(s)
    try:
        fut = qv.request("where is my dog?", "ns", "c")
        time.sleep(0.3)  # the event loop held, as by a keyword search: no task could start
        v = await fut
        assert len(seconds) == 1 and seconds[0] >= 0.3
        again = qv.request("where is my dog?", "ns", "c")
        assert again.done() and (again.result() == v).all()
        assert (await qv.vector("where is my dog?") == v).all() and qv.calls == 1
    finally:
        await qv.close()


def test_sigterm_during_embedding_exits_and_the_entries_get_vectors_after_restart(
    tmp_path: Path, host_process: Any,
) -> None:
    """SIGTERM while the worker embeds a large backlog exits 0 within the drain timeout,
    without finishing the backlog; after a restart every entry gets its vector."""
    db = tmp_path / "a2e.db"
    asyncio.run(queue_backlog(db, 150, words=30))
    proc = host_process(db)
    start = backlog_of(proc.port)
    deadline = time.monotonic() + 120
    while backlog_of(proc.port) == start and time.monotonic() < deadline:
        pass  # until embedding is under way
    t0 = time.monotonic()
    assert proc.stop(signal.SIGTERM) == 0
    assert time.monotonic() - t0 < load_config().server.drain_timeout
    with sqlite3.connect(db) as conn:
        left = conn.execute("SELECT count(*) FROM embed_queue").fetchone()[0]
    assert left > 0  # the backlog was abandoned, not finished
    proc = host_process(db)
    deadline = time.monotonic() + 300
    while backlog_of(proc.port) > 0 and time.monotonic() < deadline:
        pass
    assert proc.stop(signal.SIGTERM) == 0
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM vectors").fetchone()[0] == 150
        assert conn.execute("SELECT count(*) FROM embed_queue").fetchone()[0] == 0


LIFE = [
    "Caroline adopted a puppy from the animal shelter last weekend.",
    "Melanie ran a charity race for mental health on Saturday.",
    "Caroline is going to a support group meeting on Tuesday.",
    "Melanie painted a sunset over the lake with her kids.",
    "Caroline wants to study counseling and work with young people.",
    "Melanie's daughter turned seven and had a party at the beach.",
    "Caroline moved here from Sweden four years ago.",
    "Melanie plays the clarinet in a community band.",
    "Caroline's grandmother gave her a necklace before she died.",
    "Melanie and her husband went camping in the mountains in July.",
]


async def test_an_off_topic_query_has_calibrated_relevance_below_one_half(db_path: Path) -> None:
    """Asked of a memory about people's lives, questions about databases and physics get
    every candidate below relevance 0.5 (so `min_score: 0.5` returns nothing), while a
    question about a stored fact finds that fact first, above every off-topic candidate."""
    async with running_host(make_config(db_path)) as h, await MemoryClient.connect(url_of(h)) as c:
        await c.init("life", {"agent": "a1"})
        await c.store([{"key": {"i": i}, "content": t, "tier": "episodic"}
                       for i, t in enumerate(LIFE)])
        worst = 0.0
        for q in ("Which SQL isolation level prevents phantom reads?",
                  "What is the boiling point of mercury at sea level?",
                  "How do I configure the garbage collector of the JVM?"):
            every = await c.retrieve(query=q, limit=50)
            assert all(e["relevance"] < 0.5 for e in every.entries), (q, every.entries)
            assert (await c.retrieve(query=q, limit=50, min_score=0.5)).entries == []
            worst = max([worst] + [e["relevance"] for e in every.entries])
        found = await c.retrieve(query="Which instrument does Melanie play?", limit=1)
        assert found.entries[0]["key"] == {"i": 7} and found.entries[0]["relevance"] > worst
